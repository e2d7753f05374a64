"""Gates on any tool: which calls an operator must approve, call budgets and argument rules.

The graph decides three gates of the one gate table (:mod:`algenta_graph.governance.gates`)
itself, for every tool the model can call (an extra MCP server's as much as the engine's),
**before** the call runs (``docs/ARCHITECTURE.md``, "Graph-side gates"):

- ``arguments``: the call's arguments break a rule of its tool: a JSON Schema they must satisfy
  (``{"properties": {"amount": {"maximum": 1000}}}``) or a predicate named by an import path,
  ``(tool, args) -> bool | str`` (``False`` or a text: the violation);
- ``budget``: the call would exceed a call budget: LangChain's ``ToolCallLimitMiddleware``
  semantics, ``thread_limit`` (calls the thread ran) and ``run_limit`` (calls attempted this run:
  since the latest user message), per tool or over all tools, counted from the thread's records
  so they hold across restarts and workers;
- ``approval``: the tool is one whose calls an operator must approve (``require_approval``).

A call gets one decision: the first of these gates that blocks it, in that order (an operator is
only asked about a call that breaks no rule and fits its budgets). Rules name tools by their
**real** MCP name (never the provider-safe one the model sees): ``delete_customer`` (that tool on
any server), ``crm.delete_customer`` (on server ``crm``; the engine's server is ``algenta``), or
an ``fnmatch`` pattern of either, ``crm.*``, ``*.refund``, ``delete_*``.

>>> small = ArgumentRule(name="small", tool="refund",
...                      schema={"properties": {"amount": {"maximum": 10}}})
>>> gates = ToolGates(require_approval=["crm.delete_*"],
...                   budgets=[Budget(tool="crm.*", thread_limit=2)], argument_rules=[small])
>>> rules = gates.compile()
>>> rules.check(ToolRef("crm", "delete_customer"), {"id": "a1"}, CallCounts()).gate
'approval'
>>> rules.check(ToolRef("pay", "refund"), {"amount": 50}, CallCounts()).rule
'small'
>>> rules.check(ToolRef("crm", "lookup"), {}, CallCounts(thread={"crm.*": 2})).gate
'budget'
>>> rules.check(ToolRef("crm", "lookup"), {}, CallCounts()) is None
True
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib
import json
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "ALL_TOOLS",
    "ArgumentRule",
    "Budget",
    "CallCounts",
    "CompiledGates",
    "GateDecision",
    "ToolGates",
    "ToolRef",
    "args_digest",
    "count_calls",
    "matches",
    "parse_tool_gates",
]

ALL_TOOLS = "*"
"""The pattern of a rule on every tool."""

_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

Predicate = Callable[[str, Mapping[str, Any]], "bool | str"]
"""``(tool, args) -> bool | str``: ``True`` passes; ``False`` or a text (why) is a violation."""


@dataclass(frozen=True)
class ToolRef:
    """A tool as rules name it: its server and its real MCP name there."""

    server: str
    """The MCP server (``algenta`` for the engine, else the ``extra_servers`` key)."""
    name: str
    """The tool's name on that server (before any renaming in the catalog)."""

    @property
    def qualified(self) -> str:
        """``server.name``."""
        return f"{self.server}.{self.name}"


def matches(pattern: str, tool: ToolRef) -> bool:
    """Whether ``pattern`` names ``tool``: exactly or as a glob, bare or server-qualified.

    >>> matches("delete_customer", ToolRef("crm", "delete_customer"))
    True
    >>> matches("crm.*", ToolRef("crm", "delete_customer")), matches("crm.*", ToolRef("x", "crm"))
    (True, False)
    >>> matches("Delete_Customer", ToolRef("crm", "delete_customer"))
    False
    """
    return fnmatch.fnmatchcase(tool.name, pattern) or fnmatch.fnmatchcase(tool.qualified, pattern)


def args_digest(tool: str, args: Mapping[str, Any]) -> str:
    """The digest a held call is bound to: ``sha256:`` of its tool and canonical arguments.

    >>> args_digest("t", {"b": 1, "a": 2}) == args_digest("t", {"a": 2, "b": 1})
    True
    """
    body = json.dumps({"tool": tool, "args": args}, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def _pattern(value: str) -> str:
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise ValueError(f"a tool pattern must be a non-empty name without spaces, got {value!r}")
    return value


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Budget(_Table):
    """A call budget (LangChain ``ToolCallLimitMiddleware`` semantics).

    A call is denied when the calls already counted plus this one exceed a limit:
    ``thread_limit`` counts the calls of the thread that passed the budget and ran (a held call
    counts once an operator's approval runs it, and the budgets are checked again just before),
    ``run_limit`` the calls attempted this run (since the latest user message), budget denials
    included.
    """

    tool: str = ALL_TOOLS
    """The tools it counts (a pattern, see the module docs); ``*``: all tools, together."""
    thread_limit: int | None = Field(default=None, ge=0)
    """Most calls per thread (``None``: no limit)."""
    run_limit: int | None = Field(default=None, ge=0)
    """Most calls per run (``None``: no limit)."""

    _tool = field_validator("tool")(classmethod(lambda cls, v: _pattern(v)))

    @model_validator(mode="after")
    def _some_limit(self) -> Budget:
        if self.thread_limit is None and self.run_limit is None:
            raise ValueError(f"budget for {self.tool!r}: give thread_limit, run_limit or both")
        return self


class ArgumentRule(_Table):
    """A rule a tool's arguments must keep: a JSON Schema, or a predicate's import path."""

    name: str = Field(min_length=1)
    """The rule's name: the denial names it."""
    tool: str
    """The tools it applies to (a pattern, see the module docs)."""
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    """A JSON Schema (draft 2020-12) the arguments must satisfy."""
    predicate: str | None = None
    """``"package.module:function"``, called ``(tool, args)``: ``True`` passes, ``False`` or a
    text (the violation) denies."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    _tool = field_validator("tool")(classmethod(lambda cls, v: _pattern(v)))

    @model_validator(mode="after")
    def _one_kind(self) -> ArgumentRule:
        if (self.json_schema is None) == (self.predicate is None):
            raise ValueError(f"argument rule {self.name!r}: give exactly one of schema, predicate")
        if self.predicate is not None and not _IMPORT_PATH.match(self.predicate):
            raise ValueError(
                f"argument rule {self.name!r}: predicate must be an import path "
                f"'package.module:function', got {self.predicate!r}"
            )
        if self.json_schema is not None:
            try:
                Draft202012Validator.check_schema(self.json_schema)
            except SchemaError as exc:
                raise ValueError(
                    f"argument rule {self.name!r}: not a valid JSON Schema: {exc.message}"
                ) from None
        return self


class ToolGates(_Table):
    """The graph-side gates' rules: one object, in Python and in the configuration file.

    ``create_governed_agent(tool_gates=ToolGates(...))`` or ``[tool_gates]`` in the file (the
    same keys). Empty (the default): no call is held, counted or checked.
    """

    require_approval: list[str] = []
    """Tools whose every call an operator must approve before it runs (patterns)."""
    budgets: list[Budget] = []
    """Call budgets; a call must fit every budget that counts its tool."""
    argument_rules: list[ArgumentRule] = []
    """Rules on arguments; a call must keep every rule of its tool."""

    @field_validator("require_approval")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        return [_pattern(v) for v in value]

    @field_validator("argument_rules")
    @classmethod
    def _unique(cls, value: list[ArgumentRule]) -> list[ArgumentRule]:
        names = [r.name for r in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"argument rule names must be unique: {', '.join(twice)} repeat")
        return value

    @property
    def empty(self) -> bool:
        """Whether there is no rule at all."""
        return not (self.require_approval or self.budgets or self.argument_rules)

    def compile(self) -> CompiledGates:
        """The rules, ready to check calls: predicates imported, schemas compiled.

        Raises:
            ValueError: a predicate does not import or is not callable (naming its rule).
        """
        predicates: dict[str, Predicate] = {}
        for rule in self.argument_rules:
            if rule.predicate is not None:
                predicates[rule.name] = _import_predicate(rule.name, rule.predicate)
        return CompiledGates(self, predicates)


def _import_predicate(rule: str, path: str) -> Predicate:
    module_name, _, attribute = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # the module's own failure, whatever it is, named with the rule
        raise ValueError(
            f"argument rule {rule!r}: predicate {path!r} does not import "
            f"({type(exc).__name__}: {exc})"
        ) from None
    if not callable(obj):
        raise ValueError(f"argument rule {rule!r}: predicate {path!r} is not callable")
    predicate: Predicate = obj
    return predicate


def parse_tool_gates(value: Any, where: str = "tool_gates") -> ToolGates:
    """A :class:`ToolGates` from itself, a mapping of its keys, or ``None`` (no rules).

    Raises:
        ValueError: naming ``where`` and every problem.
    """
    if value is None:
        return ToolGates()
    if isinstance(value, ToolGates):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a ToolGates or a mapping, not {type(value).__name__}")
    try:
        return ToolGates.model_validate(dict(value))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class GateDecision:
    """A graph-side gate's denial of one call (nothing ran)."""

    gate: str
    """``arguments``, ``budget`` or ``approval``."""
    rule: str
    """The rule that decided: an argument rule's name, ``budget:<tool pattern>`` or
    ``require_approval:<pattern>``."""
    code: str
    """``tool_arguments_rejected``, ``tool_budget_exceeded`` or ``tool_approval_required``."""
    message: str
    """Why, for the model and the operator."""


@dataclass
class CallCounts:
    """The calls already counted against each budget (keyed by the budget's ``tool``)."""

    thread: dict[str, int] = field(default_factory=dict)
    """Calls of the thread that passed the budget."""
    run: dict[str, int] = field(default_factory=dict)
    """Calls attempted this run (denied ones included)."""


class CompiledGates:
    """:class:`ToolGates` ready to check calls (:meth:`ToolGates.compile`).

    Args:
        gates: the rules.
        predicates: each predicate rule's function, by rule name.
    """

    def __init__(self, gates: ToolGates, predicates: Mapping[str, Predicate]) -> None:
        self.gates = gates
        self.predicates = dict(predicates)
        self.validators = {
            r.name: Draft202012Validator(r.json_schema)
            for r in gates.argument_rules
            if r.json_schema is not None
        }

    def governs(self, tool: ToolRef) -> bool:
        """Whether any rule names ``tool`` (its calls are then recorded)."""
        g = self.gates
        return (
            any(matches(p, tool) for p in g.require_approval)
            or any(matches(b.tool, tool) for b in g.budgets)
            or any(matches(r.tool, tool) for r in g.argument_rules)
        )

    def budgets_for(self, tool: ToolRef) -> list[Budget]:
        """The budgets that count ``tool``'s calls."""
        return [b for b in self.gates.budgets if matches(b.tool, tool)]

    def check(
        self,
        tool: ToolRef,
        args: Mapping[str, Any],
        counts: CallCounts,
        *,
        approval: bool = True,
    ) -> GateDecision | None:
        """The gate that blocks this call, or ``None`` (it may run). Pure: counts are read only.

        Argument rules first, then budgets, then approval (unless ``approval`` is false: the
        engine's ``execute_decision``, which the engine's own gates govern).
        """
        blocked = self.check_arguments(tool, args) or self.check_budgets(tool, counts)
        if blocked is not None:
            return blocked
        for pattern in self.gates.require_approval if approval else ():
            if matches(pattern, tool):
                return GateDecision(
                    "approval",
                    f"require_approval:{pattern}",
                    "tool_approval_required",
                    f"calls of {tool.qualified} need an operator's approval "
                    f"(require_approval {pattern!r})",
                )
        return None

    def check_budgets(self, tool: ToolRef, counts: CallCounts) -> GateDecision | None:
        """The first budget one more call of ``tool`` would exceed, as a denial, or ``None``.

        Also checked when an operator approves a held call, just before it runs: the calls
        that ran meanwhile (beside it in the same model turn) may have spent the budget.
        """
        for budget in self.budgets_for(tool):
            thread = counts.thread.get(budget.tool, 0)
            run = counts.run.get(budget.tool, 0)
            over = []
            if budget.thread_limit is not None and thread + 1 > budget.thread_limit:
                over.append(f"thread limit {budget.thread_limit} ({thread} calls counted)")
            if budget.run_limit is not None and run + 1 > budget.run_limit:
                over.append(f"run limit {budget.run_limit} ({run} calls counted)")
            if over:
                which = "all tools" if budget.tool == ALL_TOOLS else f"tools {budget.tool!r}"
                return GateDecision(
                    "budget",
                    f"budget:{budget.tool}",
                    "tool_budget_exceeded",
                    f"the call budget for {which} is spent: {' and '.join(over)}. Do not call "
                    f"{tool.name!r} again in this {'thread' if 'thread' in over[0] else 'run'}",
                )
        return None

    def check_arguments(self, tool: ToolRef, args: Mapping[str, Any]) -> GateDecision | None:
        """The first argument rule the call breaks, as a denial, or ``None``."""
        for rule in self.gates.argument_rules:
            if not matches(rule.tool, tool):
                continue
            why = self._violation(rule, tool, args)
            if why is not None:
                return GateDecision(
                    "arguments",
                    rule.name,
                    "tool_arguments_rejected",
                    f"the arguments of {tool.qualified} break rule {rule.name!r}: {why}",
                )
        return None

    def _violation(self, rule: ArgumentRule, tool: ToolRef, args: Mapping[str, Any]) -> str | None:
        validator = self.validators.get(rule.name)
        if validator is not None:
            first = min(
                validator.iter_errors(dict(args)),
                key=lambda e: ([str(p) for p in e.absolute_path], e.message),
                default=None,
            )
            if first is None:
                return None
            where = "/".join(str(p) for p in first.absolute_path) or "(arguments)"
            return f"{where}: {first.message}"
        predicate = self.predicates[rule.name]
        try:
            verdict = predicate(tool.qualified, dict(args))
        except Exception as exc:  # a failing predicate denies: never an unchecked call
            return f"its predicate raised {type(exc).__name__}: {exc}"
        if verdict is True:
            return None
        if isinstance(verdict, str) and verdict.strip():
            return verdict.strip()
        return f"its predicate returned {verdict!r}"


def count_calls(
    gates: CompiledGates,
    tool: ToolRef,
    calls: Sequence[Mapping[str, Any]],
    denials: Sequence[Mapping[str, Any]],
    turn: str | None,
) -> CallCounts:
    """The counts of ``tool``'s budgets, from the thread's records.

    ``calls``: the thread's ``tool_calls`` records (each call that passed the budgets);
    ``denials``: its denials (a ``budget`` denial counts against the run it was made in).
    """
    counts = CallCounts()
    budgets = gates.budgets_for(tool)
    if not budgets:
        return counts
    # count each (server, tool) once, then match each distinct tool once per budget
    thread: Counter[tuple[str, str]] = Counter()
    run: Counter[tuple[str, str]] = Counter()
    for record in calls:
        key = (str(record.get("server")), str(record.get("tool")))
        thread[key] += 1
        if turn is not None and record.get("turn") == turn:
            run[key] += 1
    for denial in denials:
        if denial.get("gate") == "budget" and turn is not None and denial.get("turn") == turn:
            run[(str(denial.get("server")), str(denial.get("tool")))] += 1
    for budget in budgets:
        pattern = budget.tool
        counts.thread[pattern] = sum(
            n for (server, name), n in thread.items() if matches(pattern, ToolRef(server, name))
        )
        counts.run[pattern] = sum(
            n for (server, name), n in run.items() if matches(pattern, ToolRef(server, name))
        )
    return counts
