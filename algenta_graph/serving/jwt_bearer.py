"""The identity provider's JWTs as bearer tokens: verified, then mapped to an identity and roles.

A bearer token goes to this verifier when it **looks like a JWT** (:func:`looks_like_jwt`: three
dot-separated base64url parts, the first a JSON object naming an ``alg``) and the identity
provider is configured; every other token goes to the tokens file. The tokens file's tokens are
``secrets.token_urlsafe`` strings, which never hold a dot, and a JWT-shaped token is never
looked up in the file, so neither source can accept the other's token: a JWT is accepted only
on the provider's signature, a file token only on its digest.

Checked, in this order, each refusal a :class:`~algenta_graph.errors.BearerTokenRefused` saying
why (401; 403 for a valid token that grants no role here):

1. the header: an ``alg`` of the allow-list (asymmetric only: ``none``, ``HS256`` and every
   shared-secret algorithm are refused before any key is looked at) and a ``kid``;
2. the key: the provider's key ``kid`` (:mod:`algenta_graph.serving.identity_provider`:
   cached, refreshed at most so often for an unknown ``kid``), an asymmetric
   key whose own algorithm is the header's (PyJWT binds them);
3. the signature and the claims, by PyJWT: ``iss`` the configured issuer, ``aud`` one of the
   configured audiences, ``exp`` required and ``nbf`` / ``iat`` honoured, with
   ``ALGENTA_OIDC_LEEWAY_SECONDS`` of clock skew;
4. the identity: the ``ALGENTA_OIDC_IDENTITY_CLAIM`` claim (``sub`` by default), a non-blank
   string (an ``email`` the provider marks unverified is refused);
5. the roles: the values of ``ALGENTA_OIDC_ROLES_CLAIM`` (a claim or a dotted path; a string is
   split on spaces, as ``scope`` is) mapped by ``ALGENTA_OIDC_ROLE_MAP``; none: 403.

The inbox's sign-in with the provider checks its ID token here too (:meth:`JWTVerifier.id_token`:
the same keys and issuer, the inbox's client id as audience, the sign-in's ``nonce``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import re
import threading
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import jwt
from jwt import PyJWK
from jwt.exceptions import (
    DecodeError,
    ExpiredSignatureError,
    ImmatureSignatureError,
    InvalidAlgorithmError,
    InvalidAudienceError,
    InvalidIssuerError,
    InvalidSignatureError,
    InvalidTokenError,
    MissingRequiredClaimError,
)

from algenta_graph.errors import BearerTokenRefused
from algenta_graph.serving.identity_provider import IdentityProvider
from algenta_graph.serving.oidc_settings import (
    ENV_PREFIX,
    ENV_ROLE_MAP,
    ENV_ROLES_CLAIM,
    OIDCSettings,
    oidc_settings,
)
from algenta_graph.serving.roles import OPEN_IDENTITY, Principal

__all__ = ["VERIFIERS", "JWTVerifier", "VerifierSource", "claim_at", "looks_like_jwt"]

_SEGMENT = re.compile(r"^[A-Za-z0-9_-]*$")
_MISSING = object()


def looks_like_jwt(token: str) -> bool:
    """Whether ``token`` is shaped as a signed JWT (JWS compact serialization).

    Three dot-separated base64url parts, the first decoding to a JSON object with an ``alg``.
    Only the shape is read here; nothing in it is trusted.

    >>> looks_like_jwt("eyJhbGciOiJub25lIn0.e30."), looks_like_jwt("k3y_-From-the-file")
    (True, False)
    >>> looks_like_jwt("a.b.c"), looks_like_jwt("eyJhbGciOiJub25lIn0.e30.x.y.z")
    (False, False)
    """
    parts = token.split(".")
    if len(parts) != 3 or not parts[0] or not all(_SEGMENT.match(p) for p in parts):
        return False
    try:
        header = json.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
    except (binascii.Error, ValueError, RecursionError):
        return False
    return isinstance(header, dict) and "alg" in header


def claim_at(claims: Mapping[str, Any], path: str) -> Any:
    """The claim ``path`` names: a claim of that exact name, else a dotted path into objects.

    Returns a sentinel (not ``None``) when absent; :data:`None` is a value a claim may have.

    >>> claim_at({"realm_access": {"roles": ["ops"]}}, "realm_access.roles")
    ['ops']
    >>> claim_at({"https://example.com/roles": ["ops"]}, "https://example.com/roles")
    ['ops']
    """
    if path in claims:
        return claims[path]
    node: Any = claims
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _shown(value: Any, limit: int = 80) -> str:
    """A client-supplied value, quoted and cut short, for a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _when(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            stamp = datetime.fromtimestamp(value, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return _shown(value)
        return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    return _shown(value)


def _refused(detail: str, status: int = 401) -> BearerTokenRefused:
    return BearerTokenRefused(status, detail)


class JWTVerifier:
    """Verifies the provider's JWTs (blocking: keys may be fetched; ``a``-methods in a thread).

    Args:
        settings: the provider, as this server trusts it.
        provider: its published keys (default: fetched as ``settings`` say).
    """

    def __init__(self, settings: OIDCSettings, provider: IdentityProvider | None = None) -> None:
        self.settings = settings
        self.provider = provider or IdentityProvider(settings)

    # -- the signature and the registered claims ----------------------------------------------

    def _key(self, token: str) -> tuple[PyJWK, str, str]:
        """The provider's key for ``token``, its ``alg`` and ``kid`` (the header checked first)."""
        try:
            header = jwt.get_unverified_header(token)
        except DecodeError as exc:
            raise _refused(f"the token is not a well-formed JWT: {exc}") from None
        alg = header.get("alg")
        accepted = ", ".join(self.settings.algorithms)
        if alg not in self.settings.algorithms:
            raise _refused(
                f"the token's algorithm {_shown(alg)} is not accepted: only the identity "
                f"provider's asymmetric signatures are ({accepted})"
            )
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise _refused("the token names no signing key (no 'kid' in its header)")
        key = self.provider.signing_key(kid)
        if key is None:
            raise _refused(
                f"the token's signing key {_shown(kid)} is not among the identity provider's "
                f"keys ({self.provider.keys_url})"
            )
        if key.key_type == "oct" or key.algorithm_name not in self.settings.algorithms:
            raise _refused(
                f"the identity provider's key {_shown(kid)} is not an accepted asymmetric key "
                f"({key.key_type}, {key.algorithm_name}; accepted: {accepted})"
            )
        return key, str(alg), kid

    def claims(self, token: str, audiences: tuple[str, ...]) -> dict[str, Any]:
        """The verified claims of ``token`` for one of ``audiences``.

        Raises:
            BearerTokenRefused: why the token is not accepted (401).
            IdentityProviderError: the provider's keys cannot be read.
        """
        key, alg, kid = self._key(token)
        unverified: dict[str, Any] = {}
        try:
            unverified = jwt.decode(token, options={"verify_signature": False})
            return jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=list(audiences),
                issuer=self.settings.issuer,
                leeway=self.settings.leeway,
                options={"require": ["exp", "iss", "aud"]},
            )
        except InvalidSignatureError:
            raise _refused(
                f"the token's signature does not verify with the identity provider's key "
                f"{_shown(kid)}"
            ) from None
        except InvalidAlgorithmError:
            raise _refused(
                f"the token's algorithm {_shown(alg)} is not its key's ({key.algorithm_name})"
            ) from None
        except ExpiredSignatureError:
            raise _refused(
                f"the token expired at {_when(unverified.get('exp'))} (clock skew allowed: "
                f"{self.settings.leeway} s): get a new one from the identity provider"
            ) from None
        except ImmatureSignatureError:
            at = unverified.get("nbf", unverified.get("iat"))
            raise _refused(
                f"the token is not valid yet: not before {_when(at)} (clock skew allowed: "
                f"{self.settings.leeway} s)"
            ) from None
        except InvalidAudienceError:
            raise _refused(
                f"the token is for {_shown(unverified.get('aud'))}, not for this server "
                f"({', '.join(audiences)})"
            ) from None
        except InvalidIssuerError:
            raise _refused(
                f"the token's issuer {_shown(unverified.get('iss'))} is not the configured "
                f"identity provider {self.settings.issuer!r}"
            ) from None
        except MissingRequiredClaimError as exc:
            raise _refused(f"the token has no {exc.claim!r} claim") from None
        except InvalidTokenError as exc:
            raise _refused(f"the token is refused: {exc}") from None

    # -- who the token is ----------------------------------------------------------------------

    def identity(self, claims: Mapping[str, Any]) -> str:
        """Who verified ``claims`` name (``ALGENTA_OIDC_IDENTITY_CLAIM``)."""
        name = self.settings.identity_claim
        identity = claim_at(claims, name)
        if not isinstance(identity, str) or not identity.strip() or identity != identity.strip():
            raise _refused(f"the token's {name!r} claim does not name who it is")
        if identity == OPEN_IDENTITY:
            raise _refused(f"the identity {OPEN_IDENTITY!r} is reserved for the open server")
        if name == "email" and claims.get("email_verified") is False:
            raise _refused("the token's email is not verified by the identity provider")
        return identity

    def roles(self, claims: Mapping[str, Any]) -> tuple[str, ...]:
        """The roles verified ``claims`` grant (403 when none)."""
        name = self.settings.roles_claim
        value = claim_at(claims, name)
        if value is _MISSING or value is None:
            raise _refused(
                f"the token carries no {name!r} claim ({ENV_ROLES_CLAIM}), so no role here", 403
            )
        listed = value.split() if isinstance(value, str) else value
        values = tuple(v for v in listed if isinstance(v, str)) if isinstance(listed, list) else ()
        roles = self.settings.roles_for(values)
        if not roles:
            raise _refused(
                f"none of the token's {name!r} values ({_shown(list(values))}) grants a role "
                f"here ({ENV_ROLE_MAP})",
                403,
            )
        return roles

    def principal(self, token: str) -> Principal:
        """Who a bearer token for this server's API is, with its roles and its ``exp``.

        Raises:
            BearerTokenRefused: 401 (not accepted) or 403 (accepted, but no role here).
            IdentityProviderError: the provider's keys cannot be read.
        """
        claims = self.claims(token, self.settings.audiences)
        identity = self.identity(claims)
        return Principal(identity, self.roles(claims), float(claims["exp"]))

    async def aprincipal(self, token: str) -> Principal:
        """:meth:`principal`, in a worker thread."""
        return await asyncio.to_thread(self.principal, token)

    def id_token(self, token: str, client_id: str, nonce: str) -> dict[str, Any]:
        """The verified claims of an ID token the provider issued to the inbox for ``nonce``.

        Raises:
            BearerTokenRefused: not the provider's, not for the inbox, or another sign-in's.
            IdentityProviderError: the provider's keys cannot be read.
        """
        claims = self.claims(token, (client_id,))
        if not isinstance(claims.get("nonce"), str) or claims["nonce"] != nonce:
            raise _refused("the ID token is not this sign-in's (its nonce differs)")
        return claims

    async def aid_token(self, token: str, client_id: str, nonce: str) -> dict[str, Any]:
        """:meth:`id_token`, in a worker thread."""
        return await asyncio.to_thread(self.id_token, token, client_id, nonce)


class VerifierSource:
    """The verifier of the identity provider the ``ALGENTA_OIDC_*`` variables name now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[tuple[str, str], ...] | None = None
        self._verifier: JWTVerifier | None = None

    def current(self) -> JWTVerifier | None:
        """The verifier (its keys kept across calls), or ``None`` without an identity provider.

        Raises:
            OIDCConfigError: the variables are malformed (every JWT is refused until fixed).
        """
        key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(ENV_PREFIX)))
        with self._lock:
            if key != self._key or self._verifier is None:
                settings = oidc_settings()
                self._verifier = JWTVerifier(settings) if settings is not None else None
                self._key = key
            return self._verifier


VERIFIERS = VerifierSource()
"""The process's verifier, rebuilt when the ``ALGENTA_OIDC_*`` variables change."""
