"""Crash and takeover on PostgreSQL: a worker process is SIGKILLed mid-run and another worker,
already running its own threads on the same database, finishes the dead worker's threads.

One reference engine (real HTTP, in the test process), one real webhook receiver, one PostgreSQL
database. Each cycle forks two worker processes from ``tests/support/pg_worker.py`` (side by side
with the other lane's two, so four workers share the database at once):

- the **victim** runs two threads: ``v1`` delivers through a webhook that holds its answer for
  ``HOLD`` seconds, ``v2`` through one that holds it for ``STRAGGLER_HOLD`` seconds (so the
  victim is always still running when its kill point comes);
- the **survivor** runs two threads of its own, then waits to be handed the victim's threads.

The victim is SIGKILLed at the cycle's point (``startup``: the graph is built; ``retrieve`` /
``model`` / ``tool``: right after ``v1``'s node streamed its update; ``webhook``: the receiver
has ``v1``'s POST, the delivery is in flight and no checkpoint records it; ``random``), then
the survivor resumes both of its threads from the database (``ainvoke(None, config)``, or the
first input when the victim died before writing any checkpoint). Durability alternates
between ``sync`` and ``async`` (checkpoints written in the background).

Every decision must be POSTed to the receiver exactly once, recorded once by the engine, and
have exactly one receipt in its thread's state as read back from PostgreSQL at the end.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from guarantee_support import figure, log_decision
from mcp import ClientSession
from pg_worker import WorkerServer, read_progress
from postgres_support import postgres_server, postgres_url  # noqa: F401

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.serving.checkpoint_reader import read_thread_records
from algenta_graph.serving.checkpointer import open_checkpointer

KILL_POINTS = ("startup", "retrieve", "model", "webhook", "tool", "random", "webhook")
DURABILITIES = ("sync", "async")
CYCLES = 21
LANES = 2
HOLD = 0.4
STRAGGLER_HOLD = 1.5
RANDOM_KILL = (0.05, 1.1)  # seconds after the victim is ready; always before v2 can finish


def _posts_for(hook: WebhookReceiver, decision_id: str) -> int:
    return sum(
        1
        for r in hook.requests
        if isinstance(r["body"], dict) and r["body"].get("decision_id") == decision_id
    )


def _trigger(
    point: str, events: list[dict[str, Any]], hook: WebhookReceiver, v1: str, v1_thread: str
) -> bool:
    if any(e["event"] in ("exit", "error") for e in events):
        return True  # too late: the victim ended by itself (the cycle then fails its count)
    if point in ("startup", "random"):
        return any(e["event"] == "ready" for e in events)
    if point == "webhook":
        return _posts_for(hook, v1) > 0
    node = {"retrieve": "retrieve_tools", "model": "model", "tool": "governed_tool"}[point]
    return any(
        e["event"] == "update" and e.get("thread") == v1_thread and e.get("node") == node
        for e in events
    )


def _kill_at(
    point: str,
    progress: Path,
    pid: int,
    hook: WebhookReceiver,
    v1: tuple[str, str],
    rng: random.Random,
) -> bool:
    """Wait for ``point`` (polling every millisecond), then SIGKILL ``pid``; True if it died."""
    deadline = time.monotonic() + 60
    size, events = -1, []
    while True:
        now = progress.stat().st_size if progress.exists() else 0
        if now != size:
            size, events = now, read_progress(progress)
        if _trigger(point, events, hook, *v1):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"kill point {point!r} never came for pid {pid}")
        time.sleep(0.001)
    if point == "random":
        time.sleep(rng.uniform(*RANDOM_KILL))
    if any(e["event"] in ("exit", "error") for e in read_progress(progress)):
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def _cycle(
    server: WorkerServer,
    cycle: int,
    decisions: dict[str, str],
    *,
    db: str,
    engine: ReferenceEngine,
    hook: WebhookReceiver,
    tmp_path: Path,
    rng: random.Random,
) -> dict[str, Any]:
    point = KILL_POINTS[cycle % len(KILL_POINTS)]
    durability = DURABILITIES[(cycle + cycle // len(KILL_POINTS)) % 2]
    urls = {
        "v1": hook.url_for_delay(HOLD),
        "v2": hook.url_for_delay(STRAGGLER_HOLD),
        "s1": hook.url,
        "s2": hook.url,
    }

    def spec(key: str) -> dict[str, str]:
        # thread ids are unique per cycle; the worker reports events under the full id
        return {
            "thread_id": f"pg-crash-{cycle:02d}-{key}",
            "prompt": f"execute decision_id={decisions[key]} webhook_url={urls[key]}",
        }

    takeover = tmp_path / f"takeover-{cycle:02d}.json"
    survivor_progress = tmp_path / f"c{cycle:02d}-survivor.jsonl"
    victim_progress = tmp_path / f"c{cycle:02d}-victim.jsonl"
    common = {"db": db, "engine_url": engine.url, "durability": durability, "pool_size": 4}
    survivor = server.submit(
        {
            **common,
            "job": f"c{cycle:02d}-survivor",
            "progress": str(survivor_progress),
            "threads": [spec("s1"), spec("s2")],
            "takeover": str(takeover),
        }
    )
    victim_threads = [spec("v1"), spec("v2")]
    victim = server.submit(
        {
            **common,
            "job": f"c{cycle:02d}-victim",
            "progress": str(victim_progress),
            "threads": victim_threads,
        }
    )
    v1 = (decisions["v1"], victim_threads[0]["thread_id"])
    killed = _kill_at(point, victim_progress, victim, hook, v1, rng)
    ended = server.wait_exit(f"c{cycle:02d}-victim")
    killed = killed and ended.get("signal") == signal.SIGKILL
    tmp = takeover.with_suffix(".tmp")
    tmp.write_text(json.dumps(victim_threads), encoding="utf-8")
    tmp.rename(takeover)  # the survivor sees the whole file or none
    finished = server.wait_exit(f"c{cycle:02d}-survivor")
    events = read_progress(survivor_progress)
    errors = [e for e in events if e["event"] == "error"]
    assert finished.get("exit") == 0 and errors == [], (finished, errors)
    done = {e["thread"]: e for e in events if e["event"] == "done"}
    taken = {s["thread_id"] for s in victim_threads}
    first_modes: dict[str, str] = {}
    for e in events:
        if e["event"] == "start" and e["thread"] in taken:
            first_modes.setdefault(e["thread"], e["mode"])
    return {
        "cycle": cycle,
        "point": point,
        "durability": durability,
        "killed": killed,
        "takeover_modes": sorted(first_modes.values()),
        "victim_pid": victim,
        "survivor_pid": survivor,
        "threads": {
            key: {
                "thread_id": spec(key)["thread_id"],
                "decision_id": decisions[key],
                "done_next": done[spec(key)["thread_id"]]["next"],
                "done_interrupts": done[spec(key)["thread_id"]]["interrupts"],
            }
            for key in urls
        },
    }


def test_a_worker_killed_anywhere_is_taken_over_and_every_decision_is_delivered_once(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
) -> None:
    async def seed() -> list[dict[str, str]]:
        async with mcp_session(engine.url) as session:
            return [
                {
                    key: await log_decision(session, action=f"pg-crash-{n:02d}-{key}")
                    for key in ("v1", "v2", "s1", "s2")
                }
                for n in range(CYCLES)
            ]

    decisions = asyncio.run(seed())
    with WorkerServer(tmp_path / "worker-server.log") as server:

        def lane(index: int) -> list[dict[str, Any]]:
            rng = random.Random(20261130 + index)
            return [
                _cycle(
                    server,
                    n,
                    decisions[n],
                    db=postgres_url,
                    engine=engine,
                    hook=webhook,
                    tmp_path=tmp_path,
                    rng=rng,
                )
                for n in range(CYCLES)
                if n % LANES == index
            ]

        with ThreadPoolExecutor(LANES) as pool:
            summary = [row for rows in pool.map(lane, range(LANES)) for row in rows]

    time.sleep(STRAGGLER_HOLD)  # any held webhook answer has finished before counting

    async def read_back() -> dict[str, dict[str, list[Any]]]:
        async with open_checkpointer(postgres_url, setup=False) as saver:
            return await read_thread_records(saver)

    stored = asyncio.run(read_back())
    posts = Counter(
        r["body"]["decision_id"] for r in webhook.requests if isinstance(r["body"], dict)
    )
    duplicates = lost = delivered_once = recovered = 0
    problems: list[dict[str, Any]] = []
    for row in summary:
        for key, t in row["threads"].items():
            decision_id = t["decision_id"]
            records = stored.get(t["thread_id"], {"receipts": [], "denials": []})
            receipts = [r for r in records["receipts"] if r["decision_id"] == decision_id]
            delivered = [
                e
                for e in engine.executions(decision_id)
                if e.get("execution_status") == "delivered"
            ]
            duplicates += max(0, posts[decision_id] - 1) + max(0, len(delivered) - 1)
            duplicates += max(0, len(receipts) - 1)
            lost += int(not receipts)
            once = (
                posts[decision_id] == 1
                and len(delivered) == 1
                and len(receipts) == 1
                and receipts[0]["execution_status"] == "delivered"
                and records["denials"] == []  # a crash never turns into an idempotency denial
                and t["done_next"] == []
                and t["done_interrupts"] == 0
            )
            delivered_once += int(once)
            recovered += int(once and receipts[0].get("source") == "recovered")
            if not once:
                problems.append(
                    {
                        "cycle": row["cycle"],
                        "point": row["point"],
                        "durability": row["durability"],
                        "thread": key,
                        "posts": posts[decision_id],
                        "executions": len(delivered),
                        "stored": records,
                    }
                )

    kills = sum(int(r["killed"]) for r in summary)
    modes = Counter(m for r in summary for m in r["takeover_modes"])
    figure(
        "postgres_crash_takeover",
        cycles=len(summary),
        kills=kills,
        workers=2 * len(summary),
        workers_at_once=2 * LANES,
        async_cycles=sum(1 for r in summary if r["durability"] == "async"),
        decisions=4 * len(summary),
        delivered_once=delivered_once,
        recovered_from_engine=recovered,
        taken_over_fresh=modes["fresh"],
        taken_over_resumed=modes["resume"],
        lost=lost,
        duplicates=duplicates,
    )
    assert len(summary) == CYCLES >= 20
    assert kills == len(summary), [(r["cycle"], r["point"]) for r in summary if not r["killed"]]
    assert problems == [], json.dumps(problems, indent=1, default=str)[:6000]
    assert duplicates == 0
    assert lost == 0
    assert delivered_once == 4 * CYCLES
    # every "webhook" kill fell between the delivery and any checkpoint of it: the survivor
    # recorded the engine's receipt instead of delivering again
    assert recovered >= sum(1 for r in summary if r["point"] == "webhook")
