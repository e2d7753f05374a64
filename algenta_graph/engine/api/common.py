"""What every route of the HTTP API shares: its refusals, request bodies and callers.

Every refusal is :class:`ApiError` (or an engine's
:class:`~algenta_graph.engine.errors.EngineToolError`), answered as JSON by :func:`endpoint`.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from algenta_graph.engine import packs
from algenta_graph.engine.auth import ApiKey, KeyRing, request_token
from algenta_graph.engine.concurrency import off_loop
from algenta_graph.engine.errors import EngineToolError
from algenta_graph.engine.store import Store

logger = logging.getLogger("algenta_graph.engine")


class ApiError(Exception):
    """A refusal of the HTTP API: ``{"error": {"code", "message", **details}}`` with ``status``."""

    def __init__(self, status: int, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details

    def response(self) -> JSONResponse:
        """This refusal as an HTTP answer."""
        return error_response(self.status, self.code, self.message, **self.details)


def error_response(status: int, code: str, message: str, **details: Any) -> JSONResponse:
    """A refusal: ``{"error": {"code", "message", **details}}`` with ``status``.

    A 401 also has ``WWW-Authenticate: Bearer``.
    """
    headers = {"www-authenticate": 'Bearer realm="algenta"'} if status == 401 else None
    body = {"error": {"code": code, "message": message, **details}}
    return JSONResponse(body, status_code=status, headers=headers)


def tool_error(err: EngineToolError) -> JSONResponse:
    """An engine error (a gate denial, ``plan_not_approved``, ...) as an HTTP answer."""
    return JSONResponse(err.body(), status_code=err.status_code)


STRICT_BODY = ConfigDict(extra="forbid", allow_inf_nan=False)
Id = Annotated[str, Field(min_length=1, max_length=200)]


def _problems(exc: ValidationError) -> str:
    """One line naming each problem of a request body."""
    return packs.describe_errors(exc, "")


async def read_body(request: Request, model: type[BaseModel]) -> Any:
    """The request's JSON body validated as ``model`` (an empty body is ``{}``)."""
    raw = await request.body()
    if not raw.strip():
        payload: Any = {}
    else:
        try:
            payload = json.loads(raw)
        except (ValueError, RecursionError):
            raise ApiError(400, "invalid_json", "the request body is not JSON") from None
    if not isinstance(payload, dict):
        raise ApiError(400, "invalid_request", "the request body must be a JSON object")
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise ApiError(400, "invalid_request", _problems(exc)) from None


def caller_key(request: Request, keys: KeyRing | None, role: str | None = None) -> ApiKey | None:
    """The key of the request.

    Args:
        request: the request (``X-API-Key`` or ``Authorization: Bearer``).
        keys: the engine's keys (None: the engine has none).
        role: the role the route needs, if any.

    Returns:
        The key; None when the engine has no keys, unless ``role`` is needed.

    Raises:
        ApiError: 401 ``unauthorized`` for no key or an unknown one, 403
            ``role_not_permitted`` without ``role``.
    """
    if not keys:
        if role is None:
            return None
        raise ApiError(
            401,
            "unauthorized",
            f"this route needs a key with the {role} role, and this engine has no API keys"
            " (start it with --keys-file, or --api-key)",
        )
    key = keys.lookup(request_token(dict(request.scope["headers"])))
    if key is None:
        raise ApiError(
            401,
            "unauthorized",
            "needs the header X-API-Key: <api key> (or Authorization: Bearer <api key>) of a key"
            " of this engine",
        )
    if role is not None and not key.has(role):
        raise ApiError(
            403,
            "role_not_permitted",
            f"this route needs the {role} role; the key of {key.identity!r} has"
            f" {', '.join(sorted(key.roles))}",
        )
    return key


def identity(key: ApiKey | None) -> str | None:
    """The identity of ``key`` (None without one)."""
    return None if key is None else key.identity


Endpoint = Callable[[Request], Awaitable[Response]]


def endpoint(fn: Endpoint) -> Endpoint:
    """Answer every refusal as JSON; an unexpected error is one log line and a JSON 500."""

    @functools.wraps(fn)
    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except ApiError as err:
            logger.info("%s %s -> %d %s", request.method, request.url.path, err.status, err.code)
            return err.response()
        except EngineToolError as err:
            where = f"{request.method} {request.url.path}"
            logger.info("%s -> %d %s", where, err.status_code, err.code)
            return tool_error(err)
        except Exception as exc:
            logger.error("%s %s failed: %r", request.method, request.url.path, exc)
            return error_response(500, "internal_error", f"{type(exc).__name__}: {exc}")

    return wrapped


async def require(kind: str, getter: Callable[[str], Any], key: str) -> Any:
    """The record ``getter(key)`` finds, or 404 ``<kind>_not_found``."""
    found = await off_loop(getter, key)
    if found is None:
        raise ApiError(404, f"{kind}_not_found", f"no {kind.replace('_', ' ')} {key!r}")
    return found


async def execution_or_404(request: Request, store: Store, keys: KeyRing | None) -> dict[str, Any]:
    """The execution the path names (any key), or 404 ``execution_not_found``."""
    caller_key(request, keys)
    found: dict[str, Any] = await require(
        "execution", store.execution, request.path_params["execution_id"]
    )
    return found
