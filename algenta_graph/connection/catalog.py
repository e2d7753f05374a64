"""The governed catalog built from the servers' tool lists (``load_mcp_tools`` over a view).

Each server's tools are listed through a view that ``load_mcp_tools`` takes for the session:
the engine's tools are kept only when the profile admits them, every schema is scrubbed of
``force`` / ``override_safety`` (and ``execute_decision``'s of the graph-supplied fields, which
the engine is then known to declare), and every call goes through
:class:`~algenta_graph.governance.scrub.GovernanceInterceptor` and the connection's own send
(so the tools keep working after a reconnect). An extra server's tools keep their names,
prefixed ``<server>_`` only when the name is taken; a server whose name holds a dot is refused
(tool rules name a tool ``server.name``). This module builds the catalog once; it holds no
session and sends nothing itself (:mod:`algenta_graph.connection.engine`).

:func:`gate_catalog` is the catalog as the tool gates see it (each tool's server, real MCP name,
input schema and ``destructiveHint``), from any connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from langchain_core.tools import BaseTool
from langchain_mcp_adapters.tools import load_mcp_tools
from mcp.types import (
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    RequestParams,
    Tool,
)

from algenta_graph.connection.client import EXECUTE_TOOL, SEARCH_TOOL, EngineClient
from algenta_graph.connection.transport import ALGENTA_SERVER, OPERATOR_SERVER, ServerSession
from algenta_graph.errors import ConfigError, ConfigProblem
from algenta_graph.governance.contract import Profile, load_contract
from algenta_graph.governance.scrub import GovernanceInterceptor, scrub_schema, strip_graph_supplied
from algenta_graph.governance.tool_gates import (
    CatalogTool,
    GateCatalog,
    ToolRef,
    check_server_name,
)
from algenta_graph.telemetry import engine_calls

__all__ = [
    "ENGINE_EXECUTE",
    "Catalog",
    "Send",
    "check_server_names",
    "gate_catalog",
    "load_catalog",
]

ENGINE_EXECUTE = ToolRef(ALGENTA_SERVER, EXECUTE_TOOL)
"""The engine's ``execute_decision``, as tool rules name it (its own gates govern it)."""

_RESERVED_NAMES = frozenset({SEARCH_TOOL})

Send = Callable[[ServerSession, str, dict[str, Any], Any], Awaitable[CallToolResult]]
"""The connection's one tools/call: ``(server, name, arguments, progress_callback)``."""


@dataclass(frozen=True)
class Catalog:
    """The model-facing catalog and what is known of each tool."""

    tools: dict[str, BaseTool]
    """Every catalog tool by its final name."""
    origins: dict[str, tuple[str, str]]
    """``(server, MCP tool name)`` of each tool, before any renaming for a clash."""
    algenta_names: frozenset[str]
    """The engine's own tools (never an extra server's)."""
    advertised: frozenset[str]
    """Every tool name the engine advertised, inside and outside the profile."""
    execute_supplied: frozenset[str]
    """The graph-supplied fields the engine's ``execute_decision`` declares."""


class _SessionView:
    """What ``load_mcp_tools`` sees as the session.

    The server's tool list, filtered and scrubbed, and calls sent over the server's current live
    session (so the tools keep working after a reconnect).
    """

    def __init__(self, server: ServerSession, keep: Callable[[Tool], bool], send: Send) -> None:
        self._server = server
        self._keep = keep
        self._send = send
        self.advertised: list[str] = []
        self.execute_supplied: frozenset[str] = frozenset()

    async def list_tools(self, cursor: str | None = None) -> ListToolsResult:
        call = engine_calls.EngineCall("tools/list", None, self._server.url)
        try:
            with call:
                session = await self._server.session()
                meta = RequestParams.Meta(**call.meta) if call.meta else None
                params = PaginatedRequestParams(cursor=cursor, _meta=meta)
                page = await self._server.guard("listing tools", session.list_tools(params=params))
        except BaseException as exc:
            call.failed(exc)
            raise
        await call.answered(is_error=False)
        self.advertised.extend(t.name for t in page.tools)
        kept = [
            t.model_copy(update={"inputSchema": self._model_facing(t)})
            for t in page.tools
            if self._keep(t)
        ]
        return page.model_copy(update={"tools": kept})

    def _model_facing(self, tool: Tool) -> dict[str, Any]:
        schema = scrub_schema(tool.inputSchema)
        if tool.name == EXECUTE_TOOL and self._server.name == ALGENTA_SERVER:
            schema, self.execute_supplied = strip_graph_supplied(schema)
        return schema

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: timedelta | None = None,
        progress_callback: Any = None,
        **_: Any,
    ) -> CallToolResult:
        return await self._send(self._server, name, arguments or {}, progress_callback)


async def load_catalog(
    servers: Mapping[str, ServerSession], profile: Profile, send: Send
) -> Catalog:
    """The catalog of ``servers``: the engine's tools ``profile`` admits, then the extras'.

    Without an engine session, the extras' alone: nothing is reserved for the engine's names.

    Args:
        servers: the open sessions by server name (the engine's under ``ALGENTA_SERVER``, when
            there is an engine; the operator path's, if any, lends no tools).
        profile: the connection's tool profile.
        send: the connection's tools/call, which every catalog tool calls through.

    Raises:
        EngineConnectionError: a server's tool list could not be read.
        ConfigError: an extra server's name holds a dot (:func:`check_server_names`).
    """
    check_server_names(n for n in servers if n not in (ALGENTA_SERVER, OPERATOR_SERVER))
    catalog: dict[str, BaseTool] = {}
    advertised: frozenset[str] = frozenset()
    execute_supplied: frozenset[str] = frozenset()
    taken = set(_RESERVED_NAMES)
    algenta = servers.get(ALGENTA_SERVER)
    if algenta is not None:
        view = _SessionView(algenta, lambda t: profile.allows(t.name), send)
        tools = await load_mcp_tools(
            # a third-party type too narrow: the adapters name mcp's ClientSession, and call
            # only the list_tools / call_tool that the view implements
            view,  # type: ignore[arg-type]
            tool_interceptors=[GovernanceInterceptor(profile)],
            server_name=ALGENTA_SERVER,
        )
        catalog = {t.name: t for t in tools}
        advertised, execute_supplied = frozenset(view.advertised), view.execute_supplied
        taken |= advertised | set(load_contract().get("mcp_tool_reference", {})) | set(catalog)
    origins = {name: (ALGENTA_SERVER, name) for name in catalog}
    algenta_names = frozenset(catalog)
    for name, server in servers.items():
        if name in (ALGENTA_SERVER, OPERATOR_SERVER):
            continue
        extra_view = _SessionView(server, lambda t: True, send)
        extra_tools = await load_mcp_tools(
            extra_view,  # type: ignore[arg-type]  # ClientSession, as above
            tool_interceptors=[GovernanceInterceptor(None)],
            server_name=name,
        )
        for tool in extra_tools:
            final = tool.name
            origin = (name, tool.name)
            if final in taken:
                final = f"{name}_{tool.name}"
                n = 2
                while final in taken:
                    final, n = f"{name}_{tool.name}_{n}", n + 1
                tool.name = final
            taken.add(final)
            catalog[final] = tool
            origins[final] = origin
    return Catalog(catalog, origins, algenta_names, advertised, execute_supplied)


def check_server_names(names: Iterable[str], key: str = "extra_servers") -> None:
    """Refuse extra servers whose names tool rules could not name (a dot, a space, ...).

    Raises:
        ConfigError: one problem per bad name (``extra_servers.<name>``), saying why.
    """
    problems = []
    for name in names:
        try:
            check_server_name(name)
        except ValueError as exc:
            problems.append(ConfigProblem("the configuration", f"{key}.{name}", str(exc)))
    if problems:
        raise ConfigError(problems)


def _input_schema(tool: BaseTool) -> Mapping[str, Any]:
    schema = tool.args_schema
    if isinstance(schema, Mapping):
        return schema
    try:
        return tool.get_input_jsonschema()
    except Exception:  # a tool whose schema cannot be read: no argument is declared
        return {}


def _destructive(tool: BaseTool, ref: ToolRef) -> bool:
    """Whether its server marks it destructive (MCP tool annotations, kept in ``metadata``).

    Only an explicit ``destructiveHint: true`` (not ``readOnlyHint``) counts; the engine's
    ``execute_decision`` never does: the engine's own gates govern it.
    """
    hints = tool.metadata or {}
    return (
        hints.get("destructiveHint") is True
        and hints.get("readOnlyHint") is not True
        and ref != ENGINE_EXECUTE
    )


def gate_catalog(connection: EngineClient, *, unreachable: Iterable[str] = ()) -> GateCatalog:
    """The live catalog as the tool gates see it (a ``GateCatalog``).

    Each tool's server and real MCP name (``tool_origin``; a tool it reports no origin for is
    the engine's when it is one, else on server ``?``), its input schema and its
    ``destructiveHint``; the engine's tools outside the profile; the extra servers
    ``unreachable`` at start.
    """
    tools = []
    for tool in connection.tools:
        origin = connection.tool_origin(tool.name)
        if origin is not None:
            ref = ToolRef(*origin)
        else:
            ref = ToolRef(
                ALGENTA_SERVER if connection.is_algenta_tool(tool.name) else "?", tool.name
            )
        tools.append(CatalogTool(ref, _input_schema(tool), _destructive(tool, ref)))
    shown = {t.ref for t in tools}
    advertised: frozenset[str] = getattr(connection, "advertised_tool_names", frozenset())
    hidden = frozenset(ToolRef(ALGENTA_SERVER, n) for n in advertised) - shown
    return GateCatalog(tuple(tools), hidden, frozenset(unreachable))
