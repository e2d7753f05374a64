"""The served graph configured by a file (``ALGENTA_CONFIG``), through a real ``langgraph dev``.

A real reference engine, a real FastMCP server as the extra server (its bearer token read from
the server's environment, never from the file), the repository's ``langgraph.json``:

- a base tool (``always_include``) is bound on every model step, and a tool of the extra
  server is retrieved and called;
- the usage signal keeps what it learned in the server's store, across a server restart (the
  ranking after the restart shows it);
- the usage namespace of the store is refused over ``/store`` to an agent and to an operator
  token (and, without auth, to everyone);
- ``[tool_gates]`` holds an extra server's tool until an operator approves it (the agent that
  started the thread may not), and the approved call runs once;
- each bad configuration refuses to start the server with one line naming the key and the
  file; an unreachable extra server is a warning naming its URL, and the graph still serves
  the engine's tools.

The dev server runs as a subprocess in its own process group; unlike the other served tests'
harness it can keep its state directory (``.langgraph_api/``, where ``langgraph dev`` keeps its
store) from one start to the next, for the restart.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.server.fastmcp import FastMCP

from algenta_graph._net import free_port
from algenta_graph._serve import BackgroundServer
from algenta_graph.engine import ReferenceEngine
from algenta_graph.serving.auth import token_digest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CONFIG = REPO / "langgraph.json"
MODELS = "served_config_models"  # tests/served/served_config_models.py, on the server's path
CRM_TOKEN = "crm-secret-token"

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_API_LINE = re.compile(r"API:\s*(https?://[^\s]+)")


# ---------------------------------------------------------------------------------------------
# the harness


@dataclass(frozen=True)
class Dev:
    url: str
    log_path: Path

    def log(self) -> str:
        return _ANSI.sub("", self.log_path.read_text(errors="replace"))


def _start(workdir: Path, env: Mapping[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
    executable = shutil.which("langgraph")
    assert executable, "the `langgraph` command is missing: pip install 'langgraph-cli[inmem]'"
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / f"langgraph-dev-{time.monotonic_ns()}.log"
    command = [
        executable,
        "dev",
        "--no-browser",
        "--no-reload",
        "--port",
        str(free_port()),
        "--config",
        str(CONFIG),
    ]
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            command,
            cwd=workdir,
            env={**os.environ, "PYTHONPATH": path, **env},
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return proc, log_path


def _text(log_path: Path) -> str:
    return _ANSI.sub("", log_path.read_text(errors="replace"))


@contextmanager
def langgraph_dev(
    workdir: Path, env: Mapping[str, str], *, keep_state: bool = False
) -> Iterator[Dev]:
    """``langgraph dev`` on the repository's ``langgraph.json`` until the block exits.

    Stopped with SIGTERM (the dev server writes its store to ``.langgraph_api/`` as it shuts
    down), by process group; ``keep_state`` keeps ``.langgraph_api/`` for the next start.
    """
    proc, log_path = _start(workdir, env)
    try:
        deadline = time.monotonic() + 180
        url: str | None = None
        while True:
            if proc.poll() is not None:
                raise AssertionError(
                    f"langgraph dev exited with {proc.returncode}:\n{_text(log_path)[-4000:]}"
                )
            match = url or (_API_LINE.search(_text(log_path)) or [None, None])[1]
            url = match.rstrip("/") if match else None
            if url is not None:
                try:
                    if httpx.get(f"{url}/ok", timeout=2.0).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
            assert time.monotonic() < deadline, f"not ready:\n{_text(log_path)[-4000:]}"
            time.sleep(0.25)
        yield Dev(url, log_path)
    finally:
        _stop(proc)
        if not keep_state:
            shutil.rmtree(workdir / ".langgraph_api", ignore_errors=True)


def _refused_at_start(workdir: Path, env: Mapping[str, str]) -> str:
    """Start ``langgraph dev``, which must exit before it serves; its log."""
    proc, log_path = _start(workdir, env)
    try:
        proc.wait(timeout=180)
    finally:
        _stop(proc)
    assert proc.returncode != 0, _text(log_path)[-3000:]
    return _text(log_path)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, grace in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue


# ---------------------------------------------------------------------------------------------
# the extra server: a real FastMCP server behind a bearer token


class CrmServer:
    """Two CRM tools with the same description (a BM25 tie: by name, find before lookup)."""

    def __init__(self, token: str) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.authorizations: list[str | None] = []
        mcp = FastMCP("crm", stateless_http=True, json_response=True)

        @mcp.tool()
        def crm_find_customer(email: str) -> dict[str, Any]:
            """Find a customer record in the CRM."""
            self.calls.append(("crm_find_customer", {"email": email}))
            return {"customer": email, "tier": "gold"}

        @mcp.tool()
        def crm_lookup_customer(account_id: str) -> dict[str, Any]:
            """Find a customer record in the CRM."""
            self.calls.append(("crm_lookup_customer", {"account_id": account_id}))
            return {"account": account_id, "tier": "silver"}

        inner = mcp.streamable_http_app()
        expected = f"Bearer {token}".encode()

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                given = dict(scope["headers"]).get(b"authorization")
                self.authorizations.append(given.decode() if given else None)
                if given != expected:
                    await send({"type": "http.response.start", "status": 401, "headers": []})
                    await send({"type": "http.response.body", "body": b"unauthorized"})
                    return
            await inner(scope, receive, send)

        self._server = BackgroundServer(app, name="crm-fastmcp")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.port}/mcp"

    def __enter__(self) -> CrmServer:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()


def _toml(text: str, path: Path) -> Path:
    path.write_text(text)
    return path


def _auth_file(path: Path, tokens: Mapping[str, tuple[str, list[str]]]) -> Path:
    entries = {
        token_digest(t): {"identity": who, "roles": roles} for t, (who, roles) in tokens.items()
    }
    path.write_text(json.dumps({"tokens": entries}))
    return path


AGENT_TOKEN, OPERATOR_TOKEN = "t-agent", "t-operator"
"""alice (``agent``) and ana (``operator``) in :func:`crm_served`'s auth file."""


@contextmanager
def crm_served(tmp_path: Path, extra_toml: str) -> Iterator[tuple[CrmServer, Path, dict[str, str]]]:
    """A reference engine, the CRM server and a configuration file naming both (``extra_toml``
    appended), until the block exits: ``(crm, config file, the server's environment)``."""
    auth = _auth_file(
        tmp_path / "auth.json",
        {AGENT_TOKEN: ("alice", ["agent"]), OPERATOR_TOKEN: ("ana", ["operator"])},
    )
    with (
        ReferenceEngine(db=tmp_path / "engine.sqlite", relaxed=True) as engine,
        CrmServer(CRM_TOKEN) as crm,
    ):
        config = _toml(
            f"""
            # the engine, and what the served graph binds
            base_url = "{engine.url}"
            profile = "execute"
            top_k = 3
            model = {{ path = "{MODELS}:RecordingDemoModel" }}
            """
            + extra_toml
            + f"""
            [extra_servers.crm]
            transport = "streamable_http"
            url = "{crm.url}"
            headers = {{ Authorization = {{ env = "CRM_TOKEN", prefix = "Bearer " }} }}
            """,
            tmp_path / "agent.toml",
        )
        env = {
            "ALGENTA_CONFIG": str(config),
            "ALGENTA_AUTH_FILE": str(auth),
            "CRM_TOKEN": CRM_TOKEN,
        }
        yield crm, config, env


def _values(value: object) -> dict[str, Any]:
    """A run's or a state's values: the SDK types them as a dict or a list of dicts."""
    assert isinstance(value, dict), value
    return value


def _user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def _order(selected: list[str], *names: str) -> list[str]:
    return [n for n in selected if n in names]


# ---------------------------------------------------------------------------------------------
# the tests


async def test_a_configured_server_binds_base_tools_calls_extra_servers_and_learns_across_a_restart(
    tmp_path: Path,
) -> None:
    from langgraph_sdk import get_client
    from langgraph_sdk.errors import PermissionDeniedError

    agent, operator = AGENT_TOKEN, OPERATOR_TOKEN
    extra = 'always_include = ["get_contract"]\n\n[usage]\n'
    with crm_served(tmp_path, extra) as (crm, config, env):
        workdir = tmp_path / "server"
        ask = "customer record in the crm"
        with langgraph_dev(workdir, env, keep_state=True) as server:
            client = get_client(url=server.url, api_key=agent)
            # before anything was learned: the BM25 tie, by name
            before = _values(await client.runs.wait(None, "governed_agent", input=_user(ask)))
            assert _order(before["selected_tools"], "crm_find_customer", "crm_lookup_customer") == [
                "crm_find_customer",
                "crm_lookup_customer",
            ]

            thread = (await client.threads.create())["thread_id"]
            await client.runs.wait(
                thread,
                "governed_agent",
                input=_user("look up the crm customer record account_id=acct-42"),
            )
            state = await client.threads.get_state(thread)
            values = _values(state["values"])
            assert "crm_lookup_customer" in values["selected_tools"]  # retrieved ...
            ai = [m for m in values["messages"] if m["type"] == "ai"]
            assert [c["name"] for c in ai[0]["tool_calls"]] == ["crm_lookup_customer"]  # called
            [answer] = [m for m in values["messages"] if m["type"] == "tool"]
            assert answer["name"] == "crm_lookup_customer" and answer["status"] == "success"
            assert "acct-42" in json.dumps(answer["content"])
            assert crm.calls == [("crm_lookup_customer", {"account_id": "acct-42"})]
            # the extra server saw the secret from the environment, never written in the file
            assert f"Bearer {CRM_TOKEN}" in crm.authorizations
            assert CRM_TOKEN not in config.read_text()
            # ... and the base tool was bound on every model step
            assert len(ai) == 2
            for message in ai:
                assert "get_contract" in message["response_metadata"]["bound_tools"]

            # the usage namespace is the graph's alone: refused to an agent and to an operator
            for token in (agent, operator):
                other = get_client(url=server.url, api_key=token)
                with pytest.raises(PermissionDeniedError) as refused:
                    await other.store.put_item(
                        ["algenta_graph", "usage", "execute"],
                        "crm_find_customer",
                        {"v": 1, "at": 0, "calls": 200, "terms": {"customer": 200.0}},
                    )
                assert refused.value.response.status_code == 403
                assert "only by the graph" in refused.value.response.text
                with pytest.raises(PermissionDeniedError) as read:
                    await other.store.search_items(["algenta_graph"])
                assert read.value.response.status_code == 403

        # a new server process on the same state directory: what was learned is still there
        with langgraph_dev(workdir, env) as server:
            client = get_client(url=server.url, api_key=agent)
            after = _values(await client.runs.wait(None, "governed_agent", input=_user(ask)))
            assert _order(after["selected_tools"], "crm_find_customer", "crm_lookup_customer") == [
                "crm_lookup_customer",
                "crm_find_customer",
            ]


def _bad_configs(tmp_path: Path) -> list[tuple[str, dict[str, str], str]]:
    """(file text, extra environment, the line the server must refuse to start with)."""
    return [
        ("top_k = 3\nretrieval_depth = 9\n", {}, "retrieval_depth: unknown key"),
        ('top_k = "five"\n', {}, "top_k: Input should be a valid integer"),
        (
            'embeddings = "no_such_package.embeddings:make"\n',
            {},
            "embeddings: cannot import 'no_such_package.embeddings'",
        ),
        (
            "[extra_servers.crm]\n"
            'transport = "streamable_http"\n'
            'url = "http://127.0.0.1:9/mcp"\n'
            'headers = { Authorization = { env = "CRM_TOKEN_NOT_SET", prefix = "Bearer " } }\n',
            {"CRM_TOKEN_NOT_SET": ""},
            "extra_servers.crm.headers.Authorization: the environment variable CRM_TOKEN_NOT_SET "
            "is not set",
        ),
    ]


@pytest.mark.parametrize(
    "case", range(4), ids=["unknown-key", "wrong-type", "import-path", "secret"]
)
def test_a_bad_configuration_refuses_to_start_naming_the_key_and_the_file(
    tmp_path: Path, case: int
) -> None:
    text, extra_env, line = _bad_configs(tmp_path)[case]
    config = _toml(text, tmp_path / "agent.toml")
    log = _refused_at_start(tmp_path / "server", {"ALGENTA_CONFIG": str(config), **extra_env})
    assert f"{config}: {line}" in log
    assert "Application startup failed" in log


async def test_an_unreachable_extra_server_is_a_warning_and_the_engine_tools_still_serve(
    tmp_path: Path,
) -> None:
    from langgraph_sdk import get_client
    from langgraph_sdk.errors import PermissionDeniedError

    dead = f"http://127.0.0.1:{free_port()}/mcp"
    with ReferenceEngine(db=tmp_path / "engine.sqlite", relaxed=True) as engine:
        config = _toml(
            f'base_url = "{engine.url}"\nprofile = "execute"\n\n'
            f'[extra_servers.crm]\ntransport = "streamable_http"\nurl = "{dead}"\n',
            tmp_path / "agent.toml",
        )
        with langgraph_dev(tmp_path / "server", {"ALGENTA_CONFIG": str(config)}) as server:
            warning = next(
                line for line in server.log().splitlines() if "extra_servers.crm" in line
            )
            assert f"{config}: extra_servers.crm: unreachable at {dead}" in warning
            client = get_client(url=server.url)
            done = _values(
                await client.runs.wait(
                    None, "governed_agent", input=_user("recommend scenario=restock_inventory")
                )
            )
            assert "__error__" not in done
            assert done["selected_tools"][0] == "recommend"
            assert done["messages"][-1]["type"] == "ai"

            # open (no auth file): the store is anyone's, except the graph's own namespace
            await client.store.put_item(["notes"], "n1", {"text": "hello"})
            assert (await client.store.get_item(["notes"], "n1"))["value"] == {"text": "hello"}
            with pytest.raises(PermissionDeniedError) as refused:
                await client.store.put_item(["algenta_graph", "usage", "execute"], "x", {"v": 1})
            assert refused.value.response.status_code == 403
            with pytest.raises(PermissionDeniedError) as everything:
                await client.store.search_items([])
            assert everything.value.response.status_code == 403


async def test_the_configuration_files_tool_gates_hold_a_call_for_an_operator_on_the_served_graph(
    tmp_path: Path,
) -> None:
    """``[tool_gates]`` in the file holds an extra server's tool until an operator approves."""
    from langgraph_sdk import get_client

    agent, operator = AGENT_TOKEN, OPERATOR_TOKEN
    extra = '[tool_gates]\nrequire_approval = ["crm.crm_lookup_customer"]\n'
    with (
        crm_served(tmp_path, extra) as (crm, _, env),
        langgraph_dev(tmp_path / "server", env) as server,
    ):
        client = get_client(url=server.url, api_key=agent)
        thread = (await client.threads.create())["thread_id"]
        await client.runs.wait(
            thread,
            "governed_agent",
            input=_user("look up the crm customer record account_id=acct-42"),
        )
        state = await client.threads.get_state(thread)
        [asked] = [i for t in state["tasks"] for i in t.get("interrupts") or []]
        assert asked["value"]["gate"] == "approval"
        assert asked["value"]["args"] == {"account_id": "acct-42"}
        assert crm.calls == []  # held: nothing ran

        # the agent that started the thread may not answer its own held call
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await client.runs.wait(
                thread,
                "governed_agent",
                command={"resume": {"decisions": [{"type": "approve"}]}},
            )
        assert refused.value.response.status_code == 403
        assert "only an operator may answer" in refused.value.response.text
        assert crm.calls == []

        ops = get_client(url=server.url, api_key=operator)
        await ops.runs.wait(
            thread,
            "governed_agent",
            command={"resume": {"decisions": [{"type": "approve", "message": "asked for"}]}},
        )
        assert crm.calls == [("crm_lookup_customer", {"account_id": "acct-42"})]
        values = _values((await client.threads.get_state(thread))["values"])
        [decided] = values["operator_decisions"]
        assert (decided["operator"], decided["gate"], decided["verdict"]) == (
            "ana",
            "approval",
            "approved",
        )
        [answer] = [m for m in values["messages"] if m["type"] == "tool"]
        assert answer["name"] == "crm_lookup_customer" and "acct-42" in json.dumps(
            answer["content"]
        )
