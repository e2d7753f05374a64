"""Gates on your own tools with no Algenta engine: a real CRM over MCP, SQLite checkpoints.

``base_url=None`` (the configuration's ``base_url = false``, ``ALGENTA_BASE_URL=none``) builds
the graph over the extra servers alone: their tools are retrieved and searched, every
graph-side gate applies (a held delete runs once on approval, a budget denies the third refund),
the records chain and verify, and nothing connects to an engine (a listener where
``ALGENTA_BASE_URL`` points counts every connection). The engine's gates do not exist there: no
handler node, no ``execute_decision``, a system prompt that never names them. A graph with
neither an engine nor an extra server is refused, naming what to set, before anything is
opened. ``algenta-graph config check`` and ``algenta-graph run --config`` read such a file.
With both an engine and a CRM, the engine's tools stay out of the top-k of CRM prompts they
barely match. The chat model is the scripted stand-in.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crm_support import TOKEN, CrmServer, running_crm
from graph_support import config, tool_messages
from langgraph.types import Command

from algenta_graph.audit.verification import verify_chain
from algenta_graph.config import ConfigError, load_config, parse_config
from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine
from algenta_graph.errors import NoEngine, NoToolServers
from algenta_graph.governance.gates import ENGINE_GATE_NAMES
from algenta_graph.governance.run_settings import RunSettings
from algenta_graph.graph import governed_agent
from algenta_graph.retrieval import ToolIndex
from algenta_graph.retrieval.catalog import GovernedCatalog
from algenta_graph.testing import ScriptedChatModel

pytestmark = pytest.mark.timeout(180)

APPROVE = {"decisions": [{"type": "approve", "message": "customer asked"}], "operator": "ana"}
GATES = {
    "require_approval": ["crm.delete_customer"],
    "budgets": [{"tool": "crm.refund", "thread_limit": 2}],
}


class Listener:
    """A TCP port that counts every connection made to it (and answers none)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/mcp"
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def crm() -> Iterator[CrmServer]:
    with running_crm() as server:
        yield server


@pytest.fixture
def engine_port(monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    """Where an engine would be looked for (``ALGENTA_BASE_URL``): any connection is counted."""
    listener = Listener()
    monkeypatch.setenv("ALGENTA_BASE_URL", listener.url)
    try:
        yield listener
    finally:
        listener.close()


def calls(*batch: tuple[str, dict[str, Any]], n: int = 0) -> dict[str, Any]:
    """One model turn calling these tools."""
    return {
        "content": "",
        "tool_calls": [
            {"name": name, "args": args, "id": f"c{n}_{i}"} for i, (name, args) in enumerate(batch)
        ],
    }


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "algenta_graph.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


async def test_own_tools_are_gated_escalated_budgeted_and_chained_with_no_engine(
    crm: CrmServer, engine_port: Listener, tmp_path: Path
) -> None:
    db = tmp_path / "cp.sqlite"
    model = ScriptedChatModel(
        replies=[
            calls(("delete_customer", {"account_id": "b2"}), n=1),
            "deleted once approved",
            *[
                reply
                for n in (2, 3, 4)
                for reply in (calls(("refund", {"account_id": "b2", "amount": 5.0}), n=n), "ok")
            ],
        ]
    )
    async with governed_agent(
        model,
        base_url=None,
        extra_servers={"crm": crm.connection()},
        tool_gates=GATES,
        checkpointer=str(db),
    ) as graph:
        nodes = set(graph.get_graph().nodes)
        first = await graph.ainvoke({"messages": [("user", "delete customer b2")]}, config("t"))
        held = await graph.aget_state(config("t"))
        assert crm.count("delete_customer") == 0  # held: nothing ran
        await graph.ainvoke(Command(resume=APPROVE), config("t"))
        for _ in range(3):
            out = await graph.ainvoke({"messages": [("user", "refund b2 5")]}, config("t"))
    # the engine's gates do not exist: no handler, no edge; the graph's own are all there
    assert {f"denial_handler_{g}" for g in ENGINE_GATE_NAMES}.isdisjoint(nodes)
    assert {"denial_handler_approval", "denial_handler_budget"} <= nodes
    # retrieval served the CRM's tools, and nothing of an engine
    assert "delete_customer" in first["selected_tools"]
    assert "execute_decision" not in json.dumps(first["selected_tools"])
    system = [m for m in first["messages"] if m.type == "system"]
    assert all("execute_decision" not in str(m.content) for m in system)
    # the held delete escalated, and the approval ran it exactly once
    assert held.next == ("denial_handler_approval",)
    [interrupt] = held.interrupts
    assert interrupt.value["escalations"][0]["tool"] == "crm.delete_customer"
    assert crm.count("delete_customer") == 1
    [decision] = out["operator_decisions"]
    assert (decision["operator"], decision["verdict"], decision["result"]) == (
        "ana",
        "approved",
        "executed",
    )
    # the budget let two refunds run and denied the third by name
    assert crm.count("refund") == 2
    denied = [d for d in out["denials"] if d["gate"] == "budget"]
    assert [(d["tool"], d["server"]) for d in denied] == [("refund", "crm")]
    assert "budget" in str(tool_messages(out)[-1].content).lower()
    # the records chain, and verify from the command line
    assert verify_chain(out).ok
    verified = cli("receipts", "--db", str(db), "--verify")
    assert verified.returncode == 0, verified.stderr
    assert "t: ok: 6 record(s)" in verified.stdout and "all chains intact" in verified.stdout
    assert engine_port.connections == 0  # nothing looked for an engine


async def test_neither_an_engine_nor_an_extra_server_is_refused_before_anything_opens(
    engine_port: Listener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "cp.sqlite"
    with pytest.raises(NoToolServers) as refused:
        async with governed_agent(base_url=None, checkpointer=str(db)):
            pass
    message = str(refused.value)
    assert "base_url=None" in message and "extra_servers" in message
    assert "base_url" in message.split("or name an engine")[-1]
    assert not db.exists()  # nothing was opened
    # the same from the configuration file (an ALGENTA_BASE_URL would win over it)
    monkeypatch.delenv("ALGENTA_BASE_URL")
    agent_toml = tmp_path / "agent.toml"
    agent_toml.write_text("base_url = false\n")
    with pytest.raises(NoToolServers, match=r"base_url = false \(.*agent\.toml\)"):
        async with governed_agent(config=agent_toml, checkpointer=str(db)):
            pass
    assert not db.exists() and engine_port.connections == 0


async def test_a_connection_without_an_engine_has_no_engine_to_ask(crm: CrmServer) -> None:
    with pytest.raises(ValueError, match="engine=False says there is none"):
        EngineConnection("http://127.0.0.1:1/mcp", engine=False, extra_servers={"x": {}})
    async with EngineConnection(engine=False, extra_servers={"crm": crm.connection()}) as conn:
        assert not conn.has_engine and conn.url is None
        assert "no engine" in repr(conn)
        names = {t.name for t in conn.tools}
        # no engine name is reserved: the CRM's tools keep their own names
        assert {"lookup_customer", "delete_customer", "refund"} <= names
        assert not any(conn.is_algenta_tool(n) for n in names)
        with pytest.raises(NoEngine):
            await conn.get_decision("dec_1")
        with pytest.raises(NoEngine):
            await conn.execute_as_operator("dec_1", "https://hooks.example/x", force=True)


def test_the_configuration_says_no_engine_in_the_file_and_the_environment() -> None:
    assert parse_config({"base_url": False}).base_url is False
    from_env = load_config(environ={"ALGENTA_BASE_URL": "none"})
    assert from_env.base_url is False
    assert load_config(environ={"ALGENTA_BASE_URL": "FALSE"}).base_url is False
    with pytest.raises(ConfigError, match="base_url: must be the engine's MCP endpoint"):
        parse_config({"base_url": True})
    with pytest.raises(ConfigError, match="base_url: must be an http"):
        parse_config({"base_url": "localhost:8000"})


def _agent_toml(tmp_path: Path, crm: CrmServer, gates: str = "") -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(
        "base_url = false   # no Algenta engine: gates on your own tools\n"
        "[extra_servers.crm]\n"
        'transport = "streamable_http"\n'
        f'url = "{crm.url}"\n'
        'headers = { Authorization = { env = "CRM_TOKEN", prefix = "Bearer " } }\n' + gates
    )
    return path


def _env(**more: str) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("ALGENTA_")}
    return {**env, "CRM_TOKEN": TOKEN, **more}


def test_config_check_says_there_is_no_engine_and_resolves_rules_on_the_servers(
    crm: CrmServer, engine_port: Listener, tmp_path: Path
) -> None:
    gates = '[tool_gates]\nrequire_approval = ["crm.delete_customer"]\n'
    path = _agent_toml(tmp_path, crm, gates)
    checked = cli("config", "check", str(path), env=_env())
    assert checked.returncode == 0, checked.stderr
    assert "no engine: the engine's gates (idempotency, confidence, risk_floor) are off" in (
        checked.stderr
    )
    shown = json.loads(checked.stdout)
    assert shown["base_url"] is False
    [rule] = shown["tool_gates_resolved"]
    assert "crm.delete_customer" in json.dumps(rule)
    # a rule naming an engine tool does not resolve: there is none
    bad = _agent_toml(tmp_path, crm, '[tool_gates]\nrequire_approval = ["algenta.simulate"]\n')
    refused = cli("config", "check", str(bad), env=_env())
    assert refused.returncode == 2 and "algenta.simulate" in refused.stderr
    # neither an engine nor an extra server: exit 2, naming what to set
    (tmp_path / "empty.toml").write_text("base_url = false\n")
    empty = cli("config", "check", str(tmp_path / "empty.toml"), env=_env())
    assert empty.returncode == 2 and "no tools to serve" in empty.stderr, empty.stderr
    assert "[extra_servers.NAME]" in empty.stderr and empty.stdout == ""
    assert engine_port.connections == 0


def test_run_with_the_configuration_holds_and_runs_the_delete_once(
    crm: CrmServer, engine_port: Listener, tmp_path: Path
) -> None:
    gates = '[tool_gates]\nrequire_approval = ["crm.delete_customer"]\n'
    path = _agent_toml(tmp_path, crm, gates)
    db = str(tmp_path / "run.sqlite")
    env = _env()  # (an ALGENTA_BASE_URL would win over the file's base_url = false)
    first = cli("run", "--config", str(path), "--db", db, "delete_customer account_id=b2", env=env)
    assert first.returncode == 3, first.stdout + first.stderr  # waits for an operator
    assert "no engine: the engine's gates are off" in first.stdout
    assert crm.count("delete_customer") == 0
    answer = json.dumps({"decisions": [{"type": "approve"}], "operator": "ana"})
    second = cli("run", "--config", str(path), "--db", db, "--resume", answer, env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert crm.count("delete_customer") == 1
    # --base-url none says the same on the command line, over a file naming an engine
    other = tmp_path / "engine.toml"
    other.write_text(
        path.read_text().replace("base_url = false", f'base_url = "{engine_port.url}"')
    )
    third = cli(
        "run",
        "--config",
        str(other),
        "--base-url",
        "none",
        "--db",
        db,
        "lookup_customer account_id=b2",
        env=env,
    )
    assert third.returncode == 0, third.stdout + third.stderr
    assert crm.count("lookup_customer") == 1 and engine_port.connections == 0


CRM_PROMPTS = [
    "delete customer b2, they asked to close the account",
    "refund 20 dollars to customer a1's card",
    "remove the customer record c7 from the CRM",
    "refund customer z3 the amount of 5",
    "find the CRM record for account 42",
]
"""CRM prompts the engine's tools barely match (``customer``, ``record``)."""


@pytest.mark.parametrize("profile", ["observe", "execute"])
async def test_with_an_engine_beside_the_crm_its_tools_stay_out_of_crm_prompts(
    engine: ReferenceEngine, crm: CrmServer, profile: str
) -> None:
    extra = {"crm": crm.connection()}
    async with EngineConnection(engine.url, profile=profile, extra_servers=extra) as conn:
        index = ToolIndex()
        index.add(conn.tools)
        catalog = GovernedCatalog(conn, ScriptedChatModel(replies=[]), index)
        run = RunSettings(profile=None, top_k=5, policies={}, thread_id=None)
        engine_tools = {t.name for t in conn.tools if conn.is_algenta_tool(t.name)}
        leaked = {p: set(await catalog.retrieve(p, run)) & engine_tools for p in CRM_PROMPTS}
        assert leaked == {p: set() for p in CRM_PROMPTS}
        # the engine's own prompts still retrieve its tools, and search_tools finds them all
        assert "simulate" in await catalog.retrieve("simulate the price change", run)
        _, found, ok = await catalog.search({"query": "customer", "k": 20}, run)
        assert ok and "query_data" in found


def test_the_docs_two_files_run_as_printed(tmp_path: Path) -> None:
    """docs/OWN_TOOLS.md: ``crm.py`` and ``agent.py`` as printed, and what the page says."""
    import re

    from tests.docs.doc_blocks import named

    for block, name in (("own-tools-crm", "crm.py"), ("own-tools-agent", "agent.py")):
        text = named(block).code
        assert text.startswith(f"# {name}\n")
        (tmp_path / name).write_text(text)
    env = _env()  # (no ALGENTA_* of the test run's: the snippet says what it needs)
    done = subprocess.run(
        [sys.executable, "agent.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed = re.search(r"\$ python agent.py\n(.*?)\$ cat", named("own-tools-output").code, re.S)
    assert printed and done.stdout == printed.group(1)
    assert (tmp_path / "deleted.log").read_text() == "b2\n"
    assert "Traceback" not in done.stderr
    verified = cli("receipts", "--db", str(tmp_path / "runs.sqlite"), "--verify", env=env)
    assert "t1: ok: 6 record(s)" in verified.stdout and "all chains intact" in verified.stdout
