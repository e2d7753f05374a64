"""The ledger on PostgreSQL, shared by worker processes (``docs/ARCHITECTURE.md``, invariants
12, 17 and 18).

Worker processes (``tests/support/ledger_worker.py``), each with its own checkpointer and its
own ledger pool on one real PostgreSQL database, and a real CRM over MCP:

- a held ``delete_customer``, its thread copied, approved on the original and on the copy by
  two workers at once: the delete runs once, the second answer is refused naming the first, and
  both threads' records end with the winning answer;
- a budgeted ``refund`` whose worker is SIGKILLed while the CRM executes it, then a new message
  in another worker: the refund is not sent again, it is recorded ``unknown`` and counted, and
  the next one meets the budget;
- two completions of one held-call approval at once, on two ledgers (two pools) whose reads
  yield: the call runs once.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from crm_support import CrmServer, running_crm
from graph_support import copy_thread
from postgres_support import postgres_server, postgres_url  # noqa: F401

from algenta_graph.engine import ReferenceEngine
from algenta_graph.ledger import CallStart, held_call_id, open_ledger
from algenta_graph.nodes.write_ahead import run_once
from algenta_graph.serving.checkpoint_reader import aread_latest
from algenta_graph.serving.checkpointer import open_checkpointer

pytestmark = pytest.mark.timeout(600)

WORKER = Path(__file__).parents[1] / "support" / "ledger_worker.py"
APPROVE_ANA = {"decisions": [{"type": "approve", "message": "ok"}], "operator": "ana"}
APPROVE_OLGA = {"decisions": [{"type": "approve", "message": "ok"}], "operator": "olga"}


@pytest.fixture
def crm() -> Iterator[CrmServer]:
    with running_crm() as server:
        yield server


class Workers:
    """Starts worker processes on one database and reads what each reported."""

    def __init__(self, db: str, engine: ReferenceEngine, crm: CrmServer, tmp: Path) -> None:
        self.db, self.engine, self.crm, self.tmp = db, engine, crm, tmp
        self.count = 0

    def start(self, thread: str, mode: str, **job: Any) -> tuple[subprocess.Popen[bytes], Path]:
        self.count += 1
        progress = self.tmp / f"worker-{self.count}.jsonl"
        spec = {
            "db": self.db,
            "engine_url": self.engine.url,
            "crm_url": self.crm.url,
            "thread_id": thread,
            "progress": str(progress),
            "mode": mode,
            **job,
        }
        proc = subprocess.Popen([sys.executable, str(WORKER), json.dumps(spec)])
        return proc, progress

    @staticmethod
    def events(progress: Path) -> list[dict[str, Any]]:
        if not progress.exists():
            return []
        return [json.loads(line) for line in progress.read_text().splitlines() if line]

    def end(self, proc: subprocess.Popen[bytes], progress: Path) -> dict[str, Any]:
        """The worker's last event, once it exited."""
        proc.wait(timeout=300)
        last = self.events(progress)[-1]
        assert last["event"] in ("done", "refused"), last
        return last

    def run(self, thread: str, mode: str, **job: Any) -> dict[str, Any]:
        return self.end(*self.start(thread, mode, **job))


def _wait_until(predicate: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.05)


async def _values(db: str, thread: str) -> dict[str, Any]:
    async with open_checkpointer(db, setup=False) as saver:
        return dict((await aread_latest(saver, thread))[thread].values)


async def test_two_workers_approving_a_held_call_on_a_thread_and_its_copy_run_it_once(
    tmp_path: Path,
    engine: ReferenceEngine,
    crm: CrmServer,
    postgres_url: str,  # noqa: F811
) -> None:
    workers = Workers(postgres_url, engine, crm, tmp_path)
    delete = {"name": "delete_customer", "args": {"account_id": "a1"}, "id": "c1"}
    done = workers.run("orig", "call", call=delete)
    [held] = done["values"]["denials"]
    assert held["gate"] == "approval" and crm.count("delete_customer") == 0
    async with open_checkpointer(postgres_url) as saver:
        await copy_thread(saver, "orig", "copy")
    crm.delays["delete_customer"] = 1.0  # both answers overlap the call
    east = workers.start("orig", "answer", answer=APPROVE_ANA)
    west = workers.start("copy", "answer", answer=APPROVE_OLGA)
    ends = {"orig": workers.end(*east), "copy": workers.end(*west)}
    assert crm.count("delete_customer") == 1
    [(won, winner)] = [(t, e) for t, e in ends.items() if e["event"] == "done"]
    [(lost, loser)] = [(t, e) for t, e in ends.items() if e["event"] == "refused"]
    operator = winner["values"]["operator_decisions"][0]["operator"]
    assert loser["error"] == "EscalationAlreadyDecided"
    assert f"already decided by {operator} (" in loser["message"]
    # the loser's thread completes the winning answer (now, or on its next turn if the winner
    # was still applying it): its records end true, and nothing runs again
    if not (await _values(postgres_url, lost))["operator_decisions"]:
        workers.run(lost, "say")
    for thread in (won, lost):
        [decided] = (await _values(postgres_url, thread))["operator_decisions"]
        assert (decided["operator"], decided["result"]) == (operator, "executed")
    assert crm.count("delete_customer") == 1


async def test_a_budgeted_call_killed_mid_call_is_never_sent_again_by_another_worker(
    tmp_path: Path,
    engine: ReferenceEngine,
    crm: CrmServer,
    postgres_url: str,  # noqa: F811
) -> None:
    workers = Workers(postgres_url, engine, crm, tmp_path)
    refund = {"name": "refund", "args": {"account_id": "a1", "amount": 5}, "id": "r1"}
    crm.delays["refund"] = 3.0
    proc, _ = workers.start("budget", "call", call=refund)
    _wait_until(lambda: crm.count("refund") == 1, "the refund in flight")
    proc.send_signal(signal.SIGKILL)  # the worker dies while the CRM executes it
    proc.wait(timeout=60)
    crm.delays.clear()
    finished = workers.run("budget", "say")  # another worker: the unfinished step first
    [counted] = finished["values"]["tool_calls"]
    assert (counted["tool"], counted["result"]) == ("refund", "unknown")
    assert crm.count("refund") == 1
    again = workers.run("budget", "call", call={**refund, "id": "r2"})
    assert [d["gate"] for d in again["values"]["denials"]] == ["budget"]
    assert crm.count("refund") == 1


async def test_two_completions_of_one_held_call_at_once_on_two_pools_run_it_once(
    postgres_url: str,  # noqa: F811
) -> None:
    sent: list[int] = []

    async def send() -> Any:
        from langchain_core.messages import ToolMessage

        sent.append(1)
        await asyncio.sleep(0.2)  # the other completion's reads yield meanwhile
        return ToolMessage(content="deleted", tool_call_id="x")

    async with open_ledger(postgres_url) as one, open_ledger(postgres_url) as two:
        await one.get("warm", CallStart)  # the table, once, before the race
        call = held_call_id("esc_pg")
        results = await asyncio.gather(
            run_once(one, call, "delete_customer", partial(send), operator="ana"),
            run_once(two, call, "delete_customer", partial(send), operator="ana"),
        )
    assert len(sent) == 1
    assert sorted(r.outcome.result for r in results) == ["executed", "unknown"]
