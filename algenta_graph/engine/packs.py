"""Decision packs: what a decision case computes, and the plan each analysis proposes.

A decision case names a pack and gives it its input (``POST /v1/decision-cases``); an analysis
run computes the pack over that input (seeded, deterministic); an action plan is one action of
that analysis with its numbers. Every plan is a plain JSON object whose canonical form
(``json.dumps(plan, sort_keys=True)``) hashes to its ``plan_hash``, and :func:`compute_plan`
recomputes it from its inputs alone, which is what a replay does.

Packs:

- ``renewal_capacity_allocation``: allocate a capacity of customer-success hours across the
  accounts up for renewal (the pack the public conformance runner uses), see
  :func:`analyse_renewal`;
- ``scenario``: a decision scenario of the MCP tools (a built-in name or a definition, see
  :mod:`~algenta_graph.engine.simulation`); its plan is exactly the one ``plan_decision`` makes
  for the same scenario, seed, samples and action (the same ``plan_hash``);
- each built-in scenario name (``restock_inventory``, ...) as a shorthand for ``scenario``.

>>> inputs = renewal_inputs({"accounts": [{"account_id": "A1", "arr": 1000, "health_score": 50,
...     "renewal_date": "2026-08-01"}], "capacity": {"total_hours": 10}})
>>> result = analyse_renewal(inputs, seed=1, n_samples=200)
>>> result["recommended_action"], result["actions"][0]["hours_allocated"]
('allocate_by_risk', 10.0)
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from datetime import date, timedelta
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from algenta_graph.engine import simulation
from algenta_graph.engine.errors import EngineToolError

RENEWAL = "renewal_capacity_allocation"
SCENARIO = "scenario"
PACK_IDS: tuple[str, ...] = (RENEWAL, SCENARIO, *simulation.SCENARIOS)

DEFAULT_SEED = 42
DEFAULT_SAMPLES = 10_000
MAX_PACK_SAMPLES = 20_000
MAX_ACCOUNTS = 200

# The renewal model's assumptions (documented in algenta_graph/engine/README.md).
SAVE_MAX = 0.6
"""At most this share of an account's ARR at risk is retained by customer-success attention."""
HOURS_SCALE = 10.0
"""Hours of attention after which 1 - 1/e of that maximum is reached (diminishing returns)."""
EFFECT_SD = 0.3
"""Standard deviation of each account's response to attention (mean 1, independent by account,
the same draw for every action: common random numbers)."""
RENEWAL_ACTIONS: tuple[str, ...] = ("allocate_by_risk", "allocate_evenly", "no_intervention")


class PackInputError(ValueError):
    """A pack input that cannot be used; the message names each field and what is wrong."""


_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)


class Account(BaseModel):
    """One account up for renewal (``pack_input.accounts[]``)."""

    model_config = _STRICT
    account_id: Annotated[str, Field(min_length=1, max_length=100)]
    name: Annotated[str, Field(max_length=200)] = ""
    arr: Annotated[float, Field(ge=0, le=1e12)]
    renewal_date: date
    health_score: Annotated[float, Field(ge=0, le=100)]
    segment: Annotated[str, Field(min_length=1, max_length=50)] = "standard"


class Capacity(BaseModel):
    """The customer-success hours to allocate, and what an hour costs."""

    model_config = _STRICT
    total_hours: Annotated[float, Field(gt=0, le=100_000)]
    hourly_cost: Annotated[float, Field(ge=0, le=1e6)] = 0.0


class Constraints(BaseModel):
    """The allocation's constraints: the strategic minimum, the step of an allocation."""

    model_config = _STRICT
    strategic_min_hours: Annotated[float, Field(ge=0, le=100_000)] = 0.0
    allocation_step_hours: Annotated[float, Field(gt=0, le=100_000)] = 1.0


class RenewalInput(BaseModel):
    """The ``pack_input`` of ``renewal_capacity_allocation`` (account ids unique)."""

    model_config = _STRICT
    accounts: Annotated[list[Account], Field(min_length=1, max_length=MAX_ACCOUNTS)]
    capacity: Capacity
    constraints: Constraints = Constraints()
    horizon_days: Annotated[int, Field(ge=1, le=3650)] = 90
    as_of: date | None = None

    @model_validator(mode="after")
    def _unique_ids(self) -> RenewalInput:
        """Refuse a repeated ``account_id``, and an allocation of over 100,000 steps."""
        seen: set[str] = set()
        for a in self.accounts:
            if a.account_id in seen:
                raise ValueError(f"account_id {a.account_id!r} appears more than once")
            seen.add(a.account_id)
        if self.capacity.total_hours / self.constraints.allocation_step_hours > 100_000:
            raise ValueError(
                "capacity.total_hours / constraints.allocation_step_hours is over 100000 steps"
            )
        return self


class ScenarioInput(BaseModel):
    """The ``pack_input`` of ``scenario`` (and of each built-in scenario as a pack)."""

    model_config = _STRICT
    scenario: str | dict[str, Any]
    chosen_action: str | None = None


def describe_errors(exc: ValidationError, root: str) -> str:
    """One line per problem: ``field: what is wrong (got ...)``."""
    parts = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in (root, *e["loc"]) if x != "") or root
        if e["type"] == "missing":
            parts.append(f"{loc}: missing")
        elif e["type"] == "extra_forbidden":
            parts.append(f"{loc}: unknown field")
        else:
            got = repr(e.get("input"))
            got = got if len(got) <= 60 else got[:57] + "..."
            parts.append(f"{loc}: {e['msg']} (got {got})")
    return "; ".join(parts)


def renewal_inputs(pack_input: Any) -> dict[str, Any]:
    """The validated, normalised input of a ``renewal_capacity_allocation`` case (JSON)."""
    try:
        model = RenewalInput.model_validate(pack_input)
    except ValidationError as exc:
        raise PackInputError(describe_errors(exc, "pack_input")) from None
    normalised: dict[str, Any] = model.model_dump(mode="json")
    _strategic_steps(normalised)  # an infeasible minimum is bad input, found before any write
    return normalised


def scenario_inputs(pack_id: str, pack_input: Any) -> dict[str, Any]:
    """The validated input of a ``scenario`` case (or a built-in scenario's shorthand)."""
    if pack_id != SCENARIO:
        pack_input = {"scenario": pack_id, **(pack_input or {})}
    try:
        model = ScenarioInput.model_validate(pack_input)
    except ValidationError as exc:
        raise PackInputError(describe_errors(exc, "pack_input")) from None
    try:
        simulation.resolve_scenario(model.scenario)
    except EngineToolError as exc:
        raise PackInputError(f"pack_input.scenario: {exc.message}") from None
    return model.model_dump(mode="json", exclude_none=True)


def normalise(pack_id: str, pack_input: Any) -> dict[str, Any]:
    """Validate a case's input for its pack; :class:`PackInputError` names what is wrong."""
    if pack_id == RENEWAL:
        return renewal_inputs(pack_input)
    if pack_id == SCENARIO or pack_id in simulation.SCENARIOS:
        return scenario_inputs(pack_id, pack_input)
    raise KeyError(pack_id)


# -- the renewal capacity model ----------------------------------------------------------------


def _in_scope(inputs: dict[str, Any]) -> list[dict[str, Any]]:
    """The accounts the allocation considers, each with its ARR at risk.

    All of them, or (with ``as_of``) those renewing within ``horizon_days`` of it.
    """
    as_of = None if inputs["as_of"] is None else date.fromisoformat(inputs["as_of"])
    out = []
    for a in inputs["accounts"]:
        renewal = date.fromisoformat(a["renewal_date"])
        if as_of is not None and not as_of <= renewal <= as_of + timedelta(inputs["horizon_days"]):
            continue
        risk = (100.0 - a["health_score"]) / 100.0
        out.append({**a, "churn_risk": risk, "arr_at_risk": a["arr"] * risk})
    out.sort(key=lambda a: (a["renewal_date"], a["account_id"]))
    return out


def _retained(arr_at_risk: float, hours: float) -> float:
    """The ARR ``hours`` of attention retain (diminishing returns), before the response draw."""
    return arr_at_risk * SAVE_MAX * (1.0 - math.exp(-hours / HOURS_SCALE))


def _strategic_steps(inputs: dict[str, Any]) -> dict[str, int]:
    """The steps each in-scope strategic account must get.

    Raises:
        PackInputError: they exceed the capacity.
    """
    step = inputs["constraints"]["allocation_step_hours"]
    steps = math.floor(inputs["capacity"]["total_hours"] / step + 1e-9)
    need = math.ceil(inputs["constraints"]["strategic_min_hours"] / step - 1e-9)
    strategic = [a["account_id"] for a in _in_scope(inputs) if a["segment"] == "strategic"]
    if need * len(strategic) > steps:
        raise PackInputError(
            f"pack_input.constraints.strategic_min_hours: {len(strategic)} strategic account(s)"
            f" need {need * len(strategic) * step:g} hours, pack_input.capacity.total_hours"
            f" gives {steps * step:g} (in steps of {step:g})"
        )
    return dict.fromkeys(strategic, need)


def _allocations(inputs: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Hours per account for each action (in whole steps)."""
    accounts = _in_scope(inputs)
    step = inputs["constraints"]["allocation_step_hours"]
    steps = math.floor(inputs["capacity"]["total_hours"] / step + 1e-9)
    minimum = _strategic_steps(inputs)
    free = steps - sum(minimum.values())
    ids = [a["account_id"] for a in accounts]

    by_risk = {i: minimum.get(i, 0) for i in ids}
    at_risk = {a["account_id"]: a["arr_at_risk"] for a in accounts}
    for _ in range(free if ids else 0):
        gains = [
            (
                _retained(at_risk[i], (by_risk[i] + 1) * step)
                - _retained(at_risk[i], by_risk[i] * step),
                -n,
                i,
            )
            for n, i in enumerate(ids)
        ]
        gain, _, best = max(gains)
        if gain <= 0:
            break
        by_risk[best] += 1

    evenly = {i: minimum.get(i, 0) for i in ids}
    if ids:
        for n in range(free):
            evenly[ids[n % len(ids)]] += 1
    return {
        "allocate_by_risk": {i: by_risk[i] * step for i in ids},
        "allocate_evenly": {i: evenly[i] * step for i in ids},
        "no_intervention": dict.fromkeys(ids, 0.0),
    }


def analyse_renewal(inputs: dict[str, Any], *, seed: int, n_samples: int) -> dict[str, Any]:
    """The renewal capacity analysis, seeded: the same input, seed and samples, the same result.

    For each action (allocate by risk, allocate evenly, no intervention): the hours per account,
    the expected ARR retained net of the hours' cost (``expected_value``), the share of draws in
    which it beats every other action (``confidence``), and the 5th / 95th percentiles of that
    value over the ARR at risk in scope (``risk_p5`` / ``risk_p95``).

    Model: an account's churn risk is ``(100 - health_score) / 100`` and its ARR at risk
    ``arr * risk``; ``h`` hours of attention retain ``SAVE_MAX * (1 - exp(-h / HOURS_SCALE))``
    of it, times the account's response (normal, mean 1, sd ``EFFECT_SD``, at least 0).
    Strategic accounts get at least ``strategic_min_hours`` (in whole steps); allocating by
    risk gives each further step to the account it retains most for.
    """
    if not 100 <= n_samples <= MAX_PACK_SAMPLES:
        raise PackInputError(f"n_samples must be between 100 and {MAX_PACK_SAMPLES}")
    accounts = _in_scope(inputs)
    allocations = _allocations(inputs)
    cost = inputs["capacity"]["hourly_cost"]
    stake = sum(a["arr_at_risk"] for a in accounts)
    names = list(RENEWAL_ACTIONS)
    gains = {
        name: [_retained(a["arr_at_risk"], allocations[name][a["account_id"]]) for a in accounts]
        for name in names
    }
    costs = {name: sum(allocations[name].values()) * cost for name in names}
    rng = random.Random(seed)
    values: dict[str, list[float]] = {name: [] for name in names}
    wins = dict.fromkeys(names, 0)
    for _ in range(n_samples):
        effect = [max(0.0, rng.gauss(1.0, EFFECT_SD)) for _ in accounts]
        draw = {}
        for name in names:
            draw[name] = sum(e * g for e, g in zip(effect, gains[name], strict=True)) - costs[name]
            values[name].append(draw[name])
        wins[max(names, key=lambda n: draw[n])] += 1
    summaries: list[dict[str, Any]] = []
    for name in names:
        returns = sorted(v / stake if stake > 0 else 0.0 for v in values[name])
        summaries.append(
            {
                "action": name,
                "expected_value": round(sum(values[name]) / n_samples, 2),
                "confidence": round(wins[name] / n_samples, 4),
                "risk_p5": round(simulation._percentile(returns, 0.05), 4),
                "risk_p95": round(simulation._percentile(returns, 0.95), 4),
                "hours_allocated": round(sum(allocations[name].values()), 6),
                "allocation": [
                    {
                        "account_id": a["account_id"],
                        "hours": allocations[name][a["account_id"]],
                        "arr_at_risk": round(a["arr_at_risk"], 2),
                        "expected_arr_retained": round(
                            _retained(a["arr_at_risk"], allocations[name][a["account_id"]]), 2
                        ),
                    }
                    for a in accounts
                ],
            }
        )
    summaries.sort(key=lambda s: (-s["expected_value"], s["action"]))
    out_of_scope = sorted(
        {a["account_id"] for a in inputs["accounts"]} - {a["account_id"] for a in accounts}
    )
    return {
        "pack_id": RENEWAL,
        "seed": seed,
        "n_samples": n_samples,
        "recommended_action": summaries[0]["action"],
        "arr_at_risk": round(stake, 2),
        "capacity_hours": inputs["capacity"]["total_hours"],
        "accounts_in_scope": [a["account_id"] for a in accounts],
        "accounts_out_of_scope": out_of_scope,
        "actions": summaries,
        "model": {"save_max": SAVE_MAX, "hours_scale": HOURS_SCALE, "effect_sd": EFFECT_SD},
    }


# -- analyses and plans --------------------------------------------------------------------------


def analyse(pack_id: str, inputs: dict[str, Any], *, seed: int, n_samples: int) -> dict[str, Any]:
    """An analysis run's result for a validated case input."""
    if pack_id == RENEWAL:
        return analyse_renewal(inputs, seed=seed, n_samples=n_samples)
    if not 100 <= n_samples <= simulation.MAX_SAMPLES:
        raise PackInputError(f"n_samples must be between 100 and {simulation.MAX_SAMPLES}")
    result = simulation.simulate(inputs["scenario"], seed=seed, n_samples=n_samples)
    return {"pack_id": pack_id, **result}


def scenario_plan(
    scenario: str | dict[str, Any],
    action: str,
    chosen: dict[str, Any],
    *,
    seed: int,
    n_samples: int,
    policy_snapshot_id: str,
) -> dict[str, Any]:
    """The plan of one action of a simulated scenario (what ``plan_decision`` proposes)."""
    return {
        "scenario": scenario,
        "seed": seed,
        "n_samples": n_samples,
        "chosen_action": action,
        "expected_value": chosen["expected_value"],
        "confidence": chosen["confidence"],
        "risk_p5": chosen["risk_p5"],
        "risk_p95": chosen["risk_p95"],
        "policy_snapshot_id": policy_snapshot_id,
    }


def plan_of(
    pack_id: str,
    inputs: dict[str, Any],
    analysis: dict[str, Any],
    *,
    chosen_action: str | None,
    policy_snapshot_id: str,
) -> dict[str, Any]:
    """The plan of one action of an analysis (default: the recommended one).

    Args:
        pack_id: the case's pack.
        inputs: the case's normalised ``pack_input``.
        analysis: the analysis run's result.
        chosen_action: the action to plan (None: the input's ``chosen_action``, else the
            recommended one).
        policy_snapshot_id: the policy the plan is proposed under.

    Raises:
        EngineToolError: ``unknown_action``, the analysis has no such action.
    """
    by_action = {a["action"]: a for a in analysis["actions"]}
    action = chosen_action or inputs.get("chosen_action") or analysis["recommended_action"]
    if action not in by_action:
        raise EngineToolError(
            "unknown_action",
            f"action {action!r} is not one of this analysis: {', '.join(by_action)}",
        )
    chosen = by_action[action]
    if pack_id != RENEWAL:
        return scenario_plan(
            inputs["scenario"],
            action,
            chosen,
            seed=analysis["seed"],
            n_samples=analysis["n_samples"],
            policy_snapshot_id=policy_snapshot_id,
        )
    return {
        "pack_id": RENEWAL,
        "pack_input": inputs,
        "seed": analysis["seed"],
        "n_samples": analysis["n_samples"],
        "chosen_action": action,
        "expected_value": chosen["expected_value"],
        "confidence": chosen["confidence"],
        "risk_p5": chosen["risk_p5"],
        "risk_p95": chosen["risk_p95"],
        "allocation": chosen["allocation"],
        "policy_snapshot_id": policy_snapshot_id,
    }


def canonical(value: Any) -> bytes:
    """The canonical bytes of a plan: what its ``plan_hash`` is the SHA-256 of."""
    return json.dumps(value, sort_keys=True).encode()


def plan_hash(plan: dict[str, Any]) -> str:
    """``sha256:`` and the hex SHA-256 of the plan's :func:`canonical` bytes."""
    return "sha256:" + hashlib.sha256(canonical(plan)).hexdigest()


def replay_inputs(plan: dict[str, Any]) -> dict[str, Any]:
    """What a replay needs to recompute ``plan`` (the inputs, not the results)."""
    if plan.get("pack_id") == RENEWAL:
        keys: tuple[str, ...] = ("pack_id", "pack_input", "seed", "n_samples", "chosen_action")
    else:
        keys = ("scenario", "seed", "n_samples", "chosen_action")
    return {"kind": "pack" if "pack_id" in plan else "scenario"} | {k: plan[k] for k in keys}


def compute_plan(inputs: dict[str, Any], *, policy_snapshot_id: str) -> dict[str, Any]:
    """Recompute a plan from :func:`replay_inputs` alone (a replay).

    The same bytes as the original whenever the engine's computation is unchanged.
    """
    seed, n_samples = int(inputs["seed"]), int(inputs["n_samples"])
    if inputs.get("kind") == "pack":
        pack_id = str(inputs["pack_id"])
        normalised = normalise(pack_id, inputs["pack_input"])
        analysis = analyse(pack_id, normalised, seed=seed, n_samples=n_samples)
        return plan_of(
            pack_id,
            normalised,
            analysis,
            chosen_action=inputs["chosen_action"],
            policy_snapshot_id=policy_snapshot_id,
        )
    result = simulation.simulate(inputs["scenario"], seed=seed, n_samples=n_samples)
    by_action = {a["action"]: a for a in result["actions"]}
    action = str(inputs["chosen_action"])
    if action not in by_action:
        raise EngineToolError(
            "unknown_action", f"action {action!r} is not in scenario {result['scenario']!r}"
        )
    return scenario_plan(
        inputs["scenario"],
        action,
        by_action[action],
        seed=seed,
        n_samples=n_samples,
        policy_snapshot_id=policy_snapshot_id,
    )
