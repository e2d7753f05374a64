"""Racing operators leave a true record (``docs/ARCHITECTURE.md``, invariant 10).

Two worker processes (``tests/support/race_worker.py``) share one SQLite checkpoint file and one
reference engine, and resume the same escalated thread at the same moment, round after round:
``override`` vs ``override`` and ``override`` vs ``decline``. Exactly one answer takes effect;
the thread's record names the operator whose answer took effect, the engine's execution
metadata agrees, and the other resume is told who decided (nothing in its name).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from graph_support import agent, config, execute, log_decision, open_connection
from repo_paths import SUPPORT

from algenta_graph.audit.history import verify_audit
from algenta_graph.engine import ReferenceEngine, WebhookReceiver

pytestmark = pytest.mark.timeout(300)

ROUNDS = 12
WORKER = SUPPORT / "race_worker.py"


def _answer(operator: str, action: str) -> dict[str, str]:
    return {"action": action, "operator": operator, "reason": f"{operator} says {action}"}


async def test_racing_operators_leave_exactly_one_answer_and_a_true_record(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    db = tmp_path / "cp.sqlite"
    threads: dict[str, str] = {}
    async with open_connection(engine) as conn:
        replies = []
        for i in range(ROUNDS):
            decision = await log_decision(conn, confidence=0.3)
            threads[f"race-{i}"] = decision
            replies += [execute(decision, webhook.url, f"c{i}")]
        async with agent(conn, db, replies) as (graph, _):
            for thread in threads:
                out = await graph.ainvoke({"messages": [("user", "go")]}, config(thread))
                assert out["__interrupt__"][0].value["gate"] == "confidence"

    start = time.time() + 12  # both workers are up and connected by then
    plans: dict[str, list[dict[str, Any]]] = {"ana": [], "bo": []}
    for i, thread in enumerate(threads):
        at = start + 1.5 * i
        bo_action = "override" if i % 2 == 0 else "decline"
        plans["ana"].append({"thread": thread, "answer": _answer("ana", "override"), "at": at})
        plans["bo"].append({"thread": thread, "answer": _answer("bo", bo_action), "at": at})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(WORKER.parent), *sys.path])}
    workers = {
        name: subprocess.Popen(
            [sys.executable, str(WORKER), engine.url, str(db), json.dumps(plan)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name, plan in plans.items()
    }
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for name, proc in workers.items():
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-2000:]
        lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        results[name] = {r["thread"]: r for r in lines if "thread" in r}

    async with open_connection(engine) as conn, agent(conn, db, []) as (graph, _):
        states = {t: (await graph.aget_state(config(t))).values for t in threads}

    contested = executed = 0
    for thread, decision in threads.items():
        ana, bo = results["ana"][thread], results["bo"][thread]
        assert "error" not in ana and "error" not in bo, (ana, bo)
        winners = [n for n, r in (("ana", ana), ("bo", bo)) if r.get("ok")]
        losers = [r for r in (ana, bo) if "already_decided_by" in r]
        [decided] = states[thread]["operator_decisions"]
        executions = engine.executions(decision)
        # exactly one answer took effect, and the record names its operator
        if len(winners) == 1:
            contested += 1
            assert [r["already_decided_by"] for r in losers] == winners
        assert decided["operator"] in winners
        if decided["action"] == "override":
            executed += 1
            [execution] = executions
            assert execution["metadata"]["algenta_graph"]["operator"] == decided["operator"]
            assert decided["result"] == "receipt"
            [receipt] = states[thread]["receipts"]
            assert receipt["operator"] == decided["operator"]
        else:
            assert executions == [] and states[thread]["receipts"] == []
    deliveries = len(webhook.received)
    print(
        f"FIGURE racing operators: {ROUNDS} rounds in 2 processes, {contested} contested, "
        f"{executed} executed once, {deliveries} webhook POSTs, 0 false records"
    )
    assert deliveries == executed
    assert contested >= ROUNDS // 2  # the race was real in most rounds
    # two workers resumed every thread: each checkpoint verifies, no false alarm
    reports = verify_audit(db)
    assert set(reports) == set(threads)
    assert [t for t, r in reports.items() if not r.ok] == [], [str(r) for r in reports.values()]
