"""The graph-side gates' rules and their pure check (``governance/tool_gates.py``). The
at-most-once run of a governed call: ``test_write_ahead.py``."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from algenta_graph.errors import ToolGatesError
from algenta_graph.governance.tool_gates import (
    ALL_TOOLS,
    ArgumentRule,
    Budget,
    CallCounts,
    CatalogTool,
    GateCatalog,
    ServerRules,
    ToolGates,
    ToolRef,
    args_digest,
    check_server_name,
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
                "a": {"type": "object", "properties": {"x": {"type": "number", "maximum": 1}}},
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


# ------------------------------------------------------------------ rules check what runs


@pytest.mark.parametrize(
    ("fmt", "bad", "good"),
    [
        ("email", "not an email; rm -rf /", "ana@example.com"),
        ("uri", "::not a uri::", "https://crm.example/hooks/1"),
        ("date-time", "yesterday", "2030-01-01T00:00:00Z"),
    ],
)
def test_a_format_is_checked_not_only_annotated(fmt: str, bad: str, good: str) -> None:
    rule = ArgumentRule(
        name="fmt", tool="crm.*", schema={"properties": {"to": {"type": "string", "format": fmt}}}
    )
    rules = ToolGates(argument_rules=[rule]).compile()
    broken = rules.check(REFUND, {"to": bad}, CallCounts())
    assert broken is not None and broken.rule == "fmt" and f"is not a '{fmt}'" in broken.message
    assert rules.check(REFUND, {"to": good}, CallCounts()) is None


def test_a_constraint_a_differently_typed_value_would_slip_past_is_refused_naming_type() -> None:
    """The module docstring's old example: ``maximum`` without ``type`` passes ``"5000"``, which a
    FastMCP server converts to 5000.0 and runs."""
    with pytest.raises(ValidationError, match='properties/amount: add "type" next to maximum'):
        ArgumentRule(
            name="small", tool="refund", schema={"properties": {"amount": {"maximum": 10}}}
        )


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ({"properties": {"a": {"type": "number", "maximun": 3}}}, "did you mean 'maximum'"),
        ({"properties": {"a": {"type": "string", "format": "phone"}}}, "format 'phone' is not"),
        ({"properties": {"a": {"type": "string", "contentEncoding": "x"}}}, "annotation only"),
        ({"properties": {"a": {"$ref": "https://x.example/s"}}}, "points outside the rule's"),
        ({"properties": {"a": {"$ref": "#/$defs/none"}}}, "names nothing in the rule's schema"),
        ({"properties": {"a": {"not": {"enum": [5000]}}}}, "next to enum under a negation"),
        ({"properties": {"a": {"not": {"type": ["number", "string"], "const": 1}}}}, "needs one"),
        ({"properties": {"a": {"type": ["number", "string"], "maximum": 5}}}, "admits number, "),
        ({"properties": {"a": {"type": "string", "maximum": 5}}}, "admits string"),
        ({"properties": {"a": {"pattern": "^x"}}}, 'add "type" next to pattern'),
        ({"properties": {"m": {"properties": {"x": {"type": "number"}}}}}, 'next to properties'),
        ({"properties": {"a": {"type": "array", "items": {"maximum": 1}}}}, "items: add"),
        ({"$defs": {"d": {"enum": [1]}}, "properties": {"a": {"$ref": "#/$defs/d"}}}, "$defs/d"),
    ],
)  # fmt: skip
def test_a_schema_whose_constraint_would_not_hold_is_refused_saying_where_and_why(
    schema: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValidationError, match="would not check what the tool receives") as bad:
        ArgumentRule(name="r", tool="crm.refund", schema=schema)
    assert says in str(bad.value)


@pytest.mark.parametrize(
    "schema",
    [
        {},
        {"required": ["amount"], "not": {"required": ["force"]}},
        {"properties": {"a": {"type": "number", "allOf": [{"maximum": 5}, {"minimum": 0}]}}},
        {"properties": {"a": {"type": ["number", "null"], "maximum": 5}}},
        {"properties": {"a": {"anyOf": [{"type": "integer", "maximum": 5}, {"type": "null"}]}}},
        {"properties": {"a": {"type": "number", "not": {"enum": [13]}}}},
        {"properties": {"a": {"enum": ["x", "y"], "description": "a positive enum"}}},
        {"propertyNames": {"pattern": "^[a-z_]+$"}, "additionalProperties": False},
        {
            "$defs": {"d": {"type": "number", "maximum": 3}},
            "properties": {"a": {"$ref": "#/$defs/d"}},
        },
    ],
)
def test_a_schema_whose_constraints_each_hold_is_accepted(schema: dict[str, Any]) -> None:
    assert ArgumentRule(name="r", tool="crm.refund", schema=schema).json_schema == schema


def test_a_schema_that_cannot_be_checked_denies_the_call() -> None:
    rule = ArgumentRule(name="r", tool="*", schema={"required": ["a"]})
    rules = ToolGates(argument_rules=[rule]).compile()

    class Broken:
        def iter_errors(self, _: Any) -> Any:
            raise RuntimeError("unreadable")

    rules.validators["r"] = Broken()
    found = rules.check(REFUND, {"a": 1}, CallCounts())
    assert found is not None and found.message.endswith(
        "its schema could not be checked (RuntimeError: unreadable)"
    )


# ------------------------------------------------------------------ resolved against the catalog

REFUND_SCHEMA = {
    "type": "object",
    "properties": {"account_id": {"type": "string"}, "amount": {"type": "number"}},
}
CATALOG = GateCatalog(
    (
        CatalogTool(ToolRef("crm", "delete_customer"), {"properties": {"account_id": {}}}),
        CatalogTool(REFUND, REFUND_SCHEMA),
        CatalogTool(ToolRef("crm", "lookup_customer"), {"properties": {"account_id": {}}}),
        CatalogTool(ToolRef("crm", "purge"), {}, destructive=True),
        CatalogTool(ToolRef("shadow", "delete_customer")),
        CatalogTool(ToolRef("algenta", "execute_decision")),
    ),
    hidden=frozenset({ToolRef("algenta", "simulate")}),
)


def _problems(gates: ToolGates, catalog: GateCatalog = CATALOG) -> list[str]:
    with pytest.raises(ToolGatesError) as refused:
        gates.compile(catalog)
    return [f"{p.key}: {p.message}" for p in refused.value.problems]


def test_every_pattern_must_name_a_tool_and_each_that_does_not_is_named_with_the_nearest() -> None:
    gates = ToolGates(
        require_approval=["crm.delete_custmer", "crm.*"],
        allow=["crm.lookup_custmer"],
        budgets=[Budget(tool="crm.refnd", thread_limit=1)],
        argument_rules=[ArgumentRule(name="r", tool="zzz.*", schema={})],
    )
    assert _problems(gates) == [
        "tool_gates.require_approval[0]: 'crm.delete_custmer' names no tool in the catalog; "
        "nearest: crm.delete_customer, shadow.delete_customer",
        "tool_gates.allow[0]: 'crm.lookup_custmer' names no tool in the catalog; nearest: "
        "crm.lookup_customer",
        "tool_gates.budgets[0]: 'crm.refnd' names no tool in the catalog; nearest: crm.refund",
        "tool_gates.argument_rules[0]: 'zzz.*' names no tool in the catalog; the catalog's "
        "servers: algenta, crm, shadow",
    ]


def test_a_resolved_rule_lists_the_tools_it_governs() -> None:
    gates = ToolGates(
        require_approval=["delete_customer"],
        allow=["crm.purge"],
        budgets=[Budget(tool="algenta.simulate", run_limit=1)],
        servers={"crm": ServerRules(unlisted="approve")},
    )
    compiled = gates.compile(CATALOG)
    assert [r.shown() for r in compiled.resolution] == [
        {
            "rule": "require_approval 'delete_customer'",
            "gate": "approval",
            "tools": ["crm.delete_customer", "shadow.delete_customer"],
        },
        {"rule": "allow 'crm.purge'", "gate": "approval", "tools": ["crm.purge"]},
        {
            "rule": "budget 'algenta.simulate' (thread_limit=None, run_limit=1)",
            "gate": "budget",
            "tools": [],
            "note": "only tools outside the connection's profile: algenta.simulate",
        },
        {
            "rule": "servers.crm.unlisted = 'approve'",
            "gate": "approval",
            "tools": ["crm.refund", "crm.lookup_customer"],
        },
    ]
    assert ToolGates().compile(CATALOG).resolution[0].shown() == {
        "rule": "destructiveHint: held for an operator (allow releases a tool)",
        "gate": "approval",
        "tools": ["crm.purge"],
    }


def test_an_optional_server_down_at_start_may_match_nothing_but_not_when_it_is_up() -> None:
    down = GateCatalog(CATALOG.tools, unreachable=frozenset({"billing"}))
    optional = {"billing": ServerRules(optional=True)}
    compiled = ToolGates(require_approval=["billing.refund"], servers=optional).compile(down)
    rule, posture, _ = compiled.resolution  # the third: the destructive tool held
    assert rule.tools == () and "'billing' is unreachable and optional" in rule.note
    assert posture.note == "server 'billing' is unreachable"
    # not optional: refused, though the server is known to be down
    assert _problems(ToolGates(require_approval=["billing.refund"]), down) == [
        "tool_gates.require_approval[0]: 'billing.refund' names no tool: server 'billing' is "
        "unreachable; to start without it, mark it optional ([tool_gates.servers.billing] "
        "optional = true)"
    ]
    # optional, and up: a typo is refused all the same
    up = GateCatalog((*CATALOG.tools, CatalogTool(ToolRef("billing", "refund"))))
    typo = ToolGates(require_approval=["billing.refnd"], servers=optional)
    assert _problems(typo, up)[0].startswith("tool_gates.require_approval[0]: 'billing.refnd'")
    # a server posture must name a server of the catalog (or an optional one that is down)
    assert _problems(ToolGates(servers={"crn": ServerRules(unlisted="deny")})) == [
        "tool_gates.servers.crn: no server 'crn' in the catalog (it has algenta, crm, shadow); "
        "nearest: crm"
    ]


def test_an_argument_rule_must_name_arguments_its_tools_take_in_the_types_they_take() -> None:
    def rule(schema: dict[str, Any], tool: str = "crm.refund") -> ToolGates:
        return ToolGates(argument_rules=[ArgumentRule(name="r", tool=tool, schema=schema)])

    assert _problems(rule({"properties": {"amout": {"type": "number", "maximum": 1}}})) == [
        "tool_gates.argument_rules[0].schema: argument rule 'r': properties/amout: no tool this "
        "rule governs takes an argument 'amout', so it constrains nothing; nearest: amount"
    ]
    text = rule({"properties": {"amount": {"type": "string", "maxLength": 3}}})
    assert _problems(text) == [
        "tool_gates.argument_rules[0].schema: argument rule 'r': properties/amount: the rule "
        "admits string but crm.refund takes number: the server may convert such a value past "
        "the rule; give the type the tool takes"
    ]
    either = {"anyOf": [{"type": "integer", "maximum": 5}, {"type": "string", "maxLength": 1}]}
    assert "admits string" in _problems(rule({"properties": {"amount": either}}))[0]
    # integer within number, null always, an argument one of the tools takes: resolved
    fine = {"amount": {"type": ["integer", "null"], "maximum": 5}}
    assert rule({"properties": fine}, tool="crm.*").compile(CATALOG).resolution
    # a tool that declares no arguments is not checked
    assert rule({"properties": {"x": {"type": "number"}}}, "shadow.*").compile(CATALOG)


def test_a_server_posture_decides_the_tools_no_approval_rule_lists() -> None:
    approve = ToolGates(
        allow=["crm.lookup_customer"],
        budgets=[Budget(tool="crm.*", thread_limit=9)],  # a budget never lists a tool
        servers={"crm": ServerRules(unlisted="approve")},
    ).compile(CATALOG)
    held = approve.check(REFUND, {}, CallCounts())
    assert held is not None and (held.gate, held.rule, held.code) == (
        "approval",
        "unlisted:crm",
        "tool_approval_required",
    )
    assert "server 'crm' holds its unlisted tools (unlisted = 'approve')" in held.message
    assert approve.check(ToolRef("crm", "lookup_customer"), {}, CallCounts()) is None
    assert approve.check(SHADOW_DELETE, {}, CallCounts()) is None  # another server
    assert approve.check(REFUND, {}, CallCounts(), approval=False) is None
    deny = ToolGates(
        require_approval=["crm.delete_customer"], servers={"crm": ServerRules(unlisted="deny")}
    ).compile(CATALOG)
    refused = deny.check(REFUND, {}, CallCounts(), approval=False)
    assert refused is not None and (refused.gate, refused.rule, refused.code) == (
        "arguments",
        "unlisted:crm",
        "tool_not_listed",
    )
    assert deny.check(CRM_DELETE, {}, CallCounts()).gate == "approval"  # type: ignore[union-attr]
    assert deny.governs(REFUND) and not deny.governs(SHADOW_DELETE)
    assert not ToolGates(servers={"crm": ServerRules()}).compile(CATALOG).governs(REFUND)


def test_a_tool_its_server_marks_destructive_is_held_unless_allowed() -> None:
    purge = ToolRef("crm", "purge")
    rules = ToolGates().compile(CATALOG)
    assert rules.active and rules.governs(purge) and not rules.governs(REFUND)
    held = rules.check(purge, {}, CallCounts())
    assert held is not None and (held.gate, held.rule) == ("approval", "destructiveHint")
    assert rules.check(purge, {}, CallCounts(), approval=False) is None
    released = ToolGates(allow=["crm.purge"]).compile(CATALOG)
    assert released.check(purge, {}, CallCounts()) is None
    assert released.governs(purge)  # named by a rule: its calls are recorded
    both = ToolGates(require_approval=["crm.*"], allow=["crm.purge"]).compile(CATALOG)
    assert both.check(purge, {}, CallCounts()).rule == "require_approval:crm.*"  # type: ignore[union-attr]
    denied = ToolGates(servers={"crm": ServerRules(unlisted="deny")}).compile(CATALOG)
    assert denied.check(purge, {}, CallCounts()).gate == "arguments"  # type: ignore[union-attr]
    assert not ToolGates().compile().active  # unresolved: no hint known
    assert not ToolGates().compile(GateCatalog((CatalogTool(REFUND),))).active


def test_the_rules_in_force_for_a_tool_are_every_rule_naming_it_and_the_policy() -> None:
    rule = ArgumentRule(name="r", tool="crm.*", schema={"required": ["account_id"]})
    budget = Budget(tool="*.refund", thread_limit=3)
    gates = ToolGates(
        require_approval=["crm.refund"],
        allow=["*.refund", "crm.lookup_customer"],
        budgets=[budget, Budget(tool="shadow.*", run_limit=1)],
        argument_rules=[rule],
        servers={"crm": ServerRules(unlisted="approve")},
    ).compile(CATALOG)
    assert gates.in_force(REFUND, "escalate") == {
        "tool": "crm.refund",
        "policy": "escalate",
        "require_approval": ["crm.refund"],
        "allow": ["*.refund"],
        "destructive": False,
        "unlisted": "allow",  # listed
        "budgets": [{"tool": "*.refund", "thread_limit": 3, "run_limit": None}],
        "argument_rules": [
            {
                "name": "r",
                "tool": "crm.*",
                "schema": {"required": ["account_id"]},
                "predicate": None,
            }
        ],
    }
    assert gates.in_force(ToolRef("crm", "purge"), "report")["unlisted"] == "approve"
    assert gates.in_force(ToolRef("crm", "purge"), "report")["destructive"] is True


def test_an_overridden_rule_is_the_one_not_checked() -> None:
    gates = ToolGates(
        argument_rules=[
            ArgumentRule(name="first", tool="crm.refund", schema={"required": ["a"]}),
            ArgumentRule(name="second", tool="crm.refund", schema={"required": ["b"]}),
        ]
    ).compile()
    assert gates.check_arguments(REFUND, {}).rule == "first"  # type: ignore[union-attr]
    assert gates.check_arguments(REFUND, {}, overridden="first").rule == "second"  # type: ignore[union-attr]
    assert gates.check_arguments(REFUND, {"b": 1}, overridden="first") is None


@pytest.mark.parametrize("name", ["crm.eu", "crm eu", "", "-crm", "crm/eu"])
def test_a_server_name_tool_rules_could_not_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="letters, digits, '_' and '-' only"):
        check_server_name(name)
    with pytest.raises(ValidationError, match="cannot hold a dot"):
        ToolGates(servers={name: ServerRules()})
    assert check_server_name("crm_eu-2") == "crm_eu-2"
    assert ToolRef.parse("crm.customers.delete") == ToolRef("crm", "customers.delete")
