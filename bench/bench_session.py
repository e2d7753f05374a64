"""Benchmark: tool calls over one persistent MCP session vs a new session per call.

The same tool (``get_contract``) on the same reference engine (its own process, so its work does
not share our GIL), called sequentially three ways, interleaved call by call so drift hits all
three alike:

* **persistent**: ``EngineConnection.call_tool`` (one session held open; the profile guard, the
  argument scrub and the adapters' ``ToolMessage`` included);
* **session per call**: a tool from ``MultiServerMCPClient.get_tools()``, the adapters' default,
  which opens, initialises and closes a new MCP session inside every call;
* **raw session**: ``mcp.ClientSession.call_tool`` on one open session (the floor: no LangChain).

Run: ``python bench/bench_session.py --calls 300 [--append bench/RESULTS.md]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench_graph import engine_process  # the reference engine as a subprocess on a free port
from langchain_mcp_adapters.client import MultiServerMCPClient

from algenta_graph.connection.engine import EngineConnection

TOOL = "get_contract"


async def _timed(call: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await call()
    return time.perf_counter() - start


def _summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {
        "median": statistics.median(ms),
        "mean": statistics.fmean(ms),
        "p90": ms[int(0.9 * (len(ms) - 1))],
    }


async def bench(url: str, calls: int, warmup: int) -> dict[str, dict[str, float]]:
    client = MultiServerMCPClient({"algenta": {"transport": "streamable_http", "url": url}})
    per_call_tool = next(t for t in await client.get_tools() if t.name == TOOL)
    samples: dict[str, list[float]] = {"persistent": [], "session per call": [], "raw": []}
    async with (
        EngineConnection(url, profile="observe") as conn,
        client.session("algenta") as raw,
    ):

        async def persistent() -> Any:
            return await conn.call_tool(TOOL, {}, tool_call_id="bench")

        async def per_call() -> Any:
            return await per_call_tool.ainvoke(
                {"type": "tool_call", "name": TOOL, "args": {}, "id": "bench"}
            )

        async def raw_call() -> Any:
            return await raw.call_tool(TOOL, {})

        ways = {"persistent": persistent, "session per call": per_call, "raw": raw_call}
        for i in range(warmup + calls):
            for name, way in ways.items():
                elapsed = await _timed(way)
                if i >= warmup:
                    samples[name].append(elapsed)
        sessions = conn.sessions_opened
    result = {name: _summary(values) for name, values in samples.items()}
    result["persistent"]["sessions"] = sessions
    return result


def render(result: dict[str, dict[str, float]], calls: int) -> str:
    persistent = result["persistent"]
    per_call = result["session per call"]
    ratio_median = per_call["median"] / persistent["median"]
    ratio_mean = per_call["mean"] / persistent["mean"]
    lines = [
        "## Persistent MCP session",
        "",
        f"Command: `python bench/bench_session.py --calls {calls}` "
        f"({platform.python_implementation()} {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs shared with other work; reference engine in its own process, "
        "streamable HTTP on 127.0.0.1).",
        "",
        f"{calls} sequential `{TOOL}` calls each way, interleaved call by call:",
        "",
        "| way | median per call | mean | p90 |",
        "|---|---|---|---|",
    ]
    labels = {
        "persistent": "`EngineConnection.call_tool` (one persistent session, "
        f"{int(persistent['sessions'])} opened)",
        "session per call": "`MultiServerMCPClient.get_tools()` tool (a new session per call)",
        "raw": "`mcp.ClientSession.call_tool` on one session (floor, no LangChain)",
    }
    for name, label in labels.items():
        r = result[name]
        lines.append(f"| {label} | {r['median']:.2f} ms | {r['mean']:.2f} ms | {r['p90']:.2f} ms |")
    lines += [
        "",
        f"Persistent session vs session per call: **{ratio_median:.1f}x** faster per call "
        f"(ratio of medians; {ratio_mean:.1f}x by means; target >= 5x).",
        "",
    ]
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> str:
    async with engine_process() as url:
        result = await bench(url, args.calls, args.warmup)
    return render(result, args.calls)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--append", default=None, help="append the section to this file")
    args = parser.parse_args()
    section = asyncio.run(main_async(args))
    print(section)
    if args.append:
        with open(args.append, "a") as fh:
            fh.write("\n" + section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
