"""Approvals are bound to what was reviewed, and an escalation can expire (``docs/
ARCHITECTURE.md``, invariant 15), on the governed graph, the reference engine over HTTP and
SQLite checkpoints.

- An answer carrying the digest of anything but the pending escalation is refused as stale,
  before it is saved: nothing is executed or recorded, and the pending escalation still waits.
- Past its gate's ``expires_after`` an escalation is only declined (``expired``), whatever the
  answer; ``algenta-graph escalations --expire`` records the expiry of every overdue one, and
  no answer given later executes it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from cli_support import cli
from graph_support import agent, config, log_decision, open_connection
from guarantee_support import figure
from langgraph.types import Command
from pydantic import ValidationError

from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.errors import EscalationAlreadyDecided
from algenta_graph.governance.escalations import EscalationSettings
from algenta_graph.graph import assembly as graph_module
from algenta_graph.nodes.denial_handler import DenialHandler

OPERATOR = {"identity": "ana", "is_authenticated": True, "permissions": ["operator"]}


def served(thread: str) -> Any:
    return config(thread, langgraph_auth_user=OPERATOR)


def step(*calls: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "content": "",
        "tool_calls": [
            {"name": "execute_decision", "args": {"decision_id": d, "webhook_url": u}, "id": c}
            for d, u, c in calls
        ],
    }


@contextlib.asynccontextmanager
async def governed(
    conn: EngineConnection,
    db: Path,
    replies: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    **handler: Any,
) -> AsyncIterator[Any]:
    """The real factory's graph (``settings`` its ``escalation=``), its denial handlers built
    with ``handler``'s other keywords (a test clock)."""
    settings = handler.pop("settings", None)

    def made(*args: Any, **kwargs: Any) -> DenialHandler:
        return DenialHandler(*args, **{**kwargs, **handler})

    with monkeypatch.context() as patch:
        if handler:
            patch.setattr(graph_module, "DenialHandler", made)
        async with agent(conn, db, replies, escalation=settings) as (graph, _):
            yield graph


async def test_a_stale_digest_is_refused_by_name_and_changes_nothing(
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refused: list[str] = []
    async with open_connection(engine) as conn:
        first, second, third, fourth = [await log_decision(conn, confidence=0.3) for _ in range(4)]
        replies = [
            step((first, webhook.url, "c1")),
            step((second, webhook.url, "c2")),  # after the first is declined: a new escalation
            step((third, webhook.url, "c3"), (fourth, webhook.url, "c4")),
            "done",
            "done",
        ]
        async with governed(conn, tmp_path / "cp.sqlite", replies, monkeypatch) as graph:
            await graph.ainvoke({"messages": [("user", "go")]}, served("t"))
            [seen] = (await graph.aget_state(served("t"))).interrupts  # what ana reviewed
            reviewed = seen.value
            # bo declines that escalation first; the model goes on to a new one
            await graph.ainvoke(
                Command(resume={"action": "decline", "operator": "bo"}), config("t")
            )
            pending = await graph.aget_state(served("t"))
            [now_pending] = pending.interrupts
            assert now_pending.value["decision_id"] == second
            assert now_pending.value["digest"] != reviewed["digest"]
            records = list(pending.values["operator_decisions"])
            # ana's answers, each for the escalation she reviewed, now stale
            stale_answers = [
                ("chat-ui", {"decisions": [{"type": "approve", "digest": reviewed["digest"]}]}),
                (
                    "request digest",
                    {"decisions": [{"type": "approve"}], "digest": reviewed["digest"]},
                ),
                ("short form", {"action": "override", "digest": reviewed["digest"]}),
                ("inbox", [{"type": "accept", "args": None, "digest": reviewed["digest"]}]),
                ("forged", {"decisions": [{"type": "approve", "digest": "sha256:" + "f" * 64}]}),
            ]
            for name, answer in stale_answers:
                with pytest.raises(ValidationError, match="stale answer") as caught:
                    await graph.ainvoke(Command(resume=answer), served("t"))
                pending_id = now_pending.value["escalation_id"]
                assert f"the escalation pending here is escalation {pending_id}" in str(
                    caught.value
                )
                state = await graph.aget_state(served("t"))
                assert [i.id for i in state.interrupts] == [now_pending.id], name
                assert state.values["operator_decisions"] == records, name
                refused.append(name)
            # answered with the digest it shows: it takes effect
            ok = {"decisions": [{"type": "reject", "digest": now_pending.value["digest"]}]}
            await graph.ainvoke(Command(resume=ok), served("t"))
            # two escalations in one request: each decision is bound to its own, in order
            state = await graph.aget_state(served("t"))
            [both] = state.interrupts
            one, two = (e["digest"] for e in both.value["escalations"])
            swapped = {
                "decisions": [
                    {"type": "approve", "digest": two},
                    {"type": "approve", "digest": one},
                ]
            }
            with pytest.raises(ValidationError, match="stale answer"):
                await graph.ainvoke(Command(resume=swapped), served("t"))
            refused.append("swapped in a batch")
            assert (await graph.aget_state(served("t"))).interrupts[0].id == both.id
            in_order = {
                "decisions": [{"type": "reject", "digest": one}, {"type": "reject", "digest": two}]
            }
            final = await graph.ainvoke(Command(resume=in_order), served("t"))
    effects = sum(len(engine.executions(d)) for d in (first, second, third, fourth))
    figure("operator_stale_digests", refused=len(refused), effects=effects + len(webhook.received))
    assert effects == 0 and webhook.received == []
    assert [(d["operator"], d["verdict"]) for d in final["operator_decisions"]] == [
        ("bo", "declined"),
        ("ana", "declined"),
        ("ana", "declined"),
        ("ana", "declined"),
    ]
    assert final["operator_decisions"][1]["digest"] == now_pending.value["digest"]


ANSWERS: list[tuple[str, Any]] = [
    ("chat-ui approve", {"decisions": [{"type": "approve"}]}),
    ("langchain edit", None),  # built from the interrupt below
    ("inbox accept", [{"type": "accept", "args": None}]),
    ("short override", {"action": "override", "reason": "urgent"}),
    ("respond", {"decisions": [{"type": "respond", "message": "go ahead"}]}),
    ("reject", {"decisions": [{"type": "reject", "message": "no"}]}),
]


async def test_past_its_deadline_an_escalation_is_only_declined_whatever_the_answer(
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = EscalationSettings(expires_after={"confidence": timedelta(minutes=5)})
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    decisions: list[str] = []
    db = tmp_path / "cp.sqlite"
    overdue = 0
    async with open_connection(engine) as conn:
        # 1. answers that arrive after the deadline (the handler judges it when they arrive)
        for n, (name, answer) in enumerate(ANSWERS):
            decision = await log_decision(conn, confidence=0.3)
            decisions.append(decision)
            replies = [step((decision, webhook.url, "c1")), "done"]
            async with governed(
                conn, db, replies, monkeypatch, settings=settings, clock=lambda: later
            ) as graph:
                await graph.ainvoke({"messages": [("user", "go")]}, served(f"late{n}"))
                [asked] = (await graph.aget_state(served(f"late{n}"))).interrupts
                deadline = asked.value["expires_at"]
                assert (
                    deadline
                    == (
                        datetime.fromisoformat(asked.value["asked_at"]) + timedelta(minutes=5)
                    ).isoformat()
                )
                if answer is None:
                    args = {**asked.value["args"], "webhook_url": webhook.url + "/x"}
                    answer = {
                        "decisions": [
                            {
                                "type": "edit",
                                "edited_action": {"name": "execute_decision", "args": args},
                            }
                        ]
                    }
                out = await graph.ainvoke(Command(resume=answer), served(f"late{n}"))
            [record] = out["operator_decisions"]
            assert (record["verdict"], record["action"], record["result"]) == (
                "expired",
                "decline",
                "declined",
            ), name
            assert record["expires_at"] == deadline and "expired at" in record["reason"]
            overdue += 1
        # 2. the command, as a cron job would run it, expires what waits past its deadline
        cron: list[str] = []
        for n in range(3):
            decision = await log_decision(conn, confidence=0.3)
            decisions.append(decision)
            async with governed(
                conn,
                db,
                [step((decision, webhook.url, "c1")), "done"],
                monkeypatch,
                settings=settings,
            ) as graph:
                await graph.ainvoke({"messages": [("user", "go")]}, served(f"cron{n}"))
            cron.append(f"cron{n}")
        listed = cli("escalations", "--db", str(db), "--json")
        assert listed.returncode == 0, listed.stderr
        rows = [json.loads(line) for line in listed.stdout.splitlines()]
        assert sorted(r["thread_id"] for r in rows) == cron
        assert {r["state"] for r in rows} == {"waiting"}  # not overdue yet
        assert all(r["expires_at"] and r["age"] for r in rows)
        expired = cli("escalations", "--db", str(db), "--expire", "--now", later.isoformat())
        assert expired.returncode == 0, expired.stderr
        assert "3 escalation(s) expired now" in expired.stderr
        again = cli(
            "escalations", "--db", str(db), "--json", "--expire", "--now", later.isoformat()
        )
        assert {json.loads(line)["state"] for line in again.stdout.splitlines()} == {"expired"}
        assert "no escalation was past its deadline" in again.stderr  # idempotent
        table = cli("escalations", "--db", str(db))
        assert all(thread in table.stdout for thread in cron) and "expired" in table.stdout
        # any answer given later (or a new turn) completes the expiry, never executes; an
        # answer is refused, naming the expiry
        for n, thread in enumerate(cron):
            replies = ["done", "done"]
            async with governed(conn, db, replies, monkeypatch, settings=settings) as graph:
                if n == 0:
                    await graph.ainvoke({"messages": [("user", "well?")]}, served(thread))
                else:
                    answer = {"decisions": [{"type": "approve"}]}
                    with pytest.raises(EscalationAlreadyDecided, match="--expire"):
                        await graph.ainvoke(Command(resume=answer), served(thread))
                state = await graph.aget_state(served(thread))
            [record] = state.values["operator_decisions"]
            assert (record["verdict"], record["operator"]) == (
                "expired",
                "algenta-graph escalations --expire",
            )
            assert not state.interrupts
            overdue += 1
        after = cli("escalations", "--db", str(db))
        assert "(nothing waits for an operator)" in after.stdout
    executions = sum(len(engine.executions(d)) for d in decisions)
    figure("operator_deadlines", escalations_past_deadline=overdue, executions=executions)
    assert executions == 0 and webhook.received == []
    assert overdue == len(ANSWERS) + 3
