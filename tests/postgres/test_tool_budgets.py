"""Budgets across workers on PostgreSQL: two worker processes, one thread's turns on either.

Two worker processes (``tests/support/budget_worker.py``) share one PostgreSQL database and a
real CRM over MCP. Each round both run at once, each taking the turn of half the threads (which
half alternates, so every thread's turns go back and forth between the workers); each turn the
model looks the customer up twice in one step, against a budget of 3 lookups per thread. The
budget counts the thread's records in the shared checkpoints, so it holds whichever worker ran
the earlier turns: the CRM's own log must show exactly 3 lookups per thread.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crm_support import CrmServer, running_crm
from guarantee_support import figure
from postgres_support import postgres_server, postgres_url  # noqa: F401

from algenta_graph.engine import ReferenceEngine
from algenta_graph.serving.checkpoint_reader import read_thread_records
from algenta_graph.serving.checkpointer import open_checkpointer

pytestmark = pytest.mark.timeout(600)

WORKER = Path(__file__).parents[1] / "support" / "budget_worker.py"
THREADS = 12
TURNS = 4
CALLS_PER_TURN = 2
LIMIT = 3


@pytest.fixture
def crm() -> Iterator[CrmServer]:
    with running_crm() as server:
        yield server


async def test_a_thread_budget_is_exact_across_two_workers_on_postgresql(
    tmp_path: Path,
    engine: ReferenceEngine,
    crm: CrmServer,
    postgres_url: str,  # noqa: F811
) -> None:
    async with open_checkpointer(postgres_url):
        pass  # the checkpoint tables, once, before the workers race to create them
    threads = [f"budget-{i}" for i in range(THREADS)]
    for turn in range(TURNS):
        children = []
        for worker in range(2):
            mine = [t for i, t in enumerate(threads) if (i + turn) % 2 == worker]
            job: dict[str, Any] = {
                "db": postgres_url,
                "engine_url": engine.url,
                "crm_url": crm.url,
                "threads": mine,
                "turn": turn,
                "calls_per_turn": CALLS_PER_TURN,
                "thread_limit": LIMIT,
                "progress": str(tmp_path / f"w{worker}-{turn}.jsonl"),
            }
            children.append(
                subprocess.Popen([sys.executable, str(WORKER), json.dumps(job)], cwd=WORKER.parent)
            )
        for child in children:
            assert child.wait(timeout=300) == 0
    ran = Counter(args["account_id"] for name, args in crm.calls if name == "lookup_customer")
    async with open_checkpointer(postgres_url, setup=False) as saver:
        records = await read_thread_records(saver)
    denied = {t: sum(1 for d in records[t]["denials"] if d["gate"] == "budget") for t in threads}
    counted = {t: len(records[t]["tool_calls"]) for t in threads}
    attempts = THREADS * TURNS * CALLS_PER_TURN
    figure(
        "tool_budgets_postgres",
        workers=2,
        threads=THREADS,
        attempts=attempts,
        limit_per_thread=LIMIT,
        ran=sum(ran.values()),
        over_budget=sum(max(0, n - LIMIT) for n in ran.values()),
        under_budget=sum(max(0, LIMIT - ran[t]) for t in threads),
        budget_denials=sum(denied.values()),
    )
    assert {t: ran[t] for t in threads} == dict.fromkeys(threads, LIMIT)
    assert counted == dict.fromkeys(threads, LIMIT)
    assert denied == dict.fromkeys(threads, TURNS * CALLS_PER_TURN - LIMIT)
