"""Two-person approval: a gate with ``quorum = 2`` runs nothing until two distinct operators
approved the same escalation digest (``docs/ARCHITECTURE.md``, invariant 12; ``EscalationSettings
.quorum``).

Each approval is kept in the graph's ledger (``ApprovalMark``, one slot per approval), so every
worker counts the same approvals; the escalation asks again ("1 of 2 approvals: ana") until the
second; an operator's second approval is refused by name; a reject after one approval ends it;
two approvals racing in two graphs (two workers on one SQLite checkpoint file and ledger) run
the decision once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from graph_support import agent, config, execute, log_decision, open_connection
from langgraph.types import Command
from pydantic import ValidationError

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.errors import ApprovalAlreadyCounted, EscalationAlreadyDecided
from algenta_graph.governance.escalations import EscalationSettings
from algenta_graph.ledger import ApprovalMark, approval_key, escalation_key, open_ledger

pytestmark = pytest.mark.timeout(180)

QUORUM = EscalationSettings(quorum={"confidence": 2})
FIGURES: dict[str, int] = {}


def approve(operator: str) -> dict[str, Any]:
    return {"action": "override", "operator": operator, "reason": f"{operator} approves"}


def reject(operator: str) -> dict[str, Any]:
    return {"action": "decline", "operator": operator, "reason": "too risky"}


def description(state: Any) -> str:
    [asked] = state.interrupts
    return str(asked.value["action_requests"][0]["description"])


async def escalate_and_answer(
    engine: ReferenceEngine, webhook: WebhookReceiver, db: Path, *answers: dict[str, Any]
) -> tuple[str, list[Any], list[Any]]:
    """A confidence escalation under a quorum of two, then each answer in turn: the decision,
    what each resume returned (its values, or the ``ValidationError`` refusing it) and the
    thread's state before the first answer and after each."""
    outs: list[Any] = []
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
        replies = [execute(decision, webhook.url, "c1"), "done"]
        async with agent(conn, db, replies, escalation=QUORUM) as (graph, _):
            await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
            states = [await graph.aget_state(config("t"))]
            for answer in answers:
                try:
                    outs.append(await graph.ainvoke(Command(resume=answer), config("t")))
                except ValidationError as refused:
                    outs.append(refused)
                states.append(await graph.aget_state(config("t")))
    return decision, outs, states


async def test_one_approval_of_two_runs_nothing_and_asks_again_saying_who(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    db = tmp_path / "cp.sqlite"
    decision, _, (first, second) = await escalate_and_answer(engine, webhook, db, approve("ana"))
    FIGURES["single_approval_ran"] = len(engine.executions(decision))
    assert engine.executions(decision) == [] and webhook.received == []
    assert "0 of 2 approvals" in description(first)
    assert "1 of 2 approvals: ana" in description(second)
    [asked] = second.interrupts
    assert asked.value["approvals"] == ["ana"] and asked.value["quorum"] == 2
    assert asked.value["digest"] == first.interrupts[0].value["digest"]  # the same escalation
    assert second.next == ("denial_handler_confidence",)
    assert second.values["operator_decisions"] == []
    # the approval is kept in the ledger, where every worker sees it
    async with open_ledger(str(db)) as ledger:
        key = escalation_key([asked.value["escalation_id"]])
        kept = await ledger.peek(approval_key(key, asked.value["digest"], 1), ApprovalMark)
    assert kept is not None and kept.value.operator == "ana"
    assert kept.value.digest == asked.value["digest"]


async def test_the_same_operator_cannot_approve_twice(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    decision, (_, refused), (*_, after) = await escalate_and_answer(
        engine, webhook, tmp_path / "cp.sqlite", approve("ana"), approve("ana")
    )
    FIGURES["same_operator_counted_twice"] = len(engine.executions(decision))
    assert isinstance(refused, ValidationError)
    assert "'ana' already approved" in str(refused) and "another operator" in str(refused)
    assert engine.executions(decision) == [] and webhook.received == []
    assert "1 of 2 approvals: ana" in description(after)


async def test_a_reject_after_one_approval_ends_it_and_runs_nothing(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    decision, (_, out), (*_, after) = await escalate_and_answer(
        engine, webhook, tmp_path / "cp.sqlite", approve("ana"), reject("bo")
    )
    FIGURES["rejected_after_one_ran"] = len(engine.executions(decision))
    assert engine.executions(decision) == [] and webhook.received == []
    [record] = out["operator_decisions"]
    assert (record["operator"], record["action"], record["result"]) == ("bo", "decline", "declined")
    assert record["approvers"] == ["ana"]  # who had approved before the reject ended it
    assert after.next == () and after.interrupts == ()


async def test_two_distinct_approvals_run_it_once_recorded_with_both(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    from cli_support import cli

    db = tmp_path / "cp.sqlite"
    decision, (_, out), _ = await escalate_and_answer(
        engine, webhook, db, approve("ana"), approve("bo")
    )
    verified = cli("receipts", "--db", str(db), "--verify", timeout=120)
    FIGURES["executions_after_two"] = len(engine.executions(decision))
    [execution] = engine.executions(decision)
    assert execution["override_safety"] is True
    assert len(webhook.received) == 1
    [record] = out["operator_decisions"]
    assert (record["operator"], record["action"], record["result"]) == ("bo", "override", "receipt")
    assert record["approvers"] == ["ana", "bo"]
    assert verified.returncode == 0, verified.stdout + verified.stderr


async def test_edit_is_refused_under_a_quorum() -> None:
    with pytest.raises(ValidationError, match="edit is refused under a quorum"):
        EscalationSettings(quorum={"confidence": 2}, allowed_decisions={"confidence": ["edit"]})
    assert EscalationSettings(quorum={"confidence": 2}).decisions_for("confidence") == [
        "approve",
        "reject",
        "respond",
    ]
    assert "edit" in EscalationSettings(quorum={"confidence": 1}).decisions_for("confidence")
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        EscalationSettings(quorum={"confidence": 0})


@contextlib.asynccontextmanager
async def two_workers(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> AsyncIterator[tuple[str, Any, Any]]:
    """Two graphs on one SQLite checkpoint file and ledger (as two workers), thread ``t``
    waiting on a confidence escalation under a quorum of two: (the decision, east, west)."""
    db = tmp_path / "cp.sqlite"
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
        replies = [execute(decision, webhook.url, "c1"), "done", "done"]
        async with (
            agent(conn, db, replies, escalation=QUORUM) as (east, _),
            agent(conn, db, ["done", "done"], escalation=QUORUM) as (west, _),
        ):
            await east.ainvoke({"messages": [("user", "go")]}, config("t"))
            yield decision, east, west


async def test_one_identity_approving_twice_at_once_in_two_workers_is_refused_by_name(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """ana approves in two graphs on one checkpoint file and ledger at the same moment (as
    through two tokens of hers, in two workers): one approval counts, the other is refused
    naming her (before it is saved, or by the ledger's slot walk); nothing runs until bo."""
    async with two_workers(engine, webhook, tmp_path) as (decision, east, west):
        outcomes = await asyncio.gather(
            east.ainvoke(Command(resume=approve("ana")), config("t")),
            west.ainvoke(Command(resume=approve("ana")), config("t")),
            return_exceptions=True,
        )
        refused = [o for o in outcomes if isinstance(o, BaseException)]
        assert [type(o) for o in refused] in (
            [ValidationError],
            [ApprovalAlreadyCounted],
        ), outcomes
        assert "operator 'ana' already approved" in str(refused[0])
        FIGURES["same_identity_counted"] = 2 - len(refused)
        assert engine.executions(decision) == [] and webhook.received == []
        waiting = await east.aget_state(config("t"))
        assert "1 of 2 approvals: ana" in description(waiting)
        out = await west.ainvoke(Command(resume=approve("bo")), config("t"))
    assert len(engine.executions(decision)) == 1 and len(webhook.received) == 1
    [record] = out["operator_decisions"]
    assert record["approvers"] == ["ana", "bo"]


async def test_two_approvals_racing_in_two_workers_run_it_once(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """Two graphs on one SQLite checkpoint file and one SQLite ledger, as two workers: ana
    approves in one, bo in the other, at once; the decision runs exactly once."""
    async with two_workers(engine, webhook, tmp_path) as (decision, east, west):
        outcomes = await asyncio.gather(
            east.ainvoke(Command(resume=approve("ana")), config("t")),
            west.ainvoke(Command(resume=approve("bo")), config("t")),
            return_exceptions=True,
        )
    for outcome in outcomes:  # each run ends, waits again, or is told who decided
        assert not isinstance(outcome, BaseException) or isinstance(
            outcome, EscalationAlreadyDecided
        ), outcome
    FIGURES["race_executions"] = len(engine.executions(decision))
    assert len(engine.executions(decision)) == 1 and len(webhook.received) == 1
    print(
        "FIGURE quorum: approvals_needed=2 "
        + " ".join(
            f"{name}={FIGURES.get(name, '?')}"
            for name in (
                "single_approval_ran",
                "same_operator_counted_twice",
                "rejected_after_one_ran",
                "executions_after_two",
                "race_executions",
                "same_identity_counted",
            )
        )
    )
