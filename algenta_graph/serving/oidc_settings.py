"""The identity provider's settings: the ``ALGENTA_OIDC_*`` environment variables, read and checked.

Setting ``ALGENTA_OIDC_ISSUER`` makes the served graph accept the provider's JWTs as bearer
tokens (:mod:`algenta_graph.serving.jwt_bearer`), next to the tokens file or alone; setting
``ALGENTA_OIDC_CLIENT_ID`` as well lets the operator inbox sign in with the provider
(authorization code with PKCE). Every problem is an :class:`~algenta_graph.errors.OIDCConfigError`
naming the variable: the server does not start, and while the settings stay broken every request
is refused (fail closed). Any ``ALGENTA_OIDC_*`` variable set without the issuer is a problem
too, never a server left open.

This module reads the environment and nothing else (no network): the one place to move into
``config/`` later.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from algenta_graph.errors import OIDCConfigError
from algenta_graph.serving.roles import GATE_ROLES, ROLES, valid_role

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "DEFAULT_IDENTITY_CLAIM",
    "DEFAULT_JWKS_CACHE_SECONDS",
    "DEFAULT_JWKS_REFRESH_SECONDS",
    "DEFAULT_LEEWAY_SECONDS",
    "DEFAULT_ROLES_CLAIM",
    "ENV_ALGORITHMS",
    "ENV_AUDIENCE",
    "ENV_CLIENT_ID",
    "ENV_CLIENT_SECRET",
    "ENV_DISCOVERY_URL",
    "ENV_IDENTITY_CLAIM",
    "ENV_ISSUER",
    "ENV_JWKS_CACHE_SECONDS",
    "ENV_JWKS_REFRESH_SECONDS",
    "ENV_JWKS_URL",
    "ENV_LEEWAY_SECONDS",
    "ENV_PREFIX",
    "ENV_REDIRECT_URL",
    "ENV_ROLES_CLAIM",
    "ENV_ROLE_MAP",
    "ENV_SCOPES",
    "OIDCSettings",
    "check_url",
    "oidc_configured",
    "oidc_settings",
]

ENV_PREFIX = "ALGENTA_OIDC_"
ENV_ISSUER = "ALGENTA_OIDC_ISSUER"
"""The provider's issuer (``iss``), exactly as its tokens carry it; setting it turns JWTs on."""
ENV_AUDIENCE = "ALGENTA_OIDC_AUDIENCE"
"""The audience (``aud``) a token must be for: this server's API (comma-separated: any of them)."""
ENV_JWKS_URL = "ALGENTA_OIDC_JWKS_URL"
"""Where the provider's public keys are (default: the discovery document's ``jwks_uri``)."""
ENV_DISCOVERY_URL = "ALGENTA_OIDC_DISCOVERY_URL"
"""The discovery document (default: ``<issuer>/.well-known/openid-configuration``)."""
ENV_ALGORITHMS = "ALGENTA_OIDC_ALGORITHMS"
"""The signature algorithms accepted (comma-separated, asymmetric only; default: all of them)."""
ENV_IDENTITY_CLAIM = "ALGENTA_OIDC_IDENTITY_CLAIM"
"""The claim naming who the token is (default ``sub``; e.g. ``email``, ``preferred_username``)."""
ENV_ROLES_CLAIM = "ALGENTA_OIDC_ROLES_CLAIM"
"""Where the token's groups or roles are: a claim, or a dotted path (``realm_access.roles``)."""
ENV_ROLE_MAP = "ALGENTA_OIDC_ROLE_MAP"
"""JSON: each value of the roles claim to a role or a list of roles (required)."""
ENV_LEEWAY_SECONDS = "ALGENTA_OIDC_LEEWAY_SECONDS"
"""Clock skew allowed on ``exp``, ``nbf`` and ``iat``, in seconds."""
ENV_JWKS_CACHE_SECONDS = "ALGENTA_OIDC_JWKS_CACHE_SECONDS"
"""How long the fetched keys are used before they are fetched again."""
ENV_JWKS_REFRESH_SECONDS = "ALGENTA_OIDC_JWKS_REFRESH_SECONDS"
"""The least time between two fetches of the keys that an unknown key id (``kid``) causes."""
ENV_CLIENT_ID = "ALGENTA_OIDC_CLIENT_ID"
"""The inbox's client id at the provider: the inbox then signs in with the provider."""
ENV_CLIENT_SECRET = "ALGENTA_OIDC_CLIENT_SECRET"
"""The inbox's client secret (a confidential client; unset: a public client, PKCE alone)."""
ENV_REDIRECT_URL = "ALGENTA_OIDC_REDIRECT_URL"
"""The inbox's callback as registered at the provider (default: the URL the browser used)."""
ENV_SCOPES = "ALGENTA_OIDC_SCOPES"
"""The scopes the inbox asks for (space- or comma-separated; ``openid`` is always asked)."""

ASYMMETRIC_ALGORITHMS: tuple[str, ...] = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
"""The only algorithms a token may be signed with (never ``none``, never a shared secret)."""
DEFAULT_IDENTITY_CLAIM = "sub"
DEFAULT_ROLES_CLAIM = "groups"
DEFAULT_LEEWAY_SECONDS = 30
DEFAULT_JWKS_CACHE_SECONDS = 300
DEFAULT_JWKS_REFRESH_SECONDS = 30
_LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class OIDCSettings:
    """The identity provider, as this server trusts it."""

    issuer: str
    audiences: tuple[str, ...]
    discovery_url: str
    jwks_url: str | None
    algorithms: tuple[str, ...]
    identity_claim: str
    roles_claim: str
    role_map: tuple[tuple[str, tuple[str, ...]], ...]
    """Each value of the roles claim and the roles it grants."""
    leeway: int
    jwks_cache_seconds: int
    jwks_refresh_seconds: int
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    redirect_url: str | None = None
    scopes: tuple[str, ...] = ("openid",)

    @property
    def sign_in_with_provider(self) -> bool:
        """Whether the inbox signs in with the provider (a client id is configured)."""
        return self.client_id is not None

    def roles_for(self, values: tuple[str, ...]) -> tuple[str, ...]:
        """The roles the claim's ``values`` grant, in the map's order, each once."""
        granted = dict(self.role_map)
        return tuple(dict.fromkeys(r for v in values for r in granted.get(v, ())))


def oidc_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether any ``ALGENTA_OIDC_*`` variable is set (then authentication is required).

    >>> oidc_configured({"ALGENTA_OIDC_ISSUER": "https://id.example"}), oidc_configured({})
    (True, False)
    """
    env = os.environ if environ is None else environ
    return any(k.startswith(ENV_PREFIX) and str(v).strip() for k, v in env.items())


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(name: str, value: str) -> str:
    """``value`` if it is an ``https://`` URL (``http://`` only on this machine's loopback)."""
    parts = urlsplit(value)
    host = parts.hostname or ""
    if not host or parts.scheme not in ("https", "http"):
        raise OIDCConfigError(f"{name}={value!r}: expected an https:// URL")
    if parts.scheme == "http" and not _is_loopback(host):
        raise OIDCConfigError(
            f"{name}={value!r}: an identity provider is reached over https:// (plain http:// "
            "only on this machine's loopback, for a local test provider)"
        )
    return value


def _seconds(env: Mapping[str, str], name: str, default: int, *, least: int) -> int:
    raw = str(env.get(name) or "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < least:
        raise OIDCConfigError(f"{name}={raw!r}: expected a whole number of seconds >= {least}")
    return int(raw)


def _words(raw: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(w for w in raw.replace(",", " ").split() if w))


def _role_map(raw: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    example = '{"algenta-operators": "operator", "risk-team": ["operator:risk_floor"]}'
    if not raw.strip():
        raise OIDCConfigError(
            f"{ENV_ROLE_MAP} is not set: which values of the roles claim grant which roles? "
            f"e.g. {example}"
        )
    try:
        decoded: Any = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OIDCConfigError(f"{ENV_ROLE_MAP}: not JSON ({exc.msg}); e.g. {example}") from None
    if not isinstance(decoded, dict) or not decoded:
        raise OIDCConfigError(f"{ENV_ROLE_MAP}: expected a non-empty JSON object, e.g. {example}")
    valid = ", ".join((*ROLES, *GATE_ROLES))
    mapped: list[tuple[str, tuple[str, ...]]] = []
    for value, roles in decoded.items():
        listed = [roles] if isinstance(roles, str) else roles
        if not value.strip() or not isinstance(listed, list) or not listed:
            raise OIDCConfigError(
                f"{ENV_ROLE_MAP}[{value!r}]: expected a role or a non-empty list of roles"
            )
        for role in listed:
            if not valid_role(role):
                raise OIDCConfigError(
                    f"{ENV_ROLE_MAP}[{value!r}]: unknown role {role!r}; valid roles: {valid}"
                )
        mapped.append((value, tuple(dict.fromkeys(listed))))
    return tuple(mapped)


def _algorithms(raw: str) -> tuple[str, ...]:
    if not raw.strip():
        return ASYMMETRIC_ALGORITHMS
    chosen = _words(raw)
    refused = [a for a in chosen if a not in ASYMMETRIC_ALGORITHMS]
    if refused:
        raise OIDCConfigError(
            f"{ENV_ALGORITHMS}: {', '.join(refused)} refused: only asymmetric signatures are "
            f"accepted ({', '.join(ASYMMETRIC_ALGORITHMS)}), never 'none' or a shared secret"
        )
    return chosen


def oidc_settings(environ: Mapping[str, str] | None = None) -> OIDCSettings | None:
    """The identity provider's settings, or ``None`` when no ``ALGENTA_OIDC_*`` variable is set.

    Raises:
        OIDCConfigError: a variable is missing or malformed (the message names it).

    >>> s = oidc_settings({"ALGENTA_OIDC_ISSUER": "https://id.example/realm",
    ...     "ALGENTA_OIDC_AUDIENCE": "algenta", "ALGENTA_OIDC_ROLE_MAP": '{"ops": "operator"}'})
    >>> s.discovery_url, s.roles_for(("ops", "other"))
    ('https://id.example/realm/.well-known/openid-configuration', ('operator',))
    """
    env = os.environ if environ is None else environ
    if not oidc_configured(env):
        return None

    def get(name: str) -> str:
        return str(env.get(name) or "").strip()

    issuer = get(ENV_ISSUER)
    if not issuer:
        named = sorted(k for k, v in env.items() if k.startswith(ENV_PREFIX) and str(v).strip())
        raise OIDCConfigError(
            f"{', '.join(named)} set but {ENV_ISSUER} is not: set the identity provider's issuer "
            f"(or unset every {ENV_PREFIX}* variable)"
        )
    check_url(ENV_ISSUER, issuer)
    audiences = _words(get(ENV_AUDIENCE))
    if not audiences:
        raise OIDCConfigError(
            f"{ENV_AUDIENCE} is not set: a token must be for this server (its 'aud'), or a token "
            "the provider issued to any other application would be accepted"
        )
    if get(ENV_CLIENT_SECRET) and not get(ENV_CLIENT_ID):
        raise OIDCConfigError(
            f"{ENV_CLIENT_SECRET} is set but {ENV_CLIENT_ID} is not: whose secret is it?"
        )
    discovery = get(ENV_DISCOVERY_URL) or issuer.rstrip("/") + "/.well-known/openid-configuration"
    jwks = get(ENV_JWKS_URL) or None
    redirect = get(ENV_REDIRECT_URL) or None
    scopes = _words(get(ENV_SCOPES))
    return OIDCSettings(
        issuer=issuer,
        audiences=audiences,
        discovery_url=check_url(ENV_DISCOVERY_URL, discovery),
        jwks_url=check_url(ENV_JWKS_URL, jwks) if jwks else None,
        algorithms=_algorithms(get(ENV_ALGORITHMS)),
        identity_claim=get(ENV_IDENTITY_CLAIM) or DEFAULT_IDENTITY_CLAIM,
        roles_claim=get(ENV_ROLES_CLAIM) or DEFAULT_ROLES_CLAIM,
        role_map=_role_map(get(ENV_ROLE_MAP)),
        leeway=_seconds(env, ENV_LEEWAY_SECONDS, DEFAULT_LEEWAY_SECONDS, least=0),
        jwks_cache_seconds=_seconds(
            env, ENV_JWKS_CACHE_SECONDS, DEFAULT_JWKS_CACHE_SECONDS, least=1
        ),
        jwks_refresh_seconds=_seconds(
            env, ENV_JWKS_REFRESH_SECONDS, DEFAULT_JWKS_REFRESH_SECONDS, least=0
        ),
        client_id=get(ENV_CLIENT_ID) or None,
        client_secret=get(ENV_CLIENT_SECRET) or None,
        redirect_url=check_url(ENV_REDIRECT_URL, redirect) if redirect else None,
        scopes=tuple(dict.fromkeys(("openid", *scopes))),
    )
