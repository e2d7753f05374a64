"""What an execution sends and what it records: the webhook body and the execution receipt.

A receipt is written twice: provisional (``unknown``) before the webhook POST can go out, final
once the delivery's outcome is known. Every receipt has the fields the graph's
``ExecutionReceipt`` reads plus the engine's own (``README.md``, "Receipts and delivery outcomes").
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from algenta_graph.engine.contract import MANIFEST_VERSION
from algenta_graph.engine.delivery import DeliveryResult

RECEIPT_VERSION = "2"
RECEIPT_STATUS: dict[str, str] = {
    "delivered": "executed",
    "recorded": "executed",
    "unknown": "unknown",
    "failed": "failed",
}
"""A receipt's ``status`` for each ``execution_status``: ``executed`` (done), ``unknown`` (may
have been done: counts as executed), ``failed`` (certainly not done: may be retried)."""

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


def webhook_body(
    decision: dict[str, Any],
    *,
    execution_id: str,
    safety_overridden: bool,
    metadata: dict[str, Any] | None,
    sent_at: str,
) -> dict[str, Any]:
    """The body an execution POSTs to its webhook (:data:`WEBHOOK_BODY_SCHEMA`).

    Args:
        decision: the decision executed.
        execution_id: the execution's id.
        safety_overridden: whether ``override_safety`` lifted a gate.
        metadata: the caller's metadata, forwarded.
        sent_at: when the execution started.
    """
    return {
        "event": "decision.executed",
        "execution_id": execution_id,
        "decision_id": decision["decision_id"],
        "chosen_action": decision["chosen_action"],
        "expected_value": decision["expected_value"],
        "confidence": decision["confidence"],
        "safety_overridden": safety_overridden,
        "metadata": metadata,
        "sent_at": sent_at,
    }


def provisional_receipt(
    decision: dict[str, Any],
    webhook_url: str | None,
    *,
    execution_id: str,
    executed_at: str,
    policy_snapshot_id: str,
    safety_overridden: bool,
    plan_id: str | None,
    plan_required: bool,
    idempotency_key: str | None,
    trace_id: str | None,
    executed_by: str | None,
) -> dict[str, Any]:
    """The receipt on record before the webhook POST can go out: the outcome is ``unknown``.

    Args:
        decision: the decision executed.
        webhook_url: where it is sent (None: nothing is sent, HTTP only).
        execution_id: the execution's id.
        executed_at: when it started.
        policy_snapshot_id: the policy it ran under.
        safety_overridden: whether ``override_safety`` lifted a gate.
        plan_id: the plan it runs under (None: no plan needed).
        plan_required: whether a plan's approval was needed (``approval_state``).
        idempotency_key: the caller's key for this attempt.
        trace_id: the trace id of the request's ``traceparent``.
        executed_by: the identity of the key that sent the call.
    """
    return {
        "decision_id": decision["decision_id"],
        "webhook_url": webhook_url,
        "execution_status": "unknown",
        "response_code": None,
        "executed_at": executed_at,
        "policy_snapshot_id": policy_snapshot_id,
        "schema_snapshot_id": SCHEMA_SNAPSHOT_ID,
        "manifest_version": MANIFEST_VERSION,
        "payload_summary": {
            "action": decision["chosen_action"],
            "confidence": decision["confidence"],
            "expected_value": decision["expected_value"],
        },
        "safety_overridden": safety_overridden,
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
        "approval_state": "approved" if plan_required else "not_required",
        "idempotency_key": idempotency_key,
        "trace_id": trace_id,
        "executed_by": executed_by,
    }


def final_receipt(receipt: dict[str, Any], result: DeliveryResult) -> dict[str, Any]:
    """The provisional ``receipt`` completed with the delivery's outcome."""
    return {
        **receipt,
        "execution_status": result.outcome,
        "response_code": result.response_code,
        "failure_reason": result.failure_reason,
        "failure_code": result.failure_code,
        "retryable": result.outcome == "failed",
        "status": RECEIPT_STATUS[result.outcome],
    }
