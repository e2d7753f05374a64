"""The tokens file of the served graph and the roles it grants.

``ALGENTA_AUTH_FILE`` names a JSON file ``{"tokens": {"<sha256 hex>": {"identity": ..., "roles":
[...]}}}`` (see :mod:`algenta_graph.serving.auth` for what each role may do): parsed and checked
here (:func:`load_auth_file`), re-read when it changes (:data:`TOKENS`), refused whole when it is
malformed (fail closed). The roles (``agent``, ``operator``, ``operator:<gate>``, ``auditor``)
and who may answer an escalation of a gate (:func:`is_operator`,
:func:`served_authorize_operator`) are decided here too, so the LangGraph auth handlers and the
operator inbox read one table with one rule.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig

from algenta_graph.errors import AuthFileError
from algenta_graph.governance.gates import GATE_NAMES

__all__ = [
    "AGENT",
    "AUDITOR",
    "ENV_AUTH_FILE",
    "GATE_ROLES",
    "OPEN_IDENTITY",
    "OPERATOR",
    "OWNER_KEY",
    "ROLES",
    "TOKENS",
    "Principal",
    "TokenSource",
    "TokenTable",
    "auth_configured",
    "is_operator",
    "load_auth_file",
    "operator_gates",
    "parse_auth_file",
    "roles_of",
    "served_authorize_operator",
    "startup_check",
    "token_digest",
]

ENV_AUTH_FILE = "ALGENTA_AUTH_FILE"
AGENT = "agent"
OPERATOR = "operator"
AUDITOR = "auditor"
ROLES: tuple[str, ...] = (AGENT, OPERATOR, AUDITOR)
GATE_ROLES: tuple[str, ...] = tuple(f"{OPERATOR}:{gate}" for gate in GATE_NAMES)
OWNER_KEY = "algenta_owner"
"""Thread metadata key holding the identity that created the thread (set by the server)."""
OPEN_IDENTITY = "anonymous"
"""The (unauthenticated) identity of every request when the server runs open."""

_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_log = logging.getLogger("algenta_graph.serving.auth")  # one logger for the served auth


@dataclass(frozen=True)
class Principal:
    """Who a token is: an identity and its roles."""

    identity: str
    roles: tuple[str, ...]


def token_digest(token: str) -> str:
    """The lowercase hex SHA-256 of a bearer token, as the auth file stores it.

    >>> token_digest("s3cret")[:16]
    '1ec1c26b50d5d3c5'
    """
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class TokenTable:
    """Token digests to principals; :meth:`lookup` compares against every entry.

    Args:
        entries: ``{token digest (:func:`token_digest`): principal}``.
    """

    def __init__(self, entries: Mapping[str, Principal]) -> None:
        self._entries = tuple(entries.items())

    def __len__(self) -> int:
        """How many tokens the table knows."""
        return len(self._entries)

    def lookup(self, token: str) -> Principal | None:
        """The principal of ``token``, or ``None``; constant time in the token's content."""
        digest = token_digest(token).encode("ascii")
        found: Principal | None = None
        for known, principal in self._entries:
            # no early exit: every entry is compared, whatever matches
            if hmac.compare_digest(digest, known.encode("ascii")):
                found = principal
        return found


def _valid_role(role: Any) -> bool:
    return isinstance(role, str) and (role in ROLES or role in GATE_ROLES)


def parse_auth_file(raw: Any, source: str) -> TokenTable:
    """Validate the decoded auth file; :class:`AuthFileError` names ``source`` and the problem."""

    def bad(where: str, problem: str) -> AuthFileError:
        return AuthFileError(f"{ENV_AUTH_FILE} file {source}: {where}: {problem}")

    shape = '{"tokens": {"<sha256 hex>": {"identity": "...", "roles": ["agent"]}}}'
    if not isinstance(raw, Mapping):
        raise bad("top level", f"expected an object of the shape {shape}")
    extra = sorted(set(raw) - {"tokens"})
    if extra:
        raise bad("top level", f"unknown key(s) {extra}; expected only 'tokens'")
    tokens = raw.get("tokens")
    if not isinstance(tokens, Mapping):
        raise bad("tokens", f"expected an object of the shape {shape}")
    if not tokens:
        raise bad("tokens", "no tokens: every request would be refused")
    valid = ", ".join((*ROLES, *GATE_ROLES))
    entries: dict[str, Principal] = {}
    for digest, entry in tokens.items():
        where = f"tokens[{str(digest)[:12]!r}...]"
        if not isinstance(digest, str) or not _DIGEST.match(digest):
            raise bad(
                where,
                "a key must be the lowercase hex SHA-256 of a token (64 characters 0-9a-f), "
                "never the token itself",
            )
        if not isinstance(entry, Mapping):
            raise bad(where, 'expected {"identity": "...", "roles": [...]}')
        extra = sorted(set(entry) - {"identity", "roles"})
        if extra:
            raise bad(where, f"unknown key(s) {extra}; expected 'identity' and 'roles'")
        identity = entry.get("identity")
        if not isinstance(identity, str) or not identity.strip() or identity != identity.strip():
            raise bad(f"{where}.identity", "must be a non-blank string without outer spaces")
        if identity == OPEN_IDENTITY:
            raise bad(f"{where}.identity", f"{OPEN_IDENTITY!r} is reserved for the open server")
        roles = entry.get("roles")
        if not isinstance(roles, list) or not roles:
            raise bad(f"{where}.roles", f"must be a non-empty list of roles ({valid})")
        for i, role in enumerate(roles):
            if not _valid_role(role):
                raise bad(f"{where}.roles[{i}]", f"unknown role {role!r}; valid roles: {valid}")
        entries[digest] = Principal(identity, tuple(dict.fromkeys(roles)))
    return TokenTable(entries)


def load_auth_file(path: str | os.PathLike[str]) -> TokenTable:
    """Read and validate an auth file; :class:`AuthFileError` names the file and the problem."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise AuthFileError(
            f"{ENV_AUTH_FILE} file {source}: cannot be read: {exc.strerror or exc}"
        ) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AuthFileError(
            f"{ENV_AUTH_FILE} file {source}: not JSON: {exc.msg} at line {exc.lineno} "
            f"column {exc.colno}"
        ) from None
    return parse_auth_file(raw, source)


# ---------------------------------------------------------------------------------------------
# the current table: read at start-up, re-read when the file changes


class TokenSource:
    """The table ``ALGENTA_AUTH_FILE`` names, re-read when the file changes (fail closed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[str, int, int] | None = None
        self._table: TokenTable | None = None
        self._error: str | None = None

    def current(self) -> TokenTable | None:
        """The table for ``ALGENTA_AUTH_FILE``, or ``None`` when the server runs open.

        Raises :class:`AuthFileError` while the named file is missing or malformed.
        """
        path = os.environ.get(ENV_AUTH_FILE) or None
        if path is None:
            return None
        try:
            st = os.stat(path)
            key = (path, st.st_mtime_ns, st.st_size)
        except OSError:
            key = (path, -1, -1)
        with self._lock:
            if key != self._key:
                self._key = key
                try:
                    self._table, self._error = load_auth_file(path), None
                except AuthFileError as exc:
                    self._table, self._error = None, str(exc)
                    _log.error("%s; every request is refused until it is fixed", exc)
            if self._error is not None:
                raise AuthFileError(self._error)
            return self._table


TOKENS = TokenSource()
"""The process's token table, re-read when the file changes."""


def auth_configured() -> bool:
    """Whether the server runs with auth (``ALGENTA_AUTH_FILE`` is set)."""
    return bool(os.environ.get(ENV_AUTH_FILE))


_STARTED = False


def startup_check() -> None:
    """Once per process: refuse to start on a bad auth file, or warn loudly that it runs open.

    Runs when a LangGraph server loads this module (``langgraph.json`` ``auth.path``); a plain
    import (the CLI, the library, tests) does not print anything.
    """
    global _STARTED
    if _STARTED:
        return
    _STARTED = True
    if not auth_configured():
        message = (
            f"\n{'!' * 78}\n"
            f"algenta-graph: {ENV_AUTH_FILE} is not set: the server runs OPEN. Anyone who can\n"
            "reach this port can start runs, read every thread and answer escalations under\n"
            f"any name. Set {ENV_AUTH_FILE} to a token file to require authentication.\n"
            f"{'!' * 78}"
        )
        print(message, file=sys.stderr, flush=True)
        _log.warning("%s is not set: the server runs open, without authentication", ENV_AUTH_FILE)
        return
    table = TOKENS.current()  # AuthFileError naming the file: the server does not start
    _log.info(
        "algenta-graph: authentication required: %d token(s) from %s",
        len(table or ()),
        os.environ[ENV_AUTH_FILE],
    )


# ---------------------------------------------------------------------------------------------
# roles


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


def _user_field(user: Any, name: str, default: Any = None) -> Any:
    if isinstance(user, Mapping):
        return user.get(name, default)
    try:
        return user[name]
    except (KeyError, TypeError, IndexError):
        return getattr(user, name, default)


def served_authorize_operator(identity: str, gate: str, config: RunnableConfig) -> bool:
    """The served graph's rule for who may answer an escalation of ``gate``.

    Reads the authenticated user LangGraph put in ``config["configurable"]
    ["langgraph_auth_user"]``: allowed when its identity is ``identity`` and its roles include
    ``operator`` or ``operator:<gate>``. When the server runs open (no ``ALGENTA_AUTH_FILE``)
    anyone may answer, as without auth. With auth configured and no authenticated user on the
    run, nobody may (fail closed).
    """
    configurable = (config or {}).get("configurable") or {}
    user = configurable.get("langgraph_auth_user")
    if not auth_configured():
        return True
    if user is None or not _user_field(user, "is_authenticated", True):
        return False
    if _user_field(user, "identity") != identity:
        return False
    permissions = _user_field(user, "permissions")
    if permissions is None:
        permissions = configurable.get("langgraph_auth_permissions")
    return is_operator(roles_of(permissions), gate)


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
