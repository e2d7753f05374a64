"""Governance that holds against an adversarial model, client or operator.

Each test drives the compiled graph against the reference engine over real HTTP, with a real
SQLite checkpointer, and names the invariant of ``docs/ARCHITECTURE.md`` it defends:

- invariant 7: every denial of a step goes through its own gate's policy; the step's route is
  the strictest (parallel denials, both call orders; two escalations both asked and recorded);
- invariant 8: a delivery whose outcome is unknown (the webhook outlived ``timeout_seconds``)
  is never sent again by the model;
- invariant 9: a run's settings only tighten (configurable and context; loosening refused
  with the gate named; a bare policy string accepted);
- pending escalations live in state: a resume without the run's context still completes;
- invariant 3 / step limit: a model that loops ends cleanly, not with GraphRecursionError;
- the LangChain human-in-the-loop request/decision shape, and the short resume form.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from graph_support import (
    agent,
    call,
    config,
    execute,
    log_decision,
    nodes_run,
    open_connection,
    tool_messages,
)
from guarantee_support import figure
from langgraph.types import Command
from pydantic import ValidationError

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.governance.gates import ENGINE_GATE_NAMES, GATES
from algenta_graph.nodes.agent import STEP_LIMIT_MESSAGE

pytestmark = pytest.mark.timeout(180)

OVERRIDE = {"action": "override", "operator": "ana", "reason": "committee approved"}


def two_calls(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """One AI message with both calls of ``first`` and ``second``."""
    return {"content": "", "tool_calls": [*first["tool_calls"], *second["tool_calls"]]}


async def _two_denials(engine: ReferenceEngine, conn: Any) -> tuple[str, str]:
    low_confidence = await log_decision(conn, confidence=0.3)
    below_floor = await log_decision(conn, risk_p5=-0.9)
    return low_confidence, below_floor


# ------------------------------------------------------------------ invariant 7


@pytest.mark.parametrize("confidence_first", [True, False])
async def test_a_halting_denial_halts_the_step_whatever_the_call_order(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path, confidence_first: bool
) -> None:
    async with open_connection(engine) as conn:
        conf_id, floor_id = await _two_denials(engine, conn)
        calls = [execute(conf_id, webhook.url, "c_conf"), execute(floor_id, webhook.url, "c_floor")]
        if not confidence_first:
            calls.reverse()
        replies = [two_calls(*calls), "should never be said"]
        policies = {"confidence": "report", "risk_floor": "halt"}
        async with agent(conn, tmp_path / "cp.sqlite", replies, on_denial=policies) as (graph, m):
            order = await nodes_run(graph, {"messages": [("user", "go")]}, config("t"))
            state = await graph.aget_state(config("t"))
    figure(
        "parallel_denials_halt",
        order="confidence,risk_floor" if confidence_first else "risk_floor,confidence",
        denials=len(state.values["denials"]),
        last_node=order[-1],
        model_calls=len(m.bound_tools),
        posts=len(webhook.received),
    )
    assert order[-1] == "denial_handler_risk_floor"  # the strictest gate first, then END
    assert state.next == () and state.interrupts == ()
    assert len(m.bound_tools) == 1  # the model was not asked again
    assert {d["gate"]: d["policy"] for d in state.values["denials"]} == {
        "confidence": "report",
        "risk_floor": "halt",
    }
    assert webhook.received == []


async def test_two_escalated_denials_in_one_step_are_both_asked_and_recorded(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    async with open_connection(engine) as conn:
        conf_id, floor_id = await _two_denials(engine, conn)
        replies = [
            two_calls(
                execute(conf_id, webhook.url, "c_conf"), execute(floor_id, webhook.url, "c_f")
            ),
            "done",
        ]
        async with agent(conn, tmp_path / "cp.sqlite", replies) as (graph, _):
            await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
            first = await graph.aget_state(config("t"))
            await graph.ainvoke(Command(resume=OVERRIDE), config("t"))
            second = await graph.aget_state(config("t"))
            decline = {"action": "decline", "operator": "bo", "reason": "too risky"}
            out = await graph.ainvoke(Command(resume=decline), config("t"))
    # one interrupt per gate, strictest first (both escalate: table order)
    assert [i.value["gate"] for i in first.interrupts] == ["confidence"]
    assert [i.value["gate"] for i in second.interrupts] == ["risk_floor"]
    assert second.interrupts[0].value["decision_id"] == floor_id
    decisions = {
        d["gate"]: (d["operator"], d["action"], d["result"]) for d in out["operator_decisions"]
    }
    assert decisions == {
        "confidence": ("ana", "override", "receipt"),
        "risk_floor": ("bo", "decline", "declined"),
    }
    [receipt] = out["receipts"]
    figure(
        "parallel_escalations",
        denials=len(out["denials"]),
        interrupts=len(first.interrupts) + len(second.interrupts),
        operator_decisions=len(out["operator_decisions"]),
        posts=len(webhook.received),
    )
    assert receipt["decision_id"] == conf_id and receipt["operator"] == "ana"
    assert [e["decision_id"] for e in engine.executions()] == [conf_id]
    assert len(webhook.received) == 1 and out["messages"][-1].content == "done"


async def test_an_escalation_request_follows_the_langchain_hitl_shape_and_takes_decisions(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    async with open_connection(engine) as conn:
        a = await log_decision(conn, confidence=0.3)
        b = await log_decision(conn, confidence=0.2)
        replies = [two_calls(execute(a, webhook.url, "c_a"), execute(b, webhook.url, "c_b")), "ok"]
        async with agent(conn, tmp_path / "cp.sqlite", replies) as (graph, _):
            await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
            [pending] = (await graph.aget_state(config("t"))).interrupts
            bad = {"decisions": [{"type": "approve", "message": "fine"}], "operator": "ana"}
            with pytest.raises(ValidationError, match="List should have at least 2 items"):
                await graph.ainvoke(Command(resume=bad), config("t"))
            [asked_again] = (await graph.aget_state(config("t"))).interrupts
            answer = {
                "decisions": [
                    {"type": "approve", "message": "committee approved"},
                    {"type": "reject", "message": "not this one"},
                ],
                "operator": "ana",
            }
            out = await graph.ainvoke(Command(resume=answer), config("t"))
    request = pending.value
    assert [r["name"] for r in request["action_requests"]] == ["execute_decision"] * 2
    assert [r["args"]["decision_id"] for r in request["action_requests"]] == [a, b]
    # one review config per action request, stating what the gate accepts
    assert [c["allowed_decisions"] for c in request["review_configs"]] == [
        ["approve", "edit", "reject", "respond"]
    ] * 2
    assert [e["override_flag"] for e in request["escalations"]] == ["override_safety"] * 2
    assert asked_again.id == pending.id and asked_again.value == pending.value  # no re-ask
    assert [(d["decision_id"], d["action"]) for d in out["operator_decisions"]] == [
        (a, "override"),
        (b, "decline"),
    ]
    assert [e["decision_id"] for e in engine.executions()] == [a]


@pytest.mark.parametrize("gate", ENGINE_GATE_NAMES)
async def test_an_override_sends_exactly_the_gates_own_flag(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path, gate: str
) -> None:
    async with open_connection(engine) as conn:
        if gate == "idempotency":
            decision = await log_decision(conn)
            replies = [
                execute(decision, webhook.url, "c1"),
                execute(decision, webhook.url, "c2"),
                "again",
            ]
        else:
            decision = await log_decision(
                conn, **({"confidence": 0.3} if gate == "confidence" else {"risk_p5": -0.9})
            )
            replies = [execute(decision, webhook.url, "c1"), "done"]
        policies = {gate: "escalate"}
        async with agent(conn, tmp_path / "cp.sqlite", replies, on_denial=policies) as (graph, _):
            out = await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
            assert out["__interrupt__"][0].value["gate"] == gate
            out = await graph.ainvoke(Command(resume=OVERRIDE), config("t"))
    flag = GATES[gate].override_flag
    assert flag is not None  # an engine gate's
    last = engine.executions(decision)[-1]
    assert last[flag] is True
    assert last["force" if flag == "override_safety" else "override_safety"] is False
    [decided] = out["operator_decisions"]
    assert (decided["gate"], decided["override_flag"], decided["result"]) == (gate, flag, "receipt")
    operator_receipts = [r for r in out["receipts"] if r["source"] == "operator"]
    assert len(operator_receipts) == 1
    assert operator_receipts[0]["safety_overridden"] is (gate != "idempotency")


# ------------------------------------------------------------------ invariant 8


async def test_a_delivery_of_unknown_outcome_is_never_sent_again_by_the_model(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """A webhook slower than the call's timeout: the receipt says the delivery failed, the POST
    still arrived. The model's retries (explicit short timeout, then the engine's default 10 s
    timeout against a 15 s webhook) never reach the engine again."""
    scenarios = {
        "short_timeout": (webhook.url_for_delay(3), {"timeout_seconds": 1}, 3),
        "default_timeout": (webhook.url_for_delay(15), {}, 2),
    }
    retries = posts = 0
    async with open_connection(engine) as conn:
        for name, (url, extra, calls) in scenarios.items():
            decision = await log_decision(conn)
            replies = [execute(decision, url, f"{name}-{i}", **extra) for i in range(calls)]
            async with agent(conn, tmp_path / f"{name}.sqlite", [*replies, "gave up"]) as (g, _):
                out = await g.ainvoke({"messages": [("user", "go")]}, config(name))
            sent = [b for b in webhook.received if b.get("decision_id") == decision]
            [receipt] = out["receipts"]
            assert receipt["execution_status"] != "delivered" and receipt["response_code"] is None
            assert [d["source"] for d in out["denials"]] == ["thread_receipts"] * (calls - 1)
            assert len(engine.executions(decision)) == 1
            assert len(sent) == 1, (name, sent)
            retries += calls - 1
            posts += len(sent)
        bad = [execute("dec_any", webhook.url, "c_bad", timeout_seconds=0.01), "no"]
        async with agent(conn, tmp_path / "bad.sqlite", bad) as (graph, _):
            short = await graph.ainvoke({"messages": [("user", "go")]}, config("bad"))
    [refused] = tool_messages(short)
    assert "timeout_seconds must be a number from 1 to 60" in str(refused.content)
    figure("unknown_delivery", scenarios=len(scenarios), model_retries=retries, posts=posts)
    assert posts == len(scenarios)


# ------------------------------------------------------------------ invariant 9 and resumes


async def test_no_run_setting_can_loosen_a_gate_and_each_refusal_names_it(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """Every looser policy for every gate, as a mapping or a bare policy, through
    ``configurable`` and through ``context``: each refused before anything runs."""
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
        replies = [execute(decision, webhook.url, "c1"), "x"]
        async with agent(conn, tmp_path / "cp.sqlite", replies, on_denial="halt") as (graph, m):
            requests: list[Any] = [
                {gate: loose} for gate in GATES for loose in ("report", "escalate")
            ] + ["report", "escalate"]
            attempts = refused = 0
            for where in ("configurable", "context"):
                for n, loose in enumerate(requests):
                    attempts += 1
                    thread = f"{where}-{n}"
                    if where == "context":
                        cfg, kwargs = config(thread), {"context": {"on_denial": loose}}
                    else:
                        cfg, kwargs = config(thread, on_denial=loose), {}
                    with pytest.raises(ValueError, match="is looser than this graph's 'halt'"):
                        await graph.ainvoke({"messages": [("user", "go")]}, cfg, **kwargs)
                    refused += 1
            strict = config("ok", on_denial="halt")
            out = await graph.ainvoke({"messages": [("user", "go")]}, strict)
    executions = len(engine.executions(decision))
    figure("loosening_refused", attempts=attempts, refused=refused, executions=executions)
    assert attempts == refused == 2 * (2 * len(GATES) + 2)
    assert len(m.bound_tools) == 1 and out["denials"][0]["policy"] == "halt"
    assert executions == 0 and webhook.received == []


async def test_a_malformed_run_setting_is_a_clear_error(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    async with (
        open_connection(engine) as conn,
        agent(conn, tmp_path / "cp.sqlite", ["x"] * 4) as (graph, _),
    ):
        for bad, message in (
            ({"on_denial": "{bad"}, "not valid JSON"),
            ({"on_denial": {"speed": "halt"}}, "unknown gate 'speed'; the gates are idem"),
            ({"on_denial": 3}, "must be a policy"),
            ({"top_k": 0}, "top_k"),
        ):
            with pytest.raises(ValueError, match=message):
                await graph.ainvoke({"messages": [("user", "go")]}, config("t", **bad))


async def test_a_resume_without_the_runs_context_completes_the_escalation(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
        replies = [execute(decision, webhook.url, "c1"), "done"]
        built = {"confidence": "report"}
        async with agent(conn, tmp_path / "cp.sqlite", replies, on_denial=built) as (graph, _):
            stricter = config("t", on_denial={"confidence": "escalate"})
            await graph.ainvoke({"messages": [("user", "go")]}, stricter)
            out = await graph.ainvoke(Command(resume=OVERRIDE), config("t"))  # no context
    [decided] = out["operator_decisions"]
    assert (decided["operator"], decided["result"]) == ("ana", "receipt")
    assert len(engine.executions(decision)) == 1 and len(webhook.received) == 1


# ------------------------------------------------------------------ step limit


async def test_a_model_that_loops_stops_cleanly_at_the_step_limit(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    loop = [call("get_contract", {}, f"c{i}") for i in range(50)]
    async with (
        open_connection(engine) as conn,
        agent(conn, tmp_path / "cp.sqlite", loop, step_limit=12) as (graph, m),
    ):
        out = await graph.ainvoke({"messages": [("user", "loop")]}, config("t"))
    last = out["messages"][-1]
    assert last.content == STEP_LIMIT_MESSAGE.format(limit=12) and not last.tool_calls
    assert 2 <= len(m.bound_tools) < 12
