"""Two workers resume the same escalated thread at once, on PostgreSQL: exactly one execution
at the engine, and a true record.

A low-confidence execution is escalated (the confidence gate's default policy) on each of
``ROUNDS`` threads. Then two worker processes (``pg_worker.py``), each with its own pool and
engine session, wait at a start line and, released together, both answer every one of those
escalations with an override, each as a different operator. The webhook holds its answer
for a moment, so one override's delivery is still in flight while the other worker runs the
same handler from the same checkpoint.

Exactly one override may reach the engine and the receiver per thread (one test), and the
thread's record read back from PostgreSQL must be true: its operator decisions name the
operator whose override the engine executed, and nobody else (another test; it fails on the
current graph, see ``GRAPH_BUG``, and is marked as an expected failure until that is fixed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from guarantee_support import figure, log_decision, wait_until
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from pg_worker import WorkerServer, read_progress
from postgres_support import PostgresServer, postgres_server  # noqa: F401

from algenta_graph.checkpointer import open_checkpointer, read_thread_records
from algenta_graph.engine import ReferenceEngine, WebhookReceiver

pytestmark = pytest.mark.slow

ROUNDS = 12
HOLD = 0.5
OPERATORS = ("ops-east", "ops-west")
GRAPH_BUG = (
    "graph bug (issue 10 item 5): the losing resume finds the winner's override execution "
    "(same thread and tool call) and records it as its own operator's; the last checkpoint "
    "written wins, so the thread often names the operator whose override did not run"
)


@contextlib.asynccontextmanager
async def _session(url: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx.AsyncClient(timeout=30) as client,
        streamable_http_client(url, http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@pytest.fixture(scope="module")
def race(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: PostgresServer,  # noqa: F811
) -> Iterator[dict[str, Any]]:
    """Escalate ROUNDS threads, then let two workers answer all of them at once."""
    tmp_path = tmp_path_factory.mktemp("resume-race")
    db = postgres_server.create_database()
    with (
        ReferenceEngine(db=tmp_path / "engine.sqlite") as engine,
        WebhookReceiver(log_path=tmp_path / "webhook.jsonl") as webhook,
    ):
        yield _run_race(tmp_path, db, engine, webhook)


def _run_race(
    tmp_path: Path, db: str, engine: ReferenceEngine, webhook: WebhookReceiver
) -> dict[str, Any]:
    threads = [f"race-{n:02d}" for n in range(ROUNDS)]

    async def seed() -> dict[str, str]:
        async with _session(engine.url) as session:
            return {
                name: await log_decision(session, action=f"pg-{name}", confidence=0.3)
                for name in threads
            }

    decisions = asyncio.run(seed())
    url = webhook.url_for_delay(HOLD)

    def spec(name: str, operator: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "thread_id": name,
            "prompt": f"execute decision_id={decisions[name]} webhook_url={url}",
        }
        if operator:
            out["resume_command"] = {
                "action": "override",
                "operator": operator,
                "reason": f"{operator} approves",
            }
        return out

    common = {"db": db, "engine_url": engine.url, "pool_size": 4}
    with WorkerServer(tmp_path / "worker-server.log") as server:
        # 1. every thread's execution is denied by the confidence gate and escalated
        progress = tmp_path / "escalate.jsonl"
        server.submit(
            {
                **common,
                "job": "escalate",
                "progress": str(progress),
                "threads": [spec(n) for n in threads],
            }
        )
        assert server.wait_exit("escalate").get("exit") == 0, read_progress(progress)[-3:]
        escalated = [e for e in read_progress(progress) if e["event"] == "done"]
        assert sorted(e["thread"] for e in escalated) == threads
        assert all(e["interrupts"] == 1 and e["receipts"] == [] for e in escalated)

        # 2. two workers answer every escalation at once, as different operators
        go = tmp_path / "go"
        jobs = []
        for operator in OPERATORS:
            job = {
                **common,
                "job": operator,
                "progress": str(tmp_path / f"{operator}.jsonl"),
                "threads": [spec(n, operator) for n in threads],
                "go": str(go),
            }
            server.submit(job)
            jobs.append(job)
        wait_until(
            lambda: all(
                any(e["event"] in ("ready", "error") for e in read_progress(j["progress"]))
                for j in jobs
            ),
            timeout=120,
            what="both workers ready",
        )
        go.write_text("go")
        events: dict[str, list[dict[str, Any]]] = {}
        for job in jobs:
            ended = server.wait_exit(job["job"])
            events[job["job"]] = read_progress(job["progress"])
            errors = [e for e in events[job["job"]] if e["event"] == "error"]
            assert ended.get("exit") == 0 and errors == [], (ended, errors[:2])

    # any override delivery still held by the receiver is recorded before counting
    wait_until(
        lambda: all(
            len(engine.executions(decisions[n]))
            == sum(
                1
                for r in webhook.requests
                if isinstance(r["body"], dict) and r["body"].get("decision_id") == decisions[n]
            )
            for n in threads
        ),
        timeout=30,
        what="the engine to record every delivery",
    )

    async def read_back() -> dict[str, dict[str, list[Any]]]:
        async with open_checkpointer(db, setup=False) as saver:
            return await read_thread_records(saver)

    stored = asyncio.run(read_back())
    posts = Counter(
        r["body"]["decision_id"] for r in webhook.requests if isinstance(r["body"], dict)
    )
    answered = {
        op: {e["thread"] for e in events[op] if e["event"] == "start" and e["mode"] == "answer"}
        for op in OPERATORS
    }
    rows = []
    for name in threads:
        decision_id = decisions[name]
        executions = engine.executions(decision_id)
        record = stored[name]
        rows.append(
            {
                "thread": name,
                "raced": all(name in answered[op] for op in OPERATORS),
                "posts": posts[decision_id],
                "executions": len(executions),
                "executed_by": [
                    e["metadata"]["algenta_graph"]["operator"]
                    for e in executions
                    if isinstance(e.get("metadata"), dict)
                ],
                "recorded_operators": [d["operator"] for d in record["operator_decisions"]],
                "results": [d["result"] for d in record["operator_decisions"]],
                "receipt_sources": [
                    r.get("source") for r in record["receipts"] if r["decision_id"] == decision_id
                ],
            }
        )
    true_records = sum(1 for r in rows if r["recorded_operators"] == r["executed_by"])
    figure(
        "postgres_resume_race",
        rounds=ROUNDS,
        raced=sum(1 for r in rows if r["raced"]),
        executions=sum(r["executions"] for r in rows),
        posts=sum(r["posts"] for r in rows),
        duplicates=sum(max(0, r["executions"] - 1) + max(0, r["posts"] - 1) for r in rows),
        true_records=true_records,
        false_records=ROUNDS - true_records,
    )
    return {"rows": rows}


def test_two_workers_resuming_one_escalation_execute_it_exactly_once(
    race: dict[str, Any],
) -> None:
    rows = race["rows"]
    assert sum(1 for r in rows if r["raced"]) >= ROUNDS // 2  # the workers really raced
    problems = [
        r
        for r in rows
        if not (
            r["executions"] == 1
            and r["posts"] == 1
            and r["results"] == ["receipt"]
            and r["receipt_sources"] == ["operator"]
            and len(r["recorded_operators"]) == 1
        )
    ]
    assert problems == [], json.dumps(problems, indent=1)


@pytest.mark.xfail(strict=True, reason=GRAPH_BUG)
def test_two_workers_resuming_one_escalation_record_the_operator_whose_override_ran(
    race: dict[str, Any],
) -> None:
    false = [r for r in race["rows"] if r["recorded_operators"] != r["executed_by"]]
    assert false == [], json.dumps(false, indent=1)
