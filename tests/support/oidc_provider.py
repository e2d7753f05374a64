"""A small, real OpenID Connect provider the tests serve themselves, and the tokens it signs.

A Starlette app on a free port (uvicorn in a thread, :class:`algenta_graph._serve.BackgroundServer`)
with what a provider publishes: the discovery document, the keys (JWKS: its fetches counted and
timed, its keys rotated by the test), an authorization endpoint (the authorization-code flow
with PKCE ``S256``, ``state`` and ``nonce``; it signs in whoever the test says is at the
keyboard, :attr:`TestProvider.user`) and a token endpoint issuing a signed ID token and a JWT
access token for the API's audience. The keys are made here with ``cryptography`` (RSA and EC);
the tokens are signed by PyJWT. The attacks a test needs (``alg=none``, an HMAC signed with the
public key's bytes, another key under the provider's ``kid``) are built here too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from algenta_graph._serve import BackgroundServer

API_AUDIENCE = "algenta-api"
CLIENT_ID = "algenta-inbox"
CLIENT_SECRET = "inbox-client-secret"
ROLE_MAP = {
    "algenta-agents": "agent",
    "algenta-operators": "operator",
    "risk-team": "operator:risk_floor",
    "algenta-auditors": "auditor",
}


@dataclass(frozen=True)
class SigningKey:
    """A key pair the provider signs with, and its public JWK."""

    kid: str
    alg: str
    private: Any = field(repr=False)

    @property
    def public_jwk(self) -> dict[str, Any]:
        algorithm = jwt.get_algorithm_by_name(self.alg)
        jwk = json.loads(algorithm.to_jwk(self.private.public_key()))
        return {**jwk, "kid": self.kid, "alg": self.alg, "use": "sig"}

    @property
    def public_pem(self) -> bytes:
        return bytes(
            self.private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )


def rsa_key(kid: str) -> SigningKey:
    return SigningKey(kid, "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))


def ec_key(kid: str) -> SigningKey:
    return SigningKey(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned_token(claims: dict[str, Any], kid: str) -> str:
    """An ``alg=none`` token (no signature), as an attacker sends it."""
    header = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": kid}).encode())
    return f"{header}.{_b64(json.dumps(claims).encode())}."


def hmac_with_public_key(claims: dict[str, Any], key: SigningKey) -> str:
    """An ``HS256`` token whose HMAC secret is the provider's public key (PEM): the
    algorithm-confusion attack. PyJWT refuses to make one, so it is made by hand."""
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": key.kid}).encode())
    body = _b64(json.dumps(claims).encode())
    signature = hmac.new(key.public_pem, f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{_b64(signature)}"


class TestProvider:
    """The provider, serving on ``127.0.0.1`` until :meth:`stop`.

    Args:
        keys: the keys it publishes and signs with (the first signs by default).
        redirect_uris: the inbox callbacks registered for :data:`CLIENT_ID` (any when empty).
    """

    __test__ = False  # (not a test class)

    def __init__(self, keys: list[SigningKey], redirect_uris: tuple[str, ...] = ()) -> None:
        self._lock = threading.Lock()
        self.published: list[SigningKey] = list(keys)
        self.signer = keys[0]
        self.redirect_uris = redirect_uris
        self.jwks_fetches: list[float] = []
        self.authorize_requests: list[dict[str, str]] = []
        self.token_requests: list[dict[str, str]] = []
        self.user: dict[str, Any] = {"sub": "olivia", "groups": ["algenta-operators"]}
        """Who is at the keyboard when the authorization endpoint is asked (the access token's
        claims)."""
        self.id_token_overrides: dict[str, Any] = {}
        """Claims of the next ID tokens changed by the test (a wrong ``nonce``, ``aud``...)."""
        self.redirects: list[str] = []
        """Every redirect back to the client (its code and state), in order."""
        self.access_seconds = 3600
        self._codes: dict[str, dict[str, Any]] = {}
        app = Starlette(
            routes=[
                Route("/.well-known/openid-configuration", self._discovery),
                Route("/jwks", self._jwks),
                Route("/authorize", self._authorize),
                Route("/token", self._token, methods=["POST"]),
            ]
        )
        self._server = BackgroundServer(app, name="oidc-provider")
        self.issuer = f"http://127.0.0.1:{self._server.port}"

    def start(self) -> TestProvider:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> TestProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- tokens --------------------------------------------------------------------------------

    def claims(self, **overrides: Any) -> dict[str, Any]:
        """An access token's claims for the API (``None`` drops a claim)."""
        now = int(time.time())
        base: dict[str, Any] = {
            "iss": self.issuer,
            "aud": API_AUDIENCE,
            "sub": "carol",
            "groups": ["algenta-agents"],
            "iat": now,
            "exp": now + 3600,
            "jti": uuid.uuid4().hex,
        }
        base.update(overrides)
        return {k: v for k, v in base.items() if v is not None}

    def mint(self, key: SigningKey | None = None, *, kid: str | None = None, **claims: Any) -> str:
        """A token signed with ``key`` (default: the provider's signer) under ``kid``."""
        key = key or self.signer
        return jwt.encode(
            self.claims(**claims),
            key.private,
            algorithm=key.alg,
            headers={"kid": kid if kid is not None else key.kid, "typ": "JWT"},
        )

    def rotate(self, keys: list[SigningKey]) -> None:
        """Publish ``keys`` instead (the first signs from now on)."""
        with self._lock:
            self.published = list(keys)
            self.signer = keys[0]

    # -- endpoints -----------------------------------------------------------------------------

    async def _discovery(self, request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/authorize",
                "token_endpoint": f"{self.issuer}/token",
                "jwks_uri": f"{self.issuer}/jwks",
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256", "ES256"],
                "code_challenge_methods_supported": ["S256"],
            }
        )

    async def _jwks(self, request: Request) -> Response:
        with self._lock:
            self.jwks_fetches.append(time.monotonic())
            keys = [k.public_jwk for k in self.published]
        return JSONResponse({"keys": keys})

    async def _authorize(self, request: Request) -> Response:
        q = dict(request.query_params)
        self.authorize_requests.append(q)
        problems = [
            name
            for name, ok in (
                ("response_type", q.get("response_type") == "code"),
                ("client_id", q.get("client_id") == CLIENT_ID),
                ("redirect_uri", bool(q.get("redirect_uri"))),
                ("state", bool(q.get("state"))),
                ("nonce", bool(q.get("nonce"))),
                ("code_challenge", bool(q.get("code_challenge"))),
                ("code_challenge_method", q.get("code_challenge_method") == "S256"),
                ("scope", "openid" in q.get("scope", "").split()),
            )
            if not ok
        ]
        if self.redirect_uris and q.get("redirect_uri") not in self.redirect_uris:
            problems.append("redirect_uri (not registered)")
        if problems:
            return JSONResponse({"error": "invalid_request", "bad": problems}, status_code=400)
        code = secrets.token_urlsafe(24)
        self._codes[code] = {**q, "user": dict(self.user)}
        target = q["redirect_uri"] + "?" + urlencode({"code": code, "state": q["state"]})
        self.redirects.append(target)
        return RedirectResponse(target, status_code=302)

    async def _token(self, request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        self.token_requests.append(form)
        basic = request.headers.get("authorization", "")
        expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        if basic != expected:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        grant = self._codes.pop(form.get("code", ""), None)  # one use
        if grant is None or form.get("grant_type") != "authorization_code":
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        verifier = form.get("code_verifier", "")
        challenge = _b64(hashlib.sha256(verifier.encode()).digest())
        if challenge != grant["code_challenge"]:
            return JSONResponse({"error": "invalid_grant", "why": "PKCE"}, status_code=400)
        if form.get("redirect_uri") != grant["redirect_uri"]:
            return JSONResponse({"error": "invalid_grant", "why": "redirect_uri"}, status_code=400)
        user = grant["user"]
        now = int(time.time())
        access = self.mint(**user, exp=now + self.access_seconds)
        id_token = jwt.encode(
            self.claims(
                **{
                    "sub": user["sub"],
                    "aud": CLIENT_ID,
                    "nonce": grant["nonce"],
                    "groups": None,
                    "exp": now + self.access_seconds,
                    **self.id_token_overrides,
                }
            ),
            self.signer.private,
            algorithm=self.signer.alg,
            headers={"kid": self.signer.kid},
        )
        return JSONResponse(
            {
                "access_token": access,
                "id_token": id_token,
                "token_type": "Bearer",
                "expires_in": self.access_seconds,
            }
        )


def hostile_tokens(provider: TestProvider) -> dict[str, tuple[str, int, str]]:
    """Forged, foreign and stale tokens against ``provider``'s server: ``{what: (token, the
    status it must get, what its refusal must say)}``, each for an operator (sub ``olivia``)."""
    now = int(time.time())
    signer = provider.signer
    olivia: dict[str, Any] = {"sub": "olivia", "groups": ["algenta-operators"]}
    # another key pair of the same kind, under the provider's kid
    stranger = (rsa_key if signer.alg == "RS256" else ec_key)(signer.kid)
    return {
        "expired": (provider.mint(exp=now - 3600), 401, "the token expired at "),
        "not yet valid": (provider.mint(nbf=now + 3600), 401, "the token is not valid yet"),
        "wrong audience": (
            provider.mint(aud="another-app", **olivia),
            401,
            "the token is for 'another-app', not for this server (algenta-api)",
        ),
        "wrong issuer": (
            provider.mint(iss="https://evil.example", **olivia),
            401,
            "the token's issuer 'https://evil.example' is not the configured identity provider",
        ),
        "unknown kid": (
            provider.mint(kid="k-unknown", **olivia),
            401,
            "the token's signing key 'k-unknown' is not among the identity provider's keys",
        ),
        "alg=none": (
            unsigned_token(provider.claims(**olivia), signer.kid),
            401,
            "the token's algorithm 'none' is not accepted",
        ),
        "HS256 signed with the public key": (
            hmac_with_public_key(provider.claims(**olivia), signer),
            401,
            "the token's algorithm 'HS256' is not accepted",
        ),
        "another key under the provider's kid": (
            provider.mint(stranger, **olivia),
            401,
            f"the token's signature does not verify with the identity provider's key "
            f"'{signer.kid}'",
        ),
        "no roles claim": (
            provider.mint(groups=None),
            403,
            "the token carries no 'groups' claim",
        ),
    }


def oidc_env(provider: TestProvider, **more: str) -> dict[str, str]:
    """The ``ALGENTA_OIDC_*`` settings of a server trusting ``provider``."""
    return {
        "ALGENTA_OIDC_ISSUER": provider.issuer,
        "ALGENTA_OIDC_AUDIENCE": API_AUDIENCE,
        "ALGENTA_OIDC_ROLES_CLAIM": "groups",
        "ALGENTA_OIDC_ROLE_MAP": json.dumps(ROLE_MAP),
        **more,
    }
