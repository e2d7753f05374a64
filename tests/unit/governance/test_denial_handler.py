"""The denial handlers and the operator path (scripted engine answers;
``docs/ARCHITECTURE.md``, invariants 7 and 10, "Escalation and the operator"). Against the
reference engine over HTTP: ``tests/integration/test_graph_escalation.py``,
``tests/integration/test_governance.py``."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from governed_stub import (
    HOOK,
    StubConnection,
    denial_record,
    execute_call,
    make_node,
    receipt_body,
)
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import NodeCancelledError
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from pydantic import ValidationError

from algenta_graph.connection.outcomes import ExecutionDenial, ExecutionFailure, ExecutionReceipt
from algenta_graph.errors import AlgentaGraphError, EscalationAlreadyDecided
from algenta_graph.governance.escalations import EscalationSettings
from algenta_graph.governance.gates import ENGINE_GATE_NAMES, GATE_NAMES
from algenta_graph.graph.resumes import check_resumes
from algenta_graph.ledger import (
    AnswerDecision,
    ClaimAnswer,
    Entry,
    MemoryLedger,
    escalation_key,
    new_entry,
    release,
)
from algenta_graph.nodes.denial_handler import (
    MODEL_NODE,
    DenialHandler,
    handler_node_name,
    route_pending_escalation,
)
from algenta_graph.nodes.governed_tool import GovernedToolNode
from algenta_graph.nodes.operators import authenticated_identity
from algenta_graph.nodes.questions import escalation_items, escalation_request, pending_escalations
from algenta_graph.nodes.steps import OUTCOME_KEY
from algenta_graph.records import escalation_id_of
from algenta_graph.state import GovernedState

FLAG = {"idempotency": "force", "confidence": "override_safety", "risk_floor": "override_safety"}

CHAIN = ("seq", "prev", "hash")  # audit-chain links, tested in tests/unit/test_chain*.py


def denial(gate: str, call: str = "c1", decision: str = "d1", **extra: Any) -> dict[str, Any]:
    return denial_record(gate, call, decision, **extra)


def denied_state(*denials: dict[str, Any]) -> dict[str, Any]:
    calls = [execute_call(d["decision_id"], d["tool_call_id"]) for d in denials]
    answers = [
        ToolMessage(
            f"DENIED {d['gate']}",
            tool_call_id=d["tool_call_id"],
            id=f"msg-{d['tool_call_id']}",
            response_metadata={OUTCOME_KEY: f"gate:{d['gate']}"},
        )
        for d in denials
    ]
    return {
        "messages": [HumanMessage("go"), AIMessage("", tool_calls=calls), *answers],
        "selected_tools": [],
        "receipts": [],
        "denials": list(denials),
        "operator_decisions": [],
    }


class Harness:
    """The handler nodes and a model node, compiled with a checkpointer and a ledger of their
    own, every resume checked as the factory's graph checks it (``graph/resumes.py``)."""

    def __init__(self, entry: str, authorize: Any = None) -> None:
        self.tools, self.conn, _ = make_node()
        self.visited: list[str] = []
        self.ledger = MemoryLedger()
        builder: Any = StateGraph(GovernedState)
        for gate in GATE_NAMES:
            builder.add_node(
                handler_node_name(gate),
                DenialHandler(
                    gate, self.tools.executor, authorize_operator=authorize, ledger=self.ledger
                ),
            )

        def model(state: Any) -> dict[str, Any]:
            self.visited.append(MODEL_NODE)
            return {}

        builder.add_node(MODEL_NODE, model)
        builder.add_edge(START, handler_node_name(entry))
        builder.add_edge(MODEL_NODE, END)
        self.saver = InMemorySaver()
        self.graph = check_resumes(builder.compile(checkpointer=self.saver))
        self.config: Any = {"configurable": {"thread_id": "t1"}}

    def start(self, state: dict[str, Any], **configurable: Any) -> Any:
        self.config["configurable"].update(configurable)
        return asyncio.run(self.graph.ainvoke(state, self.config))

    def resume(self, value: Any, **configurable: Any) -> Any:
        self.config["configurable"].update(configurable)
        return asyncio.run(self.graph.ainvoke(Command(resume=value), self.config))

    def request(self) -> Any:
        interrupts = self.graph.get_state(self.config).interrupts
        assert len(interrupts) == 1, interrupts
        return interrupts[0].value

    def nodes(self, value: Any) -> list[str]:
        """Run (or resume with a ``Command``), returning the nodes that ran."""

        async def go() -> list[str]:
            nodes: list[str] = []
            async for update in self.graph.astream(value, self.config, stream_mode="updates"):
                nodes.extend(update)
            return nodes

        return asyncio.run(go())


OVERRIDE = {"action": "override", "operator": "ana", "reason": "checked"}
DECLINE = {"action": "decline", "operator": "ana", "reason": "too risky"}


# --------------------------------------------------------------------------- policies


def test_a_halting_denial_ends_the_run_without_asking() -> None:
    h = Harness("confidence")
    out = h.start(denied_state(denial("confidence", policy="halt")))
    assert h.visited == [] and h.graph.get_state(h.config).next == ()
    assert out["operator_decisions"] == [] and h.conn.operator_calls == []


def test_a_reported_denial_passes_to_the_next_gates_handler_then_the_model() -> None:
    h = Harness("confidence")
    state = denied_state(
        denial("confidence", "c1", policy="report"), denial("risk_floor", "c2", policy="report")
    )
    assert h.nodes(state) == [
        handler_node_name("confidence"),
        handler_node_name("risk_floor"),
        MODEL_NODE,
    ]
    # strictest first: a halting risk_floor denial ends the step before confidence's handler
    h2 = Harness("risk_floor")
    state = denied_state(
        denial("confidence", "c1", policy="report"), denial("risk_floor", "c2", policy="halt")
    )
    assert h2.nodes(state) == [handler_node_name("risk_floor")]
    assert h2.visited == []


def test_a_denial_without_a_recorded_policy_takes_the_gates_default() -> None:
    h = Harness("idempotency")
    h.start(denied_state(denial("idempotency")))  # default: report
    assert h.visited == [MODEL_NODE]
    h2 = Harness("confidence")
    h2.start(denied_state(denial("confidence", policy="bogus")))  # default: escalate
    assert h2.request()["gate"] == "confidence"


def test_the_strictest_recorded_policy_of_a_gates_denials_applies() -> None:
    h = Harness("confidence")
    h.start(
        denied_state(
            denial("confidence", "c1", policy="report"),
            denial("confidence", "c2", policy="halt"),
        )
    )
    assert h.visited == []
    assert h.graph.get_state(h.config).next == ()


# --------------------------------------------------------------------------- escalation


@pytest.mark.parametrize("gate", ENGINE_GATE_NAMES)
def test_an_override_sends_the_gates_own_flag_and_records_everything(gate: str) -> None:
    h = Harness(gate)
    h.start(denied_state(denial(gate, policy="escalate", timeout_seconds=7)))
    request = h.request()
    interrupt_id_seen = h.graph.get_state(h.config).interrupts[0].id
    assert request["interrupt_id"] == interrupt_id_seen  # the id LangGraph gave the interrupt
    assert (request["gate"], request["override_flag"], request["decision_id"]) == (
        gate,
        FLAG[gate],
        "d1",
    )
    assert request["action_requests"][0]["args"] == {
        "decision_id": "d1",
        "webhook_url": HOOK,
        "timeout_seconds": 7,
        FLAG[gate]: True,
    }
    assert h.conn.operator_calls == []  # nothing before the operator answers
    h.conn.operator_answers = [
        ExecutionReceipt.model_validate(receipt_body(safety_overridden=gate != "idempotency"))
    ]
    out = h.resume(OVERRIDE)
    assert h.conn.operator_calls == [
        {
            "decision_id": "d1",
            "webhook_url": HOOK,
            "force": gate == "idempotency",
            "override_safety": gate != "idempotency",
            "timeout_seconds": 7,
            "metadata": {
                "algenta_graph": {
                    "thread_id": "t1",
                    "tool_call_id": "c1",
                    "operator": "ana",
                    "reason": "checked",
                    "escalation_id": request["escalation_id"],
                }
            },
        }
    ]
    assert h.conn.get_decision_calls == ["d1"]  # it looked for its own delivery first
    (receipt,) = out["receipts"]
    assert (receipt["source"], receipt["operator"], receipt["tool_call_id"]) == (
        "operator",
        "ana",
        "c1",
    )
    (decided,) = out["operator_decisions"]
    assert {
        k: v for k, v in decided.items() if k not in ("time", "outcome", "decided_at", *CHAIN)
    } == {
        "operator": "ana",
        "reason": "checked",
        "action": "override",
        "gate": gate,
        "decision_id": "d1",
        "override_flag": FLAG[gate],
        "result": "receipt",
        "tool_call_id": "c1",
        "escalation_id": request["escalation_id"],
        "answered_in_thread": None,
        "verdict": "overrode",  # the short form's override
        "roles": [],
        "digest": request["digest"],
        "interrupt_id": interrupt_id_seen,
        "asked_at": None,
        "expires_at": None,
        "original_args": None,
        "edited_args": None,
    }
    assert decided["outcome"]["kind"] == "receipt"
    told = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(told) == 1 and told[0].id == "msg-c1"  # the denial's answer, rewritten
    assert told[0].status == "success"
    assert told[0].response_metadata[OUTCOME_KEY] == f"gate:{gate}"
    assert str(told[0].content).startswith(
        f"Operator ana OVERRODE the {gate} gate (checked) with {FLAG[gate]}. Executed decision d1"
    )
    assert str(told[0].content).endswith(f"(The model's call was first denied: DENIED {gate})")
    assert h.visited == [MODEL_NODE]


def test_a_decline_executes_nothing_and_is_recorded() -> None:
    h = Harness("risk_floor")
    h.start(denied_state(denial("risk_floor", policy="escalate")))
    out = h.resume(DECLINE)
    assert h.conn.operator_calls == [] and h.conn.get_decision_calls == []
    assert out["receipts"] == []
    (decided,) = out["operator_decisions"]
    assert (decided["action"], decided["result"], decided["outcome"]) == (
        "decline",
        "declined",
        None,
    )
    (told,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert told.status == "error"
    assert str(told.content).startswith(
        "Operator ana reviewed the risk_floor denial and DECLINED to override it (too risky). "
        "Decision d1 was not executed."
    )


def test_an_override_the_engine_denies_again_is_recorded_as_denied() -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate")))
    h.conn.operator_answers = [
        ExecutionDenial(gate="risk_floor", code="execution_blocked_risk_floor", message="low")
    ]
    out = h.resume(OVERRIDE)
    assert out["receipts"] == []
    assert [(d["gate"], d["source"], d["tool_call_id"], d["decision_id"]) for d in out["denials"]][
        1:
    ] == [("risk_floor", "operator", "c1", "d1")]
    assert out["denials"][1]["webhook_url"] == HOOK
    assert [d["result"] for d in out["operator_decisions"]] == ["denied"]
    (told,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "the engine denied the override too: risk_floor gate" in told.content
    assert told.status == "error"


@pytest.mark.parametrize(
    ("scripted", "result", "needle"),
    [
        (AlgentaGraphError("down"), "failed", "operator execution failed: down"),
        (ExecutionFailure(message="junk"), "failed", "the execution failed: junk"),
        (
            ExecutionReceipt.model_validate(receipt_body(execution_status="failed")),
            "failed",
            "OVERRODE",
        ),
        (ExecutionReceipt.model_validate(receipt_body("d_other")), "failed", "'d_other'"),
    ],
)
def test_an_override_that_does_not_deliver_is_recorded_as_failed(
    scripted: Any, result: str, needle: str
) -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate")))
    h.conn.operator_answers = [scripted]
    out = h.resume(OVERRIDE)
    assert [d["result"] for d in out["operator_decisions"]] == [result]
    (told,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert needle in told.content and told.status == "error"
    if isinstance(scripted, ExecutionReceipt) and scripted.decision_id == "d1":
        assert [r["execution_status"] for r in out["receipts"]] == ["failed"]
    else:
        assert out["receipts"] == []


def test_an_override_already_delivered_by_this_thread_is_not_sent_again() -> None:
    h = Harness("idempotency")
    h.start(denied_state(denial("idempotency", policy="escalate")))
    tag = {"thread_id": "t1", "tool_call_id": "c1", "operator": "ana"}
    h.conn.executions["d1"] = [
        {**receipt_body(response_code=201), "metadata": {"algenta_graph": tag}}
    ]
    out = h.resume(OVERRIDE)
    assert h.conn.operator_calls == []
    assert [(r["source"], r["response_code"]) for r in out["receipts"]] == [("operator", 201)]


@pytest.mark.parametrize(
    "tag",
    [
        {"thread_id": "t1", "tool_call_id": "c1"},  # the model's own, not an operator's
        {"thread_id": "t2", "tool_call_id": "c1", "operator": "ana"},
        {"thread_id": "t1", "tool_call_id": "c9", "operator": "ana"},
    ],
)
def test_only_this_escalations_own_override_counts_as_delivered(tag: dict[str, Any]) -> None:
    h = Harness("idempotency")
    h.start(denied_state(denial("idempotency", policy="escalate")))
    h.conn.executions["d1"] = [{**receipt_body(), "metadata": {"algenta_graph": tag}}]
    h.conn.operator_answers = [ExecutionReceipt.model_validate(receipt_body(response_code=202))]
    out = h.resume(OVERRIDE)
    assert len(h.conn.operator_calls) == 1
    assert [r["response_code"] for r in out["receipts"]] == [202]


def test_an_override_serialised_behind_its_own_delivery_keeps_that_receipt() -> None:
    """The engine answers the resumed override with an idempotency denial because the killed
    one's delivery just completed: the handler reads that delivery back."""
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate")))
    conn: StubConnection = h.conn
    tag = {"thread_id": "t1", "tool_call_id": "c1", "operator": "ana"}
    delivered = {**receipt_body(response_code=203), "metadata": {"algenta_graph": tag}}

    def deny_then_record() -> Any:
        conn.executions["d1"] = [delivered]
        code = "execution_blocked_idempotency"
        return ExecutionDenial(gate="idempotency", code=code, message="x")

    class Recording(list[Any]):
        def pop(self, index: Any = -1) -> Any:
            return deny_then_record()

    conn.operator_answers = Recording([None])
    out = h.resume(OVERRIDE)
    assert [(r["source"], r["response_code"]) for r in out["receipts"]] == [("operator", 203)]
    assert [d["result"] for d in out["operator_decisions"]] == ["receipt"]


def test_an_idempotency_denial_of_an_override_with_nothing_found_is_denied() -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate")))
    h.conn.operator_answers = [
        ExecutionDenial(gate="idempotency", code="execution_blocked_idempotency", message="x")
    ]
    out = h.resume(OVERRIDE)
    assert [d["result"] for d in out["operator_decisions"]] == ["denied"]
    assert h.conn.get_decision_calls == ["d1", "d1"]


def test_a_denial_naming_no_decision_can_only_be_rejected_or_answered() -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate", decision_id=None)))
    request = h.request()
    assert request["review_configs"] == [
        {"action_name": "execute_decision", "allowed_decisions": ["reject", "respond"]}
    ]
    with pytest.raises(ValidationError, match="'approve' is not accepted for this confidence"):
        h.resume(OVERRIDE)
    assert h.conn.operator_calls == [] and h.request()["digest"] == request["digest"]
    out = h.resume(DECLINE)
    assert [d["result"] for d in out["operator_decisions"]] == ["declined"]


def test_two_denials_of_one_gate_are_asked_once_and_answered_in_order() -> None:
    h = Harness("confidence")
    h.start(
        denied_state(
            denial("confidence", "c1", "d1", policy="escalate"),
            denial("confidence", "c2", "d2", policy="escalate"),
        )
    )
    request = h.request()
    assert [e["tool_call_id"] for e in request["escalations"]] == ["c1", "c2"]
    assert len(request["action_requests"]) == 2
    assert len(request["resume_with"]["decisions"]) == 2
    h.conn.operator_answers = [ExecutionReceipt.model_validate(receipt_body("d2"))]
    out = h.resume(
        {
            "decisions": [
                {"type": "reject", "message": "no"},
                {"type": "approve", "message": "yes"},
            ],
            "operator": "bo",
        }
    )
    assert [(d["decision_id"], d["action"], d["reason"]) for d in out["operator_decisions"]] == [
        ("d1", "decline", "no"),
        ("d2", "override", "yes"),
    ]
    assert [c["decision_id"] for c in h.conn.operator_calls] == ["d2"]


def test_an_answered_escalation_is_not_asked_again() -> None:
    h = Harness("confidence")
    state = denied_state(denial("confidence", policy="escalate"))
    state["operator_decisions"] = [{"tool_call_id": "c1", "operator": "ana"}]
    h.start(state)
    assert h.visited == [MODEL_NODE]


def test_the_escalation_goes_on_to_the_next_gates_handler() -> None:
    h = Harness("confidence")
    state = denied_state(
        denial("confidence", "c1", policy="escalate"),
        denial("risk_floor", "c2", policy="escalate"),
    )
    h.start(state)
    assert h.request()["gate"] == "confidence"
    nodes = h.nodes(Command(resume=DECLINE))
    assert nodes[0] == handler_node_name("confidence")
    assert h.request()["gate"] == "risk_floor"
    h.resume(DECLINE)
    assert h.visited == [MODEL_NODE]


@pytest.mark.parametrize(
    ("answer", "needle"),
    [
        ({"action": "maybe", "operator": "ana", "reason": "r"}, "short.action"),
        ({"action": "override", "operator": " ", "reason": "r"}, "who decides is required"),
        ({"decisions": [], "operator": "ana"}, "at least 1 item"),
        ({"decisions": [{"type": "approve"}] * 2, "operator": "ana"}, "at most 1 item"),
        ({"decisions": [{"type": "approve", "message": "m"}]}, "operator: who decides"),
        ({"decisions": [{"type": "approve", "mesage": "m"}], "operator": "a"}, "Extra inputs"),
        ({"decisions": [{"type": "maybe"}], "operator": "ana"}, "does not match any of the"),
        ({"action": "override", "operator": "a", "force": True}, "short.force"),
        ([{"type": "accept", "args": None}] * 2, "at most 1 item"),
        ("yes", "not an answer to this escalation"),
    ],
)
def test_a_malformed_answer_is_refused_by_name_and_changes_nothing(
    answer: Any, needle: str
) -> None:
    # invariant 15: refused before it is saved (the interrupt's response_schema), never asked
    # again silently: the same interrupt still waits, and the next answer takes effect
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate")))
    before = h.graph.get_state(h.config)
    with pytest.raises(ValidationError, match=re.escape(needle)):
        h.resume(answer)
    after = h.graph.get_state(h.config)
    assert [i.id for i in after.interrupts] == [i.id for i in before.interrupts]
    assert after.interrupts[0].value == before.interrupts[0].value  # no "error", no re-ask
    assert h.conn.operator_calls == []
    assert after.values["operator_decisions"] == []
    out = h.resume(DECLINE)
    assert [d["verdict"] for d in out["operator_decisions"]] == ["declined"]


def test_the_authenticated_identity_is_the_operator() -> None:
    h = Harness("confidence")
    user = {"identity": "auth-ana", "is_authenticated": True, "permissions": ["operator"]}
    h.start(denied_state(denial("confidence", policy="escalate")), langgraph_auth_user=user)
    with pytest.raises(ValidationError, match="contradicts the authenticated identity 'auth-ana'"):
        h.resume({"action": "decline", "operator": "mallory", "reason": "r"})
    out = h.resume({"decisions": [{"type": "reject", "message": "r"}]})
    assert [(d["operator"], d["roles"]) for d in out["operator_decisions"]] == [
        ("auth-ana", ["operator"])
    ]


def test_a_plain_approve_takes_its_operator_from_the_resumes_config() -> None:
    """Without auth, ``{"type": "approve"}`` alone names no one: refused, saying both ways to
    name the operator (never recorded as someone made up); the resume's
    ``config={"configurable": {"operator": "ana"}}`` names her, and the answer takes effect."""
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate")))
    plain = {"decisions": [{"type": "approve"}]}
    with pytest.raises(ValidationError) as refused:
        h.resume(plain)
    assert "'operator': 'ana'" in str(refused.value)
    assert "config={'configurable': {'operator': 'ana'}}" in str(refused.value)
    assert h.graph.get_state(h.config).values["operator_decisions"] == []
    h.conn.operator_answers = [ExecutionReceipt.model_validate(receipt_body("d1"))]
    out = h.resume(plain, operator="ana")
    assert [(d["operator"], d["verdict"]) for d in out["operator_decisions"]] == [
        ("ana", "approved")
    ]
    assert [c["decision_id"] for c in h.conn.operator_calls] == ["d1"]


def test_served_the_configs_operator_cannot_name_someone_else() -> None:
    h = Harness("confidence")
    user = {"identity": "auth-ana", "is_authenticated": True, "permissions": ["operator"]}
    h.start(denied_state(denial("confidence", policy="escalate")), langgraph_auth_user=user)
    with pytest.raises(ValidationError, match="'mallory' contradicts the authenticated identity"):
        h.resume({"decisions": [{"type": "reject", "message": "r"}]}, operator="mallory")
    out = h.resume({"decisions": [{"type": "reject", "message": "r"}]}, operator="auth-ana")
    assert [d["operator"] for d in out["operator_decisions"]] == ["auth-ana"]


def test_authorize_operator_may_refuse_anyone() -> None:
    seen: list[tuple[str, str]] = []

    def only_bo(operator: str, gate: str, config: Any) -> bool:
        seen.append((operator, gate))
        return operator == "bo"

    h = Harness("risk_floor", authorize=only_bo)
    h.start(denied_state(denial("risk_floor", policy="escalate")))
    with pytest.raises(ValidationError, match="operator 'ana' may not answer a risk_floor"):
        h.resume(DECLINE)
    out = h.resume({**DECLINE, "operator": "bo"})
    assert [d["operator"] for d in out["operator_decisions"]] == ["bo"]
    assert set(seen) == {("ana", "risk_floor"), ("bo", "risk_floor")}
    assert seen[-1] == ("bo", "risk_floor")


def answer_of(operator: str, *reasons: str, thread_id: str | None = None) -> ClaimAnswer:
    """A claim's answer declining each call, with these reasons."""
    return ClaimAnswer(
        operator=operator,
        thread_id=thread_id,
        decisions=[
            AnswerDecision(action="decline", type="reject", verdict="declined", reason=r)
            for r in reasons
        ],
    )


def claimed_first_by(
    h: Harness, answer: ClaimAnswer, finished: bool = False, pid: int | None = None
) -> list[Any]:
    """Make another operator's claim (on the same key) win the race against the next resume;
    ``pid``: the claimant's process (default this one, alive)."""
    store = h.ledger
    original = store.insert
    winner: list[Any] = []

    async def insert(mine: Any) -> Any:
        if not winner:
            other = dataclasses.replace(new_entry(mine.key, answer), pid=pid or os.getpid())
            winner.append(other)
            await original(other)
            if finished:
                await store.finish(other)
        return await original(mine)

    store.insert = insert  # type: ignore[method-assign]
    return winner


def test_a_second_answer_to_a_claimed_escalation_is_refused_naming_the_winner() -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate")))
    winner = claimed_first_by(h, answer_of("bo"))
    with pytest.raises(EscalationAlreadyDecided) as caught:
        h.resume(OVERRIDE)
    assert isinstance(caught.value.claim, Entry)  # the DecidedClaim protocol's ledger entry
    assert caught.value.claim.token == winner[0].token
    assert "already decided by bo" in str(caught.value)
    assert h.conn.operator_calls == []


def test_a_finished_claim_is_completed_again_in_the_winners_name() -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate")))
    claimed_first_by(h, answer_of("bo", "bo said no"), finished=True)
    # ana's answer comes too late: bo's is (re)applied, and ana is told
    with pytest.raises(EscalationAlreadyDecided, match="already decided by bo") as caught:
        h.resume(OVERRIDE)
    assert caught.value.claim.done
    out = h.graph.get_state(h.config).values
    assert [(d["operator"], d["action"]) for d in out["operator_decisions"]] == [("bo", "decline")]
    assert h.conn.operator_calls == []


def _claimed_before(h: Harness, answer: ClaimAnswer, **fields: Any) -> Any:
    """An earlier claim of the started thread's pending escalation (as a copy's original, a
    cancelled run or another process leaves it)."""
    pending = [d for d in h.graph.get_state(h.config).values["denials"]]
    key = escalation_key(escalation_id_of(d) for d in pending)
    claim = dataclasses.replace(new_entry(key, answer), **fields)
    asyncio.run(h.ledger.insert(claim))
    return claim


BOS_DECLINE = answer_of("bo", "bo said no", thread_id="t0")


def test_an_escalation_decided_elsewhere_is_completed_without_asking_again() -> None:
    # invariant 12: a copy of the thread (or a new task) meets the original's finished answer:
    # it is recorded here in bo's name, saying where it was given, and nobody is asked
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate")), thread_id="t0")
    claim = _claimed_before(h, BOS_DECLINE, done=True)
    (escalated,) = h.graph.get_state(h.config).values["denials"]
    h.config = {"configurable": {"thread_id": "t1"}}  # the copy: the same records
    out = asyncio.run(h.graph.ainvoke(denied_state(escalated), h.config))
    assert not h.graph.get_state(h.config).interrupts and "__interrupt__" not in out
    (decided,) = out["operator_decisions"]
    assert (decided["operator"], decided["action"], decided["reason"]) == (
        "bo",
        "decline",
        "bo said no",
    )
    assert decided["answered_in_thread"] == "t0"
    assert decided["escalation_id"] == escalation_id_of(escalated)
    (told,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "(answered in thread t0)" in str(told.content)
    assert h.conn.operator_calls == [] and h.visited == [MODEL_NODE]
    assert asyncio.run(h.ledger.get(claim.key, ClaimAnswer)) == claim  # untouched


def test_an_escalation_being_applied_by_a_live_claimant_is_refused_without_asking() -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate")))
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as alive:
        try:
            claim = _claimed_before(h, BOS_DECLINE, pid=alive.pid)
            with pytest.raises(EscalationAlreadyDecided) as caught:
                h.nodes(None)  # e.g. a new message reaching the handler again
        finally:
            alive.kill()
    assert isinstance(caught.value.claim, Entry)  # the DecidedClaim protocol's ledger entry
    assert caught.value.claim.token == claim.token
    assert "bo (decline in thread t0, still being applied)" in str(caught.value)
    assert h.conn.operator_calls == [] and h.visited == []
    assert h.graph.get_state(h.config).values["operator_decisions"] == []


def test_a_claim_let_go_by_a_cancelled_run_of_this_process_is_taken_over() -> None:
    # invariant 12: the run that claimed it was cancelled (released, not finished): the next
    # run completes its answer, in its operator's name, without asking
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate")))
    claim = _claimed_before(h, BOS_DECLINE)
    release(claim)
    with pytest.raises(EscalationAlreadyDecided, match="already decided by bo"):
        h.resume(OVERRIDE)  # ana is told: bo's answer is the one completed
    out = h.graph.get_state(h.config).values
    assert [(d["operator"], d["action"]) for d in out["operator_decisions"]] == [("bo", "decline")]
    final = asyncio.run(h.ledger.get(claim.key, ClaimAnswer))
    assert final is not None and final.done and final.token != claim.token
    assert final.value == BOS_DECLINE


def test_a_cancelled_answer_lets_its_claim_go_unfinished() -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate")))

    async def cancelled(*args: Any, **kwargs: Any) -> Any:
        raise asyncio.CancelledError

    h.tools.executor.find = cancelled  # type: ignore[method-assign]
    with pytest.raises((asyncio.CancelledError, NodeCancelledError)):
        h.resume(OVERRIDE)
    (claim,) = h.ledger._entries.values()
    assert claim.done is False and claim.abandoned()  # let go: the next run takes it over


async def test_a_claim_is_kept_alive_while_its_answer_is_applied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from algenta_graph.nodes import claiming as module

    refreshed: list[Any] = []
    naps: list[float] = []

    class Store:
        async def refresh(self, claim: Any) -> None:
            refreshed.append(claim)
            if len(refreshed) == 2:
                raise OSError("database went away")  # logged, never fatal
            if len(refreshed) == 3:
                raise asyncio.CancelledError

    async def nap(seconds: float) -> None:
        naps.append(seconds)

    monkeypatch.setattr("algenta_graph.nodes.claiming.asyncio.sleep", nap)
    mine = new_entry("k", answer_of("ana"))
    with pytest.raises(asyncio.CancelledError):
        await module._keep_alive(Store(), mine)  # type: ignore[arg-type]
    assert refreshed == [mine] * 3 and naps == [5.0] * 3


# --------------------------------------------------------------------------- pure parts


def test_authenticated_identity() -> None:
    class User:
        identity = "obj"
        is_authenticated = True

    class Anonymous:
        identity = "anon"
        is_authenticated = False

    def conf(user: Any) -> Any:
        return {"configurable": {"langgraph_auth_user": user}}

    assert authenticated_identity(None) is None
    assert authenticated_identity({"configurable": {}}) is None
    assert authenticated_identity(conf({"identity": "ana"})) == "ana"
    assert authenticated_identity(conf({"identity": 7})) == "7"
    assert authenticated_identity(conf({"identity": "ana", "is_authenticated": False})) is None
    assert authenticated_identity(conf({"identity": ""})) is None
    assert authenticated_identity(conf(User())) == "obj"
    assert authenticated_identity(conf(Anonymous())) is None


def test_pending_escalations_and_the_request() -> None:
    state = denied_state(
        denial("confidence", "c1", policy="escalate"),
        denial("risk_floor", "c2", policy="report"),
        denial("confidence", "c3", policy="escalate"),
    )
    state["operator_decisions"] = [{"tool_call_id": "c3"}]
    assert [d["tool_call_id"] for d in pending_escalations(state)] == ["c1"]
    # a decision naming its escalation answers that escalation only, not its tool call's others
    state["operator_decisions"] = [{"tool_call_id": "c1", "escalation_id": "esc_other"}]
    assert [d["tool_call_id"] for d in pending_escalations(state)] == ["c1", "c3"]
    shown = denial("risk_floor", "c2", raised_at="2030-01-01T00:00:00+00:00")
    (item,) = escalation_items(
        "risk_floor",
        [shown],
        settings=EscalationSettings(expires_after={"risk_floor": timedelta(seconds=60)}),
        thread_id="t1",
        policy_snapshot_id="pol_1",
        interrupt_ids=["i1"],
        expires=lambda d: "2030-01-01T00:01:00+00:00",
    )
    request = escalation_request("risk_floor", [item])
    assert request["escalations"] == [
        {
            "gate": "risk_floor",
            "code": "execution_blocked_risk_floor",
            "message": "blocked by risk_floor",
            "override_hint": "ask",
            "decision_id": "d1",
            "webhook_url": HOOK,
            "override_flag": "override_safety",
            "tool_call_id": "c2",
            "escalation_id": escalation_id_of(shown),
            "thread_id": "t1",
            "args": {"decision_id": "d1", "webhook_url": HOOK, "override_safety": True},
            "allowed_decisions": ["approve", "edit", "reject", "respond"],
            "policy_snapshot_id": "pol_1",
            "rules": None,  # no graph rules bound (a handler made without the graph's)
            "digest": item["digest"],
            "interrupt_id": "i1",
            "asked_at": "2030-01-01T00:00:00+00:00",
            "expires_at": "2030-01-01T00:01:00+00:00",
        }
    ]
    assert item["digest"].startswith("sha256:") and len(item["digest"]) == 71
    assert {k: request[k] for k in request["escalations"][0]} == request["escalations"][0]  # type: ignore[literal-required]
    (action,) = request["action_requests"]
    assert action["name"] == "execute_decision"
    assert action["args"] == item["args"]
    assert action["description"] == (
        "The risk_floor gate denied decision d1 (execution_blocked_risk_floor): blocked by "
        "risk_floor. Approve to execute it anyway with override_safety=true; reject to keep it "
        "blocked. It expires at 2030-01-01T00:01:00+00:00."
    )
    assert request["review_configs"] == [
        {
            "action_name": "execute_decision",
            "allowed_decisions": ["approve", "edit", "reject", "respond"],
        }
    ]
    assert "error" not in request


def test_a_new_turn_goes_to_the_first_gate_still_waiting_for_an_operator() -> None:
    # invariant 12 (docs/ARCHITECTURE.md)
    route = route_pending_escalation
    waiting = denied_state(
        denial("idempotency", "c1", policy="report"),
        denial("risk_floor", "c2", policy="escalate"),
        denial("confidence", "c3", policy="escalate"),
    )
    assert route(waiting) == "confidence pending"  # table order among escalated gates
    waiting["operator_decisions"] = [{"tool_call_id": "c3"}]
    assert route(waiting) == "risk_floor pending"
    waiting["operator_decisions"].append({"tool_call_id": "c2"})
    assert route(waiting) == "model"
    assert route(denied_state(denial("confidence", "c1", policy="report"))) == "model"
    halted = denied_state(
        denial("confidence", "c1", policy="escalate"), denial("risk_floor", "c2", policy="halt")
    )
    assert route(halted) == "model"  # a halted step asked nobody
    assert route(denied_state(denial("novel_gate", "c1", policy="escalate"))) == "model"
    # a denial of an earlier step (not the latest tool step's) is not waiting
    earlier = denied_state(denial("confidence", "c1", policy="escalate"))
    earlier["messages"] += [
        HumanMessage("next"),
        AIMessage("", tool_calls=[execute_call("d2", "c9")]),
    ]
    # ... but that later step is unfinished (a run cut short inside governed_tool): a new turn
    # finishes it first (invariant 13)
    assert route(earlier) == "unfinished step"
    earlier["messages"].append(ToolMessage("done", tool_call_id="c9"))
    assert route(earlier) == "model"
    assert route({"messages": [], "denials": []}) == "model"


def test_handler_names_and_the_next_handler() -> None:
    assert handler_node_name("risk_floor") == "denial_handler_risk_floor"
    node, _, _ = make_node()
    handler = DenialHandler("confidence", node.executor)
    assert handler.__name__ == "denial_handler_confidence"
    assert handler._next(["confidence", "risk_floor"]) == "denial_handler_risk_floor"
    assert handler._next(["idempotency", "confidence"]) == MODEL_NODE
    assert handler._next(["confidence", "geo_fence", "idempotency"]) == (
        "denial_handler_idempotency"
    )
    assert handler._next(["risk_floor"]) == MODEL_NODE
    assert isinstance(node, GovernedToolNode)


# --------------------------------------------------------------------------- details


def test_the_claim_key_is_the_escalations_own_identity_never_the_thread() -> None:
    # invariant 12: the key names the escalations answered (sorted), not the thread, the task
    # or the checkpoint namespace, so a copy of the thread meets the same claim
    h = Harness("confidence")
    state = denied_state(
        denial("confidence", "c2", "d2", policy="escalate", escalation_id="esc_b"),
        denial("confidence", "c1", "d1", policy="escalate", escalation_id="esc_a"),
    )
    h.start(state)
    h.resume(DECLINE)
    (key,) = h.ledger._entries
    assert key == "escalations:esc_a,esc_b"
    (claim,) = h.ledger._entries.values()
    assert claim.done is True and claim.value.operator == "ana" and claim.value.thread_id == "t1"


def test_an_abandoned_claim_is_completed_in_its_claimants_name() -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate")))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    bos = answer_of("bo", "bo's no")
    winner = claimed_first_by(h, bos, pid=dead.pid)
    with pytest.raises(EscalationAlreadyDecided, match="already decided by bo"):
        h.resume(OVERRIDE)  # ana resumes; bo's unfinished answer is the one completed
    out = h.graph.get_state(h.config).values
    (gone,) = winner
    assert [(d["operator"], d["action"], d["reason"]) for d in out["operator_decisions"]] == [
        ("bo", "decline", "bo's no")
    ]
    assert h.conn.operator_calls == []
    final = h.ledger._entries[gone.key]
    assert final.done is True and final.value == bos
    assert (final.key, final.host, final.pid) == (gone.key, socket.gethostname(), os.getpid())
    assert final.token != gone.token


def test_the_interrupt_says_how_to_answer_and_never_carries_an_error() -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate")))
    first = h.request()
    assert "error" not in first
    assert first["resume_with"] == {
        "decisions": [{"type": "approve | edit | reject | respond"}],
        "operator": "who decides (the authenticated identity when served with auth)",
        "digest": "optional: the digest reviewed (a stale one is refused)",
    }
    with pytest.raises(ValidationError):
        h.resume({"decisions": []})
    assert "error" not in h.request()


def test_authorize_operator_sees_the_runs_config() -> None:
    configs: list[Any] = []

    def anyone(operator: str, gate: str, config: Any) -> bool:
        configs.append(config)
        return True

    h = Harness("confidence", authorize=anyone)
    h.start(denied_state(denial("confidence", policy="escalate")))
    h.resume(DECLINE)
    assert configs and all(c["configurable"]["thread_id"] == "t1" for c in configs)


def test_the_rewritten_answer_keeps_its_outcome_and_names_the_tool() -> None:
    h = Harness("confidence")
    state = denied_state(denial("confidence", policy="escalate"))
    state["messages"][-1] = ToolMessage("DENIED confidence", tool_call_id="c1", id="msg-c1")
    h.start(state)
    out = h.resume(DECLINE)
    (told,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert told.name == "execute_decision"
    assert told.response_metadata[OUTCOME_KEY] == "ok"  # the original carried none


def test_an_override_with_an_odd_timeout_sends_none() -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate", timeout_seconds="soon")))
    h.conn.operator_answers = [ExecutionReceipt.model_validate(receipt_body())]
    h.resume(OVERRIDE)
    assert h.conn.operator_calls[0]["timeout_seconds"] is None


def test_authenticated_identity_of_objects_missing_attributes() -> None:
    def conf(user: Any) -> Any:
        return {"configurable": {"langgraph_auth_user": user}}

    assert authenticated_identity(conf(SimpleNamespace(identity="x"))) == "x"
    assert authenticated_identity(conf(SimpleNamespace(is_authenticated=True))) is None


# --------------------------------------------------------------------------- invariant 11


def plan_message(plan_hash: str, nonce: str, plan_id: str | None = None) -> ToolMessage:
    body = {"plan_hash": plan_hash, "nonce": nonce, **({"plan_id": plan_id} if plan_id else {})}
    return ToolMessage(json.dumps(body), name="plan_decision", tool_call_id=f"plan-{nonce}")


def strict_harness(plans: list[ToolMessage], **decision: Any) -> Harness:
    h = Harness("confidence")
    h.conn.execute_supplied = frozenset({"idempotency_key", "nonce"})
    h.conn.get_decision_result = {
        "decision": {"plan_hash": "h1", **decision},
        "executions": [],
    }
    state = denied_state(denial("confidence", policy="escalate"))
    state["messages"][1:1] = plans
    h.start(state)
    return h


def test_an_override_on_a_strict_engine_sends_the_graphs_key_and_the_plans_nonce() -> None:
    # the decision's own plan (p1), not the later proposal with the same hash (case 5)
    plans = [plan_message("h1", "n1", "p1"), plan_message("h1", "n-later", "p2")]
    h = strict_harness(plans, plan_id="p1")
    h.conn.operator_answers = [ExecutionReceipt.model_validate(receipt_body())]
    out = h.resume(OVERRIDE)
    (sent,) = h.conn.operator_calls
    # one key per escalation (a copy of the thread replays it, never sends it again)
    escalation = escalation_id_of(denial("confidence", policy="escalate"))
    assert sent["extra"] == {
        "idempotency_key": f"algenta-graph:escalation:{escalation}",
        "nonce": "n1",
    }
    assert h.conn.get_decision_calls == ["d1", "d1"]  # its own delivery first, then the plan
    assert [d["result"] for d in out["operator_decisions"]] == ["receipt"]


def test_an_override_whose_plan_cannot_be_told_apart_sends_nothing() -> None:
    h = strict_harness([plan_message("h1", "n1", "p1"), plan_message("h1", "n2", "p2")])
    out = h.resume(OVERRIDE)
    assert h.conn.operator_calls == []
    assert [d["result"] for d in out["operator_decisions"]] == ["failed"]
    assert "plan_ambiguous" in out["operator_decisions"][0]["outcome"]["message"]


def test_an_override_without_the_plans_nonce_sends_nothing() -> None:
    h = strict_harness([plan_message("h2", "n2")])
    out = h.resume(OVERRIDE)
    assert h.conn.operator_calls == []
    assert [d["result"] for d in out["operator_decisions"]] == ["failed"]
    (told,) = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.id == "msg-c1"]
    assert (
        "the execution failed: operator execution failed: no plan_decision result in this "
        "thread has plan_hash h1" in told.content
    )


def engine_shows(conn: StubConnection, *looks: list[dict[str, Any]]) -> None:
    """``get_decision`` answers with each list of executions in turn, then the last one."""
    views = list(looks)

    async def get_decision(decision_id: str) -> dict[str, Any]:
        conn.get_decision_calls.append(decision_id)
        return {"executions": views.pop(0) if len(views) > 1 else views[0]}

    conn.get_decision = get_decision  # type: ignore[method-assign]


def operators(status: str, code: int = 200) -> dict[str, Any]:
    tag = {"thread_id": "t1", "tool_call_id": "c1", "operator": "ana"}
    body = receipt_body(execution_status=status, response_code=code)
    return {**body, "metadata": {"algenta_graph": tag}}


def test_an_override_still_in_flight_is_awaited_not_sent_again() -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate", timeout_seconds=1)))
    engine_shows(h.conn, [operators("unknown", 0)], [operators("delivered", 201)])
    out = h.resume(OVERRIDE)
    assert h.conn.operator_calls == []
    assert [(r["execution_status"], r["response_code"]) for r in out["receipts"]] == [
        ("delivered", 201)
    ]
    assert h.conn.get_decision_calls == ["d1", "d1"]


def test_an_override_serialised_behind_its_own_in_flight_delivery_awaits_it() -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate", timeout_seconds=1)))
    engine_shows(h.conn, [], [operators("unknown", 0)], [operators("delivered", 202)])
    h.conn.operator_answers = [
        ExecutionDenial(gate="idempotency", code="execution_blocked_idempotency", message="x")
    ]
    out = h.resume(OVERRIDE)
    assert len(h.conn.operator_calls) == 1
    assert [(r["execution_status"], r["response_code"]) for r in out["receipts"]] == [
        ("delivered", 202)
    ]
    assert [d["result"] for d in out["operator_decisions"]] == ["receipt"]
