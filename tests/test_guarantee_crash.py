"""Crash and resume: SIGKILL the graph's process anywhere, resume, and every decision is
delivered exactly once with its receipt in the thread's state.

The reference engine and the webhook receiver run in the test process; the graph runs in
child processes of ``crash_worker.py`` (a fork server), each opening the same SQLite
checkpoint file. Each cycle logs one decision, starts a thread that executes it, kills the
process with SIGKILL at a chosen point, and resumes the thread in new processes until it ends:

- ``startup``: as soon as the graph is built, before the run starts;
- ``retrieve`` / ``model``: right after that node's update is streamed;
- ``webhook``: the moment the webhook receiver has the POST (the receiver holds its answer for
  a moment, so the process dies while ``execute_decision`` is in flight: after the delivery,
  before any checkpoint records it);
- ``tool``: right after ``governed_tool`` has streamed its receipt (the checkpoint write may or
  may not have happened, which is what the ``async`` durability cycles probe);
- ``random``: after a random delay;
- ``twice``: kill at the POST, then kill the first resume right after its ``governed_tool``.

Half the cycles run with ``durability="async"`` (LangGraph's default: checkpoints are written
in the background), half with the graph's own ``"sync"`` default; every kill point meets both.

The operator path gets the same treatment: a low-confidence execution is escalated, the
operator's override is killed (at the POST, after the handler, at random) and resumed, at once
or after the engine has recorded the delivery; the override is delivered once and its receipt
and operator decision are in state.
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

import pytest
from crash_worker import ForkServer, read_progress
from guarantee_support import figure, log_decision, wait_until
from mcp import ClientSession

from algenta_graph.engine import ReferenceEngine, WebhookReceiver

pytestmark = pytest.mark.slow

KILL_POINTS = ("startup", "retrieve", "model", "webhook", "tool", "random", "twice", "webhook")
DURABILITIES = ("async", "sync")
CYCLES = 24
LANES = 2  # two fork servers run cycles side by side
WEBHOOK_HOLD_SECONDS = 0.4


def _posts_for(hook: WebhookReceiver, decision_id: str) -> list[dict[str, Any]]:
    return [
        r
        for r in hook.requests
        if isinstance(r["body"], dict) and r["body"].get("decision_id") == decision_id
    ]


def _events(path: Path, pid: int) -> list[dict[str, Any]]:
    return [e for e in read_progress(path) if e.get("pid") == pid]


def _trigger(
    point: str, events: list[dict[str, Any]], hook: WebhookReceiver, decision: str
) -> bool:
    """Whether the moment to kill at ``point`` has come (or passed: the child ended)."""
    if any(e["event"] in ("done", "error") for e in events):
        return True
    if point == "startup":
        return any(e["event"] == "start" for e in events)
    if point in ("webhook", "twice"):
        return bool(_posts_for(hook, decision))
    node = {
        "retrieve": "retrieve_tools",
        "model": "model",
        "tool": "governed_tool",
        "handler": "denial_handler_confidence",
    }[point]
    return any(e["event"] == "update" and e.get("node") == node for e in events)


def _kill_when(
    point: str, path: Path, pid: int, hook: WebhookReceiver, decision_id: str, rng: random.Random
) -> bool:
    """Wait for ``point`` (polling every millisecond), then SIGKILL ``pid``.

    Returns False when the child had already finished by then (nothing left to kill).
    """
    deadline = time.monotonic() + 60
    if point == "random":
        time.sleep(rng.uniform(0.05, 1.5))
    else:
        size, events = -1, []
        while True:
            now = path.stat().st_size if path.exists() else 0
            if now != size:  # parse the progress file only when it grew
                size, events = now, _events(path, pid)
            if _trigger(point, events, hook, decision_id):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"kill point {point!r} never came for pid {pid}")
            time.sleep(0.001)
    if any(e["event"] in ("done", "error") for e in _events(path, pid)):
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended between the check and the kill
        return False
    return True


def _cycle(
    server: ForkServer,
    cycle: int,
    decision_id: str,
    *,
    engine: ReferenceEngine,
    hook: WebhookReceiver,
    tmp_path: Path,
    rng: random.Random,
) -> dict[str, Any]:
    """One cycle: run the thread, kill it at the cycle's point, resume until it has ended."""
    point = KILL_POINTS[cycle % len(KILL_POINTS)]
    # alternate durability, flipping each round, so every kill point meets both
    durability = DURABILITIES[(cycle + cycle // len(KILL_POINTS)) % 2]
    thread = f"crash-thread-{cycle:02d}"
    held = point in ("webhook", "twice")
    url = hook.url_for_delay(WEBHOOK_HOLD_SECONDS) if held else hook.url
    jobs = 0

    def run() -> tuple[str, int, Path]:
        nonlocal jobs
        jobs += 1
        job_id = f"c{cycle:02d}-{jobs}"
        progress = tmp_path / f"{job_id}.jsonl"
        job = {
            "job": job_id,
            "thread_id": thread,
            "prompt": f"execute decision_id={decision_id} webhook_url={url}",
            "engine_url": engine.url,
            "db": str(tmp_path / "checkpoints.sqlite"),
            "progress": str(progress),
            "durability": durability,
        }
        return job_id, server.submit(job), progress

    kills = killed_mid_run = resumes = 0
    # 1. the first run, killed at its point; 2. for "twice", the first resume too
    for kill_at in [point, "tool"] if point == "twice" else [point]:
        job_id, pid, progress = run()
        kills += int(_kill_when(kill_at, progress, pid, hook, decision_id, rng))
        ended = server.wait_exit(job_id)
        killed_mid_run += int(ended.get("signal") == signal.SIGKILL)
        errors = [e for e in _events(progress, pid) if e["event"] == "error"]
        assert errors == [], errors
    # 3. resume in a new process until the thread has ended
    for _ in range(3):
        job_id, pid, progress = run()
        ended = server.wait_exit(job_id)
        resumes += 1
        events = _events(progress, pid)
        assert ended.get("exit") == 0, (ended, events)
        done = [e for e in events if e["event"] == "done"]
        if done and not done[-1]["next"]:
            break
    else:
        raise AssertionError(f"thread {thread} did not finish after 3 resumes")
    return {
        "decision_id": decision_id,
        "point": point,
        "durability": durability,
        "receipts": [r for r in done[-1]["receipts"] if r["decision_id"] == decision_id],
        "denials": done[-1]["denials"],
        "kills": kills,
        "killed_mid_run": killed_mid_run,
        "resumes": resumes,
    }


def test_sigkill_anywhere_then_resume_delivers_every_decision_exactly_once(
    tmp_path: Path,
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
) -> None:
    hook = webhook

    async def seed() -> list[str]:
        async with mcp_session(engine.url) as session:
            return [
                await log_decision(session, action=f"crash-cycle-{i:02d}") for i in range(CYCLES)
            ]

    decisions = asyncio.run(seed())

    def lane(index: int) -> list[dict[str, Any]]:
        """Every LANES-th cycle, on this lane's own fork server, one after another."""
        rng = random.Random(20261130 + index)
        with ForkServer(tmp_path / f"fork-server-{index}.log") as server:
            return [
                _cycle(server, n, d, engine=engine, hook=hook, tmp_path=tmp_path, rng=rng)
                for n, d in enumerate(decisions)
                if n % LANES == index
            ]

    with ThreadPoolExecutor(LANES) as pool:
        summary = [row for rows in pool.map(lane, range(LANES)) for row in rows]

    # Wait for every held webhook answer to finish before counting.
    time.sleep(WEBHOOK_HOLD_SECONDS)
    posts = Counter(r["body"]["decision_id"] for r in hook.requests if isinstance(r["body"], dict))
    calls = Counter(
        c["arguments"].get("decision_id")
        for c in engine.call_log()
        if c["name"] == "execute_decision"
    )
    kills = sum(r["kills"] for r in summary)
    killed_mid_run = sum(r["killed_mid_run"] for r in summary)
    resumes = sum(r["resumes"] for r in summary)

    duplicates = 0
    delivered_once = 0
    recovered = 0
    problems: list[dict[str, Any]] = []
    for row in summary:
        decision_id = row["decision_id"]
        delivered = [
            e for e in engine.executions(decision_id) if e.get("execution_status") == "delivered"
        ]
        receipts = row["receipts"]
        duplicates += max(0, posts[decision_id] - 1)
        duplicates += max(0, len(delivered) - 1) + max(0, len(receipts) - 1)
        exactly_once = (
            posts[decision_id] == 1
            and len(delivered) == 1
            and len(receipts) == 1
            and receipts[0]["execution_status"] == "delivered"
            and receipts[0]["safety_overridden"] is False
            and row["denials"] == []  # a crash never turns into an idempotency denial
        )
        if exactly_once:
            delivered_once += 1
            recovered += int(receipts[0].get("source") == "recovered")
        else:
            problems.append({**row, "posts": posts[decision_id], "executions": len(delivered)})

    figure(
        "crash_resume",
        cycles=len(summary),
        kills=kills,
        killed_mid_run=killed_mid_run,
        resumes=resumes,
        execute_calls=sum(calls[d] for d in decisions),
        async_cycles=sum(1 for r in summary if r["durability"] == "async"),
        decisions=len(decisions),
        delivered_once=delivered_once,
        recovered_from_engine=recovered,
        duplicates=duplicates,
    )
    assert len(summary) == CYCLES >= 20
    assert problems == [], json.dumps(problems, indent=1, default=str)[:6000]
    assert duplicates == 0
    # every "webhook"/"twice" kill fell between the delivery and the checkpoint, and the
    # receipt was recovered from the engine instead of being executed again
    assert recovered >= sum(1 for r in summary if r["point"] in ("webhook", "twice"))


# --------------------------------------------------------------------------- operator overrides

OVERRIDE_KILL_POINTS = ("webhook", "handler", "webhook", "random")
OVERRIDE_CYCLES = 6
OPERATOR_ANSWER = {"action": "override", "operator": "ops-on-call", "reason": "crash drill"}


def _override_cycle(
    server: ForkServer,
    cycle: int,
    decision_id: str,
    *,
    engine: ReferenceEngine,
    hook: WebhookReceiver,
    tmp_path: Path,
    rng: random.Random,
    settle: bool = True,
    hold: float = WEBHOOK_HOLD_SECONDS,
) -> dict[str, Any]:
    """Escalate a low-confidence execution, kill the operator's override, resume.

    With ``settle``, the resume starts once any delivery the killed process started has been
    recorded by the engine (a crash between the delivery and the checkpoint); without it, the
    resume races the delivery still in flight.
    """
    point = OVERRIDE_KILL_POINTS[cycle % len(OVERRIDE_KILL_POINTS)]
    durability = DURABILITIES[(cycle + cycle // len(OVERRIDE_KILL_POINTS)) % 2]
    thread = f"override-thread-{cycle:02d}"
    url = hook.url_for_delay(hold)
    jobs = 0

    def run() -> tuple[str, int, Path]:
        nonlocal jobs
        jobs += 1
        job_id = f"o{cycle:02d}-{jobs}"
        progress = tmp_path / f"{job_id}.jsonl"
        job = {
            "job": job_id,
            "thread_id": thread,
            "prompt": f"execute decision_id={decision_id} webhook_url={url}",
            "engine_url": engine.url,
            "db": str(tmp_path / "checkpoints.sqlite"),
            "progress": str(progress),
            "durability": durability,
            "resume_command": OPERATOR_ANSWER,
        }
        return job_id, server.submit(job), progress

    def done_of(job_id: str, pid: int, progress: Path) -> dict[str, Any]:
        ended = server.wait_exit(job_id)
        events = _events(progress, pid)
        assert ended.get("exit") == 0, (ended, events)
        return next(e for e in events if e["event"] == "done")

    # 1. the model's call is denied by the confidence gate and escalated
    escalated = done_of(*run())
    assert escalated["interrupts"] == 1 and escalated["receipts"] == [], escalated
    # 2. the operator overrides; the process dies at the kill point
    job_id, pid, progress = run()
    kills = int(_kill_when(point, progress, pid, hook, decision_id, rng))
    server.wait_exit(job_id)
    if settle:
        wait_until(
            lambda: len(_posts_for(hook, decision_id)) == len(engine.executions(decision_id)),
            timeout=30,
            what=f"the engine to record the delivery of {decision_id}",
        )
    # 3. resume (answering again if the escalation is still pending) until the thread ends
    resumes = 0
    for _ in range(3):
        resumes += 1
        final = done_of(*run())
        if not final["next"] and not final["interrupts"]:
            break
    else:
        raise AssertionError(f"thread {thread} did not finish after 3 resumes")
    return {
        "decision_id": decision_id,
        "point": point,
        "receipts": [r for r in final["receipts"] if r["decision_id"] == decision_id],
        "operator_decisions": final["operator_decisions"],
        "kills": kills,
        "resumes": resumes,
    }


def test_sigkill_during_an_operator_override_then_resume_delivers_exactly_once(
    tmp_path: Path,
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
) -> None:
    async def seed() -> list[str]:
        async with mcp_session(engine.url) as session:
            return [
                await log_decision(session, action=f"override-{i:02d}", confidence=0.3)
                for i in range(OVERRIDE_CYCLES)
            ]

    decisions = asyncio.run(seed())

    def lane(index: int) -> list[dict[str, Any]]:
        rng = random.Random(4242 + index)
        with ForkServer(tmp_path / f"override-fork-server-{index}.log") as server:
            return [
                _override_cycle(
                    server,
                    n,
                    d,
                    engine=engine,
                    hook=webhook,
                    tmp_path=tmp_path,
                    rng=rng,
                    settle=n % 4 < 2,  # half resume at once, racing the delivery in flight
                )
                for n, d in enumerate(decisions)
                if n % LANES == index
            ]

    with ThreadPoolExecutor(LANES) as pool:
        summary = [row for rows in pool.map(lane, range(LANES)) for row in rows]
    time.sleep(WEBHOOK_HOLD_SECONDS)
    posts = Counter(
        r["body"]["decision_id"] for r in webhook.requests if isinstance(r["body"], dict)
    )

    duplicates = 0
    exactly_once = 0
    problems = []
    for row in summary:
        decision_id = row["decision_id"]
        executions = engine.executions(decision_id)
        receipts = row["receipts"]
        decisions_made = row["operator_decisions"]
        duplicates += max(0, posts[decision_id] - 1) + max(0, len(executions) - 1)
        ok = (
            posts[decision_id] == 1
            and len(executions) == 1
            and executions[0]["override_safety"] is True
            and [r.get("source") for r in receipts] == ["operator"]
            and receipts[0]["safety_overridden"] is True
            and [d["result"] for d in decisions_made] == ["receipt"]
            and decisions_made[0]["operator"] == OPERATOR_ANSWER["operator"]
        )
        exactly_once += int(ok)
        if not ok:
            problems.append({**row, "posts": posts[decision_id], "executions": executions})
    figure(
        "crash_operator_override",
        cycles=len(summary),
        kills=sum(r["kills"] for r in summary),
        resumes=sum(r["resumes"] for r in summary),
        overrides_delivered_once=exactly_once,
        duplicates=duplicates,
    )
    assert len(summary) == OVERRIDE_CYCLES
    assert problems == [], json.dumps(problems, indent=1, default=str)[:6000]
    assert duplicates == 0


def test_an_override_resumed_while_its_delivery_is_in_flight_keeps_its_receipt(
    tmp_path: Path,
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
) -> None:
    """The resumed process looks for the killed override's delivery before the engine has
    recorded it; the engine's idempotency denial must still end in the override's receipt."""

    async def seed() -> str:
        async with mcp_session(engine.url) as session:
            return await log_decision(session, action="override-in-flight", confidence=0.3)

    decision_id = asyncio.run(seed())
    with ForkServer(tmp_path / "fork-server.log") as server:
        row = _override_cycle(
            server,
            0,  # the "webhook" kill point
            decision_id,
            engine=engine,
            hook=webhook,
            tmp_path=tmp_path,
            rng=random.Random(0),
            settle=False,
            hold=3.0,  # the resumed process looks long before the delivery is recorded
        )
    assert len(_posts_for(webhook, decision_id)) == 1
    assert [r.get("source") for r in row["receipts"]] == ["operator"], row
