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
- ``ALGENTA_OIDC_ISSUER`` (with the other ``ALGENTA_OIDC_*`` settings,
  :mod:`algenta_graph.serving.oidc_settings`) makes the server accept the identity provider's
  JWTs too, verified against its keys, the identity and roles mapped from their claims
  (:mod:`algenta_graph.serving.jwt_bearer`). With both set, a bearer shaped as a JWT goes to the
  verifier only and any other to the tokens file only (:func:`authenticated_principal`); an
  identity the tokens file names is never accepted from a JWT (one name, one source).
- With neither, the server runs **open**, as without auth: every request is allowed, as an
  unauthenticated user, and a warning says so at start-up.

Roles (a token may carry several):

- ``agent``: creates threads and runs; reads, searches, streams, updates and runs only the
  threads it created (owner in the thread metadata, :data:`OWNER_KEY`, set by the server).
- ``operator``: an agent that may also answer escalations (a run whose ``command`` is a
  ``resume``) on any thread, and read and search the threads that **wait for an operator** (on
  any gate) plus those it decided or answered, besides its own. ``operator:<gate>`` (e.g.
  ``operator:confidence``) reads the threads waiting on that gate plus those it decided or
  answered, and may answer only that gate's escalations; the API lets any operator role resume,
  and the graph's handler (:func:`served_authorize_operator`) checks the gate. An answer is
  checked before its run (:mod:`algenta_graph.serving.answer_check`): refused with 409 naming
  who decided when nothing waits; recorded as answered when it waits on the operator's gate.
  Which gates a thread waits on, who decided and who answered are thread metadata the graph and
  the server keep themselves (:mod:`algenta_graph.governance.visibility`); no client may set
  them.
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

import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, cast

from langgraph_sdk import Auth

from algenta_graph.errors import (
    AuthFileError,
    BearerTokenRefused,
    IdentityProviderError,
    OIDCConfigError,
)
from algenta_graph.governance.visibility import (
    DECIDED_KEY,
    GRAPH_WRITE_KEY,
    WAITING_KEY,
    answered_key,
    is_graph_metadata,
    is_graph_write,
)
from algenta_graph.serving import jwt_bearer, tokens
from algenta_graph.serving.answer_check import check_answer, graph_reads
from algenta_graph.serving.jwt_bearer import looks_like_jwt
from algenta_graph.serving.principals import forbidden, principal_of
from algenta_graph.serving.store_auth import store_rule
from algenta_graph.serving.tokens import (
    AGENT,
    AUDITOR,
    ENV_AUTH_FILE,
    OPEN_IDENTITY,
    OPERATOR,
    OWNER_KEY,
    ROLES,
    Principal,
    TokenTable,
    auth_configured,
    is_operator,
    load_auth_file,
    operator_gates,
    served_authorize_operator,
    startup_check,
    token_digest,
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
    "authenticated_principal",
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

# ---------------------------------------------------------------------------------------------
# the LangGraph Auth object

auth = Auth()


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


async def authenticated_principal(token: str) -> Principal | None:
    """Who ``token`` is, by the tokens file or the identity provider (``None``: runs open).

    A token shaped as a JWT (:func:`~algenta_graph.serving.jwt_bearer.looks_like_jwt`) is
    verified against the identity provider when one is configured, and never looked up in the
    tokens file; any other token is looked up in the tokens file only.

    Raises:
        Auth.exceptions.HTTPException: 401 naming why the token is not accepted (or why no token
            can be now: a broken tokens file or provider settings), 403 when a valid JWT grants
            no role here.
    """
    try:
        table = tokens.TOKENS.current()
        verifier = jwt_bearer.VERIFIERS.current()
    except AuthFileError:
        raise _unauthorized(
            "authentication is unavailable: the server's auth file is invalid"
        ) from None
    except OIDCConfigError:
        raise _unauthorized(
            "authentication is unavailable: the server's identity provider settings are invalid"
        ) from None
    if table is None and verifier is None:
        return None
    if verifier is not None and looks_like_jwt(token):
        try:
            principal = await verifier.aprincipal(token)
        except BearerTokenRefused as exc:
            if exc.status == 403:
                raise forbidden(exc.detail) from None
            raise _unauthorized(exc.detail) from None
        except IdentityProviderError as exc:
            raise _unauthorized(f"the token cannot be verified now: {exc}") from None
        if table is not None and principal.identity in table.identities:
            raise _unauthorized(
                f"the identity {principal.identity!r} is named by the tokens file too: it is "
                "accepted from one source only (rename it in one of them)"
            )
        return principal
    if table is None:
        raise _unauthorized(
            "invalid token: only the identity provider's JWTs are accepted here (no tokens file)"
        )
    found = table.lookup(token)
    if found is None:
        raise _unauthorized("invalid token")
    return found


@auth.authenticate
async def authenticate(
    authorization: str | None,
    headers: Mapping[Any, Any] | None = None,
    path: str | None = None,
) -> Auth.types.MinimalUserDict:
    """Token -> identity and roles (the roles are the user's ``permissions``).

    The token is ``Authorization: Bearer <token>`` or the ``x-api-key`` header (what
    ``langgraph_sdk.get_client(api_key=...)`` sends), a token of the tokens file or the identity
    provider's JWT (:func:`authenticated_principal`). The server's own ``/mcp`` endpoint runs
    the graph, so an auditor (who may run nothing) is refused there with 403 at once.
    """
    token = _presented_token(authorization, headers)
    if token is None and auth_configured():
        raise _unauthorized(
            "a token is required (Authorization: Bearer <token>, or the x-api-key header)"
        )
    principal = await authenticated_principal(token or "")
    if principal is None:
        return {
            "identity": OPEN_IDENTITY,
            "is_authenticated": False,
            "permissions": [],
            "display_name": "open server (no authentication)",
        }
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


def read_filter(
    identity: str, roles: Sequence[str] | frozenset[str]
) -> Auth.types.FilterType | None:
    """The thread metadata filter of what ``identity`` with ``roles`` may read (``None``: all).

    An auditor reads every thread; an operator role the threads waiting on its gates plus those
    it decided or answered (:mod:`algenta_graph.serving.answer_check`), besides its own; anyone
    else only its own.

    >>> read_filter("ana", ["agent"])
    {'algenta_owner': 'ana'}
    >>> read_filter("ana", ["auditor"]) is None
    True
    >>> read_filter("bo", ["operator:confidence"])["$or"]  # doctest: +NORMALIZE_WHITESPACE
    [{'algenta_owner': 'bo'}, {'algenta_decided_by': {'$contains': 'bo'}},
     {'algenta_answered_by:bo': 'bo'}, {'algenta_waiting': {'$contains': 'confidence'}}]
    """
    if _reads_all(frozenset(roles)):
        return None
    gates = operator_gates(roles)
    if not gates:
        return _owned(identity)
    groups: list[dict[str, Any]] = [
        {OWNER_KEY: identity},
        {DECIDED_KEY: {"$contains": identity}},
        {answered_key(identity): identity},
        *({WAITING_KEY: {"$contains": gate}} for gate in gates),
    ]
    # LangGraph's filters take $or (its FilterType does not spell it out)
    return cast(Auth.types.FilterType, {"$or": groups})


def _graph_metadata(metadata: Any) -> list[str]:
    """The graph's own metadata keys a client tries to set (refused)."""
    if not isinstance(metadata, Mapping):
        return []
    return [k for k in metadata if k == OWNER_KEY or is_graph_metadata(str(k))]


def _drop_graph_metadata(metadata: dict[str, Any]) -> None:
    """Remove from ``metadata`` every key only the graph sets."""
    for key in [k for k in metadata if is_graph_metadata(str(k))]:
        del metadata[key]


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
    _drop_graph_metadata(metadata)  # the graph's own: never the client's
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
    if graph_reads():
        return None  # the server's own read of the thread an answer is sent to
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
        if is_graph_write(token) and all(is_graph_metadata(str(k)) for k in metadata):
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
        _drop_graph_metadata(metadata)  # the graph's own: never from a run's metadata
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
        # run's input, which Agent Chat UI sends as {}); the graph checks the gate and the answer,
        # and the server first that something waits for this operator (refused by name if not)
        thread_id = value.get("thread_id")
        if thread_id is not None:
            await check_answer(str(thread_id), identity, roles)
        return None
    return _owned(identity)


# the store's rule lives in its own module, registered on this same Auth object
auth.on.store(store_rule)

if "langgraph_api" in sys.modules:  # loaded by a LangGraph server
    startup_check()
