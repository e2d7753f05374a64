"""Signing in to the inbox with the identity provider: the OpenID Connect authorization code flow.

Offered on the sign-in page when ``ALGENTA_OIDC_CLIENT_ID`` is set (the provider's discovery
document names its endpoints; :mod:`algenta_graph.serving.identity_provider`):

1. ``/inbox/oidc/start`` draws a ``state``, a ``nonce`` and a PKCE code verifier (``S256``),
   keeps them (with the redirect URI and the page to go to afterwards) in a short-lived cookie
   signed like the sign-in form's (``ALGENTA_INBOX_SECRET``, ``HttpOnly``, ``SameSite=Lax`` so
   the provider's redirect back carries it), and sends the browser to the provider's
   ``authorization_endpoint``.
2. ``/inbox/oidc/callback`` takes the provider's ``code`` only with the ``state`` of that
   cookie (compared in constant time; the cookie is then spent, so a replayed callback is
   refused), exchanges it at the ``token_endpoint`` with the code verifier (and the client
   secret, HTTP Basic, for a confidential client), checks the ID token (the provider's keys,
   its issuer, the inbox's client id as audience, the ``nonce``), then checks the **access
   token** exactly as the API will on every page (:func:`~algenta_graph.serving.auth.
   authenticated_principal`): its audience is the API's, its identity and roles come from its
   claims, and it must name the ID token's subject. The inbox keeps that access token in the
   session (:meth:`~algenta_graph.inbox.signin.SignIn.start_session`), which ends at its
   ``exp``; no refresh token is asked for, so a later sign-in is a new session.

Every refusal is the sign-in page with why (the provider's ``error``, a state that is not this
browser's, the provider unreachable, a token refused). Without a client id the sign-in page
takes a pasted token (the provider's JWT or a tokens-file token) instead.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
from itsdangerous import BadSignature, URLSafeTimedSerializer
from langgraph_sdk import Auth
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from algenta_graph.errors import BearerTokenRefused, IdentityProviderError, OIDCConfigError
from algenta_graph.inbox.form_tokens import LoginForms
from algenta_graph.inbox.rendering import PREFIX, is_secure, safe_next, url
from algenta_graph.inbox.signin import SignIn
from algenta_graph.inbox.startup import startup_problem
from algenta_graph.serving.auth import authenticated_principal
from algenta_graph.serving.jwt_bearer import VERIFIERS, JWTVerifier, looks_like_jwt

__all__ = ["FLOW_COOKIE", "FLOW_SECONDS", "ProviderSignIn", "code_challenge"]

FLOW_COOKIE = "algenta_inbox_oidc"
"""The cookie holding a sign-in in progress (signed; spent by the callback)."""
FLOW_SECONDS = 600
"""How long a sign-in at the provider may take."""
_TIMEOUT = 10.0


def code_challenge(verifier: str) -> str:
    """The PKCE ``S256`` challenge of ``verifier`` (RFC 7636: base64url of its SHA-256).

    >>> code_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")
    'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM'
    """
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class ProviderSignIn:
    """The two routes of a sign-in with the identity provider.

    Args:
        sign: the inbox's sign-in (its pages, and the session a sign-in starts).
        login_forms: whose key signs the flow's cookie.
    """

    def __init__(self, sign: SignIn, login_forms: LoginForms) -> None:
        self.sign = sign
        self._flows = URLSafeTimedSerializer(login_forms.key, salt="algenta-inbox-oidc")

    def _verifier(self) -> JWTVerifier:
        """The provider's verifier, if the inbox signs in with it (else ``LookupError``)."""
        verifier = VERIFIERS.current()
        if verifier is None or verifier.settings.client_id is None:
            raise LookupError(
                "the inbox does not sign in with an identity provider here (no "
                "ALGENTA_OIDC_CLIENT_ID): paste your token instead"
            )
        return verifier

    def _refused(self, request: Request, status: int, why: str) -> Response:
        response = self.sign.login_page(request, status, f"sign-in refused: {why}")
        response.delete_cookie(FLOW_COOKIE, path=PREFIX)
        return response

    async def start(self, request: Request) -> Response:
        """``/oidc/start``: to the provider's authorization endpoint, the flow kept in a cookie."""
        problem = startup_problem()
        if problem is not None:
            return PlainTextResponse(problem, status_code=503)
        try:
            verifier = self._verifier()
            endpoint = await asyncio.to_thread(verifier.provider.endpoint, "authorization_endpoint")
        except (LookupError, OIDCConfigError, IdentityProviderError) as exc:
            return self._refused(request, 503, str(exc))
        settings = verifier.settings
        redirect_uri = settings.redirect_url or (
            f"{'https' if is_secure(request) else 'http'}://{request.url.netloc}"
            f"{url('oidc', 'callback')}"
        )
        flow = {
            "state": secrets.token_urlsafe(32),
            "nonce": secrets.token_urlsafe(32),
            "verifier": secrets.token_urlsafe(64),
            "redirect_uri": redirect_uri,
            "next": safe_next(request.query_params.get("next")),
        }
        query = urlencode(
            {
                "response_type": "code",
                "client_id": settings.client_id,
                "redirect_uri": redirect_uri,
                "scope": " ".join(settings.scopes),
                "state": flow["state"],
                "nonce": flow["nonce"],
                "code_challenge": code_challenge(str(flow["verifier"])),
                "code_challenge_method": "S256",
            }
        )
        separator = "&" if "?" in endpoint else "?"
        response = RedirectResponse(f"{endpoint}{separator}{query}", status_code=303)
        response.set_cookie(
            FLOW_COOKIE,
            self._flows.dumps(flow),
            max_age=FLOW_SECONDS,
            httponly=True,
            # the provider's redirect back is a top-level navigation from another site
            samesite="lax",
            secure=is_secure(request),
            path=PREFIX,
        )
        return response

    def _flow(self, request: Request) -> dict[str, Any] | None:
        cookie = request.cookies.get(FLOW_COOKIE)
        if not cookie:
            return None
        try:
            flow = self._flows.loads(cookie, max_age=FLOW_SECONDS)
        except BadSignature:  # (expired too)
            return None
        return flow if isinstance(flow, dict) else None

    async def callback(self, request: Request) -> Response:
        """``/oidc/callback``: the provider's answer, checked, then the session."""
        problem = startup_problem()
        if problem is not None:
            return PlainTextResponse(problem, status_code=503)
        params = request.query_params
        if params.get("error"):
            described = params.get("error_description")
            return self._refused(
                request,
                401,
                f"the identity provider answered {params['error']!r}"
                + (f": {described}" if described else ""),
            )
        flow = self._flow(request)
        state = params.get("state") or ""
        if flow is None or not hmac.compare_digest(state.encode(), str(flow["state"]).encode()):
            return self._refused(
                request,
                400,
                "this sign-in was not started in this browser, has expired, or was already "
                "used: start again",
            )
        code = params.get("code")
        if not code:
            return self._refused(request, 400, "the identity provider sent no code")
        try:
            verifier = self._verifier()
            tokens = await _exchange(verifier, str(code), flow)
            id_claims = await verifier.aid_token(
                tokens["id_token"], str(verifier.settings.client_id), str(flow["nonce"])
            )
        except (LookupError, OIDCConfigError, IdentityProviderError) as exc:
            return self._refused(request, 502, str(exc))
        except BearerTokenRefused as exc:
            return self._refused(request, 401, f"the ID token: {exc.detail}")
        access = tokens["access_token"]
        if not looks_like_jwt(access):
            return self._refused(
                request,
                502,
                "the identity provider's access token is not a JWT: have it issue JWT access "
                "tokens for this API's audience (ALGENTA_OIDC_AUDIENCE)",
            )
        try:
            principal = await authenticated_principal(access)  # the API's own check
        except Auth.exceptions.HTTPException as exc:
            return self._refused(request, exc.status_code, f"the access token: {exc.detail}")
        if principal is None:
            return self._refused(request, 503, "the server's authentication changed: retry")
        # (verified a line above: only read here to bind it to the ID token's subject)
        subject = jwt.decode(access, options={"verify_signature": False}).get("sub")
        if subject != id_claims.get("sub"):
            return self._refused(
                request, 401, "the access token and the ID token name different subjects"
            )
        response = await self.sign.start_session(
            request, access, principal, flow.get("next"), via_page=True
        )
        response.delete_cookie(FLOW_COOKIE, path=PREFIX)
        return response


async def _exchange(verifier: JWTVerifier, code: str, flow: dict[str, Any]) -> dict[str, str]:
    """The provider's tokens for ``code`` (its token endpoint, with the PKCE verifier)."""
    settings = verifier.settings
    endpoint = await asyncio.to_thread(verifier.provider.endpoint, "token_endpoint")
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": str(flow["redirect_uri"]),
        "code_verifier": str(flow["verifier"]),
    }
    auth: httpx.Auth | None = None
    if settings.client_secret is not None:  # client_secret_basic
        auth = httpx.BasicAuth(str(settings.client_id), settings.client_secret)
    else:  # a public client: PKCE alone
        form["client_id"] = str(settings.client_id)
    try:
        async with httpx.AsyncClient(timeout=_TIMEOUT, follow_redirects=False) as client:
            response = await client.post(
                endpoint, data=form, auth=auth if auth is not None else httpx.USE_CLIENT_DEFAULT
            )
    except httpx.HTTPError as exc:
        raise IdentityProviderError(
            f"the token endpoint {endpoint} cannot be reached: {exc}"
        ) from None
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code != 200 or not isinstance(body, dict):
        error = body.get("error") if isinstance(body, dict) else None
        raise IdentityProviderError(
            f"the token endpoint {endpoint} refused the code: HTTP {response.status_code}"
            + (f" ({error})" if error else "")
        )
    missing = [k for k in ("id_token", "access_token") if not isinstance(body.get(k), str)]
    if missing:
        raise IdentityProviderError(
            f"the token endpoint {endpoint} sent no {' and no '.join(missing)}"
        )
    return {"id_token": body["id_token"], "access_token": body["access_token"]}
