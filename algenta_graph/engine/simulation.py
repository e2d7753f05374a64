"""A seeded Monte Carlo over a small scenario definition.

A scenario is a set of candidate actions; each action's value (in currency) is normal with a
mean and a standard deviation, and puts ``capital`` at risk. The result per action: the
expected value, the 5th/95th percentiles of the return on capital (``risk_p5`` / ``risk_p95``)
and the probability of a positive value. The recommended action has the highest expected
value. An action's ``confidence`` is the share of draws in which it beats every other action
(with a single action: the share of draws with a positive value). Same scenario and seed,
same numbers.

>>> r = simulate("restock_inventory", seed=7, n_samples=2000)
>>> r["recommended_action"], r["confidence"] >= 0.6, r["risk_p5"] > -0.5
('restock_fast_movers', True, True)
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

from algenta_graph.engine.errors import EngineToolError

MAX_ACTIONS = 12
MAX_SAMPLES = 100_000

# Built-in scenarios, chosen so each policy gate has a scenario that trips it with the default
# policy (min_confidence 0.6, risk_floor 0.5): restock passes, pricing is a coin flip
# (confidence), expansion has a fat left tail (risk_floor).
SCENARIOS: dict[str, dict[str, Any]] = {
    "restock_inventory": {
        "description": "Reorder stock for skus below their reorder point before the holiday peak.",
        "actions": {
            "restock_fast_movers": {"mean": 128_000.0, "stdev": 30_000.0, "capital": 400_000.0},
            "restock_everything": {"mean": 70_000.0, "stdev": 45_000.0, "capital": 650_000.0},
            "do_nothing": {"mean": 0.0, "stdev": 5_000.0, "capital": 100_000.0},
        },
    },
    "price_increase": {
        "description": "Raise list prices on widgets by 4% or 6%; demand response is uncertain.",
        "actions": {
            "raise_price_4pct": {"mean": 21_000.0, "stdev": 40_000.0, "capital": 250_000.0},
            "raise_price_6pct": {"mean": 22_000.0, "stdev": 60_000.0, "capital": 250_000.0},
        },
    },
    "expand_region": {
        "description": "Open a new sales region; high upside, a real chance of losing the stake.",
        "actions": {
            "expand_to_west": {"mean": 310_000.0, "stdev": 600_000.0, "capital": 900_000.0},
            "stay_in_current_regions": {"mean": 20_000.0, "stdev": 15_000.0, "capital": 900_000.0},
        },
    },
}


def _percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of already sorted values (``q`` in [0, 1])."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def resolve_scenario(scenario: str | Mapping[str, Any]) -> tuple[str, dict[str, dict[str, float]]]:
    """Validate a built-in scenario name or a ``{"name"?, "actions": {...}}`` definition."""
    if isinstance(scenario, str):
        if scenario not in SCENARIOS:
            raise EngineToolError(
                "unknown_scenario",
                f"unknown scenario {scenario!r}; built-in scenarios: {', '.join(SCENARIOS)}"
                " (or pass a definition {'actions': {name: {mean, stdev, capital}}})",
                status_code=404,
            )
        return scenario, SCENARIOS[scenario]["actions"]
    actions = scenario.get("actions")
    if not isinstance(actions, Mapping) or not actions:
        raise EngineToolError(
            "invalid_scenario", "scenario.actions must be a non-empty object of actions"
        )
    if len(actions) > MAX_ACTIONS:
        raise EngineToolError("invalid_scenario", f"at most {MAX_ACTIONS} actions per scenario")
    parsed: dict[str, dict[str, float]] = {}
    for name, spec in actions.items():
        if not isinstance(spec, Mapping):
            raise EngineToolError("invalid_scenario", f"action {name!r} must be an object")
        try:
            mean = float(spec["mean"])
            stdev = float(spec.get("stdev", 0.0))
            capital = float(spec.get("capital", 1.0))
        except KeyError:
            raise EngineToolError("invalid_scenario", f"action {name!r} needs a 'mean'") from None
        except (TypeError, ValueError):
            raise EngineToolError(
                "invalid_scenario", f"action {name!r}: mean, stdev and capital must be numbers"
            ) from None
        if not all(math.isfinite(v) for v in (mean, stdev, capital)) or stdev < 0 or capital <= 0:
            raise EngineToolError(
                "invalid_scenario",
                f"action {name!r}: finite numbers, stdev >= 0 and capital > 0 are required",
            )
        parsed[str(name)] = {"mean": mean, "stdev": stdev, "capital": capital}
    return str(scenario.get("name", "custom")), parsed


def simulate(
    scenario: str | Mapping[str, Any], *, seed: int = 42, n_samples: int = 10_000
) -> dict[str, Any]:
    """Run the Monte Carlo; see the module docstring for what each number means."""
    if not 100 <= n_samples <= MAX_SAMPLES:
        raise EngineToolError("invalid_samples", f"n_samples must be between 100 and {MAX_SAMPLES}")
    name, actions = resolve_scenario(scenario)
    rng = random.Random(seed)
    draws = {
        a: [rng.gauss(spec["mean"], spec["stdev"]) for _ in range(n_samples)]
        for a, spec in actions.items()
    }
    names = list(draws)
    wins = dict.fromkeys(names, 0)
    for i in range(n_samples):
        wins[max(names, key=lambda a: draws[a][i])] += 1
    summaries: list[dict[str, Any]] = []
    for a, values in draws.items():
        capital = actions[a]["capital"]
        returns = sorted(v / capital for v in values)
        prob_positive = round(sum(v > 0 for v in values) / n_samples, 4)
        summaries.append(
            {
                "action": a,
                "expected_value": round(sum(values) / n_samples, 2),
                "confidence": prob_positive if len(names) == 1 else round(wins[a] / n_samples, 4),
                "risk_p5": round(_percentile(returns, 0.05), 4),
                "risk_p95": round(_percentile(returns, 0.95), 4),
                "prob_positive": prob_positive,
                "capital": capital,
            }
        )
    summaries.sort(key=lambda s: (-s["expected_value"], s["action"]))
    best = summaries[0]
    return {
        "scenario": name,
        "seed": seed,
        "n_samples": n_samples,
        "recommended_action": best["action"],
        "expected_value": best["expected_value"],
        "confidence": best["confidence"],
        "risk_p5": best["risk_p5"],
        "risk_p95": best["risk_p95"],
        "actions": summaries,
    }
