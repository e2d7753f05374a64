"""The identity provider's JWTs as bearer tokens, in process, against a real provider over HTTP.

The provider is the tests' own (``tests/support/oidc_provider.py``: a Starlette app on a free
port, keys made with ``cryptography``, its JWKS fetches counted). The served graph's
``authenticate`` is called as the LangGraph server calls it, with the tokens file and the
provider configured at once. ``tests/served/test_identity_provider.py`` drives the same through
``langgraph dev``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from oidc_provider import TestProvider, ec_key, hostile_tokens, oidc_env, rsa_key, unsigned_token
from served_support import write_auth_file

from algenta_graph.errors import BearerTokenRefused, OIDCConfigError
from algenta_graph.serving.jwt_bearer import JWTVerifier, looks_like_jwt
from algenta_graph.serving.oidc_settings import oidc_settings
from algenta_graph.serving.tokens import ENV_AUTH_FILE, TokenSource, token_digest


@pytest.fixture(scope="module")
def provider() -> Iterator[TestProvider]:
    with TestProvider([rsa_key("k1")]) as served:
        yield served


def _verifier(provider: TestProvider, **env: str) -> JWTVerifier:
    settings = oidc_settings(oidc_env(provider, **env))
    assert settings is not None
    return JWTVerifier(settings)


def _refusal(verifier: JWTVerifier, token: str) -> tuple[int, str]:
    with pytest.raises(BearerTokenRefused) as caught:
        verifier.principal(token)
    return caught.value.status, caught.value.detail


def test_a_good_token_names_its_identity_roles_and_expiry(provider: TestProvider) -> None:
    verifier = _verifier(provider)
    token = provider.mint(sub="olivia", groups=["algenta-operators", "unmapped", 7], exp=2**31)
    principal = verifier.principal(token)
    assert (principal.identity, principal.roles, principal.expires_at) == (
        "olivia",
        ("operator",),
        float(2**31),
    )
    # a dotted claim path, a space-separated string, and another identity claim
    nested = _verifier(
        provider,
        ALGENTA_OIDC_ROLES_CLAIM="realm_access.roles",
        ALGENTA_OIDC_IDENTITY_CLAIM="email",
    )
    token = provider.mint(
        groups=None,
        realm_access={"roles": "risk-team algenta-auditors"},
        email="gus@example.com",
        email_verified=True,
    )
    principal = nested.principal(token)
    assert (principal.identity, principal.roles) == (
        "gus@example.com",
        ("operator:risk_floor", "auditor"),
    )
    unverified = provider.mint(email="gus@example.com", email_verified=False)
    assert _refusal(nested, unverified) == (
        401,
        "the token's email is not verified by the identity provider",
    )


def test_every_forged_foreign_or_stale_token_is_refused_saying_why(
    provider: TestProvider,
) -> None:
    verifier = _verifier(provider)
    attempts = {
        **hostile_tokens(provider),
        "no kid": (provider.mint(kid=""), 401, "the token names no signing key"),
        "no exp": (provider.mint(exp=None), 401, "the token has no 'exp' claim"),
        "no identity": (provider.mint(sub=None), 401, "the token's 'sub' claim does not name"),
        "no mapped role": (
            provider.mint(groups=["finance"]),
            403,
            "none of the token's 'groups' values (['finance']) grants a role here",
        ),
    }
    for name, (token, status, needle) in attempts.items():
        assert looks_like_jwt(token), name
        got_status, detail = _refusal(verifier, token)
        assert (got_status, needle in detail) == (status, True), (name, detail)
    # an EC key of another algorithm than the token's header says is refused by PyJWT's binding
    ec_provider_token = provider.mint(ec_key("k1"))
    status, detail = _refusal(verifier, ec_provider_token)
    assert status == 401 and "algorithm 'ES256' is not its key's (RS256)" in detail, detail
    print(f"FIGURE jwt refusals in process: {len(attempts) + 1} tokens refused, 0 accepted")


def test_a_rotated_key_is_taken_after_a_refresh_and_a_removed_key_refused() -> None:
    old, new = rsa_key("old"), ec_key("new")
    with TestProvider([old]) as provider:
        # refreshes allowed at once (no cool-down): the rotation is seen on the next token
        verifier = _verifier(provider, ALGENTA_OIDC_JWKS_REFRESH_SECONDS="0")
        assert verifier.principal(provider.mint()).identity == "carol"
        assert verifier.principal(provider.mint()).identity == "carol"
        assert len(provider.jwks_fetches) == 1  # kept, not fetched per token
        provider.rotate([new])
        assert verifier.principal(provider.mint(new)).roles == ("agent",)
        assert len(provider.jwks_fetches) == 2  # the unknown kid fetched the new set
        status, detail = _refusal(verifier, provider.mint(old))
        assert status == 401 and "'old' is not among the identity provider's keys" in detail


def test_unknown_key_ids_refresh_the_keys_at_most_once_per_cool_down() -> None:
    with TestProvider([rsa_key("k1")]) as provider:
        verifier = _verifier(provider, ALGENTA_OIDC_JWKS_REFRESH_SECONDS="3600")
        assert verifier.principal(provider.mint()).identity == "carol"
        made_up = [provider.mint(kid=f"made-up-{i}") for i in range(50)]
        refused = sum(_refusal(verifier, token)[0] == 401 for token in made_up)
        # within the cool-down of the first fetch, no made-up kid fetches the keys again
        assert (refused, len(provider.jwks_fetches)) == (50, 1)
        print(f"FIGURE jwks refresh limit: {refused} made-up kids refused, 1 JWKS fetch")


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"ALGENTA_OIDC_AUDIENCE": ""}, "ALGENTA_OIDC_AUDIENCE is not set"),
        ({"ALGENTA_OIDC_ISSUER": ""}, "set but ALGENTA_OIDC_ISSUER is not"),
        ({"ALGENTA_OIDC_ROLE_MAP": ""}, "ALGENTA_OIDC_ROLE_MAP is not set"),
        ({"ALGENTA_OIDC_ROLE_MAP": "{x"}, "ALGENTA_OIDC_ROLE_MAP: not JSON"),
        ({"ALGENTA_OIDC_ROLE_MAP": '{"g": "admin"}'}, "unknown role 'admin'"),
        ({"ALGENTA_OIDC_ROLE_MAP": '{"g": []}'}, "a role or a non-empty list of roles"),
        ({"ALGENTA_OIDC_ALGORITHMS": "RS256,HS256"}, "HS256 refused: only asymmetric"),
        ({"ALGENTA_OIDC_ALGORITHMS": "none"}, "none refused"),
        ({"ALGENTA_OIDC_ISSUER": "http://idp.example"}, "reached over https://"),
        ({"ALGENTA_OIDC_JWKS_URL": "file:///etc/passwd"}, "expected an https:// URL"),
        ({"ALGENTA_OIDC_LEEWAY_SECONDS": "-1"}, "ALGENTA_OIDC_LEEWAY_SECONDS='-1'"),
        ({"ALGENTA_OIDC_JWKS_CACHE_SECONDS": "0"}, "ALGENTA_OIDC_JWKS_CACHE_SECONDS='0'"),
        ({"ALGENTA_OIDC_CLIENT_SECRET": "s"}, "ALGENTA_OIDC_CLIENT_SECRET is set but"),
    ],
)
def test_malformed_settings_are_named(
    provider: TestProvider, env: dict[str, str], needle: str
) -> None:
    with pytest.raises(OIDCConfigError) as caught:
        oidc_settings(oidc_env(provider, **env))
    assert needle in str(caught.value)


async def test_both_sources_at_once_and_neither_accepts_the_others_token(
    provider: TestProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_sdk import Auth

    from algenta_graph.serving.auth import authenticate

    jwt_token = provider.mint(sub="olivia", groups=["algenta-operators"])
    named_alice = provider.mint(sub="alice", groups=["algenta-operators"])
    # olivia's claims under another token's signature
    spliced = jwt_token.rsplit(".", 1)[0] + "." + named_alice.rsplit(".", 1)[1]
    path = write_auth_file(
        tmp_path / "auth.json",
        {
            "tok-alice": ("alice", ["agent"]),
            # a JWT-shaped string in the tokens file is never looked up there
            spliced: ("mallory", ["operator"]),
            unsigned_token({"sub": "mallory"}, "k1"): ("mallory", ["operator"]),
        },
    )
    monkeypatch.setenv(ENV_AUTH_FILE, str(path))
    monkeypatch.setattr("algenta_graph.serving.tokens.TOKENS", TokenSource())
    for name, value in oidc_env(provider).items():
        monkeypatch.setenv(name, value)

    user = await authenticate(f"Bearer {jwt_token}")
    assert (user["identity"], user["permissions"]) == ("olivia", ["operator"])
    user = await authenticate(None, {b"x-api-key": jwt_token.encode()})
    assert user["identity"] == "olivia"
    assert (await authenticate("Bearer tok-alice"))["identity"] == "alice"

    refused: dict[str, tuple[str, int, str]] = {
        "a JWT-shaped token of the tokens file": (
            unsigned_token({"sub": "mallory"}, "k1"),
            401,
            "algorithm 'none' is not accepted",
        ),
        "a JWT with another's signature, listed in the file": (
            spliced,
            401,
            "signature does not verify",
        ),
        "a JWT naming an identity of the tokens file": (
            named_alice,
            401,
            "the identity 'alice' is named by the tokens file too",
        ),
        "the file token's digest": (token_digest("tok-alice"), 401, "invalid token"),
    }
    for name, (token, status, needle) in refused.items():
        with pytest.raises(Auth.exceptions.HTTPException) as caught:
            await authenticate(f"Bearer {token}")
        detail = str(caught.value.detail)
        assert (caught.value.status_code, needle in detail) == (status, True), (name, detail)

    # the provider's settings broken: every request refused (fail closed), naming why
    monkeypatch.setenv("ALGENTA_OIDC_ROLE_MAP", "{broken")
    for header in (f"Bearer {jwt_token}", "Bearer tok-alice"):
        with pytest.raises(Auth.exceptions.HTTPException) as caught:
            await authenticate(header)
        assert caught.value.status_code == 401
        assert "identity provider settings are invalid" in str(caught.value.detail)
    # only the provider (no tokens file): a non-JWT token is refused, never the server open
    monkeypatch.setenv("ALGENTA_OIDC_ROLE_MAP", json.dumps({"algenta-operators": "operator"}))
    monkeypatch.delenv(ENV_AUTH_FILE)
    assert (await authenticate(f"Bearer {jwt_token}"))["identity"] == "olivia"
    for absent_or_file in ("Bearer tok-alice", None):
        with pytest.raises(Auth.exceptions.HTTPException) as caught:
            await authenticate(absent_or_file)
        assert caught.value.status_code == 401


def test_only_a_jws_compact_token_looks_like_a_jwt() -> None:
    header = base64.urlsafe_b64encode(b'{"alg":"RS256"}').rstrip(b"=").decode()
    assert looks_like_jwt(f"{header}.e30.c2ln")
    for token in (
        "tok-alice",
        "a.b.c",  # not a JSON header
        f"{header}.e30",  # two parts
        f"{header}.e30.c2ln.x.y",  # five (an encrypted JWT)
        f"{header}.e30.c2l+",  # not base64url
        base64.urlsafe_b64encode(b'{"typ":"JWT"}').decode().rstrip("=") + ".e30.x",  # no alg
        base64.urlsafe_b64encode(b"[" * 5000).decode().rstrip("=") + ".e30.x",
    ):
        assert not looks_like_jwt(token), token


def test_a_provider_that_cannot_be_read_refuses_every_token_naming_why(
    provider: TestProvider,
) -> None:
    from algenta_graph._net import free_port
    from algenta_graph.errors import IdentityProviderError

    token = provider.mint()
    # keys that cannot be fetched: refused, never accepted on trust
    closed = f"http://127.0.0.1:{free_port()}/jwks"
    with pytest.raises(IdentityProviderError) as caught:
        _verifier(provider, ALGENTA_OIDC_JWKS_URL=closed).principal(token)
    assert f"the identity provider's keys cannot be fetched from {closed}" in str(caught.value)
    # a discovery document of another issuer: its keys are not taken
    foreign = _verifier(
        provider,
        ALGENTA_OIDC_ISSUER=provider.issuer + "/another-realm",
        ALGENTA_OIDC_DISCOVERY_URL=provider.issuer + "/.well-known/openid-configuration",
    )
    with pytest.raises(IdentityProviderError) as caught:
        foreign.principal(provider.mint(iss=provider.issuer + "/another-realm"))
    assert f"names the issuer {provider.issuer!r}, not the configured" in str(caught.value)


def test_the_server_does_not_start_on_malformed_provider_settings(
    provider: TestProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    from algenta_graph.serving import tokens

    for name, value in oidc_env(provider, ALGENTA_OIDC_ROLE_MAP='{"ops": "root"}').items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(ENV_AUTH_FILE, raising=False)
    monkeypatch.setattr(tokens, "_STARTED", False)
    with pytest.raises(OIDCConfigError, match="unknown role 'root'"):
        tokens.startup_check()
