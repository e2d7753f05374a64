"""parse_execution_outcome: every wire form, every input type, and junk."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import ToolMessage
from mcp.types import CallToolResult, ContentBlock, TextContent
from pydantic import ValidationError
from wire_server import HINTS, denial_body

from algenta_graph.connection.outcomes import (
    KNOWN_GATES,
    ExecutionDenial,
    ExecutionFailure,
    ExecutionReceipt,
    outcome_from_dict,
    parse_execution_outcome,
    tool_result_json,
)

RECEIPT: dict[str, Any] = {
    "decision_id": "dec_123",
    "webhook_url": "https://hooks.example.test/algenta",
    "execution_status": "delivered",
    "response_code": 202,
    "executed_at": "2026-01-01T00:00:00Z",
    "policy_snapshot_id": "pol_123",
    "schema_snapshot_id": "sch_123",
    "manifest_version": "1.0.0",
    "payload_summary": {"action": "ship_it", "confidence": 0.82},
    "safety_overridden": False,
}


def public_server_body(gate: str, upstream: dict[str, Any] | None = None) -> dict[str, Any]:
    """The public algenta-mcp server's form: upstream body serialised into the message."""
    upstream = upstream if upstream is not None else denial_body(gate)
    text = json.dumps(upstream, ensure_ascii=True, sort_keys=True)
    return {
        "error": {
            "code": f"execution_blocked_{gate}",
            "message": f"API error 409: {text}",
            "status_code": 409,
        }
    }


def text_result(text: str, *, is_error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], isError=is_error)


def assert_denial(outcome: Any, gate: str) -> None:
    assert isinstance(outcome, ExecutionDenial), outcome
    assert outcome.gate == gate
    assert outcome.code == f"execution_blocked_{gate}"
    assert outcome.message == f"blocked by the {gate} gate"
    assert outcome.override_hint == HINTS.get(gate, "ask an operator")


# ------------------------------------------------------------------ receipts


def test_the_sdk_receipt_fixture_is_a_receipt() -> None:
    fixture = Path("/work/shared/contracts/algenta-reference/sdk-receipt.fixture.json")
    data = json.loads(fixture.read_text()) if fixture.exists() else RECEIPT
    outcome = parse_execution_outcome(data)
    assert isinstance(outcome, ExecutionReceipt)
    assert outcome.decision_id == data["decision_id"]


@pytest.mark.parametrize(
    "form",
    [
        "dict",
        "json",
        "double_json",
        "text_result",
        "structured_result",
        "structured_result_wrapped",
        "serialised_call_tool_result",
        "tool_message_str",
        "tool_message_blocks",
        "tool_message_artifact",
        "content_blocks",
        "serialised_blocks",
    ],
)
def test_a_receipt_in_every_form(form: str) -> None:
    text = json.dumps(RECEIPT)
    value: Any = {
        "dict": RECEIPT,
        "json": text,
        "double_json": json.dumps(text),
        "text_result": text_result(text),
        "structured_result": CallToolResult(
            content=[TextContent(type="text", text=text)], structuredContent=RECEIPT
        ),
        "structured_result_wrapped": CallToolResult(
            content=[], structuredContent={"result": RECEIPT}
        ),
        "serialised_call_tool_result": json.dumps(
            {"meta": None, "content": [{"type": "text", "text": text}], "isError": False}
        ),
        "tool_message_str": ToolMessage(content=text, tool_call_id="c1"),
        "tool_message_blocks": ToolMessage(
            content=[{"type": "text", "text": text}], tool_call_id="c1"
        ),
        "tool_message_artifact": ToolMessage(
            content=[], tool_call_id="c1", artifact={"structured_content": {"result": RECEIPT}}
        ),
        "content_blocks": [{"type": "text", "text": text}],
        "serialised_blocks": ToolMessage(
            content=json.dumps([{"type": "text", "text": text, "id": "lc_1"}]), tool_call_id="c"
        ),
    }[form]
    outcome = parse_execution_outcome(value)
    assert isinstance(outcome, ExecutionReceipt), outcome
    assert outcome.model_dump(mode="json") == {"kind": "receipt", **RECEIPT}


def test_a_receipt_inside_prose_is_not_a_receipt_but_a_denial_inside_prose_is_a_denial() -> None:
    prose = f"Result: {json.dumps(RECEIPT)} (cached from an earlier call)"
    assert isinstance(parse_execution_outcome(prose), ExecutionFailure)
    assert isinstance(parse_execution_outcome(text_result(prose)), ExecutionFailure)
    denial = f"upstream said {json.dumps(denial_body('risk_floor'))} -- giving up"
    assert_denial(parse_execution_outcome(text_result(denial)), "risk_floor")


def test_a_failed_delivery_is_still_a_receipt_and_extra_fields_are_kept() -> None:
    body = {
        **RECEIPT,
        "execution_status": "failed",
        "response_code": None,
        "error": "connection refused",
        "force": False,
    }
    outcome = parse_execution_outcome(body)
    assert isinstance(outcome, ExecutionReceipt)
    assert outcome.execution_status == "failed"
    dumped = outcome.model_dump(mode="json")
    assert dumped["error"] == "connection refused" and dumped["force"] is False


@pytest.mark.parametrize(
    "mutation",
    [
        {"execution_status": "pending"},
        {"execution_status": "DELIVERED"},
        {"response_code": "202"},
        {"response_code": True},
        {"safety_overridden": "false"},
        {"safety_overridden": 0},
        {"payload_summary": "ship_it"},
        {"executed_at": "yesterday"},
        {"executed_at": 1767225600},
        {"decision_id": ""},
        {"decision_id": 123},
        {"webhook_url": None},
    ],
)
def test_a_mistyped_receipt_is_a_failure(mutation: dict[str, Any]) -> None:
    outcome = parse_execution_outcome({**RECEIPT, **mutation})
    assert isinstance(outcome, ExecutionFailure)
    assert "dec_123" in outcome.raw or "decision_id" in outcome.raw


@pytest.mark.parametrize("missing", sorted(RECEIPT))
def test_a_receipt_missing_any_field_is_a_failure(missing: str) -> None:
    body = {k: v for k, v in RECEIPT.items() if k != missing}
    assert isinstance(parse_execution_outcome(body), ExecutionFailure)


def test_an_error_flagged_result_never_yields_a_receipt() -> None:
    outcome = parse_execution_outcome(text_result(json.dumps(RECEIPT), is_error=True))
    assert isinstance(outcome, ExecutionFailure)
    message = ToolMessage(content=json.dumps(RECEIPT), tool_call_id="c", status="error")
    assert isinstance(parse_execution_outcome(message), ExecutionFailure)


def test_a_receipt_next_to_a_denial_is_a_contradiction() -> None:
    result = CallToolResult(
        content=[TextContent(type="text", text=json.dumps(denial_body("confidence")))],
        structuredContent=RECEIPT,
    )
    outcome = parse_execution_outcome(result)
    assert isinstance(outcome, ExecutionFailure)
    assert "contradict" in outcome.message


# ------------------------------------------------------------------ denials


@pytest.mark.parametrize("gate", [*KNOWN_GATES, "approval"])
def test_is_error_true_with_and_without_the_fastmcp_prefix(gate: str) -> None:
    body = json.dumps(denial_body(gate))
    assert_denial(parse_execution_outcome(text_result(body, is_error=True)), gate)
    prefixed = f"Error executing tool execute_decision: {body}"
    assert_denial(parse_execution_outcome(text_result(prefixed, is_error=True)), gate)


@pytest.mark.parametrize("gate", KNOWN_GATES)
def test_is_error_false_with_an_error_body(gate: str) -> None:
    assert_denial(parse_execution_outcome(text_result(json.dumps(denial_body(gate)))), gate)


@pytest.mark.parametrize("gate", KNOWN_GATES)
def test_structured_content_plain_and_result_wrapped(gate: str) -> None:
    plain = CallToolResult(content=[], structuredContent=denial_body(gate))
    wrapped = CallToolResult(content=[], structuredContent={"result": denial_body(gate)})
    assert_denial(parse_execution_outcome(plain), gate)
    assert_denial(parse_execution_outcome(wrapped), gate)


@pytest.mark.parametrize("gate", KNOWN_GATES)
def test_the_public_algenta_server_form(gate: str) -> None:
    outcome = parse_execution_outcome(text_result(json.dumps(public_server_body(gate))))
    assert_denial(outcome, gate)
    assert isinstance(outcome, ExecutionDenial)
    assert outcome.status_code == 409


def test_the_public_server_form_with_a_fastapi_detail_body() -> None:
    upstream = {"detail": denial_body("risk_floor")}
    outcome = parse_execution_outcome(public_server_body("risk_floor", upstream))
    assert_denial(outcome, "risk_floor")


def test_the_public_server_form_with_an_unparseable_message_keeps_the_gate_from_the_code() -> None:
    body = {
        "error": {
            "code": "execution_blocked_idempotency",
            "message": "API error 409: <html>conflict</html>",
            "status_code": 409,
        }
    }
    outcome = parse_execution_outcome(body)
    assert isinstance(outcome, ExecutionDenial)
    assert outcome.gate == "idempotency"
    assert outcome.status_code == 409
    assert "conflict" in outcome.message


@pytest.mark.parametrize("gate", KNOWN_GATES)
def test_double_encoded_denials(gate: str) -> None:
    once = json.dumps(denial_body(gate))
    assert_denial(parse_execution_outcome(text_result(json.dumps(once))), gate)
    assert_denial(parse_execution_outcome(json.dumps(once)), gate)
    # the error object itself as a JSON string
    as_string = {"error": json.dumps(denial_body(gate)["error"])}
    assert_denial(parse_execution_outcome(as_string), gate)


@pytest.mark.parametrize("gate", KNOWN_GATES)
def test_a_tool_message_from_the_adapters_carries_a_denial(gate: str) -> None:
    blocks: list[str | dict[Any, Any]] = [
        {"type": "text", "text": json.dumps(denial_body(gate)), "id": "lc_1"}
    ]
    assert_denial(parse_execution_outcome(ToolMessage(content=blocks, tool_call_id="c")), gate)
    errored = ToolMessage(content=blocks, tool_call_id="c", status="error")
    assert_denial(parse_execution_outcome(errored), gate)


def test_the_gate_can_come_from_the_code_alone() -> None:
    outcome = parse_execution_outcome({"error": {"code": "execution_blocked_confidence"}})
    assert isinstance(outcome, ExecutionDenial)
    assert outcome.gate == "confidence" and outcome.message


def test_an_unknown_gate_is_still_a_denial() -> None:
    outcome = parse_execution_outcome(denial_body("approval_window"))
    assert isinstance(outcome, ExecutionDenial)
    assert outcome.gate == "approval_window" and not outcome.is_known_gate


def test_contradicting_gates_are_a_failure() -> None:
    body = {"error": {"code": "execution_blocked_confidence", "gate": "risk_floor", "message": "x"}}
    outcome = parse_execution_outcome(body)
    assert isinstance(outcome, ExecutionFailure)
    assert "contradicting gates" in outcome.message


# ------------------------------------------------------------------ failures


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (text_result("Error executing tool execute_decision: boom", is_error=True), "boom"),
        ({"error": {"code": "tool_error", "message": "db down", "status_code": 500}}, "db down"),
        ({"error": "plain text error"}, "plain text error"),
        ({"status": "pending"}, "pending"),
        ("", ""),
        ("null", "null"),
        ([], ""),
        (None, "null"),
        (42, "42"),
        (ToolMessage(content="the tool crashed", tool_call_id="c", status="error"), "crashed"),
    ],
)
def test_anything_else_is_a_failure_that_keeps_the_raw_text(value: Any, needle: str) -> None:
    outcome = parse_execution_outcome(value)
    assert isinstance(outcome, ExecutionFailure), outcome
    assert needle in outcome.raw
    assert outcome.message


def test_an_object_that_cannot_even_be_printed_is_a_failure() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

        def __getattr__(self, name: str) -> Any:
            raise RuntimeError("no")

    assert isinstance(parse_execution_outcome(Hostile()), ExecutionFailure)


def test_deeply_nested_json_is_a_failure_not_a_crash() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert isinstance(parse_execution_outcome(deep), ExecutionFailure)
    wrapped: Any = RECEIPT
    for _ in range(10):  # escaping doubles the size per level
        wrapped = json.dumps(wrapped)
    assert isinstance(parse_execution_outcome(wrapped), ExecutionFailure)


# ------------------------------------------------------------------ state round trip


@pytest.mark.parametrize(
    "outcome",
    [
        ExecutionReceipt.model_validate({**RECEIPT, "extra_field": [1, 2]}),
        ExecutionDenial(gate="confidence", code="execution_blocked_confidence", message="m"),
        ExecutionFailure(message="m", raw="r"),
    ],
)
def test_dumps_are_json_and_round_trip(outcome: Any) -> None:
    dumped = outcome.model_dump(mode="json")
    assert json.loads(json.dumps(dumped)) == dumped
    assert dumped["kind"] in {"receipt", "denial", "failure"}
    assert outcome_from_dict(dumped) == outcome


def test_outcome_from_dict_rejects_a_non_outcome() -> None:
    with pytest.raises(ValidationError):
        outcome_from_dict({"kind": "pending"})


# ------------------------------------------------------------------ junk (hypothesis)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from([*RECEIPT, "error", "result", "gate", "code", "message", "detail", "x"])
            | st.text(max_size=8),
            children,
            max_size=6,
        )
    ),
    max_leaves=25,
)


def _forms(value: Any) -> list[Any]:
    text = json.dumps(value)
    return [
        value,
        text,
        json.dumps(text),
        text_result(text),
        text_result(f"Error executing tool execute_decision: {text}", is_error=True),
        ToolMessage(content=text, tool_call_id="c"),
        [{"type": "text", "text": text}],
        {"error": {"code": "x", "message": f"API error 409: {text}"}},
    ]


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(json_values)
def test_junk_never_raises_and_never_yields_a_receipt(value: Any) -> None:
    for form in _forms(value):
        outcome = parse_execution_outcome(form)
        assert isinstance(outcome, ExecutionDenial | ExecutionFailure)


@settings(max_examples=200, deadline=None)
@given(st.text() | st.binary())
def test_random_text_and_bytes_never_raise(value: str | bytes) -> None:
    outcome = parse_execution_outcome(value)
    assert isinstance(outcome, ExecutionDenial | ExecutionFailure)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.sampled_from(sorted(RECEIPT)), json_values, min_size=0, max_size=10),
)
def test_a_receipt_needs_every_field_with_the_right_type(partial: dict[str, Any]) -> None:
    outcome = parse_execution_outcome(partial)
    if isinstance(outcome, ExecutionReceipt):
        assert set(RECEIPT) <= set(partial)
        assert outcome.execution_status in ("delivered", "failed")


# ------------------------------------------------------------------ one body, two outcomes


def _both_forms(body: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(body)
    return {
        "dict": body,
        "text": text,
        "double-encoded": json.dumps(text),
        "text-content": text_result(text),
        "structured": CallToolResult(content=[], structuredContent=body),
        "result-wrapped": CallToolResult(
            content=[TextContent(type="text", text=text)], structuredContent={"result": body}
        ),
        "tool-message": ToolMessage(content=text, tool_call_id="c"),
        "content-blocks": [{"type": "text", "text": text}],
        "detail": {"detail": body},
    }


@pytest.mark.parametrize("gate", [*KNOWN_GATES, "approval"])
@pytest.mark.parametrize("form", list(_both_forms(RECEIPT)))
def test_a_body_that_is_both_a_receipt_and_a_denial_is_not_a_receipt(gate: str, form: str) -> None:
    """A complete, valid receipt that also carries a named-gate ``error`` (the risk_floor one
    among them) is a contradiction: a failure naming it, never a receipt, never a denial."""
    body = {**RECEIPT, **denial_body(gate)}
    outcome = parse_execution_outcome(_both_forms(body)[form])
    assert isinstance(outcome, ExecutionFailure), outcome
    assert "both a receipt and a denial" in outcome.message
    assert "dec_123" in outcome.raw


@pytest.mark.parametrize(
    "error",
    [
        {"code": "execution_blocked_risk_floor", "message": "risk_p5 below the floor"},
        {"gate": "risk_floor"},
        "API error 409: " + json.dumps(denial_body("risk_floor")),
        json.dumps(denial_body("risk_floor")["error"]),
    ],
    ids=["code-only", "gate-only", "public-server-string", "json-string"],
)
def test_a_receipt_whose_error_names_the_risk_floor_gate_in_any_way_is_not_a_receipt(
    error: Any,
) -> None:
    outcome = parse_execution_outcome({**RECEIPT, "error": error})
    assert isinstance(outcome, ExecutionFailure), outcome
    assert "both a receipt and a denial" in outcome.message


def test_a_receipt_with_a_gateless_error_stays_a_receipt() -> None:
    for error in ("timeout", {"code": "webhook_timeout", "message": "no answer"}, None, 3):
        outcome = parse_execution_outcome({**RECEIPT, "error": error})
        assert isinstance(outcome, ExecutionReceipt), (error, outcome)


# ------------------------------------------------------------------ exact outcomes (fast tier)
# Each pins one behaviour the mutation run (bench/mutation.sh) found unchecked.


def _wrapped(wrap: Any, base: Any, levels: int = 10) -> str:
    """The outcome kinds (r/d/f) of ``base`` wrapped 0..levels-1 times in ``wrap``."""
    kinds = ""
    for k in range(levels):
        value = base
        for _ in range(k):
            value = wrap(value)
        kinds += parse_execution_outcome(value).kind[0]
    return kinds


def test_nesting_deeper_than_the_parsers_limit_is_a_failure_in_every_wrapping() -> None:
    """The depth limit (``_MAX_DEPTH``) holds at the same level whichever way a body nests."""
    denial = denial_body("confidence")
    assert _wrapped(lambda v: {"result": v}, RECEIPT) == "rrrrrrrfff"
    assert _wrapped(lambda v: {"result": v}, denial) == "dddddddfff"
    assert _wrapped(json.dumps, RECEIPT) == "rrrrrrrfff"
    assert _wrapped(json.dumps, denial) == "dddddddfff"
    assert _wrapped(json.dumps, denial["error"]) == "dddddddfff"
    assert _wrapped(lambda v: {"error": json.dumps(v)}, denial) == "dddddddfff"
    assert _wrapped(lambda v: {"error": json.dumps(v)}, {"gate": "confidence"}) == "fddddddfff"
    api = {"message": "API error 409: "}
    assert _wrapped(lambda v: {"error": {"message": api["message"] + json.dumps(v)}}, denial) == (
        "dddddddfff"
    )
    assert _wrapped(lambda v: {"error": {"message": json.dumps(v)}}, denial) == "dddddddfff"
    assert _wrapped(lambda v: {"detail": v}, denial) == "ddffffffff"
    assert _wrapped(lambda v: f"said {json.dumps(v)} end", denial) == "ddffffffff"
    assert _wrapped(lambda v: [{"type": "text", "text": json.dumps(v)}], RECEIPT) == "rrrrffffff"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"error": {**denial_body("risk_floor")["error"], "status_code": 409}}, 409),
        ({**denial_body("risk_floor"), "status_code": 410}, 410),
        (
            {"error": {**denial_body("risk_floor")["error"], "status_code": 422}, "status_code": 1},
            422,
        ),
        ({"error": {**denial_body("risk_floor")["error"], "status_code": True}}, None),
        ({"error": {**denial_body("risk_floor")["error"], "status_code": "409"}}, None),
        ({"error": {"gate": "risk_floor", "message": "API error 418: no"}}, 418),
        ({"error": {"gate": "risk_floor", "message": "API error 418: no", "status_code": 5}}, 5),
        ({"error": json.dumps({"gate": "risk_floor"}), "status_code": 411}, 411),
        (
            {"error": {"message": json.dumps({**denial_body("risk_floor"), "status_code": 451})}},
            451,
        ),
        ({"error": {"message": "API error 409: " + json.dumps(denial_body("risk_floor"))}}, 409),
    ],
)
def test_the_status_code_of_a_denial(body: dict[str, Any], status: int | None) -> None:
    outcome = parse_execution_outcome(body)
    assert isinstance(outcome, ExecutionDenial), outcome
    assert (outcome.gate, outcome.status_code) == ("risk_floor", status)


def test_a_denial_whose_fields_have_the_wrong_types_keeps_only_its_gate() -> None:
    body = {"error": {"gate": " confidence ", "code": 5, "message": 6, "override_hint": 7}}
    assert parse_execution_outcome(body) == ExecutionDenial(
        gate="confidence",
        code="execution_blocked_confidence",
        message="execution blocked by the confidence gate",
    )


def test_an_error_string_holding_a_denial_body() -> None:
    for inner in (denial_body("idempotency"), {"detail": denial_body("idempotency")["error"]}):
        outcome = parse_execution_outcome({"error": json.dumps(inner)})
        assert isinstance(outcome, ExecutionDenial) and outcome.gate == "idempotency", inner
    # a string error that holds a receipt (with its own gateless error) is no receipt
    sneaky = {"error": json.dumps({**RECEIPT, "error": "timeout"})}
    assert isinstance(parse_execution_outcome(sneaky), ExecutionFailure)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"error": "boom  went\nthe engine"}, "execute_decision failed: boom went the engine"),
        ({"error": {"code": "internal_error", "message": "oops"}}, "internal_error: oops"),
        ({"error": {"message": "oops"}}, "error: oops"),
        ({"error": {"code": "x", "n": 5}}, 'x: {"code": "x", "n": 5}'),
        ({**RECEIPT, **denial_body("risk_floor")}, "a body that is both a receipt and a denial"),
        (
            {"error": {"code": "execution_blocked_confidence", "gate": "risk_floor"}},
            "contradicting gates ['confidence', 'risk_floor'] in one denial body",
        ),
    ],
)
def test_the_failure_names_what_went_wrong(body: Any, message: str) -> None:
    outcome = parse_execution_outcome(body)
    assert isinstance(outcome, ExecutionFailure), outcome
    assert outcome.message == (
        message if message.startswith("execute_decision") else f"execute_decision failed: {message}"
    )


def test_an_error_that_is_not_json_serialisable_is_described_not_a_crash() -> None:
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    outcome = parse_execution_outcome({"error": {"code": "late", "when": when}})
    assert isinstance(outcome, ExecutionFailure)
    assert outcome.message == (
        'execute_decision failed: late: {"code": "late", "when": "2026-01-01 00:00:00+00:00"}'
    )


def test_failure_messages_are_snippets_of_at_most_300_characters() -> None:
    exact = "a" * 300
    assert parse_execution_outcome({"error": exact}).message == (  # type: ignore[union-attr]
        f"execute_decision failed: {exact}"
    )
    longer = parse_execution_outcome({"error": "b" * 301})
    assert longer.message == "execute_decision failed: " + "b" * 300 + "..."  # type: ignore[union-attr]
    flagged = parse_execution_outcome(text_result("c" * 400, is_error=True))
    assert flagged.message == (  # type: ignore[union-attr]
        "execute_decision failed with an MCP tool error: " + "c" * 300 + "..."
    )
    assert parse_execution_outcome("5").message == "unrecognised execute_decision result: 5"  # type: ignore[union-attr]
    assert parse_execution_outcome({"x": 1}).message == (  # type: ignore[union-attr]
        'unrecognised execute_decision result: {"x": 1}'
    )
    assert parse_execution_outcome([1, 2]).message == (  # type: ignore[union-attr]
        "unrecognised execute_decision result: "
    )
    assert parse_execution_outcome(json.dumps([1, 2])).message == (  # type: ignore[union-attr]
        "unrecognised execute_decision result: [1, 2]"
    )


def test_the_raw_text_of_a_failure() -> None:
    two = CallToolResult(
        content=[TextContent(type="text", text="one"), TextContent(type="text", text="two")],
        isError=False,
    )
    assert parse_execution_outcome(two).raw == "one\ntwo"  # type: ignore[union-attr]
    assert parse_execution_outcome(CallToolResult(content=[], isError=False)).raw == ""  # type: ignore[union-attr]
    assert parse_execution_outcome({"x": "é"}).raw == '{"x": "é"}'  # type: ignore[union-attr]
    assert parse_execution_outcome({"x": {1, 2}}).raw == '{"x": "{1, 2}"}'  # type: ignore[union-attr]
    block = TextContent(type="text", text="hi")
    assert parse_execution_outcome(block).raw == block.model_dump_json()  # type: ignore[union-attr]
    failure = ExecutionFailure(message="m", raw="kept")
    assert parse_execution_outcome(failure) == ExecutionFailure(
        message="unrecognised execute_decision result: kept", raw="kept"
    )


def test_an_unprintable_object_is_named_by_its_type() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert parse_execution_outcome(Hostile()).raw == "<unprintable Hostile>"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("extra", "expect"),
    [
        ({"isError": False}, "receipt"),
        ({"is_error": False}, "receipt"),
        ({"structuredContent": None}, "receipt"),
        ({"structured_content": None}, "receipt"),
        ({"meta": 1}, "failure"),  # content alone does not make a tool result
    ],
)
def test_a_dumped_tool_result_is_recognised_by_its_keys(extra: dict[str, Any], expect: str) -> None:
    value = {"content": [{"type": "text", "text": json.dumps(RECEIPT)}], **extra}
    assert parse_execution_outcome(value).kind == expect
    assert parse_execution_outcome(json.dumps(value)).kind == expect


def test_a_dumped_tool_result_flagged_as_an_error_in_either_spelling() -> None:
    for key in ("isError", "is_error"):
        value = {"content": [{"type": "text", "text": json.dumps(RECEIPT)}], key: True}
        outcome = parse_execution_outcome(value)
        assert isinstance(outcome, ExecutionFailure)
        assert outcome.message == (
            "the engine flagged the result as an error but its body is a receipt"
        )
    structured = {"content": [], "structured_content": RECEIPT}
    assert isinstance(parse_execution_outcome(structured), ExecutionReceipt)


def test_only_text_blocks_are_read() -> None:
    text = json.dumps(RECEIPT)
    image_with_text = SimpleNamespace(type="image", text=text)
    typeless = SimpleNamespace(text=text)
    for content in (
        [{"type": "image", "text": text}],
        [{"type": "text", "text": RECEIPT}],
        [image_with_text],
        [typeless],
    ):
        assert not isinstance(
            parse_execution_outcome(CallToolResult.model_construct(content=content, isError=False)),
            ExecutionReceipt,
        ), content
    mixed = [typeless, SimpleNamespace(type="text", text=text)]
    outcome = parse_execution_outcome(CallToolResult.model_construct(content=mixed, isError=False))
    assert isinstance(outcome, ExecutionReceipt)
    blocks: list[Any] = [{"type": "text", "text": 5}, {"type": "text", "text": text}]
    assert isinstance(
        parse_execution_outcome(ToolMessage(blocks, tool_call_id="c")), ExecutionReceipt
    )
    # a serialised list is read as content blocks only when every item is a text block
    for listed in ([{"type": "image", "text": text}], [{"a": 1}], [{"type": "text"}], blocks):
        outcome = parse_execution_outcome(json.dumps(listed))
        assert isinstance(outcome, ExecutionFailure), listed
        assert outcome.message.startswith("unrecognised execute_decision result: ["), outcome


def test_json_after_the_tool_error_prefix_and_inside_prose() -> None:
    denial = denial_body("confidence")
    blocks = json.dumps([{"type": "text", "text": json.dumps(denial)}])
    prefixed = parse_execution_outcome(f"Error executing tool execute_decision: {blocks}")
    assert isinstance(prefixed, ExecutionDenial) and prefixed.gate == "confidence"
    gate_only = {"error": {"gate": "risk_floor", "message": "m"}}
    prose = parse_execution_outcome(f"upstream said {json.dumps(gate_only)} -- giving up")
    assert isinstance(prose, ExecutionDenial) and prose.gate == "risk_floor"
    trailing = parse_execution_outcome(f"{json.dumps(gate_only)} and then some")
    assert isinstance(trailing, ExecutionDenial) and trailing.gate == "risk_floor"
    assert isinstance(parse_execution_outcome("no json { here"), ExecutionFailure)


def test_the_depth_limit_along_the_remaining_paths() -> None:
    denial = denial_body("confidence")
    assert _wrapped(lambda v: {"detail": json.dumps(v)}, denial, 12) == "ddddffffffff"
    assert _wrapped(lambda v: {"error": {"message": "said " + json.dumps(v)}}, denial, 12) == (
        "dddddddfffff"
    )
    blocks = _wrapped(lambda v: json.dumps([{"type": "text", "text": json.dumps(v)}]), denial, 12)
    assert blocks == "dddfffffffff"


def test_bytes_are_decoded_as_utf8_with_replacement() -> None:
    assert isinstance(parse_execution_outcome(json.dumps(RECEIPT).encode()), ExecutionReceipt)
    denial = parse_execution_outcome(bytearray(json.dumps(denial_body("risk_floor")).encode()))
    assert isinstance(denial, ExecutionDenial) and denial.gate == "risk_floor"
    broken = parse_execution_outcome(b"\xff\xfe not json")
    assert broken == ExecutionFailure(
        message="unrecognised execute_decision result: \ufffd\ufffd not json",
        raw="\ufffd\ufffd not json",
    )


def test_an_outcome_model_passes_through() -> None:
    receipt = ExecutionReceipt.model_validate(RECEIPT)
    assert parse_execution_outcome(receipt) == receipt
    denial = ExecutionDenial(gate="confidence", code="execution_blocked_confidence", message="m")
    assert parse_execution_outcome(denial) == denial


def test_duck_typed_results_need_only_their_own_attributes() -> None:
    text = json.dumps(RECEIPT)
    bare_result = SimpleNamespace(content=[{"type": "text", "text": text}], isError=False)
    assert isinstance(parse_execution_outcome(bare_result), ExecutionReceipt)
    bare_message = SimpleNamespace(tool_call_id="c", content=text)
    assert isinstance(parse_execution_outcome(bare_message), ExecutionReceipt)
    content_only = SimpleNamespace(content=text)  # neither a tool result nor a message
    assert isinstance(parse_execution_outcome(content_only), ExecutionFailure)
    structured_only = ToolMessage(
        content=[], tool_call_id="c", artifact={"structured_content": {"x": 1}}
    )
    assert parse_execution_outcome(structured_only).raw == '{"x": 1}'  # type: ignore[union-attr]


def test_failures_keep_the_raw_text() -> None:
    flagged = parse_execution_outcome(text_result(json.dumps(RECEIPT), is_error=True))
    assert flagged.raw == json.dumps(RECEIPT)  # type: ignore[union-attr]
    result = CallToolResult(
        content=[TextContent(type="text", text=json.dumps(denial_body("confidence")))],
        structuredContent=RECEIPT,
    )
    both = parse_execution_outcome(result)
    assert both == ExecutionFailure(
        message="the result carries contradicting outcomes (a receipt and a denial)",
        raw=json.dumps(denial_body("confidence")),
    )


def test_two_different_outcomes_of_one_kind_take_the_first() -> None:
    first, second = denial_body("confidence"), denial_body("confidence")
    second["error"]["message"] = "another message"
    result = CallToolResult(
        content=[TextContent(type="text", text=json.dumps(second))], structuredContent=first
    )
    outcome = parse_execution_outcome(result)
    assert isinstance(outcome, ExecutionDenial)
    assert outcome.message == first["error"]["message"]


def test_an_unparseable_input_names_its_exception() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

        def __getattr__(self, name: str) -> Any:
            raise RuntimeError("no")

    assert parse_execution_outcome(Hostile()) == ExecutionFailure(
        message="could not parse the execute_decision result (RuntimeError)",
        raw="<unprintable Hostile>",
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('said {"error": "boom"} end', "boom"),
        (json.dumps([{"type": "text", "text": json.dumps({"error": "boom"})}]), "boom"),
        ({"detail": {"code": "x", "message": "m"}}, "x: m"),
        (
            {"code": "execution_blocked_confidence", "gate": "risk_floor"},
            "contradicting gates ['confidence', 'risk_floor'] in one denial body",
        ),
        ({"error": json.dumps({"error": {"code": "x", "message": "m"}})}, "x: m"),
        ({"error": json.dumps({"code": "x", "message": "m"})}, "x: m"),
        (
            {"error": {"code": "x", "message": json.dumps({"error": {"code": "y"}})}},
            'x: {"error": {"code": "y"}}',
        ),
    ],
)
def test_the_failure_names_the_first_error_wherever_it_was_found(body: Any, message: str) -> None:
    outcome = parse_execution_outcome(body)
    assert outcome == ExecutionFailure(
        message=f"execute_decision failed: {message}",
        raw=outcome.raw,  # type: ignore[union-attr]
    )


def test_a_denial_inside_prose_in_an_error_message() -> None:
    body = {"error": {"message": f"said {json.dumps(denial_body('risk_floor'))} -- end"}}
    outcome = parse_execution_outcome(body)
    assert isinstance(outcome, ExecutionDenial) and outcome.gate == "risk_floor"


def test_raw_text_is_capped() -> None:
    limit = 16_384
    exact = parse_execution_outcome("x" * limit)
    assert exact.raw == "x" * limit  # type: ignore[union-attr]
    longer = parse_execution_outcome("y" * (limit + 1))
    assert longer.raw == "y" * limit + "...[truncated]"  # type: ignore[union-attr]


def test_raw_falls_back_to_repr_when_json_cannot_say_it() -> None:
    assert parse_execution_outcome({(1, 2): "x"}).raw == "{(1, 2): 'x'}"  # type: ignore[union-attr]


def test_the_depth_limit_through_prose_and_error_strings() -> None:
    denial = denial_body("confidence")

    def in_prose(value: Any) -> str:
        return f"said {json.dumps(value)} end"

    kinds = ""
    for k in range(12):
        value: Any = denial
        for _ in range(k):
            value = {"result": value}
        kinds += parse_execution_outcome(in_prose(value)).kind[0]
    assert kinds == "ddddddffffff"
    nested_message = _wrapped(lambda v: {"error": json.dumps({"message": json.dumps(v)})}, denial)
    assert nested_message == "ddddffffff"
    wrapped_result = _wrapped(lambda v: {"error": {"message": json.dumps({"result": v})}}, denial)
    assert wrapped_result == "ddddffffff"


def test_a_dumped_tool_result_in_either_spelling_keeps_its_parts() -> None:
    for key in ("structuredContent", "structured_content"):
        assert isinstance(parse_execution_outcome({"content": [], key: RECEIPT}), ExecutionReceipt)
        structured = parse_execution_outcome({"content": [], key: {"x": 1}})
        assert structured.raw == '{"x": 1}'  # type: ignore[union-attr]
    texts = {"content": [{"type": "text", "text": "nope"}], "isError": False}
    assert parse_execution_outcome(texts) == ExecutionFailure(
        message="unrecognised execute_decision result: nope", raw="nope"
    )
    assert parse_execution_outcome(42) == ExecutionFailure(
        message="unrecognised execute_decision result: 42", raw="42"
    )


def test_a_denial_model_with_its_own_code_passes_through() -> None:
    denial = ExecutionDenial(gate="confidence", code="policy_min_confidence", message="m")
    assert parse_execution_outcome(denial) == denial


# --------------------------------------------------------------------------- tool_result_json


def tm(content: Any, artifact: Any = None) -> ToolMessage:
    return ToolMessage(content=content, tool_call_id="x", artifact=artifact)


@pytest.mark.parametrize(
    ("result", "body"),
    [
        (tm('{"a": 1}'), {"a": 1}),
        (tm('{"a": 1}', {"structured_content": {"b": 2}}), {"b": 2}),
        (tm('{"a": 1}', {"structured_content": None}), {"a": 1}),
        (tm('{"a": 1}', {"other": {"b": 2}}), {"a": 1}),
        (tm('{"a": 1}', ["structured_content"]), {"a": 1}),
        (tm("", {"structured_content": {"result": [1]}}), [1]),
        (tm([{"type": "text", "text": '{"a":'}, {"type": "image"}, " [2]}"]), {"a": [2]}),
        (tm([{"type": "text", "text": '{"a":'}, {"type": "text", "text": " [2]}"}]), {"a": [2]}),
        (tm('{"result": {"c": 3}}'), {"c": 3}),
        (tm('{"result": 1, "x": 2}'), {"result": 1, "x": 2}),
        (tm('"text"'), "text"),
        (tm("[1, 2]"), [1, 2]),
        (tm("not json"), None),
        (tm(""), None),
        (tm([]), None),
        (SimpleNamespace(tool_call_id="x"), None),
        (SimpleNamespace(tool_call_id="x", content='{"a": 1}'), {"a": 1}),
        (SimpleNamespace(tool_call_id="x", content=[{"type": "text", "text": "[3]"}]), [3]),
    ],
)
def test_tool_result_json_of_a_tool_message(result: Any, body: Any) -> None:
    assert tool_result_json(result) == body


def blocks(*texts: str) -> list[ContentBlock]:
    return [TextContent(type="text", text=t) for t in texts]


@pytest.mark.parametrize(
    ("result", "body"),
    [
        (CallToolResult(content=blocks('{"a": 1}')), {"a": 1}),
        (CallToolResult(content=blocks('{"a": 1}'), structuredContent={"b": 2}), {"b": 2}),
        (CallToolResult(content=[], structuredContent={"result": {"c": 3}}), {"c": 3}),
        (CallToolResult(content=blocks('{"a":', " 2}")), {"a": 2}),
        (CallToolResult(content=blocks('{"result": "r"}')), "r"),
        (CallToolResult(content=blocks("nope")), None),
        (CallToolResult(content=[]), None),
        (SimpleNamespace(structuredContent={"s": 1}), {"s": 1}),
        (SimpleNamespace(content=[{"type": "text", "text": '{"a": 1}'}]), {"a": 1}),
        (SimpleNamespace(), None),
    ],
)
def test_tool_result_json_of_a_call_tool_result(result: Any, body: Any) -> None:
    assert tool_result_json(result) == body
