"""The out-of-band approval API (HTTP only, never an MCP tool), mirroring the Algenta engine.

- ``POST /v1/decision-plans/{plan_id}/approve`` with ``{"plan_hash": ..., "nonce": ...}`` and an
  operator key (``Authorization: Bearer <token>``): 200 ``{"status": "approved", ...}``.
- ``GET /v1/decision-plans/{plan_id}`` (operator key): the plan, its state, plan_hash and nonce.

Errors are ``{"error": {"code": ..., "message": ...}}``: 401 ``unauthorized`` (no or unknown
key), 403 ``role_not_permitted`` (not an operator), 400 ``invalid_request`` (body), 404
``plan_not_found``, 403 ``plan_hash_mismatch``, 403 ``invalid_nonce``, 409
``plan_not_approvable`` (already approved or executed).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from algenta_graph.engine.auth import ApiKey, KeyRing, request_token
from algenta_graph.engine.store import Store

logger = logging.getLogger("algenta_graph.engine")

PLAN_PATH = "/v1/decision-plans/{plan_id}"
APPROVE_STATUS = {
    "plan_not_found": 404,
    "plan_hash_mismatch": 403,
    "invalid_nonce": 403,
    "plan_not_approvable": 409,
}
_MESSAGES = {
    "plan_not_found": "no plan with this plan_id",
    "plan_hash_mismatch": "plan_hash is not the hash of this plan",
    "invalid_nonce": "nonce is not this plan's nonce",
    "plan_not_approvable": "the plan is not in state proposed (already approved or executed)",
}


def error(status: int, code: str, message: str, **headers: str) -> JSONResponse:
    """A refusal: ``{"error": {"code", "message"}}`` with ``status`` (and ``headers``)."""
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def unauthorized(message: str) -> JSONResponse:
    """A 401 ``unauthorized`` refusal, with ``WWW-Authenticate: Bearer``."""
    return error(401, "unauthorized", message, **{"www-authenticate": 'Bearer realm="algenta"'})


def _operator(request: Request, keys: KeyRing | None) -> ApiKey | JSONResponse:
    """The request's operator key, or the refusal to answer (401, or 403 without the role)."""
    if not keys:
        return unauthorized(
            "approving a plan needs an operator key, and this engine has no API keys"
            " (start it with --keys-file, or --api-key)"
        )
    key = keys.lookup(request_token(dict(request.scope["headers"])))
    if key is None:
        return unauthorized(
            "needs the header Authorization: Bearer <operator key> (or X-API-Key: <operator key>)"
        )
    if not key.has("operator"):
        return error(
            403,
            "role_not_permitted",
            f"approving a plan needs the operator role; the key of {key.identity!r} has"
            f" {', '.join(sorted(key.roles))}",
        )
    return key


Endpoint = Callable[[Request], Awaitable[Response]]


def approval_routes(store: Store, keys: KeyRing | None) -> list[tuple[str, list[str], Endpoint]]:
    """The approval API's routes for one engine: ``(path, methods, endpoint)``."""

    async def approve(request: Request) -> JSONResponse:
        plan_id = request.path_params["plan_id"]
        key = _operator(request, keys)
        if isinstance(key, JSONResponse):
            logger.info("approve %s refused: HTTP %d", plan_id, key.status_code)
            return key
        try:
            payload: Any = json.loads(await request.body())
        except (ValueError, RecursionError):
            payload = None
        fields = ("plan_hash", "nonce")
        if not isinstance(payload, dict) or not all(
            isinstance(payload.get(f), str) and payload[f] for f in fields
        ):
            return error(
                400,
                "invalid_request",
                'the body must be a JSON object {"plan_hash": "<sha256:...>", "nonce": "<...>"}'
                " with both from plan_decision",
            )
        outcome = await anyio.to_thread.run_sync(
            lambda: store.approve_plan(
                plan_id=plan_id,
                plan_hash=payload["plan_hash"],
                nonce=payload["nonce"],
                identity=key.identity,
            )
        )
        logger.info("approve %s by %s -> %s", plan_id, key.identity, outcome)
        if outcome != "approved":
            return error(APPROVE_STATUS[outcome], outcome, _MESSAGES[outcome])
        row = await anyio.to_thread.run_sync(store.proposal, plan_id)
        assert row is not None
        return JSONResponse(
            {
                "status": "approved",
                "lifecycle_state": "approved",
                "plan_id": plan_id,
                "plan_hash": row["plan_hash"],
                "approved_by": row["approved_by"],
                "approved_at": row["approved_at"],
            }
        )

    async def show(request: Request) -> JSONResponse:
        plan_id = request.path_params["plan_id"]
        key = _operator(request, keys)
        if isinstance(key, JSONResponse):
            return key
        row = await anyio.to_thread.run_sync(store.proposal, plan_id)
        if row is None:
            return error(404, "plan_not_found", _MESSAGES["plan_not_found"])
        plan = await anyio.to_thread.run_sync(store.get_plan, row["plan_hash"])
        return JSONResponse({**row, "lifecycle_state": row["state"], "plan": plan})

    return [(PLAN_PATH + "/approve", ["POST"], approve), (PLAN_PATH, ["GET"], show)]
