"""Two workers resume the same escalated thread at once, on PostgreSQL: exactly one execution
at the engine, and a true record.

A low-confidence execution is escalated (the confidence gate's default policy) on each of ``ROUNDS``
threads. Then two worker processes (``tests/support/pg_worker.py``), each with its own pool and
engine session, wait at a start line and, released together, both answer every one of those
escalations with an override, each as a different operator. The webhook holds its answer for a
moment, so one override's delivery is still in flight while the other worker runs the same handler
from the same checkpoint.

Exactly one override may reach the engine and the receiver per thread, and the thread's record
read back from PostgreSQL must be true: its operator decisions name the operator whose override
the engine executed, and nobody else. The losing worker is told who won
(``EscalationAlreadyDecided``, from the escalation claim kept in the same database), and that
must be the same operator.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, TypedDict

import httpx
import pytest
from guarantee_support import figure, log_decision, wait_until
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from pg_worker import WorkerServer, read_progress
from postgres_support import PostgresServer, postgres_server  # noqa: F401

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.serving.checkpoint_reader import read_thread_records
from algenta_graph.serving.checkpointer import open_checkpointer

ROUNDS = 12
HOLD = 0.5
OPERATORS = ("ops-east", "ops-west")


@contextlib.asynccontextmanager
async def _session(url: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx.AsyncClient(timeout=30) as client,
        streamable_http_client(url, http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


class _Row(TypedDict):
    """One raced thread: what ran, what was recorded, who was told what."""

    thread: str
    raced: bool
    posts: int
    executions: int
    executed_by: list[str]
    recorded_operators: list[str]
    lost_by: str | None
    told_winner: str | None
    results: list[str]
    receipt_sources: list[str | None]


@pytest.fixture(scope="module")
def race(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: PostgresServer,  # noqa: F811
) -> Iterator[dict[str, Any]]:
    """Escalate ROUNDS threads, then let two workers answer all of them at once."""
    tmp_path = tmp_path_factory.mktemp("resume-race")
    db = postgres_server.create_database()
    with (
        # relaxed: the three gates only (this is about the graph, as the conftest engine)
        ReferenceEngine(db=tmp_path / "engine.sqlite", relaxed=True) as engine,
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
    # one escalation answered by one worker alone before the race: its claim creates the claims
    # table, so the race below is about the claim, not about creating the table (see
    # test_two_first_claims_on_a_fresh_database_both_get_an_answer for that)

    async def seed_warmup() -> str:
        async with _session(engine.url) as session:
            return await log_decision(session, action="pg-race-warmup", confidence=0.3)

    decisions["race-warmup"] = asyncio.run(seed_warmup())
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
                "threads": [spec(n) for n in threads] + [spec("race-warmup", "ops-warmup")],
            }
        )
        assert server.wait_exit("escalate").get("exit") == 0, read_progress(progress)[-3:]
        escalated = [e for e in read_progress(progress) if e["event"] == "done"]
        assert sorted(e["thread"] for e in escalated) == [*threads, "race-warmup"]
        raced = [e for e in escalated if e["thread"] in threads]
        assert all(e["interrupts"] == 1 and e["receipts"] == [] for e in raced)
        [warmup] = [e for e in escalated if e["thread"] == "race-warmup"]
        assert [d["operator"] for d in warmup["operator_decisions"]] == ["ops-warmup"]

        # 2. two workers answer every escalation at once, as different operators
        go = tmp_path / "go"
        jobs: list[dict[str, Any]] = []
        for operator in OPERATORS:
            job: dict[str, Any] = {
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
    lost = {
        e["thread"]: (op, e["winner"])
        for op in OPERATORS
        for e in events[op]
        if e["event"] == "lost"
    }
    rows: list[_Row] = []
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
                "lost_by": lost.get(name, (None, None))[0],
                "told_winner": lost.get(name, (None, None))[1],
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
        losers_told=sum(1 for r in rows if r["lost_by"]),
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


def test_two_workers_resuming_one_escalation_record_the_operator_whose_override_ran(
    race: dict[str, Any],
) -> None:
    rows = race["rows"]
    false = [r for r in rows if r["recorded_operators"] != r["executed_by"]]
    assert false == [], json.dumps(false, indent=1)
    # whenever both workers answered, the loser was told the winner: the one that executed
    for r in rows:
        if r["raced"]:
            assert r["lost_by"] in OPERATORS and r["lost_by"] not in r["executed_by"], r
            assert [r["told_winner"]] == r["executed_by"], r


FRESH_DATABASES = 12


async def test_two_first_claims_on_a_fresh_database_both_get_an_answer(
    postgres_server: PostgresServer,  # noqa: F811
) -> None:
    """Two ledgers (two pools: as two processes) make the first claim at once, on
    ``FRESH_DATABASES`` new databases: each must get a claim back (the same one), never an
    error."""
    from algenta_graph.ledger import ClaimAnswer, new_entry, open_ledger

    def answer(operator: str) -> ClaimAnswer:
        return ClaimAnswer(operator=operator, decisions=[])

    errors = []
    for _ in range(FRESH_DATABASES):
        url = postgres_server.create_database()
        async with open_ledger(url) as east, open_ledger(url) as west:
            answers = await asyncio.gather(
                east.insert(new_entry("escalation", answer("ops-east"))),
                west.insert(new_entry("escalation", answer("ops-west"))),
                return_exceptions=True,
            )
        errors += [repr(a)[:200] for a in answers if isinstance(a, BaseException)]
        if not errors:
            assert answers[0] == answers[1]
    assert errors == []
