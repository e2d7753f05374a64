"""SIGKILL an approved held call at every step of its run, resume: it never runs twice.

A real CRM over MCP, the reference engine, one SQLite checkpoint file, and child processes
(``tests/support/held_call_worker.py``) killed with SIGKILL at each step of an approval:

- ``claimed``: the answer is claimed, the call not yet run: the resume runs it, once;
- ``started``: the write-ahead start marker is written, the call not sent: the resume does
  **not** run it (it cannot know whether it was sent) and records its outcome ``unknown``;
- ``in_flight``: the CRM has the call, its answer not yet back: ``unknown``, never run again;
- ``recorded``: the call ran and its result was written ahead, the checkpoint not yet: the
  resume records that result, runs nothing;
- no kill: it runs once.

The proof is the CRM's own log: per thread, at most one run of the held call, exactly one where
the outcome is recorded as run (``executed``), and a record that says ``unknown`` wherever the
crash fell between its start and its result.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from crm_support import CrmServer, running_crm
from guarantee_support import figure, wait_until

from algenta_graph.audit.history import verify_audit
from algenta_graph.audit.records import read_thread_values
from algenta_graph.engine import ReferenceEngine

pytestmark = pytest.mark.timeout(600)

WORKER = Path(__file__).parents[1] / "support" / "held_call_worker.py"
POINTS = ("claimed", "started", "in_flight", "recorded", None)
ROUNDS = 2
EXPECTED = {
    "claimed": (1, "executed"),
    "started": (0, "unknown"),
    "in_flight": (1, "unknown"),
    "recorded": (1, "executed"),
    None: (1, "executed"),
}
"""Per kill point: how often the held call ran at the CRM, and the recorded result."""


@pytest.fixture
def crm() -> Iterator[CrmServer]:
    with running_crm() as server:
        yield server


def _start(job: dict[str, Any]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(WORKER), json.dumps(job)], cwd=WORKER.parent)


def _events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _holding_at(point: str, progress: Path) -> bool:
    """Whether the child reported holding at ``point`` in ``progress``."""
    return {"holding": point} in _events(progress)


def _finish(child: subprocess.Popen[bytes], progress: Path) -> None:
    assert child.wait(timeout=120) == 0, _events(progress)
    assert {"done": True} in _events(progress)


def test_an_approved_held_call_killed_at_every_step_never_runs_twice(
    tmp_path: Path, engine: ReferenceEngine, crm: CrmServer
) -> None:
    db = tmp_path / "cp.sqlite"
    results: list[dict[str, Any]] = []
    for n, point in enumerate(POINTS * ROUNDS):
        thread = f"held-{n}"
        base = {"thread_id": thread, "db": str(db), "engine_url": engine.url, "crm_url": crm.url}
        before = len(crm.calls)
        fresh = tmp_path / f"{thread}-fresh.jsonl"
        _finish(_start({**base, "mode": "fresh", "progress": str(fresh)}), fresh)
        assert len(crm.calls) == before  # held: nothing ran
        killed = tmp_path / f"{thread}-killed.jsonl"
        release = threading.Event()
        if point == "in_flight":
            crm.entered.clear()
            crm.hold = release
        job: dict[str, str | None] = {**base, "mode": "approve", "progress": str(killed)}
        job["kill_at"] = None if point == "in_flight" else point
        child = _start(job)
        if point is None:
            _finish(child, killed)
        else:
            if point == "in_flight":
                wait_until(crm.entered.is_set, timeout=120, what="the CRM to receive the call")
            else:
                wait_until(
                    partial(_holding_at, point, killed),
                    timeout=120,
                    what=f"the child to hold at {point}",
                )
            os.kill(child.pid, signal.SIGKILL)
            assert child.wait(timeout=60) == -signal.SIGKILL
            release.set()
            time.sleep(0.1)  # let the CRM finish answering the dead caller
            again = tmp_path / f"{thread}-resumed.jsonl"
            _finish(_start({**base, "mode": "approve", "progress": str(again)}), again)
        values = read_thread_values(db, thread)[thread]
        runs = sum(1 for name, _ in crm.calls[before:] if name == "delete_customer")
        [decision] = values["operator_decisions"]
        results.append(
            {
                "point": point,
                "runs": runs,
                "result": decision["result"],
                "operator": decision["operator"],
                "messages": [str(m.content) for m in values["messages"] if m.type == "tool"],
            }
        )
    figure(
        "held_call_crash",
        cycles=len(results),
        kill_points=len([p for p in POINTS if p]),
        killed=sum(1 for r in results if r["point"]),
        runs_twice=sum(1 for r in results if r["runs"] > 1),
        ran_once=sum(1 for r in results if r["runs"] == 1),
        executed_recorded_and_ran_once=sum(
            1 for r in results if r["result"] == "executed" and r["runs"] == 1
        ),
        unknown_recorded=sum(1 for r in results if r["result"] == "unknown"),
        false_executed=sum(1 for r in results if r["result"] == "executed" and r["runs"] != 1),
    )
    for r in results:
        assert (r["runs"], r["result"]) == EXPECTED[r["point"]], r
        assert r["operator"] == "ana"
        if r["result"] == "unknown":
            assert "UNKNOWN" in r["messages"][-1] and "NOT run again" in r["messages"][-1]
    # every checkpoint of every thread, killed and resumed, verifies: no false alarm
    reports = verify_audit(db)
    assert len(reports) == len(results)
    assert [t for t, r in reports.items() if not r.ok] == [], [str(r) for r in reports.values()]
