"""The governed tools the reference engine implements for real.

:class:`GovernedTools` holds the engine's state (store, policy, webhook allow-list) and exposes
one async method per tool; :func:`register` adds them to a FastMCP server, which derives each
input schema from the method signature. A method returns a plain ``dict`` (FastMCP sends it as
JSON text content, and as ``structuredContent`` unless registered text-only) or raises an
:class:`~algenta_graph.engine.errors.EngineToolError`.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import inspect
import json
import math
import secrets
import ssl
import uuid
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypeVar

import anyio
import httpx
from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import Field, StrictBool

import algenta_graph
from algenta_graph.engine import datasets, packs, simulation
from algenta_graph.engine.auth import current_caller
from algenta_graph.engine.delivery import DeliveryResult, check_webhook_url, post_webhook
from algenta_graph.engine.errors import EngineToolError, InvalidArguments
from algenta_graph.engine.policy import GATES, Policy, check
from algenta_graph.engine.store import Store
from algenta_graph.engine.store.base import utc_now
from algenta_graph.engine.store.decisions import BindingRefused
from algenta_graph.engine.store.executions import IdempotencyKeyTaken, PlanNotApproved

T = TypeVar("T")

MANIFEST_VERSION = "1.0.0"
ENGINE_NAME = "algenta-reference-engine"
NOT_SUPPORTED = "not_supported_in_reference_engine"

MAX_METADATA_BYTES = 16 * 1024
MAX_SCENARIO_BYTES = 64 * 1024
MAX_RATIONALE_CHARS = 8000
MAX_ACTION_CHARS = 200
MIN_TIMEOUT_SECONDS = 1.0
MAX_TIMEOUT_SECONDS = 60.0
DEFAULT_TIMEOUT_SECONDS = 10.0
MAX_KEY_CHARS = 200
RECEIPT_VERSION = "2"
RECEIPT_STATUS: dict[str, str] = {
    "delivered": "executed",
    "recorded": "executed",
    "unknown": "unknown",
    "failed": "failed",
}
"""A receipt's ``status`` for each ``execution_status``: ``executed`` (done), ``unknown`` (may
have been done: counts as executed), ``failed`` (certainly not done: may be retried)."""
APPROVE_PATH = "/v1/decision-plans/{plan_id}/approve"

DEFAULT_RELAXED = False
"""THE default of strict vs relaxed (``ReferenceEngine(relaxed=...)``, ``algenta-graph engine
--relaxed``): False, the execute profile's ``requires_all_of`` is the default (the graph sends
``idempotency_key`` and ``nonce`` itself)."""

# What strict mode adds to execute_decision (get_contract lists it; the README documents it).
STRICT_REQUIREMENTS: tuple[str, ...] = (
    'an API key with execute enabled (keys file: "execute": true) -> execute_not_enabled',
    "the agent role on that key -> role_not_permitted",
    "idempotency_key on the call (the caller's, one per attempt) -> idempotency_key_required",
    "nonce on the call: the one of the plan the decision is bound to -> nonce_required /"
    " invalid_nonce",
    "a decision logged bound to a plan_decision plan (plan_id, or its plan_hash) -> plan_required",
    "that plan approved out of band (POST /v1/decision-plans/{plan_id}/approve, operator role)"
    " and not yet executed -> plan_not_approved",
)

OVERRIDE_REQUIREMENT = (
    "force / override_safety: an API key with the operator role and execute enabled (whenever"
    " the engine has keys, in both modes) -> override_not_permitted / execute_not_enabled"
)

# The JSON shape of the webhook body; its hash is every receipt's schema_snapshot_id.
WEBHOOK_BODY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["event", "execution_id", "decision_id", "chosen_action", "metadata"],
    "properties": {
        "event": {"const": "decision.executed"},
        "execution_id": {"type": "string"},
        "decision_id": {"type": "string"},
        "chosen_action": {"type": "string"},
        "expected_value": {"type": "number"},
        "confidence": {"type": "number"},
        "safety_overridden": {"type": "boolean"},
        "metadata": {"type": ["object", "null"]},
        "sent_at": {"type": "string"},
    },
}
SCHEMA_SNAPSHOT_ID = (
    "sch_"
    + hashlib.sha256(json.dumps(WEBHOOK_BODY_SCHEMA, sort_keys=True).encode()).hexdigest()[:16]
)

Scenario = Annotated[
    str | dict[str, Any],
    Field(
        description=(
            "A built-in scenario name (restock_inventory, price_increase, expand_region) or a"
            " definition {'name': str, 'actions': {action: {'mean': float, 'stdev': float,"
            " 'capital': float}}}: each action's value is normal(mean, stdev), capital is what it"
            " puts at risk."
        )
    ),
]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """httpx's default verifying context, built once (building one costs tens of ms)."""
    return httpx.create_ssl_context()


async def _off_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run blocking work (SQLite, a large simulation) in a worker thread, off the event loop."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


def _json_size(value: Any) -> int:
    return len(json.dumps(value).encode())


def check_size(tool: str, name: str, value: Any, limit: int) -> None:
    size = _json_size(value)
    if size > limit:
        raise InvalidArguments(tool, f"{name} is {size} bytes of JSON; the limit is {limit} bytes")


# the execute_decision arguments both modes share (strict adds idempotency_key and nonce)
TimeoutSeconds = Annotated[
    float,
    Field(
        ge=MIN_TIMEOUT_SECONDS,
        le=MAX_TIMEOUT_SECONDS,
        description=(
            f"Seconds to wait for the webhook's answer ({MIN_TIMEOUT_SECONDS:g} to"
            f" {MAX_TIMEOUT_SECONDS:g}). A delivery without an answer counts as executed."
        ),
    ),
]
ForceFlag = Annotated[
    StrictBool, Field(description="Operator only: re-execute a delivered decision once.")
]
OverrideSafetyFlag = Annotated[
    StrictBool, Field(description="Operator only: bypass the confidence/risk gates.")
]
CallerMetadata = Annotated[
    dict[str, Any] | None, Field(description="Caller metadata, stored and forwarded.")
]


class KeyedLocks:
    """One asyncio lock per key, dropped when nobody holds or waits for it (event-loop local)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


class GovernedTools:
    """The implemented tool surface of one engine.

    ``denials`` only informs ``get_contract``; the wire form itself is applied by the server.
    """

    def __init__(
        self,
        store: Store,
        policy: Policy,
        *,
        allow_webhook_hosts: Collection[str] = (),
        denials: str = "mcp-error",
        auth_required: bool = False,
        registry_tool_count: int = 0,
        relaxed: bool = DEFAULT_RELAXED,
    ) -> None:
        self.relaxed = relaxed
        self.store = store
        self.policy = policy
        self.allow_webhook_hosts = tuple(allow_webhook_hosts)
        self.denials = denials
        self.auth_required = auth_required
        self.registry_tool_count = registry_tool_count
        self._locks = KeyedLocks()
        store.record_policy(policy.snapshot_id, policy.as_dict())

    # -- discovery and data ----------------------------------------------------------------

    async def get_contract(self) -> dict[str, Any]:
        """Fetch the engine's machine-readable contract: engine version, implemented
        capabilities, the current execution policy and its gates, the datasets and scenarios
        you can use. Call this first to discover what the engine offers."""
        return {
            "engine": ENGINE_NAME,
            "engine_version": algenta_graph.__version__,
            "manifest_version": MANIFEST_VERSION,
            "capabilities": {
                "implemented_tools": list(IMPLEMENTED_TOOLS),
                "registry_tool_count": self.registry_tool_count,
                "other_tools_answer": NOT_SUPPORTED,
            },
            "policy": {**self.policy.as_dict(), "policy_snapshot_id": self.policy.snapshot_id},
            "gates": list(GATES),
            "denial_wire_form": self.denials,
            "datasets": datasets.describe(),
            "scenarios": {k: v["description"] for k, v in simulation.SCENARIOS.items()},
            "webhooks": {"allowed_hosts": ["loopback", *self.allow_webhook_hosts]},
            "auth": "bearer" if self.auth_required else "none",
            "auth_headers": ["Authorization: Bearer <api key>", "X-API-Key: <api key>"],
            "http_api": "/v1 (decision cases, analysis runs, action plans, approval, execution,"
            " replay, the audit export)",
            "mode": "relaxed" if self.relaxed else "strict",
            "execute_requires": [] if self.relaxed else list(STRICT_REQUIREMENTS),
            "override_requires": (
                OVERRIDE_REQUIREMENT
                if self.auth_required
                else "nothing: this engine has no API keys (development only; with keys, "
                + OVERRIDE_REQUIREMENT
                + ")"
            ),
            "approval_endpoint": "POST " + APPROVE_PATH,
            "timeout_seconds": {
                "min": MIN_TIMEOUT_SECONDS,
                "max": MAX_TIMEOUT_SECONDS,
                "default": DEFAULT_TIMEOUT_SECONDS,
            },
            "delivery_outcomes": {
                "delivered": "the webhook answered 2xx; counts as executed",
                "failed": "nothing was sent, or the webhook answered non-2xx; may be retried",
                "unknown": "sent, but no answer (timeout, connection dropped): counts as"
                " executed; only an operator may send it again (force=true)",
            },
        }

    async def query_data(
        self,
        dataset: Annotated[str, Field(description="Dataset name: orders, inventory or customers.")],
        filters: Annotated[
            dict[str, Any] | None,
            Field(
                description=(
                    "Column conditions: {column: value} for equality or {column: {op: value}}"
                    " with op in eq, ne, gt, gte, lt, lte, in, contains."
                )
            ),
        ] = None,
        columns: Annotated[
            list[str] | None, Field(description="Columns to return (default: all).")
        ] = None,
        order_by: Annotated[str | None, Field(description="Column to sort by.")] = None,
        descending: Annotated[StrictBool, Field(description="Sort descending.")] = False,
        limit: Annotated[int, Field(ge=1, le=datasets.MAX_LIMIT, description="Max rows.")] = 50,
    ) -> dict[str, Any]:
        """Run one governed exact query against a connected dataset (orders, inventory,
        customers): filter rows by column conditions, pick columns, sort and limit. Returns the
        matching rows and how many matched."""
        return datasets.query(
            dataset,
            filters=filters,
            columns=columns,
            order_by=order_by,
            descending=descending,
            limit=limit,
        )

    # -- policy ----------------------------------------------------------------------------

    async def get_execution_policy(self) -> dict[str, Any]:
        """Read the execution policy execute_decision enforces: the confidence minimum, the risk
        floor, and its gates in the order they apply, each with what lifts it."""
        return {
            "policy_snapshot_id": self.policy.snapshot_id,
            **self.policy.as_dict(),
            "gates": [
                {
                    "gate": "idempotency",
                    "blocks": "a decision already executed (delivered, or sent with an unknown"
                    " outcome)",
                    "lift": "force",
                },
                {
                    "gate": "confidence",
                    "blocks": f"confidence below {self.policy.min_confidence:g}",
                    "lift": "override_safety",
                },
                {
                    "gate": "risk_floor",
                    "blocks": f"risk_p5 below {-self.policy.risk_floor:g}",
                    "lift": "override_safety",
                },
            ],
        }

    async def list_execution_policy_snapshots(
        self, limit: Annotated[int, Field(ge=1, le=200)] = 20
    ) -> dict[str, Any]:
        """List the versioned snapshots of the execution policy (newest first); every receipt's
        policy_snapshot_id names one of them."""
        snapshots = await _off_loop(self.store.policy_snapshots)
        return {"current": self.policy.snapshot_id, "snapshots": snapshots[:limit]}

    # -- decisions -------------------------------------------------------------------------

    def _scenario(self, tool: str, scenario: str | dict[str, Any]) -> str | dict[str, Any]:
        check_size(tool, "scenario", scenario, MAX_SCENARIO_BYTES)
        return scenario

    def policy_check(self, confidence: float, risk_p5: float) -> dict[str, str]:
        return {
            "confidence": "pass" if confidence >= self.policy.min_confidence else "would_block",
            "risk_floor": "pass" if risk_p5 >= -self.policy.risk_floor else "would_block",
        }

    async def simulate(
        self,
        scenario: Scenario,
        n_samples: Annotated[
            int, Field(ge=100, le=simulation.MAX_SAMPLES, description="Monte Carlo draws.")
        ] = 10_000,
        seed: Annotated[int, Field(description="Random seed; same seed, same result.")] = 42,
    ) -> dict[str, Any]:
        """Run a seeded Monte Carlo simulation over a decision scenario and return the decision
        envelope: recommended action, expected value, confidence, risk p5/p95 (return on
        capital), and the same metrics for every candidate action."""
        result = await _off_loop(
            simulation.simulate,
            self._scenario("simulate", scenario),
            seed=seed,
            n_samples=n_samples,
        )
        result["policy_check"] = self.policy_check(result["confidence"], result["risk_p5"])
        return result

    async def recommend(self, scenario: Scenario) -> dict[str, Any]:
        """Return a governed recommendation for a decision scenario (read-only, nothing is
        logged or executed): the best action with its expected value, confidence and risk, and
        whether the current policy would let it execute."""
        result = await _off_loop(
            simulation.simulate, self._scenario("recommend", scenario), seed=42, n_samples=5000
        )
        check_ = self.policy_check(result["confidence"], result["risk_p5"])
        return {
            "scenario": result["scenario"],
            "recommended_action": result["recommended_action"],
            "expected_value": result["expected_value"],
            "confidence": result["confidence"],
            "risk_p5": result["risk_p5"],
            "risk_p95": result["risk_p95"],
            "policy_check": check_,
            "rationale": (
                f"{result['recommended_action']} has the highest expected value"
                f" ({result['expected_value']:,.2f}) and wins in"
                f" {result['confidence']:.0%} of simulated outcomes"
            ),
        }

    async def plan_decision(
        self,
        scenario: Scenario,
        chosen_action: Annotated[
            str | None,
            Field(description="The action to plan (default: the recommended one)."),
        ] = None,
        n_samples: Annotated[int, Field(ge=100, le=simulation.MAX_SAMPLES)] = 10_000,
        seed: int = 42,
        decision_id: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=200,
                description=(
                    "Propose the plan for this already logged decision, whose plan was executed"
                    " (a re-execution needs a newly approved plan); it is bound to the decision."
                ),
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Produce a proposed, not-yet-committed decision plan for a scenario, with a plan_id
        and plan_hash that log_decision binds a decision to, and a single-use nonce (an operator
        approves the plan out of band with them). Nothing is executed."""
        result = await _off_loop(
            simulation.simulate,
            self._scenario("plan_decision", scenario),
            seed=seed,
            n_samples=n_samples,
        )
        by_action = {a["action"]: a for a in result["actions"]}
        action = chosen_action if chosen_action is not None else result["recommended_action"]
        if action not in by_action:
            raise EngineToolError(
                "unknown_action",
                f"action {action!r} is not in scenario {result['scenario']!r};"
                f" its actions: {', '.join(by_action)}",
            )
        chosen = by_action[action]
        plan = packs.scenario_plan(
            scenario,
            action,
            chosen,
            seed=seed,
            n_samples=n_samples,
            policy_snapshot_id=self.policy.snapshot_id,
        )
        plan_hash = packs.plan_hash(plan)
        plan_id = f"plan_{uuid.uuid4().hex[:20]}"
        nonce = secrets.token_urlsafe(24)
        try:
            await _off_loop(
                self.store.propose_plan,
                plan_id=plan_id,
                plan_hash=plan_hash,
                nonce=nonce,
                decision_id=decision_id,
                actor=current_caller().identity,
                plan=plan,
            )
        except BindingRefused as refused:
            raise binding_error(refused, plan_hash=plan_hash, decision_id=decision_id) from None
        return {
            **plan,
            "plan_id": plan_id,
            "plan_hash": plan_hash,
            "nonce": nonce,
            "approval_state": "proposed",
            "approve_at": APPROVE_PATH.format(plan_id=plan_id),
            "decision_id": decision_id,
            "policy_check": self.policy_check(chosen["confidence"], chosen["risk_p5"]),
            "alternatives": [a for a in result["actions"] if a["action"] != action],
            "next_step": (
                "log_decision with these numbers and this plan_id to record it"
                if decision_id is None
                else f"have it approved, then execute decision {decision_id} with its nonce"
            ),
        }

    async def log_decision(
        self,
        chosen_action: Annotated[str, Field(min_length=1, max_length=MAX_ACTION_CHARS)],
        expected_value: FiniteFloat,
        confidence: Annotated[float, Field(ge=0.0, le=1.0)],
        risk_p5: FiniteFloat,
        risk_p95: FiniteFloat,
        rationale: Annotated[str | None, Field(max_length=MAX_RATIONALE_CHARS)] = None,
        scenario: Annotated[
            str | dict[str, Any] | None, Field(description="The scenario it was chosen from.")
        ] = None,
        plan_hash: Annotated[
            str | None,
            Field(
                description=(
                    "The plan_hash of a plan from plan_decision (numbers must match); alone, it"
                    " binds the one plan with this hash no decision is bound to yet."
                )
            ),
        ] = None,
        plan_id: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=200,
                description=(
                    "Bind to this plan from plan_decision (numbers must match): each decision"
                    " runs under the approval of its own plan."
                ),
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Persist a decision record (chosen action, expected value, confidence, risk p5/p95,
        rationale) to decision memory for audit and later execution, bound to its plan. Returns
        its decision_id. Does not execute anything."""
        if risk_p5 > risk_p95:
            raise InvalidArguments(
                "log_decision", f"risk_p5 ({risk_p5}) exceeds risk_p95 ({risk_p95})"
            )
        if scenario is not None:
            check_size("log_decision", "scenario", scenario, MAX_SCENARIO_BYTES)
        if plan_id is not None:
            proposal = await _off_loop(self.store.proposal, plan_id)
            if proposal is None:
                raise EngineToolError(
                    "plan_not_found", f"no plan with plan_id {plan_id!r}", status_code=404
                )
            if plan_hash is not None and plan_hash != proposal["plan_hash"]:
                raise EngineToolError(
                    "plan_hash_mismatch",
                    f"plan_hash {plan_hash} is not the hash of plan {plan_id}"
                    f" ({proposal['plan_hash']})",
                    status_code=409,
                )
            plan_hash = proposal["plan_hash"]
        if plan_hash is not None:
            plan = await _off_loop(self.store.get_plan, plan_hash)
            if plan is None:
                raise EngineToolError(
                    "plan_not_found", f"no plan with plan_hash {plan_hash!r}", status_code=404
                )
            mismatched = [
                k
                for k, v in (
                    ("expected_value", expected_value),
                    ("confidence", confidence),
                    ("risk_p5", risk_p5),
                    ("risk_p95", risk_p95),
                )
                if not math.isclose(float(plan[k]), v, rel_tol=1e-9, abs_tol=1e-9)
            ]
            if plan["chosen_action"] != chosen_action:
                mismatched.insert(0, "chosen_action")
            if mismatched:
                raise EngineToolError(
                    "plan_hash_mismatch",
                    f"the decision differs from plan {plan_hash} in: {', '.join(mismatched)}",
                    status_code=409,
                )
            if scenario is None:
                # a plan_decision plan has its scenario; a decision case's plan, its pack
                scenario = plan.get("scenario") or {"pack_id": plan.get("pack_id")}
        decision = {
            "decision_id": f"dec_{uuid.uuid4().hex[:20]}",
            "chosen_action": chosen_action,
            "expected_value": expected_value,
            "confidence": confidence,
            "risk_p5": risk_p5,
            "risk_p95": risk_p95,
            "rationale": rationale,
            "scenario": scenario,
            "plan_hash": plan_hash,
            "logged_at": utc_now(),
            "plan_id": plan_id,
        }
        try:
            await _off_loop(self.store.insert_decision, decision, actor=current_caller().identity)
        except BindingRefused as refused:
            raise binding_error(refused, plan_hash=plan_hash, plan_id=plan_id) from None
        return {
            "decision_id": decision["decision_id"],
            "logged_at": decision["logged_at"],
            "decision": decision,
            "policy_check": self.policy_check(confidence, risk_p5),
        }

    async def _require_decision(self, decision_id: str) -> dict[str, Any]:
        decision = await _off_loop(self.store.get_decision, decision_id)
        if decision is None:
            raise EngineToolError(
                "decision_not_found",
                f"no decision with decision_id {decision_id!r}; log_decision creates one",
                status_code=404,
            )
        return decision

    async def get_decision(
        self, decision_id: Annotated[str, Field(min_length=1, max_length=200)]
    ) -> dict[str, Any]:
        """Read one logged decision, the plan it is bound to (plan_id, state, approval) and
        every execution of it (receipt, the force / override_safety flags used, and the caller's
        metadata), oldest first."""
        decision = await self._require_decision(decision_id)
        executions = await _off_loop(self.store.executions, decision_id)
        return {
            "decision": decision,
            "plan": await self._plan_summary(decision["plan_id"]),
            "executions": executions,
        }

    async def _plan_summary(self, plan_id: str | None) -> dict[str, Any] | None:
        """The plan a decision is bound to, as get_decision shows it (None: bound to none)."""
        if plan_id is None:
            return None
        row = await _off_loop(self.store.proposal, plan_id)
        if row is None:  # pragma: no cover - a binding always names a stored proposal
            return None
        return {
            "plan_id": row["plan_id"],
            "plan_hash": row["plan_hash"],
            "state": row["state"],
            # the single-use nonce of an unspent plan, so that a client executing the decision
            # (the governed graph) supplies its own plan's nonce, wherever the plan was proposed
            "nonce": row["nonce"] if row["state"] != "executed" else None,
            "approved_by": row["approved_by"],
            "approved_at": row["approved_at"],
            "execution_id": row["execution_id"],
        }

    async def list_decisions(
        self,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
        offset: Annotated[int, Field(ge=0)] = 0,
    ) -> dict[str, Any]:
        """List logged decisions, newest first, with how often each was executed and the status
        of its latest execution."""
        rows, total = await _off_loop(self.store.list_decisions, limit=limit, offset=offset)
        return {"decisions": rows, "count": len(rows), "total": total, "offset": offset}

    async def execute_decision(
        self,
        decision_id: Annotated[str, Field(min_length=1, max_length=200)],
        webhook_url: Annotated[str, Field(min_length=1, description="Where to POST the action.")],
        timeout_seconds: TimeoutSeconds = DEFAULT_TIMEOUT_SECONDS,
        force: ForceFlag = False,
        override_safety: OverrideSafetyFlag = False,
        metadata: CallerMetadata = None,
    ) -> dict[str, Any]:
        """Dispatch one already-logged decision for real-world execution (a webhook POST) and
        persist the execution receipt. Blocked by the idempotency, confidence or risk_floor
        policy gates."""
        return await self._execute(
            decision_id,
            webhook_url,
            timeout_seconds=timeout_seconds,
            force=force,
            override_safety=override_safety,
            metadata=metadata,
        )

    async def execute_decision_strict(
        self,
        decision_id: Annotated[str, Field(min_length=1, max_length=200)],
        webhook_url: Annotated[str, Field(min_length=1, description="Where to POST the action.")],
        idempotency_key: Annotated[
            str | None,
            Field(
                max_length=MAX_KEY_CHARS,
                description=(
                    "Required. The caller's key for this attempt: a repeated key returns the"
                    " first attempt's receipt and sends nothing."
                ),
            ),
        ] = None,
        nonce: Annotated[
            str | None,
            Field(
                max_length=MAX_KEY_CHARS,
                description=(
                    "Required. The single-use nonce plan_decision returned for the plan this"
                    " decision was logged with; that plan must be approved."
                ),
            ),
        ] = None,
        timeout_seconds: TimeoutSeconds = DEFAULT_TIMEOUT_SECONDS,
        force: ForceFlag = False,
        override_safety: OverrideSafetyFlag = False,
        metadata: CallerMetadata = None,
    ) -> dict[str, Any]:
        """Dispatch one already-planned, already-logged and approved decision for real-world
        execution (a webhook POST) and persist the execution receipt. Blocked by the
        idempotency, confidence or risk_floor policy gates."""
        return await self._execute(
            decision_id,
            webhook_url,
            timeout_seconds=timeout_seconds,
            force=force,
            override_safety=override_safety,
            metadata=metadata,
            strict=(idempotency_key, nonce),
        )

    def check_execute_access(self, *, override: bool) -> str | None:
        """Who may execute; the caller's identity.

        Strict mode: a key is needed, with the agent role (a plain execution) or the operator
        role (``override``: ``force`` / ``override_safety``), and execute enabled. Relaxed mode:
        any caller, except that an override needs an operator key with execute enabled whenever
        the engine has keys (so the model-facing agent key alone can never override).
        """
        key = current_caller().key
        if self.relaxed and (not override or not self.auth_required):
            return None if key is None else key.identity
        if key is None:
            raise EngineToolError(
                "execute_not_enabled",
                "execute_decision needs an API key with execute enabled, and this engine has"
                ' no API keys: start it with --keys-file (a key with "execute": true and the'
                " agent role) or --api-key",
                status_code=403,
            )
        if override and not key.has("operator"):
            raise EngineToolError(
                "override_not_permitted",
                f"force / override_safety need an operator's key: the key of {key.identity!r}"
                f" has {', '.join(sorted(key.roles))}, not operator; an operator answers the"
                " escalation and the override is sent with an operator key (with execute"
                " enabled); nothing was sent",
                status_code=403,
            )
        if not override and not key.has("agent"):
            raise EngineToolError(
                "role_not_permitted",
                f"execute_decision needs the agent role; the key of {key.identity!r} has"
                f" {', '.join(sorted(key.roles))}",
                status_code=403,
            )
        if not key.execute:
            raise EngineToolError(
                "execute_not_enabled",
                f"execute is not enabled for the key of {key.identity!r}: the engine operator"
                ' enables it per key ("execute": true in the keys file)',
                status_code=403,
            )
        return key.identity

    async def _bound_plan(self, decision: dict[str, Any], nonce: str | None) -> dict[str, Any]:
        """Strict mode: the plan proposal the decision is bound to, approved; ``nonce`` (None
        over HTTP, where the path names the plan) must be that plan's."""
        plan_id = decision["plan_id"]
        proposal = None if plan_id is None else await _off_loop(self.store.proposal, plan_id)
        if proposal is None:
            raise EngineToolError(
                "plan_required",
                f"decision {decision['decision_id']} is bound to no plan (logged with plan_hash"
                f" {decision['plan_hash']} before plans were bound by id): propose one for it"
                " with plan_decision(decision_id=...) and have it approved",
                status_code=409,
            )
        if nonce is not None and not hmac.compare_digest(
            proposal["nonce"].encode(), nonce.encode()
        ):
            raise EngineToolError(
                "invalid_nonce",
                f"the nonce is not the one of plan {plan_id}, the plan decision"
                f" {decision['decision_id']} is bound to (each decision runs under its own"
                " plan's approval: get_decision shows it)",
                status_code=403,
            )
        if proposal["state"] != "approved":
            raise _plan_not_approved(plan_id, proposal["state"])
        return proposal

    async def _execute(
        self,
        decision_id: str,
        webhook_url: str,
        *,
        timeout_seconds: float,
        force: bool,
        override_safety: bool,
        metadata: dict[str, Any] | None,
        strict: tuple[str | None, str | None] | None = None,
    ) -> dict[str, Any]:
        """``execute_decision`` over MCP: check the caller and the arguments, then run it."""
        identity = self.check_execute_access(override=force or override_safety)
        idempotency_key: str | None = None
        nonce: str | None = None
        if strict is not None:
            idempotency_key, nonce = strict
            if not idempotency_key:
                raise EngineToolError(
                    "idempotency_key_required",
                    "execute_decision needs idempotency_key: a key the caller chooses for this"
                    " attempt (the graph derives it from its thread and tool call)",
                )
            if not nonce:
                raise EngineToolError(
                    "nonce_required",
                    "execute_decision needs nonce: the single-use nonce of the plan the"
                    " decision is bound to (plan_decision returned it; get_decision shows it)",
                )
        if metadata is not None:
            check_size("execute_decision", "metadata", metadata, MAX_METADATA_BYTES)
        decision = await self._require_decision(decision_id)
        check_webhook_url(webhook_url, allowed_hosts=self.allow_webhook_hosts)
        if strict is not None and decision["plan_hash"] is None:
            raise EngineToolError(
                "plan_required",
                f"decision {decision_id} was logged without a plan: execute_decision runs"
                " only a decision planned with plan_decision and logged bound to that plan"
                " (plan_id, or its plan_hash)",
                status_code=409,
            )
        return await self.run_execution(
            decision,
            webhook_url,
            identity=identity,
            timeout_seconds=timeout_seconds,
            force=force,
            override_safety=override_safety,
            metadata=metadata,
            idempotency_key=idempotency_key,
            plan=None if strict is None else ("nonce", nonce),
        )

    async def run_execution(
        self,
        decision: dict[str, Any],
        webhook_url: str | None,
        *,
        identity: str | None,
        timeout_seconds: float,
        force: bool,
        override_safety: bool,
        metadata: dict[str, Any] | None,
        idempotency_key: str | None,
        plan: tuple[str, str | None] | None,
    ) -> dict[str, Any]:
        """Run one execution of ``decision`` whose caller and arguments were checked: (per
        decision, serialised) the idempotency-key replay, the gates and the plan's approval, the
        write-ahead record, the delivery, the final receipt.

        ``plan``: None (relaxed: no plan needed); ``("nonce", nonce)`` (MCP, strict: the gates
        first, then the bound plan, whose nonce it must be); ``("path", None)`` (HTTP, the plan
        named by the path: its approval first, then the gates). ``webhook_url`` None (HTTP
        only): nothing is sent, the execution is recorded (``execution_status: recorded``).
        """
        decision_id = decision["decision_id"]
        async with self._locks.hold(decision_id):
            if idempotency_key is not None:
                earlier = await _off_loop(self.store.execution_by_idempotency_key, idempotency_key)
                if earlier is not None:
                    stored = earlier["receipt"]
                    if earlier["decision_id"] != decision_id:
                        raise _key_reused(idempotency_key, "another decision")
                    if stored.get("webhook_url") != webhook_url:
                        raise _key_reused(idempotency_key, "a call to another webhook_url")
                    return {**stored, "idempotent_replay": True}
            plan_id: str | None = None
            if plan is not None and plan[0] == "path":
                plan_id = (await self._bound_plan(decision, None))["plan_id"]
            verdict = check(
                self.policy,
                confidence=decision["confidence"],
                risk_p5=decision["risk_p5"],
                already_executed=await _off_loop(self.store.executed_count, decision_id) > 0,
                force=force,
                override_safety=override_safety,
            )
            if verdict.denial is not None:
                raise verdict.denial
            if plan is not None and plan[0] == "nonce":
                plan_id = (await self._bound_plan(decision, plan[1]))["plan_id"]
            execution_id = f"exe_{uuid.uuid4().hex[:20]}"
            executed_at = utc_now()
            body = {
                "event": "decision.executed",
                "execution_id": execution_id,
                "decision_id": decision_id,
                "chosen_action": decision["chosen_action"],
                "expected_value": decision["expected_value"],
                "confidence": decision["confidence"],
                "safety_overridden": verdict.safety_overridden,
                "metadata": metadata,
                "sent_at": executed_at,
            }
            receipt = {
                "decision_id": decision_id,
                "webhook_url": webhook_url,
                "execution_status": "unknown",
                "response_code": None,
                "executed_at": executed_at,
                "policy_snapshot_id": self.policy.snapshot_id,
                "schema_snapshot_id": SCHEMA_SNAPSHOT_ID,
                "manifest_version": MANIFEST_VERSION,
                "payload_summary": {
                    "action": decision["chosen_action"],
                    "confidence": decision["confidence"],
                    "expected_value": decision["expected_value"],
                },
                "safety_overridden": verdict.safety_overridden,
                "execution_id": execution_id,
                "failure_reason": (
                    f"delivery started at {executed_at} and its outcome is not recorded (still"
                    " in progress, or the engine stopped during it): it counts as executed"
                ),
                "failure_code": None,
                "retryable": False,
                "status": "unknown",
                "receipt_version": RECEIPT_VERSION,
                "plan_hash": decision["plan_hash"],
                "plan_id": plan_id,
                "approval_state": "not_required" if plan is None else "approved",
                "idempotency_key": idempotency_key,
                "trace_id": current_caller().trace_id,
                "executed_by": identity,
            }
            # Write-ahead: the execution is on record (outcome unknown) before the POST can go
            # out, in one transaction with the plan's approved -> executed compare-and-set.
            try:
                await _off_loop(
                    self.store.begin_execution,
                    execution_id=execution_id,
                    receipt=receipt,
                    force=force,
                    override_safety=override_safety,
                    metadata=metadata,
                    idempotency_key=idempotency_key,
                    plan_id=plan_id,
                    identity=identity,
                )
            except PlanNotApproved:
                raise _plan_not_approved(plan_id or "?", "no longer approved") from None
            except IdempotencyKeyTaken:
                raise _key_reused(idempotency_key or "") from None
            # Once the POST may have gone out, finish it and persist the receipt even if the
            # caller cancels. The timeout bounds how long this can take.
            with anyio.CancelScope(shield=True):
                if webhook_url is None:
                    result = DeliveryResult("recorded", None)
                else:
                    async with httpx.AsyncClient(trust_env=False, verify=_ssl_context()) as client:
                        result = await post_webhook(
                            client, webhook_url, body, timeout=timeout_seconds
                        )
                receipt = {
                    **receipt,
                    "execution_status": result.outcome,
                    "response_code": result.response_code,
                    "failure_reason": result.failure_reason,
                    "failure_code": result.failure_code,
                    "retryable": result.outcome == "failed",
                    "status": RECEIPT_STATUS[result.outcome],
                }
                await _off_loop(
                    self.store.finish_execution,
                    execution_id,
                    receipt,
                    release_plan=result.outcome == "failed",
                )
            return receipt


def binding_error(
    refused: BindingRefused,
    *,
    plan_hash: str | None,
    plan_id: str | None = None,
    decision_id: str | None = None,
) -> EngineToolError:
    """The tool error for a refused binding of a decision to a plan (nothing was written)."""
    code = refused.code
    if code == "plan_not_found":
        return EngineToolError(
            "plan_not_found", f"no plan with plan_id {plan_id!r}", status_code=404
        )
    if code == "plan_ambiguous":
        return EngineToolError(
            "plan_ambiguous",
            f"{len(refused.candidates)} plans with plan_hash {plan_hash} are bound to no decision"
            f" ({', '.join(refused.candidates)}), so the hash does not say which one this"
            " decision runs under: pass plan_id (from the plan_decision result)",
            status_code=409,
            details={"candidate_plan_ids": list(refused.candidates)},
        )
    if code == "plan_already_bound":
        bound = ", ".join(f"{p} -> {d}" for p, d in refused.bound.items())
        what = (
            f"plan {plan_id}" if plan_id is not None else f"every plan with plan_hash {plan_hash}"
        )
        return EngineToolError(
            "plan_already_bound",
            f"{what} is bound to a decision already ({bound}); a plan runs one decision:"
            " plan_decision again for a new plan",
            status_code=409,
            details={"bound": dict(refused.bound)},
        )
    if code == "decision_not_found":
        return EngineToolError(
            "decision_not_found",
            f"no decision with decision_id {decision_id!r}; log_decision creates one",
            status_code=404,
        )
    if code == "plan_hash_mismatch":
        return EngineToolError(
            "plan_hash_mismatch",
            f"this plan's plan_hash {plan_hash} is not the one decision {decision_id} was logged"
            " with: a plan for a decision must plan the same scenario, action and numbers",
            status_code=409,
        )
    if code == "plan_not_spent":
        [(current, _)] = refused.bound.items()
        return EngineToolError(
            "plan_not_spent",
            f"decision {decision_id} is bound to plan {current} ({refused.state}), which has"
            " not run: execute it under that plan; a new plan for a decision is for running it"
            " again after its plan was executed",
            status_code=409,
        )
    raise AssertionError(f"unknown binding refusal {code}")  # pragma: no cover


def _plan_not_approved(plan_id: str, state: str) -> EngineToolError:
    return EngineToolError(
        "plan_not_approved",
        f"plan {plan_id} is {state}, not approved: an operator approves it with POST"
        f" {APPROVE_PATH.format(plan_id=plan_id)}; an executed plan cannot run again (propose"
        " a new plan for the decision with plan_decision(decision_id=...) and have it"
        " approved)",
        status_code=409,
    )


def _key_reused(key: str, other: str = "another decision") -> EngineToolError:
    return EngineToolError(
        "idempotency_key_reused",
        f"idempotency_key {key[:80]!r} already belongs to an execution of {other}: use one key"
        " per attempt",
        status_code=409,
    )


IMPLEMENTED_TOOLS: tuple[str, ...] = (
    "get_contract",
    "query_data",
    "simulate",
    "recommend",
    "plan_decision",
    "log_decision",
    "get_decision",
    "list_decisions",
    "execute_decision",
    "get_execution_policy",
    "list_execution_policy_snapshots",
)


_READ = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
ANNOTATIONS: dict[str, ToolAnnotations] = {
    **dict.fromkeys(
        (
            "get_contract",
            "query_data",
            "simulate",
            "recommend",
            "get_decision",
            "list_decisions",
            "get_execution_policy",
            "list_execution_policy_snapshots",
        ),
        _READ,
    ),
    "plan_decision": ToolAnnotations(readOnlyHint=False, idempotentHint=False, openWorldHint=False),
    "log_decision": ToolAnnotations(
        readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False
    ),
    "execute_decision": ToolAnnotations(
        readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=True
    ),
}


def register(server: FastMCP, tools: GovernedTools, *, structured: bool = True) -> None:
    """Add every implemented tool of ``tools`` to ``server`` (input schema from the signature).

    ``structured``: advertise an output schema and send ``structuredContent`` besides the JSON
    text (FastMCP's default for a ``dict`` return); False sends the JSON text only, with no
    output schema, like the public Algenta server.
    """
    for name in IMPLEMENTED_TOOLS:
        strict_execute = name == "execute_decision" and not tools.relaxed
        method: Callable[..., Any] = getattr(
            tools, "execute_decision_strict" if strict_execute else name
        )
        description = " ".join(inspect.cleandoc(method.__doc__ or "").split())
        server.add_tool(
            method,
            name=name,
            description=description,
            annotations=ANNOTATIONS[name],
            structured_output=structured,
        )
        if strict_execute:
            # advertised as required strings; absent ones are refused by the tool with a named
            # code (idempotency_key_required, nonce_required), not a generic validation error
            registered = server._tool_manager.get_tool(name)
            assert registered is not None
            params = registered.parameters
            for field in ("idempotency_key", "nonce"):
                prop = params["properties"][field]
                prop.pop("anyOf", None)
                prop.pop("default", None)
                prop.update(type="string", minLength=1, maxLength=MAX_KEY_CHARS)
            params["required"] = [*params.get("required", []), "idempotency_key", "nonce"]
