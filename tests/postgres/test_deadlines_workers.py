"""Deadlines act once across two served workers on one PostgreSQL database.

Two ``langgraph dev`` processes serve the graph through the server checkpointer on one real
PostgreSQL database (the ledger there too); every thread is known to both, and each runs its
deadline watcher (``algenta_graph.serving.deadline_watcher``), so both meet every escalation's
warning window and its deadline, round after round. Nobody answers. Counted per escalation: the
webhook receiver got exactly one warning notice, and the thread records exactly one operator
decision ``expired`` (the ledger's claim decides which worker's), and nothing waits any more.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from guarantee_support import figure
from postgres_support import postgres_server, postgres_url  # noqa: F401
from served_support import (
    CONFIG,
    OPERATOR_TOKENS,
    bearer,
    escalate,
    langgraph_dev,
    values_of,
    write_auth_file,
)

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.governance.notice_signing import new_secret
from algenta_graph.governance.notifications import DEADLINE_WARNING

pytestmark = pytest.mark.timeout(900)

SERVER_CHECKPOINTER = "algenta_graph.serving.checkpointer.server_checkpointer"
ESCALATIONS = 6
EXPIRES_AFTER = 12
WARN_BEFORE = 9


async def test_two_workers_warn_once_and_expire_once_per_escalation(
    postgres_url: str,  # noqa: F811
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    tmp_path: Path,
) -> None:
    from langgraph_sdk import get_client

    config = json.loads(CONFIG.read_text())
    config["checkpointer"] = {"path": SERVER_CHECKPOINTER}
    config.pop("env", None)
    config_path = tmp_path / "langgraph.json"
    config_path.write_text(json.dumps(config))
    settings = tmp_path / "agent.toml"
    settings.write_text(
        "[escalation]\n"
        f"expires_after = {{confidence = {EXPIRES_AFTER}}}\n"
        f"warn_before = {{confidence = {WARN_BEFORE}}}\n"
        "check_every = 0.5\n"
        "[escalation.notify]\n"
        f'url = "{webhook.url}"\n'
        'secret = {env = "ALGENTA_TEST_NOTIFY_SECRET"}\n'
    )
    env = {
        "ALGENTA_CONFIG": str(settings),
        "ALGENTA_BASE_URL": engine.url,
        "ALGENTA_OPERATOR_KEY_IS_AGENT_KEY": "1",  # the reference engine here has no keys
        "ALGENTA_PROFILE": "execute",
        "ALGENTA_MODEL": "demo",
        "ALGENTA_CHECKPOINTER": postgres_url,
        "ALGENTA_AUTH_FILE": str(write_auth_file(tmp_path / "auth.json", OPERATOR_TOKENS)),
        "ALGENTA_TEST_NOTIFY_SECRET": new_secret(),
    }
    with (
        langgraph_dev(config_path, workdir=tmp_path / "one", env=env) as one,
        langgraph_dev(config_path, workdir=tmp_path / "two", env=env) as two,
    ):
        servers = [one, two]
        alices = [get_client(url=s.url, headers=bearer("tok-alice")) for s in servers]
        threads: dict[str, str] = {}  # escalation -> thread
        for n in range(ESCALATIONS):
            home, other = alices[n % 2], alices[(n + 1) % 2]
            thread, _, asked = await escalate(home, webhook.url)
            # the other worker knows the thread too (one deployment's shared thread list)
            await other.threads.create(thread_id=thread, if_exists="do_nothing")
            [item] = asked["escalations"]
            threads[str(item["escalation_id"])] = thread

        # nobody answers: both watchers warn and expire, round after round
        auditor = get_client(url=one.url, headers=bearer("tok-audrey"))
        deadline = time.monotonic() + 300
        states: dict[str, Any] = {}
        while len(states) < ESCALATIONS:
            for escalation, thread in threads.items():
                if escalation in states:
                    continue
                state = await auditor.threads.get_state(thread)
                if any(
                    d.get("verdict") == "expired"
                    for d in values_of(state["values"]).get("operator_decisions") or []
                ):
                    states[escalation] = state
            assert time.monotonic() < deadline, f"expired so far: {len(states)}/{ESCALATIONS}"
            await asyncio.sleep(0.5)
        await asyncio.sleep(3)  # more rounds of both watchers: nothing more may happen

        expired_once = warnings_once = double = 0
        for escalation, thread in threads.items():
            state = await auditor.threads.get_state(thread)
            records = [
                d
                for d in values_of(state["values"]).get("operator_decisions") or []
                if d.get("verdict") == "expired"
            ]
            warnings = [
                r["body"]
                for r in webhook.requests
                if isinstance(r.get("body"), dict)
                and r["body"].get("escalation_id") == escalation
                and r["body"].get("event") == DEADLINE_WARNING
            ]
            assert state["next"] == [], (thread, state["next"])
            expired_once += len(records) == 1
            warnings_once += len(warnings) == 1
            double += len(records) > 1 or len(warnings) > 1
        figure(
            "deadlines_act",
            escalations=ESCALATIONS,
            expired_once=expired_once,
            warnings_once=warnings_once,
            double=double,
        )
        assert (expired_once, warnings_once, double) == (ESCALATIONS, ESCALATIONS, 0)
        for client in [*alices, auditor]:
            await client.aclose()
