"""The gate table, the policy order, ``parse_on_denial`` and ``tighten``
(``docs/ARCHITECTURE.md``, invariants 7 and 9)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from algenta_graph.governance.gates import (
    DEFAULT_POLICIES,
    ENGINE_GATE_NAMES,
    GATE_NAMES,
    GATES,
    GRAPH_GATE_NAMES,
    OVERRIDE_FLAGS,
    POLICIES,
    UNKNOWN_GATE_POLICY,
    describe_gates,
    parse_on_denial,
    policy_for,
    strictest,
    tighten,
)


def test_the_table_states_each_gates_flag_and_default_policy() -> None:
    assert GATE_NAMES == (
        "idempotency",
        "confidence",
        "risk_floor",
        "approval",
        "budget",
        "arguments",
    )
    assert ENGINE_GATE_NAMES == ("idempotency", "confidence", "risk_floor")
    assert GRAPH_GATE_NAMES == ("approval", "budget", "arguments")
    assert all(GATES[g].override_flag is None for g in GRAPH_GATE_NAMES)
    assert dict(OVERRIDE_FLAGS) == {
        "idempotency": "force",
        "confidence": "override_safety",
        "risk_floor": "override_safety",
    }
    assert dict(DEFAULT_POLICIES) == {
        "idempotency": "report",
        "confidence": "escalate",
        "risk_floor": "escalate",
        "approval": "escalate",
        "budget": "report",
        "arguments": "report",
    }
    assert all(GATES[name].name == name for name in GATE_NAMES)
    assert POLICIES == ("report", "escalate", "halt")
    assert UNKNOWN_GATE_POLICY == "halt"


def test_describe_gates_is_one_line_per_gate_in_table_order() -> None:
    lines = describe_gates().split("\n")
    assert lines == [f"- {g.name}: {g.description}" for g in GATES.values()]
    assert len(lines) == 6 and all(g.description for g in GATES.values())


@pytest.mark.parametrize("combo", list(itertools.product(POLICIES, repeat=2)))
def test_strictest_is_the_maximum_in_policy_order(combo: tuple[str, str]) -> None:
    assert strictest(combo) == max(combo, key=POLICIES.index)
    assert strictest(reversed(combo)) == max(combo, key=POLICIES.index)


def test_strictest_of_nothing_is_report() -> None:
    assert strictest([]) == "report"
    assert strictest(["report", "halt", "report"]) == "halt"
    assert strictest(["escalate", "report"]) == "escalate"


def test_policy_for_a_known_gate_uses_the_given_policy_else_the_default() -> None:
    assert policy_for("confidence", {}) == "escalate"
    assert policy_for("idempotency", {}) == "report"
    assert policy_for("confidence", {"confidence": "halt"}) == "halt"
    assert policy_for("risk_floor", {"confidence": "halt"}) == "escalate"


def test_an_unknown_gate_halts_whatever_the_policies_say() -> None:
    assert policy_for("geo_fence", {"geo_fence": "report"}) == "halt"
    assert policy_for("", {}) == "halt"


@pytest.mark.parametrize("value", [None, "", "   "])
def test_nothing_requested_is_an_empty_mapping(value: Any) -> None:
    assert parse_on_denial(value) == {}


@pytest.mark.parametrize("policy", POLICIES)
def test_one_policy_applies_to_every_gate_plain_or_as_json(policy: str) -> None:
    expected = dict.fromkeys(GATE_NAMES, policy)
    assert parse_on_denial(policy) == expected
    assert parse_on_denial(f"  {policy} ") == expected
    assert parse_on_denial(f'"{policy}"') == expected


def test_a_mapping_plain_or_as_json_keeps_only_the_gates_named() -> None:
    assert parse_on_denial({"risk_floor": "halt"}) == {"risk_floor": "halt"}
    assert parse_on_denial(' {"confidence": "report", "idempotency": "halt"}') == {
        "confidence": "report",
        "idempotency": "halt",
    }
    assert parse_on_denial({}) == {}


@pytest.mark.parametrize(
    ("value", "needles"),
    [
        ("stop", ["where: unknown policy 'stop'", "report, escalate, halt"]),
        ("Xhalt", ["where: unknown policy 'Xhalt'"]),  # not mistaken for JSON
        ("XX", ["where: unknown policy 'XX'"]),
        ('{"confidence": "stop"}', ["where['confidence']: unknown policy 'stop'"]),
        ({"geo_fence": "halt"}, ["where: unknown gate 'geo_fence'", "idempotency, confidence"]),
        ('{"confidence": ', ["where is not valid JSON (Expecting value): '{\"confidence\":'"]),
        ("[1, 2]", ["where must be a policy (report, escalate, halt)", "not list"]),
        (3, ["not int"]),
        (["halt"], ["not list"]),
        ({"confidence": None}, ["unknown policy None"]),
    ],
)
def test_a_bad_on_denial_names_where_and_what_is_valid(value: Any, needles: list[str]) -> None:
    with pytest.raises(ValueError) as caught:
        parse_on_denial(value, "where")
    for needle in needles:
        assert needle in str(caught.value)


def test_the_default_place_named_is_on_denial() -> None:
    with pytest.raises(ValueError, match=r"^on_denial: unknown policy 'x'"):
        parse_on_denial("x")


@pytest.mark.parametrize(
    ("base", "requested"), list(itertools.product(POLICIES, repeat=2)), ids=str
)
def test_tighten_accepts_exactly_the_requests_at_least_as_strict(base: str, requested: str) -> None:
    if POLICIES.index(requested) >= POLICIES.index(base):
        out = tighten({"confidence": base}, {"confidence": requested}, "ctx")  # type: ignore[dict-item]
        assert out["confidence"] == requested
    else:
        with pytest.raises(ValueError) as caught:
            tighten({"confidence": base}, {"confidence": requested}, "ctx")  # type: ignore[dict-item]
        assert str(caught.value) == (
            f"ctx['confidence']: {requested!r} is looser than this graph's {base!r}; a run "
            "may only make a gate's policy stricter (report < escalate < halt)"
        )


def test_tighten_fills_every_gate_from_the_defaults_and_leaves_others_alone() -> None:
    assert tighten({}, {}, "w") == dict(DEFAULT_POLICIES)
    out = tighten({"idempotency": "escalate"}, {"risk_floor": "halt"}, "w")
    assert out == {
        **DEFAULT_POLICIES,
        "idempotency": "escalate",
        "confidence": "escalate",
        "risk_floor": "halt",
    }
