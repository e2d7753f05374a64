"""The execution of a decision, over MCP (``execute_decision``) and over HTTP (a plan's execute).

:class:`Executor` checks who may execute (:meth:`Executor.check_access`), then, serialised per
decision: the idempotency-key replay, the three gates and the plan's approval, the write-ahead
record, the webhook delivery and the final receipt (:meth:`Executor.run`). Every refusal is an
:class:`~algenta_graph.engine.errors.EngineToolError` raised before anything is sent or
recorded.
"""

from __future__ import annotations

import functools
import hmac
import ssl
import uuid
from collections.abc import Collection
from typing import Any

import anyio
import httpx

from algenta_graph.engine.arguments import MAX_METADATA_BYTES, check_size
from algenta_graph.engine.auth import current_caller
from algenta_graph.engine.concurrency import KeyedLocks, off_loop
from algenta_graph.engine.contract import DEFAULT_RELAXED
from algenta_graph.engine.delivery import DeliveryResult, check_webhook_url, post_webhook
from algenta_graph.engine.errors import EngineToolError
from algenta_graph.engine.planning import plan_not_approved, require_decision
from algenta_graph.engine.policy import Policy, check
from algenta_graph.engine.receipts import final_receipt, provisional_receipt, webhook_body
from algenta_graph.engine.store import Store
from algenta_graph.engine.store.base import utc_now
from algenta_graph.engine.store.executions import IdempotencyKeyTaken, PlanNotApproved


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """The default verifying TLS context of httpx, built once (building one costs tens of ms)."""
    return httpx.create_ssl_context()


def key_reused(key: str, other: str = "another decision") -> EngineToolError:
    """The refusal of an idempotency key that belongs to an execution of ``other``."""
    return EngineToolError(
        "idempotency_key_reused",
        f"idempotency_key {key[:80]!r} already belongs to an execution of {other}: use one key"
        " per attempt",
        status_code=409,
    )


class Executor:
    """Executes decisions for one engine: its store, policy, webhook allow-list and mode.

    Args:
        store: the engine's store.
        policy: the execution policy the gates apply.
        allow_webhook_hosts: the hosts besides loopback that may receive a webhook.
        auth_required: whether the engine has API keys.
        relaxed: the mode (:data:`~algenta_graph.engine.contract.DEFAULT_RELAXED`).
    """

    def __init__(
        self,
        store: Store,
        policy: Policy,
        *,
        allow_webhook_hosts: Collection[str] = (),
        auth_required: bool = False,
        relaxed: bool = DEFAULT_RELAXED,
    ) -> None:
        self.store = store
        self.policy = policy
        self.allow_webhook_hosts = tuple(allow_webhook_hosts)
        self.auth_required = auth_required
        self.relaxed = relaxed
        self._locks = KeyedLocks()

    def check_access(self, *, override: bool) -> str | None:
        """Who may execute; the caller's identity.

        Strict mode: a key is needed, with the agent role (a plain execution) or the operator
        role (``override``: ``force`` / ``override_safety``), and execute enabled. Relaxed mode:
        any caller, except that an override needs an operator key with execute enabled whenever
        the engine has keys (so the model-facing agent key alone can never override).

        Args:
            override: the call sends ``force`` or ``override_safety``.

        Returns:
            The identity of the caller's key (None: a relaxed engine's anonymous caller).

        Raises:
            EngineToolError: ``execute_not_enabled``, ``override_not_permitted`` or
                ``role_not_permitted`` (403).
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

    async def bound_plan(self, decision: dict[str, Any], nonce: str | None) -> dict[str, Any]:
        """Strict mode: the plan proposal the decision is bound to, approved.

        Args:
            decision: the decision to execute.
            nonce: must be that plan's (None over HTTP, where the path names the plan).

        Raises:
            EngineToolError: ``plan_required``, ``invalid_nonce``, ``plan_not_approved``.
        """
        plan_id = decision["plan_id"]
        proposal = None if plan_id is None else await off_loop(self.store.proposal, plan_id)
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
            raise plan_not_approved(plan_id, proposal["state"])
        return proposal

    async def execute(
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
        """``execute_decision`` over MCP: check the caller and the arguments, then run it.

        Args:
            decision_id: the logged decision.
            webhook_url: where to POST the action.
            timeout_seconds: how long to wait for the webhook's answer.
            force: lift the idempotency gate (operator only).
            override_safety: lift the confidence and risk-floor gates (operator only).
            metadata: the caller's metadata, stored and forwarded.
            strict: ``(idempotency_key, nonce)`` in strict mode; None in relaxed mode.

        Returns:
            The receipt (a delivery that did not succeed is a receipt too).

        Raises:
            EngineToolError: a refusal (nothing sent or recorded).
        """
        identity = self.check_access(override=force or override_safety)
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
        decision = await require_decision(self.store, decision_id)
        check_webhook_url(webhook_url, allowed_hosts=self.allow_webhook_hosts)
        if strict is not None and decision["plan_hash"] is None:
            raise EngineToolError(
                "plan_required",
                f"decision {decision_id} was logged without a plan: execute_decision runs"
                " only a decision planned with plan_decision and logged bound to that plan"
                " (plan_id, or its plan_hash)",
                status_code=409,
            )
        return await self.run(
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

    async def run(
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
        """Run one execution of ``decision`` whose caller and arguments were checked.

        Per decision, serialised: the idempotency-key replay, the gates and the plan's
        approval, the write-ahead record, the delivery, the final receipt.

        Args:
            decision: the decision to execute.
            webhook_url: where to POST the action; None (HTTP only): nothing is sent, the
                execution is recorded (``execution_status: recorded``).
            identity: the identity of the caller's key.
            timeout_seconds: how long to wait for the webhook's answer.
            force: lift the idempotency gate.
            override_safety: lift the confidence and risk-floor gates.
            metadata: the caller's metadata.
            idempotency_key: the caller's key for this attempt.
            plan: None (relaxed: no plan needed); ``("nonce", nonce)`` (MCP, strict: the gates
                first, then the bound plan, whose nonce it must be); ``("path", None)`` (HTTP,
                the plan named by the path: its approval first, then the gates).

        Returns:
            The final receipt, or the stored one of an earlier attempt with the same
            ``idempotency_key`` (``idempotent_replay: true``).

        Raises:
            EngineToolError: a gate's denial, ``idempotency_key_reused``, a plan refusal.
        """
        decision_id = decision["decision_id"]
        async with self._locks.hold(decision_id):
            if idempotency_key is not None:
                earlier = await off_loop(self.store.execution_by_idempotency_key, idempotency_key)
                if earlier is not None:
                    stored = earlier["receipt"]
                    if earlier["decision_id"] != decision_id:
                        raise key_reused(idempotency_key, "another decision")
                    if stored.get("webhook_url") != webhook_url:
                        raise key_reused(idempotency_key, "a call to another webhook_url")
                    return {**stored, "idempotent_replay": True}
            plan_id: str | None = None
            if plan is not None and plan[0] == "path":
                plan_id = (await self.bound_plan(decision, None))["plan_id"]
            verdict = check(
                self.policy,
                confidence=decision["confidence"],
                risk_p5=decision["risk_p5"],
                already_executed=await off_loop(self.store.executed_count, decision_id) > 0,
                force=force,
                override_safety=override_safety,
            )
            if verdict.denial is not None:
                raise verdict.denial
            if plan is not None and plan[0] == "nonce":
                plan_id = (await self.bound_plan(decision, plan[1]))["plan_id"]
            execution_id = f"exe_{uuid.uuid4().hex[:20]}"
            executed_at = utc_now()
            body = webhook_body(
                decision,
                execution_id=execution_id,
                safety_overridden=verdict.safety_overridden,
                metadata=metadata,
                sent_at=executed_at,
            )
            receipt = provisional_receipt(
                decision,
                webhook_url,
                execution_id=execution_id,
                executed_at=executed_at,
                policy_snapshot_id=self.policy.snapshot_id,
                safety_overridden=verdict.safety_overridden,
                plan_id=plan_id,
                plan_required=plan is not None,
                idempotency_key=idempotency_key,
                trace_id=current_caller().trace_id,
                executed_by=identity,
            )
            # Write-ahead: the execution is on record (outcome unknown) before the POST can go
            # out, in one transaction with the plan's approved -> executed compare-and-set.
            try:
                await off_loop(
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
                raise plan_not_approved(plan_id or "?", "no longer approved") from None
            except IdempotencyKeyTaken:
                raise key_reused(idempotency_key or "") from None
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
                receipt = final_receipt(receipt, result)
                await off_loop(
                    self.store.finish_execution,
                    execution_id,
                    receipt,
                    release_plan=result.outcome == "failed",
                )
            return receipt
