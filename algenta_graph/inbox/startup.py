"""Whether the operator inbox may start: the refusal to serve it without authentication.

Without ``ALGENTA_AUTH_FILE`` or an identity provider (``ALGENTA_OIDC_ISSUER``) anyone who
reaches the inbox could answer escalations under any name, so it refuses to start unless
``ALGENTA_INBOX_ALLOW_OPEN=1`` says it is served open on purpose (then it warns at start-up).
The server itself still starts; the inbox answers every request with 503 and the same message
(:mod:`algenta_graph.inbox.app`). This module reads the environment only: it neither signs
anyone in nor renders a page.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from algenta_graph.errors import InboxConfigError
from algenta_graph.inbox.rendering import PREFIX
from algenta_graph.serving.oidc_settings import ENV_ISSUER
from algenta_graph.serving.tokens import ENV_AUTH_FILE, auth_configured

__all__ = ["ENV_ALLOW_OPEN", "check_startup", "open_allowed", "startup_problem"]

ENV_ALLOW_OPEN = "ALGENTA_INBOX_ALLOW_OPEN"
"""Set to ``1`` to serve the inbox on a server without authentication (open)."""


def open_allowed(environ: Any = None) -> bool:
    """Whether ``ALGENTA_INBOX_ALLOW_OPEN`` allows serving the inbox without auth.

    >>> open_allowed({"ALGENTA_INBOX_ALLOW_OPEN": "1"}), open_allowed({})
    (True, False)
    """
    env = os.environ if environ is None else environ
    return str(env.get(ENV_ALLOW_OPEN, "")).strip().lower() in ("1", "true", "yes")


def startup_problem(environ: Any = None) -> str | None:
    """Why the inbox must not start (``None``: it may)."""
    env = os.environ if environ is None else environ
    if auth_configured(env) or open_allowed(env):
        return None
    return (
        f"algenta-graph inbox: neither {ENV_AUTH_FILE} nor {ENV_ISSUER} is set, so anyone who "
        f"reaches {PREFIX} could answer escalations under any name: the inbox refuses to start. "
        f"Set {ENV_AUTH_FILE} to the server's tokens file or {ENV_ISSUER} to its identity "
        f"provider, or set {ENV_ALLOW_OPEN}=1 to serve it open on purpose."
    )


def check_startup(environ: Any = None) -> None:
    """Refuse to start without an auth file unless open serving is allowed (and say so).

    Raises:
        InboxConfigError: naming both ways out.
    """
    problem = startup_problem(environ)
    if problem is not None:
        print(problem, file=sys.stderr, flush=True)
        raise InboxConfigError(problem)
    if not auth_configured(environ):
        print(
            f"algenta-graph inbox: WARNING: served OPEN ({ENV_ALLOW_OPEN}=1, no {ENV_AUTH_FILE} "
            f"nor {ENV_ISSUER}): anyone who reaches it answers escalations under any name",
            file=sys.stderr,
            flush=True,
        )
