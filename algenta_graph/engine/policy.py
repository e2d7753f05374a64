"""The execution policy and its three named gates.

The gates apply in order: ``idempotency`` -> ``confidence`` -> ``risk_floor``.

>>> p = Policy(min_confidence=0.6, risk_floor=0.5)
>>> check(p, confidence=0.9, risk_p5=-0.1, already_executed=True, force=False,
...       override_safety=False).denial.gate
'idempotency'
>>> check(p, confidence=0.4, risk_p5=-0.9, already_executed=False, force=False,
...       override_safety=True).safety_overridden
True
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from algenta_graph.engine.errors import GateDenied

GATES: tuple[str, ...] = ("idempotency", "confidence", "risk_floor")


@dataclass(frozen=True)
class Policy:
    """The execution policy: the confidence minimum and the risk floor.

    Attributes:
        min_confidence: in [0, 1]; a decision with a lower confidence is blocked.
        risk_floor: >= 0; a decision with ``risk_p5`` below ``-risk_floor`` is blocked.

    Raises:
        ValueError: a value that is not a finite number in its range.
    """

    min_confidence: float = 0.6
    risk_floor: float = 0.5

    def __post_init__(self) -> None:
        """Check both values and store them as floats (``-0.0`` as ``0.0``)."""
        for name in ("min_confidence", "risk_floor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value}")
            # -0.0 is 0.0: one policy, one snapshot id
            object.__setattr__(self, name, float(value) + 0.0)
        if not 0.0 <= self.min_confidence <= 1.0:
            raise ValueError(f"min_confidence must be in [0, 1], got {self.min_confidence}")
        if self.risk_floor < 0.0:
            raise ValueError(f"risk_floor must be >= 0, got {self.risk_floor}")

    def as_dict(self) -> dict[str, Any]:
        """``{"min_confidence", "risk_floor"}``."""
        return {"min_confidence": self.min_confidence, "risk_floor": self.risk_floor}

    @property
    def snapshot_id(self) -> str:
        """A stable id for this policy: ``pol_`` + a hash of its canonical JSON."""
        digest = hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()
        return f"pol_{digest[:16]}"


@dataclass(frozen=True)
class Verdict:
    """The gates' answer: a denial, or permission (and whether a safety override was needed)."""

    denial: GateDenied | None
    safety_overridden: bool = False


def policy_check(policy: Policy, confidence: float, risk_p5: float) -> dict[str, str]:
    """What the confidence and risk-floor gates would say of these numbers (a preview).

    Args:
        policy: the policy.
        confidence: a decision's confidence.
        risk_p5: its 5th percentile return on capital.

    Returns:
        ``{"confidence": "pass" | "would_block", "risk_floor": "pass" | "would_block"}``.

    >>> policy_check(Policy(min_confidence=0.6, risk_floor=0.5), 0.9, -0.7)
    {'confidence': 'pass', 'risk_floor': 'would_block'}
    """
    return {
        "confidence": "pass" if confidence >= policy.min_confidence else "would_block",
        "risk_floor": "pass" if risk_p5 >= -policy.risk_floor else "would_block",
    }


def check(
    policy: Policy,
    *,
    confidence: float,
    risk_p5: float,
    already_executed: bool,
    force: bool,
    override_safety: bool,
) -> Verdict:
    """Apply the gates in order; ``force`` lifts idempotency for this one call only.

    ``already_executed``: an execution of this decision was delivered or may have been (its
    delivery outcome is unknown).
    """
    if already_executed and not force:
        return Verdict(
            GateDenied(
                "idempotency",
                "this decision was already executed (delivered, or sent with an unknown"
                " outcome); executing it again could repeat its action",
                "an operator may re-execute it once with force=true",
            )
        )
    low_confidence = confidence < policy.min_confidence
    if low_confidence and not override_safety:
        return Verdict(
            GateDenied(
                "confidence",
                f"confidence {confidence:g} is below the policy minimum {policy.min_confidence:g}",
                "an operator may execute it anyway with override_safety=true",
            )
        )
    below_floor = risk_p5 < -policy.risk_floor
    if below_floor and not override_safety:
        return Verdict(
            GateDenied(
                "risk_floor",
                f"risk_p5 {risk_p5:g} is below the policy risk floor {-policy.risk_floor:g}",
                "an operator may execute it anyway with override_safety=true",
            )
        )
    return Verdict(None, safety_overridden=low_confidence or below_floor)
