"""One escalation in the inbox: its page and the approve / edit / reject form, handled.

The page shows what waits (the denial, the policy, the thread's earlier records) and what the
engine says of each decision (``get_decision``); the form's answer is sent as the signed-in
operator's resume only after its CSRF token, the operator's gates and the digest of what was
shown are checked, so a stale page or a second answer is refused with nothing done. Who may
ask is :mod:`algenta_graph.inbox.signin`; what is read and sent is
:mod:`algenta_graph.inbox.queries`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from algenta_graph.inbox import queries
from algenta_graph.inbox.engine_reads import get_decision
from algenta_graph.inbox.escalation import decision_of, escalation
from algenta_graph.inbox.form_tokens import same_token
from algenta_graph.inbox.rendering import refuse, render
from algenta_graph.inbox.resume import EDIT_FIELDS, FormDecision, build_resume, submit_answer
from algenta_graph.inbox.session import Session
from algenta_graph.inbox.signin import operator_client
from algenta_graph.serving.tokens import auth_configured, operator_gates

__all__ = ["answer", "escalation_page", "show_escalation"]


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
    """The escalation's page: what waits, what the engine says of each decision, the form.

    An escalation no longer waiting shows its answer (404 when there is none); a gate the
    operator may not answer is refused (403).
    """
    async with operator_client(session) as client:
        view, state = await escalation(client, thread_id, escalation_id)
    values = state.get("values") or {}
    if view is None:
        record = decision_of(values, escalation_id)
        return render(
            request,
            "answered.html",
            session,
            status if error else 404 if record is None else 200,
            error=error,
            record=record,
            thread_id=thread_id,
            escalation_id=escalation_id,
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
    return render(
        request,
        "escalation.html",
        session,
        status,
        error=error,
        view=view,
        engine=engine,
        form=form,
        now=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


async def escalation_page(request: Request, session: Session) -> Response:
    """``/escalations/{thread}/{escalation}``: one escalation and its answer form."""
    params = request.path_params
    return await show_escalation(request, session, params["thread"], params["escalation"])


async def answer(request: Request, session: Session) -> Response:
    """``POST .../answer``: the form checked (CSRF, gates, digest, decisions) and sent.

    Nothing is sent unless the form's token is the session's, the escalation still waits, the
    operator may answer every gate it lists and the page was shown for what waits now (its
    digest); the outcome is the answered page, or the escalation again with why.
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
            return render(
                request,
                "answered.html",
                session,
                409,
                error=(
                    "refused: this escalation no longer waits for you (someone else "
                    "answered it, and its thread is no longer yours to read); nothing was done"
                ),
                record=None,
                thread_id=thread_id,
                escalation_id=escalation_id,
            )
        if view is None:
            record = decision_of(state.get("values") or {}, escalation_id)
            why = (
                f"refused: this escalation was already answered by {record.get('operator')} "
                f"({record.get('verdict')}, {record.get('decided_at')}); nothing was done"
                if record
                else "refused: this escalation no longer waits for an operator; nothing was done"
            )
            return render(
                request,
                "answered.html",
                session,
                409,
                error=why,
                record=record,
                thread_id=thread_id,
                escalation_id=escalation_id,
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
        outcome = await submit_answer(client, view, resume, escalation_id)
    if not outcome.ok:
        return await show_escalation(
            request,
            session,
            thread_id,
            escalation_id,
            status=409,
            error=outcome.message,
            form=form,
        )
    return render(
        request,
        "answered.html",
        session,
        200,
        notice=outcome.message,
        record=outcome.record,
        thread_id=thread_id,
        escalation_id=escalation_id,
    )
