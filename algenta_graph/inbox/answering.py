"""One escalation in the inbox: its page and the approve / edit / reject form, handled.

The page says first, in words, what waits (the held call, or the decision and the action it
decides) and what each answer will do (:mod:`algenta_graph.inbox.wording`), then shows the
denial, the policy, what the engine says of each decision (``get_decision``) and the thread's
records; the form's answer is sent as the signed-in operator's resume only after its CSRF token,
the operator's gates and the digest of what was shown are checked, so a stale page or a second
answer is refused with nothing done. After an answer the page shows what happened: the tool's
answer, the receipt, or the refusal naming who decided. Who may ask is
:mod:`algenta_graph.inbox.signin`; what is read and sent is :mod:`algenta_graph.inbox.queries`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from algenta_graph.governance.escalations import is_overdue
from algenta_graph.inbox import queries
from algenta_graph.inbox.engine_reads import decision_actions, get_decision
from algenta_graph.inbox.escalation import decision_of, escalation
from algenta_graph.inbox.form_tokens import same_token
from algenta_graph.inbox.rendering import refuse, render
from algenta_graph.inbox.resume import EDIT_FIELDS, FormDecision, build_resume, submit_answer
from algenta_graph.inbox.session import Session
from algenta_graph.inbox.signin import operator_client
from algenta_graph.inbox.wording import (
    Facts,
    answer_effects,
    decision_ids,
    decision_inputs,
    escalation_about,
    outcome_line,
    record_line,
    record_lines,
    thread_facts,
    who_answered,
)
from algenta_graph.serving.tokens import auth_configured, operator_gates

__all__ = ["answer", "escalation_page", "show_escalation"]


@dataclass(frozen=True)
class ItemWords:
    """One escalated call of the page, in words."""

    about: str
    """Which gate stopped what (the held call, or the decision and its action)."""
    decides: str | None
    """For an engine decision: the action it decides and its inputs, as the engine says."""
    effects: dict[str, str]
    """What each answer the gate accepts will do, by decision type."""


def _item_words(item: Mapping[str, Any], engine: Mapping[str, Any], now: datetime) -> ItemWords:
    answer = engine.get(str(item.get("decision_id")))
    decision = answer.get("decision") if isinstance(answer, Mapping) else None
    decides = decision_inputs(decision) if isinstance(decision, Mapping) else None
    action = decision.get("chosen_action") if isinstance(decision, Mapping) else None
    overdue = is_overdue(item.get("expires_at"), now)
    return ItemWords(
        about=escalation_about(item, action),
        decides=decides,
        effects=answer_effects(item, action, overdue=overdue),
    )


async def _facts(values: Mapping[str, Any]) -> Facts:
    """The thread's facts, with the action of every decision its records name."""
    return thread_facts(values, await decision_actions(decision_ids(values)))


def _answered(
    request: Request,
    session: Session,
    status: int,
    *,
    thread_id: str,
    escalation_id: str,
    record: dict[str, Any] | None,
    facts: Facts,
    error: str | None = None,
    notice: str | None = None,
) -> Response:
    """The page of an escalation no longer waiting: what was decided and what came of it."""
    outcome = result = receipt = None
    if record is not None:
        about = record_line("operator_decisions", record, facts).about
        outcome = outcome_line(record, about)
        shown = record.get("outcome")
        if isinstance(shown, Mapping):
            if record.get("tool") and shown.get("content") is not None:
                result = str(shown["content"])
            elif shown.get("kind") == "receipt":
                receipt = dict(shown)
    return render(
        request,
        "answered.html",
        session,
        status,
        error=error,
        notice=notice,
        record=record,
        outcome=outcome,
        result=result,
        receipt=receipt,
        thread_id=thread_id,
        escalation_id=escalation_id,
    )


async def show_escalation(
    request: Request,
    session: Session,
    thread_id: str,
    escalation_id: str,
    *,
    status: int = 200,
    error: str | None = None,
    form: FormData | None = None,
) -> Response:
    """The escalation's page: what waits, what each answer does, the engine's view, the form.

    An escalation no longer waiting shows its answer and what came of it (404 when there is
    none); a gate the operator may not answer is refused (403).
    """
    async with operator_client(session) as client:
        view, state = await escalation(client, thread_id, escalation_id)
    values = state.get("values") or {}
    if view is None:
        record = decision_of(values, escalation_id)
        return _answered(
            request,
            session,
            status if error else 404 if record is None else 200,
            thread_id=thread_id,
            escalation_id=escalation_id,
            record=record,
            facts=await _facts(values),
            error=error,
        )
    forbidden = [
        i["gate"] for i in view.items if i.get("gate") not in operator_gates(session.roles)
    ]
    if forbidden:
        return refuse(
            request,
            session,
            403,
            f"{session.identity} may not answer {', '.join(sorted(set(forbidden)))} escalations",
        )
    engine: dict[str, Any] = {}
    for item in view.items:
        decision = item.get("decision_id")
        if isinstance(decision, str) and decision not in engine:
            try:
                engine[decision] = await get_decision(decision)
            except Exception as exc:  # shown on the page; the form still works
                engine[decision] = {"error": f"the engine could not be asked: {exc}"}
    now = datetime.now(timezone.utc)
    return render(
        request,
        "escalation.html",
        session,
        status,
        error=error,
        view=view,
        words=[_item_words(item, engine, now) for item in view.items],
        lines=record_lines(view.records, await _facts(values)),
        engine=engine,
        form=form,
        now=now.isoformat(timespec="seconds"),
    )


async def escalation_page(request: Request, session: Session) -> Response:
    """``/escalations/{thread}/{escalation}``: one escalation and its answer form."""
    params = request.path_params
    return await show_escalation(request, session, params["thread"], params["escalation"])


def _already_answered(record: Mapping[str, Any] | None) -> str:
    """Why an escalation no longer waiting is refused: who answered it, how and when."""
    if record is None:
        return "refused: this escalation no longer waits for an operator; nothing was done"
    return (
        f"refused: this escalation was already answered by {who_answered(record)}; nothing was done"
    )


async def answer(request: Request, session: Session) -> Response:
    """``POST .../answer``: the form checked (CSRF, gates, digest, decisions) and sent.

    Nothing is sent unless the form's token is the session's, the escalation still waits, the
    operator may answer every gate it lists and the page was shown for what waits now (its
    digest); the outcome is the answered page (what happened), or the escalation again with why.
    """
    thread_id, escalation_id = request.path_params["thread"], request.path_params["escalation"]
    form = await request.form()
    if not same_token(form.get("csrf"), session.csrf):
        return refuse(
            request,
            session,
            403,
            "refused: the form's token is missing or forged (CSRF); nothing was done",
        )
    async with operator_client(session) as client:
        try:
            view, state = await escalation(client, thread_id, escalation_id)
        except queries.InboxAPIError as exc:
            if exc.status != 404:
                raise
            # an operator reads a thread while it waits for it, or once it decided it
            return _answered(
                request,
                session,
                409,
                thread_id=thread_id,
                escalation_id=escalation_id,
                record=None,
                facts=Facts(),
                error=(
                    "refused: this escalation no longer waits for you (someone else "
                    "answered it, and its thread is no longer yours to read); nothing was done"
                ),
            )
        if view is None:
            values = state.get("values") or {}
            record = decision_of(values, escalation_id)
            return _answered(
                request,
                session,
                409,
                thread_id=thread_id,
                escalation_id=escalation_id,
                record=record,
                facts=await _facts(values),
                error=_already_answered(record),
            )
        forbidden = {
            str(i["gate"]) for i in view.items if i.get("gate") not in operator_gates(session.roles)
        }
        if forbidden:
            return refuse(
                request,
                session,
                403,
                f"{session.identity} may not answer {', '.join(sorted(forbidden))} escalations",
            )
        if str(form.get("digest") or "") != view.digest:
            error = (
                "refused: stale page: it was shown for digest "
                f"{form.get('digest') or '(none)'}, but what waits here now has digest "
                f"{view.digest}; nothing was done: review it below and answer again"
            )
            return await show_escalation(
                request, session, thread_id, escalation_id, status=409, error=error
            )
        try:
            decisions = [
                FormDecision(
                    type=str(form.get(f"decision-{i}") or ""),
                    reason=str(form.get(f"reason-{i}") or ""),
                    edit={name: str(form.get(f"edit-{i}-{name}") or "") for name in EDIT_FIELDS},
                )
                for i in range(len(view.items))
            ]
            resume = build_resume(view, decisions)
        except ValueError as exc:
            return await show_escalation(
                request,
                session,
                thread_id,
                escalation_id,
                status=400,
                error=f"refused: {exc}; nothing was sent",
                form=form,
            )
        if not auth_configured() and isinstance(resume, dict):
            resume = {**resume, "operator": session.identity}  # open: the name typed
        outcome = await submit_answer(client, view, resume, escalation_id, session.identity)
    if outcome.ok or outcome.record is not None or not outcome.readable:
        return _answered(
            request,
            session,
            200 if outcome.ok else 409,
            thread_id=thread_id,
            escalation_id=escalation_id,
            record=outcome.record,
            facts=await _facts(outcome.values),
            error=None if outcome.ok else outcome.message,
            notice=outcome.message if outcome.ok else None,
        )
    return await show_escalation(
        request,
        session,
        thread_id,
        escalation_id,
        status=409,
        error=outcome.message,
        form=form,
    )
