"""Crash and resume: SIGKILL the graph's process anywhere, resume, and every decision is
delivered exactly once with its receipt in the thread's state.

The reference engine and the webhook receiver run in the test process; the graph runs in
child processes of ``tests/support/crash_worker.py`` (a fork server), each opening the same SQLite
checkpoint file. Each cycle logs one decision, starts a thread that executes it, kills the
process with SIGKILL at a chosen point, and resumes the thread in new processes until it ends:

- ``startup``: as soon as the graph is built, before the run starts;
- ``retrieve`` / ``model``: right after that node's update is streamed;
- ``webhook``: the moment the webhook receiver has the POST (the receiver holds its answer for
  a moment, so the process dies while ``execute_decision`` is in flight: after the delivery,
  before any checkpoint records it);
- ``tool``: right after ``governed_tool`` has streamed its receipt (the checkpoint write may or
  may not have happened, which is what the ``async`` durability cycles probe);
- ``random``: at a random moment between the start and the end of the held delivery;
- ``twice``: kill at the POST, then kill the first resume right after its ``governed_tool``.

At a node the child blocks right after streaming that node's update until it is killed
(``crash_worker``'s ``hold_after``), and the webhook holds its answer, so **every planned kill
lands**: the test asserts the number of kills equals the number planned (one per cycle, two for
``twice``), and that every kill between the delivery and the checkpoint (``webhook``,
``twice``) ended in the receipt recovered from the engine, never in a second delivery.

Half the cycles run with ``durability="async"`` (LangGraph's default: checkpoints are written
in the background), half with the graph's own ``"sync"`` default; every kill point meets both.

The operator path gets the same treatment: a low-confidence execution is escalated, the
operator's override is killed (at the POST, after the handler, at random) and resumed, at once
or after the engine has recorded the delivery; the override is delivered once and its receipt
and operator decision are in state. So is the idempotency (``force``) override of a decision
delivered before: killed during the re-delivery and resumed, it is re-delivered exactly once.
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

from crash_worker import ForkServer, read_progress
from guarantee_support import figure, log_decision, wait_until
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from mcp import ClientSession

from algenta_graph.audit.history import verify_audit
from algenta_graph.engine import ReferenceEngine, WebhookReceiver

KILL_POINTS = ("startup", "retrieve", "model", "webhook", "tool", "random", "twice", "webhook")
DURABILITIES = ("async", "sync")
CYCLES = 24
LANES = 2  # two fork servers run cycles side by side
WEBHOOK_HOLD_SECONDS = 1.0  # long enough that a kill at the POST lands even on a loaded machine
HOLD_AFTER = {
    "startup": "start",
    "retrieve": "retrieve_tools",
    "model": "model",
    "tool": "governed_tool",
    "handler": "denial_handler_confidence",
    "handler-idempotency": "denial_handler_idempotency",
}
"""Kill points at which the child blocks (right after that node's update) until it is killed."""
HELD_WEBHOOK = ("webhook", "twice", "random")
"""Kill points whose webhook holds its answer, so the process is in flight when it dies."""


def _posts_for(hook: WebhookReceiver, decision_id: str) -> list[dict[str, Any]]:
    return [
        r
        for r in hook.requests
        if isinstance(r["body"], dict) and r["body"].get("decision_id") == decision_id
    ]


def _events(path: Path, pid: int) -> list[dict[str, Any]]:
    return [e for e in read_progress(path) if e.get("pid") == pid]


def _ended(events: list[dict[str, Any]]) -> bool:
    return any(e["event"] in ("done", "error") for e in events)


def _kill_when(
    point: str,
    path: Path,
    pid: int,
    hook: WebhookReceiver,
    decision_id: str,
    rng: random.Random,
    posts_before: int = 0,
) -> bool:
    """Wait for ``point`` (polling every millisecond), then SIGKILL ``pid``.

    ``posts_before``: the decision's webhook POSTs before this run (an override re-delivers a
    decision delivered earlier). Returns False when the child had already ended by then (the
    kill missed; the tests assert that never happens).
    """
    deadline = time.monotonic() + 60
    # "random": a random moment from now until the held delivery has been answered
    random_at = time.monotonic() + rng.uniform(0.05, 1.5) if point == "random" else None
    size, events = -1, []
    while True:
        now = path.stat().st_size if path.exists() else 0
        if now != size:  # parse the progress file only when it grew
            size, events = now, _events(path, pid)
        if _ended(events):
            return False
        if point in HOLD_AFTER:
            if any(e["event"] == "holding" for e in events):
                break
        elif len(_posts_for(hook, decision_id)) > posts_before:
            if random_at is not None:  # before the held answer ends the delivery
                time.sleep(rng.uniform(0, WEBHOOK_HOLD_SECONDS * 0.8))
            break
        elif random_at is not None and time.monotonic() >= random_at:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"kill point {point!r} never came for pid {pid}")
        time.sleep(0.001)
    if _ended(_events(path, pid)):
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended between the check and the kill
        return False
    return True


async def _create_checkpoint_tables(db: Path) -> None:
    """Create the checkpoint file's tables once, before two lanes of children share it."""
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        await saver.setup()


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
    held = point in HELD_WEBHOOK
    url = hook.url_for_delay(WEBHOOK_HOLD_SECONDS) if held else hook.url
    jobs = 0

    def run(kill_at: str | None = None) -> tuple[str, int, Path]:
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
        if kill_at in HOLD_AFTER:
            job["hold_after"] = HOLD_AFTER[kill_at]
        return job_id, server.submit(job), progress

    kills = killed_mid_run = resumes = 0
    planned = [point, "tool"] if point == "twice" else [point]
    # 1. the first run, killed at its point; 2. for "twice", the first resume too
    for kill_at in planned:
        job_id, pid, progress = run(kill_at)
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
        "planned_kills": len(planned),
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
    asyncio.run(_create_checkpoint_tables(tmp_path / "checkpoints.sqlite"))

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
    planned_kills = sum(r["planned_kills"] for r in summary)
    kills = sum(r["kills"] for r in summary)
    killed_mid_run = sum(r["killed_mid_run"] for r in summary)
    resumes = sum(r["resumes"] for r in summary)

    duplicates = 0
    delivered_once = 0
    recovered = 0
    lost_checkpoint_kills = 0  # kills after the delivery, before any checkpoint of it
    recovered_after_lost_checkpoint = 0
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
        source = receipts[0].get("source") if receipts else None
        if row["point"] in ("startup", "retrieve", "model"):
            # killed before anything was sent: the resumed model's own call delivers it
            exactly_once = exactly_once and source == "model"
        if row["point"] in ("webhook", "twice"):
            lost_checkpoint_kills += 1
            # killed after the delivery, before any checkpoint: recovered, never re-sent
            exactly_once = exactly_once and source == "recovered"
            recovered_after_lost_checkpoint += int(source == "recovered")
        if exactly_once:
            delivered_once += 1
            recovered += int(source == "recovered")
        else:
            problems.append({**row, "posts": posts[decision_id], "executions": len(delivered)})

    figure(
        "crash_resume",
        cycles=len(summary),
        planned_kills=planned_kills,
        kills=kills,
        killed_mid_run=killed_mid_run,
        resumes=resumes,
        execute_calls=sum(calls[d] for d in decisions),
        async_cycles=sum(1 for r in summary if r["durability"] == "async"),
        decisions=len(decisions),
        delivered_once=delivered_once,
        lost_checkpoint_kills=lost_checkpoint_kills,
        recovered_after_lost_checkpoint=recovered_after_lost_checkpoint,
        recovered_from_engine=recovered,
        duplicates=duplicates,
    )
    assert len(summary) == CYCLES >= 20
    # every planned kill landed: one per cycle, two for "twice"
    twice = sum(1 for r in summary if r["point"] == "twice")
    assert planned_kills == CYCLES + twice
    assert kills == killed_mid_run == planned_kills, (kills, killed_mid_run, planned_kills)
    assert problems == [], json.dumps(problems, indent=1, default=str)[:6000]
    assert delivered_once == CYCLES
    assert duplicates == 0
    # every "webhook"/"twice" kill fell between the delivery and the checkpoint, and each of
    # those receipts was recovered from the engine instead of being executed again
    assert lost_checkpoint_kills == sum(1 for r in summary if r["point"] in ("webhook", "twice"))
    assert recovered_after_lost_checkpoint == lost_checkpoint_kills == 9
    assert recovered >= recovered_after_lost_checkpoint
    # every checkpoint of every thread, killed and resumed, verifies: no false alarm
    reports = verify_audit(tmp_path / "checkpoints.sqlite")
    assert len(reports) == len(summary)
    assert [t for t, r in reports.items() if not r.ok] == [], [str(r) for r in reports.values()]


# --------------------------------------------------------------------------- operator overrides

OVERRIDE_KILL_POINTS = ("webhook", "handler", "webhook", "random")
OVERRIDE_CYCLES = 6
FORCE_KILL_POINTS = ("webhook", "handler-idempotency", "webhook", "random")
FORCE_CYCLES = 4
OPERATOR_ANSWER = {"action": "override", "operator": "ops-on-call", "reason": "crash drill"}
ESCALATE_IDEMPOTENCY = {"on_denial": {"idempotency": "escalate"}}
"""A run setting (stricter than the default ``report``): an idempotency denial asks an operator,
whose override re-delivers the decision with ``force``."""


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
    gate: str = "confidence",
) -> dict[str, Any]:
    """Escalate an execution denied by ``gate``, kill the operator's override, resume.

    ``confidence``: a low-confidence decision (override with ``override_safety``);
    ``idempotency``: a decision delivered before the thread starts, escalated by a stricter run
    setting (override with ``force``: a second, deliberate delivery).

    With ``settle``, the resume starts once any delivery the killed process started has been
    recorded by the engine (a crash between the delivery and the checkpoint); without it, the
    resume races the delivery still in flight.
    """
    points = FORCE_KILL_POINTS if gate == "idempotency" else OVERRIDE_KILL_POINTS
    point = points[cycle % len(points)]
    durability = DURABILITIES[(cycle + cycle // len(points)) % 2]
    thread = f"override-{gate}-thread-{cycle:02d}"
    url = hook.url_for_delay(hold)
    jobs = 0
    posts_before = len(_posts_for(hook, decision_id))

    def run(kill_at: str | None = None) -> tuple[str, int, Path]:
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
        if gate == "idempotency":
            job["configurable"] = ESCALATE_IDEMPOTENCY
        if kill_at in HOLD_AFTER:
            job["hold_after"] = HOLD_AFTER[kill_at]
        return job_id, server.submit(job), progress

    def done_of(job_id: str, pid: int, progress: Path) -> dict[str, Any]:
        ended = server.wait_exit(job_id)
        events = _events(progress, pid)
        assert ended.get("exit") == 0, (ended, events)
        return next(e for e in events if e["event"] == "done")

    # 1. the model's call is denied by the gate and escalated
    escalated = done_of(*run())
    assert escalated["interrupts"] == 1 and escalated["receipts"] == [], escalated
    assert [d["gate"] for d in escalated["denials"]] == [gate], escalated
    # 2. the operator overrides; the process dies at the kill point
    job_id, pid, progress = run(point)
    kills = int(_kill_when(point, progress, pid, hook, decision_id, rng, posts_before))
    ended = server.wait_exit(job_id)
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
        "killed": int(ended.get("signal") == signal.SIGKILL),
        "resumes": resumes,
        "posts_before": posts_before,
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
    asyncio.run(_create_checkpoint_tables(tmp_path / "checkpoints.sqlite"))

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
    kills = sum(r["kills"] for r in summary)
    figure(
        "crash_operator_override",
        cycles=len(summary),
        kills=kills,
        resumes=sum(r["resumes"] for r in summary),
        overrides_delivered_once=exactly_once,
        duplicates=duplicates,
    )
    assert len(summary) == OVERRIDE_CYCLES
    assert kills == sum(r["killed"] for r in summary) == OVERRIDE_CYCLES  # every kill landed
    assert problems == [], json.dumps(problems, indent=1, default=str)[:6000]
    assert exactly_once == OVERRIDE_CYCLES
    assert duplicates == 0


def _seed_delivered(
    engine: ReferenceEngine,
    hook: WebhookReceiver,
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
    count: int,
) -> list[str]:
    """``count`` decisions, each already delivered once (outside any thread)."""

    async def seed() -> list[str]:
        async with mcp_session(engine.url) as session:
            ids = [await log_decision(session, action=f"force-{i:02d}") for i in range(count)]
            for decision_id in ids:
                done = await session.call_tool(
                    "execute_decision", {"decision_id": decision_id, "webhook_url": hook.url}
                )
                assert not done.isError, done
            return ids

    return asyncio.run(seed())


def _force_override_problems(
    engine: ReferenceEngine, hook: WebhookReceiver, row: dict[str, Any]
) -> dict[str, Any] | None:
    """``None`` when the idempotency override re-delivered the decision exactly once."""
    decision_id = row["decision_id"]
    posts = len(_posts_for(hook, decision_id))
    executions = engine.executions(decision_id)
    forced = [e for e in executions if e["force"]]
    receipts = row["receipts"]
    decided = row["operator_decisions"]
    ok = (
        row["posts_before"] == 1
        and posts == 2  # the delivery before the thread, and exactly one re-delivery
        and len(executions) == 2
        and len(forced) == 1
        and forced[0]["override_safety"] is False
        and forced[0]["metadata"]["algenta_graph"]["operator"] == OPERATOR_ANSWER["operator"]
        and [r.get("source") for r in receipts] == ["operator"]
        and receipts[0]["execution_status"] == "delivered"
        and [(d["gate"], d["override_flag"], d["result"]) for d in decided]
        == [("idempotency", "force", "receipt")]
    )
    if ok:
        return None
    return {**row, "posts": posts, "executions": executions}


def test_sigkill_during_an_idempotency_force_override_then_resume_redelivers_exactly_once(
    tmp_path: Path,
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
) -> None:
    """A decision delivered before; the thread's call is denied by the idempotency gate and
    escalated; the operator's ``force`` override is SIGKILLed during its re-delivery (at the
    POST, after the handler, at random) and resumed once the engine has recorded what the
    killed process sent: the decision is re-delivered exactly once (an override that skipped
    its "already delivered?" lookup would deliver it a third time)."""
    decisions = _seed_delivered(engine, webhook, mcp_session, FORCE_CYCLES)
    asyncio.run(_create_checkpoint_tables(tmp_path / "checkpoints.sqlite"))
    rng = random.Random(1616)
    with ForkServer(tmp_path / "force-fork-server.log") as server:
        summary = [
            _override_cycle(
                server,
                n,
                d,
                engine=engine,
                hook=webhook,
                tmp_path=tmp_path,
                rng=rng,
                gate="idempotency",
            )
            for n, d in enumerate(decisions)
        ]
    time.sleep(WEBHOOK_HOLD_SECONDS)
    problems = [p for row in summary if (p := _force_override_problems(engine, webhook, row))]
    kills = sum(r["kills"] for r in summary)
    redelivered_once = len(summary) - len(problems)
    figure(
        "crash_force_override",
        cycles=len(summary),
        kills=kills,
        resumes=sum(r["resumes"] for r in summary),
        redelivered_exactly_once=redelivered_once,
        extra_deliveries=sum(
            max(0, len(_posts_for(webhook, r["decision_id"])) - 2) for r in summary
        ),
    )
    assert [r["point"] for r in summary] == list(FORCE_KILL_POINTS)
    assert kills == sum(r["killed"] for r in summary) == FORCE_CYCLES  # every kill landed
    assert problems == [], json.dumps(problems, indent=1, default=str)[:6000]
    assert redelivered_once == FORCE_CYCLES


def test_a_force_override_resumed_while_its_redelivery_is_in_flight_redelivers_once(
    tmp_path: Path,
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
) -> None:
    (decision_id,) = _seed_delivered(engine, webhook, mcp_session, 1)
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
            hold=3.0,  # the resumed process looks long before the re-delivery is recorded
            gate="idempotency",
        )
    wait_until(
        lambda: len(_posts_for(webhook, decision_id)) == len(engine.executions(decision_id)),
        timeout=30,
        what="every delivery to be recorded",
    )
    assert row["killed"] == 1
    problems = _force_override_problems(engine, webhook, row)
    assert problems is None, (
        f"{problems['posts']} POSTs, forced executions: "
        f"{[e['force'] for e in problems['executions']]}, receipts: "
        f"{[r.get('source') for r in problems['receipts']]}"
    )


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
    assert row["killed"] == 1
    assert len(_posts_for(webhook, decision_id)) == 1
    assert [r.get("source") for r in row["receipts"]] == ["operator"], row
