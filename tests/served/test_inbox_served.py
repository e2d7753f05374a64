"""The operator inbox on the served graph, driven over HTTP as a browser would (``httpx``).

A real ``langgraph dev`` with the repository's ``langgraph.json`` (its ``http.app`` is the
inbox), an auth file and the reference engine. What is proven here:

- **A session is not a credential.** The session cookie is an opaque id: decoded every way a
  signed cookie decodes, it holds no token. Signing out ends the session on the server, so the
  same cookie replayed from another client is refused; a token revoked in the tokens file ends
  the session for good (the cookie stays refused once the token is back).
- **A form without its digest is stale.** An answer form whose ``digest`` field was removed is
  refused as a stale page and nothing is sent (no record, no execution, the escalation waits).
- **The queue is the operator's gates only.** ``operator:risk_floor`` does not see a confidence
  escalation in its queue, even on a thread it may read (its own).

The same in a real browser: ``tests/browser/test_inbox.py``; in process:
``tests/unit/test_inbox.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from inbox_support import COOKIE, TOKENS, cookie_decodings
from served_support import CONFIG, bearer, escalate, interrupt_value, langgraph_dev, write_auth_file

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.serving.auth import ENV_AUTH_FILE

pytestmark = pytest.mark.timeout(600)


def _field(html: str, name: str) -> str:
    """The value of the form field ``name`` in ``html``."""
    found = re.search(rf'name="{re.escape(name)}" value="([^"]*)"', html)
    assert found, f"no field {name!r} in the page"
    return found.group(1)


@contextmanager
def _browser(url: str) -> Iterator[httpx.Client]:
    """A client with its own cookie jar, as one browser is."""
    with httpx.Client(base_url=url, timeout=120, follow_redirects=False) as client:
        yield client


def _sign_in(client: httpx.Client, token: str) -> str:
    """Sign in with ``token``; the session cookie's value."""
    page = client.get("/inbox/login")
    assert page.status_code == 200, page.text[:300]
    done = client.post("/inbox/login", data={"csrf": _field(page.text, "csrf"), "token": token})
    assert done.status_code == 303, done.text[:300]
    return str(client.cookies[COOKIE])


def _replay(url: str, cookie: str) -> httpx.Response:
    """``GET /inbox/queue`` from another client that holds only ``cookie``."""
    with _browser(url) as other:
        other.cookies.set(COOKIE, cookie, path="/inbox")
        return other.get("/inbox/queue")


def _signed_out(response: httpx.Response) -> bool:
    return response.status_code == 303 and response.headers["location"].startswith("/inbox/login")


async def test_inbox_sessions_end_on_the_server_stale_forms_and_other_gates_are_refused(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    from langgraph_sdk import get_client

    auth_file = write_auth_file(tmp_path / "auth.json", TOKENS)
    env = {
        "ALGENTA_BASE_URL": engine.url,
        "ALGENTA_OPERATOR_KEY_IS_AGENT_KEY": "1",  # the reference engine here has no keys
        "ALGENTA_PROFILE": "execute",
        "ALGENTA_MODEL": "demo",
        "ALGENTA_ON_DENIAL": '{"confidence": "escalate"}',
        ENV_AUTH_FILE: str(auth_file),
    }
    with langgraph_dev(CONFIG, workdir=tmp_path / "server", env=env) as server:
        url = server.url

        # an answer form with its digest removed: refused as stale, nothing sent
        alice: Any = get_client(url=url, headers=bearer("tok-alice"))
        auditor: Any = get_client(url=url, headers=bearer("tok-audrey"))
        thread, decision, asked = await escalate(alice, webhook.url)
        escalation = asked["escalation_id"]
        with _browser(url) as ana:
            _sign_in(ana, "tok-ana")
            page = ana.get(f"/inbox/escalations/{thread}/{escalation}")
            assert page.status_code == 200 and _field(page.text, "digest") == asked["digest"]
            form = {
                "csrf": _field(page.text, "csrf"),
                "decision-0": "approve",
                "reason-0": "no digest on this form",
            }
            sent = ana.post(f"/inbox/escalations/{thread}/{escalation}/answer", data=form)
            assert sent.status_code == 409 and "stale page" in sent.text, sent.text[:600]
        state = await auditor.threads.get_state(thread)
        assert state["values"]["operator_decisions"] == []
        assert interrupt_value(state)["escalation_id"] == escalation
        assert engine.executions(decision) == [] and webhook.received == []

        # operator:risk_floor reads its own thread waiting on confidence: not in its queue
        gus: Any = get_client(url=url, headers=bearer("tok-gus"))
        own, _, waiting = await escalate(gus, webhook.url)
        [item] = interrupt_value(await gus.threads.get_state(own))["escalations"]
        assert item["gate"] == "confidence"  # on a thread gus reads: the API shows it to him
        with _browser(url) as browser:
            _sign_in(browser, "tok-gus")
            rows = browser.get("/inbox/queue/rows")
            assert rows.status_code == 200, rows.text[:300]
            assert waiting["escalation_id"] not in rows.text and own not in rows.text
            assert "Nothing waits for you" in rows.text

        # the cookie is an opaque id: no token in it, however it is decoded
        with _browser(url) as ana:
            cookie = _sign_in(ana, "tok-ana")
            for decoded in cookie_decodings(cookie):
                assert b"tok-ana" not in decoded, decoded
            assert ana.get("/inbox/queue").status_code == 200
            assert _replay(url, cookie).status_code == 200  # the live session, elsewhere
            # signing out ends it on the server: the same cookie, replayed, is refused
            csrf = _field(ana.get("/inbox/queue").text, "csrf")
            assert _signed_out(ana.post("/inbox/logout", data={"csrf": csrf}))
        assert _signed_out(_replay(url, cookie))
        with _browser(url) as other:
            other.cookies.set(COOKIE, cookie, path="/inbox")
            posted = other.post("/inbox/escalations/t/e/answer", data={"csrf": csrf})
            assert posted.status_code == 401, posted.text[:300]

        # a token revoked in the tokens file ends the session for good
        with _browser(url) as olga:
            cookie = _sign_in(olga, "tok-olga")
            assert olga.get("/inbox/queue").status_code == 200
            write_auth_file(auth_file, {t: w for t, w in TOKENS.items() if t != "tok-olga"})
            page = olga.get("/inbox/queue")
            assert page.status_code == 401 and "no longer accepts your token" in page.text
        write_auth_file(auth_file, TOKENS)  # the token is back: the session is not
        assert _signed_out(_replay(url, cookie))
