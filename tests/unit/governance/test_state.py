"""The append-only reducer: no update, from a node or from ``update_state``, ever
drops, rewrites or reorders an older record (``docs/ARCHITECTURE.md``, "State")."""

from __future__ import annotations

from typing import Any, get_type_hints

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from pydantic import ValidationError

from algenta_graph.governance.tool_gates import GateDecision
from algenta_graph.operator_records import OperatorDecision
from algenta_graph.records import (
    escalation_id_of,
    gate_denial_record,
    held_call,
    new_escalation_id,
    tool_call_record,
)
from algenta_graph.state import GovernedState, append_records

RECORD = st.dictionaries(
    st.sampled_from(["decision_id", "gate", "tool_call_id", "source", "n"]),
    st.one_of(st.none(), st.integers(), st.text(max_size=8)),
    max_size=4,
)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    left=st.one_of(st.none(), st.lists(RECORD, max_size=6)),
    right=st.one_of(st.none(), RECORD, st.lists(RECORD, max_size=6)),
)
def test_the_reducer_keeps_every_older_record_in_order_and_appends_the_new_ones(
    left: list[dict[str, Any]] | None, right: Any
) -> None:
    before = [dict(r) for r in left or []]
    out = append_records(left, right)
    new = [] if right is None else [right] if isinstance(right, dict) else right
    assert out == before + new
    assert out[: len(before)] == before  # never dropped, rewritten or reordered
    assert (left or []) == before  # the old list itself is left untouched
    # the output holds copies: changing it cannot reach back into the stored records
    for record in out:
        record["mutated"] = True
    assert (left or []) == before


def test_the_reducer_returns_copies_of_new_records() -> None:
    record = {"decision_id": "d1"}
    out = append_records([], [record])
    out[0]["decision_id"] = "changed"
    assert record == {"decision_id": "d1"}
    single = append_records(None, record)
    assert single == [{"decision_id": "d1"}] and single[0] is not record


@pytest.mark.parametrize(
    ("junk", "kind"), [(["not a record"], "str"), ([1], "int"), ([None], "NoneType")]
)
def test_a_non_record_is_refused_not_stored(junk: list[Any], kind: str) -> None:
    with pytest.raises(TypeError, match=f"^a state record must be a dict, not {kind}$"):
        append_records([{"a": 1}], junk)


def test_through_a_checkpointed_graph_no_update_drops_an_older_record() -> None:
    """Nodes that write fewer, empty or other records, and an ``update_state`` that writes an
    empty list: every record ever written is still in state, in order."""

    def first(state: GovernedState) -> dict[str, Any]:
        return {"receipts": [{"decision_id": "d1"}, {"decision_id": "d2"}], "denials": []}

    def second(state: GovernedState) -> dict[str, Any]:
        return {"receipts": [{"decision_id": "d3"}], "denials": {"gate": "confidence"}}

    def third(state: GovernedState) -> dict[str, Any]:
        return {"receipts": [], "denials": [], "operator_decisions": []}

    builder: Any = StateGraph(GovernedState)
    for name, node in (("first", first), ("second", second), ("third", third)):
        builder.add_node(name, node)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", "third")
    builder.add_edge("third", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": []}, config)
    graph.update_state(config, {"receipts": [], "denials": []})
    graph.update_state(config, {"receipts": [{"decision_id": "d4"}]})
    values = graph.get_state(config).values
    assert [r["decision_id"] for r in values["receipts"]] == ["d1", "d2", "d3", "d4"]
    assert values["denials"] == [{"gate": "confidence"}]
    assert values["operator_decisions"] == []


def test_every_record_channel_uses_the_append_only_reducer() -> None:
    hints = get_type_hints(GovernedState, include_extras=True)
    for channel in ("receipts", "denials", "operator_decisions"):
        assert getattr(hints[channel], "__metadata__", ()) == (append_records,), channel


def test_an_operator_decision_dumps_every_field_and_refuses_unknown_ones() -> None:
    decision = OperatorDecision(
        operator="ana",
        reason="why",
        action="override",
        gate="risk_floor",
        decision_id="d1",
        override_flag="override_safety",
        result="receipt",
        outcome={"kind": "receipt"},
        tool_call_id="c1",
    ).model_dump(mode="json")
    assert decision["operator"] == "ana" and decision["override_flag"] == "override_safety"
    assert decision["time"].endswith("+00:00")  # an aware UTC timestamp
    defaults = OperatorDecision(
        operator="a", reason="r", action="decline", gate="g", decision_id=None, result="declined"
    )
    assert (defaults.override_flag, defaults.outcome, defaults.tool_call_id) == (None, None, None)
    with pytest.raises(ValidationError):
        OperatorDecision(
            operator="a", reason="r", action="decline", gate="g", decision_id=None,
            result="declined", smuggled=True,  # type: ignore[call-arg]
        )  # fmt: skip
    with pytest.raises(ValidationError):
        OperatorDecision(
            operator="a", reason="r", action="approve", gate="g", decision_id=None,  # type: ignore[arg-type]
            result="declined",
        )  # fmt: skip


def test_an_escalation_identity_is_given_once_and_read_back_or_derived() -> None:
    # invariant 12: given when the denial is raised, carried by copies of the record
    one, two = new_escalation_id(), new_escalation_id()
    assert one != two and one.startswith("esc_") and len(one) == 36
    assert escalation_id_of({"escalation_id": one, "tool_call_id": "c1"}) == one
    legacy = {"gate": "confidence", "decision_id": "d1", "tool_call_id": "c1", "hash": "a"}
    derived = escalation_id_of(legacy)
    assert derived == escalation_id_of(dict(legacy)) and derived.startswith("esc_")
    for field, value in (("gate", "risk_floor"), ("decision_id", "d2"), ("tool_call_id", "c2")):
        assert escalation_id_of({**legacy, field: value}) != derived, field
    assert escalation_id_of({**legacy, "hash": "b"}) != derived
    assert escalation_id_of({**legacy, "seq": 3}) != derived
    assert escalation_id_of({**legacy, "escalation_id": ""}) == derived


def test_a_graph_side_gates_records_name_the_call_once() -> None:
    call = held_call(
        {"tool": "delete", "server": "crm", "tool_call_id": "c1", "turn": "u1"}, "sha256:ab"
    )
    assert call == {
        "tool": "delete",
        "server": "crm",
        "catalog_name": "delete",  # no catalog name: the tool's
        "tool_call_id": "c1",
        "args_digest": "sha256:ab",
        "turn": "u1",
    }
    ran = tool_call_record(call)
    assert {k: v for k, v in ran.items() if k != "time"} == {"kind": "tool_call", **call}
    assert ran["time"].endswith("+00:00")
    decision = GateDecision(gate="approval", rule="require_approval:crm.*", code="c", message="m")
    held = gate_denial_record(decision, call, args={"id": 1}, policy="escalate")
    assert list(held)[:10] == [
        "kind", "gate", "code", "message", "override_hint", "status_code", "decision_id",
        "webhook_url", "tool_call_id", "source",
    ]  # fmt: skip
    assert (held["gate"], held["code"], held["message"], held["rule"]) == (
        "approval", "c", "m", "require_approval:crm.*",
    )  # fmt: skip
    assert (held["source"], held["tool_call_id"], held["tool"], held["server"]) == (
        "graph", "c1", "delete", "crm",
    )  # fmt: skip
    assert (held["args"], held["args_digest"], held["turn"]) == ({"id": 1}, "sha256:ab", "u1")
    assert held["override_hint"] is None and held["decision_id"] is None
    assert held["escalation_id"].startswith("esc_") and held["raised_at"].endswith("+00:00")
    denied = gate_denial_record(decision, call, args={}, policy="report")
    assert denied["policy"] == "report" and "escalation_id" not in denied
    assert "raised_at" not in denied
