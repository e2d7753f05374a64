"""Benchmark the graph-side gates: a governed turn's overhead from checking every call.

1. **Turn overhead.** One turn (user message -> the model calls a CRM tool over MCP -> the CRM
   answers -> the model answers) through the governed graph built without tool gates and with
   them (``require_approval`` on another tool, a budget and a JSON Schema argument rule on the
   called tool, so every call is checked, counted and recorded), the same scripted model, an
   ``InMemorySaver``, the reference engine and a real FastMCP CRM over streamable HTTP (both in
   this process, on background threads). Turns alternate between the two graphs; the medians are
   compared (target: under 5%).
2. **The check itself.** :meth:`CompiledGates.check` with :func:`count_calls` over a thread
   history of 0, 100 and 1,000 records (microseconds per call).

Run: ``python bench/bench_tool_gates.py --turns 200 [--json out.json]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "support"))

from crm_support import running_crm

from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine
from algenta_graph.governance.tool_gates import (
    ArgumentRule,
    Budget,
    CallCounts,
    ToolGates,
    ToolRef,
    count_calls,
)
from algenta_graph.graph import create_governed_agent
from algenta_graph.testing import ScriptedChatModel

GATES = ToolGates(
    require_approval=["crm.delete_customer"],
    budgets=[Budget(tool="crm.lookup_customer", thread_limit=1000, run_limit=100)],
    argument_rules=[
        ArgumentRule(
            name="account_id_is_short",
            tool="crm.lookup_customer",
            schema={"properties": {"account_id": {"type": "string", "maxLength": 64}}},
        )
    ],
)


def _replies(n: int) -> list[Any]:
    out: list[Any] = []
    for i in range(n):
        call = {"name": "lookup_customer", "args": {"account_id": f"a{i}"}, "id": f"c{i}"}
        out += [{"content": "", "tool_calls": [call]}, "found"]
    return out


async def turn_overhead(turns: int) -> dict[str, Any]:
    with running_crm() as crm, ReferenceEngine() as engine:
        servers = {"crm": crm.connection()}
        async with EngineConnection(engine.url, profile="execute", extra_servers=servers) as conn:
            graphs = {}
            for label, gates in (("without", None), ("with", GATES)):
                model = ScriptedChatModel(replies=_replies(turns + 10))
                graphs[label] = await create_governed_agent(
                    model, connection=conn, checkpointer=InMemorySaver(), tool_gates=gates
                )
            times: dict[str, list[float]] = {"without": [], "with": []}
            for i in range(turns + 10):
                for label in ("without", "with") if i % 2 else ("with", "without"):
                    start = time.perf_counter()
                    out = await graphs[label].ainvoke(
                        {"messages": [("user", "look up a customer")]},
                        {"configurable": {"thread_id": f"{label}-{i}"}},
                    )
                    elapsed = time.perf_counter() - start
                    assert out["messages"][-1].content == "found", out["messages"][-1]
                    if label == "with":
                        assert len(out["tool_calls"]) == 1  # checked, counted and recorded
                    if i >= 10:  # warm-up
                        times[label].append(elapsed)
    without = statistics.median(times["without"])
    with_gates = statistics.median(times["with"])
    return {
        "turns": turns,
        "median_ms_without_gates": round(without * 1000, 3),
        "median_ms_with_gates": round(with_gates * 1000, 3),
        "p95_ms_without_gates": round(sorted(times["without"])[int(turns * 0.95)] * 1000, 3),
        "p95_ms_with_gates": round(sorted(times["with"])[int(turns * 0.95)] * 1000, 3),
        "overhead_pct": round((with_gates / without - 1) * 100, 2),
    }


def check_cost(history: int, repeat: int = 2000) -> float:
    rules = GATES.compile()
    tool = ToolRef("crm", "lookup_customer")
    calls = [
        {"tool": "lookup_customer", "server": "crm", "turn": f"m{i % 7}"} for i in range(history)
    ]
    start = time.perf_counter()
    for _ in range(repeat):
        counts = count_calls(rules, tool, calls, [], "m1")
        rules.check(tool, {"account_id": "a1"}, counts)
    assert rules.check(tool, {"account_id": "a1"}, CallCounts()) is None
    return (time.perf_counter() - start) / repeat * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    result: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_before": os.getloadavg()[0],
        "turn": asyncio.run(turn_overhead(args.turns)),
        "check_us": {
            str(n): round(check_cost(n, 2000 if n < 1000 else 300), 2) for n in (0, 100, 1000)
        },
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
