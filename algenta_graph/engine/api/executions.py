"""Executing a plan over HTTP, and reading an execution back.

``POST /v1/decision-plans/{plan_id}/execute`` runs the plan's decision through the same
:class:`~algenta_graph.engine.execution.Executor` as ``execute_decision`` over MCP; a delivery
that did not succeed is a 502 / 504 with the receipt and ``retryable`` (:data:`DELIVERY_ERRORS`).
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from pydantic import BaseModel, Field, StrictBool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from algenta_graph.engine.api.common import (
    STRICT_BODY,
    ApiError,
    caller_key,
    endpoint,
    execution_or_404,
    read_body,
    require,
)
from algenta_graph.engine.arguments import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_KEY_CHARS,
    MAX_METADATA_BYTES,
    MAX_TIMEOUT_SECONDS,
    MIN_TIMEOUT_SECONDS,
    check_size,
)
from algenta_graph.engine.auth import CALLER, Caller, KeyRing, trace_id
from algenta_graph.engine.concurrency import off_loop
from algenta_graph.engine.contract import APPROVE_PATH
from algenta_graph.engine.delivery import check_webhook_url
from algenta_graph.engine.execution import Executor
from algenta_graph.engine.store import Store

logger = logging.getLogger("algenta_graph.engine")

EXECUTE_PATH = "/v1/decision-plans/{plan_id}/execute"
DELIVERY_ERRORS: dict[str, int] = {
    "upstream_timeout": 504,
    "upstream_unreachable": 502,
    "upstream_rejected": 502,
    "upstream_outcome_unknown": 504,
}
"""The HTTP status of an execution whose delivery did not succeed, by its ``failure_code``."""


class ExecuteBody(BaseModel):
    """The body of ``POST /v1/decision-plans/{plan_id}/execute`` (optional, every field too)."""

    model_config = STRICT_BODY
    webhook_url: Annotated[str | None, Field(min_length=1)] = None
    timeout_seconds: Annotated[float, Field(ge=MIN_TIMEOUT_SECONDS, le=MAX_TIMEOUT_SECONDS)] = (
        DEFAULT_TIMEOUT_SECONDS
    )
    metadata: dict[str, Any] | None = None
    force: StrictBool = False
    override_safety: StrictBool = False


def execution_routes(store: Store, executor: Executor, keys: KeyRing | None) -> list[Route]:
    """The routes that execute a plan and show an execution, for one engine.

    Args:
        store: the engine's store.
        executor: the engine's executor (the one ``execute_decision`` uses).
        keys: the engine's API keys (None: none).
    """

    def idempotency_header(request: Request) -> str | None:
        raw = request.headers.get("idempotency-key")
        if raw is None:
            return None
        value = raw.strip()
        if not value or len(value) > MAX_KEY_CHARS or not value.isprintable():
            raise ApiError(
                400,
                "invalid_idempotency_key",
                f"the Idempotency-Key header must be 1 to {MAX_KEY_CHARS} printable characters",
            )
        return value

    def execution_answer(receipt: dict[str, Any], plan_state: str) -> JSONResponse:
        base = {
            "plan_id": receipt["plan_id"],
            "decision_id": receipt["decision_id"],
            "execution_id": receipt["execution_id"],
            "lifecycle_state": plan_state,
            "receipt": receipt,
        }
        code = receipt.get("failure_code")
        if receipt["status"] == "executed" or code is None:
            return JSONResponse(base)
        return JSONResponse(
            {
                **base,
                "error": {
                    "code": code,
                    "message": receipt["failure_reason"],
                    "retryable": receipt["retryable"],
                    "execution_id": receipt["execution_id"],
                },
            },
            status_code=DELIVERY_ERRORS.get(code, 502),
        )

    @endpoint
    async def execute_plan(request: Request) -> Response:
        plan_id = request.path_params["plan_id"]
        key = caller_key(request, keys)
        body = await read_body(request, ExecuteBody)
        idem = idempotency_header(request)
        if body.metadata is not None:
            check_size("execute", "metadata", body.metadata, MAX_METADATA_BYTES)
        token = CALLER.set(Caller(key=key, trace_id=trace_id(dict(request.scope["headers"]))))
        try:
            who = executor.check_access(override=body.force or body.override_safety)
            proposal = await require("plan", store.proposal, plan_id)
            if idem is not None:
                earlier = await off_loop(store.execution_by_idempotency_key, idem)
                if earlier is not None:
                    stored = earlier["receipt"]
                    if stored.get("plan_id") != plan_id or stored.get("webhook_url") != (
                        body.webhook_url
                    ):
                        raise ApiError(
                            409,
                            "idempotency_key_reused",
                            f"Idempotency-Key {idem[:80]!r} already belongs to another execution"
                            " (another plan or webhook_url): use one key per attempt",
                        )
                    again = await off_loop(store.proposal, plan_id)
                    return execution_answer(
                        {**stored, "idempotent_replay": True}, again["state"] if again else "?"
                    )
            if proposal["state"] != "approved":
                raise ApiError(
                    409,
                    "plan_not_approved",
                    f"plan {plan_id} is {proposal['state']}, not approved: an operator approves it"
                    f" with POST {APPROVE_PATH.format(plan_id=plan_id)}; an executed plan cannot"
                    " run again",
                    lifecycle_state=proposal["state"],
                )
            if proposal["decision_id"] is None:
                raise ApiError(
                    409,
                    "plan_not_logged",
                    f"plan {plan_id} runs no decision yet: log_decision(plan_id={plan_id!r})"
                    " binds one",
                )
            decision = await off_loop(store.get_decision, proposal["decision_id"])
            assert decision is not None  # a proposal is bound to a logged decision
            if decision["plan_id"] != plan_id:  # pragma: no cover - a rebinding needs it spent
                raise ApiError(
                    409,
                    "plan_not_approved",
                    f"decision {decision['decision_id']} runs under plan {decision['plan_id']}",
                )
            if body.webhook_url is not None:
                check_webhook_url(body.webhook_url, allowed_hosts=executor.allow_webhook_hosts)
            receipt = await executor.run(
                decision,
                body.webhook_url,
                identity=who,
                timeout_seconds=body.timeout_seconds,
                force=body.force,
                override_safety=body.override_safety,
                metadata=body.metadata,
                idempotency_key=idem,
                plan=("path", None),
            )
        finally:
            CALLER.reset(token)
        after = await off_loop(store.proposal, plan_id)
        logger.info(
            "execute %s by %s -> %s", plan_id, who, receipt.get("execution_status", "replay")
        )
        return execution_answer(receipt, after["state"] if after else "?")

    @endpoint
    async def show_execution(request: Request) -> Response:
        execution = await execution_or_404(request, store, keys)
        return JSONResponse(
            {
                **execution,
                "replay_manifest_at": f"/v1/executions/{execution['execution_id']}/replay-manifest",
            }
        )

    return [
        Route(EXECUTE_PATH, execute_plan, methods=["POST"]),
        Route("/v1/executions/{execution_id}", show_execution, methods=["GET"]),
    ]
