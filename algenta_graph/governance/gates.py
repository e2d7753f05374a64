"""The one table of gates: every fact about a named gate lives here, and only here.

``execute_decision`` is blocked by exactly one of the engine's gates (:data:`ENGINE_GATE_NAMES`:
``idempotency``, ``confidence``, ``risk_floor``); any tool call may be blocked before it runs by
one of the graph's own (:data:`GRAPH_GATE_NAMES`: ``approval``, ``budget``, ``arguments``,
decided by :mod:`algenta_graph.governance.tool_gates`). For each gate the table says which
operator-path flag overrides it (graph-side gates have none: an operator's approval runs the
held call itself), what the graph does by default when it denies a call, and what it means
(the text the system prompt, the server's context schema and the operator's escalation request
show). Everything else (the per-gate handler nodes, the labelled
edges, the server's run context, the CLI's ``--on-denial``, the tests) derives from it, so a new
gate is one new row.

Policies, from least to most strict (see ``docs/ARCHITECTURE.md``, invariants 7 and 9):

- ``report``: the model is told which gate blocked the call and why, and answers the user;
- ``escalate``: the run pauses for a human operator, who alone may override;
- ``halt``: the run ends.

>>> GATES["confidence"].override_flag, GATES["confidence"].default_policy
('override_safety', 'escalate')
>>> strictest(["report", "halt", "escalate"])
'halt'
>>> parse_on_denial('{"risk_floor": "halt"}')["risk_floor"]
'halt'
>>> parse_on_denial("report") == dict.fromkeys(GATE_NAMES, "report")
True
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

__all__ = [
    "DEFAULT_POLICIES",
    "ENGINE_GATE_NAMES",
    "GATES",
    "GATE_NAMES",
    "GRAPH_GATE_NAMES",
    "OVERRIDE_FLAGS",
    "POLICIES",
    "UNKNOWN_GATE_POLICY",
    "Gate",
    "GateName",
    "Policy",
    "describe_gates",
    "parse_on_denial",
    "policy_for",
    "strictest",
    "tighten",
]

GateName = Literal["idempotency", "confidence", "risk_floor", "approval", "budget", "arguments"]
"""The named gates: the keys of :data:`GATES`, in its order (checked below). A gate an engine
names that is not one of the engine's is still a denial, and halts."""
Policy = Literal["report", "escalate", "halt"]
POLICIES: tuple[Policy, ...] = ("report", "escalate", "halt")
"""Every policy, from least to most strict."""

UNKNOWN_GATE_POLICY: Policy = "halt"
"""A gate the graph does not know always halts (no override flag is known for it)."""


@dataclass(frozen=True)
class Gate:
    """One named gate of ``execute_decision``."""

    name: str
    """The gate's name (its handler node is ``denial_handler_<name>``)."""
    override_flag: str | None
    """The operator-path flag that overrides it (never model-facing); ``None`` for a graph-side
    gate, whose approval runs the held call itself."""
    default_policy: Policy
    """What the graph does with its denial unless told otherwise."""
    description: str
    """What it means (prompts, the context schema, the operator's request)."""
    side: Literal["engine", "graph"] = "engine"
    """Who decides it: the engine (``execute_decision``) or the graph, before any call runs."""


GATES: Mapping[str, Gate] = {
    gate.name: gate
    for gate in (
        Gate(
            "idempotency",
            "force",
            "report",
            "the decision was already executed (or its delivery may have reached its target)",
        ),
        Gate(
            "confidence",
            "override_safety",
            "escalate",
            "the decision's confidence is below the engine's policy minimum",
        ),
        Gate(
            "risk_floor",
            "override_safety",
            "escalate",
            "the decision's downside risk (risk_p5) is below the engine's risk floor",
        ),
        Gate(
            "approval",
            None,
            "escalate",
            "the tool is one whose calls an operator must approve before they run",
            "graph",
        ),
        Gate(
            "budget",
            None,
            "report",
            "the call would exceed a call budget of this thread or run",
            "graph",
        ),
        Gate(
            "arguments",
            None,
            "report",
            "the call's arguments break a rule set for the tool",
            "graph",
        ),
    )
}
"""The gates: the engine's, in the order it checks them, then the graph's own."""

GATE_NAMES: tuple[str, ...] = tuple(GATES)
ENGINE_GATE_NAMES: tuple[str, ...] = tuple(g.name for g in GATES.values() if g.side == "engine")
"""The gates an engine names in a denial of ``execute_decision``."""
GRAPH_GATE_NAMES: tuple[str, ...] = tuple(g.name for g in GATES.values() if g.side == "graph")
"""The gates the graph decides before a call runs (:mod:`~algenta_graph.governance.tool_gates`)."""
if get_args(GateName) != GATE_NAMES:  # pragma: no cover - a gate added to one and not the other
    raise AssertionError(f"GateName {get_args(GateName)} must list the gate table {GATE_NAMES}")
DEFAULT_POLICIES: Mapping[str, Policy] = {g.name: g.default_policy for g in GATES.values()}
"""Default denial policy per gate (a gate not in the table always halts)."""
OVERRIDE_FLAGS: Mapping[str, str] = {
    g.name: g.override_flag for g in GATES.values() if g.override_flag is not None
}
"""The operator-path flag that overrides each engine gate."""

_RANK: dict[str, int] = {policy: i for i, policy in enumerate(POLICIES)}


def strictest(policies: Iterable[str]) -> Policy:
    """The strictest of ``policies`` (``halt`` > ``escalate`` > ``report``); ``report`` if none."""
    best: Policy = "report"
    for policy in policies:
        if _RANK[policy] > _RANK[best]:
            best = cast(Policy, policy)
    return best


def policy_for(gate: str, policies: Mapping[str, str]) -> Policy:
    """The policy that applies to a denial by ``gate`` (an unknown gate halts)."""
    if gate not in GATES:
        return UNKNOWN_GATE_POLICY
    return cast(Policy, policies.get(gate, GATES[gate].default_policy))


def parse_on_denial(value: Any, where: str = "on_denial") -> dict[str, Policy]:
    """The one validator of ``on_denial``, shared by the library, the server and the CLI.

    Accepts a policy for every gate (``"halt"``), a mapping ``{gate: policy}``, or either one as
    JSON text. Anything else raises ``ValueError`` naming ``where``, the bad gate or policy, and
    what is valid. ``None`` and ``""`` mean "nothing requested" (``{}``).
    """
    if value is None:
        return {}
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return {}
        if text[:1] in '{["':
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where} is not valid JSON ({exc.msg}): {text!r}") from None
        else:
            value = text
    if isinstance(value, str):
        _check_policy(value, where)
        return dict.fromkeys(GATE_NAMES, cast(Policy, value))
    if not isinstance(value, Mapping):
        raise ValueError(
            f"{where} must be a policy ({', '.join(POLICIES)}) or a mapping of gate to policy, "
            f"not {type(value).__name__}"
        )
    out: dict[str, Policy] = {}
    for gate, policy in value.items():
        if gate not in GATES:
            raise ValueError(
                f"{where}: unknown gate {gate!r}; the gates are {', '.join(GATE_NAMES)}"
            )
        _check_policy(policy, f"{where}[{gate!r}]")
        out[gate] = policy
    return out


def _check_policy(policy: Any, where: str) -> None:
    if policy not in POLICIES:
        raise ValueError(
            f"{where}: unknown policy {policy!r}; expected one of {', '.join(POLICIES)}"
        )


def tighten(
    base: Mapping[str, Policy], requested: Mapping[str, Policy], where: str
) -> dict[str, Policy]:
    """``base`` with ``requested`` applied, where a request may only make a gate stricter.

    A looser request raises ``ValueError`` naming the gate (invariant 9): a run's settings may
    never loosen what the graph was built or served with.

    >>> tighten({"confidence": "report"}, {"confidence": "halt"}, "context")["confidence"]
    'halt'
    >>> tighten({"confidence": "halt"}, {"confidence": "escalate"}, "ctx")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ctx['confidence']: 'escalate' is looser than this graph's 'halt'; ...
    """
    out = {gate: policy_for(gate, base) for gate in GATE_NAMES}
    for gate, policy in requested.items():
        current = out[gate]
        if _RANK[policy] < _RANK[current]:
            raise ValueError(
                f"{where}[{gate!r}]: {policy!r} is looser than this graph's {current!r}; a run "
                "may only make a gate's policy stricter (report < escalate < halt)"
            )
        out[gate] = policy
    return out


def describe_gates() -> str:
    """One line per gate, for prompts and documentation."""
    return "\n".join(f"- {g.name}: {g.description}" for g in GATES.values())
