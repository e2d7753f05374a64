"""Who is asking the inbox: sign-in, sign-out, and the role check in front of every page.

An operator signs in once with a token of ``ALGENTA_AUTH_FILE`` or a JWT of the identity
provider, pasted (checked by the server's own
:func:`~algenta_graph.serving.auth.authenticated_principal`, the API's one rule), or through the
provider's own sign-in (:mod:`algenta_graph.inbox.provider_signin`, which ends in
:meth:`SignIn.start_session` too); the session is kept on the server
(:mod:`algenta_graph.inbox.session`), its cookie an opaque id, and ends at a JWT's ``exp``.
Every page then re-reads the token's roles (a revoked or expired token, or one now naming
someone else, ends the session at once), refuses a reader the page's role (403) and turns an
API refusal into a page. Signing out ends the session on the server. This module renders no
page of its own beyond the sign-in form and reads no thread
(:mod:`~algenta_graph.inbox.answering`, :mod:`~algenta_graph.inbox.reading`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

from langgraph_sdk import Auth
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from algenta_graph.inbox import queries
from algenta_graph.inbox.form_tokens import LOGIN_COOKIE, LOGIN_SECONDS, LoginForms, same_token
from algenta_graph.inbox.rendering import PREFIX, is_secure, refuse, render, safe_next, url
from algenta_graph.inbox.session import COOKIE, Session, SessionStore
from algenta_graph.inbox.startup import startup_problem
from algenta_graph.serving.auth import authenticated_principal
from algenta_graph.serving.oidc_settings import oidc_settings
from algenta_graph.serving.roles import AUDITOR, OPERATOR, Principal, is_operator
from algenta_graph.serving.tokens import auth_configured

__all__ = ["Handler", "Page", "SignIn", "current_roles", "operator_client"]

Handler = Callable[[Request], Awaitable[Response]]
"""A Starlette endpoint."""
Page = Callable[[Request, Session], Awaitable[Response]]
"""A page of a signed-in reader: the request and the session, roles as the tokens file says now."""


class SignIn:
    """The sign-in pages and the guard of every other page, over one session store.

    Args:
        sessions: where the sessions are kept.
        login_forms: the sign-in form's own token and cookie.
    """

    def __init__(self, sessions: SessionStore, login_forms: LoginForms) -> None:
        self.sessions = sessions
        self.login_forms = login_forms

    async def current(self, request: Request, *, touch: bool = True) -> Session | None:
        """The request's session (``None``: not signed in, signed out, unknown or expired).

        Args:
            request: the request, its cookie naming the session.
            touch: whether the request is the operator's doing (it restarts the idle clock).

        Raises:
            InboxConfigError: no store to keep sessions in (the app answers 503 with why).
        """
        return await self.sessions.open(request.cookies.get(COOKIE), touch=touch)

    def guarded(self, page: Page, *, answer: bool, touch: bool = True) -> Handler:
        """``page`` for operators (``answer``) or for operators and auditors (reads).

        Args:
            page: the page, called with the signed-in session.
            answer: whether the page answers escalations (operators only).
            touch: whether opening the page counts as the operator's activity (the queue's own
                refresh does not).

        Returns:
            The endpoint: 503 while the inbox may not start, a redirect to sign in (``GET``) or
            401 without a session, the sign-in page when the token was revoked (the session
            ended), 403 without the role, the API's refusal as a page.
        """

        async def handler(request: Request) -> Response:
            problem = startup_problem()
            if problem is not None:
                return PlainTextResponse(problem, status_code=503)
            session = await self.current(request, touch=touch)
            if session is None:
                if request.method == "GET":
                    target = request.url.path + (
                        "?" + request.url.query if request.url.query else ""
                    )
                    return RedirectResponse(url("login", next=target), status_code=303)
                return refuse(request, None, 401, "not signed in (or the session expired)")
            try:
                session = await current_roles(session)
            except Auth.exceptions.HTTPException as exc:  # revoked: the session ends at once
                return await self._signed_out(request, session, f"{exc.detail}")
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
                    return await self._signed_out(request, session, f"{exc}")
                status = exc.status if exc.status in (403, 404, 409) else 502
                return refuse(request, session, status, f"the API answered: {exc}")

        return handler

    async def _signed_out(self, request: Request, session: Session, why: str) -> Response:
        await self.sessions.end(session)
        response = self.login_page(request, 401, f"the server no longer accepts your token: {why}")
        response.delete_cookie(COOKIE, path=PREFIX)
        return response

    def login_page(self, request: Request, status: int = 200, error: str | None = None) -> Response:
        """The sign-in form (and the provider's sign-in, if set up), with its CSRF token."""
        token, cookie = self.login_forms.issue()
        try:
            provider = oidc_settings()
        except ValueError:  # (the settings' error is on every API answer and the start-up log)
            provider = None
        target = safe_next(request.query_params.get("next"))
        response = render(
            request,
            "login.html",
            None,
            status,
            error=error,
            login_csrf=token,
            next=target,
            identity_provider=provider is not None,
            provider_sign_in=url("oidc", "start", next=target)
            if provider is not None and provider.sign_in_with_provider
            else None,
        )
        response.set_cookie(
            LOGIN_COOKIE,
            cookie,
            max_age=LOGIN_SECONDS,
            httponly=True,
            samesite="strict",
            secure=is_secure(request),
            path=PREFIX,
        )
        return response

    async def login(self, request: Request) -> Response:
        """``/login``: the form (``GET``), or a sign-in with a token (``POST``)."""
        problem = startup_problem()
        if problem is not None:
            return PlainTextResponse(problem, status_code=503)
        if request.method == "GET":
            return self.login_page(request)
        form = await request.form()
        if not self.login_forms.accepts(request.cookies.get(LOGIN_COOKIE), form.get("csrf")):
            return self.login_page(
                request, 403, "the sign-in form's token is missing or forged: sign in again"
            )
        token = str(form.get("token") or "").strip()
        if not token:
            return self.login_page(request, 401, "enter your token")
        if auth_configured():
            try:
                principal = await authenticated_principal(token)
            except Auth.exceptions.HTTPException as exc:
                return self.login_page(request, exc.status_code, f"sign-in refused: {exc.detail}")
            if principal is None:  # (the settings changed under the form)
                return self.login_page(request, 503, "the server's authentication changed: retry")
            api_token = token
        else:  # served open on purpose: the name typed, as on the open API
            principal, api_token = Principal(token, (OPERATOR,)), ""
        return await self.start_session(request, api_token, principal, form.get("next"))

    async def start_session(
        self,
        request: Request,
        api_token: str,
        principal: Principal,
        target: Any,
        *,
        via_page: bool = False,
    ) -> Response:
        """Sign ``principal`` in (its API token kept in a new session) and go to ``target``.

        The operator inbox is for operators and auditors: anyone else gets a 403 page. An
        earlier session of this browser ends first; the session ends at the token's expiry.
        ``via_page``: go on from a page of the inbox rather than by a redirect (after the
        identity provider's redirect, a cross-site navigation, a browser would not send the
        new ``SameSite=Strict`` cookie along a redirect).
        """
        identity, roles = principal.identity, principal.roles
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
        earlier = await self.current(request, touch=False)
        if earlier is not None:  # signing in again (as anyone) ends the earlier session
            await self.sessions.end(earlier)
        session_id, _ = await self.sessions.create(api_token, identity, roles, principal.expires_at)
        home = "queue" if is_operator(roles) else "threads"
        going = safe_next(target) or url(home)
        response: Response = (
            render(request, "signed_in.html", None, target=going, identity=identity)
            if via_page
            else RedirectResponse(going, status_code=303)
        )
        response.set_cookie(
            COOKIE,
            session_id,
            max_age=self.sessions.seconds_left(principal.expires_at),
            httponly=True,
            samesite="strict",
            secure=is_secure(request),
            path=PREFIX,
        )
        response.delete_cookie(LOGIN_COOKIE, path=PREFIX)
        return response

    async def logout(self, request: Request) -> Response:
        """``/logout``: the session ended on the server (a forged form token keeps it)."""
        session = await self.current(request)
        form = await request.form()
        if session is not None:
            if not same_token(form.get("csrf"), session.csrf):
                return refuse(request, session, 403, "forged form token: still signed in")
            await self.sessions.end(session)
        response = RedirectResponse(url("login"), status_code=303)
        response.delete_cookie(COOKIE, path=PREFIX)
        return response

    async def home(self, request: Request) -> Response:
        """``/``: the queue for an operator, the timelines for an auditor, else sign-in."""
        session = await self.current(request, touch=False)
        if session is None:
            return RedirectResponse(url("login"), status_code=303)
        return RedirectResponse(
            url("queue" if is_operator(session.roles) else "threads"), status_code=303
        )


async def current_roles(session: Session) -> Session:
    """``session`` with its token's roles as the server says now (its tokens file, its provider).

    Raises:
        Auth.exceptions.HTTPException: the token is no longer accepted (401: revoked, expired),
            grants no role any more (403), or now names someone other than who signed in (401:
            the session was theirs).
    """
    if not auth_configured():
        return session
    principal = await authenticated_principal(session.token)
    if principal is None:  # the server's auth was switched off under the session: it ends
        raise Auth.exceptions.HTTPException(status_code=401, detail="authentication changed")
    if principal.identity != session.identity:
        raise Auth.exceptions.HTTPException(
            status_code=401,
            detail=(
                f"the token now names {principal.identity!r}, not {session.identity!r}: "
                "sign in again"
            ),
        )
    if principal.roles == session.roles:
        return session
    return replace(session, roles=principal.roles)


@contextlib.asynccontextmanager
async def operator_client(session: Session) -> AsyncIterator[Any]:
    """The API client of ``session``'s operator (their own token), closed on exit."""
    client = queries.api_client(session.token)
    try:
        yield client
    finally:
        await client.aclose()
