"""One escalation, one answer, one true record, through a thread's whole lifecycle.

``docs/ARCHITECTURE.md`` invariants 12 and 13: an escalation has an identity of its own (not
its thread's, task's or checkpoint namespace's), so a copy of the thread, a new task after a
cancel and another process all meet the same single answer; and no run passes an unfinished
governed step. These are the library's and the CLI's cases (each failed on the code
before it); the served graph's are in ``tests/served/test_escalation_integrity.py``.

Real parts: the reference engine over HTTP, a real webhook receiver (slow on purpose where an
answer must be in flight), real SQLite checkpoint files, the real ``algenta-graph`` command.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_support import RELAXED_ENGINE_ENV, cli, cli_env, command
from graph_support import agent, config, copy_thread, execute, log_decision, open_connection
from guarantee_support import async_wait_until
from guarantee_support import log_decision as log_over_mcp
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.errors import EscalationAlreadyDecided
from algenta_graph.serving.checkpoint_reader import read_thread_values

pytestmark = pytest.mark.timeout(240)

OVERRIDE = {"action": "override", "operator": "ana", "reason": "committee approved"}
DECLINE = {"action": "decline", "operator": "bo", "reason": "too risky"}


def _who(record: dict[str, Any]) -> tuple[Any, Any, Any]:
    return record["operator"], record["action"], record["result"]


def _deliveries(webhook: WebhookReceiver, decision: str) -> int:
    return sum(1 for body in webhook.received if body.get("decision_id") == decision)


def _in_order(messages: list[Any]) -> None:
    """Every AI tool call is answered right after it, before any other message (providers
    refuse a conversation otherwise)."""
    for i, message in enumerate(messages):
        if isinstance(message, AIMessage) and message.tool_calls:
            ids = {c["id"] for c in message.tool_calls}
            answers = messages[i + 1 : i + 1 + len(ids)]
            assert all(isinstance(m, ToolMessage) for m in answers), messages[i:]
            assert {m.tool_call_id for m in answers} == ids


async def test_a_copy_of_a_waiting_thread_carries_the_same_single_escalation(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """A copy answered the other way, in the library: a decline in the original, then an override
    in the copy. The copy completes the decline (in bo's name, saying where it was given) and
    the override is refused naming bo; the decision is never delivered. Then the other order: an
    override in a copy, a decline in the original (refused, naming ana): one delivery, and both
    threads record the override."""
    async with open_connection(engine) as conn:
        declined = await log_decision(conn, confidence=0.3)
        overridden = await log_decision(conn, confidence=0.3)
        replies = [  # in the order the model is called
            execute(declined, webhook.url, "c1"),
            "answered",
            "answered",
            execute(overridden, webhook.url, "c2"),
            "answered",
            "answered",
        ]
        async with agent(conn, tmp_path / "cp.sqlite", replies) as (graph, _):
            saver = graph.checkpointer
            await graph.ainvoke({"messages": [("user", "go")]}, config("orig"))
            await copy_thread(saver, "orig", "copy")
            copied = await graph.aget_state(config("copy"))
            assert copied.next == ("denial_handler_confidence",)
            await graph.ainvoke(Command(resume=DECLINE), config("orig"))
            with pytest.raises(EscalationAlreadyDecided, match=r"by bo \(decline in thread orig"):
                await graph.ainvoke(Command(resume=OVERRIDE), config("copy"))
            out = (await graph.aget_state(config("copy"))).values  # bo's answer, recorded
            # the other order, on a second pair of threads
            await graph.ainvoke({"messages": [("user", "go")]}, config("orig2"))
            await copy_thread(saver, "orig2", "copy2")
            first = await graph.ainvoke(Command(resume=OVERRIDE), config("copy2"))
            with pytest.raises(EscalationAlreadyDecided, match=r"by ana \(override in thread"):
                await graph.ainvoke(Command(resume=DECLINE), config("orig2"))
            second = (await graph.aget_state(config("orig2"))).values
            [original] = (await graph.aget_state(config("orig"))).values["operator_decisions"]
    [record] = out["operator_decisions"]
    assert (record["operator"], record["action"], record["result"]) == ("bo", "decline", "declined")
    assert record["answered_in_thread"] == "orig" and original["answered_in_thread"] is None
    assert record["escalation_id"] == original["escalation_id"]
    assert record["escalation_id"].startswith("esc_")
    assert out["receipts"] == [] and engine.executions(declined) == []
    assert _deliveries(webhook, declined) == 0
    # the other order: delivered once, both threads hold the operator's receipt
    assert _deliveries(webhook, overridden) == 1 and len(engine.executions(overridden)) == 1
    for state, where in ((first, None), (second, "copy2")):
        [decision] = state["operator_decisions"]
        assert (decision["operator"], decision["action"], decision["result"]) == (
            "ana",
            "override",
            "receipt",
        )
        assert decision["answered_in_thread"] == where
        [receipt] = state["receipts"]
        assert (receipt["decision_id"], receipt["source"], receipt["operator"]) == (
            overridden,
            "operator",
            "ana",
        )


async def _cancel_when(task: asyncio.Task[Any], ready: Callable[[], Any], what: str) -> None:
    await async_wait_until(ready, timeout=60, what=what)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancelled_override_then_a_new_message_completes_the_override(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """A cancelled override, in the library: the operator's override is in flight (a slow webhook)
    when its run is cancelled; a new message on the thread does not ask again: it completes the
    override in ana's name, with the engine's receipt; a later decline finds nothing to answer
    and is refused, naming ana, before anything is written."""
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
        replies = [execute(decision, webhook.url_for_delay(3), "c1"), "after", "again"]
        async with agent(conn, tmp_path / "cp.sqlite", replies) as (graph, model):
            cfg = config("t")
            await graph.ainvoke({"messages": [("user", "go")]}, cfg)
            resume = asyncio.ensure_future(graph.ainvoke(Command(resume=OVERRIDE), cfg))
            await _cancel_when(resume, lambda: engine.executions(decision), "the override")
            cut = await graph.aget_state(cfg)
            out = await graph.ainvoke({"messages": [("user", "what happened?")]}, cfg)
            state = await graph.aget_state(cfg)
            with pytest.raises(EscalationAlreadyDecided, match=r"by ana \(override in thread t"):
                await graph.ainvoke(Command(resume=DECLINE), cfg)
            late = (await graph.aget_state(cfg)).values
    assert cut.next == ("denial_handler_confidence",)
    assert state.next == () and not state.interrupts  # never asked again
    [record] = out["operator_decisions"]
    assert (record["operator"], record["action"], record["result"]) == (
        "ana",
        "override",
        "receipt",
    )
    [receipt] = out["receipts"]
    assert (receipt["source"], receipt["operator"], receipt["execution_status"]) == (
        "operator",
        "ana",
        "delivered",
    )
    [execution] = engine.executions(decision)
    assert execution["execution_status"] == "delivered"
    assert _deliveries(webhook, decision) == 1
    assert late["operator_decisions"] == [record]  # the decline changed nothing
    assert model.position == 2  # the late decline ran nothing


async def test_a_new_message_after_a_cancelled_delivery_finishes_the_step_first(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """A cancelled delivery, in the library: a run cancelled while the model's execute_decision
    is in flight leaves ``governed_tool`` due; a run with a new message finishes that step first
    (the engine's receipt, recovered), keeps the conversation in provider order, then answers."""
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.9)
        replies = [execute(decision, webhook.url_for_delay(3), "c1"), "done", "answered"]
        async with agent(conn, tmp_path / "cp.sqlite", replies) as (graph, model):
            cfg = config("t")
            run = asyncio.ensure_future(graph.ainvoke({"messages": [("user", "go")]}, cfg))
            await _cancel_when(run, lambda: engine.executions(decision), "the execution")
            cut = await graph.aget_state(cfg)
            out = await graph.ainvoke({"messages": [("user", "and now?")]}, cfg)
    assert cut.next == ("governed_tool",) and cut.values["receipts"] == []
    [receipt] = out["receipts"]
    assert (receipt["decision_id"], receipt["execution_status"]) == (decision, "delivered")
    assert len(engine.executions(decision)) == 1 and _deliveries(webhook, decision) == 1
    messages = out["messages"]
    _in_order(messages)
    assert [m.content for m in messages if isinstance(m, HumanMessage)] == ["go", "and now?"]
    assert messages[-1].content == "done" and model.position == 2


async def test_a_killed_override_then_a_new_message_then_a_cli_decline_keeps_one_answer(
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    tmp_path: Path,
    mcp_session: Any,
) -> None:
    """A cancelled override, with the CLI: ``algenta-graph run --resume`` overriding is SIGKILLed
    while the override is in flight; a new message through ``ainvoke`` completes the override
    in ana's name; ``run --resume`` declining then finds no escalation to answer."""
    db = tmp_path / "runs.sqlite"
    async with mcp_session(engine.url) as session:
        decision = await log_over_mcp(session, action="cli-kill", confidence=0.3)
    args = ["--profile", "execute", "--thread", "t", "--db", str(db), "--base-url", engine.url]
    asked = cli(
        "run",
        f"execute_decision decision_id={decision} webhook_url={webhook.url_for_delay(3)}",
        *args,
    )
    assert read_thread_values(db)["t"]["denials"], asked.stdout + asked.stderr
    proc = subprocess.Popen(
        [*command(), "run", *args, "--resume", json.dumps(OVERRIDE)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(**RELAXED_ENGINE_ENV),
    )
    try:
        await async_wait_until(lambda: webhook.received, timeout=120, what="the override's POST")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert read_thread_values(db)["t"]["operator_decisions"] == []
    async with (
        open_connection(engine) as conn,
        agent(conn, db, ["after the kill"]) as (graph, _),
    ):
        out = await graph.ainvoke({"messages": [("user", "status?")]}, config("t"))
    [record] = out["operator_decisions"]
    assert (record["operator"], record["action"], record["result"]) == (
        "ana",
        "override",
        "receipt",
    )
    declined = cli("run", *args, "--resume", json.dumps(DECLINE), env=RELAXED_ENGINE_ENV)
    values = read_thread_values(db)["t"]
    assert values["operator_decisions"] == [record], declined.stdout + declined.stderr
    assert [r["source"] for r in values["receipts"]] == ["operator"]
    assert len(engine.executions(decision)) == 1 and _deliveries(webhook, decision) == 1


async def test_the_operator_path_alone_uses_the_operator_credential(
    start_engine: Callable[..., ReferenceEngine], webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """Invariant 14, the graph's side: the model's calls go with the agent key, the override
    (after an operator's answer) with ``operator_api_key`` over a session of its own; the
    engine's execution log names which key sent each."""
    from algenta_graph.connection.engine import EngineConnection
    from algenta_graph.engine.auth import ApiKey

    keys = {
        "tok-agent": ApiKey("graph-worker", frozenset({"agent"}), execute=True),
        "tok-operator": ApiKey("ops-desk", frozenset({"operator"}), execute=True),
    }
    engine = start_engine(keys=keys)
    async with EngineConnection(
        engine.url, profile="execute", api_key="tok-agent", operator_api_key="tok-operator"
    ) as conn:
        assert conn.has_operator_credential and "tok-operator" not in repr(conn)
        fine = await log_decision(conn, confidence=0.9)
        shaky = await log_decision(conn, confidence=0.3)
        replies = [execute(fine, webhook.url, "c1"), "done", execute(shaky, webhook.url, "c2")]
        async with agent(conn, tmp_path / "cp.sqlite", [*replies, "overridden"]) as (graph, _):
            await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
            await graph.ainvoke({"messages": [("user", "and this one")]}, config("t"))
            out = await graph.ainvoke(Command(resume=OVERRIDE), config("t"))
        sessions = conn.sessions_opened
    assert _who(out["operator_decisions"][0]) == ("ana", "override", "receipt")
    [model_call] = engine.executions(fine)
    [override] = engine.executions(shaky)
    assert (model_call["executed_by"], model_call["override_safety"]) == ("graph-worker", False)
    assert (override["executed_by"], override["override_safety"]) == ("ops-desk", True)
    assert sessions == 2  # the model's session, and the operator path's own


async def test_two_plans_of_one_scenario_each_run_the_decision_logged_with_it(
    start_engine: Callable[..., ReferenceEngine], webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """Each decision under its own plan: two proposals of one scenario have one ``plan_hash``; both
    approved, a decision logged with each, both executed: each runs under its own plan (its
    receipt names it), both plans are spent; and a decision logged by hash alone, while both
    plans are unbound, is refused by name (``plan_ambiguous``), never guessed."""
    import httpx
    from graph_support import call, tool_messages

    from algenta_graph.connection.engine import EngineConnection
    from algenta_graph.engine.auth import ApiKey

    keys = {
        "tok-agent": ApiKey("graph-worker", frozenset({"agent"}), execute=True),
        "tok-operator": ApiKey("alice", frozenset({"operator"})),
    }
    engine = start_engine(relaxed=False, keys=keys)
    fields = ("chosen_action", "expected_value", "confidence", "risk_p5", "risk_p95")

    def answer(out: dict[str, Any]) -> dict[str, Any]:
        return dict(json.loads(tool_messages(out)[-1].text))

    async with (
        EngineConnection(engine.url, profile="execute", api_key="tok-agent") as conn,
        agent(conn, tmp_path / "cp.sqlite", []) as (graph, model),
        httpx.AsyncClient(timeout=10) as http,
    ):
        cfg = config("t")

        async def turn(text: str, *replies: Any) -> dict[str, Any]:
            model.replies.extend(replies)
            return dict(await graph.ainvoke({"messages": [("user", text)]}, cfg))

        scenario = {"scenario": "restock_inventory"}
        plans = [
            answer(await turn("plan", call("plan_decision", scenario, f"p{i}"), "ok"))
            for i in (1, 2)
        ]
        assert plans[0]["plan_hash"] == plans[1]["plan_hash"]
        assert plans[0]["plan_id"] != plans[1]["plan_id"]
        for plan in plans:
            approved = await http.post(
                engine.approve_url.format(plan_id=plan["plan_id"]),
                json={"plan_hash": plan["plan_hash"], "nonce": plan["nonce"]},
                headers={"Authorization": "Bearer tok-operator"},
            )
            assert approved.status_code == 200, approved.text
        numbers = {k: plans[0][k] for k in fields}
        by_hash = answer(
            await turn(
                "log",
                call("log_decision", {**numbers, "plan_hash": plans[0]["plan_hash"]}, "l0"),
                "no",
            )
        )
        decisions = []
        for i, plan in enumerate(plans):
            logged = {**numbers, "plan_id": plan["plan_id"], "plan_hash": plan["plan_hash"]}
            out = answer(await turn("log", call("log_decision", logged, f"l{i + 1}"), "logged"))
            decisions.append(out["decision_id"])
        for i, decision in enumerate(decisions):
            await turn("go", execute(decision, webhook.url, f"e{i}"), "done")
        state = (await graph.aget_state(cfg)).values
    assert by_hash.get("error", {}).get("code") == "plan_ambiguous", by_hash
    receipts = {r["decision_id"]: r for r in state["receipts"]}
    for decision, plan in zip(decisions, plans, strict=True):
        assert receipts[decision]["execution_status"] == "delivered"
        assert receipts[decision]["plan_id"] == plan["plan_id"]
    assert sorted(b["decision_id"] for b in webhook.received) == sorted(decisions)


async def test_a_plan_proposed_over_the_engines_http_api_is_executed_by_the_graph(
    start_engine: Callable[..., ReferenceEngine], webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """One engine, one store: a plan proposed and approved over HTTP has no
    ``plan_decision`` result in the thread; the graph supplies the nonce the engine reports for
    the decision's own plan (``get_decision``), and the receipt names that plan."""
    import httpx

    from algenta_graph.connection.engine import EngineConnection
    from algenta_graph.engine.auth import ApiKey

    keys = {
        "tok-agent": ApiKey("graph-worker", frozenset({"agent"}), execute=True),
        "tok-operator": ApiKey("alice", frozenset({"operator"})),
    }
    engine = start_engine(relaxed=False, keys=keys)
    base = engine.url.removesuffix("/mcp")
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        agent_key = {"X-API-Key": "tok-agent"}
        case = await http.post(
            "/v1/decision-cases", json={"pack_id": "restock_inventory"}, headers=agent_key
        )
        assert case.status_code in (200, 201), case.text
        run = await http.post(
            f"/v1/decision-cases/{case.json()['case_id']}/analysis-runs", json={}, headers=agent_key
        )
        plan = (
            await http.post(
                f"/v1/analysis-runs/{run.json()['run_id']}/action-plans", headers=agent_key
            )
        ).json()
        approved = await http.post(
            f"/v1/decision-plans/{plan['plan_id']}/approve",
            json={"plan_hash": plan["plan_hash"], "nonce": plan["nonce"]},
            headers={"Authorization": "Bearer tok-operator"},
        )
        assert approved.status_code == 200, approved.text
    replies = [execute(plan["decision_id"], webhook.url, "e1"), "done"]
    async with (
        EngineConnection(engine.url, profile="execute", api_key="tok-agent") as conn,
        agent(conn, tmp_path / "cp.sqlite", replies) as (graph, _),
    ):
        out = await graph.ainvoke({"messages": [("user", "run the approved plan")]}, config("t"))
    [receipt] = out["receipts"]
    assert (receipt["decision_id"], receipt["plan_id"]) == (plan["decision_id"], plan["plan_id"])
    assert receipt["execution_status"] == "delivered"
    assert [b["decision_id"] for b in webhook.received] == [plan["decision_id"]]
