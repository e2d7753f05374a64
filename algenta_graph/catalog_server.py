"""A generated MCP server with a large tool catalog, for large-catalog demos and benchmarks.

:class:`CatalogServer` serves ``size`` deterministic, realistic-looking tools
(``crm_search_contacts``, ``billing_reject_invoices``, ...) over MCP streamable HTTP on a free
local port. Every tool has a description and a JSON input schema; calling one validates the
arguments against its schema and echoes them back as structured content, so a large catalog can
be connected as an extra server next to an Algenta engine without writing ten thousand tools.

    >>> from algenta_graph.catalog_server import generate_tools
    >>> tools = generate_tools(10_000)
    >>> len(tools), len({t.name for t in tools}), tools[0].name
    (10000, 10000, 'crm_search_contacts')

Run it::

    with CatalogServer(size=10_000) as catalog:
        extra_servers = {"catalog": {"transport": "streamable_http", "url": catalog.url}}
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from itertools import islice, product
from typing import Any

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.routing import Mount

from algenta_graph._net import free_port
from algenta_graph._serve import BackgroundServer, BackgroundService

__all__ = ["MAX_SIZE", "CatalogServer", "generate_tools"]

_DOMAINS = (
    ("crm", "customer relationship records"),
    ("billing", "invoices, payments and refunds"),
    ("inventory", "stock levels across warehouses"),
    ("hr", "employee records and payroll"),
    ("logistics", "shipments and carriers"),
    ("marketing", "campaigns and audiences"),
    ("support", "help-desk tickets"),
    ("finance", "the general ledger"),
    ("security", "access control and audit trails"),
    ("analytics", "dashboards and metrics"),
    ("devops", "deployments and infrastructure"),
    ("legal", "contracts and compliance documents"),
    ("procurement", "suppliers and purchase orders"),
    ("facilities", "buildings, rooms and maintenance"),
    ("sales", "pipeline deals and quotes"),
    ("iot", "connected devices and telemetry"),
    ("calendar", "meetings and schedules"),
    ("storage", "files and buckets"),
    ("messaging", "email and chat channels"),
    ("research", "experiments and lab notebooks"),
)
_VERBS = (
    ("search", "Search {entity} in {area} by free-text query and filters."),
    ("get", "Fetch one {entity_1} from {area} by its id."),
    ("create", "Create a new {entity_1} in {area}."),
    ("update", "Update fields of an existing {entity_1} in {area}."),
    ("delete", "Delete a {entity_1} from {area} (soft delete, recoverable for 30 days)."),
    ("list", "List {entity} in {area}, newest first, with pagination."),
    ("export", "Export {entity} from {area} as CSV or JSON."),
    ("import", "Import {entity} into {area} from a CSV or JSON file URL."),
    ("archive", "Archive a {entity_1} in {area} so it no longer appears in listings."),
    ("restore", "Restore an archived or deleted {entity_1} in {area}."),
    ("count", "Count {entity} in {area} matching filters."),
    ("summarize", "Summarize recent activity on {entity} in {area}."),
    ("validate", "Validate a {entity_1} in {area} against its schema and business rules."),
    ("approve", "Approve a pending {entity_1} in {area}."),
    ("reject", "Reject a pending {entity_1} in {area} with a reason."),
    ("assign", "Assign a {entity_1} in {area} to a user or team."),
    ("tag", "Add or remove tags on a {entity_1} in {area}."),
    ("comment", "Add a comment to a {entity_1} in {area}."),
    ("watch", "Subscribe to change notifications for a {entity_1} in {area}."),
    ("forecast", "Forecast future volume of {entity} in {area} from history."),
    ("merge", "Merge duplicate {entity} in {area} into one record."),
    ("schedule", "Schedule a future action on a {entity_1} in {area}."),
    ("audit", "Show the audit history of a {entity_1} in {area}."),
    ("share", "Share a {entity_1} in {area} with another user or team."),
    ("lock", "Lock a {entity_1} in {area} against further edits."),
)
_ENTITIES = (
    "contacts",
    "invoices",
    "orders",
    "tickets",
    "reports",
    "accounts",
    "assets",
    "documents",
    "events",
    "tasks",
    "policies",
    "vendors",
    "budgets",
    "alerts",
    "projects",
    "users",
    "records",
    "notes",
    "workflows",
    "templates",
)
MAX_SIZE = len(_DOMAINS) * len(_VERBS) * len(_ENTITIES)
"""The largest catalog :func:`generate_tools` can build (10,000 distinct tools)."""

_BY_VERB: dict[str, dict[str, Any]] = {
    "search": {
        "query": {"type": "string", "description": "Free-text search query."},
        "limit": {"type": "integer", "description": "Maximum results.", "default": 20},
    },
    "list": {
        "page": {"type": "integer", "description": "Page number, from 1.", "default": 1},
        "page_size": {"type": "integer", "description": "Items per page.", "default": 50},
    },
    "create": {"fields": {"type": "object", "description": "Field values of the new record."}},
    "update": {"fields": {"type": "object", "description": "Field values to change."}},
    "export": {"format": {"type": "string", "enum": ["csv", "json"], "default": "csv"}},
    "import": {"file_url": {"type": "string", "description": "URL of the file to import."}},
    "reject": {"reason": {"type": "string", "description": "Why it was rejected."}},
    "assign": {"assignee": {"type": "string", "description": "User or team to assign to."}},
    "tag": {"tags": {"type": "array", "items": {"type": "string"}, "description": "Tags."}},
    "comment": {"text": {"type": "string", "description": "The comment text."}},
    "forecast": {"horizon_days": {"type": "integer", "description": "Days ahead."}},
    "schedule": {"run_at": {"type": "string", "description": "ISO 8601 time to run at."}},
    "share": {"with_user": {"type": "string", "description": "User or team to share with."}},
}
_REQUIRED_BY_VERB = {
    "search": ["query"],
    "create": ["fields"],
    "import": ["file_url"],
    "reject": ["reason"],
    "assign": ["assignee"],
    "tag": ["tags"],
    "comment": ["text"],
    "share": ["with_user"],
}
_COLLECTION_VERBS = {
    "search",
    "list",
    "export",
    "import",
    "count",
    "summarize",
    "forecast",
    "merge",
}


def _tool(domain: str, area: str, verb: str, template: str, entity: str) -> types.Tool:
    singular = entity[:-1] if entity.endswith("s") else entity
    properties: dict[str, Any] = {}
    required: list[str] = []
    if verb not in _COLLECTION_VERBS:
        properties[f"{singular}_id"] = {"type": "string", "description": f"The {singular}'s id."}
        required.append(f"{singular}_id")
    properties.update(_BY_VERB.get(verb, {}))
    required.extend(_REQUIRED_BY_VERB.get(verb, []))
    return types.Tool(
        name=f"{domain}_{verb}_{entity}",
        description=template.format(entity=entity, entity_1=singular, area=f"{domain} ({area})"),
        inputSchema={
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
    )


def generate_tools(size: int = MAX_SIZE) -> list[types.Tool]:
    """The first ``size`` tools of the generated catalog: deterministic, distinct names.

    Raises ``ValueError`` when ``size`` is not between 1 and :data:`MAX_SIZE`.
    """
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_SIZE:
        raise ValueError(f"size must be an integer from 1 to {MAX_SIZE}, not {size!r}")
    combos = islice(product(_DOMAINS, _ENTITIES, _VERBS), size)
    return [
        _tool(domain, area, verb, tpl, entity) for (domain, area), entity, (verb, tpl) in combos
    ]


def _mcp_server(tools: list[types.Tool]) -> Server[Any, Any]:
    server: Server[Any, Any] = Server("algenta-graph-catalog")
    known = {t.name for t in tools}

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return tools

    @server.call_tool()
    async def call_tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if name not in known:
            raise ValueError(f"unknown tool {name!r}")
        return {"tool": name, "arguments": arguments, "ok": True}

    return server


class CatalogServer(BackgroundService):
    """Serve :func:`generate_tools` ``(size)`` over MCP streamable HTTP in a background thread.

    A sync and async context manager; ``url`` is ``http://HOST:PORT/mcp``. ``stop()`` shuts the
    server down and joins its thread.
    """

    def __init__(self, size: int = MAX_SIZE, *, host: str = "127.0.0.1", port: int | None = None):
        self.tools = generate_tools(size)
        self.host = host
        self.port = port or free_port(host)
        self._server: BackgroundServer | None = None

    @property
    def url(self) -> str:
        """The MCP endpoint."""
        return f"http://{self.host}:{self.port}/mcp"

    def _app(self) -> Starlette:
        manager = StreamableHTTPSessionManager(
            app=_mcp_server(self.tools), stateless=True, json_response=True
        )

        async def handle(scope: Any, receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

        @contextlib.asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            async with manager.run():
                yield

        return Starlette(routes=[Mount("/mcp", app=handle)], lifespan=lifespan)

    def start(self) -> CatalogServer:
        """Start serving; returns once the port accepts connections."""
        if self._server is not None:
            raise RuntimeError("CatalogServer is already running")
        self._server = BackgroundServer(
            self._app(), host=self.host, port=self.port, name=f"catalog-server-{self.port}"
        )
        self._server.start()
        return self
