"""Decision cases, their analysis runs and the action plans proposed from a run.

An action plan is a plan proposal like ``plan_decision``'s, with a decision logged with it and
bound to it (``{"decision_id": D}`` proposes a new plan for the logged decision ``D`` instead).
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from typing import Annotated, Any

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from algenta_graph.engine import packs
from algenta_graph.engine.api.common import (
    STRICT_BODY,
    ApiError,
    Id,
    caller_key,
    endpoint,
    identity,
    read_body,
    require,
)
from algenta_graph.engine.api.executions import EXECUTE_PATH
from algenta_graph.engine.auth import KeyRing
from algenta_graph.engine.concurrency import off_loop
from algenta_graph.engine.contract import APPROVE_PATH
from algenta_graph.engine.planning import binding_error
from algenta_graph.engine.policy import Policy, policy_check
from algenta_graph.engine.store import Store
from algenta_graph.engine.store.base import utc_now
from algenta_graph.engine.store.decisions import BindingRefused


class CaseBody(BaseModel):
    """The body of ``POST /v1/decision-cases``."""

    model_config = STRICT_BODY
    pack_id: Annotated[str, Field(min_length=1, max_length=100)]
    title: Annotated[str | None, Field(max_length=500)] = None
    pack_input: Any = None


class RunBody(BaseModel):
    """The body of ``POST /v1/decision-cases/{case_id}/analysis-runs`` (optional)."""

    model_config = STRICT_BODY
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = packs.DEFAULT_SEED
    n_samples: Annotated[int, Field(ge=100, le=packs.MAX_PACK_SAMPLES)] = packs.DEFAULT_SAMPLES


class PlanBody(BaseModel):
    """The body of ``POST /v1/analysis-runs/{run_id}/action-plans`` (optional)."""

    model_config = STRICT_BODY
    chosen_action: Annotated[str | None, Field(min_length=1, max_length=200)] = None
    decision_id: Id | None = None


def case_routes(store: Store, policy: Policy, keys: KeyRing | None) -> list[Route]:
    """The routes of decision cases, analysis runs and action plans, for one engine.

    Args:
        store: the engine's store.
        policy: the execution policy (its snapshot id goes into every plan).
        keys: the engine's API keys (None: none).
    """

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
        plans = await off_loop(store.plans_of_case, case["case_id"])
        runs = await off_loop(store.runs_of_case, case["case_id"])
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
            normalised = await off_loop(packs.normalise, body.pack_id, body.pack_input)
        except packs.PackInputError as exc:
            raise ApiError(422, "invalid_pack_input", str(exc)) from None
        case = {
            "case_id": f"case_{uuid.uuid4().hex[:20]}",
            "pack_id": body.pack_id,
            "title": body.title,
            "pack_input": normalised,
            "created_at": utc_now(),
        }
        await off_loop(store.create_case, case, actor=identity(key))
        stored = await off_loop(store.case, case["case_id"])
        assert stored is not None  # written just above
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
            result = await off_loop(
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
        await off_loop(store.create_run, run, actor=identity(key))
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
        case = await off_loop(store.case, run["case_id"])
        assert case is not None  # a run references its case
        plan = packs.plan_of(
            case["pack_id"],
            case["pack_input"],
            run["result"],
            chosen_action=body.chosen_action,
            policy_snapshot_id=policy.snapshot_id,
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
            created = await off_loop(
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
                "policy_check": policy_check(policy, plan["confidence"], plan["risk_p5"]),
                "plan": plan,
            },
            status_code=201,
        )

    return [
        Route("/v1/decision-cases", create_case, methods=["POST"]),
        Route("/v1/decision-cases/{case_id}", show_case, methods=["GET"]),
        Route("/v1/decision-cases/{case_id}/analysis-runs", create_run, methods=["POST"]),
        Route("/v1/analysis-runs/{run_id}", show_run, methods=["GET"]),
        Route("/v1/analysis-runs/{run_id}/action-plans", create_plan, methods=["POST"]),
    ]
