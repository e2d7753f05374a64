"""The operator inbox: a Starlette app the LangGraph server serves next to its API, at ``/inbox``.

``langgraph.json`` names :data:`app` (``"http": {"app": "algenta_graph.inbox.app:app"}``); the
server merges its routes with the API's, so ``langgraph dev`` is all an operator needs. Pages
(rendered on the server, one small hand-written script that refreshes the queue in place, every
asset in the wheel, no CDN):

- ``/inbox/queue``: what the signed-in operator may answer, newest first, a count per gate;
- ``/inbox/escalations/{thread}/{escalation}``: one escalation (the engine's ``get_decision``,
  the denial, the policy, the thread's earlier records) and the approve / edit / reject form;
- ``/inbox/threads`` and ``/inbox/threads/{thread}/timeline``: the audit timeline with the
  chain's verification over every checkpoint, and its ``--jsonl`` export;
- ``/inbox/decided``: the decided escalations, filtered by operator, gate and outcome.

Who sees what is the API's answer to the operator's own token (:mod:`.queries`): sign in once
with a token of ``ALGENTA_AUTH_FILE`` or of the identity provider (pasted, or through the
provider's own sign-in at ``/inbox/oidc/start``, :mod:`.provider_signin`); an unknown token is
refused (401), a token without an operator or auditor role too (403); an auditor reads
timelines and decisions and answers nothing; ``operator:<gate>`` sees and answers only that
gate. Without ``ALGENTA_AUTH_FILE`` or an identity provider the inbox refuses to start unless
``ALGENTA_INBOX_ALLOW_OPEN=1`` (then anyone who reaches it answers under the name they type, as
on the open API): the server still starts (it may run open on purpose, with its own warning),
the inbox says at start-up that it is off and why, and answers every request with 503 and that
message.

This module is the routes and the app's start (the refusal to start: :mod:`.startup`); the
pages are :mod:`.signin` (sign-in and the role check), :mod:`.provider_signin` (the provider's
sign-in), :mod:`.reading` and :mod:`.answering`, rendered by :mod:`.rendering`, behind
:mod:`.headers`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route, request_response
from starlette.staticfiles import StaticFiles

from algenta_graph.errors import InboxConfigError
from algenta_graph.inbox import answering, reading
from algenta_graph.inbox.engine_reads import close_engines
from algenta_graph.inbox.form_tokens import LoginForms
from algenta_graph.inbox.headers import SecurityHeaders
from algenta_graph.inbox.provider_signin import ProviderSignIn
from algenta_graph.inbox.rendering import HERE, PREFIX
from algenta_graph.inbox.session import SessionStore
from algenta_graph.inbox.signin import Handler, Page, SignIn
from algenta_graph.inbox.startup import check_startup
from algenta_graph.serving.deadline_watcher import watch_deadlines

__all__ = ["app", "create_app"]

_log = logging.getLogger("algenta_graph.inbox")


async def _unavailable(request: Request, exc: Exception) -> Response:
    return PlainTextResponse(str(exc), status_code=503)


async def _with_slash(request: Request) -> Response:
    """``/inbox``: the inbox's home, ``/inbox/`` (else the API would answer, with its 401)."""
    query = request.url.query
    return RedirectResponse(PREFIX + "/" + ("?" + query if query else ""), status_code=307)


def create_app(
    sessions: SessionStore | None = None, login_forms: LoginForms | None = None
) -> Starlette:
    """The LangGraph server's custom app: the inbox mounted at ``/inbox``.

    Args:
        sessions: where sessions are kept (default: the LangGraph server's own store, see
            :mod:`algenta_graph.inbox.session`).
        login_forms: the sign-in form's token (default: signed with ``ALGENTA_INBOX_SECRET``,
            see :mod:`algenta_graph.inbox.form_tokens`).
    """
    forms = login_forms or LoginForms()
    sign = SignIn(sessions or SessionStore(), forms)
    provider = ProviderSignIn(sign, forms)

    def operators(page: Page) -> Handler:
        return sign.guarded(page, answer=True)

    def readers(page: Page) -> Handler:
        return sign.guarded(page, answer=False)

    inbox = Starlette(
        routes=[
            Route("/", sign.home),
            Route("/login", sign.login, methods=["GET", "POST"]),
            Route("/logout", sign.logout, methods=["POST"]),
            # the identity provider's sign-in (authorization code with PKCE)
            Route("/oidc/start", provider.start),
            Route("/oidc/callback", provider.callback),
            Route("/queue", operators(reading.queue_page)),
            # the queue's own refresh, every few seconds: not the operator's activity
            Route("/queue/rows", sign.guarded(reading.queue_rows, answer=True, touch=False)),
            Route("/escalations/{thread}/{escalation}", operators(answering.escalation_page)),
            Route(
                "/escalations/{thread}/{escalation}/answer",
                operators(answering.answer),
                methods=["POST"],
            ),
            Route("/threads", readers(reading.threads_page)),
            Route("/threads/{thread}/timeline", readers(reading.timeline_page)),
            Route("/threads/{thread}/export.jsonl", readers(reading.export)),
            Route("/decided", readers(reading.decided_page)),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ],
        # no store to keep sessions in: every page says why, nobody is signed in
        exception_handlers={InboxConfigError: _unavailable},
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
            # the served graph's escalations expire on their own (no cron), warned of first
            async with watch_deadlines():
                yield
        finally:
            await close_engines()

    # the server merges this app's routes (and middleware: none here) with its API's
    return Starlette(
        routes=[
            Route(PREFIX, SecurityHeaders(request_response(_with_slash))),
            Mount(PREFIX, app=SecurityHeaders(inbox)),
        ],
        lifespan=lifespan,
    )


app = create_app()
"""The app ``langgraph.json`` names (``"http": {"app": "algenta_graph.inbox.app:app"}``)."""
