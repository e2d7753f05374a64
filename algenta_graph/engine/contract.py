"""What the reference engine says it is: its name and versions, its modes, the tools it implements.

``get_contract`` reports these; the client protocol behind them is in
``algenta_graph/engine/README.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import algenta_graph
from algenta_graph.engine import datasets, simulation
from algenta_graph.engine.arguments import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_TIMEOUT_SECONDS,
    MIN_TIMEOUT_SECONDS,
)
from algenta_graph.engine.policy import GATES, Policy

MANIFEST_VERSION = "1.0.0"
ENGINE_NAME = "algenta-reference-engine"
NOT_SUPPORTED = "not_supported_in_reference_engine"
"""The error code of a registry tool the reference engine advertises but does not implement."""

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

APPROVE_PATH = "/v1/decision-plans/{plan_id}/approve"
"""Where an operator approves a plan (format ``plan_id``)."""

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
"""The tools the reference engine implements for real (the rest of the registry answers
:data:`NOT_SUPPORTED`)."""


def engine_contract(
    *,
    policy: Policy,
    denials: str,
    allow_webhook_hosts: Sequence[str],
    auth_required: bool,
    registry_tool_count: int,
    relaxed: bool,
) -> dict[str, Any]:
    """The answer of ``get_contract``: what this engine is, offers and requires.

    Args:
        policy: the execution policy.
        denials: the ``--denials`` wire form.
        allow_webhook_hosts: the hosts besides loopback that may receive a webhook.
        auth_required: whether the engine has API keys.
        registry_tool_count: how many tools the whole registry advertises.
        relaxed: the mode.
    """
    return {
        "engine": ENGINE_NAME,
        "engine_version": algenta_graph.__version__,
        "manifest_version": MANIFEST_VERSION,
        "capabilities": {
            "implemented_tools": list(IMPLEMENTED_TOOLS),
            "registry_tool_count": registry_tool_count,
            "other_tools_answer": NOT_SUPPORTED,
        },
        "policy": {**policy.as_dict(), "policy_snapshot_id": policy.snapshot_id},
        "gates": list(GATES),
        "denial_wire_form": denials,
        "datasets": datasets.describe(),
        "scenarios": {k: v["description"] for k, v in simulation.SCENARIOS.items()},
        "webhooks": {"allowed_hosts": ["loopback", *allow_webhook_hosts]},
        "auth": "bearer" if auth_required else "none",
        "auth_headers": ["Authorization: Bearer <api key>", "X-API-Key: <api key>"],
        "http_api": "/v1 (decision cases, analysis runs, action plans, approval, execution,"
        " replay, the audit export)",
        "mode": "relaxed" if relaxed else "strict",
        "execute_requires": [] if relaxed else list(STRICT_REQUIREMENTS),
        "override_requires": (
            OVERRIDE_REQUIREMENT
            if auth_required
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
