"""No false alarm: every checkpoint of the flows the graph really runs verifies intact.

``verify_audit`` compares each checkpoint with the one it follows and, where the store keeps
what a step wrote, explains every new record by that step's writes. Here the flows that write
records across several steps and runs, in one SQLite file (a real engine, a real CRM over MCP):
an engine gate's escalation answered after a new message was sent meanwhile, in a fresh graph
over the same file; a held call approved; a held call edited; a call cut short in flight (its
run cancelled) followed by a new message. Each thread's history, and the ``receipts --verify``
command on the file, report every chain intact, and each history holds steps whose writes the
check used.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import cli
from crm_support import CrmServer, running_crm
from graph_support import RELAXED_ENGINE, agent, config, execute, log_decision
from langgraph.types import Command

from algenta_graph.audit.chain import ENV_AUDIT_KEY
from algenta_graph.audit.history import verify_audit
from algenta_graph.audit.step_writes import read_step_writes
from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.governance.tool_gates import Budget, ToolGates

pytestmark = pytest.mark.timeout(240)

OVERRIDE = {"action": "override", "operator": "ana", "reason": "committee approved"}
APPROVE = {"decisions": [{"type": "approve", "message": "asked for"}], "operator": "ana"}


@pytest.fixture(autouse=True)
def _no_audit_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_AUDIT_KEY, raising=False)


@pytest.fixture
def crm() -> Iterator[CrmServer]:
    with running_crm() as server:
        yield server


def deleting(account: str, n: int) -> dict[str, Any]:
    """A model turn calling the CRM's ``delete_customer``."""
    args = {"account_id": account}
    return {"content": "", "tool_calls": [{"name": "delete_customer", "args": args, "id": f"d{n}"}]}


def edit_to(account: str) -> dict[str, Any]:
    edited = {"name": "delete_customer", "args": {"account_id": account}}
    return {"decisions": [{"type": "edit", "edited_action": edited}], "operator": "bo"}


async def test_the_flows_the_graph_runs_verify_intact_through_every_checkpoint(
    engine: ReferenceEngine, webhook: WebhookReceiver, crm: CrmServer, tmp_path: Path
) -> None:
    db = tmp_path / "flows.sqlite"
    gates = ToolGates(require_approval=["crm.delete_customer"])
    extra = {"crm": crm.connection()}
    async with EngineConnection(
        engine.url, profile="execute", extra_servers=extra, **RELAXED_ENGINE
    ) as conn:
        shaky = await log_decision(conn, confidence=0.3)
        replies = [
            execute(shaky, webhook.url, "c1"),  # escalated (answered last)
            deleting("a1", 1),  # held, approved
            "deleted",
            deleting("a2", 2),  # held, edited
            "deleted the other",
        ]
        async with agent(conn, db, replies, tool_gates=gates) as (graph, _):
            await graph.ainvoke({"messages": [("user", "execute it")]}, config("waiting"))
            # a new message while it waits: the gate's handler asks again
            again = await graph.ainvoke({"messages": [("user", "well?")]}, config("waiting"))
            assert again["__interrupt__"][0].value["gate"] == "confidence"
            await graph.ainvoke({"messages": [("user", "delete a1")]}, config("held"))
            await graph.ainvoke(Command(resume=APPROVE), config("held"))
            await graph.ainvoke({"messages": [("user", "delete a2")]}, config("edited"))
            await graph.ainvoke(Command(resume=edit_to("a3")), config("edited"))
        # the waiting escalation answered in a fresh graph over the same file
        async with agent(conn, db, ["overridden"], tool_gates=gates) as (graph, _):
            out = await graph.ainvoke(Command(resume=OVERRIDE), config("waiting"))
        assert [r["decision_id"] for r in out["receipts"]] == [shaky]

        # a call cut short in flight: its run cancelled, then a new message
        release = threading.Event()
        crm.hold = release
        cut_replies = [deleting("a4", 4), "deleted a4", "and that is all"]
        budget = ToolGates(budgets=[Budget(tool="crm.delete_customer", thread_limit=5)])
        async with agent(conn, db, cut_replies, tool_gates=budget) as (graph, _):
            run = asyncio.ensure_future(
                graph.ainvoke({"messages": [("user", "delete a4")]}, config("cut"))
            )
            await asyncio.to_thread(crm.entered.wait, 60)
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
            release.set()
            await graph.ainvoke({"messages": [("user", "so?")]}, config("cut"))
    assert crm.count("delete_customer") >= 3

    reports = verify_audit(db)
    assert set(reports) == {"waiting", "held", "edited", "cut"}
    assert all(r.ok for r in reports.values()), {t: str(r) for t, r in reports.items()}
    assert reports["waiting"].count == 3 and reports["held"].count == 3
    assert reports["cut"].count >= 1  # the budgeted call, recorded when its step finished
    # the check had what the steps wrote to work with, in every thread
    writes = read_step_writes(db)
    for thread in reports:
        assert any(step.records for step in writes[thread].values()), thread
    verified = cli("receipts", "--db", str(db), "--verify", timeout=120)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "all chains intact" in verified.stdout
