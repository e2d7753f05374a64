"""Escalation to a human operator: interrupt payload, override, decline, malformed resume."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from graph_support import (
    agent,
    call,
    config,
    execute,
    log_decision,
    open_connection,
    tool_messages,
)
from langgraph.types import Command
from pydantic import ValidationError

from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.engine.auth import ApiKey
from algenta_graph.operator_records import OperatorDecision

pytestmark = pytest.mark.timeout(120)

OVERRIDE = {"action": "override", "operator": "ana", "reason": "committee approved"}
DECLINE = {"action": "decline", "operator": "bo", "reason": "too risky"}
RELAXED = {**os.environ, "ALGENTA_OPERATOR_KEY_IS_AGENT_KEY": "1"}  # the engine here has no keys


async def test_confidence_escalation_then_override_records_receipt_and_operator(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
        replies = [execute(decision, webhook.url, "c1", timeout_seconds=5), "overridden"]
        async with agent(conn, tmp_path / "cp.sqlite", replies) as (graph, _):
            await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
            pending = await graph.aget_state(config("t"))
            # nothing executed while waiting for the operator
            assert engine.executions(decision) == [] and webhook.received == []
            out = await graph.ainvoke(Command(resume=OVERRIDE), config("t"))
            after = await graph.aget_state(config("t"))
    [interrupt] = pending.interrupts
    payload = interrupt.value
    assert payload["gate"] == "confidence" and payload["code"] == "execution_blocked_confidence"
    assert payload["decision_id"] == decision and payload["webhook_url"] == webhook.url
    assert payload["override_flag"] == "override_safety"
    assert "override_safety" in payload["override_hint"]
    assert pending.next == ("denial_handler_confidence",)
    [denial, *_] = out["denials"]
    assert denial["gate"] == "confidence"
    [receipt] = out["receipts"]
    assert receipt["safety_overridden"] is True and receipt["source"] == "operator"
    [decision_record] = out["operator_decisions"]
    parsed = OperatorDecision.model_validate(decision_record)
    assert (parsed.operator, parsed.reason, parsed.action) == (
        "ana",
        "committee approved",
        "override",
    )
    assert (parsed.gate, parsed.decision_id, parsed.result) == ("confidence", decision, "receipt")
    assert parsed.override_flag == "override_safety" and parsed.time
    [execution] = engine.executions(decision)
    assert execution["override_safety"] is True and execution["force"] is False
    assert execution["metadata"]["algenta_graph"]["operator"] == "ana"
    assert len(webhook.received) == 1
    [message] = tool_messages(after.values)  # the denial message was updated in place
    assert "OVERRODE the confidence gate" in str(message.content)
    assert after.next == () and out["messages"][-1].content == "overridden"


async def test_risk_floor_escalation_then_decline_executes_nothing(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, risk_p5=-0.9)
        replies = [execute(decision, webhook.url, "c1"), "declined by the operator"]
        async with agent(conn, tmp_path / "cp.sqlite", replies) as (graph, model):
            await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
            pending = await graph.aget_state(config("t"))
            out = await graph.ainvoke(Command(resume=DECLINE), config("t"))
    assert pending.interrupts[0].value["gate"] == "risk_floor"
    assert engine.executions(decision) == [] and webhook.received == []
    [record] = out["operator_decisions"]
    assert record["action"] == "decline" and record["result"] == "declined"
    assert record["operator"] == "bo" and record["reason"] == "too risky"
    assert out["receipts"] == []
    [message] = tool_messages(out)
    assert "DECLINED" in str(message.content)
    assert model.position == 2  # the model was told, and answered


async def test_a_malformed_resume_is_refused_by_name_and_executes_nothing(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    # invariant 15: refused by the interrupt's response_schema before it is saved, never asked
    # again silently: the same interrupt waits, and a valid answer then takes effect
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
        replies = [execute(decision, webhook.url, "c1"), "done"]
        async with agent(conn, tmp_path / "cp.sqlite", replies) as (graph, _):
            await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
            [asked] = (await graph.aget_state(config("t"))).interrupts
            for bad, needle in (
                ({"action": "approve", "operator": "ana", "reason": "x"}, "short.action"),
                ({"action": "override", "operator": " ", "reason": "x"}, "who decides"),
                ({"action": "override", "operator": "ana", "force": True}, "short.force"),
                ("yes", "not an answer to this escalation"),
            ):
                with pytest.raises(ValidationError, match=needle):
                    await graph.ainvoke(Command(resume=bad), config("t"))
                state = await graph.aget_state(config("t"))
                [interrupt] = state.interrupts
                assert interrupt.id == asked.id and interrupt.value == asked.value
                assert engine.executions(decision) == [] and webhook.received == []
                assert state.values["operator_decisions"] == []
            out = await graph.ainvoke(Command(resume=OVERRIDE), config("t"))
    assert [r["source"] for r in out["receipts"]] == ["operator"]
    assert len(engine.executions(decision)) == 1


async def test_idempotency_escalation_override_uses_force(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    async with open_connection(engine) as conn:
        decision = await log_decision(conn)
        replies = [
            execute(decision, webhook.url, "a"),
            "ok",
            execute(decision, webhook.url, "b"),
            "ok",
        ]
        async with agent(
            conn, tmp_path / "cp.sqlite", replies, on_denial={"idempotency": "escalate"}
        ) as (graph, _):
            await graph.ainvoke({"messages": [("user", "go")]}, config("t1"))
            await graph.ainvoke({"messages": [("user", "again")]}, config("t2"))
            pending = await graph.aget_state(config("t2"))
            out = await graph.ainvoke(Command(resume=OVERRIDE), config("t2"))
    assert pending.interrupts[0].value["override_flag"] == "force"
    first, second = engine.executions(decision)
    assert first["force"] is False and second["force"] is True
    assert out["operator_decisions"][0]["result"] == "receipt"
    assert len(webhook.received) == 2


async def test_resume_in_a_new_process_keeps_receipts_and_never_re_executes(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """Process 1 delivers one decision and stops at an escalation; process 2 (the CLI, a real
    subprocess) resumes it from the SQLite file."""
    import json
    import subprocess
    import sys

    db = tmp_path / "cp.sqlite"
    async with open_connection(engine) as conn:
        ok_decision = await log_decision(conn)
        low_decision = await log_decision(conn, confidence=0.3)
        replies = [
            execute(ok_decision, webhook.url, "c1"),
            "delivered",
            execute(low_decision, webhook.url, "c2"),
        ]
        async with agent(conn, db, replies) as (graph, _):
            await graph.ainvoke({"messages": [("user", "first")]}, config("t"))
            await graph.ainvoke({"messages": [("user", "second")]}, config("t"))
            assert (await graph.aget_state(config("t"))).interrupts
    proc = subprocess.run(
        [
            sys.executable, "-m", "algenta_graph.cli", "run",
            "--thread", "t", "--db", str(db), "--base-url", engine.url,
            "--profile", "execute", "--resume", json.dumps(OVERRIDE),
        ],
        capture_output=True, text=True, timeout=90, check=False, env=RELAXED,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "[operator] ana chose override" in proc.stdout
    listing = subprocess.run(
        [sys.executable, "-m", "algenta_graph.cli", "receipts", "--db", str(db), "--jsonl"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    lines = [json.loads(line) for line in listing.stdout.splitlines()]
    receipts = [r["record"] for r in lines if r.get("field") == "receipts"]
    assert [(r["decision_id"], r["source"]) for r in receipts] == [
        (ok_decision, "model"),
        (low_decision, "operator"),
    ]
    assert len(engine.executions(ok_decision)) == 1  # never re-executed
    assert len(engine.executions(low_decision)) == 1
    assert sorted(b["decision_id"] for b in webhook.received) == sorted([ok_decision, low_decision])


async def test_run_command_asks_the_operator_in_the_terminal(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    import subprocess
    import sys

    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
    db = tmp_path / "cli.sqlite"
    answers = "approve\nana\nfirst try\noverride\nana\nsigned off in OPS-7\n"
    proc = subprocess.run(
        [
            sys.executable, "-m", "algenta_graph.cli", "run",
            f"execute_decision decision_id={decision} webhook_url={webhook.url}",
            "--thread", "t", "--db", str(db), "--base-url", engine.url,
            "--profile", "execute", "--interactive",
        ],
        input=answers, capture_output=True, text=True, timeout=90, check=False, env=RELAXED,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "ESCALATION: the confidence gate denied decision" in proc.stdout
    # named, then asked again in the terminal
    assert "(answer refused: action: Input should be 'override' or 'decline'" in proc.stdout
    assert "[operator] ana chose override on the confidence gate" in proc.stdout
    [execution] = engine.executions(decision)
    assert execution["override_safety"] is True
    assert [b["decision_id"] for b in webhook.received] == [decision]


async def test_new_input_on_a_thread_waiting_for_an_operator_asks_the_operator_again(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    # docs/ARCHITECTURE.md invariant 12: a pending escalation is answered by an operator
    # before the thread goes on; a new message does not dispose of it.
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
        replies = [execute(decision, webhook.url, "c1"), "answered after the operator"]
        async with agent(conn, tmp_path / "cp.sqlite", replies) as (graph, model):
            await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
            first = await graph.aget_state(config("t"))
            for text in ("never mind, just carry on", "and another thing"):
                await graph.ainvoke({"messages": [("user", text)]}, config("t"))
                again = await graph.aget_state(config("t"))
                assert again.next == ("denial_handler_confidence",)
                [interrupt] = again.interrupts
                assert interrupt.value["decision_id"] == decision
                assert interrupt.value["tool_call_id"] == "c1"
                assert model.position == 1  # the model was not called past the escalation
                assert again.values["operator_decisions"] == []
            out = await graph.ainvoke(Command(resume=DECLINE), config("t"))
            after = await graph.aget_state(config("t"))
    assert first.next == ("denial_handler_confidence",)
    assert engine.executions(decision) == [] and webhook.received == []
    [record] = out["operator_decisions"]
    assert (record["operator"], record["action"], record["tool_call_id"]) == ("bo", "decline", "c1")
    assert after.next == () and out["messages"][-1].content == "answered after the operator"
    humans = [m.content for m in out["messages"] if m.type == "human"]
    assert humans == ["go", "never mind, just carry on", "and another thing"]


async def test_a_new_turn_after_a_halted_step_goes_to_the_model(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    # invariant 12: only an *escalated* denial waits for an operator; a halt asked nobody.
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
        replies = [execute(decision, webhook.url, "c1"), "a new answer"]
        async with agent(
            conn, tmp_path / "cp.sqlite", replies, on_denial={"confidence": "halt"}
        ) as (graph, model):
            await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
            halted = await graph.aget_state(config("t"))
            out = await graph.ainvoke({"messages": [("user", "what now?")]}, config("t"))
    assert halted.next == () and model.position == 2
    assert out["messages"][-1].content == "a new answer"
    assert out["operator_decisions"] == [] and engine.executions(decision) == []


async def test_a_force_override_on_the_strict_engine_needs_a_newly_approved_plan(
    start_engine: Callable[..., ReferenceEngine], webhook: WebhookReceiver, tmp_path: Path
) -> None:
    # The strict engine spends a plan's approval on its delivery (single-use nonce), so an
    # idempotency override of a delivered decision is refused until a new plan for it is
    # approved. The graph records that refusal honestly (no receipt), and an override after
    # a new approved plan in the thread delivers once more.
    keys = {
        "tok-agent": ApiKey("graph-worker", frozenset({"agent"}), execute=True),
        "tok-operator": ApiKey("alice", frozenset({"operator"})),
        # the graph's operator path: an operator key with execute enabled (invariant 14)
        "tok-override": ApiKey("graph-operator-path", frozenset({"operator"}), execute=True),
    }
    engine = start_engine(relaxed=False, keys=keys)
    fields = ("chosen_action", "expected_value", "confidence", "risk_p5", "risk_p95")
    override = {"action": "override", "operator": "ana", "reason": "send it again"}

    def answer(out: dict[str, Any]) -> dict[str, Any]:
        return dict(json.loads(tool_messages(out)[-1].text))

    async def approve(plan: dict[str, Any]) -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.post(
                engine.approve_url.format(plan_id=plan["plan_id"]),
                json={"plan_hash": plan["plan_hash"], "nonce": plan["nonce"]},
                headers={"Authorization": "Bearer tok-operator"},
            )
        assert response.status_code == 200, response.text

    async with (
        EngineConnection(
            engine.url, profile="execute", api_key="tok-agent", operator_api_key="tok-override"
        ) as conn,
        agent(conn, tmp_path / "cp.sqlite", [], on_denial={"idempotency": "escalate"}) as (
            graph,
            model,
        ),
    ):
        cfg = config("t")

        async def turn(text: str, *replies: Any) -> dict[str, Any]:
            model.replies.extend(replies)
            return dict(await graph.ainvoke({"messages": [("user", text)]}, cfg))

        scenario = {"scenario": "restock_inventory"}
        first = answer(await turn("plan", call("plan_decision", scenario, "p1"), "planned"))
        logged = {**{k: first[k] for k in fields}, "plan_hash": first["plan_hash"]}
        decision = answer(await turn("log", call("log_decision", logged, "l1"), "logged"))
        decision_id = decision["decision_id"]
        await approve(first)
        await turn("execute", execute(decision_id, webhook.url, "e1"), "done")
        await turn("again", execute(decision_id, webhook.url, "e2"))  # escalated: one reply
        model.replies.append("told")
        refused = await graph.ainvoke(Command(resume=override), cfg)
        # a new plan for the same decision, approved out of band, then the override again
        replan = {**scenario, "decision_id": decision_id}
        second = answer(await turn("plan again", call("plan_decision", replan, "p2"), "again"))
        await approve(second)
        await turn("once more", execute(decision_id, webhook.url, "e3"))
        model.replies.append("delivered again")
        out = await graph.ainvoke(Command(resume=override), cfg)
    failed, delivered = out["operator_decisions"]
    assert refused["operator_decisions"] == [failed]
    assert (failed["tool_call_id"], failed["result"]) == ("e2", "failed")
    assert "plan_not_approved" in failed["outcome"]["message"]
    assert second["plan_hash"] == first["plan_hash"] and second["nonce"] != first["nonce"]
    assert (delivered["tool_call_id"], delivered["result"]) == ("e3", "receipt")
    assert [(r["source"], r["execution_status"]) for r in out["receipts"]] == [
        ("model", "delivered"),
        ("operator", "delivered"),
    ]
    assert [e["force"] for e in engine.executions(decision_id)] == [False, True]
    assert len(webhook.received) == 2
