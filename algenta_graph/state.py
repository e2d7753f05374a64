"""The governed graph's checkpointed state: one typed shape per record, and its reducers.

Every value is JSON-serialisable (plain dicts, lists, strings, numbers), so a checkpointer and
the LangGraph server can store and return it unchanged. ``receipts``, ``denials`` and
``operator_decisions`` (:data:`RECORD_FIELDS`) are **append-only**: their reducer only ever
appends, so no node (and no ``update_state`` call) can rewrite or drop a recorded outcome. The
graph writes an empty list to each of them on every turn, so they exist (possibly empty) in
every thread's state.

Each record kind has one shape, a ``TypedDict`` whose every field is documented below, and one
constructor that nodes use to write it: :func:`receipt_record`, :func:`denial_record`,
:func:`operator_decision_record`. Every record also carries ``seq``, ``prev`` and ``hash``: its
link in the thread's tamper-evident chain (:mod:`algenta_graph.audit.chain`), set by the node
that wrote it (``docs/ARCHITECTURE.md``, "State" and "Outcomes").

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
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from langgraph.managed import RemainingSteps
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import NotRequired, TypedDict

if TYPE_CHECKING:
    from algenta_graph.connection.outcomes import ExecutionDenial, ExecutionReceipt

__all__ = [
    "RECORD_FIELDS",
    "DecisionResult",
    "DenialRecord",
    "ExecutionStatus",
    "GovernedInput",
    "GovernedState",
    "OperatorAction",
    "OperatorDecision",
    "OperatorDecisionRecord",
    "OperatorVerdict",
    "PolicyName",
    "ReceiptRecord",
    "RecordSource",
    "ToolCallRecord",
    "append_records",
    "denial_record",
    "escalation_id_of",
    "gate_denial_record",
    "new_escalation_id",
    "now_iso",
    "operator_decision_record",
    "receipt_record",
    "tool_call_record",
]

RECORD_FIELDS: tuple[str, ...] = ("receipts", "denials", "operator_decisions", "tool_calls")
"""The governed record fields of the state, in chain order: written only by the graph's nodes."""

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


class OperatorDecisionRecord(TypedDict):
    """An operator decision in state (:class:`OperatorDecision` dumped to JSON).

    Written by :func:`operator_decision_record`. It says who answered (identity and roles),
    what they were shown (``digest``), when the escalation was asked and when it was decided,
    and the outcome (``verdict``): ``docs/ARCHITECTURE.md``, invariant 15.
    """

    operator: str
    """Who decided: the authenticated identity when served with auth."""
    reason: str | None
    """Why, in the operator's words (``None`` when no reason was given); for ``responded``, the
    text the model was given; for ``expired``, the deadline that passed."""
    action: OperatorAction
    """``override`` (sent on the operator path) or ``decline`` (nothing sent)."""
    gate: str
    """The gate whose denial was escalated."""
    decision_id: str | None
    """The decision escalated."""
    override_flag: str | None
    """The flag an override sends (``force`` or ``override_safety``)."""
    result: DecisionResult
    """``receipt``, ``failed``, ``denied`` (the engine denied the override too) or ``declined``."""
    outcome: dict[str, Any] | None
    """The override's outcome as the engine answered it (a dumped receipt, denial or failure)."""
    tool_call_id: str | None
    """The escalated tool call."""
    time: str
    """When the decision was recorded (ISO 8601, UTC)."""
    escalation_id: str | None
    """The escalation answered (its denial's ``escalation_id``)."""
    answered_in_thread: str | None
    """Where the answer was given, when not in this thread."""
    verdict: NotRequired[OperatorVerdict]
    """The operator's outcome (:data:`OperatorVerdict`)."""
    roles: NotRequired[list[str]]
    """The operator's roles when it answered (the served graph's authenticated roles; empty
    when the graph runs without auth)."""
    digest: NotRequired[str | None]
    """The digest of what the operator was shown (``sha256:<hex>``, the escalation's
    ``digest``): the answer took effect on exactly that."""
    interrupt_id: NotRequired[str | None]
    """The id of the interrupt that asked (LangGraph's ``Interrupt.id``)."""
    asked_at: NotRequired[str | None]
    """When the escalation was raised (its denial's ``raised_at``)."""
    decided_at: NotRequired[str | None]
    """When the answer was given (claimed: the moment it became the one answer)."""
    expires_at: NotRequired[str | None]
    """The escalation's deadline, when its gate has one (``expires_after``)."""
    original_args: NotRequired[dict[str, Any] | None]
    """For ``modified``: the reviewed call's arguments."""
    edited_args: NotRequired[dict[str, Any] | None]
    """For ``modified``: the arguments the operator sent instead (scrubbed like a model call)."""
    tool: NotRequired[str | None]
    """For a held call (graph-side gates): the tool's real MCP name, ``server.name``."""
    args_digest: NotRequired[str | None]
    """For a held call: the digest of the arguments it ran with (the edited ones, if edited)."""
    seq: NotRequired[int]
    """The record's place in the thread's audit chain."""
    prev: NotRequired[str]
    """The ``hash`` of the record before it."""
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
    record = DenialRecord(
        kind="denial",
        gate=denial.gate,
        code=denial.code,
        message=denial.message,
        override_hint=denial.override_hint,
        status_code=denial.status_code,
        decision_id=decision_id,
        webhook_url=webhook_url,
        tool_call_id=tool_call_id,
        source=source,
    )
    if policy is not None:
        record["policy"] = policy
    if timeout_seconds is not None:
        record["timeout_seconds"] = timeout_seconds
    if escalation_id is not None:
        record["escalation_id"] = escalation_id
    elif policy == "escalate":
        record["escalation_id"] = new_escalation_id()
    if policy == "escalate":
        record["raised_at"] = now_iso()
    return record


def operator_decision_record(
    *,
    operator: str,
    reason: str | None,
    action: OperatorAction,
    gate: str,
    decision_id: str | None,
    result: DecisionResult,
    override_flag: str | None = None,
    outcome: Mapping[str, Any] | None = None,
    tool_call_id: str | None = None,
    escalation_id: str | None = None,
    answered_in_thread: str | None = None,
    verdict: OperatorVerdict | None = None,
    roles: Sequence[str] = (),
    digest: str | None = None,
    interrupt_id: str | None = None,
    asked_at: str | None = None,
    decided_at: str | None = None,
    expires_at: str | None = None,
    original_args: Mapping[str, Any] | None = None,
    edited_args: Mapping[str, Any] | None = None,
    tool: str | None = None,
    args_digest: str | None = None,
) -> OperatorDecisionRecord:
    """The state record of one operator decision (validated by :class:`OperatorDecision`).

    ``verdict`` defaults to what ``action`` says (``overrode`` or ``declined``).
    """
    decision = OperatorDecision(
        operator=operator,
        reason=reason,
        action=action,
        gate=gate,
        decision_id=decision_id,
        override_flag=override_flag,
        result=result,
        outcome=dict(outcome) if outcome is not None else None,
        tool_call_id=tool_call_id,
        escalation_id=escalation_id,
        answered_in_thread=answered_in_thread,
        verdict=verdict or ("overrode" if action == "override" else "declined"),
        roles=list(roles),
        digest=digest,
        interrupt_id=interrupt_id,
        asked_at=asked_at,
        decided_at=decided_at,
        expires_at=expires_at,
        original_args=dict(original_args) if original_args is not None else None,
        edited_args=dict(edited_args) if edited_args is not None else None,
        tool=tool,
        args_digest=args_digest,
    )
    record = OperatorDecisionRecord(
        operator=decision.operator,
        reason=decision.reason,
        action=decision.action,
        gate=decision.gate,
        decision_id=decision.decision_id,
        override_flag=decision.override_flag,
        result=decision.result,
        outcome=decision.outcome,
        tool_call_id=decision.tool_call_id,
        time=decision.time,
        escalation_id=decision.escalation_id,
        answered_in_thread=decision.answered_in_thread,
        verdict=decision.verdict or ("overrode" if action == "override" else "declined"),
        roles=list(decision.roles),
        digest=decision.digest,
        interrupt_id=decision.interrupt_id,
        asked_at=decision.asked_at,
        decided_at=decision.decided_at,
        expires_at=decision.expires_at,
        original_args=decision.original_args,
        edited_args=decision.edited_args,
    )
    if tool is not None:
        record["tool"] = decision.tool
        record["args_digest"] = decision.args_digest
    return record


class ToolCallRecord(TypedDict):
    """A call of a tool some graph-side gate rule names, let through to run.

    Written by :func:`tool_call_record` when the call passed every argument rule and budget
    and was not held (a held call is a :class:`DenialRecord` until an operator approves it; its
    run is then an operator decision). The thread's budgets count these records.
    """

    kind: Literal["tool_call"]
    """Always ``"tool_call"``."""
    tool: str
    """The tool's real MCP name."""
    server: str
    """Its MCP server (``algenta`` for the engine's)."""
    catalog_name: str
    """Its name in the catalog."""
    tool_call_id: str | None
    """The model's tool call."""
    args_digest: str
    """The digest of the arguments it was called with."""
    turn: str | None
    """The run it was made in (the latest user message's id)."""
    time: str
    """When it was let through (ISO 8601, UTC)."""
    seq: NotRequired[int]
    """The record's place in the thread's audit chain."""
    prev: NotRequired[str]
    """The ``hash`` of the record before it."""
    hash: NotRequired[str]
    """This record's link hash."""


def tool_call_record(
    *,
    tool: str,
    server: str,
    catalog_name: str,
    tool_call_id: str | None,
    args_digest: str,
    turn: str | None,
) -> ToolCallRecord:
    """The state record of a gated call let through to run."""
    return ToolCallRecord(
        kind="tool_call",
        tool=tool,
        server=server,
        catalog_name=catalog_name,
        tool_call_id=tool_call_id,
        args_digest=args_digest,
        turn=turn,
        time=now_iso(),
    )


def gate_denial_record(
    *,
    gate: str,
    code: str,
    message: str,
    rule: str,
    tool: str,
    server: str,
    catalog_name: str,
    args: Mapping[str, Any],
    args_digest: str,
    tool_call_id: str | None,
    turn: str | None,
    policy: PolicyName,
) -> DenialRecord:
    """The state record of a graph-side gate's denial (``source == "graph"``; nothing ran).

    An escalated one (a held call) gets its identity and the time it was raised, as
    :func:`denial_record` gives them.
    """
    record = DenialRecord(
        kind="denial",
        gate=gate,
        code=code,
        message=message,
        override_hint=None,
        status_code=None,
        decision_id=None,
        webhook_url=None,
        tool_call_id=tool_call_id,
        source="graph",
    )
    record["tool"] = tool
    record["server"] = server
    record["catalog_name"] = catalog_name
    record["args"] = dict(args)
    record["args_digest"] = args_digest
    record["rule"] = rule
    record["turn"] = turn
    record["policy"] = policy
    if policy == "escalate":
        record["escalation_id"] = new_escalation_id()
        record["raised_at"] = now_iso()
    return record


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


def append_records(
    left: Sequence[Mapping[str, Any]] | None,
    right: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None,
) -> list[dict[str, Any]]:
    """Append-only reducer: ``left`` followed by ``right`` (a record or a list of records).

    >>> append_records([{"a": 1}], {"b": 2})
    [{'a': 1}, {'b': 2}]
    >>> append_records(None, [])
    []
    """
    out = [dict(r) for r in (left or [])]
    if right is None:
        return out
    if isinstance(right, Mapping):
        right = [right]
    for record in right:
        if not isinstance(record, Mapping):
            raise TypeError(f"a state record must be a dict, not {type(record).__name__}")
        out.append(dict(record))
    return out


class GovernedInput(TypedDict):
    """What a run accepts as input: new messages only (outcomes are never taken from input)."""

    messages: Annotated[list[AnyMessage], add_messages]
    """The turn's new messages."""


class GovernedState(TypedDict):
    """The governed graph's state."""

    messages: Annotated[list[AnyMessage], add_messages]
    """The conversation (``add_messages``)."""
    selected_tools: list[str]
    """Tool names the model is bound to this turn (retrieval top-K plus ``search_tools`` hits),
    in rank order; ``search_tools`` itself is always bound too."""
    receipts: Annotated[list[ReceiptRecord], append_records]
    """Every receipt of ``execute_decision`` (append-only)."""
    denials: Annotated[list[DenialRecord], append_records]
    """Every named-gate denial (append-only)."""
    operator_decisions: Annotated[list[OperatorDecisionRecord], append_records]
    """Every operator decision, approved or declined (append-only)."""
    tool_calls: Annotated[list[ToolCallRecord], append_records]
    """Every call a graph-side gate rule names that was let through to run (append-only)."""
    remaining_steps: RemainingSteps
    """Managed by LangGraph (the run's ``recursion_limit``): the model node ends the run cleanly
    before the limit instead of raising ``GraphRecursionError``."""


def now_iso() -> str:
    """The current time, ISO 8601 in UTC: the time format of every record."""
    return datetime.now(timezone.utc).isoformat()


class OperatorDecision(BaseModel):
    """One human operator decision on an escalated denial, approved or declined.

    The validated form of :class:`OperatorDecisionRecord`, whose fields it documents.
    """

    model_config = ConfigDict(extra="forbid")

    operator: str
    reason: str | None = None
    action: OperatorAction
    gate: str
    decision_id: str | None
    override_flag: str | None = None
    result: DecisionResult
    outcome: dict[str, Any] | None = None
    tool_call_id: str | None = None
    time: str = Field(default_factory=now_iso)
    escalation_id: str | None = None
    answered_in_thread: str | None = None
    verdict: OperatorVerdict | None = None
    roles: list[str] = Field(default_factory=list)
    digest: str | None = None
    interrupt_id: str | None = None
    asked_at: str | None = None
    decided_at: str | None = None
    expires_at: str | None = None
    original_args: dict[str, Any] | None = None
    edited_args: dict[str, Any] | None = None
    tool: str | None = None
    args_digest: str | None = None
    seq: int | None = None
    """The record's place in the thread's audit chain (:mod:`algenta_graph.audit.chain`)."""
    prev: str | None = None
    hash: str | None = None
