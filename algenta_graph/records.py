"""The governed records of a thread's executions: one typed shape per kind, one constructor each.

A receipt (:class:`ReceiptRecord`, written by :func:`receipt_record`), a named-gate denial
(:class:`DenialRecord`: the engine's, by :func:`denial_record`; a graph-side gate's, by
:func:`gate_denial_record`) and a gated call let through (:class:`ToolCallRecord`, by
:func:`tool_call_record`), every field documented; the Literal types the records use; an
escalation's identity (:func:`new_escalation_id`, :func:`escalation_id_of`); the time format of
every record (:func:`now_iso`). Operator decisions are :mod:`algenta_graph.operator_records`;
the state that holds the records, and their append-only reducer, :mod:`algenta_graph.state`.
Every record also carries ``seq``, ``prev`` and ``hash``: its link in the thread's
tamper-evident chain (:mod:`algenta_graph.audit.chain`), set by the node that wrote it.

>>> from algenta_graph.connection.outcomes import ExecutionDenial
>>> denial = ExecutionDenial(gate="confidence", code="execution_blocked_confidence", message="low")
>>> record = denial_record(denial, decision_id="d1", webhook_url="https://hook",
...                        tool_call_id="c1", source="model", policy="report")
>>> record["gate"], record["policy"], "escalation_id" in record
('confidence', 'report', False)
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal, cast

from typing_extensions import NotRequired, TypedDict

if TYPE_CHECKING:
    from algenta_graph.connection.outcomes import ExecutionDenial, ExecutionReceipt
    from algenta_graph.governance.tool_gates import GateDecision

__all__ = [
    "CallResult",
    "DecisionResult",
    "DenialRecord",
    "ExecutionStatus",
    "GatedCall",
    "OperatorAction",
    "OperatorVerdict",
    "PolicyName",
    "ReceiptRecord",
    "RecordSource",
    "ToolCallRecord",
    "denial_record",
    "escalation_id_of",
    "gate_denial_record",
    "held_call",
    "new_escalation_id",
    "now_iso",
    "receipt_record",
    "tool_call_record",
]

RecordSource = Literal["model", "operator", "recovered", "thread_receipts", "graph"]
"""Where a receipt or a denial came from (see each record's ``source``)."""
ExecutionStatus = Literal["delivered", "failed", "unknown"]
"""How a receipt's webhook delivery ended: answered 2xx, certainly not sent or refused, or sent
with no answer (which counts as executed, ``docs/ARCHITECTURE.md`` invariant 8)."""
PolicyName = Literal["report", "escalate", "halt"]
"""What the graph does about a denial (:mod:`algenta_graph.governance.gates`)."""
OperatorAction = Literal["override", "decline"]
"""What an operator decided about an escalated denial: execute it on the operator path, or not."""
DecisionResult = Literal["receipt", "failed", "denied", "declined", "executed", "unknown"]
"""What came of an operator decision (``declined``: nothing was executed; for a held call of a
graph-side gate, ``executed``: it ran and answered, ``failed``: it ran and failed, ``unknown``:
it was started before a crash and its outcome is not known, so it was not run again)."""
CallResult = Literal["executed", "failed", "unknown"]
"""What came of a governed call: ``executed`` (it ran and answered), ``failed`` (it answered
with an error, or certainly did not run), ``unknown`` (it may have run; it is never sent
again)."""
OperatorVerdict = Literal["approved", "modified", "overrode", "declined", "responded", "expired"]
"""The operator's outcome, as the record states it (``docs/ARCHITECTURE.md``, invariant 15):

- ``approved``: the reviewed call was approved as shown (LangChain's ``approve``, Agent Inbox's
  ``accept``) and sent on the operator path with the escalated gate's override;
- ``modified``: approved with edited arguments (``edit``), sent the same way;
- ``overrode``: the short answer ``{"action": "override"}``, sent the same way;
- ``declined``: rejected (``reject``, ``ignore``, ``{"action": "decline"}``): nothing executed;
- ``responded``: the operator answered in the tool's place (``respond``, Agent Inbox's
  ``response``): the text went to the model, nothing executed;
- ``expired``: the escalation's deadline had passed: nothing executed, whatever the answer.
"""


def now_iso() -> str:
    """The current time, ISO 8601 in UTC: the time format of every record."""
    return datetime.now(timezone.utc).isoformat()


def new_escalation_id() -> str:
    """A fresh escalation identity, given to an escalated denial when it is raised."""
    return "esc_" + uuid.uuid4().hex


def escalation_id_of(denial: Mapping[str, Any]) -> str:
    """The identity of the escalation a denial record raised.

    Its ``escalation_id``; for a record written before escalations had one, an identity derived
    from what the record holds as raised (gate, decision, tool call and its chain link), which
    a copy of the thread shares.

    >>> escalation_id_of({"escalation_id": "esc_1"})
    'esc_1'
    >>> escalation_id_of({"gate": "confidence", "tool_call_id": "c1", "hash": "ab"})[:4]
    'esc_'
    """
    given = denial.get("escalation_id")
    if isinstance(given, str) and given:
        return given
    raw = "|".join(
        str(denial.get(k)) for k in ("gate", "decision_id", "tool_call_id", "hash", "seq")
    )
    return "esc_" + hashlib.sha256(raw.encode()).hexdigest()[:32]


class ReceiptRecord(TypedDict):
    """A receipt in state: an execution receipt and where it came from.

    An :class:`~algenta_graph.connection.outcomes.ExecutionReceipt`; written by
    :func:`receipt_record`.
    """

    kind: Literal["receipt"]
    """Always ``"receipt"``."""
    decision_id: str
    """The decision executed."""
    webhook_url: str
    """Where the engine delivered it."""
    execution_status: ExecutionStatus
    """How the delivery ended (``delivered``, ``failed``, ``unknown``)."""
    response_code: int | None
    """The webhook's HTTP status, when it answered."""
    executed_at: str
    """ISO 8601 time of the execution, as the engine reports it."""
    policy_snapshot_id: str | None
    """The engine's policy snapshot the execution ran under."""
    schema_snapshot_id: str | None
    """The engine's schema snapshot."""
    manifest_version: str | None
    """The engine's manifest version."""
    payload_summary: dict[str, Any]
    """What the engine says it delivered, summarised."""
    safety_overridden: bool
    """Whether the confidence / risk gates were overridden (``override_safety``)."""
    tool_call_id: str | None
    """The model's tool call this receipt answers (an operator override: the escalated call)."""
    source: RecordSource
    """``"model"`` (the model's call), ``"operator"`` (an operator override, see
    ``operator``) or ``"recovered"`` (a delivery the checkpoint missed, read back from the
    engine)."""
    operator: NotRequired[str]
    """Who overrode, for ``source == "operator"``."""
    execution_id: NotRequired[str]
    """The engine's id of this execution (engines that version their receipts)."""
    receipt_version: NotRequired[str]
    """The engine's receipt format version."""
    retryable: NotRequired[bool]
    """The engine's word that nothing was sent (with ``failed``): a retry may deliver."""
    failure_reason: NotRequired[str | None]
    """Why a delivery failed, as the engine says."""
    plan_id: NotRequired[str | None]
    """The approved plan this execution spent (strict engines)."""
    plan_hash: NotRequired[str | None]
    """That plan's hash."""
    approval_state: NotRequired[str]
    """``approved`` (strict engines) or ``not_required``."""
    idempotency_key: NotRequired[str | None]
    """The graph-supplied key the execution was sent with."""
    trace_id: NotRequired[str | None]
    """The W3C trace id the engine adopted from the call's ``traceparent``."""
    executed_by: NotRequired[str]
    """The identity of the engine key that sent it."""
    idempotent_replay: NotRequired[bool]
    """True when the engine answered a repeated idempotency key with the first receipt."""
    seq: NotRequired[int]
    """The record's place in the thread's audit chain (from 1)."""
    prev: NotRequired[str]
    """The ``hash`` of the record before it in the chain."""
    hash: NotRequired[str]
    """This record's link hash."""


def receipt_record(
    receipt: ExecutionReceipt,
    *,
    tool_call_id: str | None,
    source: RecordSource,
    operator: str | None = None,
) -> ReceiptRecord:
    """The state record of ``receipt`` (every field the engine sent, extra ones included)."""
    record: dict[str, Any] = {
        **receipt.model_dump(mode="json"),
        "tool_call_id": tool_call_id,
        "source": source,
    }
    if operator is not None:
        record["operator"] = operator
    # the receipt's extra fields are the engine's (documented above): one typed seam, here
    return cast(ReceiptRecord, record)


class DenialRecord(TypedDict):
    """A named-gate denial in state: the denial, its call and its policy.

    An :class:`~algenta_graph.connection.outcomes.ExecutionDenial`; written by
    :func:`denial_record`.

    A denial with ``policy == "escalate"`` and no operator decision for its ``tool_call_id``
    is a **pending escalation**: a resume completes it from the state alone, whatever context
    the resume carries.
    """

    kind: Literal["denial"]
    """Always ``"denial"``."""
    gate: str
    """The gate that blocked the call (normally one of the gate table's; an unknown one halts)."""
    code: str
    """The engine's error code, e.g. ``execution_blocked_confidence``."""
    message: str
    """The engine's reason, shown to the model and the operator."""
    override_hint: str | None
    """The engine's hint on how the gate can be overridden."""
    status_code: int | None
    """The HTTP status the engine's error carried, if any."""
    decision_id: str | None
    """The decision the denied call named."""
    webhook_url: str | None
    """Where it would have been delivered."""
    tool_call_id: str | None
    """The model's tool call that was denied."""
    source: RecordSource
    """``"model"`` (the engine denied the model's call), ``"operator"`` (the engine denied an
    operator override), ``"thread_receipts"`` (the thread had already executed the decision,
    so the graph did not send it again) or ``"graph"`` (a graph-side gate held or denied the
    call before it ran)."""
    tool: NotRequired[str]
    """Graph-side gates: the tool's real MCP name (on ``server``)."""
    server: NotRequired[str]
    """Graph-side gates: the tool's MCP server (``algenta`` for the engine's)."""
    catalog_name: NotRequired[str]
    """Graph-side gates: the tool's name in the catalog (what MCP is called with here)."""
    args: NotRequired[dict[str, Any]]
    """Graph-side gates: the call's arguments (scrubbed): what an approval runs."""
    args_digest: NotRequired[str]
    """Graph-side gates: :func:`~algenta_graph.governance.tool_gates.args_digest` of them."""
    rule: NotRequired[str]
    """Graph-side gates: the rule that decided (an argument rule's name, ``budget:<tools>``,
    ``require_approval:<pattern>``)."""
    turn: NotRequired[str | None]
    """Graph-side gates: the run (the latest user message's id) it was made in."""
    policy: NotRequired[PolicyName]
    """For a model's call: the policy the denial was raised under (the run's, then)."""
    timeout_seconds: NotRequired[float]
    """The call's delivery timeout, kept for the operator path's re-execution."""
    escalation_id: NotRequired[str]
    """An escalated denial's own identity (``esc_<hex>``), given when it is raised: copies of
    the thread, later tasks and other processes all answer *this* escalation, exactly once."""
    raised_at: NotRequired[str]
    """When an escalated denial was raised (ISO 8601, UTC): the escalation's ``asked_at``, from
    which its deadline counts (``expires_after``)."""
    seq: NotRequired[int]
    """The record's place in the thread's audit chain."""
    prev: NotRequired[str]
    """The ``hash`` of the record before it."""
    hash: NotRequired[str]
    """This record's link hash."""


def denial_record(
    denial: ExecutionDenial,
    *,
    decision_id: str | None,
    webhook_url: str | None,
    tool_call_id: str | None,
    source: RecordSource,
    policy: PolicyName | None = None,
    timeout_seconds: float | None = None,
    escalation_id: str | None = None,
) -> DenialRecord:
    """The state record of ``denial``.

    An escalated one (``policy == "escalate"``) gets its identity (invariant 12) and the time it
    was raised here.
    """
    record = _denial(denial.gate, denial.code, denial.message, source, tool_call_id)
    record.update(
        {
            "override_hint": denial.override_hint,
            "status_code": denial.status_code,
            "decision_id": decision_id,
            "webhook_url": webhook_url,
        }
    )
    if policy is not None:
        record["policy"] = policy
    if timeout_seconds is not None:
        record["timeout_seconds"] = timeout_seconds
    if escalation_id is not None:
        record["escalation_id"] = escalation_id
    return _raised(record)


def _denial(
    gate: str, code: str, message: str, source: RecordSource, tool_call_id: str | None
) -> DenialRecord:
    """A denial record's every required field: a gate's, with no engine detail yet."""
    return DenialRecord(
        kind="denial",
        gate=gate,
        code=code,
        message=message,
        override_hint=None,
        status_code=None,
        decision_id=None,
        webhook_url=None,
        tool_call_id=tool_call_id,
        source=source,
    )


def _raised(record: DenialRecord) -> DenialRecord:
    """``record`` as raised: an escalated one gets its identity (unless given) and its time."""
    if record.get("policy") == "escalate":
        record.setdefault("escalation_id", new_escalation_id())
        record["raised_at"] = now_iso()
    return record


class GatedCall(TypedDict):
    """One call a graph-side gate rule names, as each of its records names it."""

    tool: str
    """The tool's real MCP name."""
    server: str
    """Its MCP server (``algenta`` for the engine's)."""
    catalog_name: str
    """Its name in the catalog (what MCP is called with here)."""
    tool_call_id: str | None
    """The model's tool call."""
    args_digest: str
    """:func:`~algenta_graph.governance.tool_gates.args_digest` of the arguments it runs with."""
    turn: str | None
    """The run it was made in (the latest user message's id)."""


def held_call(denial: Mapping[str, Any], args_digest: str) -> GatedCall:
    """The call a held call's denial record names, run with arguments of ``args_digest``."""
    return GatedCall(
        tool=str(denial.get("tool")),
        server=str(denial.get("server")),
        catalog_name=str(denial.get("catalog_name") or denial.get("tool")),
        tool_call_id=denial.get("tool_call_id"),
        args_digest=args_digest,
        turn=denial.get("turn"),
    )


def gate_denial_record(
    decision: GateDecision,
    call: GatedCall,
    *,
    args: Mapping[str, Any],
    policy: PolicyName,
) -> DenialRecord:
    """The state record of a graph-side gate's denial of ``call`` (``source == "graph"``).

    Nothing ran. An escalated one (a held call) gets its identity and the time it was raised,
    as :func:`denial_record` gives them.
    """
    record = _denial(decision.gate, decision.code, decision.message, "graph", call["tool_call_id"])
    record.update(
        {
            "tool": call["tool"],
            "server": call["server"],
            "catalog_name": call["catalog_name"],
            "args": dict(args),
            "args_digest": call["args_digest"],
            "rule": decision.rule,
            "turn": call["turn"],
            "policy": policy,
        }
    )
    return _raised(record)


class ToolCallRecord(GatedCall):
    """A call of a tool some graph-side gate rule names, let through to run.

    Written by :func:`tool_call_record` when the call passed every argument rule and budget
    and was not held (a held call is a :class:`DenialRecord` until an operator approves it; its
    run is then an operator decision). The thread's budgets count these records. Its call's
    fields are :class:`GatedCall`'s.
    """

    kind: Literal["tool_call"]
    """Always ``"tool_call"``."""
    time: str
    """When it was let through (ISO 8601, UTC)."""
    result: NotRequired[CallResult]
    """What came of it (written ahead in the ledger: ``docs/ARCHITECTURE.md``, invariant 18):
    ``unknown`` when an earlier attempt started it and left no result (it may have run: it
    counts against every budget naming the tool, and it is never sent again)."""
    seq: NotRequired[int]
    """The record's place in the thread's audit chain."""
    prev: NotRequired[str]
    """The ``hash`` of the record before it."""
    hash: NotRequired[str]
    """This record's link hash."""


def tool_call_record(call: GatedCall, *, result: CallResult | None = None) -> ToolCallRecord:
    """The state record of a gated call let through to run (and what came of it, when known)."""
    record = ToolCallRecord(
        kind="tool_call",
        tool=call["tool"],
        server=call["server"],
        catalog_name=call["catalog_name"],
        tool_call_id=call["tool_call_id"],
        args_digest=call["args_digest"],
        turn=call["turn"],
        time=now_iso(),
    )
    if result is not None:
        record["result"] = result
    return record
