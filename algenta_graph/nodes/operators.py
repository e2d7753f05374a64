"""Who the operator answering an escalation is, and whether they may answer it.

The authenticated identity and roles LangGraph's auth puts on a served run
(:func:`authenticated_identity`, :func:`authenticated_roles`), an app's own rule for who may
answer (:data:`AuthorizeOperator`), and the one check that binds an answer to its operator
(:func:`answering_operator`): the authenticated identity when there is one (an answer naming
someone else is refused), else the answer's own ``operator``, else the ``operator`` the resume's
config names (``config={"configurable": {"operator": "ana"}}``); with none, the answer is
refused, never recorded under a made-up name. Not what an answer may say
(:mod:`algenta_graph.nodes.answers`) nor what the operator is asked
(:mod:`algenta_graph.nodes.questions`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

__all__ = [
    "NO_OPERATOR",
    "OPERATOR_KEY",
    "AuthorizeOperator",
    "answering_operator",
    "authenticated_identity",
    "authenticated_roles",
    "configured_operator",
]

AuthorizeOperator = Callable[[str, str, RunnableConfig], bool]
"""``(operator identity, gate, config) -> allowed``: an app's own rule for who may answer."""


def _user(config: RunnableConfig | None) -> Any:
    return ((config or {}).get("configurable") or {}).get("langgraph_auth_user")


def _field(user: Any, name: str, default: Any = None) -> Any:
    if isinstance(user, Mapping):
        return user.get(name, default)
    return getattr(user, name, default)


def authenticated_identity(config: RunnableConfig | None) -> str | None:
    """The identity LangGraph's auth put on this run, if the graph is served with auth."""
    user = _user(config)
    if user is None:
        return None
    identity = _field(user, "identity")
    return str(identity) if identity and _field(user, "is_authenticated", True) else None


def authenticated_roles(config: RunnableConfig | None) -> list[str]:
    """The roles (permissions) of the authenticated user of this run (``[]`` without auth)."""
    if authenticated_identity(config) is None:
        return []
    permissions = _field(_user(config), "permissions")
    if permissions is None:
        permissions = ((config or {}).get("configurable") or {}).get("langgraph_auth_permissions")
    return [str(p) for p in permissions or () if isinstance(p, str)]


OPERATOR_KEY = "operator"
"""The ``configurable`` key naming who answers, for a graph run without auth."""

NO_OPERATOR = (
    "operator: who decides is required: name the operator in the answer "
    "({'decisions': [...], 'operator': 'ana'}) or in the resume's config "
    "(config={'configurable': {'operator': 'ana'}}); served with auth, it is the "
    "authenticated identity"
)


def configured_operator(config: RunnableConfig | None) -> str | None:
    """The operator the run's config names (``configurable.operator``), if any."""
    named = ((config or {}).get("configurable") or {}).get(OPERATOR_KEY)
    return named.strip() if isinstance(named, str) and named.strip() else None


def answering_operator(
    named: str | None,
    gate: str,
    config: RunnableConfig,
    authorize: AuthorizeOperator | None = None,
) -> str:
    """Who answers an escalation of ``gate``.

    The authenticated identity, else ``named``, else the config's ``operator``
    (:func:`configured_operator`).

    Args:
        named: the ``operator`` the answer names (``None``: it names none).
        gate: the escalated gate.
        config: the answering run's config (its authenticated user, when served with auth).
        authorize: an app's own rule for who may answer (none: anyone named or authenticated).

    Returns:
        The operator's identity.

    Raises:
        ValueError: the answer names someone other than the authenticated identity, names no
            one without auth (nor does the config), or names an operator ``authorize`` refuses
            (the answer is refused before it is saved).
    """
    identity = authenticated_identity(config)
    configured = configured_operator(config)
    for given in (named, configured):
        if identity is not None and given is not None and given != identity:
            raise ValueError(
                f"operator {given!r} contradicts the authenticated identity {identity!r}"
            )
    operator = identity or named or configured
    if not operator:
        raise ValueError(NO_OPERATOR)
    if authorize is not None and not authorize(operator, gate, config):
        raise ValueError(f"operator {operator!r} may not answer a {gate} escalation")
    return operator
