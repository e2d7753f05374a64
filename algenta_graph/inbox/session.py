"""The inbox's session: a signed, expiring cookie, and a CSRF token bound to it.

An operator signs in once with the token of the server's tokens file (``ALGENTA_AUTH_FILE``);
the session cookie carries that token, so every page the inbox renders calls the API **as that
operator** (the server's own auth decides what it may see and do; revoking the token in the
file ends the session at the next request). The cookie is signed with :mod:`itsdangerous` (what
Starlette's ``SessionMiddleware`` uses), timestamped and refused past its age
(``ALGENTA_INBOX_SESSION_SECONDS``, default 8 hours), ``HttpOnly`` and ``SameSite=Strict``
(``Secure`` when the inbox is reached over HTTPS). It is signed, not encrypted: it holds what the
operator typed, in a cookie scripts cannot read.

The signing key is ``ALGENTA_INBOX_SECRET``; without it each process draws its own at start (so
sessions end with the process, and several workers need the variable set to share sessions).

Every form carries the session's CSRF token (:meth:`Session.csrf`), compared in constant time;
the sign-in form, before any session exists, carries the token of a short-lived signed cookie of
its own (:func:`login_csrf`).
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

__all__ = [
    "COOKIE",
    "DEFAULT_SESSION_SECONDS",
    "ENV_SECRET",
    "ENV_SESSION_SECONDS",
    "LOGIN_COOKIE",
    "Session",
    "SessionSigner",
    "same_token",
]

ENV_SECRET = "ALGENTA_INBOX_SECRET"
"""The session signing key (default: a random key per process)."""
ENV_SESSION_SECONDS = "ALGENTA_INBOX_SESSION_SECONDS"
"""How long a session lasts, in seconds (default :data:`DEFAULT_SESSION_SECONDS`)."""
DEFAULT_SESSION_SECONDS = 8 * 3600
COOKIE = "algenta_inbox"
"""The session cookie's name."""
LOGIN_COOKIE = "algenta_inbox_login"
"""The sign-in form's CSRF cookie (before a session exists)."""
LOGIN_SECONDS = 3600
_PROCESS_SECRET = secrets.token_hex(32)


@dataclass(frozen=True)
class Session:
    """One signed-in operator: the token presented, who it is, and the form token."""

    token: str
    """The bearer token (empty on an open server)."""
    identity: str
    """The authenticated identity."""
    roles: tuple[str, ...]
    """Its roles, as the tokens file gives them."""
    csrf: str
    """The CSRF token every form of this session carries."""


def same_token(given: Any, expected: str) -> bool:
    """Whether a submitted form token is ``expected`` (constant time; any other type: no).

    >>> same_token("abc", "abc"), same_token("abd", "abc"), same_token(None, "abc")
    (True, False, False)
    """
    return isinstance(given, str) and hmac.compare_digest(given.encode(), expected.encode())


def session_seconds(environ: Any = None) -> int:
    """The session's lifetime from ``ALGENTA_INBOX_SESSION_SECONDS``.

    Raises:
        ValueError: the variable is not a positive whole number of seconds.

    >>> session_seconds({"ALGENTA_INBOX_SESSION_SECONDS": "60"})
    60
    """
    env = os.environ if environ is None else environ
    raw = str(env.get(ENV_SESSION_SECONDS) or "").strip()
    if not raw:
        return DEFAULT_SESSION_SECONDS
    if not raw.isdigit() or int(raw) <= 0:
        raise ValueError(f"{ENV_SESSION_SECONDS}={raw!r}: expected a positive number of seconds")
    return int(raw)


class SessionSigner:
    """Signs and reads the session cookie and the sign-in form's cookie.

    Args:
        secret: the signing key (default ``ALGENTA_INBOX_SECRET``, else this process's own).
        max_age: seconds a session lasts (default ``ALGENTA_INBOX_SESSION_SECONDS``).
    """

    def __init__(self, secret: str | None = None, *, max_age: int | None = None) -> None:
        key = secret or os.environ.get(ENV_SECRET) or _PROCESS_SECRET
        self.max_age = max_age if max_age is not None else session_seconds()
        self._session = URLSafeTimedSerializer(key, salt="algenta-inbox-session")
        self._login = URLSafeTimedSerializer(key, salt="algenta-inbox-login")

    def new(self, token: str, identity: str, roles: tuple[str, ...]) -> Session:
        """A fresh session (a new CSRF token) for a signed-in operator."""
        return Session(token, identity, tuple(roles), secrets.token_urlsafe(32))

    def dumps(self, session: Session) -> str:
        """The cookie's value for ``session``."""
        body = {"t": session.token, "i": session.identity, "r": list(session.roles)}
        return self._session.dumps({**body, "c": session.csrf})

    def loads(self, cookie: str | None) -> Session | None:
        """The session a cookie holds; ``None`` if absent, forged, malformed or expired."""
        if not cookie:
            return None
        try:
            body = self._session.loads(cookie, max_age=self.max_age)
        except (SignatureExpired, BadSignature):
            return None
        try:
            roles = tuple(str(r) for r in body["r"])
            return Session(str(body["t"]), str(body["i"]), roles, str(body["c"]))
        except (KeyError, TypeError):
            return None

    def login_csrf(self) -> tuple[str, str]:
        """``(form token, cookie value)`` of a sign-in form."""
        token = secrets.token_urlsafe(32)
        return token, self._login.dumps(token)

    def login_csrf_ok(self, cookie: str | None, given: Any) -> bool:
        """Whether a sign-in form's token matches its (signed, unexpired) cookie."""
        if not cookie:
            return False
        try:
            expected = self._login.loads(cookie, max_age=LOGIN_SECONDS)
        except (SignatureExpired, BadSignature):
            return False
        return isinstance(expected, str) and same_token(given, expected)
