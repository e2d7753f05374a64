"""The ASGI app of the Algenta HTTP API (``/v1/...``): every route, every answer JSON."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from algenta_graph.engine.api.approvals import approval_routes
from algenta_graph.engine.api.audit import audit_routes
from algenta_graph.engine.api.cases import case_routes
from algenta_graph.engine.api.common import endpoint, error_response
from algenta_graph.engine.api.executions import execution_routes
from algenta_graph.engine.api.replay import replay_routes
from algenta_graph.engine.auth import KeyRing
from algenta_graph.engine.execution import Executor
from algenta_graph.engine.store import Store


def api_routes(store: Store, executor: Executor, keys: KeyRing | None) -> list[Route]:
    """The HTTP API's routes for one engine (the approval routes included), in order.

    Args:
        store: the engine's store.
        executor: the engine's executor (with its policy).
        keys: the engine's API keys (None: none).
    """
    approvals = [
        Route(path, endpoint(fn), methods=methods)
        for path, methods, fn in approval_routes(store, keys)
    ]
    return [
        *case_routes(store, executor.policy, keys),
        *approvals,
        *execution_routes(store, executor, keys),
        *replay_routes(store, keys),
        *audit_routes(store, keys),
    ]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return error_response(
            405, "method_not_allowed", f"{request.method} is not allowed on {request.url.path}"
        )
    if exc.status_code == 404:
        return error_response(404, "not_found", f"no route {request.url.path}")
    return error_response(exc.status_code, "http_error", str(exc.detail))


def api_app(store: Store, executor: Executor, keys: KeyRing | None) -> Starlette:
    """The ASGI app of ``/v1/...``: every answer JSON, unknown routes and methods included.

    Args:
        store: the engine's store.
        executor: the engine's executor (the one ``execute_decision`` uses).
        keys: the engine's API keys (None: none).
    """
    return Starlette(
        routes=api_routes(store, executor, keys),
        exception_handlers={HTTPException: _http_error},
    )
