"""The operator's side of the denial handlers (fast tier, scripted engine answers, mutation-
tested; ``docs/ARCHITECTURE.md``, "Escalation and the operator", invariant 15): the answers an
operator may give (``algenta_graph.nodes.answers``) and what the handler does with each
(``algenta_graph.nodes.denial_handler``): respond, a governed edit, deadlines, ``per_call``,
digests, notifications, the records, the served thread metadata. Against the reference engine:
``tests/integration/test_operator_answers.py`` and ``test_operator_bindings.py``."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from governed_stub import HOOK, RAISED, escalated_denial, execute_call, make_node, receipt_body
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from pydantic import TypeAdapter, ValidationError

from algenta_graph.connection.outcomes import ExecutionDenial, ExecutionReceipt
from algenta_graph.governance.escalations import EscalationSettings
from algenta_graph.governance.gates import GATE_NAMES
from algenta_graph.governance.visibility import DECIDED_KEY, WAITING_KEY
from algenta_graph.nodes.answers import (
    Decided,
    OperatorAnswer,
    answer_schema,
    edited_arguments,
)
from algenta_graph.nodes.denial_handler import MODEL_NODE, DenialHandler, handler_node_name
from algenta_graph.nodes.operators import authenticated_roles
from algenta_graph.nodes.questions import (
    escalation_items,
    is_answered,
    open_denials,
    request_digest,
    reviewed_args,
)
from algenta_graph.nodes.steps import OUTCOME_KEY
from algenta_graph.state import GovernedState

OPERATOR = {"identity": "ana", "is_authenticated": True, "permissions": ["operator:confidence"]}


def denial(gate: str = "confidence", call: str = "c1", decision: str = "d1", **extra: Any) -> Any:
    return escalated_denial(gate, call, decision, **extra)


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


class Metadata:
    """A stand-in for the server's thread metadata writer."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, thread_id: str, patch: dict[str, Any]) -> None:
        self.patches.append((thread_id, patch))


class Harness:
    """The handler nodes and a model node, compiled with a checkpointer."""

    def __init__(self, entry: str = "confidence", **handler: Any) -> None:
        self.tools, self.conn, _ = make_node()
        self.visited: list[str] = []
        self.metadata = Metadata()
        handler.setdefault("thread_metadata", self.metadata)
        handler.setdefault("ledger", self.tools.ledger)  # the stubs' ids repeat: one per test
        builder: Any = StateGraph(GovernedState)
        self.handlers = {g: DenialHandler(g, self.tools.executor, **handler) for g in GATE_NAMES}
        for gate, node in self.handlers.items():
            builder.add_node(handler_node_name(gate), node)

        def model(state: Any) -> dict[str, Any]:
            self.visited.append(MODEL_NODE)
            return {}

        builder.add_node(MODEL_NODE, model)
        builder.add_edge(START, handler_node_name(entry))
        builder.add_edge(MODEL_NODE, END)
        self.graph = builder.compile(checkpointer=InMemorySaver())
        self.config: Any = {"configurable": {"thread_id": "t1", "langgraph_auth_user": OPERATOR}}

    def start(self, state: dict[str, Any]) -> Any:
        return asyncio.run(self.graph.ainvoke(state, self.config))

    def resume(self, value: Any) -> Any:
        return asyncio.run(self.graph.ainvoke(Command(resume=value), self.config))

    def asked(self) -> Any:
        [interrupt] = self.graph.get_state(self.config).interrupts
        return interrupt


def approved(decision: str = "d1", **fields: Any) -> ExecutionReceipt:
    return ExecutionReceipt.model_validate(receipt_body(decision, safety_overridden=True, **fields))


# --------------------------------------------------------------------------- what is asked


def test_the_request_shows_one_review_config_per_call_with_what_its_gate_accepts() -> None:
    settings = EscalationSettings(allowed_decisions={"confidence": ["approve", "reject"]})
    h = Harness(settings=settings)
    h.start(denied_state(denial(call="c1"), denial(call="c2", decision="d2")))
    asked = h.asked()
    value = asked.value
    assert [c["allowed_decisions"] for c in value["review_configs"]] == [["approve", "reject"]] * 2
    assert [r["args"] for r in value["action_requests"]] == [
        {"decision_id": "d1", "webhook_url": HOOK, "timeout_seconds": 5, "override_safety": True},
        {"decision_id": "d2", "webhook_url": HOOK, "timeout_seconds": 5, "override_safety": True},
    ]
    # Agent Inbox reads a HITLRequest's arguments under "arguments"
    assert [r["arguments"] for r in value["action_requests"]] == [
        r["args"] for r in value["action_requests"]
    ]
    items = value["escalations"]
    assert [i["interrupt_id"] for i in items] == [asked.id, asked.id]
    assert [i["asked_at"] for i in items] == [RAISED, RAISED]
    assert [i["expires_at"] for i in items] == [None, None]
    assert [i["policy_snapshot_id"] for i in items] == ["pol_stub", "pol_stub"]
    assert [i["thread_id"] for i in items] == ["t1", "t1"]
    assert items[0]["digest"] != items[1]["digest"]
    assert value["digest"] == request_digest(items) not in (items[0]["digest"], items[1]["digest"])
    assert request_digest(items[:1]) == items[0]["digest"]
    assert h.conn.contract_calls == 1  # the engine's policy snapshot, read once
    # the response_schema is published: JSON Schema of the two decisions this gate accepts
    schema = asked.response_schema
    assert schema["title"] == "EscalationAnswer"
    text = json.dumps(schema)
    assert '"ApproveDecision"' in text and '"RejectDecision"' in text
    assert '"EditDecision"' not in text and '"RespondDecision"' not in text
    assert '"minItems": 2' in text and '"maxItems": 2' in text


def test_a_deployment_that_requires_reasons_says_so_in_the_schema() -> None:
    def required(require_reason: bool) -> dict[str, Any]:
        item = escalation_items(
            "confidence",
            [denial()],
            settings=EscalationSettings(require_reason=require_reason),
            thread_id="t",
            policy_snapshot_id=None,
            interrupt_ids=[None],
            expires=lambda d: None,
        )
        schema = TypeAdapter(
            answer_schema(
                item,
                EscalationSettings(require_reason=require_reason),
                per_call=False,
                check=lambda a: a,
            )
        ).json_schema()
        return {name: d.get("required") for name, d in schema["$defs"].items()}

    assert required(True)["ApproveDecision"] == ["type", "message"]
    assert required(True)["RejectDecision"] == ["type", "message"]
    assert required(True)["ShortAnswer"] == ["action", "reason"]
    assert required(False)["ApproveDecision"] == ["type"]
    assert required(False)["ShortAnswer"] == ["action"]
    assert required(False)["RespondDecision"] == ["type", "message"]  # its text, always


def test_the_digest_changes_with_the_engines_policy_and_a_stale_answer_is_refused() -> None:
    h = Harness()
    h.start(denied_state(denial()))
    reviewed = h.asked().value["digest"]
    # the engine's policy changes; another process (handlers without its cache) asks again
    h.conn.policy_snapshot_id = "pol_changed"
    for handler in h.handlers.values():
        handler._snapshots.clear()
    with pytest.raises(ValidationError, match="stale answer: it was given for " + reviewed) as e:
        h.resume({"decisions": [{"type": "approve", "digest": reviewed}]})
    assert h.conn.operator_calls == []
    assert h.graph.get_state(h.config).values["operator_decisions"] == []
    # the refusal names what an answer now approves
    found = re.search(r"\(digest (sha256:[0-9a-f]{64})\)", str(e.value))
    assert found is not None and found.group(1) != reviewed
    out = h.resume({"decisions": [{"type": "reject", "digest": found.group(1)}]})
    assert [d["digest"] for d in out["operator_decisions"]] == [found.group(1)]


def test_without_a_policy_snapshot_from_the_engine_the_digest_binds_unknown() -> None:
    h = Harness()
    h.conn.policy_snapshot_id = None
    h.start(denied_state(denial()))
    assert h.asked().value["policy_snapshot_id"] is None

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("engine down")

    h2 = Harness()
    h2.conn.call_tool = down  # type: ignore[method-assign]
    h2.start(denied_state(denial()))
    assert h2.asked().value["policy_snapshot_id"] is None
    assert h2.asked().value["digest"] == h.asked().value["digest"]


# --------------------------------------------------------------------------- the answers


def test_respond_gives_the_model_the_operators_text_and_executes_nothing() -> None:
    h = Harness()
    h.start(denied_state(denial()))
    out = h.resume({"decisions": [{"type": "respond", "message": "Wait for Monday's data."}]})
    assert h.conn.operator_calls == [] and h.conn.get_decision_calls == []
    [record] = out["operator_decisions"]
    assert (record["verdict"], record["action"], record["result"]) == (
        "responded",
        "decline",
        "declined",
    )
    assert record["reason"] == "Wait for Monday's data."
    [told] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert told.id == "msg-c1" and told.status == "success"
    assert str(told.content).startswith(
        "Wait for Monday's data.\n(Operator ana answered in the tool's place; decision d1 was "
        "not executed.)"
    )
    assert h.visited == [MODEL_NODE]


def test_an_edit_is_sent_scrubbed_on_the_operator_path_and_recorded_modified() -> None:
    h = Harness()
    h.start(denied_state(denial()))
    h.conn.operator_answers = [approved(webhook_url=HOOK + "/edited")]
    edited = {
        "decision_id": "d1",
        "webhook_url": HOOK + "/edited",
        "timeout_seconds": "9",  # the text of an edit box
        "force": "true",  # another gate's flag: dropped, as from a model's call
        "override_safety": "true",
        "metadata": {"ticket": "OPS-7", "Force": True, "algenta_graph": {"operator": "eve"}},
        "nonce": "guessed",  # graph-supplied: dropped
    }
    out = h.resume(
        {
            "decisions": [
                {
                    "type": "edit",
                    "edited_action": {"name": "execute_decision", "args": edited},
                    "message": "use the staging hook",
                }
            ]
        }
    )
    [sent] = h.conn.operator_calls
    assert sent["webhook_url"] == HOOK + "/edited"
    assert (sent["force"], sent["override_safety"]) == (False, True)  # the gate's flag only
    assert sent["timeout_seconds"] == 9
    assert sent["metadata"]["ticket"] == "OPS-7" and "Force" not in sent["metadata"]
    assert sent["metadata"]["algenta_graph"] == {
        "thread_id": "t1",
        "tool_call_id": "c1",
        "operator": "ana",
        "reason": "use the staging hook",
        "escalation_id": "esc_c1",
        "edited": True,
    }
    [record] = out["operator_decisions"]
    assert (record["verdict"], record["action"], record["result"]) == (
        "modified",
        "override",
        "receipt",
    )
    assert record["original_args"] == {
        "decision_id": "d1",
        "webhook_url": HOOK,
        "timeout_seconds": 5,
        "override_safety": True,
    }
    assert record["edited_args"] == {
        "decision_id": "d1",
        "webhook_url": HOOK + "/edited",
        "timeout_seconds": 9,
        "metadata": {"ticket": "OPS-7", "algenta_graph": {"operator": "eve"}},
    }
    [told] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "with edited arguments" in str(told.content) and told.status == "success"


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        ({"decision_id": "d2"}, "edit: decision_id 'd2' is not the decision reviewed ('d1')"),
        ({"webhook_url": "u", "extra": 1}, "edit: execute_decision takes no argument 'extra'"),
        ({"timeout_seconds": "soon"}, "edit: timeout_seconds must be a number from 1 to 60"),
        ({"timeout_seconds": 600}, "edit: timeout_seconds must be a number from 1 to 60"),
        ({"webhook_url": 7}, "edit: webhook_url must be a string, got int"),
        ({"metadata": "x"}, "edit: metadata must be an object, got str"),
    ],
)
def test_a_bad_edit_is_refused_by_name_and_sends_nothing(edit: dict[str, Any], needle: str) -> None:
    h = Harness()
    h.start(denied_state(denial()))
    answer = {
        "decisions": [{"type": "edit", "edited_action": {"name": "execute_decision", "args": edit}}]
    }
    with pytest.raises(ValidationError, match=re.escape(needle)):
        h.resume(answer)
    assert h.conn.operator_calls == []
    assert h.graph.get_state(h.config).values["operator_decisions"] == []


def test_an_edit_cannot_call_another_tool() -> None:
    h = Harness()
    h.start(denied_state(denial()))
    answer = {
        "decisions": [{"type": "edit", "edited_action": {"name": "log_decision", "args": {}}}]
    }
    with pytest.raises(ValidationError, match=re.escape("edited_action.name")):
        h.resume(answer)


def test_a_new_denial_the_override_meets_is_routed_like_any_other() -> None:
    h = Harness()
    h.start(denied_state(denial()))
    h.conn.operator_answers = [
        ExecutionDenial(gate="risk_floor", code="execution_blocked_risk_floor", message="low")
    ]
    out = h.resume({"decisions": [{"type": "approve"}]})
    # the override's own denial was raised under the risk floor's policy (escalate): asked
    [asked] = out["__interrupt__"]
    assert asked.value["gate"] == "risk_floor"
    [routed] = [d for d in out["denials"] if d["source"] == "operator"]
    assert (routed["gate"], routed["policy"], routed["tool_call_id"]) == (
        "risk_floor",
        "escalate",
        "c1",
    )
    assert routed["escalation_id"] != "esc_c1" and routed["raised_at"]
    assert asked.value["escalation_id"] == routed["escalation_id"]
    assert [d["result"] for d in out["operator_decisions"]] == ["denied"]
    h.conn.operator_answers = [approved()]
    out = h.resume({"decisions": [{"type": "approve"}]})
    assert [d["gate"] for d in out["operator_decisions"]] == ["confidence", "risk_floor"]
    assert [d["result"] for d in out["operator_decisions"]] == ["denied", "receipt"]
    assert h.visited == [MODEL_NODE]


def test_a_new_denial_under_a_reporting_policy_goes_to_the_model() -> None:
    h = Harness(policies={"risk_floor": "report"})
    h.start(denied_state(denial()))
    h.conn.operator_answers = [
        ExecutionDenial(gate="risk_floor", code="execution_blocked_risk_floor", message="low")
    ]
    out = h.resume({"decisions": [{"type": "approve"}]})
    assert "__interrupt__" not in out and h.visited == [MODEL_NODE]
    [routed] = [d for d in out["denials"] if d["source"] == "operator"]
    assert routed["policy"] == "report" and "escalation_id" not in routed


def test_a_new_denial_under_a_halting_run_policy_ends_the_run() -> None:
    h = Harness()
    h.config["configurable"]["on_denial"] = {"risk_floor": "halt"}
    h.start(denied_state(denial()))
    h.conn.operator_answers = [
        ExecutionDenial(gate="risk_floor", code="execution_blocked_risk_floor", message="low")
    ]
    out = h.resume({"decisions": [{"type": "approve"}]})
    [routed] = [d for d in out["denials"] if d["source"] == "operator"]
    assert routed["policy"] == "halt" and h.visited == []
    assert h.graph.get_state(h.config).next == ()


# --------------------------------------------------------------------------- deadlines


def test_past_the_deadline_any_answer_declines_as_expired() -> None:
    settings = EscalationSettings(expires_after={"confidence": timedelta(seconds=60)})
    later = datetime(2030, 1, 1, 0, 1, 1, tzinfo=timezone.utc)
    h = Harness(settings=settings, clock=lambda: later)
    h.start(denied_state(denial()))
    assert h.asked().value["expires_at"] == "2030-01-01T00:01:00+00:00"
    out = h.resume({"decisions": [{"type": "approve", "message": "now!"}]})
    assert h.conn.operator_calls == [] and h.conn.get_decision_calls == []
    [record] = out["operator_decisions"]
    assert (record["verdict"], record["action"], record["result"]) == (
        "expired",
        "decline",
        "declined",
    )
    assert record["expires_at"] == "2030-01-01T00:01:00+00:00"
    assert record["decided_at"] == later.isoformat()
    assert record["reason"] == (
        "the escalation expired at 2030-01-01T00:01:00+00:00; the operator's approve arrived "
        "after it and was not executed (now!)"
    )
    [told] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "EXPIRED at 2030-01-01T00:01:00+00:00" in str(told.content)
    assert told.status == "error"


def test_on_its_deadline_an_answer_still_takes_effect() -> None:
    settings = EscalationSettings(expires_after={"confidence": timedelta(seconds=60)})
    exactly = datetime(2030, 1, 1, 0, 1, 0, tzinfo=timezone.utc)
    h = Harness(settings=settings, clock=lambda: exactly)
    h.start(denied_state(denial()))
    h.conn.operator_answers = [approved()]
    out = h.resume({"decisions": [{"type": "approve"}]})
    assert [d["verdict"] for d in out["operator_decisions"]] == ["approved"]
    assert len(h.conn.operator_calls) == 1


def test_a_gate_without_a_deadline_never_expires() -> None:
    settings = EscalationSettings(expires_after={"risk_floor": timedelta(seconds=1)})
    much_later = datetime(2099, 1, 1, tzinfo=timezone.utc)
    h = Harness(settings=settings, clock=lambda: much_later)
    h.start(denied_state(denial()))
    assert h.asked().value["expires_at"] is None
    out = h.resume({"decisions": [{"type": "reject"}]})
    assert [d["verdict"] for d in out["operator_decisions"]] == ["declined"]


# --------------------------------------------------------------------------- per call


def test_per_call_asks_one_tool_approval_per_call_and_applies_them_together() -> None:
    h = Harness(settings=EscalationSettings(interrupt_mode="per_call"))
    h.start(denied_state(denial(call="c1"), denial(call="c2", decision="d2")))
    first = h.asked()
    assert first.value["type"] == "tool_approval" and first.value["tool_call_id"] == "c1"
    assert first.value["escalations"][0]["interrupt_id"] == first.id
    assert first.response_schema["title"] == "EscalationAnswer"
    h.resume({"type": "reject", "message": "not d1"})
    assert h.conn.operator_calls == []  # nothing before every call is answered
    second = h.asked()
    assert second.value["tool_call_id"] == "c2" and second.id != first.id
    assert second.value["escalations"][0]["interrupt_id"] == second.id
    h.conn.operator_answers = [approved("d2")]
    out = h.resume({"type": "approve"})
    assert [(d["tool_call_id"], d["verdict"]) for d in out["operator_decisions"]] == [
        ("c1", "declined"),
        ("c2", "approved"),
    ]
    assert [d["interrupt_id"] for d in out["operator_decisions"]] == [first.id, second.id]
    assert [c["decision_id"] for c in h.conn.operator_calls] == ["d2"]


def test_per_call_one_operator_answers_every_call_of_a_step() -> None:
    h = Harness(settings=EscalationSettings(interrupt_mode="per_call"))
    h.config["configurable"].pop("langgraph_auth_user")
    h.start(denied_state(denial(call="c1"), denial(call="c2", decision="d2")))
    h.resume({"type": "reject", "operator": "ana"})
    with pytest.raises(ValidationError, match="operator 'bo' is not 'ana', who answered"):
        h.resume({"type": "reject", "operator": "bo"})
    out = h.resume({"type": "reject", "operator": "ana"})
    assert [d["operator"] for d in out["operator_decisions"]] == ["ana", "ana"]


# --------------------------------------------------------------------------- around the answer


def test_a_notice_is_sent_once_per_escalation_however_often_it_is_asked() -> None:
    notices: list[Any] = []
    h = Harness(settings=EscalationSettings(hook=notices.append))
    h.start(denied_state(denial(call="c1"), denial(call="c2", decision="d2")))
    malformed: tuple[object, ...] = ({"decisions": []}, "yes", {"action": "maybe"})
    for bad in malformed:
        with pytest.raises(ValidationError):
            h.resume(bad)  # each re-enters the handler, which asks again
    assert [n["escalation_id"] for n in notices] == ["esc_c1", "esc_c2"]
    [first] = [n for n in notices if n["escalation_id"] == "esc_c1"]
    assert first["thread_id"] == "t1" and first["gate"] == "confidence"
    assert first["digest"] == h.asked().value["escalations"][0]["digest"]
    assert first["asked_at"] == RAISED and first["decision_id"] == "d1"
    assert first["allowed_decisions"] == ["approve", "edit", "reject", "respond"]


def test_the_thread_metadata_says_what_it_waits_on_and_who_decided() -> None:
    h = Harness()
    state = denied_state(denial())
    state["operator_decisions"] = [
        {"operator": "bo", "escalation_id": "esc_old", "tool_call_id": "c0"}
    ]
    h.start(state)
    assert h.metadata.patches == [("t1", {WAITING_KEY: ["confidence"]})]
    h.resume({"decisions": [{"type": "reject"}]})
    assert h.metadata.patches[-1] == ("t1", {WAITING_KEY: [], DECIDED_KEY: ["ana", "bo"]})


def test_every_record_says_who_with_which_roles_what_they_saw_and_when() -> None:
    h = Harness(clock=lambda: datetime(2030, 1, 1, 0, 5, tzinfo=timezone.utc))
    h.start(denied_state(denial()))
    asked = h.asked()
    out = h.resume({"action": "decline", "reason": "no budget"})
    [record] = out["operator_decisions"]
    assert (record["operator"], record["roles"]) == ("ana", ["operator:confidence"])
    assert record["digest"] == asked.value["escalations"][0]["digest"]
    assert record["interrupt_id"] == asked.id
    assert (record["asked_at"], record["decided_at"]) == (RAISED, "2030-01-01T00:05:00+00:00")
    assert (record["verdict"], record["reason"]) == ("declined", "no budget")
    assert record["original_args"] is None and record["edited_args"] is None
    assert {"seq", "prev", "hash"} <= set(record)  # sealed into the chain like every record


# --------------------------------------------------------------------------- pure parts


def test_edited_arguments_read_the_edit_boxes_back_in_their_types() -> None:
    reviewed = reviewed_args(denial(), "override_safety")
    assert edited_arguments(reviewed, {}) == {"decision_id": "d1", "webhook_url": HOOK}
    assert edited_arguments(reviewed, {"timeout_seconds": "12"})["timeout_seconds"] == 12
    kept = edited_arguments(reviewed, {"webhook_url": "12"})
    assert kept["webhook_url"] == "12"  # a string was a string
    text = edited_arguments({**reviewed, "metadata": {}}, {"metadata": '{"a": 1}'})
    assert text["metadata"] == {"a": 1}
    assert edited_arguments(reviewed, {"timeout_seconds": 3.5})["timeout_seconds"] == 3.5
    with pytest.raises(ValueError, match="timeout_seconds must be a number"):
        edited_arguments(reviewed, {"timeout_seconds": "{"})  # not JSON: kept, then refused


def test_a_decided_answer_says_its_verdict() -> None:
    reviewed = reviewed_args(denial(), "override_safety")
    same = edited_arguments(reviewed, dict(reviewed))
    assert Decided("approve").verdict(reviewed) == "approved"
    assert Decided("approve", form="short").verdict(reviewed) == "overrode"
    assert Decided("edit", edited_args=same).verdict(reviewed) == "approved"
    changed = {**same, "webhook_url": "u2"}
    assert Decided("edit", edited_args=changed).verdict(reviewed) == "modified"
    assert Decided("reject").verdict(reviewed) == "declined"
    assert Decided("respond", reason="x").verdict(reviewed) == "responded"
    assert [Decided(t).action for t in ("approve", "edit", "reject", "respond")] == [
        "override",
        "override",
        "decline",
        "decline",
    ]


def test_the_claim_of_an_answer_holds_everything_the_record_needs() -> None:
    [item] = escalation_items(
        "confidence",
        [denial()],
        settings=EscalationSettings(expires_after={"confidence": timedelta(seconds=60)}),
        thread_id="t9",
        policy_snapshot_id="p",
        interrupt_ids=["i1"],
        expires=lambda d: "2030-01-01T00:01:00+00:00",
    )
    answer = OperatorAnswer("ana", (Decided("approve", reason="ok"),))
    claim = answer.as_claim("ana", items=[item], thread_id="t9", roles=["operator"], decided_at="x")
    assert claim == {
        "operator": "ana",
        "roles": ["operator"],
        "decided_at": "x",
        "thread_id": "t9",
        "decisions": [
            {
                "action": "override",
                "reason": "ok",
                "type": "approve",
                "verdict": "approved",
                "edited_args": None,
                "digest": item["digest"],
                "interrupt_id": "i1",
                "asked_at": RAISED,
                "expires_at": "2030-01-01T00:01:00+00:00",
            }
        ],
    }
    late = answer.as_claim("ana", items=[item], decided_at="x", expired=[True])
    assert "thread_id" not in late
    [decided] = late["decisions"]
    assert (decided["action"], decided["verdict"], decided["edited_args"]) == (
        "decline",
        "expired",
        None,
    )


def test_is_answered_and_open_denials() -> None:
    state = denied_state(denial(call="c1"), denial(call="c2", decision="d2"))
    assert [d["tool_call_id"] for d in open_denials(state, "confidence")] == ["c1", "c2"]
    assert open_denials(state, "risk_floor") == []
    state["operator_decisions"] = [{"escalation_id": "esc_c2", "tool_call_id": "c2"}]
    assert [d["tool_call_id"] for d in open_denials(state, "confidence")] == ["c1"]
    assert not is_answered(denial(call="c1"), [{"escalation_id": "esc_c2"}])
    assert is_answered(denial(call="c1"), [{"escalation_id": None, "tool_call_id": "c1"}])
    assert not is_answered(denial(call="c1"), [{"escalation_id": "", "tool_call_id": "c9"}])


def test_authenticated_roles() -> None:
    def conf(user: Any, **extra: Any) -> Any:
        return {"configurable": {"langgraph_auth_user": user, **extra}}

    assert authenticated_roles(None) == []
    assert authenticated_roles(conf(OPERATOR)) == ["operator:confidence"]
    anonymous = {"identity": "x", "is_authenticated": False, "permissions": ["operator"]}
    assert authenticated_roles(conf(anonymous)) == []
    assert authenticated_roles(
        conf({"identity": "x"}, langgraph_auth_permissions=["auditor", 3])
    ) == ["auditor"]


def test_the_handler_checks_its_settings() -> None:
    tools, _, _ = make_node()
    with pytest.raises(ValueError, match=r"policies: unknown gate 'novel'"):
        DenialHandler("confidence", tools.executor, policies={"novel": "halt"})
    handler = DenialHandler("confidence", tools.executor, policies={"risk_floor": "halt"})
    assert handler.policies == {
        "idempotency": "report",
        "confidence": "escalate",
        "risk_floor": "halt",
        "approval": "escalate",
        "budget": "report",
        "arguments": "report",
    }
    assert isinstance(handler.settings, EscalationSettings)
    assert handler.clock().tzinfo is not None
    now = datetime.now(timezone.utc)
    assert abs(handler.clock() - now) < timedelta(minutes=1)
