"""Every error algenta-graph raises, in one hierarchy.

Every error a user can meet derives from :class:`AlgentaGraphError`, so one ``except`` catches
them all; each subclass's docstring says when it is raised. Some also derive from the builtin a
caller would expect (``ValueError`` for bad input, ``PermissionError`` for a refused write,
``RuntimeError`` for a conflict, ``ImportError`` for a missing package), which also lets the
LangGraph server show their messages to API clients. Messages never contain an API key.

The reference engine (:mod:`algenta_graph.engine`) is a separate program with errors of its own
(:mod:`algenta_graph.engine.errors`); it never raises these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from starlette.exceptions import HTTPException

__all__ = [
    "AlgentaGraphError",
    "ApprovalAlreadyCounted",
    "AuthFileError",
    "BearerTokenRefused",
    "CheckpointerError",
    "CheckpointerURLError",
    "CommandError",
    "ConfigError",
    "DemoError",
    "EngineAuthError",
    "EngineConnectionError",
    "EngineTimeoutError",
    "EscalationAlreadyDecided",
    "IdentityProviderError",
    "InboxAPIError",
    "InboxConfigError",
    "LedgerError",
    "LedgerRequired",
    "ModelPackageMissingError",
    "ModelSetupError",
    "NoEngine",
    "NoEscalationPending",
    "NoToolServers",
    "OIDCConfigError",
    "OperatorCredentialMissing",
    "RecordsFileError",
    "RecordsWriteRefused",
    "ToolCallLostError",
    "ToolGatesError",
    "ToolNotInProfileError",
    "UnsupportedToolSchemaError",
    "UsageStoreMissing",
]


class AlgentaGraphError(Exception):
    """Base class of every error raised by algenta-graph."""


# --------------------------------------------------------------------------- the engine


class EngineConnectionError(AlgentaGraphError):
    """The Algenta engine (or an extra MCP server) could not be reached, or the connection broke.

    Raised by :class:`~algenta_graph.connection.engine.EngineConnection` when it opens or calls;
    the message names the URL and what to check (the URL, that the engine runs, the token).

    Args:
        message: what failed, and what to check.
        url: the endpoint that failed (kept as ``url``).
    """

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


class EngineAuthError(EngineConnectionError):
    """The engine rejected the API token (HTTP 401) when the connection opened or called.

    Raised by the engine connection (:mod:`algenta_graph.connection`) on opening or on a call.
    """


class EngineTimeoutError(EngineConnectionError):
    """A call to the engine did not answer within its timeout; the message names the call.

    Raised by the engine connection on opening or on a call, naming the option to raise
    (``timeout=``, ``call_timeout=``).
    """


class ToolCallLostError(EngineConnectionError):
    """The connection to a tool's server closed or reset while a call was in flight.

    The request was sent and its answer never came (the server stopped, was killed, or ended
    the answer without the result), so **the call may have run**: it must not be sent again
    blindly. Raised by the engine connection as soon as the connection is gone, never after
    waiting out ``call_timeout``; the message names the server, its URL and the tool, and says
    what to check instead of retrying.

    Args:
        message: what was lost, and what to check.
        url: the server's endpoint (kept as ``url``).
        tool: the tool whose call was lost, its name on its server (kept as ``tool``).
    """

    def __init__(self, message: str, *, url: str | None = None, tool: str) -> None:
        super().__init__(message, url=url)
        self.tool = tool


class NoToolServers(AlgentaGraphError, ValueError):
    """A graph with no Algenta engine and no extra MCP servers: it would have no tools.

    Raised before anything is opened or connected, by the factory, the engine connection and
    the configuration; the message names what to set (an engine's ``base_url`` or an extra
    server).
    """


class NoEngine(AlgentaGraphError, RuntimeError):
    """An engine-only operation on a connection built without an Algenta engine.

    A graph without an engine (``base_url=None``, ``base_url = false``) has no engine gates, no
    ``execute_decision`` and no operator path; asking its connection for an engine's decision
    or an override raises this instead of contacting anything.
    """


class ToolNotInProfileError(AlgentaGraphError):
    """A tool outside the active profile was called; the engine was not contacted.

    Raised by the governed catalog and the engine connection when a call names a tool the
    profile does not expose (the governed tool node answers the model with it instead).

    Args:
        tool: the tool that was called (kept as ``tool``).
        profile: the name of the active profile (kept as ``profile``).
    """

    def __init__(self, tool: str, profile: str) -> None:
        super().__init__(
            f"tool {tool!r} is not in the active profile {profile!r}; it was not called"
        )
        self.tool = tool
        self.profile = profile


class UnsupportedToolSchemaError(AlgentaGraphError, ValueError):
    """A tool's parameter schema is one the providers reject and that cannot be fixed safely.

    Raised by :mod:`algenta_graph.retrieval.naming`; the tool is then left out, with a warning.
    """


class UsageStoreMissing(AlgentaGraphError, ValueError):
    """A :class:`~algenta_graph.retrieval.UsageSignal` had no store to read or write.

    Raised by a signal made without a store of its own when a call passes no ``store=`` (in the
    graph, the run's store; ``langgraph dev`` gives one, a plain ``compile()`` without ``store=``
    does not).
    """


# --------------------------------------------------------------------------- the operator


class DecidedAnswer(Protocol):
    """What :class:`EscalationAlreadyDecided` reads of the answer that took effect.

    :class:`algenta_graph.ledger.ClaimAnswer` is one; the protocol keeps this module free of the
    ledger's imports (errors sit below every layer).
    """

    @property
    def operator(self) -> str:
        """Who answered."""
        ...

    @property
    def thread_id(self) -> str | None:
        """The thread in which the answer was given."""
        ...

    @property
    def decided_at(self) -> str | None:
        """When it was given (ISO 8601)."""
        ...

    @property
    def summary(self) -> str:
        """How: the answer's actions."""
        ...


class DecidedClaim(Protocol):
    """The claim in force, as :class:`EscalationAlreadyDecided` reads it (a ledger entry)."""

    @property
    def value(self) -> DecidedAnswer:
        """The answer."""
        ...

    @property
    def done(self) -> bool:
        """Whether the answer's side effects finished."""
        ...


class OperatorCredentialMissing(AlgentaGraphError, PermissionError):
    """An override was to be sent without an operator credential: it is refused, not sent.

    Raised by :meth:`~algenta_graph.connection.engine.EngineConnection.execute_as_operator`
    before anything is sent, when the call carries ``force`` or ``override_safety`` and the
    connection has no operator credential of its own (``operator_api_key``) nor was told that
    its one key is also the operator credential (``operator_key_is_agent_key=True``, for a
    relaxed local engine). The message names both settings; the model-facing session never
    carries an override.
    """


class EscalationAlreadyDecided(AlgentaGraphError, RuntimeError):
    """An answer to an escalation another answer already decided: it is refused, by name.

    Raised by a denial handler when a resume (or a new turn) meets an escalation whose answer is
    being applied by a live claimant (:mod:`algenta_graph.nodes.claiming`), and by the compiled
    graph when a resume answers an escalation that was decided before it (in this thread, a
    copy, another worker) or a thread with nothing pending (:mod:`algenta_graph.graph.resumes`):
    the answer that took effect is completed in the thread's records, and this one changes
    nothing. The message names who decided, how, where and when. (A ``RuntimeError`` too, so the
    LangGraph server shows the message to the API client instead of "An internal error
    occurred".)

    Args:
        claim: the claim in force (kept as ``claim``): who decided, how, where and when.
    """

    def __init__(self, claim: DecidedClaim) -> None:
        self.claim = claim
        answer = claim.value
        where = f" in thread {answer.thread_id}" if answer.thread_id else ""
        when = f" at {answer.decided_at}" if answer.decided_at else ""
        state = "" if claim.done else ", still being applied"
        super().__init__(
            f"escalation already decided by {answer.operator} ({answer.summary}{where}{when}"
            f"{state}); that answer takes effect, and nothing was done or recorded in this "
            "resume's name"
        )


class ApprovalAlreadyCounted(AlgentaGraphError, RuntimeError):
    """An operator's second approval toward a quorum, met in the ledger: refused, by name.

    Raised by a denial handler when an approval it was just given finds the operator's own
    approval already counted toward the same escalation's quorum (given at the same moment in
    another worker, a copy of the thread, or through another token of the same identity): it is
    not counted again, and the run ends with this error. The message says who and how far the
    approvals came. (A ``RuntimeError`` too, so the LangGraph server shows the message to the
    API client.)
    """


class NoEscalationPending(AlgentaGraphError, RuntimeError):
    """A resume (an operator's answer) on a thread where no escalation waits and none was decided.

    Raised by the compiled graph before anything is written (:mod:`algenta_graph.graph.resumes`);
    the message names the thread. (A thread whose escalation was decided raises
    :class:`EscalationAlreadyDecided` instead, naming who decided.)
    """


# --------------------------------------------------------------------------- the ledger


class LedgerError(AlgentaGraphError, RuntimeError):
    """The ledger could not be opened, or holds an entry that is not what was asked for.

    Raised by :mod:`algenta_graph.ledger`; the message names the ledger (a PostgreSQL URL
    without its password) or the entry's key, and nothing was done with it.
    """


class LedgerRequired(AlgentaGraphError, ValueError):
    """A graph (or served deployment) would run without a ledger every process shares.

    Raised by :func:`~algenta_graph.ledger.choose_ledger` when building the graph or starting
    the server: no ledger is configured, the deployment's state implies none (a saver
    algenta-graph did not open from a path or URL, a server's custom checkpointer, a runtime
    other than ``langgraph dev``'s), and the deployment is not declared one process. The message
    names the deployment and what to set.

    Args:
        deployment: what the deployment is (kept as ``deployment``).
    """

    def __init__(self, deployment: str) -> None:
        self.deployment = deployment
        super().__init__(
            f"{deployment}: no ledger that every process serving the graph shares can be found, "
            "so an escalation could take two answers and a governed call could be sent twice; "
            "set one: ledger= (create_governed_agent; an open Ledger for build_governed_graph), "
            'ledger = "..." in the configuration file or ALGENTA_LEDGER (a SQLite file path, '
            "for one machine, or a postgresql:// URL); or declare the deployment one process: "
            "single_process=True, single_process = true or ALGENTA_SINGLE_PROCESS=1"
        )


# --------------------------------------------------------------------------- serving


class RecordsWriteRefused(AlgentaGraphError, PermissionError, HTTPException):
    """An ``update_state`` was refused by the record guard.

    It tried to write governed records, to fork an earlier checkpoint, to write as a governance
    node, or to change a thread whose governed step is unfinished. Raised by the record guard
    (:mod:`algenta_graph.governance.record_guard`). It is a Starlette ``HTTPException`` with
    status 403 too, so a LangGraph server answers the client with 403 and the message as
    ``detail``.

    Args:
        detail: why the update was refused (the message, and the 403's ``detail``).
    """

    def __init__(self, detail: str) -> None:
        HTTPException.__init__(self, status_code=403, detail=detail)
        Exception.__init__(self, detail)

    def __str__(self) -> str:
        """The refusal's ``detail`` (the message)."""
        return str(self.detail)


class AuthFileError(AlgentaGraphError, ValueError):
    """The served graph's auth file (``ALGENTA_AUTH_FILE``) is missing, unreadable or malformed.

    Raised when the server starts (it does not start) and on every request while the file stays
    broken (each is refused); the message names the file and the problem.
    """


class OIDCConfigError(AlgentaGraphError, ValueError):
    """The identity provider's settings (``ALGENTA_OIDC_*``) are missing or malformed.

    Raised when the server starts (it does not start) and on every request while they stay
    broken (each is refused); the message names the variable and the problem
    (:mod:`algenta_graph.serving.oidc_settings`).
    """


class IdentityProviderError(AlgentaGraphError, RuntimeError):
    """The identity provider could not be read (its discovery document, keys or token endpoint).

    Unreachable, answering an error, or saying something malformed. Raised while verifying a
    JWT (the request is refused: no token is accepted on keys that cannot be read) and during the
    inbox's sign-in with the provider; the message names the URL and the problem
    (:mod:`algenta_graph.serving.identity_provider`).
    """


class BearerTokenRefused(AlgentaGraphError, PermissionError):
    """A bearer token presented to the served graph is refused, saying why.

    Raised by the JWT verifier (:mod:`algenta_graph.serving.jwt_bearer`): an expired, not yet
    valid, wrongly signed, foreign (issuer, audience), unknown-key or disallowed-algorithm token
    (``status`` 401), or a valid token that grants no role here (``status`` 403). The server
    answers with ``status`` and the message.

    Args:
        status: 401 (who the token is cannot be trusted) or 403 (it can, and may do nothing).
        detail: why (the message).
    """

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


# --------------------------------------------------------------------------- models


class ModelSetupError(AlgentaGraphError):
    """A model string could not be turned into a chat model (unknown provider, no API key...).

    Raised by :func:`~algenta_graph.models.resolve_model`, before anything connects; the message
    names the model string and the provider's own reason.
    """


class ModelPackageMissingError(ModelSetupError, ImportError):
    """The chat model package of a model string's provider is not installed.

    Raised when a model string (``"openai:gpt-5"``) is resolved (:mod:`algenta_graph.models`).

    Args:
        model: the model string (kept as ``model``).
        package: what to ``pip install`` (kept as ``package``; e.g. ``langchain-openai`` for
            ``"openai:gpt-5"``).
    """

    def __init__(self, model: str, package: str) -> None:
        super().__init__(
            f"model {model!r} needs the {package} package, which is not installed: "
            f"pip install {package}"
        )
        self.model = model
        self.package = package


# --------------------------------------------------------------------------- checkpoints


class CheckpointerError(AlgentaGraphError):
    """A checkpoint store could not be opened (unreachable, refused, or not a checkpoint store).

    Raised by :func:`~algenta_graph.serving.checkpointer.open_checkpointer` and the readers;
    the message names the store (a PostgreSQL URL without its password) and what to check.
    """


class CheckpointerURLError(CheckpointerError, ValueError):
    """A ``postgresql://`` URL that is not well formed (raised before anything connects).

    The message says what is wrong with it (libpq's own words) and shows the URL without its
    password.
    """


class RecordsFileError(AlgentaGraphError, ValueError):
    """Not a readable LangGraph SQLite checkpoint file, or checkpoints not an algenta-graph's.

    Raised by the records readers (:mod:`algenta_graph.audit.records`,
    :mod:`algenta_graph.serving.checkpoint_reader`) for a file that is not a readable LangGraph
    SQLite checkpoint file, or checkpoints that are not an algenta-graph thread's; the message
    names the file or store and says why.
    """


# --------------------------------------------------------------------------- the command line


class CommandError(AlgentaGraphError):
    """A bad input or a failed ``algenta-graph`` command.

    Raised by the command line (:mod:`algenta_graph.cli`), which prints its one line for the
    user and exits with its code (kept as ``code``).

    Args:
        message: the line for the user.
        code: the exit code: 2 a bad value, 1 a failure, 3 an escalation left pending.
    """

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class InboxConfigError(AlgentaGraphError, RuntimeError):
    """The operator inbox cannot start as configured.

    Raised when the server starts the inbox with no auth file and open serving is not allowed
    (``ALGENTA_INBOX_ALLOW_OPEN``); the message names both ways out.
    """


class InboxAPIError(AlgentaGraphError, RuntimeError):
    """The LangGraph API refused or failed a call of the operator inbox.

    Raised by the inbox's API calls (:mod:`algenta_graph.inbox.queries`); the pages show the
    message, which is the server's, with its status.

    Args:
        status: the HTTP status (kept as ``status``; 502 when the API could not be reached).
        message: the server's detail.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class DemoError(AlgentaGraphError, RuntimeError):
    """The ``algenta-graph demo`` walkthrough did not go as narrated.

    Raised by :mod:`algenta_graph.demo` when a step's expected outcome did not happen.
    """


@dataclass(frozen=True)
class ConfigProblem:
    """One problem of a configuration: where it came from, which key, what is wrong."""

    source: str
    """The file, ``"environment variable ALGENTA_..."``, or ``"the configuration"`` (Python)."""
    key: str
    """The dotted key (``extra_servers.crm.headers.Authorization``)."""
    message: str

    def __str__(self) -> str:
        """``source: key: message``."""
        return f"{self.source}: {self.key}: {self.message}"


class ConfigError(AlgentaGraphError, ValueError):
    """The configuration is wrong.

    Raised by :func:`~algenta_graph.config.load_config` and
    :func:`~algenta_graph.config.resolve_config`. Its message is one line per problem
    (:class:`ConfigProblem`), each naming the file or the environment variable and the key;
    the served graph refuses to start with it.

    Args:
        problems: every problem found (at least one).
    """

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.problems: tuple[ConfigProblem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class ToolGatesError(ConfigError):
    """A tool-gate rule that would not mean what it says against the live catalog.

    Raised when the graph is built (:func:`~algenta_graph.graph.build_governed_graph`, and so
    :func:`~algenta_graph.graph.create_governed_agent` and the served graph's start) and by
    ``algenta-graph config check``: a pattern that names no tool (the message names the
    nearest tool names), a server posture for a server the catalog does not have, an argument
    rule naming an argument none of its tools takes or admitting a type the tool does not take.
    Every problem is one line (``tool_gates.<key>: ...``); nothing is built.
    """

    def located(self, source: str) -> ToolGatesError:
        """The same problems, said to come from ``source`` (the configuration file)."""
        return ToolGatesError([dataclasses.replace(p, source=source) for p in self.problems])
