"""The Algenta HTTP API of the reference engine: decision cases, analysis runs, action plans, the
approval and execution of a plan, executions and their replay, and the audit export.

One engine over one store with the MCP tools: a plan proposed here is a plan proposal like
``plan_decision``'s (the governed graph can execute its decision over MCP with its nonce), and a
decision executed either way counts for the idempotency gate the other way.

Every answer is JSON; every refusal is ``{"error": {"code", "message", ...}}`` with a 4xx status
(a failed delivery of an execution: 502 / 504 with ``retryable``), never a traceback, and bad
input writes nothing. A request presents its API key as ``Authorization: Bearer <token>`` or
``X-API-Key: <token>`` (same keys, same roles). The routes, their codes and what the reference
engine chose where the public runner and the contract are silent are in
``algenta_graph/engine/README.md``, "The Algenta HTTP API".
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import logging
import secrets
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import algenta_graph
from algenta_graph.engine import packs
from algenta_graph.engine.approvals import approval_routes
from algenta_graph.engine.arguments import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_KEY_CHARS,
    MAX_METADATA_BYTES,
    MAX_TIMEOUT_SECONDS,
    MIN_TIMEOUT_SECONDS,
    check_size,
)
from algenta_graph.engine.auth import CALLER, ApiKey, Caller, KeyRing, request_token, trace_id
from algenta_graph.engine.contract import APPROVE_PATH
from algenta_graph.engine.delivery import check_webhook_url
from algenta_graph.engine.errors import EngineToolError
from algenta_graph.engine.planning import binding_error
from algenta_graph.engine.policy import policy_check
from algenta_graph.engine.store import Store
from algenta_graph.engine.store.audit import AUDIT_COLUMNS
from algenta_graph.engine.store.base import utc_now
from algenta_graph.engine.store.decisions import BindingRefused
from algenta_graph.engine.tools import GovernedTools

logger = logging.getLogger("algenta_graph.engine")

EXECUTE_PATH = "/v1/decision-plans/{plan_id}/execute"
REPLAY_MANIFEST_VERSION = "1"
EXPORT_FORMATS: dict[str, str] = {
    "json": "application/json",
    "jsonl": "application/x-ndjson",
    "csv": "text/csv; charset=utf-8",
}
DELIVERY_ERRORS: dict[str, int] = {
    "upstream_timeout": 504,
    "upstream_unreachable": 502,
    "upstream_rejected": 502,
    "upstream_outcome_unknown": 504,
}
"""The HTTP status of an execution whose delivery did not succeed, by its ``failure_code``."""


class ApiError(Exception):
    """A refusal of the HTTP API: ``{"error": {"code", "message", **details}}`` with ``status``."""

    def __init__(self, status: int, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details

    def response(self) -> JSONResponse:
        return error_response(self.status, self.code, self.message, **self.details)


def error_response(status: int, code: str, message: str, **details: Any) -> JSONResponse:
    headers = {"www-authenticate": 'Bearer realm="algenta"'} if status == 401 else None
    body = {"error": {"code": code, "message": message, **details}}
    return JSONResponse(body, status_code=status, headers=headers)


def tool_error(err: EngineToolError) -> JSONResponse:
    """An engine error (a gate denial, ``plan_not_approved``, ...) as an HTTP answer."""
    return JSONResponse(err.body(), status_code=err.status_code)


# -- request bodies ------------------------------------------------------------------------------

_BODY = ConfigDict(extra="forbid", allow_inf_nan=False)
Id = Annotated[str, Field(min_length=1, max_length=200)]


class CaseBody(BaseModel):
    model_config = _BODY
    pack_id: Annotated[str, Field(min_length=1, max_length=100)]
    title: Annotated[str | None, Field(max_length=500)] = None
    pack_input: Any = None


class RunBody(BaseModel):
    model_config = _BODY
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = packs.DEFAULT_SEED
    n_samples: Annotated[int, Field(ge=100, le=packs.MAX_PACK_SAMPLES)] = packs.DEFAULT_SAMPLES


class PlanBody(BaseModel):
    model_config = _BODY
    chosen_action: Annotated[str | None, Field(min_length=1, max_length=200)] = None
    decision_id: Id | None = None


class ExecuteBody(BaseModel):
    model_config = _BODY
    webhook_url: Annotated[str | None, Field(min_length=1)] = None
    timeout_seconds: Annotated[float, Field(ge=MIN_TIMEOUT_SECONDS, le=MAX_TIMEOUT_SECONDS)] = (
        DEFAULT_TIMEOUT_SECONDS
    )
    metadata: dict[str, Any] | None = None
    force: StrictBool = False
    override_safety: StrictBool = False


class ReplayBody(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    manifest_version: Literal["1"]
    inputs: dict[str, Any]
    policy_snapshot_id: Annotated[str, Field(min_length=1, max_length=200)]
    result_sha256: Annotated[str | None, Field(max_length=100)] = None
    execution_id: Id | None = None


def _problems(exc: ValidationError) -> str:
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


# -- who is calling ------------------------------------------------------------------------------


def caller_key(request: Request, keys: KeyRing | None, role: str | None = None) -> ApiKey | None:
    """The key of the request (None when the engine has no keys, unless ``role`` is needed):
    401 ``unauthorized`` for no key or an unknown one, 403 ``role_not_permitted`` without
    ``role``."""
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


# -- the routes ----------------------------------------------------------------------------------


def api_routes(store: Store, governed: GovernedTools, keys: KeyRing | None) -> list[Route]:
    """The HTTP API's routes for one engine (the approval routes included)."""

    async def off(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

    async def require(table: str, getter: Callable[[str], Any], key: str) -> Any:
        found = await off(getter, key)
        if found is None:
            raise ApiError(404, f"{table}_not_found", f"no {table.replace('_', ' ')} {key!r}")
        return found

    def run_view(run: dict[str, Any]) -> dict[str, Any]:
        result = run["result"]
        return {
            "run_id": run["run_id"],
            "case_id": run["case_id"],
            "status": "completed",
            "seed": run["seed"],
            "n_samples": run["n_samples"],
            "result": result,
            "result_sha256": hashlib.sha256(packs.canonical(result)).hexdigest(),
            "created_at": run["created_at"],
            "created_by": run["created_by"],
            "action_plans_at": f"/v1/analysis-runs/{run['run_id']}/action-plans",
        }

    async def case_view(case: dict[str, Any]) -> dict[str, Any]:
        plans = await off(store.plans_of_case, case["case_id"])
        runs = await off(store.runs_of_case, case["case_id"])
        return {
            **case,
            "lifecycle_state": plans[-1]["state"] if plans else "open",
            "analysis_runs": runs,
            "plans": plans,
        }

    @endpoint
    async def create_case(request: Request) -> Response:
        key = caller_key(request, keys)
        body = await read_body(request, CaseBody)
        if body.pack_id not in packs.PACK_IDS:
            raise ApiError(
                400,
                "unknown_pack",
                f"unknown pack_id {body.pack_id!r}; packs: {', '.join(packs.PACK_IDS)}",
            )
        try:
            normalised = await off(packs.normalise, body.pack_id, body.pack_input)
        except packs.PackInputError as exc:
            raise ApiError(422, "invalid_pack_input", str(exc)) from None
        case = {
            "case_id": f"case_{uuid.uuid4().hex[:20]}",
            "pack_id": body.pack_id,
            "title": body.title,
            "pack_input": normalised,
            "created_at": utc_now(),
        }
        await off(store.create_case, case, actor=identity(key))
        stored = await off(store.case, case["case_id"])
        return JSONResponse(await case_view(stored), status_code=201)

    @endpoint
    async def show_case(request: Request) -> Response:
        caller_key(request, keys)
        case = await require("case", store.case, request.path_params["case_id"])
        return JSONResponse(await case_view(case))

    @endpoint
    async def create_run(request: Request) -> Response:
        key = caller_key(request, keys)
        case = await require("case", store.case, request.path_params["case_id"])
        body = await read_body(request, RunBody)
        try:
            result = await off(
                packs.analyse,
                case["pack_id"],
                case["pack_input"],
                seed=body.seed,
                n_samples=body.n_samples,
            )
        except packs.PackInputError as exc:
            raise ApiError(422, "invalid_pack_input", str(exc)) from None
        run = {
            "run_id": f"run_{uuid.uuid4().hex[:20]}",
            "case_id": case["case_id"],
            "seed": body.seed,
            "n_samples": body.n_samples,
            "result": result,
            "created_at": utc_now(),
        }
        await off(store.create_run, run, actor=identity(key))
        return JSONResponse(run_view({**run, "created_by": identity(key)}), status_code=201)

    @endpoint
    async def show_run(request: Request) -> Response:
        caller_key(request, keys)
        run = await require("run", store.run, request.path_params["run_id"])
        return JSONResponse(run_view(run))

    @endpoint
    async def create_plan(request: Request) -> Response:
        key = caller_key(request, keys)
        run = await require("run", store.run, request.path_params["run_id"])
        body = await read_body(request, PlanBody)
        case = await off(store.case, run["case_id"])
        plan = packs.plan_of(
            case["pack_id"],
            case["pack_input"],
            run["result"],
            chosen_action=body.chosen_action,
            policy_snapshot_id=governed.policy.snapshot_id,
        )
        plan_hash = packs.plan_hash(plan)
        plan_id = f"plan_{uuid.uuid4().hex[:20]}"
        nonce = secrets.token_urlsafe(24)
        new_decision = None
        if body.decision_id is None:
            new_decision = {
                "decision_id": f"dec_{uuid.uuid4().hex[:20]}",
                "chosen_action": plan["chosen_action"],
                "expected_value": plan["expected_value"],
                "confidence": plan["confidence"],
                "risk_p5": plan["risk_p5"],
                "risk_p95": plan["risk_p95"],
                "rationale": f"action plan of analysis run {run['run_id']} ({case['pack_id']})",
                "scenario": {
                    "case_id": case["case_id"],
                    "run_id": run["run_id"],
                    "pack_id": case["pack_id"],
                },
                "plan_hash": plan_hash,
                "logged_at": utc_now(),
            }
        try:
            created = await off(
                store.propose_plan,
                plan_id=plan_id,
                plan_hash=plan_hash,
                nonce=nonce,
                decision_id=body.decision_id,
                new_decision=new_decision,
                run_id=run["run_id"],
                actor=identity(key),
                plan=plan,
            )
        except BindingRefused as refused:
            raise binding_error(
                refused, plan_hash=plan_hash, decision_id=body.decision_id
            ) from None
        decision_id = body.decision_id or (new_decision or {})["decision_id"]
        return JSONResponse(
            {
                "plan_id": plan_id,
                "case_id": case["case_id"],
                "run_id": run["run_id"],
                "decision_id": decision_id,
                "plan_hash": plan_hash,
                "nonce": nonce,
                "lifecycle_state": "proposed",
                "approval_state": "proposed",
                "created_at": created,
                "approve_at": APPROVE_PATH.format(plan_id=plan_id),
                "execute_at": EXECUTE_PATH.format(plan_id=plan_id),
                "chosen_action": plan["chosen_action"],
                "expected_value": plan["expected_value"],
                "confidence": plan["confidence"],
                "risk_p5": plan["risk_p5"],
                "risk_p95": plan["risk_p95"],
                "policy_check": policy_check(governed.policy, plan["confidence"], plan["risk_p5"]),
                "plan": plan,
            },
            status_code=201,
        )

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
            who = governed.executor.check_access(override=body.force or body.override_safety)
            proposal = await require("plan", store.proposal, plan_id)
            if idem is not None:
                earlier = await off(store.execution_by_idempotency_key, idem)
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
                    again = await off(store.proposal, plan_id)
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
            decision = await off(store.get_decision, proposal["decision_id"])
            if decision["plan_id"] != plan_id:  # pragma: no cover - a rebinding needs it spent
                raise ApiError(
                    409,
                    "plan_not_approved",
                    f"decision {decision['decision_id']} runs under plan {decision['plan_id']}",
                )
            if body.webhook_url is not None:
                check_webhook_url(body.webhook_url, allowed_hosts=governed.allow_webhook_hosts)
            receipt = await governed.executor.run(
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
        after = await off(store.proposal, plan_id)
        logger.info(
            "execute %s by %s -> %s", plan_id, who, receipt.get("execution_status", "replay")
        )
        return execution_answer(receipt, after["state"] if after else "?")

    async def execution_or_404(request: Request) -> dict[str, Any]:
        caller_key(request, keys)
        found: dict[str, Any] = await require(
            "execution", store.execution, request.path_params["execution_id"]
        )
        return found

    @endpoint
    async def show_execution(request: Request) -> Response:
        execution = await execution_or_404(request)
        return JSONResponse(
            {
                **execution,
                "replay_manifest_at": f"/v1/executions/{execution['execution_id']}/replay-manifest",
            }
        )

    @endpoint
    async def replay_manifest(request: Request) -> Response:
        execution = await execution_or_404(request)
        plan = None
        if execution.get("plan_hash"):
            plan = await off(store.get_plan, execution["plan_hash"])
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
                "engine": "algenta-reference-engine",
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
            plan = await off(
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

    @endpoint
    async def audit_export(request: Request) -> Response:
        caller_key(request, keys, role="operator")
        fmt = request.path_params["fmt"]
        if fmt not in EXPORT_FORMATS:
            raise ApiError(
                404,
                "unknown_export_format",
                f"no audit export format {fmt!r}; formats: {', '.join(EXPORT_FORMATS)}",
            )
        rows = await off(store.audit_rows)
        data = export_bytes(rows, fmt)
        return Response(
            data,
            media_type=EXPORT_FORMATS[fmt],
            headers={
                "X-Content-SHA256": hashlib.sha256(data).hexdigest(),
                "X-Audit-Export-Rows": str(len(rows)),
            },
        )

    approvals = [
        Route(path, endpoint(fn), methods=methods)
        for path, methods, fn in approval_routes(store, keys)
    ]
    return [
        Route("/v1/decision-cases", create_case, methods=["POST"]),
        Route("/v1/decision-cases/{case_id}", show_case, methods=["GET"]),
        Route("/v1/decision-cases/{case_id}/analysis-runs", create_run, methods=["POST"]),
        Route("/v1/analysis-runs/{run_id}", show_run, methods=["GET"]),
        Route("/v1/analysis-runs/{run_id}/action-plans", create_plan, methods=["POST"]),
        *approvals,
        Route(EXECUTE_PATH, execute_plan, methods=["POST"]),
        Route("/v1/executions/{execution_id}", show_execution, methods=["GET"]),
        Route("/v1/executions/{execution_id}/replay-manifest", replay_manifest, methods=["GET"]),
        Route("/v1/replays", replay, methods=["POST"]),
        Route("/v1/audit-logs/export.{fmt}", audit_export, methods=["GET"]),
    ]


def export_bytes(rows: list[dict[str, Any]], fmt: str) -> bytes:
    """The audit rows in one export format (``details`` as JSON text in CSV)."""
    if fmt == "json":
        return json.dumps(rows, sort_keys=True).encode()
    if fmt == "jsonl":
        return b"".join(json.dumps(r, sort_keys=True).encode() + b"\n" for r in rows)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(AUDIT_COLUMNS)
    for r in rows:
        writer.writerow(
            [json.dumps(r[c], sort_keys=True) if c == "details" else r[c] for c in AUDIT_COLUMNS]
        )
    return out.getvalue().encode()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        return error_response(
            405, "method_not_allowed", f"{request.method} is not allowed on {request.url.path}"
        )
    if exc.status_code == 404:
        return error_response(404, "not_found", f"no route {request.url.path}")
    return error_response(exc.status_code, "http_error", str(exc.detail))


def api_app(store: Store, governed: GovernedTools, keys: KeyRing | None) -> Starlette:
    """The ASGI app of ``/v1/...``: every answer JSON, unknown routes and methods included."""
    return Starlette(
        routes=api_routes(store, governed, keys),
        exception_handlers={HTTPException: _http_error},
    )
