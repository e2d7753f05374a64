"""The roles of the served graph, whoever grants them: who a principal is and what it may answer.

A principal (an identity and its roles) comes from the tokens file
(:mod:`algenta_graph.serving.tokens`) or from the identity provider's JWT
(:mod:`algenta_graph.serving.jwt_bearer`); either way its roles are these: ``agent``,
``operator`` (every gate), ``operator:<gate>`` (that gate only) and ``auditor``. Who may answer an
escalation of a gate (:func:`is_operator`) and which waiting threads an operator reads
(:func:`operator_gates`) are decided here, one rule for both sources, the LangGraph auth handlers
and the operator inbox. No environment variable is read here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from algenta_graph.governance.gates import GATE_NAMES

__all__ = [
    "AGENT",
    "AUDITOR",
    "GATE_ROLES",
    "OPEN_IDENTITY",
    "OPERATOR",
    "ROLES",
    "Principal",
    "is_operator",
    "operator_gates",
    "roles_of",
    "valid_role",
]

AGENT = "agent"
OPERATOR = "operator"
AUDITOR = "auditor"
ROLES: tuple[str, ...] = (AGENT, OPERATOR, AUDITOR)
GATE_ROLES: tuple[str, ...] = tuple(f"{OPERATOR}:{gate}" for gate in GATE_NAMES)
OPEN_IDENTITY = "anonymous"
"""The (unauthenticated) identity of every request when the server runs open."""


@dataclass(frozen=True)
class Principal:
    """Who a token is: an identity, its roles, and when the token stops being accepted."""

    identity: str
    roles: tuple[str, ...]
    expires_at: float | None = None
    """The token's ``exp`` (seconds since the epoch) for an identity provider's JWT; ``None``
    for a token of the tokens file (valid until it is removed from the file)."""


def valid_role(role: Any) -> bool:
    """Whether ``role`` is one of the served graph's roles.

    >>> valid_role("operator:confidence"), valid_role("admin"), valid_role(["agent"])
    (True, False, False)
    """
    return isinstance(role, str) and (role in ROLES or role in GATE_ROLES)


def roles_of(permissions: Sequence[str] | None) -> frozenset[str]:
    """The roles among a user's ``permissions`` (anything not a string is dropped)."""
    return frozenset(p for p in permissions or () if isinstance(p, str))


def is_operator(roles: Sequence[str] | frozenset[str], gate: str | None = None) -> bool:
    """Whether ``roles`` may answer an escalation (of ``gate``, or of some gate if ``None``).

    >>> is_operator(["operator:confidence"], "confidence"), is_operator(["agent"])
    (True, False)
    >>> is_operator(["operator:confidence"], "risk_floor")
    False
    """
    roles = frozenset(roles)
    if OPERATOR in roles:
        return True
    if gate is None:
        return any(r.startswith(f"{OPERATOR}:") for r in roles)
    return f"{OPERATOR}:{gate}" in roles


def operator_gates(roles: Sequence[str] | frozenset[str]) -> tuple[str, ...]:
    """The gates whose waiting threads ``roles`` may read (every gate for ``operator``).

    >>> operator_gates(["operator:risk_floor", "agent"]), operator_gates(["agent"])
    (('risk_floor',), ())
    >>> operator_gates(["operator"]) == GATE_NAMES
    True
    """
    roles = frozenset(roles)
    if OPERATOR in roles:
        return GATE_NAMES
    return tuple(g for g in GATE_NAMES if f"{OPERATOR}:{g}" in roles)
