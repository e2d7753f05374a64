"""Authentication and roles for the served graph (LangGraph custom auth).

``langgraph.json`` names :data:`auth` (``"auth": {"path": "algenta_graph.serving.auth:auth"}``),
so every request to ``langgraph dev`` / a LangGraph server passes :func:`authenticate` and then the
resource handlers below. Credentials come from the environment:

- ``ALGENTA_AUTH_FILE`` names a JSON file of exactly this shape (tokens are never stored in
  plaintext, only the lowercase hex SHA-256 of each bearer token)::

      {"tokens": {"<sha256 hex of the token>": {"identity": "ana", "roles": ["operator"]}}}

  Clients send ``Authorization: Bearer <token>``; the digest is compared in constant time against
  every entry. The file is re-read when it changes (revocation without a restart); if it becomes
  unreadable or malformed, every request is refused until it is fixed (fail closed).
- Without ``ALGENTA_AUTH_FILE`` the server runs **open**, as without auth: every request is
  allowed, as an unauthenticated user, and a warning says so at start-up.

Roles (a token may carry several):

- ``agent``: creates threads and runs; reads, searches, streams, updates and runs only the
  threads it created (owner in the thread metadata, :data:`OWNER_KEY`, set by the server).
- ``operator``: an agent that may also answer escalations (a run whose ``command`` is a
  ``resume``) on any thread, and read and search the threads that **wait for an operator** (on
  any gate) plus those it decided, besides its own. ``operator:<gate>`` (e.g.
  ``operator:confidence``) reads the threads waiting on that gate plus those it decided, and may
  answer only that gate's escalations; the API lets any operator role resume, and the graph's
  handler (:func:`served_authorize_operator`) checks the gate. Which gates a thread waits on,
  and who decided, are thread metadata the graph keeps itself
  (:mod:`algenta_graph.governance.visibility`); no client may set them.
- ``auditor``: reads and searches every thread; changes nothing.

For every role: resuming is an operator's act (HTTP 403 otherwise); governed records
(``receipts``, ``denials``, ``operator_decisions``) cannot be written from outside the graph
(``command.update`` is refused here; ``update_state`` is refused by the served graph itself, see
:func:`algenta_graph.governance.record_guard.guard_records`, which also refuses any update as a
governance node and any update while an escalation is pending: only an operator's resume answers
it); runs and state updates from an earlier checkpoint (forks, which would drop later records)
are refused, and so are rollbacks (a cancel with ``action=rollback``,
``multitask_strategy="rollback"``) and deleting threads or runs (each deletes checkpoints);
assistants, crons and the store cannot be changed. A run's ``command`` may only be a ``resume``,
for every caller, open or not: Agent Chat UI's "mark as resolved" (``goto: END``) never
disposes of an escalation.
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
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph_sdk import Auth

from algenta_graph.errors import AuthFileError
from algenta_graph.governance.gates import GATE_NAMES
from algenta_graph.governance.visibility import (
    DECIDED_KEY,
    GRAPH_METADATA_KEYS,
    GRAPH_WRITE_KEY,
    WAITING_KEY,
    is_graph_write,
)
from algenta_graph.state import RECORD_FIELDS

__all__ = [
    "AGENT",
    "AUDITOR",
    "ENV_AUTH_FILE",
    "OPEN_IDENTITY",
    "OPERATOR",
    "OWNER_KEY",
    "ROLES",
    "AuthFileError",
    "Principal",
    "TokenTable",
    "auth",
    "auth_configured",
    "forbidden",
    "is_operator",
    "load_auth_file",
    "operator_gates",
    "principal_of",
    "read_filter",
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
_log = logging.getLogger("algenta_graph.serving.auth")


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


class _Tokens:
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


_TOKENS = _Tokens()


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
    table = _TOKENS.current()  # AuthFileError naming the file: the server does not start
    _log.info(
        "algenta-graph: authentication required: %d token(s) from %s",
        len(table or ()),
        os.environ[ENV_AUTH_FILE],
    )


# ---------------------------------------------------------------------------------------------
# roles


def _roles(permissions: Sequence[str] | None) -> frozenset[str]:
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
    return is_operator(_roles(permissions), gate)


# ---------------------------------------------------------------------------------------------
# the LangGraph Auth object

auth = Auth()


def forbidden(detail: str) -> Auth.exceptions.HTTPException:
    """The HTTP 403 a handler raises, with ``detail`` shown to the client."""
    return Auth.exceptions.HTTPException(status_code=403, detail=detail)


def _unauthorized(detail: str) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(
        status_code=401, detail=detail, headers={"WWW-Authenticate": "Bearer"}
    )


API_KEY_HEADER = "x-api-key"
"""The header ``langgraph_sdk.get_client(api_key=...)`` sends; accepted like a bearer token."""


def _presented_token(authorization: str | None, headers: Mapping[Any, Any] | None) -> str | None:
    """The token a request presents: ``Authorization: Bearer <token>``, else ``x-api-key``."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    for name, value in (headers or {}).items():
        key = name.decode("latin-1") if isinstance(name, bytes) else str(name)
        if key.lower() == API_KEY_HEADER:
            text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
            return text.strip() or None
    return None


@auth.authenticate
async def authenticate(
    authorization: str | None,
    headers: Mapping[Any, Any] | None = None,
    path: str | None = None,
) -> Auth.types.MinimalUserDict:
    """Token -> identity and roles (the roles are the user's ``permissions``).

    The token is ``Authorization: Bearer <token>`` or the ``x-api-key`` header (what
    ``langgraph_sdk.get_client(api_key=...)`` sends). The server's own ``/mcp`` endpoint runs
    the graph, so an auditor (who may run nothing) is refused there with 403 at once.
    """
    try:
        table = _TOKENS.current()
    except AuthFileError:
        raise _unauthorized(
            "authentication is unavailable: the server's auth file is invalid"
        ) from None
    if table is None:
        return {
            "identity": OPEN_IDENTITY,
            "is_authenticated": False,
            "permissions": [],
            "display_name": "open server (no authentication)",
        }
    token = _presented_token(authorization, headers)
    if token is None:
        raise _unauthorized(
            "a token is required (Authorization: Bearer <token>, or the x-api-key header)"
        )
    principal = table.lookup(token)
    if principal is None:
        raise _unauthorized("invalid token")
    if _is_mcp(path) and not _can_write(frozenset(principal.roles)):
        raise forbidden("an auditor cannot run the graph (the /mcp endpoint runs it)")
    return {
        "identity": principal.identity,
        "is_authenticated": True,
        "permissions": list(principal.roles),
        "display_name": principal.identity,
    }


def _is_mcp(path: str | None) -> bool:
    return bool(path) and (path == "/mcp" or str(path).startswith("/mcp/"))


def principal_of(ctx: Auth.types.AuthContext) -> tuple[str, frozenset[str]] | None:
    """``(identity, roles)`` of an authenticated request, ``None`` when the server runs open."""
    user = ctx.user
    if not auth_configured() and not getattr(user, "is_authenticated", True):
        return None
    roles = _roles(ctx.permissions)
    if not getattr(user, "is_authenticated", True) or not roles & {
        AGENT,
        AUDITOR,
        *GATE_ROLES,
        OPERATOR,
    }:
        raise forbidden("not an authenticated algenta-graph user")
    return str(user.identity), roles


def _can_write(roles: frozenset[str]) -> bool:
    return AGENT in roles or is_operator(roles)


def _writer(ctx: Auth.types.AuthContext, doing: str) -> tuple[str, frozenset[str]] | None:
    """:func:`principal_of`, refused (403) unless it may write: an auditor cannot ``doing``."""
    who = principal_of(ctx)
    if who is not None and not _can_write(who[1]):
        raise forbidden(f"an auditor cannot {doing}")
    return who


def _reads_all(roles: frozenset[str]) -> bool:
    return AUDITOR in roles


def _owned(identity: str) -> Auth.types.FilterType:
    return {OWNER_KEY: identity}


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


def read_filter(
    identity: str, roles: Sequence[str] | frozenset[str]
) -> Auth.types.FilterType | None:
    """The thread metadata filter of what ``identity`` with ``roles`` may read (``None``: all).

    An auditor reads every thread; an operator role the threads waiting on its gates plus those
    it decided, besides its own; anyone else only its own.

    >>> read_filter("ana", ["agent"])
    {'algenta_owner': 'ana'}
    >>> read_filter("ana", ["auditor"]) is None
    True
    >>> read_filter("bo", ["operator:confidence"])["$or"]  # doctest: +NORMALIZE_WHITESPACE
    [{'algenta_owner': 'bo'}, {'algenta_decided_by': {'$contains': 'bo'}},
     {'algenta_waiting': {'$contains': 'confidence'}}]
    """
    if _reads_all(frozenset(roles)):
        return None
    gates = operator_gates(roles)
    if not gates:
        return _owned(identity)
    groups: list[dict[str, Any]] = [
        {OWNER_KEY: identity},
        {DECIDED_KEY: {"$contains": identity}},
        *({WAITING_KEY: {"$contains": gate}} for gate in gates),
    ]
    # LangGraph's filters take $or (its FilterType does not spell it out)
    return cast(Auth.types.FilterType, {"$or": groups})


def _graph_metadata(metadata: Any) -> list[str]:
    """The graph's own metadata keys a client tries to set (refused)."""
    if not isinstance(metadata, Mapping):
        return []
    return [k for k in (OWNER_KEY, *GRAPH_METADATA_KEYS) if k in metadata]


_ROLLBACK = (
    "rollback is not allowed: it deletes the checkpoints of a run, and the governed records in "
    "them (cancel with action=interrupt instead)"
)


@auth.on
async def _deny_everything_else(ctx: Auth.types.AuthContext, value: Any) -> None:
    """Default deny: crons, the store, assistant changes and anything not handled below."""
    if principal_of(ctx) is None:
        return None
    raise forbidden(f"{ctx.resource}.{ctx.action} is not allowed on this server")


@auth.on.assistants.read
async def _assistants_read(ctx: Auth.types.AuthContext, value: Any) -> None:
    principal_of(ctx)


@auth.on.assistants.search
async def _assistants_search(ctx: Auth.types.AuthContext, value: Any) -> None:
    principal_of(ctx)


@auth.on.threads.create
async def _threads_create(
    ctx: Auth.types.AuthContext, value: Auth.types.ThreadsCreate
) -> Auth.types.FilterType | None:
    who = _writer(ctx, "create threads")
    if who is None:
        return None
    identity, _ = who
    metadata = value.get("metadata")
    if metadata is None:
        metadata = value["metadata"] = {}
    for key in GRAPH_METADATA_KEYS:
        metadata.pop(key, None)  # the graph's own: never the client's
    metadata[OWNER_KEY] = identity  # whatever the client sent
    return _owned(identity)


def _read_filter(ctx: Auth.types.AuthContext) -> Auth.types.FilterType | None:
    """What the caller may read (:func:`read_filter`); everything when the server runs open."""
    who = principal_of(ctx)
    if who is None:
        return None
    identity, roles = who
    return read_filter(identity, roles)


@auth.on.threads.read
async def _threads_read(
    ctx: Auth.types.AuthContext, value: Auth.types.ThreadsRead
) -> Auth.types.FilterType | None:
    return _read_filter(ctx)


@auth.on.threads.search
async def _threads_search(
    ctx: Auth.types.AuthContext, value: Auth.types.ThreadsSearch
) -> Auth.types.FilterType | None:
    return _read_filter(ctx)


@auth.on.threads.update
async def _threads_update(
    ctx: Auth.types.AuthContext, value: Auth.types.ThreadsUpdate
) -> Auth.types.FilterType | None:
    # the graph's own metadata (which gates the thread waits on, who decided), patched from a
    # node through the server's in-process client, as the run's user: on any thread, and
    # nothing else (its secret proves it comes from the graph, in this process)
    metadata = value.get("metadata")
    if isinstance(metadata, dict) and GRAPH_WRITE_KEY in metadata:
        token = metadata.pop(GRAPH_WRITE_KEY)
        if is_graph_write(token) and set(metadata) <= set(GRAPH_METADATA_KEYS):
            return None
        raise forbidden("the thread metadata of the graph is set by the graph")
    # thread metadata patches, update_state (the served graph refuses governed fields itself)
    # and run cancellations: the thread's owner only
    who = _writer(ctx, "change threads")
    if who is None:
        return None
    identity, _ = who
    taken = _graph_metadata(value.get("metadata"))
    if taken:
        raise forbidden(f"the thread metadata {', '.join(map(repr, taken))} is set by the server")
    if value.get("action") == "rollback":
        raise forbidden(_ROLLBACK)
    return _owned(identity)


@auth.on.threads.delete
async def _threads_delete(
    ctx: Auth.types.AuthContext, value: Auth.types.ThreadsDelete
) -> Auth.types.FilterType | None:
    # deleting a thread, or a run (which deletes the checkpoints it wrote), drops governed
    # records: not an API operation, for any role
    if principal_of(ctx) is None:
        return None
    what = "runs" if value.get("run_id") else "threads"
    raise forbidden(f"{what} cannot be deleted: their checkpoints hold governed records")


def _mentions_records(update: Any) -> bool:
    if isinstance(update, Mapping):
        return any(field in update for field in RECORD_FIELDS)
    if isinstance(update, Sequence) and not isinstance(update, str | bytes):
        # Command.update may also be a list of (key, value) pairs
        return any(
            (isinstance(item, Sequence) and item and item[0] in RECORD_FIELDS)
            or _mentions_records(item)
            for item in update
            if not isinstance(item, str | bytes)
        )
    return False


_INTERRUPT_ID = re.compile(r"^[0-9a-f]{32}$")


def _stamp(resume: Any, identity: str) -> Any:
    """``resume`` with ``operator`` set to the authenticated ``identity``.

    Refused with HTTP 403 if it names someone else. Agent Inbox's answer (a list of responses)
    has each response stamped.

    The stamp travels with the answer into the checkpoint. LangGraph replays a node's earlier
    resume values when it is resumed again, so an answer must carry who gave it: otherwise an
    answer of one operator would be re-read, on the next resume, in the name of whoever resumes
    next.
    """
    if isinstance(resume, dict) and resume and all(_INTERRUPT_ID.match(str(k)) for k in resume):
        # {interrupt_id: answer}: stamp each answer
        return {key: _stamp(value, identity) for key, value in resume.items()}
    if isinstance(resume, list):
        return [_stamp(item, identity) if isinstance(item, dict) else item for item in resume]
    if not isinstance(resume, dict):
        return resume  # not an answer the graph accepts; its response_schema refuses it
    named = resume.get("operator")
    if isinstance(named, str) and named.strip() and named.strip() != identity:
        raise forbidden(
            f"operator {named.strip()!r} contradicts the authenticated identity {identity!r}"
        )
    return {**resume, "operator": identity}


def _forks(kwargs: Mapping[str, Any]) -> bool:
    configurable = (kwargs.get("config") or {}).get("configurable") or {}
    return bool(
        configurable.get("checkpoint_id") or kwargs.get("checkpoint_id") or kwargs.get("checkpoint")
    )


@auth.on.threads.create_run
async def _threads_create_run(
    ctx: Auth.types.AuthContext, value: Auth.types.RunsCreate
) -> Auth.types.FilterType | None:
    kwargs = value.get("kwargs") or {}
    command = kwargs.get("command") or None
    # for every role, open or not: governed records are written only by the graph's nodes
    if _mentions_records(kwargs.get("input")) or (
        isinstance(command, Mapping) and _mentions_records(command.get("update"))
    ):
        raise forbidden(
            f"governed records ({', '.join(RECORD_FIELDS)}) are written only by the graph"
        )
    # ... and an escalation is disposed of only by an operator's answer: a ``goto`` (Agent Chat
    # UI's "mark as resolved" sends ``goto: END``) or an ``update`` never answers one
    if command is not None and (not isinstance(command, dict) or set(command) - {"resume"}):
        raise forbidden(
            "a run's command may only be a resume: an escalation is disposed of only by an "
            "operator's answer (goto/update, e.g. 'mark as resolved', cannot end it)"
        )
    metadata = value.get("metadata")
    if isinstance(metadata, dict):
        for key in GRAPH_METADATA_KEYS:
            metadata.pop(key, None)  # the graph's own: never from a run's metadata
    who = _writer(ctx, "start runs")
    if who is None:
        return None
    identity, roles = who
    if value.get("multitask_strategy") == "rollback":
        raise forbidden(_ROLLBACK)
    if _forks(kwargs):
        raise forbidden("runs from an earlier checkpoint are not allowed (they drop records)")
    if isinstance(metadata, dict):
        metadata[OWNER_KEY] = identity  # a thread this run creates belongs to the caller
    if command is not None:
        if not is_operator(roles):
            raise forbidden("only an operator may answer an escalation")
        command["resume"] = _stamp(command.get("resume"), identity)
        # an operator answers escalations on any thread (with a command the server ignores the
        # run's input, which Agent Chat UI sends as {}); the graph checks the gate and the answer
        return None
    return _owned(identity)


# the store's handlers live in their own module, registered on this same Auth object
from algenta_graph.serving import store_auth  # noqa: E402, F401

if "langgraph_api" in sys.modules:  # loaded by a LangGraph server
    startup_check()
