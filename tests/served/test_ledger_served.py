"""One ledger every run of a served graph shares, every governed call written ahead, every loser
told: through ``langgraph dev`` with the server checkpointer on SQLite, where the adversarial
pass found them failing open (``docs/ARCHITECTURE.md``, invariants 12, 17 and 18).

A real ``langgraph dev`` whose ``langgraph.json`` names
``algenta_graph.serving.checkpointer.server_checkpointer`` (``ALGENTA_CHECKPOINTER`` a SQLite
file), an auth file (an agent, two operators), the reference engine, a webhook receiver and a
real CRM over MCP (``delete_customer`` held for approval, a budget of one ``refund`` per
thread), driven through ``langgraph_sdk`` and raw HTTP:

1. a waiting escalation, its thread copied: one operator rejects on the original, another
   approves on the copy; and a held ``delete_customer`` approved on the original and on the
   copy: one answer takes effect (nothing delivered; the delete runs once) and the copy's
   records complete it (each run sees a new adapter object of langgraph-api's own class: the
   ledger is chosen from the configuration, never from it);
2. a budgeted ``refund`` cut off while the CRM executes it (``cancel?action=interrupt``), then a
   new message: the call is not sent again; it is recorded ``unknown`` and counted, and the
   next ``refund`` meets the budget;
3. the second operator's run ends in ``EscalationAlreadyDecided`` naming the first, where and
   when; an answer to a thread where nothing waits any more is refused by name before anything
   is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from crm_support import TOKEN, CrmServer, running_crm
from guarantee_support import async_wait_until
from served_support import (
    CONFIG,
    OPERATOR_TOKENS,
    bearer,
    langgraph_dev,
    log_shaky_decision,
    user_turn,
    write_auth_file,
)

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.serving.auth import ENV_AUTH_FILE

pytestmark = pytest.mark.timeout(900)

TOKENS = OPERATOR_TOKENS
APPROVE = {"decisions": [{"type": "approve", "message": "signed off"}]}
REJECT = {"decisions": [{"type": "reject", "message": "not this one"}]}
SERVER_CHECKPOINTER = "algenta_graph.serving.checkpointer.server_checkpointer"
GATES = """
[extra_servers.crm]
transport = "streamable_http"
url = "{url}"
headers = {{ Authorization = {{ env = "CRM_TOKEN", prefix = "Bearer " }} }}

[tool_gates]
require_approval = ["crm.delete_customer"]
[[tool_gates.budgets]]
tool = "crm.refund"
thread_limit = 1
"""


def served_config(directory: Path, **entries: Any) -> Path:
    """The repository's ``langgraph.json`` with ``entries`` added (a ``checkpointer``), written
    to ``directory`` (its dependency the repository itself)."""
    data = json.loads(CONFIG.read_text())
    data["dependencies"] = [str(CONFIG.parent)]
    data.pop("env", None)
    data.update(entries)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "langgraph.json"
    path.write_text(json.dumps(data))
    return path


def served_env(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path, **extra: str
) -> dict[str, str]:
    """The server's environment: the engine, the CRM and its gates, the auth file."""
    agent_toml = tmp_path / "agent.toml"
    agent_toml.write_text(GATES.format(url=crm.url))
    return {
        "ALGENTA_BASE_URL": engine.url,
        "ALGENTA_OPERATOR_KEY_IS_AGENT_KEY": "1",  # the reference engine here has no keys
        "ALGENTA_PROFILE": "execute",
        "ALGENTA_MODEL": "demo",
        "ALGENTA_CONFIG": str(agent_toml),
        "CRM_TOKEN": TOKEN,
        ENV_AUTH_FILE: str(write_auth_file(tmp_path / "auth.json", TOKENS)),
        **extra,
    }


@contextmanager
def server_checkpointer_served(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> Iterator[Any]:
    """``langgraph dev`` with the server checkpointer on a SQLite file."""
    config = served_config(tmp_path / "config", checkpointer={"path": SERVER_CHECKPOINTER})
    env = served_env(engine, crm, tmp_path, ALGENTA_CHECKPOINTER=str(tmp_path / "cp.sqlite"))
    with langgraph_dev(
        config, workdir=tmp_path / "server", env=env, extra_args=("--n-jobs-per-worker", "4")
    ) as server:
        yield server


class Api:
    """The served API as each of the three tokens."""

    def __init__(self, server: Any) -> None:
        from langgraph_sdk import get_client

        url = server.url
        self.log = server.log
        self.url = url
        self.alice: Any = get_client(url=url, headers=bearer("tok-alice"))
        self.http = httpx.Client(base_url=url, timeout=180)

    def copy(self, thread: str) -> str:
        response = self.http.post(f"/threads/{thread}/copy", headers=bearer("tok-alice"))
        assert response.status_code == 200, response.text
        return str(response.json()["thread_id"])

    def answer(self, thread: str, token: str, resume: Mapping[str, Any]) -> Any:
        """An operator's answer as a run that waits: its end (``__error__`` when refused)."""
        response = self.http.post(
            f"/threads/{thread}/runs/wait",
            json={"assistant_id": "governed_agent", "command": {"resume": dict(resume)}},
            headers=bearer(token),
        )
        assert response.status_code == 200, response.text
        assert response.text.strip(), self.log()
        return response.json()

    async def values(self, thread: str) -> dict[str, Any]:
        return dict((await self.alice.threads.get_state(thread))["values"])

    async def checkpoints(self, thread: str) -> int:
        return len(await self.alice.threads.get_history(thread, limit=1000))

    async def say(self, thread: str, text: str) -> None:
        await self.alice.runs.wait(thread, "governed_agent", input=user_turn(text))


def refused_by(end: Any, operator: str) -> str:
    """The message of a run refused as already decided by ``operator``."""
    assert "__error__" in end, end
    error = end["__error__"]
    assert error["error"] == "EscalationAlreadyDecided", error
    assert f"already decided by {operator} (" in error["message"], error
    return str(error["message"])


def the_decision(values: Mapping[str, Any]) -> Any:
    [decided] = values["operator_decisions"]
    return decided


@contextmanager
def served_api(engine: ReferenceEngine, tmp_path: Path) -> Iterator[tuple[Api, CrmServer]]:
    with (
        running_crm() as crm,
        server_checkpointer_served(engine, crm, tmp_path) as server,
    ):
        yield Api(server), crm


async def test_copies_answered_both_ways_take_one_answer_under_the_server_checkpointer(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """Case 1: a copy answered the other way, a held call approved on the original and on the
    copy: one answer takes effect (nothing delivered; the delete runs once)."""
    with served_api(engine, tmp_path) as (api, crm):
        # a waiting escalation, copied: rejected on the original, approved on the copy
        original = (await api.alice.threads.create())["thread_id"]
        decision = await log_shaky_decision(api.alice, original)
        await api.say(
            original, f"execute_decision decision_id={decision} webhook_url={webhook.url}"
        )
        assert (await api.alice.threads.get_state(original))["next"] == [
            "denial_handler_confidence"
        ]
        copy = api.copy(original)
        assert "__error__" not in api.answer(original, "tok-ana", REJECT)
        api.answer(copy, "tok-olga", APPROVE)
        assert engine.executions(decision) == [] and webhook.received == []
        declined = the_decision(await api.values(copy))  # the copy's records: ana's answer
        assert (declined["operator"], declined["action"]) == ("ana", "decline")
        assert declined["answered_in_thread"] == original

        # a held delete, copied: approved on the original and on the copy
        held = (await api.alice.threads.create())["thread_id"]
        await api.say(held, "delete the crm customer account_id=a1")
        waiting = (await api.alice.threads.get_state(held))["next"]
        assert waiting == ["denial_handler_approval"], waiting
        held_copy = api.copy(held)
        assert "__error__" not in api.answer(held, "tok-ana", APPROVE)
        api.answer(held_copy, "tok-olga", APPROVE)
        assert crm.count("delete_customer") == 1
        for thread in (held, held_copy):
            approved = the_decision(await api.values(thread))
            assert (approved["operator"], approved["verdict"], approved["result"]) == (
                "ana",
                "approved",
                "executed",
            )


async def test_a_budgeted_call_cut_off_mid_run_is_never_sent_again_and_counts(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    """Case 2: a budgeted refund cut off while the CRM runs it (the run cancelled), then a new
    message: not sent again, recorded ``unknown`` and counted; the next refund meets the
    budget."""
    with served_api(engine, tmp_path) as (api, crm):
        crm.delays["refund"] = 4.0
        budgeted = (await api.alice.threads.create())["thread_id"]
        run = await api.alice.runs.create(
            budgeted, "governed_agent", input=user_turn("refund account_id=a1 amount=5")
        )
        await async_wait_until(lambda: crm.count("refund"), timeout=120, what="the refund")
        await api.alice.runs.cancel(budgeted, run["run_id"], wait=True, action="interrupt")
        assert (await api.alice.threads.get_state(budgeted))["next"] == ["governed_tool"]
        await api.say(budgeted, "what happened?")
        assert crm.count("refund") == 1  # never sent again
        values = await api.values(budgeted)
        [counted] = values["tool_calls"]
        assert (counted["tool"], counted["result"]) == ("refund", "unknown")
        [answered] = [
            m for m in values["messages"] if m["type"] == "tool" and m["name"] == "refund"
        ]
        assert "UNKNOWN OUTCOME" in str(answered["content"]), answered
        crm.delays.clear()
        await api.say(budgeted, "refund account_id=a1 amount=5")
        assert crm.count("refund") == 1  # the budget counts the unknown one
        values = await api.values(budgeted)
        assert [d["gate"] for d in values["denials"]] == ["budget"]


async def test_the_loser_is_told_who_decided_and_when_every_time(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """Case 3: an answer to an escalation another answer decided (in a copy) ends in
    ``EscalationAlreadyDecided`` naming the winner, where and when, once the copy's records
    hold the winning answer; an answer to a thread where nothing waits is refused with HTTP 409
    naming the winner before any run."""
    with served_api(engine, tmp_path) as (api, crm):
        original = (await api.alice.threads.create())["thread_id"]
        decision = await log_shaky_decision(api.alice, original)
        await api.say(
            original, f"execute_decision decision_id={decision} webhook_url={webhook.url}"
        )
        copy = api.copy(original)
        assert "__error__" not in api.answer(original, "tok-ana", REJECT)
        told = refused_by(api.answer(copy, "tok-olga", APPROVE), "ana")
        decided = the_decision(await api.values(original))
        assert f"(decline in thread {original} at {decided['decided_at']})" in told
        assert the_decision(await api.values(copy))["operator"] == "ana"  # records end true

        held = (await api.alice.threads.create())["thread_id"]
        await api.say(held, "delete the crm customer account_id=a1")
        held_copy = api.copy(held)
        assert "__error__" not in api.answer(held, "tok-ana", APPROVE)
        refused_by(api.answer(held_copy, "tok-olga", APPROVE), "ana")
        assert crm.count("delete_customer") == 1

        # an answer to a thread where nothing waits: refused before any run (HTTP 409 naming who
        # decided), to ana who decided it and to olga, who may not read the thread any more
        before = await api.checkpoints(held)
        for token in ("tok-ana", "tok-olga"):
            late = api.http.post(
                f"/threads/{held}/runs/wait",
                json={"assistant_id": "governed_agent", "command": {"resume": dict(REJECT)}},
                headers=bearer(token),
            )
            assert late.status_code == 409, late.text
            assert "EscalationAlreadyDecided: escalation already decided by ana (" in late.text
        assert await api.checkpoints(held) == before
        assert crm.count("delete_customer") == 1


CUSTOM_CHECKPOINTER = "served_savers.subclass_checkpointer"  # tests/served/served_savers.py


async def test_a_custom_server_checkpointer_refuses_to_start_without_a_ledger_and_holds_with_one(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    """A custom checkpointer (a class the project does not know) and no ledger: the server does
    not start, and its log names ``ALGENTA_LEDGER``. With ``ALGENTA_LEDGER`` set, a held call
    approved on the original and on a copy runs once, and the second operator is told."""
    config = served_config(tmp_path / "config", checkpointer={"path": CUSTOM_CHECKPOINTER})
    here = str(Path(__file__).resolve().parent)
    with running_crm() as crm:
        env = served_env(
            engine,
            crm,
            tmp_path,
            PYTHONPATH=here,
            SERVED_SAVER_DB=str(tmp_path / "cp.sqlite"),
        )
        with (
            pytest.raises(AssertionError, match="exited") as refused,
            langgraph_dev(config, workdir=tmp_path / "refused", env=env, startup_timeout=180),
        ):
            pass
        assert "LedgerRequired" in str(refused.value), str(refused.value)[-2000:]
        assert f"the custom checkpointer {CUSTOM_CHECKPOINTER!r}" in str(refused.value)
        assert "ALGENTA_LEDGER" in str(refused.value)

        env["ALGENTA_LEDGER"] = str(tmp_path / "ledger.sqlite")
        with langgraph_dev(config, workdir=tmp_path / "server", env=env) as server:
            api = Api(server)
            held = (await api.alice.threads.create())["thread_id"]
            await api.say(held, "delete the crm customer account_id=a1")
            held_copy = api.copy(held)
            assert "__error__" not in api.answer(held, "tok-ana", APPROVE)
            refused_by(api.answer(held_copy, "tok-olga", APPROVE), "ana")
            assert crm.count("delete_customer") == 1
            assert the_decision(await api.values(held_copy))["result"] == "executed"
