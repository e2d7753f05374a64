"""The operator inbox: a Starlette app the LangGraph server serves next to its API, at ``/inbox``.

``langgraph.json`` names :data:`app` (``"http": {"app": "algenta_graph.inbox.app:app"}``); the
server merges its routes with the API's, so ``langgraph dev`` is all an operator needs. Pages
(rendered on the server, a few lines of hand-written JS for the queue's refresh, every asset in
the wheel, no CDN):

- ``/inbox/queue``: what the signed-in operator may answer, newest first, a count per gate;
- ``/inbox/escalations/{thread}/{escalation}``: one escalation (the engine's ``get_decision``,
  the denial, the policy, the thread's earlier records) and the approve / edit / reject form;
- ``/inbox/threads`` and ``/inbox/threads/{thread}/timeline``: the audit timeline with the
  chain's verification over every checkpoint, and its ``--jsonl`` export;
- ``/inbox/decided``: the decided escalations, filtered by operator, gate and outcome.

Who sees what is the API's answer to the operator's own token (:mod:`.queries`): sign in once
with a token of ``ALGENTA_AUTH_FILE``; an unknown token is refused (401), a token without an
operator or auditor role too (403); an auditor reads timelines and decisions and answers
nothing; ``operator:<gate>`` sees and answers only that gate. Without ``ALGENTA_AUTH_FILE`` the
inbox refuses to start unless ``ALGENTA_INBOX_ALLOW_OPEN=1`` (then anyone who reaches it answers
under the name they type, as on the open API): the server still starts (it may run open on
purpose, with its own warning), the inbox says at start-up that it is off and why, and answers
every request with 503 and that message.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from langgraph_sdk import Auth
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from algenta_graph.errors import AlgentaGraphError
from algenta_graph.inbox import queries
from algenta_graph.inbox.session import COOKIE, LOGIN_COOKIE, Session, SessionSigner, same_token
from algenta_graph.serving.auth import authenticate
from algenta_graph.serving.tokens import (
    AUDITOR,
    ENV_AUTH_FILE,
    OPERATOR,
    auth_configured,
    is_operator,
    operator_gates,
)

__all__ = ["ENV_ALLOW_OPEN", "PREFIX", "InboxConfigError", "app", "check_startup", "create_app"]

ENV_ALLOW_OPEN = "ALGENTA_INBOX_ALLOW_OPEN"
"""Set to ``1`` to serve the inbox on a server without ``ALGENTA_AUTH_FILE`` (open)."""
PREFIX = "/inbox"
HERE = Path(__file__).resolve().parent
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_log = logging.getLogger("algenta_graph.inbox")


class InboxConfigError(AlgentaGraphError, RuntimeError):
    """The inbox cannot start as configured (no auth file and open serving not allowed)."""


def open_allowed(environ: Any = None) -> bool:
    """Whether ``ALGENTA_INBOX_ALLOW_OPEN`` allows serving the inbox without auth.

    >>> open_allowed({"ALGENTA_INBOX_ALLOW_OPEN": "1"}), open_allowed({})
    (True, False)
    """
    env = os.environ if environ is None else environ
    return str(env.get(ENV_ALLOW_OPEN, "")).strip().lower() in ("1", "true", "yes")


def startup_problem(environ: Any = None) -> str | None:
    """Why the inbox must not start (``None``: it may)."""
    env = os.environ if environ is None else environ
    if env.get(ENV_AUTH_FILE) or open_allowed(env):
        return None
    return (
        f"algenta-graph inbox: {ENV_AUTH_FILE} is not set, so anyone who reaches {PREFIX} could "
        f"answer escalations under any name: the inbox refuses to start. Set {ENV_AUTH_FILE} to "
        f"the server's tokens file, or set {ENV_ALLOW_OPEN}=1 to serve it open on purpose."
    )


def check_startup(environ: Any = None) -> None:
    """Refuse to start without an auth file unless open serving is allowed (and say so).

    Raises:
        InboxConfigError: naming both ways out.
    """
    problem = startup_problem(environ)
    if problem is not None:
        print(problem, file=sys.stderr, flush=True)
        raise InboxConfigError(problem)
    if not (environ or os.environ).get(ENV_AUTH_FILE):
        print(
            f"algenta-graph inbox: WARNING: served OPEN ({ENV_ALLOW_OPEN}=1, no {ENV_AUTH_FILE}):"
            " anyone who reaches it answers escalations under any name",
            file=sys.stderr,
            flush=True,
        )


# --------------------------------------------------------------------------- rendering

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(HERE / "templates")),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
templates = Jinja2Templates(env=_env)


def _url(*parts: str, **query: str | None) -> str:
    path = PREFIX + "".join("/" + quote(p, safe="") for p in parts)
    given = {k: v for k, v in query.items() if v}
    return path + ("?" + urlencode(given) if given else "")


_env.globals["url"] = _url


def _pretty(value: Any, indent: int | None = 2) -> str:
    """JSON text of ``value`` for a page (escaped by the template like any text)."""
    return json.dumps(value, indent=indent, sort_keys=True, default=str, ensure_ascii=False)


_env.filters["pretty"] = _pretty


def render(
    request: Request,
    name: str,
    session: Session | None,
    status: int = 200,
    **context: Any,
) -> Response:
    """A page: ``name`` with the session's nav and form token."""
    roles = session.roles if session else ()
    base = {
        "session": session,
        "csrf": session.csrf if session else "",
        "can_answer": is_operator(roles),
        "gates": operator_gates(roles),
        "open_server": not auth_configured(),
        "error": None,
        "notice": None,
    }
    return templates.TemplateResponse(request, name, {**base, **context}, status_code=status)


def _secure(request: Request) -> bool:
    proto = request.headers.get("x-forwarded-proto", request.url.scheme)
    return proto.split(",")[0].strip() == "https"


class SecurityHeaders:
    """Every inbox response: a strict CSP, no sniffing, no framing, no caching, no referrer.

    Args:
        app: the inbox's ASGI app.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Add the headers to an HTTP response."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                for key, value in (
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"no-referrer"),
                    (b"cache-control", b"no-store"),
                ):
                    headers.append((key, value))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, wrapped)


# --------------------------------------------------------------------------- who is asking

Handler = Callable[[Request], Awaitable[Response]]


def create_app(signer: SessionSigner | None = None) -> Starlette:
    """The LangGraph server's custom app: the inbox mounted at ``/inbox``.

    Args:
        signer: signs the session cookie (default: ``ALGENTA_INBOX_SECRET``, see
            :mod:`algenta_graph.inbox.session`).
    """
    sign = signer or SessionSigner()

    def current(request: Request) -> Session | None:
        return sign.loads(request.cookies.get(COOKIE))

    def refuse(request: Request, session: Session | None, status: int, why: str) -> Response:
        return render(request, "error.html", session, status, error=why, status_code=status)

    def guarded(*, answer: bool) -> Callable[[Callable[..., Awaitable[Response]]], Handler]:
        """A page for operators (``answer``) or for operators and auditors (reads)."""

        def wrap(page: Callable[..., Awaitable[Response]]) -> Handler:
            async def handler(request: Request) -> Response:
                problem = startup_problem()
                if problem is not None:
                    return PlainTextResponse(problem, status_code=503)
                session = current(request)
                if session is None:
                    if request.method == "GET":
                        target = request.url.path + (
                            "?" + request.url.query if request.url.query else ""
                        )
                        return RedirectResponse(_url("login", next=target), status_code=303)
                    return refuse(request, None, 401, "not signed in (or the session expired)")
                try:
                    session = await _current_roles(session)
                except Auth.exceptions.HTTPException as exc:  # revoked: signed out at once
                    response = login_page(
                        request, 401, f"the server no longer accepts your token: {exc.detail}"
                    )
                    response.delete_cookie(COOKIE, path=PREFIX)
                    return response
                if answer and not is_operator(session.roles):
                    return refuse(
                        request,
                        session,
                        403,
                        f"{session.identity} may not answer escalations (roles: "
                        f"{', '.join(session.roles)}); an auditor reads the timelines",
                    )
                if not answer and not (is_operator(session.roles) or AUDITOR in session.roles):
                    return refuse(request, session, 403, "an operator or auditor role is needed")
                try:
                    return await page(request, session)
                except queries.InboxAPIError as exc:
                    if exc.status == 401:  # the token was revoked (or the file broke): sign out
                        response = login_page(
                            request, 401, f"the server no longer accepts your token: {exc}"
                        )
                        response.delete_cookie(COOKIE, path=PREFIX)
                        return response
                    status = exc.status if exc.status in (403, 404, 409) else 502
                    return refuse(request, session, status, f"the API answered: {exc}")

            return handler

        return wrap

    # ------------------------------------------------------------------- sign-in

    def login_page(request: Request, status: int = 200, error: str | None = None) -> Response:
        token, cookie = sign.login_csrf()
        response = render(
            request,
            "login.html",
            None,
            status,
            error=error,
            login_csrf=token,
            next=_safe_next(request.query_params.get("next")),
        )
        response.set_cookie(
            LOGIN_COOKIE,
            cookie,
            max_age=3600,
            httponly=True,
            samesite="strict",
            secure=_secure(request),
            path=PREFIX,
        )
        return response

    async def login(request: Request) -> Response:
        problem = startup_problem()
        if problem is not None:
            return PlainTextResponse(problem, status_code=503)
        if request.method == "GET":
            return login_page(request)
        form = await request.form()
        if not sign.login_csrf_ok(request.cookies.get(LOGIN_COOKIE), form.get("csrf")):
            return login_page(
                request, 403, "the sign-in form's token is missing or forged: sign in again"
            )
        token = str(form.get("token") or "").strip()
        if not token:
            return login_page(request, 401, "enter your token")
        if auth_configured():
            try:
                user = await authenticate(f"Bearer {token}", None, PREFIX)
            except Auth.exceptions.HTTPException as exc:
                return login_page(request, exc.status_code, f"sign-in refused: {exc.detail}")
            identity = str(user["identity"])
            roles = tuple(str(r) for r in user.get("permissions") or ())
            api_token = token
        else:  # served open on purpose: the name typed, as on the open API
            identity, roles, api_token = token, (OPERATOR,), ""
        if not (is_operator(roles) or AUDITOR in roles):
            return render(
                request,
                "error.html",
                None,
                403,
                error=(
                    f"{identity} has no operator or auditor role (roles: {', '.join(roles)}): "
                    "the inbox is for operators and auditors"
                ),
                status_code=403,
            )
        session = sign.new(api_token, identity, roles)
        home = "queue" if is_operator(roles) else "threads"
        target = _safe_next(form.get("next")) or _url(home)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            COOKIE,
            sign.dumps(session),
            max_age=sign.max_age,
            httponly=True,
            samesite="strict",
            secure=_secure(request),
            path=PREFIX,
        )
        response.delete_cookie(LOGIN_COOKIE, path=PREFIX)
        return response

    async def logout(request: Request) -> Response:
        session = current(request)
        form = await request.form()
        if session is not None and not same_token(form.get("csrf"), session.csrf):
            return refuse(request, session, 403, "forged form token: still signed in")
        response = RedirectResponse(_url("login"), status_code=303)
        response.delete_cookie(COOKIE, path=PREFIX)
        return response

    async def home(request: Request) -> Response:
        session = current(request)
        if session is None:
            return RedirectResponse(_url("login"), status_code=303)
        return RedirectResponse(
            _url("queue" if is_operator(session.roles) else "threads"), status_code=303
        )

    # ------------------------------------------------------------------- the queue

    async def _queue(session: Session) -> tuple[list[queries.QueueEntry], dict[str, int]]:
        async with _client(session) as client:
            return await queries.queue(client, session.roles, datetime.now(timezone.utc))

    @guarded(answer=True)
    async def queue_page(request: Request, session: Session) -> Response:
        entries, counts = await _queue(session)
        return render(request, "queue.html", session, entries=entries, counts=counts)

    @guarded(answer=True)
    async def queue_rows(request: Request, session: Session) -> Response:
        entries, counts = await _queue(session)
        return render(request, "queue_rows.html", session, entries=entries, counts=counts)

    # ------------------------------------------------------------------- one escalation

    async def _escalation_page(
        request: Request,
        session: Session,
        thread_id: str,
        escalation_id: str,
        *,
        status: int = 200,
        error: str | None = None,
        form: FormData | None = None,
    ) -> Response:
        async with _client(session) as client:
            view, state = await queries.escalation(client, thread_id, escalation_id)
        values = state.get("values") or {}
        if view is None:
            record = queries.decision_of(values, escalation_id)
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
                f"{session.identity} may not answer {', '.join(sorted(set(forbidden)))} "
                "escalations",
            )
        engine: dict[str, Any] = {}
        for item in view.items:
            decision = item.get("decision_id")
            if isinstance(decision, str) and decision not in engine:
                try:
                    engine[decision] = await queries.get_decision(decision)
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

    @guarded(answer=True)
    async def escalation_page(request: Request, session: Session) -> Response:
        params = request.path_params
        return await _escalation_page(request, session, params["thread"], params["escalation"])

    @guarded(answer=True)
    async def answer(request: Request, session: Session) -> Response:
        thread_id, escalation_id = request.path_params["thread"], request.path_params["escalation"]
        form = await request.form()
        if not same_token(form.get("csrf"), session.csrf):
            return refuse(
                request,
                session,
                403,
                "refused: the form's token is missing or forged (CSRF); nothing was done",
            )
        async with _client(session) as client:
            try:
                view, state = await queries.escalation(client, thread_id, escalation_id)
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
                record = queries.decision_of(state.get("values") or {}, escalation_id)
                why = (
                    f"refused: this escalation was already answered by {record.get('operator')} "
                    f"({record.get('verdict')}, {record.get('decided_at')}); nothing was done"
                    if record
                    else "refused: this escalation no longer waits for an operator; nothing was "
                    "done"
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
                str(i["gate"])
                for i in view.items
                if i.get("gate") not in operator_gates(session.roles)
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
                return await _escalation_page(
                    request, session, thread_id, escalation_id, status=409, error=error
                )
            try:
                decisions = [
                    queries.FormDecision(
                        type=str(form.get(f"decision-{i}") or ""),
                        reason=str(form.get(f"reason-{i}") or ""),
                        edit={
                            name: str(form.get(f"edit-{i}-{name}") or "")
                            for name in (
                                "decision_id",
                                "webhook_url",
                                "timeout_seconds",
                                "metadata",
                            )
                        },
                    )
                    for i in range(len(view.items))
                ]
                resume = queries.build_resume(view, decisions)
            except ValueError as exc:
                return await _escalation_page(
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
            outcome = await queries.submit_answer(client, view, resume, escalation_id)
        if not outcome.ok:
            return await _escalation_page(
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

    # ------------------------------------------------------------------- timelines

    @guarded(answer=False)
    async def threads_page(request: Request, session: Session) -> Response:
        async with _client(session) as client:
            found = await queries.readable_threads(client)
        rows = [
            {
                "thread_id": t["thread_id"],
                "owner": (t.get("metadata") or {}).get("algenta_owner"),
                "status": t.get("status"),
                "updated_at": t.get("updated_at"),
                "records": sum(
                    len((t.get("values") or {}).get(f) or ())
                    for f in ("receipts", "denials", "operator_decisions")
                )
                if isinstance(t.get("values"), dict)
                else 0,
            }
            for t in found
        ]
        return render(request, "threads.html", session, rows=rows)

    @guarded(answer=False)
    async def timeline_page(request: Request, session: Session) -> Response:
        async with _client(session) as client:
            found = await queries.timeline(client, request.path_params["thread"])
        return render(request, "timeline.html", session, timeline=found)

    @guarded(answer=False)
    async def export(request: Request, session: Session) -> Response:
        thread_id = request.path_params["thread"]
        async with _client(session) as client:
            found = await queries.timeline(client, thread_id)
        return Response(
            found.jsonl(),
            media_type="application/x-ndjson",
            headers={"content-disposition": f'attachment; filename="{thread_id}.jsonl"'},
        )

    @guarded(answer=False)
    async def decided_page(request: Request, session: Session) -> Response:
        chosen = {k: request.query_params.get(k) or None for k in ("operator", "gate", "outcome")}
        async with _client(session) as client:
            rows, choices = await queries.decided(client, **chosen)
        return render(request, "decided.html", session, rows=rows, choices=choices, chosen=chosen)

    inbox = Starlette(
        routes=[
            Route("/", home),
            Route("/login", login, methods=["GET", "POST"]),
            Route("/logout", logout, methods=["POST"]),
            Route("/queue", queue_page),
            Route("/queue/rows", queue_rows),
            Route("/escalations/{thread}/{escalation}", escalation_page),
            Route("/escalations/{thread}/{escalation}/answer", answer, methods=["POST"]),
            Route("/threads", threads_page),
            Route("/threads/{thread}/timeline", timeline_page),
            Route("/threads/{thread}/export.jsonl", export),
            Route("/decided", decided_page),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ],
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        # the inbox refuses to start, not the server (which may run open on purpose): it says
        # so now, and every request to it is answered 503 with the same message
        try:
            check_startup()
        except InboxConfigError as exc:
            _log.error("%s", exc)
        try:
            yield
        finally:
            await queries.close_engines()

    # the server merges this app's routes (and middleware: none here) with its API's
    return Starlette(routes=[Mount(PREFIX, app=SecurityHeaders(inbox))], lifespan=lifespan)


async def _current_roles(session: Session) -> Session:
    """``session`` with its token's identity and roles as the tokens file says now.

    Raises:
        Auth.exceptions.HTTPException: the token is no longer accepted (401).
    """
    if not auth_configured():
        return session
    user = await authenticate(f"Bearer {session.token}", None, PREFIX)
    roles = tuple(str(r) for r in user.get("permissions") or ())
    identity = str(user["identity"])
    if (identity, roles) == (session.identity, session.roles):
        return session
    return Session(session.token, identity, roles, session.csrf)


@contextlib.asynccontextmanager
async def _client(session: Session) -> AsyncIterator[Any]:
    client = queries.api_client(session.token)
    try:
        yield client
    finally:
        await client.aclose()


def _safe_next(value: Any) -> str | None:
    """A post-sign-in target inside the inbox only (never another site).

    >>> _safe_next("/inbox/queue"), _safe_next("//evil.example/inbox"), _safe_next("/threads")
    ('/inbox/queue', None, None)
    """
    text = str(value or "")
    if text.startswith(PREFIX + "/") and not text.startswith("//") and "\\" not in text:
        return text
    return None


app = create_app()
"""The app ``langgraph.json`` names (``"http": {"app": "algenta_graph.inbox.app:app"}``)."""
