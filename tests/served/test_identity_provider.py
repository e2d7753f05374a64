"""The identity provider's JWTs on the served graph, next to the tokens file.

A real ``langgraph dev`` with the repository's ``langgraph.json``, a tokens file **and** the
tests' own OpenID Connect provider (``tests/support/oidc_provider.py``: a Starlette app on a free
port serving its discovery document and JWKS, keys made in the test with ``cryptography``), on a
real reference engine and webhook receiver, driven by ``langgraph_sdk`` and raw ``httpx``: a JWT
agent runs turns while a tokens-file agent does too; a JWT operator answers an escalation,
recorded under the JWT identity and roles; a JWT operator of another gate is refused by the
graph; every forged, foreign or stale token is refused with 401/403 and a message naming why
(never a traceback); a rotated key is taken after a refresh and the removed key refused, and
made-up key ids do not make the server fetch the keys more than once per cool-down.

In process: ``tests/integration/test_jwt_bearer.py``.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import httpx
from guarantee_support import figure
from oidc_provider import TestProvider, ec_key, hostile_tokens, oidc_env, rsa_key
from served_support import CONFIG, bearer, escalate, langgraph_dev, user_turn, write_auth_file

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.serving.tokens import ENV_AUTH_FILE

TOKENS: dict[str, tuple[str, list[str]]] = {
    "tok-alice": ("alice", ["agent"]),
    "tok-audrey": ("audrey", ["auditor"]),
}
COOL_DOWN = 2
"""ALGENTA_OIDC_JWKS_REFRESH_SECONDS of the server under test."""


def _refusal(http: httpx.Client, token: str) -> tuple[int, str]:
    """The status and ``detail`` of a request with ``token`` (a search of the threads)."""
    response = http.post("/threads/search", json={}, headers=bearer(token))
    assert "Traceback" not in response.text, response.text
    body = response.json()
    return response.status_code, str(body.get("detail") if isinstance(body, dict) else body)


async def test_served_graph_takes_provider_jwts_next_to_the_tokens_file(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    from langgraph_sdk import get_client

    k1, k2 = rsa_key("k1"), ec_key("k2")
    with TestProvider([k1]) as provider:
        env = {
            "ALGENTA_BASE_URL": engine.url,
            "ALGENTA_OPERATOR_KEY_IS_AGENT_KEY": "1",  # the reference engine here has no keys
            "ALGENTA_PROFILE": "execute",
            "ALGENTA_MODEL": "demo",
            "ALGENTA_ON_DENIAL": '{"confidence": "escalate"}',
            ENV_AUTH_FILE: str(write_auth_file(tmp_path / "auth.json", TOKENS)),
            **oidc_env(provider, ALGENTA_OIDC_JWKS_REFRESH_SECONDS=str(COOL_DOWN)),
        }
        with (
            langgraph_dev(CONFIG, workdir=tmp_path / "server", env=env) as server,
            httpx.Client(base_url=server.url, timeout=60) as http,
        ):
            assert "runs OPEN" not in server.log()
            carol_token = provider.mint(sub="carol", groups=["algenta-agents"])
            olivia_token = provider.mint(sub="olivia", groups=["algenta-operators"])
            gus_token = provider.mint(sub="gus", groups=["risk-team"])
            carol: Any = get_client(url=server.url, headers=bearer(carol_token))
            olivia: Any = get_client(url=server.url, headers=bearer(olivia_token))
            gus: Any = get_client(url=server.url, headers=bearer(gus_token))
            alice: Any = get_client(url=server.url, headers=bearer("tok-alice"))
            audrey: Any = get_client(url=server.url, api_key="tok-audrey")

            # both at once: a JWT agent and a tokens-file agent each run a turn on their thread
            thread, decision, asked = await escalate(carol, webhook.url)
            assert (await carol.threads.get(thread))["metadata"]["algenta_owner"] == "carol"
            own = (await alice.threads.create())["thread_id"]
            await alice.runs.wait(own, "governed_agent", input=user_turn("recommend scenario=x"))
            assert (await alice.threads.get(own))["metadata"]["algenta_owner"] == "alice"
            # each reads only its own
            carol_sees = {t["thread_id"] for t in await carol.threads.search(limit=100)}
            assert thread in carol_sees and own not in carol_sees

            # an operator of another gate (operator:risk_floor from the 'risk-team' group): the
            # graph refuses its answer, the escalation still waits
            run = await gus.runs.create(
                thread,
                "governed_agent",
                command={"resume": {"decisions": [{"type": "approve", "message": "mine"}]}},
            )
            ended = await audrey.runs.join(thread, run["run_id"])
            assert "'gus' may not answer a confidence escalation" in str(ended), ended
            assert (await audrey.threads.get_state(thread))["next"] == ["denial_handler_confidence"]

            # the JWT operator answers: recorded under the JWT's identity and mapped roles
            await olivia.runs.wait(
                thread,
                "governed_agent",
                command={"resume": {"decisions": [{"type": "approve", "message": "ok"}]}},
            )
            values = (await carol.threads.get_state(thread))["values"]
            [record] = values["operator_decisions"]
            assert (record["operator"], record["roles"], record["verdict"]) == (
                "olivia",
                ["operator"],
                "approved",
            )
            assert record["digest"] == asked["digest"]
            assert [r["operator"] for r in values["receipts"]] == ["olivia"]
            assert [b["decision_id"] for b in webhook.received] == [decision]

            # every forged, foreign or stale token: refused, saying why
            attempts = {
                **hostile_tokens(provider),
                "an identity of the tokens file": (
                    provider.mint(sub="alice", groups=["algenta-operators"]),
                    401,
                    "the identity 'alice' is named by the tokens file too",
                ),
            }
            for name, (token, status, needle) in attempts.items():
                got, detail = _refusal(http, token)
                assert (got, needle in detail) == (status, True), (name, got, detail)
            # the SDK sees the same refusal
            expired: Any = get_client(url=server.url, headers=bearer(attempts["expired"][0]))
            try:
                await expired.threads.search()
                raise AssertionError("an expired token was accepted")
            except httpx.HTTPStatusError as exc:
                assert exc.response.status_code == 401
                assert "the token expired at" in exc.response.text
            refused = len(attempts) + 1

            # made-up key ids: refused, and the keys fetched at most once per cool-down
            before, started = len(provider.jwks_fetches), time.monotonic()
            made_up = [provider.mint(kid=f"made-up-{i}") for i in range(20)]
            for token in made_up:
                assert _refusal(http, token)[0] == 401
            elapsed = time.monotonic() - started
            fetched = len(provider.jwks_fetches) - before
            assert fetched <= 1 + math.ceil(elapsed / COOL_DOWN), (fetched, elapsed)
            refused += len(made_up)

            # the provider rotates: k2 replaces k1; once the cool-down since the last fetch has
            # passed, the first k2 token fetches the new keys and is accepted
            provider.rotate([k2])
            time.sleep(max(0.0, provider.jwks_fetches[-1] + COOL_DOWN + 0.5 - time.monotonic()))
            rotated: Any = get_client(url=server.url, headers=bearer(provider.mint(sub="carol")))
            assert thread in {t["thread_id"] for t in await rotated.threads.search(limit=100)}
            # ...and a token signed with the removed key is refused
            got, detail = _refusal(http, provider.mint(k1, sub="carol"))
            assert got == 401 and "'k1' is not among the identity provider's keys" in detail
            refused += 1

            # never a server error: the auth handler failed on none of them (gus's refused run
            # is the one traceback in the log, the graph's refusal inside the run)
            log = server.log()
            assert "Error authenticating request" not in log
            assert "jwt_bearer.py" not in log and "serving/auth.py" not in log

    figure(
        "identity provider",
        tokens_refused=refused,
        kinds=len(attempts) + 2,  # + made-up kids, the removed key
        accepted_forged=0,
        made_up_kids=len(made_up),
        jwks_fetches_for_them=fetched,
        jwt_operator_answers=1,
    )
