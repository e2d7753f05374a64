"""An operator's answer: the form read into LangChain's decisions, the thread resumed with it.

:func:`build_resume` turns the form into the resume value (a decision per call, each bound by
its digest; an edit checked as the graph checks it; a reason always required) or refuses by
name with nothing sent; :func:`submit_answer` resumes the thread through the API and says what
the graph recorded, or why it refused. Which escalation waits is
:mod:`algenta_graph.inbox.escalation`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
from langgraph_sdk.client import LangGraphClient

from algenta_graph.inbox.escalation import EscalationView, decision_of
from algenta_graph.inbox.queries import InboxAPIError, api_error, thread_state
from algenta_graph.inbox.wording import who_answered
from algenta_graph.nodes.answers import edited_arguments, edited_call_arguments
from algenta_graph.nodes.questions import EscalationItem, action_name

__all__ = ["EDIT_FIELDS", "AnswerOutcome", "FormDecision", "build_resume", "submit_answer"]

EDIT_FIELDS = ("decision_id", "webhook_url", "timeout_seconds", "metadata", "args")
"""The fields of an edit the form sends (``args``: a held call's arguments, as JSON)."""


@dataclass(frozen=True)
class FormDecision:
    """What the form says about one escalated call."""

    type: str
    """``approve``, ``edit``, ``reject`` or ``respond``."""
    reason: str
    """Why (for ``respond``: the text the model is given)."""
    edit: dict[str, str] = field(default_factory=dict)
    """For ``edit``: the edited fields, as text (:data:`EDIT_FIELDS`: ``decision_id``,
    ``webhook_url``, ... for an engine decision, ``args`` for a held call)."""


def _edited(item: Mapping[str, Any], fields: Mapping[str, str]) -> dict[str, Any]:
    """The edit's arguments, read from the form and checked as the graph checks them.

    Raises:
        ValueError: naming what is wrong (the graph would refuse it the same way).
    """
    args: dict[str, Any] = {}
    for name in ("decision_id", "webhook_url"):
        text = (fields.get(name) or "").strip()
        if text:
            args[name] = text
    timeout = (fields.get("timeout_seconds") or "").strip()
    if timeout:
        try:
            args["timeout_seconds"] = int(timeout)
        except ValueError:
            raise ValueError(
                f"edit: timeout_seconds must be a whole number of seconds, got {timeout!r}"
            ) from None
    metadata = (fields.get("metadata") or "").strip()
    if metadata:
        try:
            args["metadata"] = json.loads(metadata)
        except ValueError as exc:
            raise ValueError(f"edit: metadata is not JSON: {exc}") from None
    edited_arguments(item.get("args") or {}, args)  # the graph's own check: refuses by name
    return args


def _edited_call(fields: Mapping[str, str]) -> dict[str, Any]:
    """A held call's edited arguments: the form's JSON object, scrubbed as the graph scrubs it.

    Raises:
        ValueError: the text is not a JSON object; the message says so.
    """
    text = (fields.get("args") or "").strip()
    try:
        args = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"edit: the arguments are not JSON: {exc}") from None
    if not isinstance(args, dict):
        raise ValueError(f"edit: the arguments must be a JSON object, got {type(args).__name__}")
    return edited_call_arguments(args)


def build_resume(view: EscalationView, decisions: Sequence[FormDecision]) -> Any:
    """The resume value of an answer (LangChain's decisions, each bound by its digest).

    Raises:
        ValueError: the form is wrong (a decision per call, the reason, the edit); the message
            names it and nothing is sent.
    """
    if len(decisions) != len(view.items):
        raise ValueError(
            f"the form answers {len(decisions)} call(s), but this escalation asks about "
            f"{len(view.items)}: reload the page"
        )
    out: list[dict[str, Any]] = []
    for index, (item, form) in enumerate(zip(view.items, decisions, strict=True)):
        where = f"call {index + 1}" if len(view.items) > 1 else "the decision"
        allowed = list(item.get("allowed_decisions") or ())
        if form.type not in ("approve", "edit", "reject", "respond"):
            raise ValueError(f"{where}: choose approve, edit, reject or respond")
        if form.type not in allowed:
            raise ValueError(
                f"{where}: {form.type!r} is not accepted for this {item.get('gate')} escalation "
                f"(allowed: {', '.join(allowed)})"
            )
        reason = form.reason.strip()
        if not reason:
            # the inbox's own rule, stricter than the graph's default: every answer says why
            raise ValueError(f"{where}: a reason is required (the record keeps why it was given)")
        decision: dict[str, Any] = {"type": form.type, "digest": item.get("digest")}
        if reason:
            decision["message"] = reason
        if form.type == "edit":
            decision["edited_action"] = (
                {"name": action_name(cast(EscalationItem, item)), "args": _edited_call(form.edit)}
                if item.get("tool")
                else {"name": "execute_decision", "args": _edited(item, form.edit)}
            )
        out.append(decision)
    if view.per_call:
        answer: Any = out[0]
    else:
        answer = {"decisions": out, "digest": view.digest}
    if view.pending_interrupts > 1 and view.interrupt_id:
        return {view.interrupt_id: answer}
    return answer


@dataclass(frozen=True)
class AnswerOutcome:
    """What came of an answer the inbox sent."""

    ok: bool
    message: str
    record: dict[str, Any] | None = None
    values: dict[str, Any] = field(default_factory=dict)
    """The thread's values after the run (empty when they could not be read)."""
    readable: bool = True
    """Whether the operator may still read the thread (after an answer that did not take
    effect, the thread may no longer be theirs: it waits for no one and they did not decide)."""


def _run_error(output: Any) -> tuple[str, str] | None:
    """``(error name, message)`` of a run that ended in an error."""
    if isinstance(output, Mapping) and isinstance(output.get("__error__"), Mapping):
        error = output["__error__"]
        return str(error.get("error") or "error"), str(error.get("message") or "")
    return None


_PYDANTIC_ERROR = re.compile(r"^\s+(?:Value error, )?(?P<what>.*?)\s*\[type=[^\n]*$", re.M)


def graph_refusal(name: str, message: str) -> str:
    r"""What the graph said when it refused an answer, in its own words.

    The answer's check (its ``response_schema``, the argument rules an edit must keep) fails as a
    pydantic ``ValidationError``: only what each error says is kept, not the input echoed back
    or pydantic's links.

    >>> graph_refusal("ValidationError", "1 validation error for EscalationAnswer\n"
    ...     "  Value error, edit: rule 'small' broken [type=value_error, input_value={}]\n"
    ...     "    For further information visit https://errors.pydantic.dev/2/v/value_error")
    "edit: rule 'small' broken"
    >>> graph_refusal("NoEscalationPending", "no escalation waits")
    'NoEscalationPending: no escalation waits'
    """
    if name == "ValidationError":
        said = [m.group("what") for m in _PYDANTIC_ERROR.finditer(message)]
        if said:
            return "; ".join(said)
    return f"{name}: {message}" if message else name


REFUSED_DECIDED = "refused: another operator decided first: "
"""How the page begins a refusal because another operator's answer takes effect."""
NOT_YOURS = (
    "your answer did not take effect: another operator had decided this escalation first, "
    "and their answer was completed in this thread (which is no longer yours to read: an "
    "operator reads a thread while it waits for them, or once they decided it)"
)
"""What an operator is told when their answer completed another operator's, elsewhere."""


async def submit_answer(
    client: LangGraphClient,
    view: EscalationView,
    resume: Any,
    escalation_id: str,
    identity: str,
) -> AnswerOutcome:
    """Resume the thread with ``resume`` and say what the graph recorded (or why it refused).

    ``identity``: who answers; when the decision recorded is someone else's (their answer was
    given first, in this thread or a copy of it, and completed here), the outcome says so.
    """
    try:
        run = await client.runs.create(
            view.thread_id,
            view.assistant_id,
            command={"resume": resume},
            multitask_strategy="reject",
        )
    except httpx.HTTPError as exc:
        error = api_error(exc)
        decided = str(error).partition("EscalationAlreadyDecided: ")[2]
        if error.status == 409 and decided:  # the server's own refusal: nothing waits any more
            return AnswerOutcome(False, REFUSED_DECIDED + decided)
        if error.status == 409 and str(error).startswith("NoEscalationPending: "):
            return AnswerOutcome(False, f"refused by the graph: {error}; nothing was recorded")
        if error.status == 409:
            return AnswerOutcome(
                False,
                "refused: the thread is busy (another answer or run is being applied); nothing "
                "was sent: reload the page",
            )
        return AnswerOutcome(False, f"refused by the server ({error.status}): {error}")
    try:
        output = await client.runs.join(view.thread_id, run["run_id"])
        status = (await client.runs.get(view.thread_id, run["run_id"]))["status"]
        problem = _run_error(output)
        if status != "success" or problem:
            name, message = problem or (status, "")
            if name == "EscalationAlreadyDecided":
                return AnswerOutcome(False, REFUSED_DECIDED + message)
            why = graph_refusal(name, message)
            return AnswerOutcome(False, f"refused by the graph: {why}; nothing was recorded")
        values = (await thread_state(client, view.thread_id)).get("values") or {}
    except (httpx.HTTPError, InboxAPIError) as exc:
        error = exc if isinstance(exc, InboxAPIError) else api_error(exc)
        if error.status == 404:  # the run ended, and the thread is no longer this operator's
            return AnswerOutcome(False, NOT_YOURS, readable=False)
        raise error from None
    record = decision_of(values, escalation_id)
    if record is None:
        return AnswerOutcome(
            False, "the run ended but no operator decision was recorded", values=values
        )
    if record.get("operator") != identity or record.get("answered_in_thread"):
        return AnswerOutcome(
            False,
            f"your answer did not take effect: {who_answered(record)} had decided this "
            "escalation first; that answer was completed here",
            record,
            values,
        )
    return AnswerOutcome(True, f"recorded: {record.get('verdict')}", record, values)
