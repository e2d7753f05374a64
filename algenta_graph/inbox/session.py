"""The inbox's sessions: kept on the server, named by an opaque random id in the browser's cookie.

An operator signs in once with a token of the server's tokens file (``ALGENTA_AUTH_FILE``) or of
its identity provider (a pasted JWT, or the provider's sign-in), and every page then calls the
API **as that operator**, with that token. The browser holds only a
random session id (the cookie :data:`COOKIE`: ``HttpOnly``, ``SameSite=Strict``, ``Secure`` when
the inbox is reached over HTTPS); the rest is the session record, kept by :class:`SessionStore`
in the LangGraph server's own store (the store of its ``/store`` API): the one store every
worker of a deployment shares (PostgreSQL under the LangGraph server, ``langgraph up`` and the
Platform; the dev server's in-memory store, persisted in ``.langgraph_api/``, under
``langgraph dev``, which is one process). The records live under :data:`NAMESPACE`, inside the
graph's own namespace, which no API request may read or write
(:mod:`algenta_graph.serving.store_auth`).

- **The cookie is not a credential.** The record is found by a digest of the id, and it holds the
  operator's token sealed (Fernet) with a key derived from the id: the store alone gives no
  token and no cookie; the cookie alone gives nothing once the record is gone.
- **Signing out deletes the record**, so the cookie, replayed from anywhere, is refused.
- **A session ends with its age**: :data:`ENV_SESSION_SECONDS` after sign-in (absolute, default
  8 hours), and :data:`DEFAULT_IDLE_SECONDS` after the last page the operator opened (idle,
  30 minutes; the queue's own refresh every few seconds is not the operator's doing and does
  not count), OWASP ASVS's limits for a session (12 hours, 30 minutes idle) or tighter.
- **A session ends with its token**: every page re-reads the token in the tokens file
  (:mod:`algenta_graph.inbox.signin`); a revoked token, or one now naming someone else, deletes
  the record (bringing the token back does not bring the session back). A session of the
  identity provider's JWT ends at the token's ``exp`` too (kept in the record: the session ends
  then whatever clock skew the API allows); signing in again, with a fresh token, is a new
  session.

Expired records are deleted when met, and swept at each sign-in.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from langgraph.store.base import BaseStore

from algenta_graph._langgraph import server_store
from algenta_graph.errors import InboxConfigError
from algenta_graph.serving.store_auth import GRAPH_NAMESPACE

__all__ = [
    "COOKIE",
    "DEFAULT_IDLE_SECONDS",
    "DEFAULT_SESSION_SECONDS",
    "ENV_SESSION_SECONDS",
    "NAMESPACE",
    "Session",
    "SessionStore",
    "session_seconds",
]

ENV_SESSION_SECONDS = "ALGENTA_INBOX_SESSION_SECONDS"
"""How long a session lasts after sign-in, in seconds (default :data:`DEFAULT_SESSION_SECONDS`)."""
DEFAULT_SESSION_SECONDS = 8 * 3600
DEFAULT_IDLE_SECONDS = 30 * 60
"""How long a session lasts after the last page its operator opened."""
COOKIE = "algenta_inbox"
"""The session cookie's name (its value: the session id, nothing else)."""
NAMESPACE: tuple[str, ...] = (*GRAPH_NAMESPACE, "inbox_sessions")
"""Where the session records live in the server's store."""
_SEEN = ".seen"
"""The suffix of a record's last-activity item (kept apart: see :meth:`SessionStore.open`)."""
_ID_BYTES = 32
_SWEEP_LIMIT = 10_000


@dataclass(frozen=True)
class Session:
    """One signed-in operator: the token the inbox calls the API with, who it is, the form token."""

    token: str = field(repr=False)
    """The bearer token (empty on an open server); never in the cookie."""
    identity: str
    """The authenticated identity."""
    roles: tuple[str, ...]
    """Its roles, as the tokens file gives them."""
    csrf: str = field(repr=False)
    """The CSRF token every form of this session carries."""
    key: str = field(default="", repr=False)
    """The record's key in the store (a digest of the session id)."""
    expires_at: float | None = None
    """When the token stops being accepted (a JWT's ``exp``), and the session with it."""


def session_seconds(environ: Any = None) -> int:
    """The session's absolute lifetime from ``ALGENTA_INBOX_SESSION_SECONDS``.

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


def _record_key(session_id: str) -> str:
    """The store key of a session id's record: a digest (the store never holds a cookie)."""
    return hashlib.sha256(b"algenta-inbox-session:" + session_id.encode()).hexdigest()


def _sealer(session_id: str) -> Fernet:
    """The Fernet key a session's token is sealed with, derived from its id alone."""
    key = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"algenta-inbox-session-token"
    ).derive(session_id.encode())
    return Fernet(base64.urlsafe_b64encode(key))


def _plausible_id(value: str | None) -> TypeGuard[str]:
    return bool(value) and len(value or "") <= 2 * _ID_BYTES and (value or "").isascii()


class SessionStore:
    """The inbox's session records, in a LangGraph store.

    Args:
        store: where the records live (default: the store of the LangGraph server this process
            serves; outside one, signing in is refused with :class:`InboxConfigError`).
        max_age: seconds a session lasts after sign-in (default ``ALGENTA_INBOX_SESSION_SECONDS``).
        idle: seconds a session lasts after the last page its operator opened.
        clock: the time now, in seconds since the epoch.
    """

    def __init__(
        self,
        store: BaseStore | None = None,
        *,
        max_age: int | None = None,
        idle: int = DEFAULT_IDLE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._given = store
        self.max_age = max_age if max_age is not None else session_seconds()
        self.idle = idle
        self._clock = clock

    async def _store(self) -> BaseStore:
        if self._given is not None:
            return self._given
        try:
            found = await server_store()
        except LookupError as exc:
            raise InboxConfigError(f"the inbox cannot keep sessions: {exc}") from None
        if found is None:
            raise InboxConfigError(
                "the inbox keeps its sessions in the LangGraph server's store, and this process "
                "serves none: serve the inbox with the graph (langgraph.json http.app), or give "
                "create_app(sessions=SessionStore(store)) a store"
            )
        return found  # type: ignore[no-any-return]

    def _ended(self, record: Mapping[str, Any], seen: Any, now: float) -> bool:
        """Whether a session is past its age or its token's (``seen``: its last activity)."""
        created = record.get("created")
        if not isinstance(created, int | float) or now >= created + self.max_age:
            return True
        expires = record.get("expires")
        if expires is not None and (not isinstance(expires, int | float) or now >= expires):
            return True
        last = seen if isinstance(seen, int | float) else created
        return now >= last + self.idle

    def seconds_left(self, expires_at: float | None) -> int:
        """How long a session created now lasts at most (its cookie's ``max_age``)."""
        if expires_at is None:
            return self.max_age
        return max(0, min(self.max_age, int(expires_at - self._clock())))

    async def create(
        self,
        token: str,
        identity: str,
        roles: tuple[str, ...],
        expires_at: float | None = None,
    ) -> tuple[str, Session]:
        """A new session: ``(the id the cookie carries, the session)``.

        Args:
            token: the bearer token the inbox calls the API with (sealed in the record).
            identity: who it is.
            roles: its roles now.
            expires_at: when the token expires (a JWT's ``exp``): the session ends then.
        """
        store = await self._store()
        now = self._clock()
        await self._sweep(store, now)
        session_id = secrets.token_urlsafe(_ID_BYTES)
        key = _record_key(session_id)
        csrf = secrets.token_urlsafe(32)
        record = {
            "identity": identity,
            "roles": list(roles),
            "csrf": csrf,
            "token": _sealer(session_id).encrypt(token.encode()).decode("ascii"),
            "created": now,
            "expires": expires_at,
        }
        await store.aput(NAMESPACE, key, record, index=False)
        return session_id, Session(token, identity, tuple(roles), csrf, key, expires_at)

    async def open(self, session_id: str | None, *, touch: bool = True) -> Session | None:
        """The session a cookie names; ``None`` when absent, unknown, ended or expired.

        Args:
            session_id: the cookie's value.
            touch: whether this request is the operator's doing (it restarts the idle clock).

        The record itself is never written after sign-in: the last activity is an item of its
        own, so a request in flight while the operator signs out cannot bring the record back.
        """
        if not _plausible_id(session_id):
            return None
        store = await self._store()
        key = _record_key(session_id)
        item = await store.aget(NAMESPACE, key)
        if item is None:
            return None
        seen_item = await store.aget(NAMESPACE, key + _SEEN)
        seen = seen_item.value.get("at") if seen_item is not None else None
        now = self._clock()
        record = item.value
        try:
            if self._ended(record, seen, now):
                raise LookupError("expired")
            token = _sealer(session_id).decrypt(str(record["token"]).encode()).decode()
            session = Session(
                token,
                str(record["identity"]),
                tuple(str(r) for r in record["roles"]),
                str(record["csrf"]),
                key,
                record.get("expires"),
            )
        except (LookupError, InvalidToken, TypeError, ValueError):
            await self._delete(store, key)
            return None
        if touch:
            await store.aput(NAMESPACE, key + _SEEN, {"at": now}, index=False)
        return session

    async def end(self, session: Session) -> None:
        """Sign out: the record deleted, so its cookie is refused from now on."""
        if session.key:
            await self._delete(await self._store(), session.key)

    @staticmethod
    async def _delete(store: BaseStore, key: str) -> None:
        await store.adelete(NAMESPACE, key)
        await store.adelete(NAMESPACE, key + _SEEN)

    async def _sweep(self, store: BaseStore, now: float) -> None:
        """Delete every ended session's record (and any activity item left without one)."""
        items: dict[str, Any] = {}
        while len(items) < _SWEEP_LIMIT:
            page = await store.asearch(NAMESPACE, limit=500, offset=len(items))
            items.update((i.key, i.value) for i in page)
            if len(page) < 500:
                break
        for key, value in items.items():
            if key.endswith(_SEEN):
                if key[: -len(_SEEN)] not in items:
                    await store.adelete(NAMESPACE, key)
                continue
            if self._ended(value, (items.get(key + _SEEN) or {}).get("at"), now):
                await self._delete(store, key)
