"""Replay manifests of executions, and replaying one: the same seeded computation, byte for byte.

The result of an execution is the plan it executed, as canonical JSON; a manifest holds the
inputs that compute it and nothing computed, so ``POST /v1/replays`` re-runs it on any engine.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import algenta_graph
from algenta_graph.engine import packs
from algenta_graph.engine.api.common import (
    ApiError,
    Id,
    caller_key,
    endpoint,
    execution_or_404,
    read_body,
)
from algenta_graph.engine.auth import KeyRing
from algenta_graph.engine.concurrency import off_loop
from algenta_graph.engine.contract import ENGINE_NAME
from algenta_graph.engine.errors import EngineToolError
from algenta_graph.engine.store import Store

REPLAY_MANIFEST_VERSION = "1"


class ReplayBody(BaseModel):
    """The body of ``POST /v1/replays``: a replay manifest (other fields are ignored)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    manifest_version: Literal["1"]
    inputs: dict[str, Any]
    policy_snapshot_id: Annotated[str, Field(min_length=1, max_length=200)]
    result_sha256: Annotated[str | None, Field(max_length=100)] = None
    execution_id: Id | None = None


def replay_routes(store: Store, keys: KeyRing | None) -> list[Route]:
    """The routes of replay manifests and replays, for one engine.

    Args:
        store: the engine's store.
        keys: the engine's API keys (None: none).
    """

    @endpoint
    async def replay_manifest(request: Request) -> Response:
        execution = await execution_or_404(request, store, keys)
        plan = None
        if execution.get("plan_hash"):
            plan = await off_loop(store.get_plan, execution["plan_hash"])
        if plan is None:
            raise ApiError(
                409,
                "not_replayable",
                f"execution {execution['execution_id']} ran a decision logged without a plan:"
                " there is no computation to re-run",
            )
        result = packs.canonical(plan)
        return JSONResponse(
            {
                "manifest_version": REPLAY_MANIFEST_VERSION,
                "execution_id": execution["execution_id"],
                "decision_id": execution["decision_id"],
                "plan_id": execution.get("plan_id"),
                "plan_hash": execution["plan_hash"],
                "engine": ENGINE_NAME,
                "engine_version": algenta_graph.__version__,
                "computation": "the plan of the execution, recomputed from its inputs (seeded)",
                "inputs": packs.replay_inputs(plan),
                "policy_snapshot_id": plan["policy_snapshot_id"],
                "result_sha256": hashlib.sha256(result).hexdigest(),
                "result_bytes": len(result),
                "replay_at": "POST /v1/replays",
            }
        )

    @endpoint
    async def replay(request: Request) -> Response:
        caller_key(request, keys)
        manifest = await read_body(request, ReplayBody)
        try:
            plan = await off_loop(
                packs.compute_plan,
                manifest.inputs,
                policy_snapshot_id=manifest.policy_snapshot_id,
            )
        except (packs.PackInputError, EngineToolError, KeyError, TypeError, ValueError) as exc:
            what = exc.message if isinstance(exc, EngineToolError) else str(exc)
            raise ApiError(
                422, "invalid_manifest", f"the manifest's inputs cannot be re-run: {what}"
            ) from None
        result = packs.canonical(plan)
        digest = hashlib.sha256(result).hexdigest()
        headers = {
            "X-Content-SHA256": digest,
            "X-Replay-Matches": str(digest == manifest.result_sha256).lower(),
        }
        if manifest.execution_id:
            headers["X-Replay-Of"] = manifest.execution_id
        return Response(result, media_type="application/json", headers=headers)

    return [
        Route("/v1/executions/{execution_id}/replay-manifest", replay_manifest, methods=["GET"]),
        Route("/v1/replays", replay, methods=["POST"]),
    ]
