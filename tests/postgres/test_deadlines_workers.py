"""Deadlines act once across two served workers on one PostgreSQL database.

Two ``langgraph dev`` processes serve the graph through the server checkpointer on one real
PostgreSQL database (the ledger there too); every thread is known to both (registered on the
second under the same id), and each runs its deadline watcher
(``algenta_graph.serving.deadline_watcher``), so both meet every escalation's warning window and
its deadline, round after round. Nobody answers. Counted per escalation: the webhook receiver got
exactly one warning notice, and the thread's checkpoints record exactly one operator decision
``expired``, as the auditor reads them where they are kept (PostgreSQL: each worker's own thread
registry knows only the threads it ran); ``algenta-graph escalations --db`` shows nothing
waiting; an operator answering later is refused by name on either worker, and nothing runs.
A thread whose worker stopped before its deadline is recorded expired by the other one.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from guarantee_support import figure
from inbox_support import served_files
from postgres_support import postgres_server, postgres_url  # noqa: F401
from served_support import bearer, escalate, langgraph_dev

from algenta_graph.deadlines import list_waiting
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.governance.notice_signing import new_secret
from algenta_graph.governance.notifications import DEADLINE_WARNING
from algenta_graph.ledger import connect_ledger
from algenta_graph.serving.checkpoint_reader import read_thread_records
from algenta_graph.serving.checkpointer import open_checkpointer
from algenta_graph.serving.deadline_watcher import EXPIRY_OPERATOR

pytestmark = pytest.mark.timeout(900)

ESCALATIONS = 6
EXPIRES_AFTER = 12
WARN_BEFORE = 9


def two_workers(
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
    expires_after: int,
) -> tuple[Path, dict[str, str]]:
    """The workers' ``langgraph.json`` and environment: confidence deadlines of
    ``expires_after`` seconds, warned of ``WARN_BEFORE`` seconds before, checked every half
    second, notices to ``webhook``; checkpoints and ledger in ``postgres_url``."""
    settings = (
        "[escalation]\n"
        f"expires_after = {{confidence = {expires_after}}}\n"
        f"warn_before = {{confidence = {WARN_BEFORE}}}\n"
        "check_every = 0.5\n"
        "[escalation.notify]\n"
        f'url = "{webhook.url}"\n'
        'secret = {env = "ALGENTA_TEST_NOTIFY_SECRET"}\n'
    )
    return served_files(
        engine,
        tmp_path,
        settings,
        checkpoints=postgres_url,
        ALGENTA_TEST_NOTIFY_SECRET=new_secret(),
    )


async def expired_records(postgres_url: str) -> dict[str, list[dict[str, Any]]]:  # noqa: F811
    """Once nothing waits in the database (the auditor's view): each thread's ``expired``."""
    async with open_checkpointer(postgres_url, setup=False) as saver:
        ledger, opened = await connect_ledger(postgres_url)
        try:
            deadline = time.monotonic() + 300
            while waiting := await list_waiting(saver, ledger, datetime.now(timezone.utc)):
                states = sorted(w.state for w in waiting)
                assert time.monotonic() < deadline, f"still waiting: {states}"
                await asyncio.sleep(0.5)
        finally:
            if opened:
                await ledger.aclose()
        await asyncio.sleep(3)  # more rounds of both watchers: nothing more may happen
        records = await read_thread_records(saver)
    return {
        thread: [d for d in kept["operator_decisions"] if d.get("verdict") == "expired"]
        for thread, kept in records.items()
    }


async def late_answer(url: str, thread: str) -> str:
    """ana approves ``thread`` on the server at ``url``: the refusal (HTTP 409), else the run's
    error, as the auditor reads it there (ana may no longer read a thread that waits for
    nobody)."""
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        answer = await http.post(
            f"/threads/{thread}/runs/wait",
            json={
                "assistant_id": "governed_agent",
                "command": {"resume": {"decisions": [{"type": "approve"}]}},
                "multitask_strategy": "enqueue",
            },
            headers=bearer("tok-ana"),
        )
    if answer.status_code == 409:  # refused before any run (the server read the thread)
        return answer.text
    where = answer.headers.get("content-location", "")
    assert f"/threads/{thread}/runs/" in where, (answer.status_code, answer.text[:300])
    async with httpx.AsyncClient(
        base_url=url, timeout=300, headers=bearer("tok-audrey")
    ) as auditor:
        run = (await auditor.get(where)).json()
        said = (await auditor.get(f"{where}/join")).text
    assert run["status"] == "error", (run, said[:300])
    return said


async def test_two_workers_warn_once_and_expire_once_per_escalation(
    postgres_url: str,  # noqa: F811
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    tmp_path: Path,
) -> None:
    from langgraph_sdk import get_client

    config_path, env = two_workers(engine, webhook, tmp_path, postgres_url, EXPIRES_AFTER)
    with (
        langgraph_dev(config_path, workdir=tmp_path / "one", env=env) as one,
        langgraph_dev(config_path, workdir=tmp_path / "two", env=env) as two,
    ):
        servers = [one, two]
        alices = [get_client(url=s.url, headers=bearer("tok-alice")) for s in servers]
        threads: dict[str, str] = {}  # escalation -> thread
        decisions: dict[str, str] = {}  # thread -> the engine decision it escalated
        for n in range(ESCALATIONS):
            home, other = alices[n % 2], alices[(n + 1) % 2]
            thread, decision, asked = await escalate(home, webhook.url)
            # the other worker knows the thread too (one deployment's shared thread list)
            await other.threads.create(thread_id=thread, if_exists="do_nothing")
            [item] = asked["escalations"]
            threads[str(item["escalation_id"])] = thread
            decisions[thread] = decision

        # nobody answers: both watchers warn and expire, round after round
        expired = await expired_records(postgres_url)

        expired_once = warnings_once = double = 0
        for escalation, thread in threads.items():
            records = expired[thread]
            warnings = [
                r["body"]
                for r in webhook.requests
                if isinstance(r.get("body"), dict)
                and r["body"].get("escalation_id") == escalation
                and r["body"].get("event") == DEADLINE_WARNING
            ]
            assert all(r["operator"] == EXPIRY_OPERATOR for r in records), records
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
        assert expired_once == ESCALATIONS, expired
        assert warnings_once == ESCALATIONS, webhook.requests
        assert double == 0

        # an operator answering now is refused by name on either worker, and nothing runs
        for thread in threads.values():
            for server in servers:
                said = await late_answer(server.url, thread)
                assert "EscalationAlreadyDecided" in said, (server.url, said[:500])
                assert EXPIRY_OPERATOR in said, (server.url, said[:500])
        assert await expired_records(postgres_url) == expired  # nothing recorded since
        executed = [
            r
            for r in webhook.requests
            if isinstance(r.get("body"), dict)
            and r["body"].get("decision_id") in decisions.values()
            and "escalation_id" not in r["body"]  # a notice, not the engine's delivery
        ]
        assert executed == [], executed
        for client in alices:
            await client.aclose()

    # the operator's listing of the database: nothing waits
    listing = subprocess.run(
        [sys.executable, "-m", "algenta_graph.cli", "escalations", "--db", postgres_url],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert listing.returncode == 0, listing.stderr
    assert "nothing waits for an operator" in listing.stdout, listing.stdout


async def test_the_other_worker_records_the_expiry_of_a_stopped_workers_thread(
    postgres_url: str,  # noqa: F811
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    tmp_path: Path,
) -> None:
    from langgraph_sdk import get_client

    # a deadline well after worker one is stopped: worker two alone expires and records
    config_path, env = two_workers(engine, webhook, tmp_path, postgres_url, 2 * EXPIRES_AFTER)
    threads: list[str] = []
    with langgraph_dev(config_path, workdir=tmp_path / "two", env=env) as two:
        alice_two = get_client(url=two.url, headers=bearer("tok-alice"))
        with langgraph_dev(config_path, workdir=tmp_path / "one", env=env) as one:
            alice_one = get_client(url=one.url, headers=bearer("tok-alice"))
            for _ in range(2):
                thread, _, _ = await escalate(alice_one, webhook.url)
                await alice_two.threads.create(thread_id=thread, if_exists="do_nothing")
                threads.append(thread)
            await alice_one.aclose()
            waiting = {w.thread_id for w in await waiting_now(postgres_url)}
            assert waiting == set(threads), waiting  # not yet expired when worker one stops

        # worker one is gone (its runs, its thread registry); worker two only registered them
        expired = await expired_records(postgres_url)
        assert {t: len(expired[t]) for t in threads} == dict.fromkeys(threads, 1), expired
        for thread in threads:
            said = await late_answer(two.url, thread)
            assert "EscalationAlreadyDecided" in said and EXPIRY_OPERATOR in said, said[:500]
        await alice_two.aclose()


async def waiting_now(postgres_url: str) -> list[Any]:  # noqa: F811
    """What waits for an operator in the database now (claimed expiries included)."""
    async with open_checkpointer(postgres_url, setup=False) as saver:
        ledger, opened = await connect_ledger(postgres_url)
        try:
            return [
                w
                for w in await list_waiting(saver, ledger, datetime.now(timezone.utc))
                if w.state in ("waiting", "overdue")
            ]
        finally:
            if opened:
                await ledger.aclose()
