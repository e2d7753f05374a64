"""The tokens file of the served graph: hashed bearer tokens and the principals they name.

``ALGENTA_AUTH_FILE`` names a JSON file ``{"tokens": {"<sha256 hex>": {"identity": ..., "roles":
[...]}}}`` (see :mod:`algenta_graph.serving.auth` for what each role may do): parsed and checked
here (:func:`load_auth_file`), re-read when it changes (:data:`TOKENS`), refused whole when it is
malformed (fail closed). The roles themselves, and who may answer an escalation of a gate, are
:mod:`algenta_graph.serving.roles` (re-exported here); the identity provider's JWTs, accepted
next to this file, are :mod:`algenta_graph.serving.jwt_bearer`. Whether the server requires
authentication at all (:func:`auth_configured`: this file, the identity provider, or both) and
the check at start-up (:func:`startup_check`) are here too.
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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig

from algenta_graph.errors import AuthFileError
from algenta_graph.serving.oidc_settings import ENV_ISSUER, oidc_configured, oidc_settings
from algenta_graph.serving.roles import (
    AGENT,
    AUDITOR,
    GATE_ROLES,
    OPEN_IDENTITY,
    OPERATOR,
    ROLES,
    Principal,
    is_operator,
    operator_gates,
    roles_of,
    valid_role,
)

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
OWNER_KEY = "algenta_owner"
"""Thread metadata key holding the identity that created the thread (set by the server)."""

_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_log = logging.getLogger("algenta_graph.serving.auth")  # one logger for the served auth


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

    @property
    def identities(self) -> frozenset[str]:
        """Every identity the table names (the identity provider may name none of them)."""
        return frozenset(principal.identity for _, principal in self._entries)

    def lookup(self, token: str) -> Principal | None:
        """The principal of ``token``, or ``None``; constant time in the token's content."""
        digest = token_digest(token).encode("ascii")
        found: Principal | None = None
        for known, principal in self._entries:
            # no early exit: every entry is compared, whatever matches
            if hmac.compare_digest(digest, known.encode("ascii")):
                found = principal
        return found


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
        raise bad(
            "tokens",
            "no tokens: every request would be refused; add one: "
            "algenta-graph tokens add NAME --role operator",
        )
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
            if not valid_role(role):
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
        """The table for ``ALGENTA_AUTH_FILE``, or ``None`` when no tokens file is set.

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


def auth_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the server requires authentication: a tokens file, an identity provider, or both.

    Any ``ALGENTA_OIDC_*`` variable counts, even a malformed one (then every request is refused
    until it is fixed): a mistyped identity provider never leaves the server open.

    >>> auth_configured({"ALGENTA_AUTH_FILE": "auth.json"}), auth_configured({})
    (True, False)
    >>> auth_configured({"ALGENTA_OIDC_AUDIENCE": "api"})
    True
    """
    env = os.environ if environ is None else environ
    return bool(env.get(ENV_AUTH_FILE)) or oidc_configured(env)


_STARTED = False


def startup_check() -> None:
    """Once per process: refuse to start on bad auth settings, or warn loudly that it runs open.

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
            f"algenta-graph: {ENV_AUTH_FILE} is not set: the server runs OPEN, with no identity\n"
            f"provider either ({ENV_ISSUER} is not set). Anyone who can reach this port can\n"
            "start runs, read every thread and answer escalations under any name. Set\n"
            f"{ENV_AUTH_FILE} to a token file, or {ENV_ISSUER} (and the other\n"
            "ALGENTA_OIDC_* settings) to an identity provider.\n"
            f"{'!' * 78}"
        )
        print(message, file=sys.stderr, flush=True)
        _log.warning(
            "%s and %s are not set: the server runs open, without authentication",
            ENV_AUTH_FILE,
            ENV_ISSUER,
        )
        return
    # a malformed tokens file or identity provider: the error names it, the server does not start
    table = TOKENS.current()
    provider = oidc_settings()
    if table is not None:
        _log.info(
            "algenta-graph: authentication required: %d token(s) from %s",
            len(table),
            os.environ[ENV_AUTH_FILE],
        )
    if provider is not None:
        _log.info(
            "algenta-graph: authentication required: JWTs of %s for %s, roles from %r",
            provider.issuer,
            ", ".join(provider.audiences),
            provider.roles_claim,
        )


# ---------------------------------------------------------------------------------------------
# who may answer on the served graph


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
    ``operator`` or ``operator:<gate>``. When the server runs open (neither a tokens file nor an
    identity provider) anyone may answer, as without auth. With auth configured and no
    authenticated user on the run, nobody may (fail closed).
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
