"""Every form of an operator's answer, parsed by the interrupt's ``response_schema``.

Pure: :func:`algenta_graph.nodes.answers.answer_schema` over escalation items built as the
denial handlers build them (``docs/ARCHITECTURE.md``, "Escalation and the operator"): Agent
Inbox's list of responses, LangChain's decisions with the top-level ``operator`` / ``reason`` /
``digest``, the short form, and a held call's edit. Each refusal is checked by its words, since
they are what an operator reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from governed_stub import HOOK, escalated_denial, held_denial, items_of
from pydantic import TypeAdapter, ValidationError

from algenta_graph.governance.escalations import EscalationSettings
from algenta_graph.nodes.answers import OperatorAnswer, answer_schema, edited_call_arguments
from algenta_graph.nodes.questions import EscalationItem, request_digest


def engine_denial(call: str = "c1", decision: str = "d1") -> dict[str, Any]:
    return escalated_denial("confidence", call, decision)


def parse(
    answer: Any,
    items: Sequence[EscalationItem],
    settings: EscalationSettings | None = None,
    *,
    per_call: bool = False,
) -> OperatorAnswer:
    settings = settings or EscalationSettings()
    model = answer_schema(items, settings, per_call=per_call, check=lambda a: a)
    root = TypeAdapter(model).validate_python(answer).root
    assert isinstance(root, OperatorAnswer)
    return root


def refusal(answer: Any, items: Sequence[EscalationItem], **kw: Any) -> str:
    with pytest.raises(ValidationError) as e:
        parse(answer, items, **kw)
    return str(e.value)


SETTINGS = EscalationSettings()
TWO = items_of("confidence", [engine_denial("c1", "d1"), engine_denial("c2", "d2")], SETTINGS)
ONE = TWO[:1]


# --------------------------------------------------------------------------- Agent Inbox


def test_agent_inbox_accept_ignore_and_the_responders_name() -> None:
    answer = parse(
        [{"type": "accept", "args": None, "operator": "ana"}, {"type": "ignore", "args": None}],
        TWO,
    )
    assert answer.operator == "ana"  # the first response that names one
    assert [(d.type, d.reason, d.edited_args, d.form) for d in answer.decisions] == [
        ("approve", None, None, "inbox"),
        ("reject", None, None, "inbox"),
    ]
    assert answer.digests == (TWO[0]["digest"], TWO[1]["digest"])
    later = parse(
        [{"type": "accept", "args": None}, {"type": "accept", "args": None, "operator": "bo"}], TWO
    )
    assert later.operator == "bo"  # a later response names the operator when the first does not


def test_agent_inbox_response_is_the_text_for_the_model_and_may_not_be_empty() -> None:
    [decided] = parse([{"type": "response", "args": "Wait for Monday."}], ONE).decisions
    assert (decided.type, decided.reason) == ("respond", "Wait for Monday.")
    for empty in ("", "   "):
        message = refusal([{"type": "response", "args": empty}], ONE)
        assert "Value error, response: args must be the text for the model [" in message
    # an accept with text carries no reason: only a response's text is one
    [accepted] = parse([{"type": "accept", "args": "looks fine"}], ONE).decisions
    assert (accepted.type, accepted.reason) == ("approve", None)


def test_agent_inbox_edit_names_the_escalated_call_and_sends_the_checked_arguments() -> None:
    edit = {"action": "execute_decision", "args": {"decision_id": "d1", "timeout_seconds": "9"}}
    [decided] = parse([{"type": "edit", "args": edit}], ONE).decisions
    assert decided.type == "edit"
    assert decided.edited_args == {"decision_id": "d1", "webhook_url": HOOK, "timeout_seconds": 9}
    for wrong in ({"action": "refund", "args": {}}, "execute_decision"):
        message = refusal([{"type": "edit", "args": wrong}], ONE)
        assert (
            "edit: args must be {'action': 'execute_decision', 'args': {...}} (the escalated "
            "call; an edit cannot call another tool)"
        ) in message


def test_agent_inbox_edit_of_a_held_call_names_its_own_tool() -> None:
    held = items_of("approval", [held_denial()], SETTINGS)
    edit = {"action": "delete_customer", "args": {"account_id": "a2", "force": True}}
    [decided] = parse([{"type": "edit", "args": edit}], held).decisions
    assert decided.edited_args == {"account_id": "a2"}  # scrubbed as a model's call
    message = refusal([{"type": "edit", "args": {"action": "execute_decision", "args": {}}}], held)
    assert "edit: args must be {'action': 'delete_customer', 'args': {...}}" in message


def test_agent_inbox_answers_are_refused_where_every_answer_needs_a_reason() -> None:
    strict = EscalationSettings(require_reason=True)
    items = items_of("confidence", [engine_denial()], strict)
    message = refusal([{"type": "accept", "args": None}], items, settings=strict)
    assert (
        "this deployment requires a reason for every answer, and Agent Inbox's accept, ignore "
        "and edit carry none: answer with LangChain's decisions and a message"
    ) in message
    # a response carries its text, which is its reason
    [decided] = parse([{"type": "response", "args": "no"}], items, settings=strict).decisions
    assert decided.reason == "no"


def test_agent_inbox_responses_are_bound_by_their_digest() -> None:
    ok = parse([{"type": "accept", "args": None, "digest": ONE[0]["digest"]}], ONE)
    assert ok.decisions[0].type == "approve"
    message = refusal([{"type": "accept", "args": None, "digest": "sha256:old"}], ONE)
    assert (
        "stale answer: it was given for sha256:old, but the escalation pending here is "
        f"escalation esc_c1 (digest {ONE[0]['digest']}); nothing was done"
    ) in message


# --------------------------------------------------------------------------- the short form


def test_the_short_form_applies_to_every_call_and_is_bound_by_the_requests_digest() -> None:
    answer = parse({"action": "override", "operator": "ana", "reason": "checked"}, TWO)
    assert answer.operator == "ana"
    assert [(d.type, d.reason, d.form) for d in answer.decisions] == [
        ("approve", "checked", "short"),
        ("approve", "checked", "short"),
    ]
    declined = parse({"action": "decline"}, TWO)
    assert [d.type for d in declined.decisions] == ["reject", "reject"]
    assert declined.operator is None
    whole = request_digest(TWO)
    assert parse({"action": "decline", "digest": whole}, TWO).decisions[0].type == "reject"
    message = refusal({"action": "override", "digest": TWO[0]["digest"]}, TWO)
    assert (
        f"stale answer: it was given for {TWO[0]['digest']}, but the escalation pending here is "
        f"escalation esc_c1, esc_c2 (digest {whole}); nothing was done: review the pending "
        "escalation and answer again"
    ) in message


# --------------------------------------------------------------------------- LangChain's decisions


def test_the_top_level_operator_reason_and_digest_of_langchains_decisions() -> None:
    whole = request_digest(TWO)
    answer = parse(
        {
            "decisions": [{"type": "approve"}, {"type": "reject", "message": "not this one"}],
            "operator": " ana ",
            "reason": "batch review",
            "digest": whole,
        },
        TWO,
    )
    assert answer.operator == "ana"  # stripped
    assert [(d.type, d.reason, d.form) for d in answer.decisions] == [
        ("approve", "batch review", "hitl"),  # the top-level reason where a decision has none
        ("reject", "not this one", "hitl"),
    ]
    message = refusal({"decisions": [{"type": "approve"}] * 2, "digest": "sha256:x"}, TWO)
    assert "stale answer: it was given for sha256:x, but the escalation pending here is " in (
        message
    )
    assert "escalation esc_c1, esc_c2" in message
    # a blank operator is no operator
    assert parse({"decisions": [{"type": "approve"}], "operator": "  "}, ONE).operator is None
    # a per-decision operator when the top level names none
    named = parse({"decisions": [{"type": "approve", "operator": "bo"}]}, ONE)
    assert named.operator == "bo"


def test_a_held_calls_edit_is_an_object_of_arguments() -> None:
    with pytest.raises(ValueError, match="edit: args must be an object, got list"):
        edited_call_arguments(["a1"])  # type: ignore[arg-type]
    held = items_of("approval", [held_denial()], SETTINGS)
    edit = {"type": "edit", "edited_action": {"name": "delete_customer", "args": {"id": "a2"}}}
    [decided] = parse({"decisions": [edit]}, held).decisions
    assert decided.edited_args == {"id": "a2"}
    assert decided.verdict(held[0]["args"]) == "modified"


def test_a_decision_a_call_does_not_accept_is_refused_naming_its_place() -> None:
    # the second call names no decision: it can only be declined
    nothing = {**engine_denial("c2", "d2"), "decision_id": None}
    mixed = items_of("confidence", [engine_denial("c1"), nothing], SETTINGS)
    assert mixed[1]["allowed_decisions"] == ["reject", "respond"]
    message = refusal({"decisions": [{"type": "approve"}, {"type": "approve"}]}, mixed)
    assert (
        "Value error, decisions[1]: 'approve' is not accepted for this confidence escalation; "
        "allowed: reject, respond ["
    ) in message
    ok = parse({"decisions": [{"type": "approve"}, {"type": "reject"}]}, mixed)
    assert [d.type for d in ok.decisions] == ["approve", "reject"]


def test_a_per_call_answer_is_recorded_as_given_per_call() -> None:
    [decided] = parse({"type": "approve", "message": "fine"}, ONE, per_call=True).decisions
    assert (decided.type, decided.reason, decided.form) == ("approve", "fine", "per_call")
    [short] = parse({"action": "decline"}, ONE, per_call=True).decisions
    assert (short.type, short.form) == ("reject", "per_call")
