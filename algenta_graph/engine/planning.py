"""A decision and its plan: proposing a plan, logging a decision bound to it, reading it back.

A decision is bound to one plan proposal by its ``plan_id``, and a proposal to at most one
decision (``README.md``, "Binding a decision to its plan"); :class:`Planning` is what
``plan_decision``, ``log_decision`` and ``get_decision`` do, and :func:`binding_error` the
refusal a client sees when a binding cannot be made (nothing is written then).
"""

from __future__ import annotations

import math
import secrets
import uuid
from typing import Any

from algenta_graph.engine import packs, simulation
from algenta_graph.engine.arguments import MAX_SCENARIO_BYTES, check_size
from algenta_graph.engine.auth import current_caller
from algenta_graph.engine.concurrency import off_loop
from algenta_graph.engine.contract import APPROVE_PATH
from algenta_graph.engine.errors import EngineToolError, InvalidArguments
from algenta_graph.engine.policy import Policy, policy_check
from algenta_graph.engine.store import Store
from algenta_graph.engine.store.base import utc_now
from algenta_graph.engine.store.decisions import BindingRefused


async def require_decision(store: Store, decision_id: str) -> dict[str, Any]:
    """The logged decision ``decision_id``.

    Raises:
        EngineToolError: ``decision_not_found`` (404).
    """
    decision = await off_loop(store.get_decision, decision_id)
    if decision is None:
        raise EngineToolError(
            "decision_not_found",
            f"no decision with decision_id {decision_id!r}; log_decision creates one",
            status_code=404,
        )
    return decision


class Planning:
    """Plans and decisions over one store, under one policy.

    Args:
        store: the engine's store.
        policy: the execution policy (its snapshot id goes into every plan).
    """

    def __init__(self, store: Store, policy: Policy) -> None:
        self.store = store
        self.policy = policy

    async def propose(
        self,
        scenario: str | dict[str, Any],
        *,
        chosen_action: str | None,
        n_samples: int,
        seed: int,
        decision_id: str | None,
    ) -> dict[str, Any]:
        """Propose a plan for ``scenario`` (``plan_decision``): simulate it, keep the proposal.

        Args:
            scenario: a built-in scenario name or a definition.
            chosen_action: the action to plan (None: the recommended one).
            n_samples: Monte Carlo draws.
            seed: the random seed.
            decision_id: propose the plan for this logged decision, and bind it to it.

        Returns:
            The plan with its ``plan_id``, ``plan_hash``, single-use ``nonce`` and where to
            approve it.

        Raises:
            EngineToolError: ``unknown_action``, or a refused binding (:func:`binding_error`).
        """
        check_size("plan_decision", "scenario", scenario, MAX_SCENARIO_BYTES)
        result = await off_loop(simulation.simulate, scenario, seed=seed, n_samples=n_samples)
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
            await off_loop(
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
            "policy_check": policy_check(self.policy, chosen["confidence"], chosen["risk_p5"]),
            "alternatives": [a for a in result["actions"] if a["action"] != action],
            "next_step": (
                "log_decision with these numbers and this plan_id to record it"
                if decision_id is None
                else f"have it approved, then execute decision {decision_id} with its nonce"
            ),
        }

    async def log(
        self,
        *,
        chosen_action: str,
        expected_value: float,
        confidence: float,
        risk_p5: float,
        risk_p95: float,
        rationale: str | None,
        scenario: str | dict[str, Any] | None,
        plan_hash: str | None,
        plan_id: str | None,
    ) -> dict[str, Any]:
        """Log a decision (``log_decision``), bound to its plan when it names one.

        Args:
            chosen_action: the action chosen.
            expected_value: its expected value.
            confidence: its confidence, 0 to 1.
            risk_p5: the 5th percentile of its return on capital.
            risk_p95: the 95th percentile.
            rationale: why it was chosen.
            scenario: the scenario it was chosen from (default: its plan's).
            plan_hash: the hash of its plan; alone, it binds the one unbound plan of that hash.
            plan_id: the plan to bind it to.

        Returns:
            Its ``decision_id``, ``logged_at``, the record and the policy's preview.

        Raises:
            InvalidArguments: ``risk_p5`` exceeds ``risk_p95``, or ``scenario`` is too large.
            EngineToolError: ``plan_not_found``, ``plan_hash_mismatch`` (other numbers, or
                another plan's hash), or a refused binding (:func:`binding_error`).
        """
        if risk_p5 > risk_p95:
            raise InvalidArguments(
                "log_decision", f"risk_p5 ({risk_p5}) exceeds risk_p95 ({risk_p95})"
            )
        if scenario is not None:
            check_size("log_decision", "scenario", scenario, MAX_SCENARIO_BYTES)
        if plan_id is not None:
            proposal = await off_loop(self.store.proposal, plan_id)
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
            plan = await off_loop(self.store.get_plan, plan_hash)
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
            await off_loop(self.store.insert_decision, decision, actor=current_caller().identity)
        except BindingRefused as refused:
            raise binding_error(refused, plan_hash=plan_hash, plan_id=plan_id) from None
        return {
            "decision_id": decision["decision_id"],
            "logged_at": decision["logged_at"],
            "decision": decision,
            "policy_check": policy_check(self.policy, confidence, risk_p5),
        }

    async def show(self, decision_id: str) -> dict[str, Any]:
        """A decision, the plan it is bound to and its executions (``get_decision``).

        Raises:
            EngineToolError: ``decision_not_found`` (404).
        """
        decision = await require_decision(self.store, decision_id)
        executions = await off_loop(self.store.executions, decision_id)
        return {
            "decision": decision,
            "plan": await self._plan_summary(decision["plan_id"]),
            "executions": executions,
        }

    async def _plan_summary(self, plan_id: str | None) -> dict[str, Any] | None:
        """The plan a decision is bound to, as get_decision shows it (None: bound to none)."""
        if plan_id is None:
            return None
        row = await off_loop(self.store.proposal, plan_id)
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


def binding_error(
    refused: BindingRefused,
    *,
    plan_hash: str | None,
    plan_id: str | None = None,
    decision_id: str | None = None,
) -> EngineToolError:
    """The tool error for a refused binding of a decision to a plan (nothing was written).

    Args:
        refused: the store's refusal.
        plan_hash: the plan hash the binding was asked for.
        plan_id: the plan id it was asked for, if any.
        decision_id: the decision a plan was proposed for, if any.
    """
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


def plan_not_approved(plan_id: str, state: str) -> EngineToolError:
    """The refusal to execute under a plan that is not approved (or already executed)."""
    return EngineToolError(
        "plan_not_approved",
        f"plan {plan_id} is {state}, not approved: an operator approves it with POST"
        f" {APPROVE_PATH.format(plan_id=plan_id)}; an executed plan cannot run again (propose"
        " a new plan for the decision with plan_decision(decision_id=...) and have it"
        " approved)",
        status_code=409,
    )
