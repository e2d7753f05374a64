"""The governed tool node: runs a model's tool calls over MCP and names every outcome.

For each call of the latest AI message (``docs/ARCHITECTURE.md``, "The graph"):

- ``search_tools`` is answered here, from the BM25 index; the tools found become callable;
- a tool outside the run's profile is refused, never sent (invariant 2);
- ``execute_decision`` is sent with the graph's own ``metadata.algenta_graph`` tag (thread,
  tool call) and its result parsed into a receipt, a named-gate denial or a failure
  (invariant 3); a decision this thread already executed is never sent again, whatever its
  delivery status (invariant 8); a lost delivery of this thread is recovered from the engine
  (invariant 5);
- anything else is a plain MCP call.

Every receipt and denial is written to state; each denial carries the policy it was raised
under, so its handling never depends on a later run's settings. :meth:`GovernedToolNode.route`
then names the step's outcome for the conditional edge: the gate whose policy is strictest
(invariant 7), ``halt`` for a gate the graph does not know, ``failed`` or ``ok``.

Example (the node is built by :func:`~algenta_graph.graph.build_governed_graph`)::

    node = GovernedToolNode(catalog, policies=DEFAULT_POLICIES)
    update = await node(state, config)
    node.route({**state, **update})   # "ok" | "failed" | "confidence" | ... | "halt"
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from algenta_graph.catalog import EXECUTE_TOOL, SEARCH_TOOL, GovernedCatalog
from algenta_graph.chain import seal
from algenta_graph.errors import AlgentaGraphError, ToolNotInProfileError
from algenta_graph.gates import GATE_NAMES, GATES, POLICIES, Policy, policy_for
from algenta_graph.governance import GRAPH_SUPPLIED_FIELDS
from algenta_graph.outcomes import (
    ExecutionDenial,
    ExecutionFailure,
    ExecutionOutcome,
    ExecutionReceipt,
    parse_execution_outcome,
    tool_result_json,
)
from algenta_graph.run_settings import RunSettings, resolve_run_settings
from algenta_graph.state import DenialRecord, GovernedState, ReceiptRecord, new_escalation_id

__all__ = [
    "HALT",
    "MAX_TIMEOUT_SECONDS",
    "MIN_TIMEOUT_SECONDS",
    "OUTCOME_KEY",
    "GovernedToolNode",
    "last_step",
    "step_denials",
]

logger = logging.getLogger(__name__)

OUTCOME_KEY = "algenta_outcome"
"""``ToolMessage.response_metadata`` key naming the call's outcome (``ok``, ``failed``,
``gate:<name>``)."""
HALT = "halt"
MIN_TIMEOUT_SECONDS = 1.0
"""The shortest ``timeout_seconds`` the graph sends (a shorter one only manufactures deliveries
of unknown outcome, which count as executed)."""
MAX_TIMEOUT_SECONDS = 60.0


def message_text(message: BaseMessage) -> str:
    """A message's text, whether its content is a string or a list of blocks."""
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content)


def last_step(messages: Sequence[BaseMessage]) -> tuple[AIMessage | None, list[ToolMessage]]:
    """The latest AI message with tool calls and the tool messages answering it."""
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        if isinstance(msg, AIMessage) and msg.tool_calls:
            ids = {c["id"] for c in msg.tool_calls}
            answers = [
                m for m in messages[i + 1 :] if isinstance(m, ToolMessage) and m.tool_call_id in ids
            ]
            return msg, answers
    return None, []


def counts_as_executed(receipt: Mapping[str, Any]) -> bool:
    """Whether a receipt's delivery may have reached its target (invariant 8): every receipt,
    unless the engine states that nothing was sent (``failed`` with ``retryable: true``).

    >>> counts_as_executed({"execution_status": "unknown"})
    True
    >>> counts_as_executed({"execution_status": "failed", "response_code": None})
    True
    >>> counts_as_executed({"execution_status": "failed", "retryable": True})
    False
    """
    return not (receipt.get("execution_status") == "failed" and receipt.get("retryable") is True)


_SETTLE_POLL = 0.25
_SETTLE_MARGIN = 5.0
_ENGINE_DEFAULT_TIMEOUT = 10.0


def settle_for(args: Mapping[str, Any]) -> float:
    """How long an in-flight delivery of these arguments may still take to end.

    >>> settle_for({"timeout_seconds": 2}), settle_for({})
    (7.0, 15.0)
    """
    timeout = args.get("timeout_seconds")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        timeout = _ENGINE_DEFAULT_TIMEOUT
    return float(min(timeout, MAX_TIMEOUT_SECONDS)) + _SETTLE_MARGIN


def idempotency_key(attempt: str) -> str:
    """An engine idempotency key for one attempt (at most 200 characters).

    >>> idempotency_key("t1:call_1")
    'algenta-graph:t1:call_1'
    >>> len(idempotency_key("t" * 500))
    85
    """
    key = f"algenta-graph:{attempt}"
    if len(key) <= 200:
        return key
    return "algenta-graph:sha256:" + hashlib.sha256(attempt.encode()).hexdigest()


def plan_nonce(
    messages: Sequence[BaseMessage],
    plan_hash: str,
    *,
    plan_ids: Collection[str] | None = None,
    decision_id: str = "the decision",
) -> str | None:
    """The nonce of the plan a decision runs under, from this thread's ``plan_decision``
    results (``docs/ARCHITECTURE.md``, invariant 11): bound by plan id, never guessed by hash.

    ``plan_ids``: the plans the engine binds the decision to (its ``plan_id``, or every plan it
    lists for the decision as approved); then only those plans' results count. Without them,
    the results with ``plan_hash`` count. ``None`` when no result counts; one nonce when exactly
    one plan does; :class:`~algenta_graph.errors.AlgentaGraphError` naming the plans when
    several do (every proposal of one scenario has the same hash: which one approved this
    decision cannot be told apart, so nothing is sent).
    """
    found: dict[str, str] = {}  # plan id (or the nonce, for a result without one) -> nonce
    for message in messages:
        if not isinstance(message, ToolMessage) or not str(message.name or "").endswith(
            "plan_decision"
        ):
            continue
        body = _result_json(message)
        nonce, plan_id = body.get("nonce"), body.get("plan_id")
        if body.get("plan_hash") != plan_hash or not isinstance(nonce, str):
            continue
        if plan_ids is not None and plan_id not in plan_ids:
            continue
        found[str(plan_id) if isinstance(plan_id, str) and plan_id else nonce] = nonce
    if len(found) > 1:
        plans = ", ".join(k for k in found if k not in found.values()) or f"{len(found)} plans"
        raise AlgentaGraphError(
            f"plan_ambiguous: {len(found)} plan_decision results in this thread could be the "
            f"plan of {decision_id} (plan_hash {plan_hash}; {plans}); which one approved it "
            "cannot be told apart, so nothing was sent: log the decision with its plan_id"
        )
    return next(iter(found.values()), None)


def bound_plans(decision: Mapping[str, Any]) -> frozenset[str] | None:
    """The plans the engine says a decision may run under: those it lists for the decision as
    ``approved`` (``plans``: ``[{plan_id, state}]``), else the ``plan_id`` it was logged with;
    ``None`` when the engine names no plan (then the thread's results are read by hash).

    >>> sorted(bound_plans({"plan_id": "p1", "plans": [{"plan_id": "p1", "state": "executed"},
    ...                                                  {"plan_id": "p2", "state": "approved"}]}))
    ['p2']
    >>> bound_plans({"plan_id": "p1"}), bound_plans({})
    (frozenset({'p1'}), None)
    """
    plans = decision.get("plans")
    if isinstance(plans, list) and plans:
        return frozenset(
            str(p["plan_id"])
            for p in plans
            if isinstance(p, Mapping) and p.get("state") == "approved" and p.get("plan_id")
        )
    plan_id = decision.get("plan_id")
    return frozenset({plan_id}) if isinstance(plan_id, str) and plan_id else None


def _result_json(message: ToolMessage) -> Mapping[str, Any]:
    data = tool_result_json(message)
    return data if isinstance(data, Mapping) else {}


def step_denials(state: Mapping[str, Any]) -> list[DenialRecord]:
    """The denials of the latest tool step that a handler must apply a policy to."""
    _, answered = last_step(state.get("messages", []))
    ids = {m.tool_call_id for m in answered}
    return [
        d
        for d in state.get("denials") or []
        if d.get("tool_call_id") in ids and d.get("source") in ("model", "thread_receipts")
    ]


def gate_order(denials: Sequence[Mapping[str, Any]]) -> list[str]:
    """The gates of a step's denials, strictest policy first (ties in table order)."""
    policy: dict[str, Policy] = {}
    for d in denials:
        gate = str(d.get("gate"))
        recorded = d.get("policy")
        p: Policy = recorded if recorded in POLICIES else policy_for(gate, {})
        if gate not in policy or POLICIES.index(p) > POLICIES.index(policy[gate]):
            policy[gate] = p
    table = {g: i for i, g in enumerate(GATE_NAMES)}
    return sorted(policy, key=lambda g: (-POLICIES.index(policy[g]), table.get(g, -1)))


def in_place(
    messages: Sequence[BaseMessage], ai: AIMessage, answers: list[ToolMessage]
) -> list[BaseMessage]:
    """The ``messages`` update that puts ``answers`` right after ``ai``'s call (and its earlier
    answers), as every provider requires.

    Normally that is ``answers`` themselves (appended). When a later turn's messages already
    follow the call (a step cut short by a cancel or a crash, finished by the next turn,
    invariant 13), the whole list is rewritten in order, every message keeping its id.
    """
    index = next((i for i, m in enumerate(messages) if m is ai), None)
    later = list(messages[index + 1 :]) if index is not None else []
    if index is None or all(isinstance(m, ToolMessage) for m in later):
        return list(answers)
    ids = {c["id"] for c in ai.tool_calls}
    earlier = [m for m in later if isinstance(m, ToolMessage) and m.tool_call_id in ids]
    rest = [m for m in later if not (isinstance(m, ToolMessage) and m.tool_call_id in ids)]
    return [
        RemoveMessage(id=REMOVE_ALL_MESSAGES),
        *messages[: index + 1],
        *earlier,
        *answers,
        *rest,
    ]


def tool_message(
    content: str | list[Any],
    *,
    name: str,
    tool_call_id: str,
    outcome: str,
    status: Literal["success", "error"] = "success",
    artifact: Any = None,
    msg_id: str | None = None,
) -> ToolMessage:
    """A ToolMessage tagged with its outcome (what :meth:`GovernedToolNode.route` reads)."""
    return ToolMessage(
        content=content,
        name=name,
        tool_call_id=tool_call_id,
        status=status,
        artifact=artifact,
        id=msg_id or str(uuid.uuid4()),
        response_metadata={OUTCOME_KEY: outcome},
    )


def denial_text(decision_id: Any, denial: ExecutionDenial) -> str:
    """What the model is told about a denial: the gate, the reason, and that it cannot override."""
    return (
        f"DENIED: execute_decision for decision {decision_id} was blocked by the "
        f"{denial.gate} gate ({denial.code}): {denial.message}. Nothing was executed. "
        "You (the model) cannot override this gate, and retrying will be denied again; "
        "only a human operator can override it, outside this conversation. "
        "Tell the user which gate blocked the decision and why."
    )


def receipt_text(receipt: ExecutionReceipt, note: str = "") -> str:
    """What the model is told about a receipt."""
    data = receipt.model_dump(mode="json")
    head = (
        f"Executed decision {receipt.decision_id}: {receipt.execution_status}"
        f" (webhook {receipt.webhook_url} answered {receipt.response_code})"
    )
    return f"{head}{note}.\nReceipt: {json.dumps(data, sort_keys=True)}"


def dump(outcome: ExecutionOutcome) -> dict[str, Any]:
    """An outcome as stored in state (JSON-ready)."""
    return outcome.model_dump(mode="json")


def for_decision(outcome: ExecutionOutcome, decision_id: str) -> ExecutionOutcome:
    """``outcome``, unless it is a receipt for another decision: that is a failure, never a
    receipt of this call (it would also block that other decision in this thread)."""
    if isinstance(outcome, ExecutionReceipt) and outcome.decision_id != decision_id:
        return ExecutionFailure(
            message=(
                f"the engine answered with a receipt for decision {outcome.decision_id!r}, "
                f"not the decision executed ({decision_id!r})"
            ),
            raw=outcome.model_dump_json(),
        )
    return outcome


def _plain_content(content: Any) -> str | list[Any]:
    """MCP text blocks joined into one string; any other content passed through unchanged."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(b, Mapping) and b.get("type") == "text" for b in content
    ):
        return "\n".join(str(b.get("text", "")) for b in content)
    return list(content) if isinstance(content, list) else str(content)


class GovernedToolNode:
    """The ``governed_tool`` node (see the module docs)."""

    def __init__(self, catalog: GovernedCatalog, *, top_k: int, policies: Mapping[str, Policy]):
        self.catalog = catalog
        self.conn = catalog.conn
        self.top_k = top_k
        self.policies = policies

    def settings(self, config: RunnableConfig | None) -> RunSettings:
        """This run's settings: the graph's, tightened by the run (never loosened), read from
        ``config["configurable"]`` and the run's ``context``."""
        from langgraph._internal._constants import CONFIG_KEY_RUNTIME

        runtime = ((config or {}).get("configurable") or {}).get(CONFIG_KEY_RUNTIME)
        context = getattr(runtime, "context", None)
        return resolve_run_settings(config, context, top_k=self.top_k, policies=self.policies)

    async def __call__(self, state: GovernedState, config: RunnableConfig) -> dict[str, Any]:
        run = self.settings(config)
        ai, answered = last_step(state.get("messages", []))
        if ai is None:
            return {}
        done = {m.tool_call_id for m in answered}
        executed = {
            r.get("decision_id") for r in state.get("receipts") or [] if counts_as_executed(r)
        }
        selected = list(state.get("selected_tools") or [])
        out_messages: list[ToolMessage] = []
        receipts: list[ReceiptRecord] = []
        denials: list[DenialRecord] = []
        used: list[tuple[str, ToolMessage]] = []  # (real name, answer) of each catalog call
        for call in ai.tool_calls:
            call_id = call["id"] or ""
            if call_id in done:
                continue
            # the model calls a tool by its model-facing name (and argument keys); MCP, records
            # and receipts use the real ones (ToolMessages get the model's name back below)
            name, args = self.catalog.real_call(call["name"], call.get("args") or {})
            if name == SEARCH_TOOL:
                body, hits, ok = self.catalog.search(args, run)
                selected.extend(h for h in hits if h not in selected)
                out_messages.append(
                    tool_message(
                        body,
                        name=SEARCH_TOOL,
                        tool_call_id=call_id,
                        outcome="ok" if ok else "failed",
                        status="success" if ok else "error",
                    )
                )
                continue
            if not self.catalog.allowed(name, run):
                profile = run.profile.name if run.profile else self.conn.profile.name
                out_messages.append(
                    tool_message(
                        f"Error: {ToolNotInProfileError(name, profile)}",
                        name=name,
                        tool_call_id=call_id,
                        outcome="failed",
                        status="error",
                    )
                )
                continue
            if name == EXECUTE_TOOL and self.conn.is_algenta_tool(name):
                message, receipt, denial = await self._execute(
                    args, call_id, run, executed, state.get("messages", [])
                )
                if receipt is not None:
                    receipts.append(receipt)
                    if counts_as_executed(receipt):
                        executed.add(receipt.get("decision_id"))
                if denial is not None:
                    denials.append(denial)
                out_messages.append(message)
                used.append((name, message))
                continue
            out_messages.append(await self._plain_call(name, args, call_id))
            used.append((name, out_messages[-1]))
        await self._learn(state, run, used)
        called = {c["id"]: c["name"] for c in ai.tool_calls}
        for message in out_messages:  # each answer carries the name the model used
            message.name = called.get(message.tool_call_id, message.name)
        update: dict[str, Any] = {"messages": in_place(state.get("messages", []), ai, out_messages)}
        if receipts:
            update["receipts"] = receipts
        if denials:
            update["denials"] = denials
        if selected != list(state.get("selected_tools") or []):
            update["selected_tools"] = selected
        return seal(state, update)  # each new record linked into the thread's hash chain

    async def _learn(
        self, state: GovernedState, run: RunSettings, used: Sequence[tuple[str, ToolMessage]]
    ) -> None:
        """Feed the usage signal: each tool of the run's profile that served this turn's query
        successfully (never a denial, a failure or ``search_tools``)."""
        usage = self.catalog.usage
        if usage is None:
            return
        query = next(
            (
                message_text(m)
                for m in reversed(state.get("messages", []))
                if isinstance(m, HumanMessage)
            ),
            "",
        )
        allowed = self.catalog.allow_list(run) or list(self.catalog.tools)
        profile = self.catalog.profile_name(run)
        for name, message in used:
            ok = message.response_metadata.get(OUTCOME_KEY) == "ok"
            try:
                await usage.arecord(query, name, profile=profile, ok=ok, allowed=allowed)
            except Exception as exc:  # learning must never cost a governed step its records
                logger.warning("usage signal: could not record %s: %s", name, exc)

    @staticmethod
    def route(state: GovernedState) -> str:
        """The latest step's outcome: the strictest-policy gate, ``halt``, ``failed`` or ``ok``."""
        denials = step_denials(state)
        if denials:
            first = gate_order(denials)[0]
            return first if first in GATES else HALT
        _, answered = last_step(state.get("messages", []))
        outcomes = [m.response_metadata.get(OUTCOME_KEY, "ok") for m in answered]
        if any(o.startswith("gate:") for o in outcomes):
            return HALT  # a gate outcome without its denial record: never silently continue
        return "failed" if "failed" in outcomes else "ok"

    # ------------------------------------------------------------------ tool calls

    async def _plain_call(self, name: str, args: dict[str, Any], call_id: str) -> ToolMessage:
        try:
            result = await self.conn.call_tool(name, args, tool_call_id=call_id)
        except AlgentaGraphError as exc:
            return tool_message(
                f"Error: {exc}", name=name, tool_call_id=call_id, outcome="failed", status="error"
            )
        status: Literal["success", "error"] = (
            "error" if getattr(result, "status", "success") == "error" else "success"
        )
        return tool_message(
            _plain_content(result.content),
            name=name,
            tool_call_id=call_id,
            outcome="failed" if status == "error" else "ok",
            status=status,
            artifact=result.artifact,
        )

    @staticmethod
    def _bad_arguments(args: Mapping[str, Any]) -> list[str]:
        bad = [
            f"{key} must be a string, got {type(args.get(key)).__name__}"
            for key in ("decision_id", "webhook_url")
            if not isinstance(args.get(key), str)
        ]
        if "timeout_seconds" in args:
            t = args["timeout_seconds"]
            if (
                isinstance(t, bool)
                or not isinstance(t, int | float)
                or not math.isfinite(t)
                or not MIN_TIMEOUT_SECONDS <= t <= MAX_TIMEOUT_SECONDS
            ):
                bad.append(
                    f"timeout_seconds must be a number from {MIN_TIMEOUT_SECONDS:g} to "
                    f"{MAX_TIMEOUT_SECONDS:g}, got {t!r}"
                )
        return bad

    async def _execute(
        self,
        args: dict[str, Any],
        call_id: str,
        run: RunSettings,
        executed: set[Any],
        messages: Sequence[BaseMessage] = (),
    ) -> tuple[ToolMessage, ReceiptRecord | None, DenialRecord | None]:
        # never the model's: the graph supplies these itself, when the engine declares them
        args = {k: v for k, v in args.items() if k not in GRAPH_SUPPLIED_FIELDS}
        decision_id = args.get("decision_id")
        webhook_url = args.get("webhook_url")

        def error(text: str, artifact: Any = None) -> ToolMessage:
            return tool_message(
                text,
                name=EXECUTE_TOOL,
                tool_call_id=call_id,
                outcome="failed",
                status="error",
                artifact=artifact,
            )

        bad = self._bad_arguments(args)
        if bad:
            # malformed model arguments: named, never sent, never a crash of the graph
            return error(f"Error: execute_decision was not called: {'; '.join(bad)}"), None, None
        assert isinstance(decision_id, str) and isinstance(webhook_url, str)

        def denied(outcome: ExecutionDenial, source: str, artifact: Any = None) -> DenialRecord:
            record: dict[str, Any] = {
                **dump(outcome),
                "decision_id": decision_id,
                "webhook_url": webhook_url,
                "tool_call_id": call_id,
                "source": source,
                "policy": policy_for(outcome.gate, run.policies),
            }
            if "timeout_seconds" in args:
                record["timeout_seconds"] = args["timeout_seconds"]
            if record["policy"] == "escalate":
                record["escalation_id"] = new_escalation_id()  # its identity, from now on
            return record  # type: ignore[return-value]

        def denial_message(outcome: ExecutionDenial, artifact: Any = None) -> ToolMessage:
            return tool_message(
                denial_text(decision_id, outcome),
                name=EXECUTE_TOOL,
                tool_call_id=call_id,
                outcome=f"gate:{outcome.gate}",
                status="error",
                artifact=artifact,
            )

        if decision_id in executed:
            denial = ExecutionDenial(
                gate="idempotency",
                code="execution_blocked_idempotency",
                message=(
                    f"decision {decision_id} was already executed in this thread (its receipt is "
                    "in the thread's state; a delivery that failed or timed out may still have "
                    "reached its target); the graph did not send it to the engine again, only an "
                    "operator can"
                ),
            )
            return denial_message(denial), None, denied(denial, "thread_receipts")
        metadata = dict(args["metadata"]) if isinstance(args.get("metadata"), Mapping) else {}
        metadata["algenta_graph"] = {"thread_id": run.thread_id, "tool_call_id": call_id}
        args = {**args, "metadata": metadata}
        try:
            args.update(
                await self.graph_supplied(decision_id, f"{run.thread_id}:{call_id}", messages)
            )
        except AlgentaGraphError as exc:
            return error(f"Error: execute_decision was not called: {exc}"), None, None
        try:
            result: Any = await self.conn.call_tool(EXECUTE_TOOL, args, tool_call_id=call_id)
        except AlgentaGraphError as exc:
            return (
                error(f"Error: execute_decision for decision {decision_id} failed: {exc}"),
                None,
                None,
            )
        artifact = getattr(result, "artifact", None)
        outcome = parse_execution_outcome(result)
        if isinstance(outcome, ExecutionDenial) and outcome.gate == "idempotency":
            recovered = await self.recover(decision_id, run.thread_id, settle_for(args))
            if recovered is not None:
                record: dict[str, Any] = {
                    **dump(recovered),
                    "tool_call_id": call_id,
                    "source": "recovered",
                }
                note = " (executed earlier by this thread; receipt recovered)"
                msg = tool_message(
                    receipt_text(recovered, note),
                    name=EXECUTE_TOOL,
                    tool_call_id=call_id,
                    outcome="ok" if recovered.execution_status == "delivered" else "failed",
                    status="success" if recovered.execution_status == "delivered" else "error",
                )
                return msg, record, None  # type: ignore[return-value]
        outcome = for_decision(outcome, decision_id)
        if isinstance(outcome, ExecutionReceipt):
            delivered = outcome.execution_status == "delivered"
            msg = tool_message(
                receipt_text(outcome),
                name=EXECUTE_TOOL,
                tool_call_id=call_id,
                outcome="ok" if delivered else "failed",
                status="success" if delivered else "error",
                artifact=artifact,
            )
            receipt: dict[str, Any] = {**dump(outcome), "tool_call_id": call_id, "source": "model"}
            return msg, receipt, None  # type: ignore[return-value]
        if isinstance(outcome, ExecutionDenial):
            return denial_message(outcome, artifact), None, denied(outcome, "model")
        assert isinstance(outcome, ExecutionFailure)
        return (
            error(
                f"Error: execute_decision for decision {decision_id} returned neither a receipt "
                f"nor a named-gate denial: {outcome.message}",
                artifact,
            ),
            None,
            None,
        )

    async def graph_supplied(
        self, decision_id: str, attempt: str, messages: Sequence[BaseMessage]
    ) -> dict[str, str]:
        """The ``execute_decision`` arguments only the graph supplies, for the fields the engine
        declares (see ``algenta_graph/engine/README.md``, "The strict flow"):

        - ``idempotency_key``: one per attempt, from the thread and the tool call;
        - ``nonce``: the single-use nonce of the latest ``plan_decision`` result in this thread
          whose ``plan_hash`` is the one the decision was logged with.

        Raises ``AlgentaGraphError`` naming what is missing (nothing is sent then).
        """
        wanted: frozenset[str] = getattr(self.conn, "execute_supplied", frozenset())
        out: dict[str, str] = {}
        if "idempotency_key" in wanted:
            out["idempotency_key"] = idempotency_key(attempt)
        if "nonce" in wanted:
            record = await self.conn.get_decision(decision_id)
            found = record.get("decision")
            decision: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
            plan_hash = decision.get("plan_hash")
            if not isinstance(plan_hash, str) or not plan_hash:
                raise AlgentaGraphError(
                    f"decision {decision_id} was logged without a plan_hash; this engine executes "
                    "only a decision logged with the plan_hash of a plan_decision result"
                )
            plan_ids = bound_plans(decision)
            nonce = plan_nonce(messages, plan_hash, plan_ids=plan_ids, decision_id=decision_id)
            if nonce is None:
                which = f"of plan {', '.join(sorted(plan_ids))}" if plan_ids else "has plan_hash"
                raise AlgentaGraphError(
                    f"no plan_decision result in this thread {which} {plan_hash}; call "
                    "plan_decision (and have an operator approve the plan) before executing"
                )
            out["nonce"] = nonce
        return out

    async def find_execution(
        self,
        decision_id: Any,
        match: Callable[[Mapping[str, Any]], bool],
        *,
        settle: float = 0.0,
    ) -> tuple[ExecutionReceipt, Mapping[str, Any]] | None:
        """An execution of ``decision_id`` on the engine whose ``metadata.algenta_graph`` tag
        ``match``es: (its receipt, the tag), whatever its delivery status.

        ``settle``: when the execution found is still ``unknown`` (an engine that records a
        delivery before it starts shows it so while it is in flight, e.g. the one a crashed
        process left running), look again for up to this many seconds, so the record says how
        it ended; it stays ``unknown`` if it never ends (the engine died during it).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settle
        while True:
            found = await self._find_once(decision_id, match)
            if found is None or found[0].execution_status != "unknown":
                return found
            if loop.time() >= deadline:
                return found
            await asyncio.sleep(_SETTLE_POLL)

    async def _find_once(
        self, decision_id: Any, match: Callable[[Mapping[str, Any]], bool]
    ) -> tuple[ExecutionReceipt, Mapping[str, Any]] | None:
        if not isinstance(decision_id, str):
            return None
        try:
            record = await self.conn.get_decision(decision_id)
        except AlgentaGraphError:
            return None
        executions = record.get("executions") if isinstance(record, Mapping) else None
        found: list[tuple[ExecutionReceipt, Mapping[str, Any]]] = []
        for execution in executions or []:
            if not isinstance(execution, Mapping):
                continue
            meta = execution.get("metadata")
            tag = meta.get("algenta_graph") if isinstance(meta, Mapping) else None
            if not isinstance(tag, Mapping) or not match(tag):
                continue
            fields = {
                k: v
                for k, v in execution.items()
                if k not in {"force", "override_safety", "metadata", "kind"}
            }
            outcome = parse_execution_outcome(fields)
            if isinstance(outcome, ExecutionReceipt) and outcome.decision_id == decision_id:
                found.append((outcome, tag))
        # a delivered execution first; else the latest attempt
        delivered = [f for f in found if f[0].execution_status == "delivered"]
        if delivered:
            return delivered[0]
        return found[-1] if found else None

    async def recover(
        self, decision_id: Any, thread_id: str | None, settle: float = 0.0
    ) -> ExecutionReceipt | None:
        """Crash recovery: this thread's own earlier execution, read back from the engine."""
        if thread_id is None:
            return None
        found = await self.find_execution(
            decision_id, lambda tag: tag.get("thread_id") == thread_id, settle=settle
        )
        return found[0] if found is not None else None
