"""A served graph's deadlines act on their own: one warning, then one expiry, no cron, no request.

``langgraph dev`` serves the repository's ``langgraph.json`` (its custom app starts the deadline
watcher, ``algenta_graph.serving.deadline_watcher``) on the reference engine, with a confidence
deadline of a few seconds, a warning shortly after the escalation is raised and the notices
posted to a real webhook receiver. After the escalation is raised nobody sends anything: the
receiver gets exactly one warning for it, then the thread records exactly one operator decision
``expired`` (in the watcher's name) and no longer waits; the inbox lists it decided, and
``algenta-graph escalations`` shows nothing waiting. An operator answering after that is refused
by name and nothing runs (the engine executes nothing).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from inbox_support import served
from served_support import bearer, escalate, values_of

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.governance.notice_signing import new_secret
from algenta_graph.governance.notifications import DEADLINE_WARNING

pytestmark = pytest.mark.timeout(900)

EXPIRES_AFTER = 4
WARN_BEFORE = 3


def deadline_settings(notify_url: str) -> str:
    """The ``ALGENTA_CONFIG`` file: a short confidence deadline, a warning, notices to a URL."""
    return (
        "[escalation]\n"
        f"expires_after = {{confidence = {EXPIRES_AFTER}}}\n"
        f"warn_before = {{confidence = {WARN_BEFORE}}}\n"
        "check_every = 0.25\n"
        "[escalation.notify]\n"
        f'url = "{notify_url}"\n'
        'secret = {env = "ALGENTA_TEST_NOTIFY_SECRET"}\n'
    )


def notices(webhook: WebhookReceiver, escalation: str) -> list[dict[str, Any]]:
    """The notices the receiver got about ``escalation`` (not the engine's deliveries)."""
    return [
        r["body"]
        for r in webhook.requests
        if isinstance(r.get("body"), dict) and r["body"].get("escalation_id") == escalation
    ]


async def wait_for_expiry(client: Any, thread: str, timeout: float = 120.0) -> dict[str, Any]:
    """The thread's state once it records an expiry (nobody sends anything meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        state: dict[str, Any] = await client.threads.get_state(thread)
        decisions = state["values"].get("operator_decisions") or []
        if any(d.get("verdict") == "expired" for d in decisions):
            return state
        assert time.monotonic() < deadline, f"no expiry recorded on {thread}: {decisions}"
        await asyncio.sleep(0.25)


def sign_in(client: httpx.Client, token: str) -> None:
    page = client.get("/inbox/login")
    csrf = re.search(r'name="csrf" value="([^"]*)"', page.text)
    assert csrf, page.text[:300]
    done = client.post("/inbox/login", data={"csrf": csrf.group(1), "token": token})
    assert done.status_code == 303, done.text[:300]


async def test_an_escalation_is_warned_of_once_then_expires_on_its_own(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    from langgraph_sdk import get_client

    settings = deadline_settings(f"{webhook.url}")
    with served(engine, tmp_path, settings, ALGENTA_TEST_NOTIFY_SECRET=new_secret()) as (
        server,
        db,
    ):
        alice = get_client(url=server.url, headers=bearer("tok-alice"))
        audrey = get_client(url=server.url, headers=bearer("tok-audrey"))
        thread, decision, asked = await escalate(alice, f"{webhook.url}")
        [item] = asked["escalations"]
        escalation = str(item["escalation_id"])
        assert item["expires_at"], item

        # nobody sends anything now: the watcher warns, expires, and records it in the thread
        state = await wait_for_expiry(audrey, thread)
        expired = [
            d for d in state["values"]["operator_decisions"] if d.get("verdict") == "expired"
        ]
        assert len(expired) == 1, expired
        assert expired[0]["operator"] == "algenta-graph deadlines", expired[0]
        assert state["next"] == [], state["next"]  # it no longer waits

        got = notices(webhook, escalation)
        warnings = [n for n in got if n.get("event") == DEADLINE_WARNING]
        assert len(warnings) == 1, got
        assert warnings[0]["expires_at"] == item["expires_at"]
        assert warnings[0]["warn_before"] == WARN_BEFORE
        warned_at = next(
            r["received_at"]
            for r in webhook.requests
            if isinstance(r.get("body"), dict) and r["body"].get("event") == DEADLINE_WARNING
        )
        assert warned_at < expired[0]["decided_at"], (warned_at, expired[0]["decided_at"])

        # an operator answering now is refused by name, and nothing runs
        async with httpx.AsyncClient(base_url=server.url, timeout=300) as http:
            answer = await http.post(
                f"/threads/{thread}/runs/wait",
                json={
                    "assistant_id": "governed_agent",
                    "command": {"resume": {"decisions": [{"type": "approve"}]}},
                },
                headers=bearer("tok-ana"),
            )
        # refused before any run: the server reads the thread, where nothing waits
        assert answer.status_code == 409, (answer.status_code, answer.text[:300])
        said = answer.text
        assert "EscalationAlreadyDecided" in said, said[:500]
        assert "algenta-graph deadlines" in said, said[:500]
        after = values_of((await audrey.threads.get_state(thread))["values"])
        assert after["operator_decisions"] == state["values"]["operator_decisions"]
        assert not after.get("receipts"), after.get("receipts")
        executed = [
            r
            for r in webhook.requests
            if isinstance(r.get("body"), dict)
            and r["body"].get("decision_id") == decision
            and "escalation_id" not in r["body"]  # a notice, not the engine's delivery
        ]
        assert executed == [], executed

        # the inbox lists it decided; `escalations` shows nothing waiting
        with httpx.Client(base_url=server.url, timeout=120) as browser:
            sign_in(browser, "tok-audrey")
            decided = browser.get("/inbox/decided")
        assert decided.status_code == 200, decided.text[:300]
        assert f'data-escalation="{escalation}"' in decided.text, decided.text[-2000:]
        assert "expired" in decided.text.lower()
        listing = subprocess.run(
            [sys.executable, "-m", "algenta_graph.cli", "escalations", "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert listing.returncode == 0, listing.stderr
        assert "nothing waits for an operator" in listing.stdout, listing.stdout
        await alice.aclose()
        await audrey.aclose()
