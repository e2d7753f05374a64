"""What the inbox says in words: what a record or an escalation is about, what an answer does.

Every page names what it shows before any JSON, the same way everywhere:

- a call by its tool (``server.name``) and its arguments: ``crm.delete_customer(account_id=b2)``
  (:func:`call_text`);
- an engine decision by its id and the action it decides, when known:
  ``decision dec_1 (raise_price)`` (:func:`decision_text`; the action is the engine's
  ``get_decision``, or a receipt's ``payload_summary``);
- each record of a thread (:func:`record_line`): what it is about and what happened;
- each answer an escalation accepts (:func:`answer_effects`): what it will do, read from the
  escalation itself (its tool and arguments, or its decision, flag and webhook), never a text
  kept per tool;
- an operator decision (:func:`decision_outcome`): what came of it (the tool's answer, the
  receipt, the engine's new denial, or that nothing ran).

Pure functions of the records (:mod:`algenta_graph.records`,
:mod:`algenta_graph.operator_records`) and an escalation's item
(:class:`~algenta_graph.nodes.questions.EscalationItem`): nothing here asks the API or the engine
(:mod:`algenta_graph.inbox.engine_reads` reads the actions).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from algenta_graph.governance.escalations import approvals_said

__all__ = [
    "Facts",
    "RecordLine",
    "answer_effects",
    "call_text",
    "decision_ids",
    "decision_inputs",
    "decision_outcome",
    "decision_text",
    "escalation_about",
    "item_subject",
    "outcome_line",
    "record_line",
    "record_lines",
    "thread_facts",
    "value_text",
    "who_answered",
]

_WORD = re.compile(r"[A-Za-z_][\w.:/@+-]*")
_LITERALS = frozenset({"true", "false", "null"})


def value_text(value: Any) -> str:
    """An argument's value as a call shows it: a plain word bare, anything else as JSON.

    >>> value_text("b2"), value_text("two words"), value_text("10"), value_text(10.0)
    ('b2', '"two words"', '"10"', '10')
    >>> value_text(None), value_text("true"), value_text({"a": [1, 2]})
    ('null', '"true"', '{"a": [1, 2]}')
    """
    if isinstance(value, str) and _WORD.fullmatch(value) and value not in _LITERALS:
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


def call_text(tool: str, args: Mapping[str, Any] | None) -> str:
    """A call as the operator reads it: the tool, then each argument and its value.

    >>> call_text("crm.delete_customer", {"account_id": "b2", "reason": "churned"})
    'crm.delete_customer(account_id=b2, reason=churned)'
    >>> call_text("crm.ping", None)
    'crm.ping()'
    """
    shown = ", ".join(f"{name}={value_text(v)}" for name, v in (args or {}).items())
    return f"{tool}({shown})"


def decision_text(decision_id: Any, action: str | None = None) -> str:
    """An engine decision: its id and, when known, the action it decides.

    >>> decision_text("dec_1", "raise_price"), decision_text("dec_1"), decision_text(None)
    ('decision dec_1 (raise_price)', 'decision dec_1', 'a call that named no decision')
    """
    if not isinstance(decision_id, str) or not decision_id:
        return "a call that named no decision"
    return f"decision {decision_id} ({action})" if action else f"decision {decision_id}"


def decision_inputs(decision: Mapping[str, Any]) -> str | None:
    """What a logged decision decides and from what, as ``get_decision``'s ``decision`` says.

    >>> decision_inputs({"chosen_action": "raise_price", "expected_value": 40.0,
    ...                  "confidence": 0.3, "risk_p5": -0.1, "risk_p95": 0.5, "scenario": None})
    'raise_price: expected value 40, confidence 0.3, risk p5 -0.1 to p95 0.5'
    >>> decision_inputs({}) is None
    True
    """
    action = decision.get("chosen_action")
    if not isinstance(action, str) or not action:
        return None
    parts = [
        f"{label} {value_text(decision[key])}"
        for key, label in (
            ("expected_value", "expected value"),
            ("confidence", "confidence"),
        )
        if decision.get(key) is not None
    ]
    low, high = decision.get("risk_p5"), decision.get("risk_p95")
    if low is not None and high is not None:
        parts.append(f"risk p5 {value_text(low)} to p95 {value_text(high)}")
    for key, label in (("scenario", "scenario"), ("plan_id", "plan"), ("rationale", "rationale")):
        if decision.get(key):
            parts.append(f"{label} {value_text(decision[key])}")
    return f"{action}: {', '.join(parts)}" if parts else action


@dataclass(frozen=True)
class Facts:
    """What the words of a thread's records draw on besides each record itself."""

    actions: Mapping[str, str] = field(default_factory=dict)
    """The action each engine decision decides, by decision id."""
    held_args: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Each held call's arguments, by escalation id (its denial record's)."""
    approved_calls: Mapping[str, str] = field(default_factory=dict)
    """Who approved each held call that ran, by tool call id."""

    def action(self, decision_id: Any) -> str | None:
        """The action ``decision_id`` decides, when known."""
        return self.actions.get(decision_id) if isinstance(decision_id, str) else None


_RAN = ("executed", "failed", "unknown")
"""The results of a held call an operator approved that was started (``failed`` with
``refused`` was not: no ``tool_calls`` record is written for it)."""


def _receipt_action(receipt: Any) -> tuple[str, str] | None:
    """``(decision id, action)`` as a receipt (or a dumped one) names them."""
    if not isinstance(receipt, Mapping):
        return None
    summary = receipt.get("payload_summary")
    action = summary.get("action") if isinstance(summary, Mapping) else None
    decision = receipt.get("decision_id")
    if isinstance(decision, str) and isinstance(action, str) and action:
        return decision, action
    return None


def decision_ids(values: Mapping[str, Any]) -> set[str]:
    """Every engine decision a thread's records name."""
    return {
        r["decision_id"]
        for name in ("receipts", "denials", "operator_decisions")
        for r in values.get(name) or ()
        if isinstance(r, Mapping) and isinstance(r.get("decision_id"), str)
    }


def thread_facts(values: Mapping[str, Any], actions: Mapping[str, str] | None = None) -> Facts:
    """The facts of a thread's records: ``actions`` (the engine's), and what its receipts say.

    >>> facts = thread_facts({
    ...     "receipts": [{"decision_id": "d1", "payload_summary": {"action": "restock"}}],
    ...     "denials": [{"escalation_id": "e1", "source": "graph", "args": {"a": 1}}],
    ...     "operator_decisions": [{"tool": "crm.x", "tool_call_id": "c1", "operator": "ana",
    ...                             "result": "executed"}]})
    >>> facts.action("d1"), facts.held_args["e1"], facts.approved_calls["c1"]
    ('restock', {'a': 1}, 'ana')
    """
    known: dict[str, str] = dict(actions or {})
    for receipt in values.get("receipts") or ():
        found = _receipt_action(receipt)
        if found:
            known.setdefault(*found)
    held: dict[str, Mapping[str, Any]] = {}
    for denial in values.get("denials") or ():
        if (
            isinstance(denial, Mapping)
            and denial.get("source") == "graph"
            and isinstance(denial.get("escalation_id"), str)
        ):
            held[denial["escalation_id"]] = dict(denial.get("args") or {})
    approved: dict[str, str] = {}
    for decision in values.get("operator_decisions") or ():
        if not isinstance(decision, Mapping):
            continue
        found = _receipt_action(decision.get("outcome"))
        if found:
            known.setdefault(*found)
        call = decision.get("tool_call_id")
        if decision.get("tool") and decision.get("result") in _RAN and isinstance(call, str):
            approved[call] = _said(decision.get("operator"), "an operator")
    return Facts(known, held, approved)


def _mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one (a record's optional object field)."""
    return value if isinstance(value, Mapping) else {}


def _said(value: Any, missing: str) -> str:
    """``value`` as text, or ``missing`` (the words for a field the record does not hold).

    >>> _said("ana", "an operator"), _said(None, "an operator"), _said("", "no reason given")
    ('ana', 'an operator', 'no reason given')
    """
    return missing if value is None or value == "" else str(value)


def _gate(value: Any) -> str:
    """``the confidence gate`` (``a gate`` when the record names none)."""
    return f"the {value} gate" if value else "a gate"


def _qualified(record: Mapping[str, Any]) -> str:
    """A gated call's tool, ``server.name`` (records of graph-side gates name both)."""
    tool = _said(record.get("tool"), "an unnamed tool")
    return f"{record['server']}.{tool}" if record.get("server") else tool


def _held_call(record: Mapping[str, Any], facts: Facts) -> str:
    """The call an operator decision about a held call reviewed, with its arguments if known."""
    tool = _said(record.get("tool"), "an unnamed tool")
    args = facts.held_args.get(str(record.get("escalation_id")))
    return call_text(tool, args) if args is not None else tool


def item_subject(item: Mapping[str, Any], action: str | None = None) -> str:
    """What an escalation item asks about: the held call, or the engine decision.

    >>> item_subject({"tool": "crm.delete_customer", "args": {"account_id": "b2"}})
    'crm.delete_customer(account_id=b2)'
    >>> item_subject({"decision_id": "dec_1", "args": {}}, "raise_price")
    'decision dec_1 (raise_price)'
    """
    if item.get("tool"):
        return call_text(str(item["tool"]), item.get("args"))
    return decision_text(item.get("decision_id"), action)


def escalation_about(item: Mapping[str, Any], action: str | None = None) -> str:
    """The headline of an escalation item: which gate stopped what.

    >>> escalation_about({"gate": "approval", "tool": "crm.rm", "args": {"id": "b2"}})
    'The approval gate holds the call crm.rm(id=b2)'
    >>> escalation_about({"gate": "confidence", "decision_id": "dec_1"}, "raise_price")
    'The confidence gate denied executing decision dec_1 (raise_price)'
    """
    gate = _gate(item.get("gate")).capitalize()
    if item.get("tool"):
        return f"{gate} holds the call {item_subject(item)}"
    return f"{gate} denied executing {item_subject(item, action)}"


def _held_effects(item: Mapping[str, Any]) -> dict[str, str]:
    tool, gate = str(item.get("tool")), item.get("gate")
    rules = _mapping(item.get("rules"))
    if gate == "budget":
        despite = ", over its budget"
    elif gate == "arguments":
        despite = f", although rule {_said(item.get('rule'), '(unnamed)')} refused its arguments"
    elif rules.get("budgets"):
        despite = ", unless one of its budgets has run out by then (they are checked again)"
    else:
        despite = ""
    return {
        "approve": f"runs {item_subject(item)} once{despite}; the model gets its answer",
        "edit": (
            f"runs {tool} once with the arguments you enter below instead (override flags and "
            "graph-supplied fields are dropped; the tool's argument rules still apply); the "
            "model gets its answer"
        ),
        "reject": "declines: nothing runs; the model is told the call was rejected",
        "respond": "declines: nothing runs; the model gets your reason as the tool's answer",
    }


def _flagged(flag: Any) -> str:
    """``with override_safety=true`` (the gate's override, when the record names no flag)."""
    return f"with {flag}=true" if flag else "with the gate's override"


def _engine_effects(item: Mapping[str, Any], action: str | None) -> dict[str, str]:
    args = _mapping(item.get("args"))
    what = decision_text(item.get("decision_id"), action)
    timeout = args.get("timeout_seconds")
    within = f" (timeout {value_text(timeout)} s)" if timeout is not None else ""
    webhook = _said(args.get("webhook_url"), "no webhook named")
    not_executed = f"{decision_text(item.get('decision_id'))} is not executed"
    flagged = _flagged(item.get("override_flag"))
    return {
        "approve": f"executes {what} {flagged} and POSTs its webhook to {webhook}{within}",
        "edit": (
            f"executes {what} {flagged}, with the webhook_url, timeout_seconds and metadata "
            "you enter below (nothing else may change; the argument rules on execute_decision "
            "still apply)"
        ),
        "reject": f"declines: {not_executed} and no webhook is sent; the model is told",
        "respond": f"declines: {not_executed}; the model gets your reason in the tool's place",
    }


def answer_effects(
    item: Mapping[str, Any], action: str | None = None, *, overdue: bool = False
) -> dict[str, str]:
    """What each answer the escalation accepts will do, in words, by decision type.

    Read from the item itself: a held call's tool, arguments and gate; an engine decision's
    id, action, override flag, webhook and timeout.

    >>> effects = answer_effects({"gate": "approval", "tool": "crm.rm", "args": {"id": "b2"},
    ...                           "allowed_decisions": ["approve", "reject"]})
    >>> effects["approve"]
    'runs crm.rm(id=b2) once; the model gets its answer'
    >>> effects["reject"]
    'declines: nothing runs; the model is told the call was rejected'
    >>> answer_effects({"gate": "approval", "tool": "crm.rm", "allowed_decisions": ["approve"],
    ...                 "expires_at": "2030-01-01T00:00:00+00:00"}, overdue=True)["approve"]
    'declines: the deadline passed at 2030-01-01T00:00:00+00:00, so whatever you answer, nothing runs'
    >>> answer_effects({"gate": "approval", "tool": "crm.rm", "allowed_decisions": ["approve"],
    ...                 "quorum": 2, "approvals": ["ana"]})["approve"]
    'completes 2 approvals (1 of 2 approvals: ana) and runs crm.rm() once; the model gets its answer'
    >>> answer_effects({"gate": "approval", "tool": "crm.rm", "allowed_decisions": ["approve"],
    ...                 "quorum": 2, "approvals": []})["approve"]
    'counts your approval (0 of 2 approvals so far); nothing runs until 2 distinct operators approved, then it runs crm.rm() once; the model gets its answer'
    """  # noqa: E501
    allowed = [str(d) for d in item.get("allowed_decisions") or ()]
    if overdue:
        late = (
            f"declines: the deadline passed at {_said(item.get('expires_at'), 'its time')}, "
            "so whatever you answer, nothing runs"
        )
        return dict.fromkeys(allowed, late)
    every = _held_effects(item) if item.get("tool") else _engine_effects(item, action)
    said = {kind: every[kind] for kind in allowed if kind in every}
    quorum = item.get("quorum")
    if isinstance(quorum, int) and "approve" in said:
        approved = [str(a) for a in item.get("approvals") or ()]
        if len(approved) + 1 < quorum:
            said["approve"] = (
                f"counts your approval ({approvals_said(approved, quorum)} so far); nothing runs "
                f"until {quorum} distinct operators approved, then it {said['approve']}"
            )
        else:
            said["approve"] = (
                f"completes {quorum} approvals ({approvals_said(approved, quorum)}) and "
                f"{said['approve']}"
            )
    return said


def _delivery(receipt: Mapping[str, Any]) -> str:
    """How a receipt's webhook delivery ended, in words."""
    url, status = receipt.get("webhook_url"), receipt.get("execution_status")
    post = f"its webhook POST to {url}" if url else "its webhook POST"
    if status == "delivered":
        code = receipt.get("response_code")
        return f"{post} was delivered" + (f" (HTTP {code})" if code else "")
    if status == "failed":
        return f"{post} failed: {_said(receipt.get('failure_reason'), 'the engine gave no reason')}"
    return f"{post} has no known outcome (it counts as executed)"


def decision_outcome(record: Mapping[str, Any], subject: str = "it") -> str:
    """What came of an operator decision, ``subject`` naming what it was about.

    >>> decision_outcome({"tool": "crm.rm", "result": "executed", "outcome": {}})
    'it ran once and answered'
    >>> decision_outcome({"result": "receipt", "override_flag": "force", "outcome": {
    ...     "kind": "receipt", "webhook_url": "https://h", "execution_status": "delivered",
    ...     "response_code": 200}}, "decision d1")
    'decision d1 was executed with force=true; its webhook POST to https://h was delivered (HTTP 200)'
    >>> decision_outcome({"result": "declined", "verdict": "declined"})
    'nothing ran'
    """  # noqa: E501
    result = record.get("result")
    outcome = _mapping(record.get("outcome"))
    if result == "declined":
        if record.get("verdict") == "responded":
            return "nothing ran; the model was given the reason in the tool's place"
        return "nothing ran"
    if record.get("tool"):
        content = _said(outcome.get("content"), "no answer recorded")
        if result == "executed":
            return f"{subject} ran once and answered"
        if result == "unknown":
            return f"{subject} was started, but its outcome is unknown (it is not run again)"
        if result == "failed":
            if outcome.get("refused"):
                return f"{subject} was NOT run: {content}"
            return f"{subject} ran and failed: {content}"
        return f"no outcome is recorded for {subject}"
    flagged = _flagged(record.get("override_flag"))
    if outcome.get("kind") == "receipt":
        return f"{subject} was executed {flagged}; {_delivery(outcome)}"
    if result == "denied":
        return (
            f"the engine denied it again ({_gate(outcome.get('gate'))}: "
            f"{_said(outcome.get('message'), 'no reason given')}); nothing was executed"
        )
    if result == "failed":
        return (
            f"{subject} was sent {flagged}, but the execution failed: "
            f"{_said(outcome.get('message'), 'the engine gave no reason')}"
        )
    return f"no outcome is recorded for {subject}"


def _answered(record: Mapping[str, Any]) -> str:
    """Who answered and how: ``ana approved``, ``ana approved with edited arguments ...``."""
    who, verdict = _said(record.get("operator"), "an operator"), record.get("verdict")
    if verdict == "modified":
        return f"{who} approved with edited arguments {value_text(record.get('edited_args'))}"
    if verdict == "expired":
        deadline = _said(record.get("expires_at"), "its deadline")
        return f"{who}'s answer came after the deadline ({deadline})"
    phrases = {
        "overrode": "overrode the gate",
        "declined": "rejected",
        "responded": "responded in the tool's place",
    }
    how = phrases.get(str(verdict)) or _said(verdict or record.get("action"), "answered")
    return f"{who} {how}"


def who_answered(record: Mapping[str, Any]) -> str:
    """Who answered an escalation, how, when and where, for a refusal that names them.

    >>> who_answered({"operator": "olga", "verdict": "declined",
    ...               "decided_at": "2026-01-01T03:12:00+00:00"})
    'olga (declined at 2026-01-01T03:12:00+00:00)'
    >>> who_answered({"action": "override", "answered_in_thread": "t0"})
    'an operator (override, in thread t0)'
    """
    who = _said(record.get("operator"), "an operator")
    how = _said(record.get("verdict") or record.get("action"), "answered")
    when = record.get("decided_at") or record.get("time")
    where = record.get("answered_in_thread")
    return (
        f"{who} ({how}"
        + (f" at {when}" if when else "")
        + (f", in thread {where}" if where else "")
        + ")"
    )


def outcome_line(record: Mapping[str, Any], subject: str = "it") -> str:
    """An operator decision in one line: who answered how, and what came of it.

    >>> outcome_line({"operator": "ana", "verdict": "approved", "tool": "crm.rm",
    ...               "result": "executed"}, "crm.rm(id=b2)")
    'ana approved: crm.rm(id=b2) ran once and answered'
    """
    line = f"{_answered(record)}: {decision_outcome(record, subject)}"
    elsewhere = record.get("answered_in_thread")
    return line + (f" (answered in thread {elsewhere})" if elsewhere else "")


_POLICY_WORDS = {
    "escalate": "; an operator was asked",
    "report": "; the model was told",
    "halt": "; the run halted",
}


def _denied(record: Mapping[str, Any]) -> str:
    """What a denial record says happened."""
    gate, message = _gate(record.get("gate")), _said(record.get("message"), "no reason given")
    then = _POLICY_WORDS.get(str(record.get("policy")), "")
    source = record.get("source")
    if source == "graph":
        verb = "held" if record.get("policy") == "escalate" else "denied"
        return f"{verb} by {gate}: {message}{then}"
    if source == "thread_receipts":
        return f"not sent again: the thread had already executed it ({message})"
    if source == "operator":
        return f"the engine denied the operator's override too ({gate}): {message}{then}"
    return f"denied by {gate}: {message}{then}"


_CALL_RESULT = {
    "failed": "; it failed",
    "unknown": (
        "; its outcome is unknown: it may have run (it counts against its budgets and is never "
        "sent again)"
    ),
}
"""What a ``tool_calls`` record's ``result`` adds (``executed``, the usual, adds nothing)."""


_EXECUTED_BY = {
    "model": "executed on the model's call",
    "recovered": "executed (read back from the engine: the checkpoint had missed it)",
}


@dataclass(frozen=True)
class RecordLine:
    """One record of a thread as a timeline row shows it."""

    name: str
    """The state field holding it (``receipts``, ``denials``, ``operator_decisions``,
    ``tool_calls``)."""
    record: Mapping[str, Any]
    about: str
    """What it is about: the call, or the decision and its action."""
    happened: str
    """What happened, in words."""

    @property
    def seq(self) -> str:
        """Its place in the thread's chain (empty for a record outside it)."""
        seq = self.record.get("seq")
        return "" if seq is None else str(seq)

    @property
    def who(self) -> str:
        """The operator it names, if any."""
        return str(self.record.get("operator") or "")

    @property
    def when(self) -> str:
        """Its time."""
        r = self.record
        found = (
            r.get("decided_at")
            or r.get("raised_at")
            or r.get("time")
            or r.get("executed_at")
            or r.get("delivered_at")
        )
        return str(found or "")


def record_line(name: str, record: Mapping[str, Any], facts: Facts) -> RecordLine:
    """A record of a thread in words: what it is about and what happened.

    >>> line = record_line("tool_calls", {"tool": "refund", "server": "crm"}, Facts())
    >>> line.about, line.happened
    ('crm.refund', 'let through to run: no gate held it')
    """
    decision = decision_text(record.get("decision_id"), facts.action(record.get("decision_id")))
    if name == "tool_calls":
        approver = facts.approved_calls.get(str(record.get("tool_call_id")))
        happened = (
            f"ran on {approver}'s approval" if approver else "let through to run: no gate held it"
        )
        happened += _CALL_RESULT.get(str(record.get("result")), "")
        return RecordLine(name, record, _qualified(record), happened)
    if name == "denials":
        about = (
            call_text(_qualified(record), record.get("args"))
            if record.get("source") == "graph"
            else decision
        )
        return RecordLine(name, record, about, _denied(record))
    if name == "operator_decisions":
        about = _held_call(record, facts) if record.get("tool") else decision
        return RecordLine(name, record, about, outcome_line(record))
    if name == "receipts":
        source = record.get("source")
        if source == "operator":
            by = f"executed on {_said(record.get('operator'), 'an operator')}'s override"
        else:
            by = _EXECUTED_BY.get(str(source), "executed")
        return RecordLine(name, record, decision, f"{by}: {_delivery(record)}")
    return RecordLine(name, record, name, "a record of a kind this inbox does not know")


def record_lines(
    records: Iterable[tuple[str, Mapping[str, Any]]], facts: Facts
) -> list[RecordLine]:
    """Each of a thread's records (in chain order) in words."""
    return [record_line(name, record, facts) for name, record in records]
