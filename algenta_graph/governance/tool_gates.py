"""Gates on any tool: which calls an operator must approve, call budgets and argument rules.

The graph decides three gates of the one gate table (:mod:`algenta_graph.governance.gates`)
itself, for every tool the model can call (an extra MCP server's as much as the engine's),
**before** the call runs (``docs/ARCHITECTURE.md``, "Graph-side gates"):

- ``arguments``: the call's arguments break a rule of its tool: a JSON Schema they must satisfy
  (``{"properties": {"amount": {"type": "number", "maximum": 1000}}}``, checked as
  :mod:`~algenta_graph.governance.rule_schemas` says: formats checked, a ``type`` wherever a
  value is constrained) or a predicate named by an import path, ``(tool, args) -> bool | str``
  (``False`` or a text: the violation); also a call of a tool its server refuses when no
  approval rule lists it (``unlisted = "deny"``);
- ``budget``: the call would exceed a call budget: LangChain's ``ToolCallLimitMiddleware``
  semantics, ``thread_limit`` (calls the thread ran) and ``run_limit`` (calls attempted this run:
  since the latest user message), per tool or over all tools, counted from the thread's records
  so they hold across restarts and workers;
- ``approval``: the tool is one whose calls an operator must approve: named by
  ``require_approval``, marked ``destructiveHint: true`` by its server (unless ``allow`` names
  it), or unlisted on a server whose posture is ``unlisted = "approve"``; or one whose calls
  need several distinct operators' approvals (``[[tool_gates.approvals]]``, :class:`Approvals`:
  ``tool = "crm.delete_customer"``, ``quorum = 2``), which then holds every escalated call of the
  tool, whichever gate escalated it, until that many approved (two-person approval).

A call gets one decision: a server's ``deny`` posture first, then the first of these gates that
blocks it, in that order (an operator is only asked about a call that breaks no rule and fits
its budgets). Rules name tools by their **real** MCP name (never the provider-safe one the model
sees): ``delete_customer`` (that tool on any server), ``crm.delete_customer`` (on server
``crm``; the engine's server is ``algenta``), or an ``fnmatch`` pattern of either, ``crm.*``,
``*.refund``, ``delete_*``. Server names hold no dot (:func:`check_server_name`), so
``crm.eu.refund`` is never ambiguous.

**Every rule resolves, or nothing starts.** :meth:`ToolGates.compile` with the live catalog
(:class:`GateCatalog`, built when the graph is built and by ``algenta-graph config check``)
refuses, with one :class:`~algenta_graph.errors.ToolGatesError` naming every problem, a pattern
that matches no tool (naming the nearest tool names), a server posture for a server the catalog
does not have, and an argument rule naming an argument none of its tools takes or admitting a
type the tool does not take; a server marked ``optional`` may be down at start (its rules then
match nothing, and are kept for the next build).

>>> small = ArgumentRule(name="small", tool="refund",
...                      schema={"properties": {"amount": {"type": "number", "maximum": 10}}})
>>> gates = ToolGates(require_approval=["crm.delete_*"],
...                   budgets=[Budget(tool="crm.*", thread_limit=2)], argument_rules=[small])
>>> rules = gates.compile()
>>> rules.check(ToolRef("crm", "delete_customer"), {"id": "a1"}, CallCounts()).gate
'approval'
>>> rules.check(ToolRef("pay", "refund"), {"amount": 50}, CallCounts()).rule
'small'
>>> rules.check(ToolRef("pay", "refund"), {"amount": "5"}, CallCounts()).rule  # not a number
'small'
>>> rules.check(ToolRef("crm", "lookup"), {}, CallCounts(thread={"crm.*": 2})).gate
'budget'
>>> rules.check(ToolRef("crm", "lookup"), {}, CallCounts()) is None
True
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import importlib
import json
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from algenta_graph.errors import ConfigProblem, ToolGatesError
from algenta_graph.governance.rule_schemas import catalog_problems, schema_problems

__all__ = [
    "ALL_TOOLS",
    "Approvals",
    "ArgumentRule",
    "Budget",
    "CallCounts",
    "CatalogTool",
    "CompiledGates",
    "GateCatalog",
    "GateDecision",
    "Posture",
    "ResolvedRule",
    "ServerRules",
    "ToolGates",
    "ToolRef",
    "args_digest",
    "check_server_name",
    "count_calls",
    "matches",
    "parse_tool_gates",
]

ALL_TOOLS = "*"
"""The pattern of a rule on every tool."""

_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_GLOB = frozenset("*?[")

Predicate = Callable[[str, Mapping[str, Any]], "bool | str"]
"""``(tool, args) -> bool | str``: ``True`` passes; ``False`` or a text (why) is a violation."""
Posture = Literal["allow", "approve", "deny"]
"""What a server's unlisted tools get: run, held for an operator, or refused."""


def check_server_name(name: Any) -> str:
    """``name`` if an MCP server may be called so, else ``ValueError`` saying why.

    Rules name a tool ``server.name``, so a server's name holds no dot (``crm.eu.refund`` would
    be ambiguous): letters, digits, ``_`` and ``-``. The one rule of the Python API, the
    configuration file and the connection.

    >>> check_server_name("crm-eu")
    'crm-eu'
    >>> check_server_name("crm.eu")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: server name 'crm.eu': letters, digits, '_' and '-' only ...
    """
    if not isinstance(name, str) or not _SERVER_NAME.match(name):
        raise ValueError(
            f"server name {name!r}: letters, digits, '_' and '-' only (tool rules name a tool "
            "'server.name', so a server's name cannot hold a dot)"
        )
    return name


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

    @classmethod
    def parse(cls, qualified: str) -> ToolRef:
        """The tool of a qualified name: the server is everything before the first dot.

        >>> ToolRef.parse("crm.customers.delete")
        ToolRef(server='crm', name='customers.delete')
        """
        server, _, name = qualified.partition(".")
        return cls(server, name)


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


def _patterns(value: list[str]) -> list[str]:
    return [_pattern(v) for v in value]


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
    """A rule a tool's arguments must keep: a JSON Schema, or a predicate's import path.

    A schema is refused when made unless each constraint in it means what it says
    (:func:`~algenta_graph.governance.rule_schemas.schema_problems`: known keywords, checked
    formats, a ``type`` wherever a value is constrained). A predicate sees the arguments as the
    model sent them: check their types itself (one that raises denies the call).
    """

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
            problems = schema_problems(self.json_schema)
            if problems:
                raise ValueError(
                    f"argument rule {self.name!r}: its schema would not check what the tool "
                    f"receives: {'; '.join(problems)}"
                )
        return self


class Approvals(_Table):
    """Tools whose calls need ``quorum`` distinct operators' approvals (two-person approval).

    Its calls are held for an operator, as ``require_approval`` holds them, and any escalated
    call of it (held by this rule, an argument rule or a budget) runs only once ``quorum``
    distinct operators approved the same digest; an ``edit`` is not offered (it would run
    arguments the other approvers never saw). The rule is one of the rules in force an
    escalation's digest binds: a quorum changed since an answer was given makes it stale.
    """

    tool: str
    """The tools it applies to (a pattern, see the module docs)."""
    quorum: int = Field(ge=1)
    """How many distinct operators must approve each call (``2``: two-person approval)."""

    _tool = field_validator("tool")(classmethod(lambda cls, v: _pattern(v)))


class ServerRules(_Table):
    """A server's own rules (``[tool_gates.servers.<name>]``)."""

    unlisted: Posture = "allow"
    """What a call of this server's tools gets when neither ``require_approval`` nor ``allow``
    names the tool: ``allow`` (it runs, under the budgets and argument rules that name it),
    ``approve`` (held for an operator, gate ``approval``, rule ``unlisted:<server>``) or
    ``deny`` (refused, gate ``arguments``, rule ``unlisted:<server>``). Budgets and argument
    rules never list a tool: they only add limits."""
    optional: bool = False
    """The server may be down when the graph starts: rules qualified with its name
    (``billing.*``) may then match no tool. When it is up, they must."""


class ToolGates(_Table):
    """The graph-side gates' rules: one object, in Python and in the configuration file.

    ``create_governed_agent(tool_gates=ToolGates(...))`` or ``[tool_gates]`` in the file (the
    same keys). Empty (the default): no call is held, counted or checked, except the calls of a
    tool its server marks ``destructiveHint: true``, which are held for an operator.
    """

    require_approval: list[str] = []
    """Tools whose every call an operator must approve before it runs (patterns)."""
    approvals: list[Approvals] = []
    """Tools whose every call several distinct operators must approve before it runs
    (:class:`Approvals`: ``[[tool_gates.approvals]]`` with ``tool`` and ``quorum``)."""
    allow: list[str] = []
    """Tools that run without an operator's approval (patterns): a tool its server marks
    ``destructiveHint: true``, or any tool of a server whose posture is ``unlisted = "approve"``
    or ``"deny"``. ``require_approval`` wins over it (stricter, never looser)."""
    budgets: list[Budget] = []
    """Call budgets; a call must fit every budget that counts its tool."""
    argument_rules: list[ArgumentRule] = []
    """Rules on arguments; a call must keep every rule of its tool."""
    servers: dict[str, ServerRules] = {}
    """Per server (``algenta`` for the engine): its posture for unlisted tools, and whether it
    may be down at start (:class:`ServerRules`)."""

    _require_approval = field_validator("require_approval")(classmethod(lambda c, v: _patterns(v)))
    _allow = field_validator("allow")(classmethod(lambda c, v: _patterns(v)))

    @field_validator("servers")
    @classmethod
    def _server_names(cls, value: dict[str, ServerRules]) -> dict[str, ServerRules]:
        for name in value:
            check_server_name(name)
        return value

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
        return not (
            self.require_approval or self.approvals or self.allow or self.budgets
            or self.argument_rules or self.servers
        )  # fmt: skip

    def compile(self, catalog: GateCatalog | None = None) -> CompiledGates:
        """The rules, ready to check calls: predicates imported, schemas compiled.

        With ``catalog`` (the live one), every rule is resolved against it
        (:meth:`CompiledGates.resolved`), and the tools' own hints are known.

        Raises:
            ValueError: a predicate does not import or is not callable (naming its rule).
            ToolGatesError: a rule does not resolve against ``catalog`` (every problem named).
        """
        predicates: dict[str, Predicate] = {}
        for rule in self.argument_rules:
            if rule.predicate is not None:
                predicates[rule.name] = _import_predicate(rule.name, rule.predicate)
        return CompiledGates(self, predicates, catalog)


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


# ------------------------------------------------------------------ the live catalog


@dataclass(frozen=True)
class CatalogTool:
    """A tool of the live catalog as the rules see it."""

    ref: ToolRef
    """Its server and real MCP name."""
    input_schema: Mapping[str, Any] = field(default_factory=dict)
    """The JSON Schema of its arguments, as its server declares them (scrubbed)."""
    destructive: bool = False
    """Its server marks it ``destructiveHint: true`` (and not ``readOnlyHint``): its calls are
    held for an operator unless ``allow`` names it."""


@dataclass(frozen=True)
class GateCatalog:
    """The live catalog the rules are resolved against (``connection.catalog.gate_catalog``)."""

    tools: tuple[CatalogTool, ...]
    """Every tool the model can call."""
    hidden: frozenset[ToolRef] = frozenset()
    """Tools the engine advertises outside the connection's profile: a rule may name them (no
    call of this graph reaches them)."""
    unreachable: frozenset[str] = frozenset()
    """Extra servers configured but down when the graph was built."""

    @property
    def servers(self) -> frozenset[str]:
        """The servers the catalog has tools of."""
        return frozenset(t.ref.server for t in self.tools) | {r.server for r in self.hidden}


@dataclass(frozen=True)
class ResolvedRule:
    """One rule with the tools it governs (``algenta-graph config check`` prints these)."""

    key: str
    """Where it is in ``[tool_gates]`` (``require_approval[0]``, ``servers.crm``, ...)."""
    rule: str
    """What it says."""
    gate: str
    """The gate it decides (``approval``, ``budget``, ``arguments``)."""
    tools: tuple[str, ...]
    """The catalog's tools it governs, ``server.name``."""
    note: str = ""
    """Why it governs no tool without being an error (an optional server down, a tool outside
    the profile), or what else decides its tools."""

    def shown(self) -> dict[str, Any]:
        """As plain data."""
        out: dict[str, Any] = {"rule": self.rule, "gate": self.gate, "tools": list(self.tools)}
        if self.note:
            out["note"] = self.note
        return out


def _pattern_server(pattern: str) -> str | None:
    """The server a qualified pattern names (``crm`` of ``crm.*``), else ``None``."""
    head, dot, _ = pattern.partition(".")
    return head if dot and not (_GLOB & set(head)) else None


def _nearest(pattern: str, refs: Sequence[ToolRef]) -> list[str]:
    scored = sorted(
        (
            -max(
                difflib.SequenceMatcher(None, pattern, ref.qualified).ratio(),
                difflib.SequenceMatcher(None, pattern, ref.name).ratio(),
            ),
            ref.qualified,
        )
        for ref in refs
    )
    best = -scored[0][0] if scored else 0.0
    return [name for score, name in scored[:3] if -score >= max(0.6, best - 0.15)]


def _resolve(
    gates: ToolGates, catalog: GateCatalog
) -> tuple[list[ResolvedRule], list[tuple[str, str]]]:
    """Each rule with the tools it governs, and each problem (its key, what is wrong)."""
    refs = [t.ref for t in catalog.tools]
    resolved: list[ResolvedRule] = []
    problems: list[tuple[str, str]] = []

    def entry(key: str, says: str, gate: str, pattern: str) -> list[ToolRef]:
        found = [r for r in refs if matches(pattern, r)]
        hidden = sorted(r.qualified for r in catalog.hidden if matches(pattern, r))
        note = ""
        server = _pattern_server(pattern)
        if found:
            pass
        elif hidden:
            note = f"only tools outside the connection's profile: {', '.join(hidden)}"
        elif server in catalog.unreachable and gates.servers.get(server, ServerRules()).optional:
            note = f"server {server!r} is unreachable and optional: kept for its return"
        elif server in catalog.unreachable:
            problems.append(
                (
                    key,
                    f"{pattern!r} names no tool: server {server!r} is unreachable; to start "
                    f"without it, mark it optional ([tool_gates.servers.{server}] optional = "
                    "true)",
                )
            )
            return []
        else:
            near = _nearest(pattern, [*refs, *catalog.hidden])
            where = f"nearest: {', '.join(near)}" if near else (
                f"the catalog's servers: {', '.join(sorted(catalog.servers))}"
            )  # fmt: skip
            problems.append((key, f"{pattern!r} names no tool in the catalog; {where}"))
            return []
        resolved.append(ResolvedRule(key, says, gate, tuple(r.qualified for r in found), note))
        return found

    for i, pattern in enumerate(gates.require_approval):
        entry(f"require_approval[{i}]", f"require_approval {pattern!r}", "approval", pattern)
    for i, approvals in enumerate(gates.approvals):
        says = f"approvals {approvals.tool!r} (quorum {approvals.quorum})"
        entry(f"approvals[{i}]", says, "approval", approvals.tool)
    for i, pattern in enumerate(gates.allow):
        entry(f"allow[{i}]", f"allow {pattern!r}", "approval", pattern)
    for i, budget in enumerate(gates.budgets):
        limits = f"thread_limit={budget.thread_limit}, run_limit={budget.run_limit}"
        entry(f"budgets[{i}]", f"budget {budget.tool!r} ({limits})", "budget", budget.tool)
    for i, rule in enumerate(gates.argument_rules):
        key = f"argument_rules[{i}]"
        found = entry(key, f"argument rule {rule.name!r} on {rule.tool!r}", "arguments", rule.tool)
        if rule.json_schema is not None and found:
            schemas = {t.ref: t.input_schema for t in catalog.tools}
            governed = [(r.qualified, schemas[r]) for r in found]
            for problem in catalog_problems(rule.json_schema, governed):
                problems.append((f"{key}.schema", f"argument rule {rule.name!r}: {problem}"))
    listed = [*gates.require_approval, *(a.tool for a in gates.approvals), *gates.allow]
    for server, rules in gates.servers.items():
        key = f"servers.{server}"
        if server not in catalog.servers and not (rules.optional and server in catalog.unreachable):
            known = ", ".join(sorted(catalog.servers))
            near = difflib.get_close_matches(server, sorted(catalog.servers), n=1)
            hint = f"; nearest: {near[0]}" if near else ""
            problems.append((key, f"no server {server!r} in the catalog (it has {known}){hint}"))
            continue
        unlisted = tuple(
            r.qualified
            for r in refs
            if r.server == server and not any(matches(p, r) for p in listed)
        )
        gate = "arguments" if rules.unlisted == "deny" else "approval"
        note = "" if server in catalog.servers else f"server {server!r} is unreachable"
        says = f"servers.{server}.unlisted = {rules.unlisted!r}"
        resolved.append(ResolvedRule(key, says, gate, unlisted, note))
    held = tuple(
        t.ref.qualified
        for t in catalog.tools
        if t.destructive and not any(matches(p, t.ref) for p in gates.allow)
    )
    if held:
        says = "destructiveHint: held for an operator (allow releases a tool)"
        resolved.append(ResolvedRule("destructiveHint", says, "approval", held))
    return resolved, problems


# ------------------------------------------------------------------ the check


@dataclass(frozen=True)
class GateDecision:
    """A graph-side gate's denial of one call (nothing ran)."""

    gate: str
    """``arguments``, ``budget`` or ``approval``."""
    rule: str
    """The rule that decided: an argument rule's name, ``budget:<tool pattern>``,
    ``require_approval:<pattern>``, ``destructiveHint`` or ``unlisted:<server>``."""
    code: str
    """``tool_arguments_rejected``, ``tool_not_listed``, ``tool_budget_exceeded`` or
    ``tool_approval_required``."""
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
        catalog: the live catalog the rules are resolved against (``None``: not resolved; the
            tools' own hints, ``destructiveHint``, are then unknown).

    Raises:
        ToolGatesError: a rule does not resolve against ``catalog``.
    """

    def __init__(
        self,
        gates: ToolGates,
        predicates: Mapping[str, Predicate],
        catalog: GateCatalog | None = None,
    ) -> None:
        self.gates = gates
        self.predicates = dict(predicates)
        checker = Draft202012Validator.FORMAT_CHECKER
        self.validators = {
            r.name: Draft202012Validator(r.json_schema, format_checker=checker)
            for r in gates.argument_rules
            if r.json_schema is not None
        }
        self.catalog = catalog
        self._tools = {t.ref: t for t in catalog.tools} if catalog is not None else {}
        self.resolution: tuple[ResolvedRule, ...] = ()
        """Each rule with the tools it governs (empty unless resolved)."""
        if catalog is not None:
            rules, problems = _resolve(gates, catalog)
            if problems:
                raise ToolGatesError(
                    [ConfigProblem("the configuration", f"tool_gates.{k}", m) for k, m in problems]
                )
            self.resolution = tuple(rules)

    def resolved(self, catalog: GateCatalog) -> CompiledGates:
        """These rules resolved against ``catalog`` (the same predicates).

        Raises:
            ToolGatesError: naming every rule that does not resolve.
        """
        return CompiledGates(self.gates, self.predicates, catalog)

    @property
    def active(self) -> bool:
        """Whether any call can be held, counted or checked."""
        return not self.gates.empty or any(self._destructive(ref) for ref in self._tools)

    def _listed(self, tool: ToolRef) -> bool:
        g = self.gates
        listed = (*g.require_approval, *(a.tool for a in g.approvals), *g.allow)
        return any(matches(p, tool) for p in listed)

    def _posture(self, tool: ToolRef) -> Posture:
        """The server's posture for ``tool``: ``allow`` for a listed tool."""
        rules = self.gates.servers.get(tool.server)
        return "allow" if rules is None or self._listed(tool) else rules.unlisted

    def _destructive(self, tool: ToolRef) -> bool:
        found = self._tools.get(tool)
        return (
            found is not None
            and found.destructive
            and not any(matches(p, tool) for p in self.gates.allow)
        )

    def governs(self, tool: ToolRef) -> bool:
        """Whether any rule decides ``tool``'s calls (they are then recorded)."""
        g = self.gates
        return (
            self._listed(tool)
            or any(matches(b.tool, tool) for b in g.budgets)
            or any(matches(r.tool, tool) for r in g.argument_rules)
            or self._posture(tool) != "allow"
            or self._destructive(tool)
        )

    def budgets_for(self, tool: ToolRef) -> list[Budget]:
        """The budgets that count ``tool``'s calls."""
        return [b for b in self.gates.budgets if matches(b.tool, tool)]

    def rules_for(self, tool: ToolRef) -> list[ArgumentRule]:
        """The argument rules ``tool``'s calls must keep."""
        return [r for r in self.gates.argument_rules if matches(r.tool, tool)]

    def in_force(self, tool: ToolRef, policy: str) -> dict[str, Any]:
        """What decides ``tool``'s calls under a gate of ``policy``, as plain data.

        Every rule that names the tool (their definitions), its server's posture, whether it is
        held as destructive, and the gate's policy: what an escalation's digest binds, so an
        answer given under other rules is refused as stale.
        """
        g = self.gates
        rules: dict[str, Any] = {
            "tool": tool.qualified,
            "policy": policy,
            "require_approval": [p for p in g.require_approval if matches(p, tool)],
            "allow": [p for p in g.allow if matches(p, tool)],
            "destructive": self._destructive(tool),
            "unlisted": self._posture(tool),
            "budgets": [b.model_dump(mode="json") for b in self.budgets_for(tool)],
            "argument_rules": [
                r.model_dump(mode="json", by_alias=True) for r in self.rules_for(tool)
            ],
        }
        quorums = [a.model_dump(mode="json") for a in g.approvals if matches(a.tool, tool)]
        if quorums:  # only then: the digests of escalations under no quorum rule are unchanged
            rules["approvals"] = quorums
        return rules

    def check(
        self,
        tool: ToolRef,
        args: Mapping[str, Any],
        counts: CallCounts,
        *,
        approval: bool = True,
    ) -> GateDecision | None:
        """The gate that blocks this call, or ``None`` (it may run). Pure: counts are read only.

        A server's ``deny`` posture first, then argument rules, then budgets, then approval
        (unless ``approval`` is false: the engine's ``execute_decision``, which the engine's own
        gates govern): ``require_approval``, ``approvals``, a destructive tool, a server's
        ``approve`` posture.
        """
        posture = self._posture(tool)
        if posture == "deny":
            return GateDecision(
                "arguments",
                f"unlisted:{tool.server}",
                "tool_not_listed",
                f"calls of {tool.qualified} are refused: no rule lists it, and server "
                f"{tool.server!r} refuses its unlisted tools (unlisted = 'deny')",
            )
        blocked = self.check_arguments(tool, args) or self.check_budgets(tool, counts)
        if blocked is not None or not approval:
            return blocked
        for pattern in self.gates.require_approval:
            if matches(pattern, tool):
                return GateDecision(
                    "approval",
                    f"require_approval:{pattern}",
                    "tool_approval_required",
                    f"calls of {tool.qualified} need an operator's approval "
                    f"(require_approval {pattern!r})",
                )
        for rule in self.gates.approvals:
            if matches(rule.tool, tool):
                return GateDecision(
                    "approval",
                    f"approvals:{rule.tool}",
                    "tool_approval_required",
                    f"calls of {tool.qualified} need {rule.quorum} distinct operators' "
                    f"approvals (approvals {rule.tool!r}, quorum {rule.quorum})",
                )
        if self._destructive(tool):
            return GateDecision(
                "approval",
                "destructiveHint",
                "tool_approval_required",
                f"calls of {tool.qualified} need an operator's approval: its server marks it "
                "destructive (destructiveHint)",
            )
        if posture == "approve":
            return GateDecision(
                "approval",
                f"unlisted:{tool.server}",
                "tool_approval_required",
                f"calls of {tool.qualified} need an operator's approval: no rule lists it, and "
                f"server {tool.server!r} holds its unlisted tools (unlisted = 'approve')",
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

    def check_arguments(
        self, tool: ToolRef, args: Mapping[str, Any], *, overridden: str | None = None
    ) -> GateDecision | None:
        """The first argument rule the call breaks, as a denial, or ``None``.

        ``overridden``: a rule not checked (the one an operator's approval overrides).
        """
        for rule in self.rules_for(tool):
            if rule.name == overridden:
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
            try:
                first = min(
                    validator.iter_errors(dict(args)),
                    key=lambda e: ([str(p) for p in e.absolute_path], e.message),
                    default=None,
                )
            except Exception as exc:  # a schema that cannot be checked denies: never unchecked
                return f"its schema could not be checked ({type(exc).__name__}: {exc})"
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
