"""The governed tool node and the routing of a step (scripted engine answers;
``docs/ARCHITECTURE.md``, invariants 2, 3, 5, 7, 8). The same behaviour against the reference
engine over HTTP: ``tests/integration/test_graph.py``, ``test_governance.py``,
``test_graph_recovery.py``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from datetime import datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest
from governed_stub import (
    HOOK,
    answer,
    config,
    denial_body,
    execute_call,
    make_node,
    receipt_body,
    step_state,
)
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    MessageLikeRepresentation,
    ToolMessage,
)

from algenta_graph.connection.outcomes import ExecutionDenial, ExecutionFailure, ExecutionReceipt
from algenta_graph.errors import AlgentaGraphError
from algenta_graph.governance.run_settings import run_settings
from algenta_graph.nodes import recovery as governed_tool
from algenta_graph.nodes.arguments import bound_plans, idempotency_key, plan_nonce
from algenta_graph.nodes.executor import for_decision
from algenta_graph.nodes.governed_tool import GovernedToolNode
from algenta_graph.nodes.recovery import counts_as_executed, settle_for
from algenta_graph.nodes.steps import (
    OUTCOME_KEY,
    denial_text,
    gate_order,
    in_place,
    last_step,
    latest_user_text,
    message_text,
    receipt_text,
    step_denials,
    tool_message,
)
from algenta_graph.topology import HALT


def unchained(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without their audit-chain links (``seq``, ``prev``, ``hash``: tested in
    tests/unit/test_chain*.py), after checking each one has them."""
    assert all({"seq", "prev", "hash"} <= set(r) for r in records), records
    return [{k: v for k, v in r.items() if k not in ("seq", "prev", "hash")} for r in records]


def run(node: GovernedToolNode, state: dict[str, Any], conf: Any = None) -> dict[str, Any]:
    return asyncio.run(node(state, conf if conf is not None else config()))  # type: ignore[arg-type]


def after(state: dict[str, Any], update: dict[str, Any]) -> Any:
    """``state`` with ``update`` applied as the graph's reducers would (appending)."""
    out = dict(state)
    for key in ("messages", "receipts", "denials"):
        out[key] = list(state.get(key) or []) + list(update.get(key) or [])
    return out


def outcome_of(message: ToolMessage) -> str:
    return str(message.response_metadata[OUTCOME_KEY])


# --------------------------------------------------------------------------- execute_decision


def test_a_receipt_is_recorded_tagged_and_routed_ok() -> None:
    node, conn, _ = make_node()
    artifact = {"structured_content": receipt_body()}
    conn.answers = [answer(receipt_body(), artifact=artifact)]
    call = execute_call(metadata={"note": "kept", "algenta_graph": {"thread_id": "forged"}})
    update = run(node, step_state(call))
    assert conn.calls == [
        (
            "execute_decision",
            {
                "decision_id": "d1",
                "webhook_url": HOOK,
                "metadata": {
                    "note": "kept",
                    "algenta_graph": {"thread_id": "t1", "tool_call_id": "c1"},
                },
            },
            "c1",
        )
    ]
    assert unchained(update["receipts"]) == [
        {"kind": "receipt", **receipt_body(), "tool_call_id": "c1", "source": "model"}
    ]
    assert "denials" not in update and "selected_tools" not in update
    (message,) = update["messages"]
    assert (message.status, outcome_of(message), message.tool_call_id) == ("success", "ok", "c1")
    assert message.name == "execute_decision" and message.artifact == artifact
    assert message.content.startswith("Executed decision d1: delivered (webhook")
    assert GovernedToolNode.route(after(step_state(call), update)) == "ok"


def test_non_mapping_model_metadata_is_replaced_by_the_tag() -> None:
    node, conn, _ = make_node()
    conn.answers = [answer(receipt_body())]
    run(node, step_state(execute_call(metadata="junk")), config(thread_id=None))
    assert conn.calls[0][1]["metadata"] == {
        "algenta_graph": {"thread_id": None, "tool_call_id": "c1"}
    }


def test_a_failed_delivery_is_a_receipt_routed_as_failed() -> None:
    node, conn, _ = make_node()
    conn.answers = [answer(receipt_body(execution_status="failed", response_code=500))]
    update = run(node, step_state(execute_call()))
    assert [r["execution_status"] for r in update["receipts"]] == ["failed"]
    (message,) = update["messages"]
    assert (message.status, outcome_of(message)) == ("error", "failed")
    assert GovernedToolNode.route(after(step_state(execute_call()), update)) == "failed"


def test_a_receipt_for_another_decision_is_not_recorded_as_this_calls_receipt() -> None:
    node, conn, _ = make_node()
    conn.answers = [answer(receipt_body("d_other"))]
    update = run(node, step_state(execute_call("d_mine")))
    assert "receipts" not in update and "denials" not in update
    (message,) = update["messages"]
    assert (message.status, outcome_of(message)) == ("error", "failed")
    assert "'d_other'" in message.content and "'d_mine'" in message.content
    assert GovernedToolNode.route(after(step_state(execute_call("d_mine")), update)) == "failed"
    # nor does it block the other decision in this thread afterwards
    conn.answers = [answer(receipt_body("d_other"))]
    again = run(node, step_state(execute_call("d_other", "c2")))
    assert [r["decision_id"] for r in again["receipts"]] == ["d_other"]


def test_for_decision_keeps_everything_but_another_decisions_receipt() -> None:
    mine = ExecutionReceipt.model_validate(receipt_body("d1"))
    assert for_decision(mine, "d1") is mine
    other = for_decision(mine, "d2")
    assert isinstance(other, ExecutionFailure)
    assert other.message == (
        "the engine answered with a receipt for decision 'd1', not the decision executed ('d2')"
    )
    assert json.loads(other.raw)["decision_id"] == "d1"
    denial = ExecutionDenial(gate="confidence", code="c", message="m")
    assert for_decision(denial, "d2") is denial


@pytest.mark.parametrize("policy", ["report", "escalate", "halt"])
def test_a_denial_is_recorded_with_the_policy_of_its_run(policy: str) -> None:
    node, conn, _ = make_node(policies={"confidence": "report"})
    conn.answers = [answer(denial_body("confidence"), status="error")]
    state = step_state(execute_call(timeout_seconds=5))
    update = run(node, state, config(on_denial={"confidence": policy}))
    (recorded,) = update["denials"]
    # an escalated denial gets an identity of its own when it is raised (invariant 12)
    identity = recorded.pop("escalation_id", None)
    assert (identity is not None) == (policy == "escalate")
    assert identity is None or re.fullmatch(r"esc_[0-9a-f]{32}", identity)
    # ... and the time it was raised (its asked_at, from which a deadline counts)
    raised = recorded.pop("raised_at", None)
    assert (raised is not None) == (policy == "escalate")
    assert raised is None or datetime.fromisoformat(raised).tzinfo is not None
    assert unchained(update["denials"]) == [
        {
            "kind": "denial",
            "gate": "confidence",
            "code": "execution_blocked_confidence",
            "message": "blocked by confidence",
            "override_hint": "ask an operator",
            "status_code": None,
            "decision_id": "d1",
            "webhook_url": HOOK,
            "tool_call_id": "c1",
            "source": "model",
            "policy": policy,
            "timeout_seconds": 5,
        }
    ]
    assert "receipts" not in update
    (message,) = update["messages"]
    assert (message.status, outcome_of(message)) == ("error", "gate:confidence")
    expected = ExecutionDenial(**denial_body("confidence")["error"])
    assert message.content == denial_text("d1", expected)
    assert GovernedToolNode.route(after(state, update)) == "confidence"


def test_a_denial_without_a_timeout_records_none() -> None:
    node, conn, _ = make_node()
    conn.answers = [answer(denial_body("risk_floor"))]
    update = run(node, step_state(execute_call()))
    assert "timeout_seconds" not in update["denials"][0]
    assert update["denials"][0]["policy"] == "escalate"


def test_an_unknown_gate_is_recorded_and_halts() -> None:
    node, conn, _ = make_node()
    conn.answers = [answer(denial_body("approval"))]
    state = step_state(execute_call())
    update = run(node, state)
    assert [(d["gate"], d["policy"]) for d in update["denials"]] == [("approval", "halt")]
    assert GovernedToolNode.route(after(state, update)) == HALT


def test_neither_receipt_nor_denial_is_a_failure_recording_nothing() -> None:
    node, conn, _ = make_node()
    conn.answers = [answer({"status": "pending"})]
    update = run(node, step_state(execute_call()))
    assert set(update) == {"messages"}
    (message,) = update["messages"]
    assert (message.status, outcome_of(message)) == ("error", "failed")
    assert message.content.startswith(
        "Error: execute_decision for decision d1 returned neither a receipt nor a named-gate "
        "denial: unrecognised execute_decision result"
    )


def test_a_connection_error_is_named_and_records_nothing() -> None:
    node, conn, _ = make_node()
    conn.answers = [AlgentaGraphError("engine at http://x is down")]
    update = run(node, step_state(execute_call()))
    assert set(update) == {"messages"}
    (message,) = update["messages"]
    assert message.content == (
        "Error: execute_decision for decision d1 failed: engine at http://x is down"
    )
    assert (message.status, outcome_of(message)) == ("error", "failed")


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"decision_id": 7}, "decision_id must be a string, got int"),
        ({"webhook_url": None}, "webhook_url must be a string, got NoneType"),
        ({"timeout_seconds": 0.5}, "timeout_seconds must be a number from 1 to 60, got 0.5"),
        ({"timeout_seconds": 61}, "got 61"),
        ({"timeout_seconds": True}, "got True"),
        ({"timeout_seconds": "5"}, "got '5'"),
        ({"timeout_seconds": math.inf}, "got inf"),
        ({"timeout_seconds": math.nan}, "got nan"),
    ],
)
def test_malformed_arguments_are_named_and_never_sent(extra: dict[str, Any], needle: str) -> None:
    node, conn, _ = make_node()
    call = execute_call()
    call["args"].update(extra)
    update = run(node, step_state(call))
    assert conn.calls == []
    (message,) = update["messages"]
    assert message.content.startswith("Error: execute_decision was not called: ")
    assert needle in message.content
    assert (message.status, outcome_of(message)) == ("error", "failed")


def test_both_bad_ids_are_named_together() -> None:
    node, _, _ = make_node()
    call = execute_call(None)
    call["args"]["webhook_url"] = 3
    (message,) = run(node, step_state(call))["messages"]
    assert message.content == (
        "Error: execute_decision was not called: decision_id must be a string, got NoneType; "
        "webhook_url must be a string, got int"
    )


@pytest.mark.parametrize("timeout", [1, 1.0, 60, 60.0, 30.5])
def test_timeouts_within_bounds_are_sent(timeout: float) -> None:
    node, conn, _ = make_node()
    conn.answers = [answer(receipt_body())]
    run(node, step_state(execute_call(timeout_seconds=timeout)))
    assert conn.calls[0][1]["timeout_seconds"] == timeout


def test_a_decision_this_thread_executed_is_never_sent_again() -> None:
    node, conn, _ = make_node()
    earlier = {**receipt_body(execution_status="failed"), "source": "model"}
    state = step_state(execute_call(), receipts=[earlier])
    update = run(node, state)
    assert conn.calls == []
    (denial,) = update["denials"]
    assert (denial["gate"], denial["source"], denial["policy"]) == (
        "idempotency",
        "thread_receipts",
        "report",
    )
    assert denial["code"] == "execution_blocked_idempotency"
    assert "already executed in this thread" in denial["message"]
    assert outcome_of(update["messages"][0]) == "gate:idempotency"
    assert GovernedToolNode.route(after(state, update)) == "idempotency"


def test_the_same_decision_twice_in_one_step_is_sent_once() -> None:
    node, conn, _ = make_node()
    conn.answers = [answer(receipt_body())]
    update = run(node, step_state(execute_call("d1", "c1"), execute_call("d1", "c2")))
    assert len(conn.calls) == 1
    assert [r["tool_call_id"] for r in update["receipts"]] == ["c1"]
    assert [(d["tool_call_id"], d["source"]) for d in update["denials"]] == [
        ("c2", "thread_receipts")
    ]


# --------------------------------------------------------------------------- recovery


def execution(decision_id: str, thread: Any, status: str = "delivered", **extra: Any) -> Any:
    tag = {"thread_id": thread, "tool_call_id": "c0", **extra.pop("tag", {})}
    return {
        **receipt_body(decision_id, execution_status=status),
        "force": False,
        "override_safety": False,
        "kind": "junk",
        "metadata": {"algenta_graph": tag},
        **extra,
    }


def test_an_idempotency_denial_for_this_threads_own_delivery_recovers_its_receipt() -> None:
    node, conn, _ = make_node()
    conn.answers = [answer(denial_body("idempotency"))]
    conn.executions["d1"] = [
        execution("d1", "other-thread"),
        "junk",
        execution("d1", "t1"),
    ]
    state = step_state(execute_call())
    update = run(node, state)
    assert conn.get_decision_calls == ["d1"]
    assert unchained(update["receipts"]) == [
        {"kind": "receipt", **receipt_body(), "tool_call_id": "c1", "source": "recovered"}
    ]
    assert "denials" not in update
    (message,) = update["messages"]
    assert (message.status, outcome_of(message)) == ("success", "ok")
    assert "(executed earlier by this thread; receipt recovered)." in message.content
    assert GovernedToolNode.route(after(state, update)) == "ok"


def test_a_recovered_failed_delivery_is_routed_as_failed() -> None:
    node, conn, _ = make_node()
    conn.answers = [answer(denial_body("idempotency"))]
    conn.executions["d1"] = [execution("d1", "t1", status="failed")]
    update = run(node, step_state(execute_call()))
    assert [r["source"] for r in update["receipts"]] == ["recovered"]
    assert (update["messages"][0].status, outcome_of(update["messages"][0])) == ("error", "failed")


@pytest.mark.parametrize("owner", ["other-thread", None])
def test_another_threads_delivery_is_not_claimed(owner: Any) -> None:
    node, conn, _ = make_node()
    conn.answers = [answer(denial_body("idempotency"))]
    conn.executions["d1"] = [execution("d1", owner)]
    update = run(node, step_state(execute_call()))
    assert "receipts" not in update
    assert [d["gate"] for d in update["denials"]] == ["idempotency"]


def test_without_a_thread_nothing_is_recovered_nor_looked_up() -> None:
    node, conn, _ = make_node()
    conn.answers = [answer(denial_body("idempotency"))]
    conn.executions["d1"] = [execution("d1", None)]
    update = run(node, step_state(execute_call()), config(thread_id=None))
    assert conn.get_decision_calls == []
    assert [d["gate"] for d in update["denials"]] == ["idempotency"]


def test_other_gates_never_look_up_the_engine() -> None:
    node, conn, _ = make_node()
    conn.answers = [answer(denial_body("confidence"))]
    conn.executions["d1"] = [execution("d1", "t1")]
    update = run(node, step_state(execute_call()))
    assert conn.get_decision_calls == []
    assert "receipts" not in update


def find(node: GovernedToolNode, decision_id: Any, thread: str = "t1", settle: float = 0.0) -> Any:
    ours = lambda tag: tag.get("thread_id") == thread  # noqa: E731
    if settle:
        return asyncio.run(node.executor.find(decision_id, ours, settle=settle))
    return asyncio.run(node.executor.find(decision_id, ours))


def test_find_execution_prefers_a_delivery_then_the_latest_attempt() -> None:
    node, conn, _ = make_node()
    first = execution("d1", "t1", status="failed", response_code=500)
    delivered = execution("d1", "t1", response_code=201)
    last = execution("d1", "t1", status="failed", response_code=502)
    conn.executions["d1"] = [first, delivered, last]
    receipt, tag = find(node, "d1")
    assert (receipt.execution_status, receipt.response_code) == ("delivered", 201)
    assert tag == {"thread_id": "t1", "tool_call_id": "c0"}
    conn.executions["d1"] = [first, last]
    assert find(node, "d1")[0].response_code == 502
    conn.executions["d1"] = [execution("d1", "t1"), execution("d1", "t1", response_code=204)]
    assert find(node, "d1")[0].response_code == 200  # the first delivery


def test_find_execution_reads_only_well_formed_own_executions() -> None:
    node, conn, _ = make_node()
    conn.executions["d1"] = [
        None,
        "junk",
        {**execution("d1", "t1"), "metadata": "junk"},
        {**execution("d1", "t1"), "metadata": {"algenta_graph": "junk"}},
        {**execution("d1", "t1"), "metadata": None},
        execution("d2", "t1"),  # another decision's execution
        {**execution("d1", "t1"), "execution_status": "pending"},  # not a receipt
    ]
    assert find(node, "d1") is None
    # the engine's own fields (force, override_safety, metadata, kind) never reach the receipt
    conn.executions["d1"] = [execution("d1", "t1", trace_id="x")]
    receipt, _ = find(node, "d1")
    dumped = receipt.model_dump()
    assert dumped["kind"] == "receipt" and dumped["trace_id"] == "x"
    assert not {"force", "override_safety", "metadata"} & set(dumped)


def test_find_execution_tolerates_a_failing_or_odd_engine() -> None:
    node, conn, _ = make_node()
    assert find(node, 123) is None and conn.get_decision_calls == []
    conn.get_decision_error = AlgentaGraphError("down")
    assert find(node, "d1") is None
    conn.get_decision_error = None
    conn.executions["d1"] = None  # type: ignore[assignment]
    assert find(node, "d1") is None
    conn.get_decision_result = ["not", "a", "record"]
    assert find(node, "d1") is None


# --------------------------------------------------------------------------- other tools


def test_search_tools_is_answered_here_and_its_hits_join_the_selection() -> None:
    node, conn, catalog = make_node()
    catalog.search_result = ('{"tools": ["x"]}', ["simulate", "execute_decision"], True)
    call = {"name": "search_tools", "args": {"query": "sim"}, "id": "s1", "type": "tool_call"}
    update = run(node, step_state(call))
    assert catalog.searches == [{"query": "sim"}] and conn.calls == []
    assert update["selected_tools"] == ["execute_decision", "simulate"]
    (message,) = update["messages"]
    assert (message.content, message.status, outcome_of(message)) == (
        '{"tools": ["x"]}',
        "success",
        "ok",
    )
    catalog.search_result = ("Error: bad", [], False)
    failed = run(node, step_state(call))
    assert "selected_tools" not in failed
    assert (failed["messages"][0].status, outcome_of(failed["messages"][0])) == ("error", "failed")


def test_a_tool_outside_the_runs_profile_is_refused_without_a_call() -> None:
    node, conn, _ = make_node()
    update = run(node, step_state(execute_call()), config(profile="observe"))
    assert conn.calls == []
    (message,) = update["messages"]
    assert message.content == (
        "Error: tool 'execute_decision' is not in the active profile 'observe'; it was not called"
    )
    assert (message.status, outcome_of(message)) == ("error", "failed")
    unknown = {"name": "nope", "args": {}, "id": "n1", "type": "tool_call"}
    (refused,) = run(node, step_state(unknown))["messages"]
    assert refused.content.endswith("is not in the active profile 'execute'; it was not called")
    assert conn.calls == []


@pytest.mark.parametrize(
    ("result", "status", "outcome", "content"),
    [
        (answer({"ok": 1}), "success", "ok", '{"ok": 1}'),
        (answer("bad", status="error"), "error", "failed", "bad"),
        (AlgentaGraphError("down"), "error", "failed", "Error: down"),
    ],
)
def test_a_plain_tool_call(result: Any, status: str, outcome: str, content: str) -> None:
    node, conn, _ = make_node()
    conn.answers = [result]
    call = {"name": "simulate", "args": {"force": 1}, "id": "p1", "type": "tool_call"}
    (message,) = run(node, step_state(call))["messages"]
    assert conn.calls == [("simulate", {"force": 1}, "p1")]  # the connection scrubs
    assert (message.status, outcome_of(message), message.content) == (status, outcome, content)
    assert message.name == "simulate" and message.tool_call_id == "p1"


def test_a_shadow_execute_decision_is_a_plain_call_never_a_receipt() -> None:
    node, conn, catalog = make_node()
    catalog.tools.add("execute_decision")
    conn.is_algenta_tool = lambda name: False  # type: ignore[method-assign]
    conn.answers = [answer(receipt_body())]
    update = run(node, step_state(execute_call()))
    assert "receipts" not in update
    assert outcome_of(update["messages"][0]) == "ok"


def test_plain_content_joins_text_blocks_and_passes_the_rest() -> None:
    node, conn, _ = make_node()
    blocks: list[Any] = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    image: list[Any] = [{"type": "image", "data": "x"}]
    conn.answers = [
        ToolMessage(content=blocks, tool_call_id="x"),
        ToolMessage(content=image, tool_call_id="x"),
        ToolMessage(content="plain", tool_call_id="x"),
    ]
    call = {"name": "simulate", "args": {}, "id": "p", "type": "tool_call"}
    contents = [run(node, step_state(call))["messages"][0].content for _ in range(3)]
    assert contents == ["a\nb", image, "plain"]


def test_answered_calls_are_skipped_and_no_tool_step_is_no_update() -> None:
    node, conn, _ = make_node()
    state = step_state(execute_call("d1", "c1"), execute_call("d2", "c2"))
    state["messages"].append(ToolMessage("done", tool_call_id="c1"))
    conn.answers = [answer(receipt_body("d2"))]
    update = run(node, state)
    assert [c[2] for c in conn.calls] == ["c2"]
    assert [m.tool_call_id for m in update["messages"]] == ["c2"]
    assert run(node, {"messages": [HumanMessage("hi")]}) == {}
    assert run(node, {}) == {}


# --------------------------------------------------------------------------- routing


def tm(call_id: str, outcome: str | None = None) -> ToolMessage:
    meta = {OUTCOME_KEY: outcome} if outcome else {}
    return ToolMessage("x", tool_call_id=call_id, response_metadata=meta)


def routed(outcomes: list[str | None], denials: list[dict[str, Any]] | None = None) -> str:
    calls = [execute_call(f"d{i}", f"c{i}") for i in range(len(outcomes))]
    messages = [HumanMessage("go"), AIMessage("", tool_calls=calls)]
    messages += [tm(f"c{i}", o) for i, o in enumerate(outcomes)]
    return GovernedToolNode.route({"messages": messages, "denials": denials or []})  # type: ignore[typeddict-item]


def d(gate: str, call: str = "c0", policy: Any = None, source: str = "model") -> dict[str, Any]:
    out = {"gate": gate, "tool_call_id": call, "source": source}
    if policy is not None:
        out["policy"] = policy
    return out


def test_route_names_ok_failed_or_halt_without_denials() -> None:
    assert routed(["ok", None]) == "ok"
    assert routed(["ok", "failed"]) == "failed"
    assert routed(["gate:confidence"]) == HALT  # a gate outcome without its denial record
    assert routed([]) == "ok"


def test_route_takes_the_strictest_policy_ties_in_table_order() -> None:
    assert routed(["x", "x"], [d("risk_floor", "c1", "report"), d("confidence", "c0", "report")])
    assert (
        routed(["x", "x"], [d("risk_floor", "c1", "report"), d("confidence", "c0", "report")])
        == "confidence"
    )
    assert (
        routed(["x", "x"], [d("confidence", "c0", "escalate"), d("idempotency", "c1", "halt")])
        == "idempotency"
    )
    assert routed(["x"], [d("geo_fence", "c0", "report")]) == HALT
    assert routed(["x", "x"], [d("confidence", "c0"), d("idempotency", "c1")]) == "confidence"


def test_gate_order_uses_the_recorded_policy_else_the_default() -> None:
    assert gate_order([]) == []
    assert gate_order([d("idempotency"), d("confidence")]) == ["confidence", "idempotency"]
    assert gate_order([d("idempotency", policy="halt"), d("confidence")]) == [
        "idempotency",
        "confidence",
    ]
    assert gate_order([d("confidence", policy="bogus"), d("risk_floor", policy="report")]) == [
        "confidence",
        "risk_floor",
    ]
    # the strictest of one gate's denials counts, whatever their order
    assert gate_order(
        [d("confidence", policy="report"), d("confidence", policy="halt"), d("risk_floor")]
    ) == ["confidence", "risk_floor"]
    assert gate_order(
        [d("confidence", policy="halt"), d("confidence", policy="report"), d("risk_floor")]
    ) == ["confidence", "risk_floor"]
    # an unknown gate halts, and sorts before the table's gates among equals
    assert gate_order([d("risk_floor", policy="halt"), d("geo_fence")]) == [
        "geo_fence",
        "risk_floor",
    ]
    assert gate_order([d("idempotency", policy="halt"), d("geo_fence")]) == [
        "geo_fence",
        "idempotency",
    ]


def test_step_denials_are_the_latest_steps_model_and_thread_denials() -> None:
    calls = [execute_call("d0", "c0"), execute_call("d1", "c1")]
    old = AIMessage("", tool_calls=[execute_call("d9", "old")])
    messages = [old, tm("old"), AIMessage("", tool_calls=calls), tm("c0"), tm("c1")]
    denials = [
        d("confidence", "old"),
        d("confidence", "c0"),
        d("risk_floor", "c1", source="thread_receipts"),
        d("risk_floor", "c1", source="operator"),
        {"gate": "x", "tool_call_id": "c0"},
    ]
    found = step_denials({"messages": messages, "denials": denials})
    assert found == [denials[1], denials[2]]
    assert step_denials({"messages": [], "denials": denials}) == []
    assert step_denials({}) == []


def test_last_step_is_the_latest_ai_message_with_calls_and_its_answers() -> None:
    first = AIMessage("", tool_calls=[execute_call("d", "a")])
    second = AIMessage("", tool_calls=[execute_call("d", "b"), execute_call("d", "c")])
    messages = [first, tm("a"), tm("b"), second, tm("b"), tm("a"), AIMessage("final"), tm("c")]
    ai, answers = last_step(messages)
    assert ai is second
    assert [m.tool_call_id for m in answers] == ["b", "c"]
    assert last_step([HumanMessage("x"), AIMessage("no calls")]) == (None, [])
    assert last_step([]) == (None, [])


# --------------------------------------------------------------------------- texts


def test_what_the_model_is_told() -> None:
    denial = ExecutionDenial(gate="risk_floor", code="execution_blocked_risk_floor", message="low")
    text = denial_text("d1", denial)
    assert text.startswith(
        "DENIED: execute_decision for decision d1 was blocked by the risk_floor gate "
        "(execution_blocked_risk_floor): low. Nothing was executed. "
    )
    assert "cannot override this gate" in text and "Tell the user which gate" in text
    receipt = ExecutionReceipt.model_validate(receipt_body(response_code=202))
    told = receipt_text(receipt, " (note)")
    head, body = told.split("\nReceipt: ")
    assert head == f"Executed decision d1: delivered (webhook {HOOK} answered 202) (note)."
    assert json.loads(body) == receipt.model_dump(mode="json")
    assert body == json.dumps(receipt.model_dump(mode="json"), sort_keys=True)
    assert receipt_text(receipt).split("\n")[0].endswith("answered 202).")


def test_the_turns_query_and_tool_message() -> None:
    # the query is the latest user message's text (LangChain's own BaseMessage.text)
    assert message_text(HumanMessage("plain")) == "plain"
    blocks = HumanMessage(content=["a", {"type": "text", "text": "b"}, {"type": "image"}])
    assert message_text(blocks) == "a b"  # an image block is not text
    assert latest_user_text([HumanMessage("old"), blocks, AIMessage("x")]) == "a b"
    assert latest_user_text([AIMessage("x")]) == ""
    message = tool_message("x", name="n", tool_call_id="c", outcome="ok")
    assert (message.status, message.response_metadata, message.artifact) == (
        "success",
        {OUTCOME_KEY: "ok"},
        None,
    )
    assert message.id and len(message.id) == 36
    other = tool_message("x", name="n", tool_call_id="c", outcome="ok")
    assert other.id != message.id
    fixed = tool_message("x", name="n", tool_call_id="c", outcome="ok", msg_id="m1")
    assert fixed.id == "m1"


# --------------------------------------------------------------------------- details


def test_the_runs_context_is_read_from_the_runtime() -> None:
    node, conn, _ = make_node()
    runtime = SimpleNamespace(context={"on_denial": {"confidence": "halt"}, "top_k": 2})
    conf = {"configurable": {"thread_id": "t1"}}
    settings = run_settings(conf, runtime, node.built)  # type: ignore[arg-type]
    assert (settings.top_k, settings.policies["confidence"]) == (2, "halt")
    none = run_settings(None, None, node.built)
    assert none.top_k == 5 and none.thread_id is None
    conn.answers = [answer(denial_body("confidence"))]
    update = asyncio.run(node(step_state(execute_call()), conf, runtime))  # type: ignore[arg-type]
    assert [d["policy"] for d in update["denials"]] == ["halt"]


def test_every_call_of_a_step_is_answered_whatever_happens_to_the_others() -> None:
    node, conn, catalog = make_node()
    conn.answers = [answer(receipt_body("d2")), answer({"ok": 1})]
    refused = {"name": "nope", "args": {}, "id": "n1", "type": "tool_call"}
    search = {"name": "search_tools", "args": {"query": "q"}, "id": "s1", "type": "tool_call"}
    plain = {"name": "simulate", "args": {}, "id": "p1", "type": "tool_call"}
    state = step_state(refused, execute_call("d2", "c2"), search, plain)
    update = run(node, state, config(top_k=3))
    assert [(m.tool_call_id, m.name) for m in update["messages"]] == [
        ("n1", "nope"),
        ("c2", "execute_decision"),
        ("s1", "search_tools"),
        ("p1", "simulate"),
    ]
    assert catalog.search_runs[0].top_k == 3  # the search sees this run's settings


def test_a_call_without_an_id_is_answered_with_an_empty_id() -> None:
    node, conn, _ = make_node()
    conn.answers = [answer({"ok": 1})]
    call: dict[str, Any] = {"name": "simulate", "args": {}, "id": None, "type": "tool_call"}
    (message,) = run(node, step_state(call))["messages"]
    assert message.tool_call_id == "" and conn.calls[0][2] == ""


def test_the_engines_artifact_travels_with_every_execute_answer() -> None:
    artifact = {"structured_content": {"x": 1}}
    for body in (denial_body("confidence"), {"status": "pending"}):
        node, conn, _ = make_node()
        conn.answers = [answer(body, artifact=artifact)]
        (message,) = run(node, step_state(execute_call()))["messages"]
        assert message.artifact == artifact and message.name == "execute_decision"
    node, conn, _ = make_node()
    conn.answers = [answer({"ok": 1}, artifact=artifact)]
    call = {"name": "simulate", "args": {}, "id": "p1", "type": "tool_call"}
    assert run(node, step_state(call))["messages"][0].artifact == artifact


def test_error_answers_name_the_execute_tool() -> None:
    node, conn, _ = make_node()
    conn.answers = [AlgentaGraphError("down")]
    bad = execute_call(timeout_seconds=0)
    for state in (step_state(execute_call()), step_state(bad)):
        (message,) = run(node, state)["messages"]
        assert message.name == "execute_decision" and message.status == "error"
    node, conn, _ = make_node()
    conn.answers = [answer(denial_body("idempotency"))]
    conn.executions["d1"] = [execution("d1", "t1")]
    (recovered,) = run(node, step_state(execute_call()))["messages"]
    assert recovered.name == "execute_decision"


def test_the_thread_receipts_denial_says_why_nothing_was_sent() -> None:
    node, _, _ = make_node()
    state = step_state(execute_call(), receipts=[receipt_body()])
    (denial,) = run(node, state)["denials"]
    assert denial["message"] == (
        "decision d1 was already executed in this thread (its receipt is in the thread's state; "
        "a delivery that failed or timed out may still have reached its target); the graph did "
        "not send it to the engine again, only an operator can"
    )


def test_the_full_denial_text() -> None:
    denial = ExecutionDenial(gate="confidence", code="c", message="m")
    assert denial_text("d1", denial) == (
        "DENIED: execute_decision for decision d1 was blocked by the confidence gate (c): m. "
        "Nothing was executed. You (the model) cannot override this gate, and retrying will be "
        "denied again; only a human operator can override it, outside this conversation. "
        "Tell the user which gate blocked the decision and why."
    )


def test_plain_content_of_odd_blocks() -> None:
    node, conn, _ = make_node()
    conn.answers = [
        ToolMessage(content=[{"type": "text"}, {"type": "text", "text": 5}], tool_call_id="x"),
        SimpleNamespace(content={"k": "v"}, status="success", artifact=None),
    ]
    call = {"name": "simulate", "args": {}, "id": "p", "type": "tool_call"}
    first = run(node, step_state(call))["messages"][0].content
    second = run(node, step_state(call))["messages"][0].content
    assert (first, second) == ("\n5", "{'k': 'v'}")


def test_route_without_messages_is_ok() -> None:
    assert GovernedToolNode.route({"denials": []}) == "ok"  # type: ignore[typeddict-item]
    assert GovernedToolNode.route({}) == "ok"  # type: ignore[typeddict-item]


# --------------------------------------------------------------------------- invariant 8


@pytest.mark.parametrize(
    ("receipt", "executed"),
    [
        ({"execution_status": "delivered"}, True),
        ({"execution_status": "delivered", "retryable": True}, True),
        ({"execution_status": "unknown", "retryable": True}, True),
        ({"execution_status": "failed"}, True),
        ({"execution_status": "failed", "retryable": False}, True),
        ({"execution_status": "failed", "retryable": "true"}, True),
        ({"execution_status": "failed", "retryable": 1}, True),
        ({"execution_status": "FAILED", "retryable": True}, True),
        ({"EXECUTION_STATUS": "failed", "RETRYABLE": True}, True),
        ({"execution_status": "failed", "retryable": True}, False),
        ({}, True),
    ],
)
def test_counts_as_executed_unless_the_engine_says_nothing_was_sent(
    receipt: dict[str, Any], executed: bool
) -> None:
    assert counts_as_executed(receipt) is executed


def test_a_retryable_failed_delivery_may_be_sent_again_by_the_model() -> None:
    node, conn, _ = make_node()
    nothing_sent = {**receipt_body(execution_status="failed", retryable=True), "source": "model"}
    conn.answers = [answer(receipt_body())]
    update = run(node, step_state(execute_call(), receipts=[nothing_sent]))
    assert [c[1]["decision_id"] for c in conn.calls] == ["d1"]
    assert [r["execution_status"] for r in update["receipts"]] == ["delivered"]
    assert "denials" not in update
    # a failure the engine did not call retryable blocks the decision (invariant 8)
    node, conn, _ = make_node()
    maybe_sent = {**receipt_body(execution_status="failed", retryable=False), "source": "model"}
    update = run(node, step_state(execute_call(), receipts=[maybe_sent]))
    assert conn.calls == [] and [d["source"] for d in update["denials"]] == ["thread_receipts"]


def test_a_retryable_failure_in_a_step_lets_the_next_call_of_the_step_send_it() -> None:
    node, conn, _ = make_node()
    conn.answers = [
        answer(receipt_body(execution_status="failed", response_code=None, retryable=True)),
        answer(receipt_body(execution_status="failed", response_code=500)),
    ]
    calls = [execute_call("d1", "c1"), execute_call("d1", "c2"), execute_call("d1", "c3")]
    update = run(node, step_state(*calls))
    assert [c[2] for c in conn.calls] == ["c1", "c2"]  # c2 went out, c3 did not
    assert [r["tool_call_id"] for r in update["receipts"]] == ["c1", "c2"]
    assert [(d["tool_call_id"], d["source"]) for d in update["denials"]] == [
        ("c3", "thread_receipts")
    ]


@pytest.mark.parametrize(
    ("args", "seconds"),
    [
        ({"timeout_seconds": 2}, 7.0),
        ({"timeout_seconds": 2.5}, 7.5),
        ({}, 15.0),
        ({"timeout_seconds": None}, 15.0),
        ({"timeout_seconds": True}, 15.0),
        ({"timeout_seconds": "30"}, 15.0),
        ({"TIMEOUT_SECONDS": 30}, 15.0),
        ({"timeout_seconds": 600}, 65.0),
    ],
)
def test_settle_for_is_the_delivery_timeout_plus_a_margin(
    args: dict[str, Any], seconds: float
) -> None:
    assert settle_for(args) == seconds
    assert type(settle_for(args)) is float


# --------------------------------------------------------------------------- invariant 11


def test_idempotency_key_names_the_attempt_and_hashes_a_long_one() -> None:
    assert idempotency_key("t1:c1") == "algenta-graph:t1:c1"
    longest = "a" * 186  # "algenta-graph:" + 186 characters = 200, the engine's limit
    assert idempotency_key(longest) == "algenta-graph:" + longest
    too_long = "a" * 187
    digest = hashlib.sha256(too_long.encode()).hexdigest()
    assert idempotency_key(too_long) == f"algenta-graph:sha256:{digest}"
    assert len(idempotency_key(too_long)) == 85


def plan_result(
    plan_hash: Any, nonce: Any, *, name: str = "plan_decision", plan_id: Any = None
) -> ToolMessage:
    body = {"plan_hash": plan_hash, "nonce": nonce, "status": "pending"}
    if plan_id is not None:
        body["plan_id"] = plan_id
    return ToolMessage(content=json.dumps(body), name=name, tool_call_id=f"p-{plan_hash}-{nonce}")


def test_plan_nonce_reads_only_plan_decision_results_with_a_nonce() -> None:
    messages: list[Any] = [
        HumanMessage("plan it"),
        plan_result("h1", "n1", name="algenta__plan_decision"),  # a prefixed tool name
        plan_result("h2", "n2"),  # another plan, later
        plan_result("h1", 5),  # not a nonce
        plan_result("h1", "n-sim", name="simulate"),  # not a plan_decision result
        ToolMessage(content="not json", name="plan_decision", tool_call_id="x"),
        ToolMessage(content="[1, 2]", name="plan_decision", tool_call_id="y"),
        ToolMessage(content=json.dumps({"plan_hash": "h1"}), name=None, tool_call_id="z"),
        HumanMessage(content=json.dumps({"plan_hash": "h1", "nonce": "n-human"})),
        AIMessage("done"),
    ]
    assert plan_nonce(messages, "h1") == "n1"
    assert plan_nonce(messages, "h2") == "n2"
    assert plan_nonce(messages, "h3") is None
    assert plan_nonce([], "h1") is None
    structured = ToolMessage(
        content="",
        name="plan_decision",
        tool_call_id="s",
        artifact={"structured_content": {"result": {"plan_hash": "h4", "nonce": "n4"}}},
    )
    assert plan_nonce([structured, AIMessage("x")], "h4") == "n4"


def test_plan_nonce_binds_by_plan_id_and_refuses_to_guess_between_plans() -> None:
    # every proposal of one scenario has the same plan_hash; the nonce must be
    # the one of the plan the decision was logged with, never the latest by hash
    first = plan_result("h1", "n-first", plan_id="p1")
    second = plan_result("h1", "n-second", plan_id="p2")
    messages: list[Any] = [first, second]
    assert plan_nonce(messages, "h1", plan_ids={"p1"}) == "n-first"
    assert plan_nonce(messages, "h1", plan_ids={"p2"}) == "n-second"
    assert plan_nonce(messages, "h1", plan_ids={"p3"}) is None
    assert plan_nonce(messages, "h1", plan_ids=set()) is None
    assert plan_nonce([first, first], "h1") == "n-first"  # the same plan twice is one plan
    with pytest.raises(AlgentaGraphError) as caught:
        plan_nonce(messages, "h1", decision_id="d7")
    assert str(caught.value) == (
        "plan_ambiguous: 2 plan_decision results in this thread could be the plan of d7 "
        "(plan_hash h1; p1, p2); which one approved it cannot be told apart, so nothing was "
        "sent: log the decision with its plan_id"
    )
    with pytest.raises(AlgentaGraphError, match=r"plan_ambiguous: 2 .*\(plan_hash h1; 2 plans\)"):
        plan_nonce([plan_result("h1", "a"), plan_result("h1", "b")], "h1")
    with pytest.raises(AlgentaGraphError, match="plan_ambiguous"):
        plan_nonce(messages, "h1", plan_ids={"p1", "p2"})


def test_the_plans_a_decision_may_run_under_come_from_the_engine() -> None:
    listed = {"plan_id": "p1", "plans": [{"plan_id": "p1", "state": "executed"}]}
    assert bound_plans(listed) == frozenset()  # listed, none approved: none
    listed["plans"].append({"plan_id": "p2", "state": "approved"})  # type: ignore[attr-defined]
    listed["plans"].append({"state": "approved"})  # type: ignore[attr-defined]
    listed["plans"].append("p9")  # type: ignore[attr-defined]
    assert bound_plans(listed) == frozenset({"p2"})
    assert bound_plans({"plan_id": "p1", "plans": []}) == frozenset({"p1"})
    assert bound_plans({"plan_id": ""}) is None and bound_plans({"plan_id": 5}) is None


def strict_node(supplied: frozenset[str], record: Any = None) -> tuple[GovernedToolNode, Any, Any]:
    node, conn, catalog = make_node()
    conn.execute_supplied = supplied
    conn.get_decision_result = record
    return node, conn, catalog


def test_the_graph_supplies_the_idempotency_key_never_the_model() -> None:
    node, conn, _ = strict_node(frozenset({"idempotency_key"}))
    conn.answers = [answer(receipt_body())]
    call = execute_call(idempotency_key="model-key", nonce="model-nonce")
    update = run(node, step_state(call))
    (sent,) = conn.calls
    assert sent[1]["idempotency_key"] == "algenta-graph:t1:c1"
    assert "nonce" not in sent[1]  # this engine does not declare it: the model's is dropped
    assert conn.get_decision_calls == []  # no plan lookup without a nonce
    assert [r["decision_id"] for r in update["receipts"]] == ["d1"]


def test_the_model_never_supplies_them_when_the_engine_declares_none() -> None:
    node, conn, _ = make_node()
    conn.answers = [answer(receipt_body())]
    run(node, step_state(execute_call(idempotency_key="k", nonce="n")))
    assert set(conn.calls[0][1]) == {"decision_id", "webhook_url", "metadata"}
    assert conn.get_decision_calls == []


def test_the_graph_supplies_the_nonce_of_the_decisions_plan() -> None:
    record = {"decision": {"decision_id": "d1", "plan_hash": "h1"}}
    node, conn, _ = strict_node(frozenset({"idempotency_key", "nonce"}), record)
    conn.answers = [answer(receipt_body())]
    state = step_state(execute_call(nonce="model-nonce"))
    state["messages"][1:1] = [plan_result("h1", "n1"), plan_result("h2", "n2")]
    update = run(node, state, config(thread_id="t9"))
    assert conn.get_decision_calls == ["d1"]
    (sent,) = conn.calls
    assert (sent[1]["idempotency_key"], sent[1]["nonce"]) == ("algenta-graph:t9:c1", "n1")
    assert [r["decision_id"] for r in update["receipts"]] == ["d1"]


@pytest.mark.parametrize(
    ("record", "plans", "error"),
    [
        (
            {"decision": {"plan_hash": "h1"}},
            [plan_result("h2", "n2")],
            "no plan_decision result in this thread has plan_hash h1; call plan_decision (and "
            "have an operator approve the plan) before executing",
        ),
        (
            {"decision": {"plan_hash": "h1"}},
            [],
            "no plan_decision result in this thread has plan_hash h1; call plan_decision (and "
            "have an operator approve the plan) before executing",
        ),
        *[
            (
                record,
                [plan_result("", "n0"), plan_result(5, "n5"), plan_result(None, "nn")],
                "decision d1 was logged without a plan_hash; this engine executes only a "
                "decision logged with the plan_hash of a plan_decision result",
            )
            for record in (
                {"decision": {"plan_hash": ""}},
                {"decision": {"plan_hash": 5}},
                {"decision": {"plan_hash": None}},
                {"decision": "h1"},
                {"plan_hash": "h1"},
                {},
            )
        ],
    ],
)
def test_without_the_plans_nonce_nothing_is_sent(
    record: dict[str, Any], plans: list[Any], error: str
) -> None:
    node, conn, _ = strict_node(frozenset({"nonce"}), record)
    state = step_state(execute_call())
    state["messages"][1:1] = plans
    update = run(node, state)
    assert conn.calls == [] and conn.get_decision_calls == ["d1"]
    assert set(update) == {"messages"}
    (message,) = update["messages"]
    assert message.content == f"Error: execute_decision was not called: {error}"
    assert (message.status, outcome_of(message)) == ("error", "failed")


def test_a_failing_plan_lookup_sends_nothing() -> None:
    node, conn, _ = strict_node(frozenset({"nonce"}))
    conn.get_decision_error = AlgentaGraphError("engine down")
    (message,) = run(node, step_state(execute_call()))["messages"]
    assert message.content == "Error: execute_decision was not called: engine down"
    assert conn.calls == []


def test_a_result_without_an_artifact_is_parsed() -> None:
    node, conn, _ = make_node()
    conn.answers = [receipt_body()]  # a plain dict: no artifact attribute at all
    update = run(node, step_state(execute_call()))
    assert [r["decision_id"] for r in update["receipts"]] == ["d1"]
    assert update["messages"][0].artifact is None


# --------------------------------------------------------------------------- names


def renaming_node() -> tuple[GovernedToolNode, Any, Any]:
    """A node whose catalog maps the model's tool names to different real ones."""
    node, conn, catalog = make_node()
    real = {"m_simulate": "simulate", "m_execute": "execute_decision", "m_search": "search_tools"}
    catalog.real_call = lambda name, args: (real.get(name, name), dict(args))  # type: ignore[method-assign]
    return node, conn, catalog


def test_every_answer_carries_the_name_the_model_used() -> None:
    node, conn, _ = renaming_node()
    conn.answers = [answer({"ok": 1}), answer(receipt_body())]
    calls = [
        {"name": "m_simulate", "args": {}, "id": "p1", "type": "tool_call"},
        {**execute_call(), "name": "m_execute"},
        {"name": "m_search", "args": {"query": "q"}, "id": "s1", "type": "tool_call"},
    ]
    update = run(node, step_state(*calls))
    assert [c[0] for c in conn.calls] == ["simulate", "execute_decision"]
    assert [(m.tool_call_id, m.name) for m in update["messages"]] == [
        ("p1", "m_simulate"),
        ("c1", "m_execute"),
        ("s1", "m_search"),
    ]


def _no_id(call: dict[str, Any]) -> dict[str, Any]:
    return {**call, "id": None}


@pytest.mark.parametrize(
    ("call", "scripted", "name", "outcome"),
    [
        ({"name": "search_tools", "args": {"query": "q"}}, [], "search_tools", "ok"),
        ({"name": "nope", "args": {}}, [], "nope", "failed"),
        ({"name": "simulate", "args": {}}, [answer({"ok": 1})], "simulate", "ok"),
        ({"name": "simulate", "args": {}}, [AlgentaGraphError("down")], "simulate", "failed"),
        (execute_call(timeout_seconds=0), [], "execute_decision", "failed"),
        (
            execute_call(),
            [answer(denial_body("confidence"))],
            "execute_decision",
            "gate:confidence",
        ),
        (execute_call(), [answer(receipt_body())], "execute_decision", "ok"),
        (execute_call(), [answer(denial_body("idempotency"))], "execute_decision", "ok"),
    ],
)
def test_an_answer_to_a_call_without_an_id_carries_the_tools_name(
    call: dict[str, Any], scripted: list[Any], name: str, outcome: str
) -> None:
    node, conn, _ = make_node()
    conn.answers = list(scripted)  # the parameter is shared by every run of the test
    conn.executions["d1"] = [execution("d1", "t1")]  # recovered after the idempotency denial
    (message,) = run(node, step_state(_no_id({"type": "tool_call", **call})))["messages"]
    assert (message.name, message.tool_call_id, outcome_of(message)) == (name, "", outcome)


# --------------------------------------------------------------------------- settling


class Clock:
    """Stands in for ``asyncio`` in governed_tool: a scripted loop clock, recorded sleeps."""

    def __init__(self, *times: float) -> None:
        self.times = list(times)
        self.sleeps: list[float] = []

    def get_running_loop(self) -> Any:
        return SimpleNamespace(time=lambda: self.times.pop(0))

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


def looks(conn: Any, *statuses: str) -> None:
    """The engine shows the execution with each status in turn, then the last one."""
    states = list(statuses)

    async def get_decision(decision_id: str) -> dict[str, Any]:
        conn.get_decision_calls.append(decision_id)
        status = states.pop(0) if len(states) > 1 else states[0]
        return {"executions": [execution(decision_id, "t1", status=status)]}

    conn.get_decision = get_decision


def test_an_unknown_execution_is_looked_at_until_the_deadline(monkeypatch: Any) -> None:
    node, conn, _ = make_node()
    looks(conn, "unknown")
    clock = Clock(100.0, 100.5, 101.0, 101.5)  # the deadline is 101.0, reached on the 2nd look
    monkeypatch.setattr(governed_tool, "asyncio", clock)
    receipt, _ = find(node, "d1", settle=1.0)
    assert receipt.execution_status == "unknown"
    assert conn.get_decision_calls == ["d1", "d1"] and clock.sleeps == [0.25]
    assert clock.times == [101.5]


def test_an_unknown_execution_is_read_again_until_it_ends(monkeypatch: Any) -> None:
    node, conn, _ = make_node()
    looks(conn, "unknown", "unknown", "delivered")
    clock = Clock(0.0, 1.0, 2.0, 3.0)
    monkeypatch.setattr(governed_tool, "asyncio", clock)
    receipt, _ = find(node, "d1", settle=10.0)
    assert receipt.execution_status == "delivered"
    assert len(conn.get_decision_calls) == 3 and clock.sleeps == [0.25, 0.25]


def test_without_settling_an_unknown_execution_is_looked_at_once(monkeypatch: Any) -> None:
    node, conn, _ = make_node()
    looks(conn, "unknown", "unknown", "delivered")
    clock = Clock(5.0, 5.0, 5.0, 5.0)
    monkeypatch.setattr(governed_tool, "asyncio", clock)
    assert find(node, "d1")[0].execution_status == "unknown"
    recovered = asyncio.run(node.executor.recover("d1", "t1"))
    assert recovered is not None and recovered.execution_status == "unknown"
    assert conn.get_decision_calls == ["d1", "d1"] and clock.sleeps == [] and clock.times == []


def test_recovery_waits_for_an_in_flight_delivery_of_this_thread() -> None:
    node, conn, _ = make_node()
    looks(conn, "unknown", "delivered")
    conn.answers = [answer(denial_body("idempotency"))]
    update = run(node, step_state(execute_call(timeout_seconds=1)))
    assert [(r["execution_status"], r["source"]) for r in update["receipts"]] == [
        ("delivered", "recovered")
    ]
    assert conn.get_decision_calls == ["d1", "d1"]


# --------------------------------------------------------------------------- the usage signal


class Usage:
    """Records what the node feeds the usage signal; raises for the tools in ``failing``."""

    def __init__(self, *failing: str) -> None:
        self.records: list[tuple[str, str, str, bool, list[str]]] = []
        self.failing = failing

    def has_store(self, store: Any) -> bool:
        """It keeps its own history (as a signal built with a store does)."""
        return True

    async def arecord(
        self,
        query: str,
        tool_id: str,
        *,
        profile: str,
        ok: bool,
        allowed: list[str],
        store: Any = None,
    ) -> bool:
        if tool_id in self.failing:
            raise RuntimeError(f"store of {tool_id} is down")
        self.records.append((query, tool_id, profile, ok, sorted(allowed)))
        return ok


def learning_state(*calls: dict[str, Any]) -> dict[str, Any]:
    state = step_state(*calls)
    state["messages"] = [
        HumanMessage("an older question"),
        AIMessage("an answer"),
        HumanMessage(content=["simulate", {"type": "text", "text": "the pricing"}]),
        AIMessage("", tool_calls=list(calls)),
    ]
    return state


PLAIN = {"name": "simulate", "args": {}, "id": "p1", "type": "tool_call"}


def test_each_catalog_call_of_the_step_is_fed_with_the_latest_user_turn() -> None:
    node, conn, catalog = make_node()
    catalog.usage = usage = Usage()
    conn.answers = [
        answer({"ok": 1}),
        answer("bad", status="error"),
        answer(receipt_body()),
        answer(denial_body("confidence")),
    ]
    calls = [
        PLAIN,
        {**PLAIN, "name": "query_data", "id": "p2"},
        execute_call("d1", "c1"),
        execute_call("d2", "c2"),
        {"name": "search_tools", "args": {"query": "q"}, "id": "s1", "type": "tool_call"},
        {"name": "nope", "args": {}, "id": "n1", "type": "tool_call"},  # outside the profile
    ]
    run(node, learning_state(*calls), config(profile="observe"))
    # observe does not admit execute_decision: both are refused, never sent nor recorded
    observe = sorted(["get_contract", "query_data", "recommend", "shadow_tool", "simulate"])
    assert usage.records == [
        ("simulate the pricing", "simulate", "observe", True, observe),
        ("simulate the pricing", "query_data", "observe", False, observe),
    ]
    assert [c[0] for c in conn.calls] == ["simulate", "query_data"]


def test_only_ok_outcomes_count_as_served() -> None:
    node, conn, catalog = make_node()
    catalog.usage = usage = Usage()
    conn.answers = [
        answer(receipt_body("d1")),
        answer(receipt_body("d2", execution_status="failed", response_code=500)),
        answer(denial_body("confidence")),
        AlgentaGraphError("down"),
    ]
    calls = [execute_call("d1", "c1"), execute_call("d2", "c2"), execute_call("d3", "c3")]
    run(node, learning_state(*calls, {**PLAIN, "id": "p9"}))
    every = sorted(catalog.tools)  # no run profile: every catalog tool
    assert [(r[1], r[2], r[3], r[4]) for r in usage.records] == [
        ("execute_decision", "execute", True, every),
        ("execute_decision", "execute", False, every),
        ("execute_decision", "execute", False, every),
        ("simulate", "execute", False, every),
    ]


def test_without_a_user_turn_the_query_is_empty() -> None:
    node, conn, catalog = make_node()
    catalog.usage = usage = Usage()
    conn.answers = [answer({"ok": 1})]
    run(node, step_state(PLAIN, messages=[AIMessage("", tool_calls=[PLAIN])]))
    assert [r[:2] for r in usage.records] == [("", "simulate")]


def test_a_failing_usage_store_costs_the_step_nothing(caplog: Any) -> None:
    node, conn, catalog = make_node()
    catalog.usage = usage = Usage("simulate")
    conn.answers = [answer({"ok": 1}), answer(receipt_body())]
    with caplog.at_level("WARNING", logger="algenta_graph.nodes.governed_tool"):
        update = run(node, learning_state(PLAIN, execute_call()))
    assert [r[1] for r in usage.records] == ["execute_decision"]
    assert [r["decision_id"] for r in update["receipts"]] == ["d1"]
    assert [m.tool_call_id for m in update["messages"]] == ["p1", "c1"]
    assert [r.getMessage() for r in caplog.records] == [
        "usage signal: could not record simulate: store of simulate is down"
    ]


def test_a_real_usage_signal_learns_only_what_served_the_turn() -> None:
    from langgraph.store.memory import InMemoryStore

    from algenta_graph.retrieval.usage import UsageSignal

    node, conn, catalog = make_node()
    store = InMemoryStore()
    catalog.usage = UsageSignal(store)
    conn.answers = [answer({"ok": 1}), answer("bad", status="error")]
    calls = [PLAIN, {**PLAIN, "name": "query_data", "id": "p2"}]
    run(node, learning_state(*calls), config(profile="observe"))
    learnt = {item.key for ns in store.list_namespaces() for item in store.search(ns)}
    assert learnt == {"simulate"}


def test_answers_go_right_after_their_call_even_when_a_later_turn_came_first() -> None:
    # invariant 13: a step finished by the next turn puts its answers before that turn's
    # message, every message keeping its id (providers refuse a call answered later)
    from langchain_core.messages import RemoveMessage
    from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages

    calls = [execute_call("d1", "c1"), execute_call("d2", "c2")]
    ai = AIMessage("", tool_calls=calls, id="ai")
    head = [HumanMessage("go", id="h1"), ai]
    done = ToolMessage("one", tool_call_id="c1", id="t1")
    new = [ToolMessage("two", tool_call_id="c2", id="t2")]
    assert in_place([*head, done], ai, new) == new  # the usual case: appended
    assert in_place(head, ai, new) == new
    later = HumanMessage("and now?", id="h2")
    update = in_place([*head, done, later], ai, new)
    assert isinstance(update[0], RemoveMessage) and update[0].id == REMOVE_ALL_MESSAGES
    # add_messages is typed message-like both ways: messages in, so messages out
    left: list[MessageLikeRepresentation] = [*head, done, later]
    right: list[MessageLikeRepresentation] = [*update]
    merged = cast("list[BaseMessage]", add_messages(left, right))
    assert [m.id for m in merged] == ["h1", "ai", "t1", "t2", "h2"]
    # an answer of an older step after the call is moved with the rest, in order
    other = ToolMessage("x", tool_call_id="old", id="t0")
    update = in_place([*head, later, other], ai, new)
    assert [m.id for m in update[1:]] == ["h1", "ai", "t2", "h2", "t0"]
    # a call that is not in the messages: appended (nothing to reorder against)
    assert in_place([later], ai, new) == new
