"""The graph-side gates' rules and their pure check (``governance/tool_gates.py``). The
at-most-once run of a governed call: ``test_write_ahead.py``."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from algenta_graph.governance.tool_gates import (
    ALL_TOOLS,
    ArgumentRule,
    Budget,
    CallCounts,
    ToolGates,
    ToolRef,
    args_digest,
    count_calls,
    matches,
    parse_tool_gates,
)

CRM_DELETE = ToolRef("crm", "delete_customer")
SHADOW_DELETE = ToolRef("shadow", "delete_customer")
REFUND = ToolRef("crm", "refund")


def small_refunds(tool: str, args: dict[str, Any]) -> bool | str:
    """A predicate rule: refunds of at most 100."""
    amount = args.get("amount", 0)
    return True if amount <= 100 else f"amount {amount} is over 100"


def says_false(tool: str, args: dict[str, Any]) -> bool:
    return False


def raises(tool: str, args: dict[str, Any]) -> bool:
    raise RuntimeError("boom")


def says_none(tool: str, args: dict[str, Any]) -> Any:
    return None


NOT_CALLABLE = 42


def only_crm_refund(tool: str, args: dict[str, Any]) -> bool:
    return tool == "crm.refund"


class Rules:
    @staticmethod
    def small(tool: str, args: dict[str, Any]) -> bool | str:
        return True if args.get("amount", 0) < 100 else "too big"


# ------------------------------------------------------------------ names


@pytest.mark.parametrize(
    ("pattern", "tool", "expected"),
    [
        ("delete_customer", CRM_DELETE, True),
        ("delete_customer", SHADOW_DELETE, True),  # a bare name: that tool on any server
        ("crm.delete_customer", CRM_DELETE, True),
        ("crm.delete_customer", SHADOW_DELETE, False),
        ("crm.*", CRM_DELETE, True),
        ("crm.*", SHADOW_DELETE, False),
        ("*.delete_customer", SHADOW_DELETE, True),
        ("delete_*", CRM_DELETE, True),
        ("delete_*", REFUND, False),
        ("Delete_Customer", CRM_DELETE, False),  # case-sensitive
        ("delete_custome", CRM_DELETE, False),  # exact, not a prefix
        ("elete_customer", CRM_DELETE, False),
        ("crm", CRM_DELETE, False),
        (ALL_TOOLS, REFUND, True),
        ("crm.customers.delete", ToolRef("crm", "customers.delete"), True),
        ("customers.delete", ToolRef("crm", "customers.delete"), True),
    ],
)
def test_a_pattern_names_real_mcp_names_bare_qualified_or_glob(
    pattern: str, tool: ToolRef, expected: bool
) -> None:
    assert matches(pattern, tool) is expected


def test_the_qualified_name_is_server_dot_name() -> None:
    assert CRM_DELETE.qualified == "crm.delete_customer"


def test_the_arguments_digest_is_sha256_of_the_canonical_tool_and_arguments() -> None:
    import datetime
    import hashlib
    import json

    when = datetime.date(2026, 1, 2)
    body = json.dumps({"tool": "crm.refund", "args": {"on": str(when)}}, sort_keys=True)
    expected = "sha256:" + hashlib.sha256(body.encode()).hexdigest()
    assert args_digest("crm.refund", {"on": when}) == expected  # any value, as its text


def test_the_arguments_digest_binds_tool_and_arguments_in_any_key_order() -> None:
    a = args_digest("crm.refund", {"amount": 1, "account_id": "a"})
    assert a == args_digest("crm.refund", {"account_id": "a", "amount": 1})
    assert a.startswith("sha256:") and len(a) == len("sha256:") + 64
    assert a != args_digest("crm.refund", {"account_id": "a", "amount": 2})
    assert a != args_digest("pay.refund", {"account_id": "a", "amount": 1})


# ------------------------------------------------------------------ the rules' own checks


@pytest.mark.parametrize("bad", ["", " crm.*", "crm.* ", "   "])
def test_a_bad_tool_pattern_is_refused_naming_it(bad: str) -> None:
    with pytest.raises(ValidationError, match="tool pattern"):
        ToolGates(require_approval=[bad])
    with pytest.raises(ValidationError, match="tool pattern"):
        Budget(tool=bad, thread_limit=1)


def test_a_budget_needs_a_limit_and_limits_are_not_negative() -> None:
    with pytest.raises(ValidationError, match="give thread_limit, run_limit or both"):
        Budget(tool="crm.*")
    with pytest.raises(ValidationError):
        Budget(thread_limit=-1)
    assert Budget(run_limit=0).tool == ALL_TOOLS


def test_an_argument_rule_takes_exactly_one_check_and_checks_it() -> None:
    with pytest.raises(ValidationError, match="exactly one of schema, predicate"):
        ArgumentRule(name="r", tool="x")
    with pytest.raises(ValidationError, match="exactly one of schema, predicate"):
        ArgumentRule(name="r", tool="x", schema={}, predicate="a.b:c")
    with pytest.raises(ValidationError, match="import path"):
        ArgumentRule(name="r", tool="x", predicate="not a path")
    with pytest.raises(ValidationError, match="rule 'r': not a valid JSON Schema"):
        ArgumentRule(name="r", tool="x", schema={"type": "no-such-type"})
    with pytest.raises(ValidationError):
        ArgumentRule(name="", tool="x", schema={})


def test_argument_rule_names_are_unique() -> None:
    rule = ArgumentRule(name="r", tool="x", schema={})
    with pytest.raises(ValidationError, match="r repeat"):
        ToolGates(argument_rules=[rule, rule])


def test_a_predicate_that_does_not_import_is_named_with_its_rule() -> None:
    gates = ToolGates(argument_rules=[ArgumentRule(name="r9", tool="x", predicate="no_such_mod:f")])
    with pytest.raises(ValueError) as caught:
        gates.compile()
    assert str(caught.value) == (
        "argument rule 'r9': predicate 'no_such_mod:f' does not import (ModuleNotFoundError: "
        "No module named 'no_such_mod')"
    )
    here = __name__
    gates = ToolGates(
        argument_rules=[ArgumentRule(name="r8", tool="x", predicate=f"{here}:NOT_CALLABLE")]
    )
    with pytest.raises(ValueError, match="is not callable"):
        gates.compile()


def test_parse_tool_gates_takes_the_object_a_mapping_or_none_and_names_problems() -> None:
    assert parse_tool_gates(None) == ToolGates()
    gates = ToolGates(require_approval=["a"])
    assert parse_tool_gates(gates) is gates
    assert parse_tool_gates({"require_approval": ["a"]}) == gates
    with pytest.raises(ValueError, match=r"(?s)where: .*unknown_key"):
        parse_tool_gates({"unknown_key": 1}, "where")
    with pytest.raises(ValueError, match="tool_gates must be a ToolGates or a mapping, not list"):
        parse_tool_gates(["a"])


def test_empty_means_no_rule_at_all() -> None:
    assert ToolGates().empty
    assert not ToolGates(require_approval=["a"]).empty
    assert not ToolGates(budgets=[Budget(thread_limit=1)]).empty
    assert not ToolGates(argument_rules=[ArgumentRule(name="r", tool="x", schema={})]).empty


# ------------------------------------------------------------------ the check


def test_approval_holds_the_named_tool_only_naming_the_pattern() -> None:
    rules = ToolGates(require_approval=["crm.delete_customer"]).compile()
    held = rules.check(CRM_DELETE, {"account_id": "a"}, CallCounts())
    assert held is not None
    assert (held.gate, held.rule, held.code) == (
        "approval",
        "require_approval:crm.delete_customer",
        "tool_approval_required",
    )
    assert "crm.delete_customer" in held.message
    assert rules.check(SHADOW_DELETE, {}, CallCounts()) is None
    assert rules.governs(CRM_DELETE) and not rules.governs(SHADOW_DELETE)


def test_approval_can_be_left_out_for_a_tool_the_engine_governs() -> None:
    rules = ToolGates(require_approval=["*"], budgets=[Budget(thread_limit=1)]).compile()
    assert rules.check(CRM_DELETE, {}, CallCounts(), approval=False) is None
    over = rules.check(CRM_DELETE, {}, CallCounts(thread={"*": 1}), approval=False)
    assert over is not None and over.gate == "budget"
    assert rules.check(CRM_DELETE, {}, CallCounts()).gate == "approval"  # type: ignore[union-attr]


def test_a_json_schema_rule_names_the_rule_and_the_argument() -> None:
    rule = ArgumentRule(
        name="max_1000",
        tool="crm.refund",
        schema={"properties": {"amount": {"type": "number", "maximum": 1000}}},
    )
    rules = ToolGates(argument_rules=[rule]).compile()
    assert rules.check(REFUND, {"amount": 1000}, CallCounts()) is None  # the bound itself passes
    broken = rules.check(REFUND, {"amount": 1000.5}, CallCounts())
    assert broken is not None
    assert (broken.gate, broken.rule, broken.code) == (
        "arguments",
        "max_1000",
        "tool_arguments_rejected",
    )
    assert "amount: 1000.5 is greater than the maximum of 1000" in broken.message
    assert "crm.refund" in broken.message
    typed = rules.check(REFUND, {"amount": "5"}, CallCounts())
    assert typed is not None and "is not of type 'number'" in typed.message
    assert rules.check(ToolRef("pay", "refund"), {"amount": 5000}, CallCounts()) is None


def test_the_first_violation_by_argument_path_is_named() -> None:
    rule = ArgumentRule(
        name="r",
        tool="*",
        schema={
            "properties": {
                "b": {"type": "integer"},
                "a": {"type": "object", "properties": {"x": {"maximum": 1}}},
            }
        },
    )
    broken = (
        ToolGates(argument_rules=[rule])
        .compile()
        .check(REFUND, {"b": "no", "a": {"x": 2}}, CallCounts())
    )
    assert broken is not None
    assert broken.message == (
        "the arguments of crm.refund break rule 'r': a/x: 2 is greater than the maximum of 1"
    )


def test_a_predicate_is_called_with_the_qualified_tool_name() -> None:
    rule = ArgumentRule(name="p", tool="*", predicate=f"{__name__}:only_crm_refund")
    rules = ToolGates(argument_rules=[rule]).compile()
    assert rules.check(REFUND, {}, CallCounts()) is None
    assert rules.check(ToolRef("pay", "refund"), {}, CallCounts()) is not None


def test_a_predicate_may_be_a_dotted_attribute() -> None:
    rule = ArgumentRule(name="p", tool="*", predicate=f"{__name__}:Rules.small")
    rules = ToolGates(argument_rules=[rule]).compile()
    assert rules.check(REFUND, {"amount": 1}, CallCounts()) is None
    assert rules.check(REFUND, {"amount": 500}, CallCounts()).message.endswith("too big")  # type: ignore[union-attr]


def test_a_rule_of_another_tool_does_not_stop_the_next_rule() -> None:
    rules = ToolGates(
        argument_rules=[
            ArgumentRule(name="other", tool="pay.*", schema={"required": ["x"]}),
            ArgumentRule(name="mine", tool="crm.refund", schema={"required": ["y"]}),
        ]
    ).compile()
    assert rules.check(REFUND, {}, CallCounts()).rule == "mine"  # type: ignore[union-attr]


def test_a_top_level_violation_is_named_as_the_arguments() -> None:
    rule = ArgumentRule(name="needs_id", tool="*", schema={"required": ["id"]})
    broken = ToolGates(argument_rules=[rule]).compile().check(REFUND, {}, CallCounts())
    assert broken is not None and "(arguments): 'id' is a required property" in broken.message


@pytest.mark.parametrize(
    ("predicate", "args", "why"),
    [
        ("small_refunds", {"amount": 100}, None),
        ("small_refunds", {"amount": 101}, "amount 101 is over 100"),
        ("says_false", {}, "its predicate returned False"),
        ("says_none", {}, "its predicate returned None"),
        ("raises", {}, "its predicate raised RuntimeError: boom"),
    ],
)
def test_a_predicate_rule_passes_only_on_true(predicate: str, args: Any, why: str | None) -> None:
    rule = ArgumentRule(name="p", tool="crm.refund", predicate=f"{__name__}:{predicate}")
    found = ToolGates(argument_rules=[rule]).compile().check(REFUND, args, CallCounts())
    if why is None:
        assert found is None
    else:
        assert found is not None and found.rule == "p" and found.message.endswith(why)


def test_the_first_rule_broken_decides_and_rules_come_before_budgets_and_approval() -> None:
    gates = ToolGates(
        require_approval=["crm.*"],
        budgets=[Budget(tool="crm.*", thread_limit=0)],
        argument_rules=[
            ArgumentRule(name="first", tool="crm.refund", schema={"required": ["a"]}),
            ArgumentRule(name="second", tool="crm.refund", schema={"required": ["b"]}),
        ],
    ).compile()
    assert gates.check(REFUND, {}, CallCounts()).rule == "first"  # type: ignore[union-attr]
    assert gates.check(REFUND, {"a": 1}, CallCounts()).rule == "second"  # type: ignore[union-attr]
    assert gates.check(REFUND, {"a": 1, "b": 1}, CallCounts()).gate == "budget"  # type: ignore[union-attr]
    assert gates.check(CRM_DELETE, {}, CallCounts()).gate == "budget"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("thread_limit", "run_limit", "thread", "run", "blocked"),
    [
        (2, None, 1, 0, False),
        (2, None, 2, 0, True),  # the call would be the third: over
        (None, 1, 5, 0, False),
        (None, 1, 0, 1, True),
        (3, 3, 2, 2, False),
        (3, 3, 3, 0, True),
        (3, 3, 0, 3, True),
        (0, None, 0, 0, True),
    ],
)
def test_a_budget_blocks_the_call_that_would_exceed_a_limit(
    thread_limit: int | None, run_limit: int | None, thread: int, run: int, blocked: bool
) -> None:
    budget = Budget(tool="crm.*", thread_limit=thread_limit, run_limit=run_limit)
    rules = ToolGates(budgets=[budget]).compile()
    counts = CallCounts(thread={"crm.*": thread}, run={"crm.*": run})
    found = rules.check(REFUND, {}, counts)
    assert (found is not None) is blocked
    if found is not None:
        assert (found.gate, found.rule, found.code) == (
            "budget",
            "budget:crm.*",
            "tool_budget_exceeded",
        )
        assert "tools 'crm.*'" in found.message


def test_the_budget_denial_says_exactly_what_was_spent() -> None:
    rules = ToolGates(budgets=[Budget(thread_limit=1), Budget(tool="crm.*", run_limit=1)]).compile()
    thread = rules.check(REFUND, {}, CallCounts(thread={"*": 1}))
    assert thread is not None and thread.message == (
        "the call budget for all tools is spent: thread limit 1 (1 calls counted). Do not call "
        "'refund' again in this thread"
    )
    run = rules.check(REFUND, {}, CallCounts(run={"crm.*": 1}))
    assert run is not None and run.message == (
        "the call budget for tools 'crm.*' is spent: run limit 1 (1 calls counted). Do not call "
        "'refund' again in this run"
    )
    # counts missing a budget's key count as zero
    assert (
        ToolGates(budgets=[Budget(run_limit=1)]).compile().check(REFUND, {}, CallCounts()) is None
    )


def test_governs_is_any_rule_naming_the_tool() -> None:
    for gates in (
        ToolGates(budgets=[Budget(tool="crm.refund", thread_limit=1)]),
        ToolGates(argument_rules=[ArgumentRule(name="r", tool="crm.refund", schema={})]),
        ToolGates(require_approval=["crm.refund"]),
    ):
        rules = gates.compile()
        assert rules.governs(REFUND) and not rules.governs(CRM_DELETE)


def test_a_budget_over_all_tools_says_so_and_names_the_limit_spent() -> None:
    rules = ToolGates(budgets=[Budget(thread_limit=1, run_limit=1)]).compile()
    found = rules.check(REFUND, {}, CallCounts(thread={"*": 1}, run={"*": 1}))
    assert found is not None and "all tools" in found.message
    assert "thread limit 1 (1 calls counted) and run limit 1 (1 calls counted)" in found.message
    only_run = rules.check(REFUND, {}, CallCounts(thread={"*": 0}, run={"*": 1}))
    assert only_run is not None and "in this run" in only_run.message
    assert "thread limit" not in only_run.message


# ------------------------------------------------------------------ counting from records


def _call(tool: str, server: str = "crm", turn: str | None = "m1") -> dict[str, Any]:
    return {"kind": "tool_call", "tool": tool, "server": server, "turn": turn}


def test_counts_come_from_the_threads_records_thread_and_run() -> None:
    rules = ToolGates(budgets=[Budget(tool="crm.refund", thread_limit=9)]).compile()
    calls = [
        _call("refund", turn="m0"),
        _call("refund", turn="m0"),
        _call("refund", turn="m0"),
        _call("refund"),
        _call("refund"),
        _call("refund", server="pay"),  # another server's refund is another tool
        _call("lookup_customer"),
    ]
    denials = [
        {"gate": "budget", "tool": "refund", "server": "crm", "turn": "m1"},
        {"gate": "budget", "tool": "refund", "server": "crm", "turn": "m0"},  # an earlier run
        {"gate": "budget", "tool": "refund", "server": "crm", "turn": "m0"},
        {"gate": "approval", "tool": "refund", "server": "crm", "turn": "m1"},  # not a budget
        {"gate": "arguments", "tool": "refund", "server": "crm", "turn": "m1"},
    ]
    counts = count_calls(rules, REFUND, calls, denials, "m1")
    # thread: the calls that passed; run: this run's calls and this run's budget denials
    assert counts.thread == {"crm.refund": 5}
    assert counts.run == {"crm.refund": 3}
    without_turn = count_calls(rules, REFUND, calls, denials, None)
    assert without_turn.thread == {"crm.refund": 5} and without_turn.run == {"crm.refund": 0}
    unbudgeted = ToolGates(require_approval=["x"]).compile()
    assert count_calls(unbudgeted, REFUND, calls, denials, "m1") == CallCounts()


def test_counts_are_kept_per_budget() -> None:
    rules = ToolGates(
        budgets=[Budget(tool="crm.*", thread_limit=9), Budget(tool="*.refund", thread_limit=9)]
    ).compile()
    counts = count_calls(rules, REFUND, [_call("refund"), _call("lookup_customer")], [], "m1")
    assert counts.thread == {"crm.*": 2, "*.refund": 1}
    assert rules.budgets_for(CRM_DELETE) == [rules.gates.budgets[0]]


def test_check_budgets_is_the_budget_part_of_check_alone() -> None:
    gates = ToolGates(
        require_approval=["crm.delete_customer"], budgets=[Budget(tool="crm.*", thread_limit=2)]
    ).compile()
    tool = ToolRef("crm", "delete_customer")
    assert gates.check_budgets(tool, CallCounts(thread={"crm.*": 1})) is None
    spent = gates.check_budgets(tool, CallCounts(thread={"crm.*": 2}))
    assert spent is not None and spent.gate == "budget"
    assert spent == gates.check(tool, {}, CallCounts(thread={"crm.*": 2}))
    assert gates.check_budgets(ToolRef("other", "delete_customer"), CallCounts()) is None
