"""The inbox's form tokens (CSRF): the session's, and the sign-in form's before any session exists.

Every form of a signed-in operator carries its session's token (kept in the session record on
the server, :mod:`algenta_graph.inbox.session`), compared in constant time (:func:`same_token`).
The sign-in form, shown before any session exists, carries the token of a short-lived cookie of
its own, signed with :mod:`itsdangerous` (:class:`LoginForms`): it holds a random token, nothing
of the operator's. The signing key is ``ALGENTA_INBOX_SECRET``; without it each process draws its
own at start, so a sign-in form shown by one worker and sent to another is refused ("sign in
again") unless every worker is given the same key.
"""

from __future__ import annotations

import hmac
import os
import secrets
from typing import Any

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

__all__ = ["ENV_SECRET", "LOGIN_COOKIE", "LOGIN_SECONDS", "LoginForms", "same_token"]

ENV_SECRET = "ALGENTA_INBOX_SECRET"
"""The key that signs the sign-in form's cookie (default: a random key per process)."""
LOGIN_COOKIE = "algenta_inbox_login"
"""The sign-in form's CSRF cookie (before a session exists)."""
LOGIN_SECONDS = 3600
"""How long a sign-in form may be sent after it was shown."""
_PROCESS_SECRET = secrets.token_hex(32)


def same_token(given: Any, expected: str) -> bool:
    """Whether a submitted form token is ``expected`` (constant time; any other type: no).

    >>> same_token("abc", "abc"), same_token("abd", "abc"), same_token(None, "abc")
    (True, False, False)
    """
    return isinstance(given, str) and hmac.compare_digest(given.encode(), expected.encode())


class LoginForms:
    """Issues and checks the sign-in form's token and its signed cookie.

    Args:
        secret: the signing key (default ``ALGENTA_INBOX_SECRET``, else this process's own).
    """

    def __init__(self, secret: str | None = None) -> None:
        self.key = secret or os.environ.get(ENV_SECRET) or _PROCESS_SECRET
        """The signing key (what else the inbox signs before a session exists uses it too)."""
        self._login = URLSafeTimedSerializer(self.key, salt="algenta-inbox-login")

    def issue(self) -> tuple[str, str]:
        """``(form token, cookie value)`` of a sign-in form."""
        token = secrets.token_urlsafe(32)
        return token, self._login.dumps(token)

    def accepts(self, cookie: str | None, given: Any) -> bool:
        """Whether a sign-in form's token matches its (signed, unexpired) cookie."""
        if not cookie:
            return False
        try:
            expected = self._login.loads(cookie, max_age=LOGIN_SECONDS)
        except (SignatureExpired, BadSignature):
            return False
        return isinstance(expected, str) and same_token(given, expected)
