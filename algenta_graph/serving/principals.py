"""Who a request to the served graph is, and the refusal every auth handler raises.

:func:`principal_of` reads an authenticated request's identity and roles off LangGraph's auth
context (``None`` when the server runs open), and :func:`forbidden` is the HTTP 403 with the
reason shown to the client. Shared by the resource handlers (:mod:`algenta_graph.serving.auth`)
and the store's rule (:mod:`algenta_graph.serving.store_auth`), which register on one ``Auth``.
"""

from __future__ import annotations

from langgraph_sdk import Auth

from algenta_graph.serving.roles import AGENT, AUDITOR, GATE_ROLES, OPERATOR, roles_of
from algenta_graph.serving.tokens import auth_configured

__all__ = ["forbidden", "principal_of"]


def forbidden(detail: str) -> Auth.exceptions.HTTPException:
    """The HTTP 403 a handler raises, with ``detail`` shown to the client."""
    return Auth.exceptions.HTTPException(status_code=403, detail=detail)


def principal_of(ctx: Auth.types.AuthContext) -> tuple[str, frozenset[str]] | None:
    """``(identity, roles)`` of an authenticated request, ``None`` when the server runs open."""
    user = ctx.user
    if not auth_configured() and not getattr(user, "is_authenticated", True):
        return None
    roles = roles_of(ctx.permissions)
    if not getattr(user, "is_authenticated", True) or not roles & {
        AGENT,
        AUDITOR,
        *GATE_ROLES,
        OPERATOR,
    }:
        raise forbidden("not an authenticated algenta-graph user")
    return str(user.identity), roles
