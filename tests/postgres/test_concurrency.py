"""Concurrency on PostgreSQL: 4 worker processes × 50 threads at once lose nothing and leak
nothing between threads.

Four worker processes (forked by ``tests/support/pg_worker.py``), each with its own connection pool
and engine session, run 50 threads each on one PostgreSQL database, all 200 at once (the workers
wait at a start line until every one is ready). Phase 1: every thread executes its own decision.
Phase 2 (four new workers, all 200 threads at once again): every thread, as a new turn, tries to
execute its neighbour's decision, the thread of the same index in the *next* worker process; the
engine's idempotency gate stops it, and the thread must not adopt the neighbour's receipt as its
own. Then the test reads every thread back from PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from guarantee_support import figure, log_decision, wait_until
from langchain_core.messages import AIMessage, HumanMessage
from mcp import ClientSession
from pg_worker import WorkerServer, read_progress
from postgres_support import postgres_server, postgres_url  # noqa: F401

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.serving.checkpoint_reader import read_thread_records
from algenta_graph.serving.checkpointer import open_checkpointer

WORKERS = 4
THREADS_PER_WORKER = 50


def _run_phase(
    server: WorkerServer,
    phase: str,
    jobs: list[dict[str, Any]],
    tmp_path: Path,
) -> list[dict[str, Any]]:
    """Start every worker, wait until all are ready, release them at once, wait for the ends."""
    go = tmp_path / f"go-{phase}"
    for job in jobs:
        job.update(
            job=f"{phase}-{job['job']}",
            progress=str(tmp_path / f"{phase}-{job['job']}.jsonl"),
            go=str(go),
        )
        server.submit(job)

    def all_ready() -> bool:
        return all(
            any(e["event"] in ("ready", "error") for e in read_progress(job["progress"]))
            for job in jobs
        )

    wait_until(all_ready, timeout=120, interval=0.01, what=f"{phase}: every worker ready")
    go.write_text("go")
    events: list[dict[str, Any]] = []
    for job in jobs:
        ended = server.wait_exit(job["job"], timeout=300)
        mine = read_progress(job["progress"])
        errors = [e for e in mine if e["event"] == "error"]
        assert ended.get("exit") == 0 and errors == [], (ended, errors[:2])
        events += mine
    return events


def test_four_workers_by_fifty_threads_at_once_lose_nothing_and_leak_nothing(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
) -> None:
    names = [[f"w{w}-t{i:02d}" for i in range(THREADS_PER_WORKER)] for w in range(WORKERS)]
    flat = [name for row in names for name in row]

    async def seed(row: list[str]) -> dict[str, str]:
        async with mcp_session(engine.url) as session:
            return {name: await log_decision(session, action=f"pg-conc-{name}") for name in row}

    async def seed_all() -> dict[str, str]:
        parts = await asyncio.gather(*(seed(row) for row in names))
        return {name: d for part in parts for name, d in part.items()}

    owned = asyncio.run(seed_all())
    owner = {d: name for name, d in owned.items()}
    neighbour = {
        names[w][i]: names[(w + 1) % WORKERS][i]
        for w in range(WORKERS)
        for i in range(THREADS_PER_WORKER)
    }

    def prompt(name: str, decision_id: str) -> str:
        return f"[{name}] execute decision_id={decision_id} webhook_url={webhook.url}"

    def jobs(probe: bool) -> list[dict[str, Any]]:
        return [
            {
                "job": f"w{w}",
                "db": postgres_url,
                "engine_url": engine.url,
                "pool_size": 10,
                "threads": [
                    {
                        "thread_id": name,
                        "prompt": prompt(name, owned[neighbour[name] if probe else name]),
                        "new_turn": probe,
                    }
                    for name in names[w]
                ],
            }
            for w in range(WORKERS)
        ]

    with WorkerServer(tmp_path / "worker-server.log") as server:
        phase1 = _run_phase(server, "own", jobs(probe=False), tmp_path)
        phase2 = _run_phase(server, "probe", jobs(probe=True), tmp_path)

    pids = {e["thread"]: e["pid"] for e in phase1 if e["event"] == "done"}
    probe_pids = {e["thread"]: e["pid"] for e in phase2 if e["event"] == "done"}
    assert sorted(pids) == sorted(flat) == sorted(probe_pids)
    assert len(set(pids.values())) == len(set(probe_pids.values())) == WORKERS
    # the neighbour really lives in another process, in both phases
    assert all(pids[n] != pids[neighbour[n]] for n in flat)

    async def read_back() -> tuple[dict[str, Any], dict[str, list[Any]]]:
        async with open_checkpointer(postgres_url, setup=False) as saver:
            records = await read_thread_records(saver)
            messages = {}
            for name in flat:
                item = await saver.aget_tuple({"configurable": {"thread_id": name}})
                assert item is not None, name
                messages[name] = list(item.checkpoint["channel_values"].get("messages", []))
            return records, messages

    stored, messages = asyncio.run(read_back())
    assert sorted(stored) == sorted(flat)

    lost = leaked = 0
    problems = []
    for name in flat:
        mine = [r["decision_id"] for r in stored[name]["receipts"]]
        lost += int(owned[name] not in mine)
        leaked += sum(1 for d in mine if owner.get(d) != name)
        for message in messages[name]:
            if isinstance(message, HumanMessage):
                leaked += int(f"[{name}]" not in str(message.content))
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    decision = call["args"].get("decision_id")
                    leaked += int(decision not in (owned[name], owned[neighbour[name]]))
        denials = sorted(
            (d["decision_id"], d["gate"], d["source"]) for d in stored[name]["denials"]
        )
        if mine != [owned[name]] or denials != [(owned[neighbour[name]], "idempotency", "model")]:
            problems.append({"thread": name, "records": stored[name]})

    posts = Counter(
        r["body"]["decision_id"] for r in webhook.requests if isinstance(r["body"], dict)
    )
    tagged = {
        r["body"]["decision_id"]: r["body"]["metadata"]["algenta_graph"]["thread_id"]
        for r in webhook.requests
        if isinstance(r["body"], dict)
    }
    duplicates = sum(n - 1 for n in posts.values() if n > 1)
    executions = engine.executions()
    figure(
        "postgres_concurrency",
        workers=WORKERS,
        threads_per_worker=THREADS_PER_WORKER,
        threads_at_once=WORKERS * THREADS_PER_WORKER,
        turns=len([e for e in phase1 + phase2 if e["event"] == "start"]),
        decisions=len(owned),
        receipts=sum(len(s["receipts"]) for s in stored.values()),
        denials=sum(len(s["denials"]) for s in stored.values()),
        deliveries=sum(posts.values()),
        lost=lost,
        leaked=leaked,
        duplicates=duplicates,
    )
    assert problems == [], json.dumps(problems[:5], indent=1, default=str)
    assert lost == 0
    assert leaked == 0
    assert duplicates == 0
    assert set(posts) == set(owner)
    assert tagged == {d: name for name, d in owned.items()}  # each delivery names its thread
    assert len(executions) == len(owned)
