"""One connection to an Algenta engine.

The governed tool catalog, the model's calls, and the operator path, over the persistent
sessions of :mod:`algenta_graph.connection.transport`.

:class:`EngineConnection`'s catalog (:attr:`EngineConnection.tools`) is built with
``load_mcp_tools`` and holds

* the engine's tools admitted by the active profile (``observe`` by default), with ``force`` and
  ``override_safety`` removed from every schema (properties, ``required``, nested objects,
  ``$defs``);
* the tools of any ``extra_servers``, under their own names, prefixed ``<server>_`` only when
  the name is taken (an extra server never lends its tools Algenta's trust)
  (:mod:`algenta_graph.connection.catalog` builds it).

A connection made with ``engine=False`` has no engine at all: no session to one is opened, its
catalog is the extra servers' tools alone (at least one server is required:
:class:`~algenta_graph.errors.NoToolServers`), it has no ``execute_decision`` and no operator
path (:meth:`EngineConnection.execute_as_operator` and :meth:`EngineConnection.get_decision`
raise :class:`~algenta_graph.errors.NoEngine`), and no profile filters anything.

Every call from the catalog passes
:class:`~algenta_graph.governance.scrub.GovernanceInterceptor` (the security policy): a tool
outside the profile is refused without contacting the engine, and ``force`` /
``override_safety`` are removed from the arguments; nothing else changes. The operator path,
:meth:`EngineConnection.execute_as_operator`, is not a tool and is never bound to a model: it
sends the flags an operator approved, over a session of its own with the operator credential
(``operator_api_key``). Without one, an override is refused before anything is sent
(:class:`~algenta_graph.errors.OperatorCredentialMissing`), unless the connection is told that
its one key is also the operator credential (``operator_key_is_agent_key=True``: a relaxed
local engine, where the overrides then go over the model-facing session).

Connection problems raise :class:`~algenta_graph.errors.EngineConnectionError` naming the URL
(:class:`~algenta_graph.errors.EngineAuthError` for HTTP 401,
:class:`~algenta_graph.errors.EngineTimeoutError` for timeouts). A session that died (the engine
was stopped or killed) fails the call in flight; the next call opens a new session.

What the graph's nodes need of a connection is the
:class:`~algenta_graph.connection.client.EngineClient` protocol, with the engine's tool names
(:mod:`algenta_graph.connection.client`); this module is the real connection.

Example (against a local reference engine)::

    async with EngineConnection("http://127.0.0.1:8000/mcp", profile="execute") as conn:
        msg = await conn.call_tool("get_contract", {}, tool_call_id="call_1")
        outcome = await conn.execute_as_operator("dec_1", "https://hooks.example/x", force=True)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langchain_mcp_adapters.client import MultiServerMCPClient
from mcp.types import CallToolResult
from typing_extensions import Unpack

from algenta_graph.connection.catalog import load_catalog
from algenta_graph.connection.client import (
    EXECUTE_TOOL,
    GET_DECISION_TOOL,
    OperatorFlags,
    check_operator_flags,
)
from algenta_graph.connection.outcomes import (
    ExecutionOutcome,
    parse_execution_outcome,
    tool_result_json,
)
from algenta_graph.connection.transport import ALGENTA_SERVER, OPERATOR_SERVER, ServerSession
from algenta_graph.errors import (
    AlgentaGraphError,
    NoEngine,
    NoToolServers,
    OperatorCredentialMissing,
    ToolNotInProfileError,
)
from algenta_graph.governance.contract import Profile, resolve_profile
from algenta_graph.governance.scrub import GRAPH_SUPPLIED_FIELDS
from algenta_graph.telemetry import engine_calls
from algenta_graph.telemetry.names import TRACE_ARTIFACT_KEY
from algenta_graph.telemetry.redaction import without_credentials

if TYPE_CHECKING:
    from langchain_mcp_adapters.sessions import Connection

__all__ = [
    "ALGENTA_SERVER",
    "DEFAULT_BASE_URL",
    "ENV_OPERATOR_API_KEY",
    "EngineConnection",
    "resolve_base_url",
]

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://localhost:8000/mcp"
"""Where the engine is looked for when neither ``base_url=`` nor ``ALGENTA_BASE_URL`` is set."""
ENV_OPERATOR_API_KEY = "ALGENTA_OPERATOR_API_KEY"
"""The operator path's own engine credential, when ``operator_api_key=`` is not given."""


def resolve_base_url(base_url: str | None = None) -> str:
    """``base_url``, else ``ALGENTA_BASE_URL``, else :data:`DEFAULT_BASE_URL`."""
    url = base_url or os.environ.get("ALGENTA_BASE_URL") or DEFAULT_BASE_URL
    return url.strip()


class EngineConnection:
    """One persistent connection to an Algenta engine (plus optional extra MCP servers).

    Args:
        base_url: the engine's MCP endpoint; default ``ALGENTA_BASE_URL``, then
            ``http://localhost:8000/mcp``.
        api_key: sent as ``Authorization: Bearer <api_key>``; default ``ALGENTA_API_KEY``. Never
            logged, never in an error message.
        profile: the tool profile (a name from the contract, or a :class:`Profile`); default
            ``"observe"``.
        extra_servers: ``{"name": connection}`` in ``langchain-mcp-adapters`` form; their tools
            join the catalog (not governed by the profile, never trusted as Algenta's).
        timeout: seconds for connecting, initialising and listing tools.
        call_timeout: seconds one tool call may take.
        operator_api_key: the credential of the **operator path** only (an engine key with the
            operator role, ``docs/ARCHITECTURE.md`` invariant 14); default
            ``ALGENTA_OPERATOR_API_KEY``. The override flags are sent over a session of its
            own with this key, after an operator's answer; the model's calls never use it.
            Without it an override is refused before it is sent
            (:class:`~algenta_graph.errors.OperatorCredentialMissing`), unless
            ``operator_key_is_agent_key``.
        operator_key_is_agent_key: the engine takes the model-facing credential (``api_key``,
            or none for an engine without keys) as the operator credential too: without
            ``operator_api_key``, overrides are sent over the model-facing session. Only for a
            relaxed local engine (the reference engine without keys); default False. Ignored
            when ``operator_api_key`` is given.
        engine: ``False``: there is no Algenta engine (``base_url`` is then not given): the
            catalog is the extra servers' tools alone, and nothing engine-only exists
            (:attr:`has_engine`).

    Raises:
        ValueError: the profile is unknown, a timeout is not positive, an extra server takes a
            name reserved for the engine, its connection dict has no ``transport``, or
            ``base_url`` is given with ``engine=False``.
        NoToolServers: ``engine=False`` and no extra server: there would be no tool.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        profile: str | Profile = "observe",
        extra_servers: Mapping[str, Mapping[str, Any]] | None = None,
        timeout: float = 30.0,
        call_timeout: float = 60.0,
        operator_api_key: str | None = None,
        operator_key_is_agent_key: bool = False,
        engine: bool = True,
    ) -> None:
        if timeout <= 0 or call_timeout <= 0:
            raise ValueError(f"timeouts must be positive, got {timeout=} {call_timeout=}")
        if not engine and base_url is not None:
            raise ValueError(
                f"base_url={base_url!r} names an engine, and engine=False says there is none: "
                "give one or the other"
            )
        if not engine and not extra_servers:
            raise NoToolServers(
                "no tools to serve: this connection has no Algenta engine (engine=False) and no "
                "extra_servers; give extra_servers={name: connection} (your MCP servers), or an "
                "engine's base_url"
            )
        self.has_engine: bool = bool(engine)
        """Whether there is an Algenta engine (its tools, its gates, the operator path)."""
        self.url: str | None = resolve_base_url(base_url) if engine else None
        """The engine's MCP endpoint; ``None`` without an engine."""
        self.profile: Profile = resolve_profile(profile)
        self.timeout = float(timeout)
        self._call_timeout = float(call_timeout)
        token = api_key if api_key is not None else os.environ.get("ALGENTA_API_KEY")
        self.__token = token or None
        operator = (
            operator_api_key
            if operator_api_key is not None
            else os.environ.get(ENV_OPERATOR_API_KEY)
        )
        self.__operator_token = operator or None
        self.operator_key_is_agent_key = bool(operator_key_is_agent_key)
        """Whether overrides may go over the model-facing session (no operator credential)."""
        extras = dict(extra_servers or {})
        for reserved in (ALGENTA_SERVER, OPERATOR_SERVER):
            if reserved in extras:
                raise ValueError(
                    f"extra server name {reserved!r} is reserved for the Algenta engine"
                )
        for name, spec in extras.items():
            if not isinstance(spec, Mapping) or "transport" not in spec:
                raise ValueError(f"extra server {name!r}: a connection dict with 'transport'")
        self._extra_specs = extras
        self._servers: dict[str, ServerSession] = {}
        self._tools: dict[str, BaseTool] = {}
        self._origins: dict[str, tuple[str, str]] = {}
        self._algenta_names: frozenset[str] = frozenset()
        self._advertised: frozenset[str] = frozenset()
        self.execute_supplied: frozenset[str] = frozenset()
        """Which graph-supplied fields (``idempotency_key``, ``nonce``) the engine's
        ``execute_decision`` declares: the graph sends exactly those, never the model."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def __repr__(self) -> str:
        """The URL, the profile and whether tokens are set (never the tokens)."""
        if self.url is None:
            return f"EngineConnection(no engine, extra_servers={sorted(self._extra_specs)!r})"
        auth = "token" if self.__token else "no token"
        if self.__operator_token:
            auth += ", operator token"
        elif self.operator_key_is_agent_key:
            auth += ", operator key is agent key"
        url = without_credentials(self.url)
        return f"EngineConnection({url!r}, profile={self.profile.name!r}, {auth})"

    # ------------------------------------------------------------------ lifecycle

    def _redact(self, text: str) -> str:
        for secret in (self.__token, self.__operator_token):
            if secret:
                text = text.replace(secret, "[redacted]")
        return text

    @property
    def has_operator_credential(self) -> bool:
        """Whether the operator path has its own engine credential (``operator_api_key``)."""
        return self.__operator_token is not None

    def _connection_specs(self) -> dict[str, dict[str, Any]]:
        specs: dict[str, dict[str, Any]] = {}
        if self.url is not None:
            specs.update(self._engine_specs(self.url))
        for name, spec in self._extra_specs.items():
            specs[name] = {**spec, "session_kwargs": dict(spec.get("session_kwargs") or {})}
        return specs

    def _engine_specs(self, url: str) -> dict[str, dict[str, Any]]:
        read = max(300.0, self.call_timeout + self.timeout)  # must outlive any call
        specs: dict[str, dict[str, Any]] = {
            ALGENTA_SERVER: {
                "transport": "streamable_http",
                "url": url,
                "timeout": self.timeout,
                "sse_read_timeout": read,
                "session_kwargs": {},
            }
        }
        if self.__token:
            specs[ALGENTA_SERVER]["headers"] = {"Authorization": f"Bearer {self.__token}"}
        if self.__operator_token:  # opened on the first operator call only
            specs[OPERATOR_SERVER] = {
                **specs[ALGENTA_SERVER],
                "headers": {"Authorization": f"Bearer {self.__operator_token}"},
                "session_kwargs": {},
            }
        return specs

    @property
    def call_timeout(self) -> float:
        """Seconds one tool call may take; setting it applies to the open sessions too."""
        return self._call_timeout

    @call_timeout.setter
    def call_timeout(self, seconds: float) -> None:
        if seconds <= 0:
            raise ValueError(f"call_timeout must be positive, got {seconds!r}")
        self._call_timeout = float(seconds)
        for server in self._servers.values():
            server.call_timeout = self._call_timeout

    async def open(self) -> EngineConnection:
        """Open the sessions and build the catalog (idempotent).

        Raises:
            EngineConnectionError: the engine (or an extra server) could not be reached.
            AlgentaGraphError: this connection was closed (create a new one).
        """
        if self._servers:
            return self
        if self._closed:
            raise AlgentaGraphError("this EngineConnection was closed; create a new one")
        self._loop = asyncio.get_running_loop()
        specs = self._connection_specs()
        # the adapters' connection dicts, built key by key (an extra server's is the caller's)
        client = MultiServerMCPClient(cast("dict[str, Connection]", specs))
        for name, spec in specs.items():
            # how messages and traces name it: never with a credential the URL carries
            url = without_credentials(str(spec.get("url") or spec.get("command") or name))
            server = ServerSession(
                name, url, client, self.timeout, self._redact, call_timeout=self.call_timeout
            )
            spec["session_kwargs"].setdefault(
                "read_timeout_seconds", timedelta(seconds=self.timeout)
            )
            spec["session_kwargs"].setdefault("message_handler", server.on_message)
            if spec["transport"] in ("streamable_http", "streamable-http", "http", "sse"):
                spec.setdefault("httpx_client_factory", server.http_client)
            self._servers[name] = server
        try:
            await self._build_catalog()
        except BaseException:
            await self.aclose()
            self._closed = False
            raise
        return self

    async def _build_catalog(self) -> None:
        catalog = await load_catalog(self._servers, self.profile, self._send)
        self._tools, self._origins = catalog.tools, catalog.origins
        self._algenta_names, self._advertised = catalog.algenta_names, catalog.advertised
        self.execute_supplied = catalog.execute_supplied

    async def aclose(self) -> None:
        """Close every session (idempotent)."""
        servers, self._servers = list(self._servers.values()), {}
        self._closed = True
        for server in servers:
            try:
                await server.close()
            except Exception:  # closing must not mask the caller's own error
                logger.debug("closing the session to %s failed", server.name, exc_info=True)

    async def __aenter__(self) -> EngineConnection:
        """Open the connection (:meth:`open`)."""
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        """Close every session (:meth:`aclose`)."""
        await self.aclose()

    # ------------------------------------------------------------------ catalog

    @property
    def tools(self) -> list[BaseTool]:
        """The model-facing catalog: the profile's Algenta tools (scrubbed) + extra servers'."""
        return list(self._tools.values())

    @property
    def advertised_tool_names(self) -> frozenset[str]:
        """Every tool name the engine advertised, inside and outside the profile."""
        return self._advertised

    def get_tool(self, name: str) -> BaseTool | None:
        """The catalog tool called ``name`` (its final name), or None."""
        return self._tools.get(name)

    def tool_origin(self, name: str) -> tuple[str, str] | None:
        """``(server, MCP tool name)`` of the catalog tool called ``name``, or ``None``.

        The real name on its own server, before any renaming for a clash (an extra server's
        ``delete_customer`` may be the catalog's ``crm_delete_customer``): what tool gates match.
        """
        return self._origins.get(name)

    def is_algenta_tool(self, name: str) -> bool:
        """True only for the Algenta engine's own catalog tools, never an extra server's."""
        return name in self._algenta_names

    @property
    def sessions_opened(self) -> int:
        """How many MCP sessions this connection has opened so far (reconnects included)."""
        return sum(s.opened for s in self._servers.values())

    # ------------------------------------------------------------------ calls

    def _server(self, name: str) -> ServerSession:
        self._check_open()
        return self._servers[name]

    def _check_open(self) -> None:
        if not self._servers:
            raise AlgentaGraphError(
                "the EngineConnection is not open: use `async with EngineConnection(...)` "
                "or `await conn.open()` first"
            )
        if self._loop is not None and asyncio.get_running_loop() is not self._loop:
            raise AlgentaGraphError(
                "the EngineConnection was opened in another event loop; open one per loop"
            )

    def _engine_url(self, what: str) -> str:
        """The engine's URL, for ``what`` needs the engine (:class:`NoEngine` without one)."""
        if self.url is None:
            raise NoEngine(
                f"{what} needs an Algenta engine, and this connection has none (engine=False: "
                "only the extra servers' tools); nothing was sent"
            )
        return self.url

    async def _send(
        self,
        server: ServerSession,
        name: str,
        arguments: dict[str, Any],
        progress_callback: Any = None,
        *,
        operator: bool = False,
    ) -> CallToolResult:
        """One tools/call over ``server``'s live session (this connection open, in its loop).

        Traced (:class:`~algenta_graph.telemetry.engine_calls.EngineCall`): a span under the
        node that makes the call, its ``traceparent`` in ``params._meta`` (and, by the
        transport, in the HTTP headers), the engine call's metrics.
        """
        self._server(server.name)
        shown = {k: v for k, v in arguments.items() if k not in GRAPH_SUPPLIED_FIELDS}
        call = engine_calls.EngineCall(
            "tools/call", name, server.url, arguments, operator=operator, shown=shown
        )
        governed = name == EXECUTE_TOOL and server.name in (ALGENTA_SERVER, OPERATOR_SERVER)
        if governed:
            arguments = call.tag_arguments(arguments)
        try:
            with call:
                result = await server.send(name, arguments, progress_callback, meta=call.meta)
        except BaseException as exc:
            call.failed(exc)
            raise
        if not call.wants_answer:  # nothing is recorded: the answer is not read twice
            await call.answered(is_error=bool(result.isError))
            return result
        outcome = parse_execution_outcome(result) if governed else None
        body = tool_result_json(result) if name == GET_DECISION_TOOL and call.active else None
        await call.answered(is_error=bool(result.isError), outcome=outcome, body=body)
        return result

    async def call_tool(
        self, name: str, args: Mapping[str, Any], *, tool_call_id: str
    ) -> ToolMessage:
        """Call a catalog tool as the model would: profile guard, argument scrub, one session.

        Returns:
            The adapters' ``ToolMessage`` (content blocks; ``artifact["structured_content"]``
            holds structuredContent; ``status="error"`` for an MCP error result).

        Raises:
            ToolNotInProfileError: ``name`` is outside the catalog; nothing was sent.
            AlgentaGraphError: the connection is not open (or was opened in another event
                loop), or ``args`` is not a mapping.
        """
        self._check_open()
        tool = self._tools.get(name)
        if tool is None:
            raise ToolNotInProfileError(name, self.profile.name)
        if not isinstance(args, Mapping):
            raise AlgentaGraphError(f"arguments of {name!r} must be an object, got {args!r}")
        scope = engine_calls.CallScope(tool_call_id=tool_call_id)
        token = engine_calls.CALL_SCOPE.set(scope)
        try:
            message = await tool.ainvoke(
                {"type": "tool_call", "name": name, "args": dict(args), "id": tool_call_id}
            )
        finally:
            engine_calls.CALL_SCOPE.reset(token)
        if not isinstance(message, ToolMessage):  # pragma: no cover - the adapters' contract
            raise AlgentaGraphError(f"tool {name!r} returned {type(message).__name__}")
        if scope.instrumented:
            # the trace context the call went under, in checkpointed state: a run hours later
            # (an operator's answer) links to it and times the decision
            stamp = {"traceparent": scope.traceparent, "at": engine_calls.now_iso()}
            artifact = message.artifact if isinstance(message.artifact, Mapping) else {}
            message.artifact = {**artifact, TRACE_ARTIFACT_KEY: stamp}
        return message

    async def _raw_call(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        self._engine_url(name)
        return await self._send(self._server(ALGENTA_SERVER), name, arguments)

    async def execute_as_operator(
        self, decision_id: str, webhook_url: str, **flags: Unpack[OperatorFlags]
    ) -> ExecutionOutcome:
        """The operator path: ``execute_decision`` with the flags an operator approved.

        Not a tool and never bound to a model; it bypasses the scrub (and the profile) and
        returns the parsed outcome.

        Args:
            decision_id: the decision to execute.
            webhook_url: where the engine delivers it.
            **flags: :class:`~algenta_graph.connection.client.OperatorFlags` (``force``,
                ``override_safety``, ``timeout_seconds``, ``metadata``, and ``extra``: the
                graph-supplied arguments, idempotency key and nonce).

        Raises:
            ValueError: ``decision_id`` or ``webhook_url`` is not a non-empty string.
            TypeError: an option :class:`~algenta_graph.connection.client.OperatorFlags` does
                not name.
            OperatorCredentialMissing: an override (``force`` / ``override_safety``) without an
                operator credential (``operator_api_key``) nor ``operator_key_is_agent_key``;
                nothing was sent.
            NoEngine: the connection has no engine; nothing was sent.
            EngineConnectionError: a connection problem.
        """
        check_operator_flags(flags)
        url = self._engine_url("the operator path (execute_decision)")
        if not isinstance(decision_id, str) or not decision_id:
            raise ValueError(f"decision_id must be a non-empty string, got {decision_id!r}")
        if not isinstance(webhook_url, str) or not webhook_url:
            raise ValueError(f"webhook_url must be a non-empty string, got {webhook_url!r}")
        arguments: dict[str, Any] = {
            "decision_id": decision_id,
            "webhook_url": webhook_url,
            "force": bool(flags.get("force", False)),
            "override_safety": bool(flags.get("override_safety", False)),
        }
        timeout_seconds, metadata = flags.get("timeout_seconds"), flags.get("metadata")
        if timeout_seconds is not None:
            arguments["timeout_seconds"] = timeout_seconds
        if metadata is not None:
            arguments["metadata"] = dict(metadata)
        arguments.update(flags.get("extra") or {})
        own = OPERATOR_SERVER in self._servers
        server = self._server(OPERATOR_SERVER if own else ALGENTA_SERVER)
        if (
            not own
            and not self.operator_key_is_agent_key
            and (arguments["force"] or arguments["override_safety"])
        ):
            raise OperatorCredentialMissing(
                f"the override of decision {decision_id} was not sent: this connection to "
                f"{without_credentials(url)} has no operator credential, and the "
                "model-facing key never carries an override. Set operator_api_key= (or "
                f"{ENV_OPERATOR_API_KEY}) to an engine key with the operator role; for a "
                "relaxed local engine whose one key is also the operator credential, pass "
                "operator_key_is_agent_key=True"
            )
        return parse_execution_outcome(
            await self._send(server, EXECUTE_TOOL, arguments, operator=True)
        )

    async def get_decision(self, decision_id: str) -> dict[str, Any]:
        """The engine's record of a decision and its executions.

        Internal and read-only, outside the profile guard.

        Raises:
            NoEngine: the connection has no engine.
            AlgentaGraphError: the engine answered with an error.
        """
        url = self._engine_url(GET_DECISION_TOOL)
        result = await self._raw_call(GET_DECISION_TOOL, {"decision_id": decision_id})
        body = tool_result_json(result)
        if result.isError or not isinstance(body, Mapping) or "error" in body:
            detail = json.dumps(body, default=str) if body is not None else "no JSON body"
            raise AlgentaGraphError(
                f"get_decision({decision_id!r}) on {without_credentials(url)} failed: "
                f"{detail[:500]}"
            )
        return dict(body)
