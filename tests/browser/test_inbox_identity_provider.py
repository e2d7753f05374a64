"""The operator inbox signs in with the identity provider, in a real browser.

A real ``langgraph dev`` with the repository's ``langgraph.json`` (its ``http.app`` is the
inbox), a tokens file **and** the tests' own OpenID Connect provider (``tests/support/
oidc_provider.py``: discovery, an authorization endpoint, a token endpoint issuing a signed ID
token and a JWT access token; keys made in the test), the reference engine and a webhook
receiver; headless Chromium driven by Selenium, and raw HTTP for what a browser would not send.

- The authorization-code sign-in: the provider asked with PKCE ``S256``, a ``state`` and a
  ``nonce``; the code exchanged with the verifier and the client secret; the operator lands on
  the queue, sees the tokens-file agent's escalation and approves it: recorded under the JWT
  identity and roles.
- Refused, each on the sign-in page saying why, with no session: the callback replayed, a
  forged ``state``, a callback with no sign-in started, an ID token for another ``nonce``, the
  provider's ``access_denied``, a user whose groups grant no operator or auditor role.
- A pasted token: an expired one refused; a valid one signs in, and the session ends at the
  token's ``exp`` although the API's clock skew would still accept the token.
"""

from __future__ import annotations

import base64
import hashlib
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from browser_support import chromium, sign_in, text_of, wait_for
from guarantee_support import figure
from inbox_support import COOKIE
from oidc_provider import CLIENT_ID, CLIENT_SECRET, TestProvider, oidc_env, rsa_key
from served_support import CONFIG, bearer, escalate, langgraph_dev, write_auth_file

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.serving.tokens import ENV_AUTH_FILE

pytestmark = pytest.mark.timeout(900)

LEEWAY = 300
"""The API's clock skew: a token stays accepted by the API this long past its exp."""
SESSION_TOKEN_SECONDS = 25
"""How long the pasted token that ends its session lives."""


def _error(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    wait_for(driver, lambda d: d.find_elements(By.ID, "error"))
    return text_of(driver, "error")


def _raw_flow(base: str) -> tuple[httpx.Client, str, str]:
    """A sign-in started over raw HTTP: the client (holding the flow's cookie), and the code
    and state the provider sends back."""
    http = httpx.Client(base_url=base, timeout=30, follow_redirects=False)
    started = http.get("/inbox/oidc/start")
    assert started.status_code == 303, started.text
    answered = httpx.get(started.headers["location"], follow_redirects=False)
    assert answered.status_code == 302, answered.text
    query = parse_qs(urlsplit(answered.headers["location"]).query)
    return http, query["code"][0], query["state"][0]


async def test_the_inbox_signs_in_with_the_identity_provider(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    from langgraph_sdk import get_client
    from selenium.webdriver.common.by import By

    refused: dict[str, str] = {}
    with TestProvider([rsa_key("k1")]) as provider:
        env = {
            "ALGENTA_BASE_URL": engine.url,
            "ALGENTA_OPERATOR_KEY_IS_AGENT_KEY": "1",  # the reference engine here has no keys
            "ALGENTA_PROFILE": "execute",
            "ALGENTA_MODEL": "demo",
            "ALGENTA_ON_DENIAL": '{"confidence": "escalate"}',
            "ALGENTA_INBOX_SECRET": "browser-test-secret",
            ENV_AUTH_FILE: str(
                write_auth_file(tmp_path / "auth.json", {"tok-alice": ("alice", ["agent"])})
            ),
            **oidc_env(
                provider,
                ALGENTA_OIDC_CLIENT_ID=CLIENT_ID,
                ALGENTA_OIDC_CLIENT_SECRET=CLIENT_SECRET,
                ALGENTA_OIDC_SCOPES="openid profile",
                ALGENTA_OIDC_LEEWAY_SECONDS=str(LEEWAY),
            ),
        }
        with langgraph_dev(CONFIG, workdir=tmp_path / "server", env=env) as server:
            base = server.url
            provider.redirect_uris = (f"{base}/inbox/oidc/callback",)
            alice: Any = get_client(url=base, headers=bearer("tok-alice"))
            thread, _, asked = await escalate(alice, webhook.url)
            escalation = asked["escalation_id"]

            with chromium(tmp_path / "chrome-olivia") as olivia:
                # the provider's sign-in, from the sign-in page
                olivia.get(f"{base}/inbox/login")
                olivia.find_element(By.ID, "provider-sign-in").click()
                wait_for(olivia, lambda d: "/inbox/queue" in d.current_url)
                assert text_of(olivia, "who") == "olivia"
                [asked_provider] = provider.authorize_requests
                assert asked_provider["code_challenge_method"] == "S256"
                assert asked_provider["state"] and asked_provider["nonce"]
                assert asked_provider["scope"] == "openid profile"
                [exchange] = provider.token_requests
                # RFC 7636 S256, computed here: base64url(SHA-256(verifier)), unpadded
                digest = hashlib.sha256(exchange["code_verifier"].encode()).digest()
                challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
                assert challenge == asked_provider["code_challenge"]
                assert "client_secret" not in exchange  # sent as HTTP Basic
                cookie = olivia.get_cookie(COOKIE)
                assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"

                # the tokens-file agent's escalation waits in the JWT operator's queue
                wait_for(
                    olivia,
                    lambda d: d.find_elements(
                        By.CSS_SELECTOR, f"tr[data-escalation='{escalation}']"
                    ),
                )
                olivia.get(f"{base}/inbox/escalations/{thread}/{escalation}")
                olivia.find_element(By.ID, "decision-0-approve").click()
                olivia.find_element(By.ID, "reason-0").send_keys("approved via the provider")
                olivia.find_element(By.ID, "submit").click()
                wait_for(olivia, lambda d: d.find_elements(By.ID, "record-operator"))
                assert text_of(olivia, "record-operator") == "olivia"
                values = (await alice.threads.get_state(thread))["values"]
                [record] = values["operator_decisions"]
                assert (record["operator"], record["roles"], record["verdict"]) == (
                    "olivia",
                    ["operator"],
                    "approved",
                )
                assert [r["operator"] for r in values["receipts"]] == ["olivia"]

                # the provider's redirect back, replayed in the same browser: spent
                olivia.get(provider.redirects[-1])
                refused["callback replayed"] = _error(olivia)
                assert "was already used" in refused["callback replayed"]
                assert len(provider.token_requests) == 1  # the code was not sent again

            # raw HTTP: a forged state, then no sign-in started at all
            http, code, state = _raw_flow(base)
            forged = http.get("/inbox/oidc/callback", params={"code": code, "state": "forged"})
            assert forged.status_code == 400 and COOKIE not in forged.cookies
            refused["forged state"] = "forged"
            stranger = httpx.get(
                f"{base}/inbox/oidc/callback", params={"code": code, "state": state}
            )
            assert stranger.status_code == 400 and "not started in this browser" in stranger.text
            refused["no sign-in started"] = "stranger"
            assert len(provider.token_requests) == 1
            # the provider says no
            http, code, state = _raw_flow(base)
            denied = http.get(
                "/inbox/oidc/callback", params={"error": "access_denied", "state": state}
            )
            assert denied.status_code == 401
            assert "the identity provider answered &#39;access_denied&#39;" in denied.text
            refused["access_denied"] = "denied"
            # an ID token of another sign-in (its nonce differs)
            provider.id_token_overrides = {"nonce": "another-sign-in"}
            http, code, state = _raw_flow(base)
            other = http.get("/inbox/oidc/callback", params={"code": code, "state": state})
            assert other.status_code == 401 and "its nonce differs" in other.text, other.text
            assert COOKIE not in other.cookies
            refused["another nonce"] = "nonce"
            provider.id_token_overrides = {}
            # a user whose groups grant no operator or auditor role
            provider.user = {"sub": "carol", "groups": ["algenta-agents"]}
            http, code, state = _raw_flow(base)
            agent = http.get("/inbox/oidc/callback", params={"code": code, "state": state})
            assert agent.status_code == 403 and "no operator or auditor role" in agent.text
            assert COOKIE not in agent.cookies
            refused["an agent"] = "agent"
            # the right state in the right client: signed in
            provider.user = {"sub": "olivia", "groups": ["algenta-operators"]}
            http, code, state = _raw_flow(base)
            good = http.get("/inbox/oidc/callback", params={"code": code, "state": state})
            assert good.status_code == 200 and COOKIE in good.cookies, good.text

            with chromium(tmp_path / "chrome-audra") as audra:
                # a pasted token: an expired one is refused
                stale = provider.mint(sub="audra", groups=["algenta-auditors"], exp=1)
                sign_in(audra, base, stale)
                refused["pasted expired token"] = _error(audra)
                assert "sign-in refused: the token expired at" in refused["pasted expired token"]
                # a valid one signs in; its session ends at the token's exp
                exp = int(time.time()) + SESSION_TOKEN_SECONDS
                token = provider.mint(sub="audra", groups=["algenta-auditors"], exp=exp)
                sign_in(audra, base, token)
                wait_for(audra, lambda d: "/inbox/threads" in d.current_url)
                assert text_of(audra, "who") == "audra"
                assert time.time() < exp, "signed in after the token's exp: the machine is slow"
                held = audra.get_cookie(COOKIE)
                assert held["expiry"] <= exp + 1
                time.sleep(max(0.0, exp + 1 - time.time()))
                audra.get(f"{base}/inbox/threads")
                wait_for(audra, lambda d: "/inbox/login" in d.current_url)
                assert not audra.find_elements(By.ID, "who")
                # the cookie replayed after exp: no session
                replayed = httpx.get(
                    f"{base}/inbox/threads",
                    cookies={COOKIE: str(held["value"])},
                    follow_redirects=False,
                )
                assert replayed.status_code == 303
                assert "/inbox/login" in replayed.headers["location"]
                # ...while the API, with its clock skew, still takes the token: the session
                # ended at exp on its own
                api = httpx.post(f"{base}/threads/search", json={}, headers=bearer(token))
                assert api.status_code == 200, api.text

    figure(
        "inbox identity provider",
        code_flow_sign_ins=2,
        pkce="S256",
        sign_ins_refused=len(refused),
        jwt_operator_answers=1,
        session_ended_at_exp=1,
    )
