"""An operator's claimed answer applied: what it executes, records and tells the model.

Two ways, by the escalated gate's side (:mod:`algenta_graph.governance.gates`):
:func:`apply_override` for the engine's gates (an approval or an edit re-executes the denied
decision on the operator path, :meth:`~algenta_graph.nodes.executor.DecisionExecutor.override`,
with the gate's override flag) and :func:`apply_held` for the graph-side gates (an approval or an
edit runs the held call at most once, :func:`~algenta_graph.nodes.write_ahead.run_once`). A
decline, a ``respond`` or an expired escalation executes nothing. Each answer becomes an
operator decision record (who, with which roles, what they were shown, when asked and decided,
the outcome: ``docs/ARCHITECTURE.md``, invariant 15), and the step's answer to the call is
replaced, so the model sees the outcome. Not the asking, the claim or the routing: those are the
denial handler's (:mod:`algenta_graph.nodes.denial_handler`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig

from algenta_graph.connection.client import EXECUTE_TOOL
from algenta_graph.connection.outcomes import ExecutionDenial, ExecutionReceipt
from algenta_graph.governance.gates import OVERRIDE_FLAGS
from algenta_graph.governance.tool_gates import CompiledGates, ToolRef, args_digest, count_calls
from algenta_graph.ledger import AnswerDecision, Ledger, held_call_id
from algenta_graph.nodes.claiming import Claim
from algenta_graph.nodes.executor import DecisionExecutor
from algenta_graph.nodes.questions import reviewed_args
from algenta_graph.nodes.steps import (
    OUTCOME_KEY,
    last_step,
    message_text,
    receipt_text,
    tool_message,
)
from algenta_graph.nodes.write_ahead import outcome_fields, run_once
from algenta_graph.operator_records import OperatorDecisionRecord, operator_decision_record
from algenta_graph.records import (
    DecisionResult,
    DenialRecord,
    OperatorVerdict,
    PolicyName,
    ReceiptRecord,
    ToolCallRecord,
    denial_record,
    escalation_id_of,
    held_call,
    receipt_record,
    tool_call_record,
)
from algenta_graph.state import GovernedState

# run_once: the write-ahead runner apply_held calls, re-exported as this module's name for it (a
# test holds a held call at its steps by replacing it here: tests/support/held_call_worker.py)
__all__ = ["apply_held", "apply_override", "run_once"]


@dataclasses.dataclass(frozen=True)
class _Answer:
    """A claim's answer to one gate's escalation, as both ways read it."""

    gate: str
    claim: Claim
    thread_id: str | None
    """The thread applying it."""
    elsewhere: str | None
    """The thread it was given in, when not this one."""
    by_call: dict[str, ToolMessage]
    """The step's answers, by tool call id."""
    roles: list[str]

    @property
    def where(self) -> str:
        return f" (answered in thread {self.elsewhere})" if self.elsewhere else ""


def _answer(gate: str, claim: Claim, state: GovernedState, config: RunnableConfig) -> _Answer:
    thread_id = (config.get("configurable") or {}).get("thread_id")
    elsewhere = claim.value.thread_id if claim.value.thread_id not in (None, thread_id) else None
    _, answered = last_step(state.get("messages", []))
    return _Answer(
        gate=gate,
        claim=claim,
        thread_id=str(thread_id) if thread_id else None,
        elsewhere=elsewhere,
        by_call={m.tool_call_id: m for m in answered},
        roles=list(claim.value.roles),
    )


@dataclasses.dataclass(frozen=True)
class _Choice:
    """The operator's decision on one escalated denial."""

    denial: Mapping[str, Any]
    decided: AnswerDecision
    action: Any
    reason: str | None
    verdict: OperatorVerdict
    edited: Mapping[str, Any] | None

    @property
    def call_id(self) -> Any:
        return self.denial.get("tool_call_id")

    @property
    def why(self) -> str:
        return f" ({self.reason})" if self.reason else ""


def _choices(answer: _Answer, pending: Sequence[Mapping[str, Any]]) -> list[_Choice]:
    """Each pending denial with its decision."""
    out: list[_Choice] = []
    for denial, decided in zip(pending, answer.claim.value.decisions, strict=True):
        out.append(
            _Choice(
                denial,
                decided,
                decided.action,
                decided.reason,
                decided.verdict,
                decided.edited_args,
            )
        )
    return out


@dataclasses.dataclass(frozen=True)
class _Effect:
    """What one decision came to: its result and what the model is told."""

    result: DecisionResult
    note: str
    success: bool = False
    outcome: dict[str, Any] | None = None
    """What ran answered (a dumped receipt, denial or failure; a held call's outcome)."""


@dataclasses.dataclass(frozen=True)
class _Recorded:
    """What an operator decision record names besides the answer: the decision or the call."""

    decision_id: str | None
    override_flag: str | None
    original_args: Mapping[str, Any]
    """What was reviewed (kept in the record only with an edit)."""
    tool: str | None = None
    digest: str | None = None


def _decision(
    answer: _Answer, choice: _Choice, effect: _Effect, recorded: _Recorded
) -> OperatorDecisionRecord:
    """The operator decision record of ``choice``."""
    decided, edited = choice.decided, choice.edited
    return operator_decision_record(
        operator=answer.claim.value.operator,
        reason=choice.reason,
        action=choice.action,
        gate=answer.gate,
        decision_id=recorded.decision_id,
        override_flag=recorded.override_flag,
        result=effect.result,
        outcome=effect.outcome,
        tool_call_id=choice.call_id,
        escalation_id=escalation_id_of(choice.denial),
        answered_in_thread=answer.elsewhere,
        verdict=choice.verdict,
        roles=answer.roles,
        digest=decided.digest,
        interrupt_id=decided.interrupt_id,
        asked_at=decided.asked_at or choice.denial.get("raised_at"),
        decided_at=answer.claim.value.decided_at,
        expires_at=decided.expires_at,
        original_args=recorded.original_args if edited is not None else None,
        edited_args=edited,
        tool=recorded.tool,
        args_digest=recorded.digest,
        approvers=answer.claim.value.approvers,
    )


async def _apply_each(
    answer: _Answer,
    pending: Sequence[Mapping[str, Any]],
    effect: Callable[[_Choice], Awaitable[_Effect]],
    recorded: Callable[[_Choice], _Recorded],
    told: Callable[[ToolMessage, _Choice, str], tuple[str, str]],
) -> tuple[list[OperatorDecisionRecord], list[ToolMessage]]:
    """Each decision's ``effect``, its record, and the step's answer to its call replaced.

    Args:
        answer: the claimed answer.
        pending: the escalated denials, in the order the answer's decisions follow.
        effect: what one decision does.
        recorded: what its record names besides the answer.
        told: ``(the model's original answer, the choice, the note) -> (content, tool name)``
            of the new answer.
    """
    decisions: list[OperatorDecisionRecord] = []
    messages: list[ToolMessage] = []
    for choice in _choices(answer, pending):
        done = await effect(choice)
        decisions.append(_decision(answer, choice, done, recorded(choice)))
        original = answer.by_call.get(choice.call_id or "")
        if original is not None:
            content, name = told(original, choice, done.note)
            messages.append(
                tool_message(
                    content,
                    name=name,
                    tool_call_id=original.tool_call_id,
                    msg_id=original.id,
                    outcome=original.response_metadata.get(OUTCOME_KEY, "ok"),
                    status="success" if done.success else "error",
                )
            )
    return decisions, messages


def _number(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


async def apply_override(
    executor: DecisionExecutor,
    gate: str,
    claim: Claim,
    pending: Sequence[Mapping[str, Any]],
    state: GovernedState,
    config: RunnableConfig,
    policy_for: Callable[[str], PolicyName],
) -> dict[str, Any]:
    """Apply the claim's answer to escalated denials of one of the engine's gates.

    Args:
        executor: the graph's executor (its operator path sends the override).
        gate: the escalated gate.
        claim: the claim in force (its answer, its operator, where it was given).
        pending: the escalated denials, in the order the answer's decisions follow.
        state: the thread's state.
        config: the applying run's config.
        policy_for: the policy a new denial of a gate is raised under (the engine may deny the
            override too: that denial goes through its own gate's policy).

    Returns:
        The update: the model's messages, receipts, denials and operator decisions.
    """
    answer = _answer(gate, claim, state, config)
    operator, where = claim.value.operator, answer.where
    receipts: list[ReceiptRecord] = []
    denials: list[DenialRecord] = []
    flag = OVERRIDE_FLAGS[gate]

    async def effect(choice: _Choice) -> _Effect:
        denial, edited, why = choice.denial, choice.edited, choice.why
        decision_id = denial.get("decision_id")
        if choice.verdict == "expired":
            return _Effect(
                "declined",
                f"The {gate} escalation EXPIRED at {choice.decided.expires_at} before "
                f"an operator's answer could take effect{where}. Decision {decision_id} was "
                "not executed.",
            )
        if choice.verdict == "responded":
            return _Effect(
                "declined",
                f"{choice.reason}\n(Operator {operator} answered in the tool's place{where}; "
                f"decision {decision_id} was not executed.)",
                success=True,
            )
        if choice.action == "decline":
            return _Effect(
                "declined",
                f"Operator {operator} reviewed the {gate} denial and DECLINED to "
                f"override it{why}{where}. Decision {decision_id} was not executed.",
            )
        outcome = await executor.override(
            denial,
            operator,
            choice.reason,
            flag,
            answer.thread_id,
            state.get("messages", []),
            answered_in=answer.elsewhere,
            edited=edited,
        )
        dump = outcome.model_dump(mode="json")
        how = f" with edited arguments {edited}" if choice.verdict == "modified" and edited else ""
        if isinstance(outcome, ExecutionReceipt):
            result: DecisionResult = (
                "receipt" if outcome.execution_status == "delivered" else "failed"
            )
            receipts.append(
                receipt_record(
                    outcome, tool_call_id=choice.call_id, source="operator", operator=operator
                )
            )
            note = (
                f"Operator {operator} OVERRODE the {gate} gate{why}{where}{how} "
                f"with {flag}. " + receipt_text(outcome)
            )
            return _Effect(result, note, success=result == "receipt", outcome=dump)
        if isinstance(outcome, ExecutionDenial):
            new = denial_record(
                outcome,
                decision_id=decision_id,
                webhook_url=(edited or {}).get("webhook_url", denial.get("webhook_url")),
                tool_call_id=choice.call_id,
                source="operator",
                policy=policy_for(outcome.gate),
                timeout_seconds=_number(
                    (edited or {}).get("timeout_seconds", denial.get("timeout_seconds"))
                ),
            )
            denials.append(new)
            note = (
                f"Operator {operator} tried to override the {gate} gate{how}, but "
                f"the engine denied the override too: {outcome.gate} gate "
                f"({outcome.code}): {outcome.message}. Nothing was executed; that "
                f"denial goes through the {outcome.gate} gate's policy "
                f"({new.get('policy')})."
            )
            return _Effect("denied", note, outcome=dump)
        note = (
            f"Operator {operator} overrode the {gate} gate{how}, but the "
            f"execution failed: {outcome.message}"
        )
        return _Effect("failed", note, outcome=dump)

    def recorded(choice: _Choice) -> _Recorded:
        denial = choice.denial
        return _Recorded(denial.get("decision_id"), flag, reviewed_args(denial, flag))

    def told(original: ToolMessage, choice: _Choice, note: str) -> tuple[str, str]:
        return (
            f"{note}\n(The model's call was first denied: {message_text(original)})",
            EXECUTE_TOOL,
        )

    decisions, messages = await _apply_each(answer, pending, effect, recorded, told)
    return {
        "messages": messages,
        "receipts": receipts,
        "denials": denials,
        "operator_decisions": decisions,
    }


def _held(choice: _Choice) -> tuple[str, dict[str, Any], Any]:
    """A held call's tool, the arguments it runs with (the edited ones) and their digest."""
    denial, edited = choice.denial, choice.edited
    tool = f"{denial.get('server')}.{denial.get('tool')}"
    run_args = dict(edited) if edited is not None else dict(denial.get("args") or {})
    digest = args_digest(tool, run_args) if edited is not None else denial.get("args_digest")
    return tool, run_args, digest


def _spent(
    gates: CompiledGates | None,
    gate: str,
    denial: Mapping[str, Any],
    state: GovernedState,
    ran: Sequence[Mapping[str, Any]],
) -> str | None:
    """Why a budget now blocks the held call of ``denial``, or ``None``.

    Counted from the thread's records plus ``ran`` (the calls this answer ran before it), in
    the run the call was made in; a budget denial's own budget is the operator's to override.
    """
    if gates is None or gate == "budget":
        return None
    tool = ToolRef(str(denial.get("server")), str(denial.get("tool")))
    calls = [*(state.get("tool_calls") or []), *ran]
    counts = count_calls(gates, tool, calls, state.get("denials") or [], denial.get("turn"))
    blocked = gates.check_budgets(tool, counts)
    return None if blocked is None else blocked.message


async def apply_held(
    executor: DecisionExecutor,
    gate: str,
    ledger: Ledger,
    claim: Claim,
    pending: Sequence[Mapping[str, Any]],
    state: GovernedState,
    config: RunnableConfig,
    tool_gates: CompiledGates | None = None,
) -> dict[str, Any]:
    """Apply the claim's answer to held calls of a graph-side gate.

    An approval (or an edit) runs the held call exactly once
    (:func:`~algenta_graph.nodes.write_ahead.run_once`, written ahead in ``ledger``); a reject, a
    ``respond`` or an expired escalation runs nothing. Each answer is an operator decision
    naming the tool and the digest of the arguments it ran with; the held call's answer is
    replaced by the outcome, so the model sees it.

    ``tool_gates``: the budgets are checked again before an approved call runs (unless the
    operator is answering a budget denial, which is that budget's override), counting every
    call that ran meanwhile, those approved before it in this answer included; a call over a
    budget is not run and the model and the operator are told why.

    Returns:
        The update: the model's messages, the operator decisions and the calls that ran (they
        count against the budgets).
    """
    answer = _answer(gate, claim, state, config)
    operator, where = claim.value.operator, answer.where
    ran: list[ToolCallRecord] = []  # a held call that ran counts against the budgets

    async def effect(choice: _Choice) -> _Effect:
        denial, why = choice.denial, choice.why
        tool, run_args, digest = _held(choice)
        if choice.verdict == "expired":
            return _Effect(
                "declined",
                f"The {gate} escalation EXPIRED at {choice.decided.expires_at} before "
                f"an operator's answer could take effect{where}. The call of {tool} was NOT "
                "run.",
            )
        if choice.verdict == "responded":
            return _Effect(
                "declined",
                f"{choice.reason}\n(Operator {operator} answered in the tool's place{where}; the "
                f"call of {tool} was not run.)",
                success=True,
            )
        if choice.action == "decline":
            return _Effect(
                "declined",
                f"Operator {operator} REJECTED the call of {tool}{why}{where}. It was NOT "
                "run; do not call it again for this request.",
            )
        how = f" with edited arguments {json.dumps(run_args)}" if choice.edited else ""
        refused = _spent(tool_gates, gate, denial, state, ran)
        escalation = escalation_id_of(denial)
        name = str(denial.get("catalog_name") or denial.get("tool") or "")
        ran_once = await run_once(
            ledger,
            held_call_id(escalation),
            name,
            partial(executor.conn.call_tool, name, run_args, tool_call_id=f"held:{escalation}"),
            operator=operator,
            thread_id=answer.thread_id,
            refused=refused,
        )
        outcome = ran_once.outcome
        if outcome.refused:
            return _Effect(
                "failed",
                f"Operator {operator} APPROVED the call of {tool}{why}{where}{how}, but it was "
                f"NOT run: {outcome.content}.",
                outcome=outcome_fields(outcome),
            )
        ran.append(tool_call_record(held_call(denial, str(digest)), result=outcome.result))
        if outcome.result == "unknown":
            note = (
                f"Operator {operator} approved the call of {tool}{why}{where}{how}, but "
                f"its outcome is UNKNOWN: {outcome.content}"
            )
        else:
            note = (
                f"Operator {operator} APPROVED the call of {tool}{why}{where}{how}; it "
                f"ran once and answered:\n{outcome.content}"
            )
        success = outcome.result == "executed"
        return _Effect(outcome.result, note, success=success, outcome=outcome_fields(outcome))

    def recorded(choice: _Choice) -> _Recorded:
        tool, _, digest = _held(choice)
        held_args = dict(choice.denial.get("args") or {})
        return _Recorded(None, None, held_args, tool, str(digest) if digest else None)

    def told(original: ToolMessage, choice: _Choice, note: str) -> tuple[str, str]:
        return note, str(original.name or choice.denial.get("catalog_name") or "")

    decisions, messages = await _apply_each(answer, pending, effect, recorded, told)
    return {
        "messages": messages,
        "receipts": [],
        "denials": [],
        "operator_decisions": decisions,
        "tool_calls": ran,
    }
