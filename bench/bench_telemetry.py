"""Benchmark the telemetry: what it costs a graph turn with nothing configured, and with the SDK.

Four variants of the same governed graph, turns interleaved (the order rotates every turn):

- ``off``: no callback handler, and the connection's per-call telemetry
  (:class:`~algenta_graph.telemetry.engine_calls.EngineCall`) replaced by a null stand-in: the
  graph as it was before it was instrumented;
- ``no-op``: :func:`~algenta_graph.telemetry.instrument` with nothing configured (the global
  OpenTelemetry providers are the API's no-ops): the graph is returned as it is, and each
  engine call checks that nothing is configured; what every user gets by default;
- ``attached``: ``instrument(graph, always=True)`` with nothing configured: the handler on every
  LangChain run, recording into the API's no-ops (an application that configures its providers
  after building the graph);
- ``sdk``: instrumented with the SDK, every span to an in-memory exporter
  (``SimpleSpanProcessor``) and the metrics to an in-memory reader: the cost of real tracing.

Three kinds of turn: ``get_contract`` and ``execute_decision`` (a delivered receipt) against
the reference engine in its own process over MCP (what a graph turn is), and ``get_contract``
on an in-process tool (no I/O: the framework's own cost, where any overhead shows most). The
model is the scripted stand-in; an ``InMemorySaver`` checkpoints each turn (a fresh thread).

The figure of the issue: the ``no-op`` median paired difference as a share of the ``off``
median turn (target < 2%), with a bootstrap 95% interval.

Run: ``python bench/bench_telemetry.py --turns 300 [--append bench/RESULTS.md]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import algenta_graph.connection.engine as connection_engine
from algenta_graph._net import free_port
from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import WebhookReceiver
from algenta_graph.governance.contract import resolve_profile
from algenta_graph.graph import create_governed_agent
from algenta_graph.telemetry import instrument
from algenta_graph.telemetry.engine_calls import EngineCall
from algenta_graph.testing import ScriptedChatModel

VARIANTS = ("off", "no-op", "attached", "sdk")
COMPARED = VARIANTS[1:]


class NullCall:
    """The connection's per-call telemetry, doing nothing (the ``off`` variant)."""

    meta = None
    traceparent = None
    wants_answer = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def tag_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return arguments

    def __enter__(self) -> NullCall:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def failed(self, exc: BaseException) -> None:
        pass

    async def answered(self, **kwargs: Any) -> None:
        pass


@contextlib.asynccontextmanager
async def engine_process() -> AsyncIterator[str]:
    """The reference engine in its own process (its work does not share our GIL)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "algenta_graph.cli", "engine", "--relaxed", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(300):
                try:
                    await client.get(url, timeout=0.5)
                    break
                except httpx.HTTPError:
                    await asyncio.sleep(0.1)
            else:
                raise RuntimeError(f"engine did not start on {url}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


class InProcessCatalog:
    """The connection interface over one in-process tool (no I/O: the framework's cost)."""

    def __init__(self) -> None:
        async def get_contract() -> str:
            """Fetch the engine's capability contract."""
            return '{"engine": "in-process", "tools": ["get_contract"]}'

        self.tools = [StructuredTool.from_function(coroutine=get_contract)]
        self.profile = resolve_profile("observe")
        self.execute_supplied: frozenset[str] = frozenset()

    def get_tool(self, name: str) -> Any:
        return next((t for t in self.tools if t.name == name), None)

    def is_algenta_tool(self, name: str) -> bool:
        return self.get_tool(name) is not None

    async def call_tool(self, name: str, args: dict[str, Any], *, tool_call_id: str) -> Any:
        call = {"name": name, "args": args, "id": tool_call_id, "type": "tool_call"}
        return await self.get_tool(name).ainvoke(call)


def contract_script() -> list[Any]:
    call = {"name": "get_contract", "args": {}, "id": "call_contract"}
    return [{"content": "", "tool_calls": [call]}, "The engine offers governed decisions."]


def execute_script(decision_id: str, webhook_url: str) -> list[Any]:
    args = {"decision_id": decision_id, "webhook_url": webhook_url}
    call = {"name": "execute_decision", "args": args, "id": "call_execute"}
    return [{"content": "", "tool_calls": [call]}, "Executed."]


async def graphs(conn: Any) -> dict[str, tuple[Any, ScriptedChatModel]]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    out: dict[str, tuple[Any, ScriptedChatModel]] = {}
    for variant in VARIANTS:
        model = ScriptedChatModel(replies=contract_script())
        graph = await create_governed_agent(model, connection=conn, checkpointer=InMemorySaver())
        if variant == "no-op":
            graph = instrument(graph)  # nothing configured: the graph as it is
        elif variant == "attached":
            graph = instrument(graph, always=True)  # the handler, over the API's no-ops
        elif variant == "sdk":
            graph = instrument(
                graph, tracer_provider=tracer_provider, meter_provider=meter_provider
            )
        out[variant] = (graph, model)
    out["sdk"][0].exporter = exporter  # type: ignore[attr-defined]  # cleared between turns
    return out


async def measure(
    conn: Any, turns: int, warmup: int, prepare: Callable[[], Any] | None = None
) -> dict[str, dict[str, list[float]]]:
    """Per-variant turn times (s), wall and CPU; ``prepare()`` (untimed) gives the script."""
    built = await graphs(conn)
    exporter = built["sdk"][0].exporter  # type: ignore[attr-defined]
    wall: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    order = list(VARIANTS)
    msg = {"messages": [("user", "What can this engine do? Show me its contract.")]}
    for i in range(warmup + turns):
        order = order[1:] + order[:1]  # rotate: no variant always first
        for variant in order:
            graph, model = built[variant]
            model.replies = await prepare() if prepare else contract_script()
            model.position = 0
            cfg = {"configurable": {"thread_id": f"{variant}-{i}"}}
            null = NullCall if variant == "off" else EngineCall
            connection_engine.engine_calls.EngineCall = null  # type: ignore[misc]
            start, start_cpu = time.perf_counter(), time.process_time()
            await graph.ainvoke(msg, cfg)
            elapsed, used = time.perf_counter() - start, time.process_time() - start_cpu
            connection_engine.engine_calls.EngineCall = EngineCall  # type: ignore[misc]
            if i >= warmup:
                wall[variant].append(elapsed)
                cpu[variant].append(used)
        exporter.clear()
    return {"wall": wall, "cpu": cpu}


def summarise(measured: dict[str, dict[str, list[float]]], seed: int = 24) -> dict[str, Any]:
    """Per clock (wall, CPU): the ``off`` median, each variant's median paired cost vs it."""
    out: dict[str, Any] = {}
    rng = random.Random(seed)
    for clock, times in measured.items():
        off = statistics.median(times["off"])
        row: dict[str, Any] = {"off_ms": off * 1000, "n": len(times["off"])}
        for variant in COMPARED:
            paired = [x - y for x, y in zip(times[variant], times["off"], strict=True)]
            diff = statistics.median(paired)
            boot = sorted(
                statistics.median(rng.choices(paired, k=len(paired))) for _ in range(1000)
            )
            row[variant] = {
                "median_ms": statistics.median(times[variant]) * 1000,
                "diff_ms": diff * 1000,
                "share": diff / off,
                "share_lo": boot[25] / off,
                "share_hi": boot[974] / off,
            }
        out[clock] = row
    return out


async def bench(url: str, turns: int, warmup: int) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    with WebhookReceiver() as webhook:
        async with EngineConnection(url, profile="execute") as conn:
            results["get_contract over MCP"] = summarise(await measure(conn, turns, warmup))

            async def a_decision() -> list[Any]:
                message = await conn.call_tool(
                    "log_decision",
                    {
                        "chosen_action": "restock_fast_movers",
                        "expected_value": 1000.0,
                        "confidence": 0.9,
                        "risk_p5": 0.05,
                        "risk_p95": 0.4,
                    },
                    tool_call_id="setup",
                )
                body = message.artifact["structured_content"]
                body = body.get("result", body)
                return execute_script(body["decision_id"], webhook.url)

            results["execute_decision over MCP (a delivery)"] = summarise(
                await measure(conn, turns, warmup, a_decision)
            )
    results["get_contract in-process (framework only)"] = summarise(
        await measure(InProcessCatalog(), turns, warmup)
    )
    return results


def render(results: dict[str, dict[str, Any]], turns: int) -> str:
    try:
        load = f"load average {os.getloadavg()[0]:.2f} at the end"
    except OSError:
        load = "load unknown"
    lines = [
        "## Telemetry",
        "",
        f"Command: `python bench/bench_telemetry.py --turns {turns}` "
        f"({platform.python_implementation()} {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs shared with other work, {load}; reference engine in its own "
        "process, one MCP session, `ScriptedChatModel`, `InMemorySaver`; the four variants' "
        "turns interleaved, the order rotating).",
        "",
        "| turn | clock | `off` median | `no-op` - `off` (median paired) | `no-op` share of the "
        "`off` turn (95% CI) | `attached` - `off` | share | `sdk` - `off` | share |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, clocks in results.items():
        for clock, r in clocks.items():
            n, a, s = r["no-op"], r["attached"], r["sdk"]
            lines.append(
                f"| {label} | {clock} | {r['off_ms']:.2f} ms | {n['diff_ms'] * 1000:+.0f} µs | "
                f"**{n['share']:+.2%}** ({n['share_lo']:+.2%} to {n['share_hi']:+.2%}) | "
                f"{a['diff_ms'] * 1000:+.0f} µs | {a['share']:+.2%} | "
                f"{s['diff_ms'] * 1000:+.0f} µs | {s['share']:+.2%} |"
            )
    lines += [
        "",
        "`off`: no handler and the connection's per-call telemetry replaced by a null "
        "stand-in (the graph before it was instrumented); `no-op`: `instrument(graph)` with "
        "nothing "
        "configured (the default: the graph as it is, each engine call checking that nothing "
        "is configured); `attached`: `instrument(graph, always=True)` with nothing configured "
        "(the handler on every LangChain run, over the API's no-ops); `sdk`: the OpenTelemetry "
        "SDK recording every span (`SimpleSpanProcessor`, in-memory exporter) and metric "
        "(in-memory reader). The paired difference is the median over turns of (the variant's "
        "turn - the `off` turn of the same round); the interval is a bootstrap of that median "
        "(1000 resamples). `wall`: `time.perf_counter`; `cpu`: `time.process_time` of the "
        "benchmark process (the engine's own work, in its own process, is not in it).",
        "",
    ]
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> str:
    async with engine_process() as url:
        results = await bench(url, args.turns, args.warmup)
    return render(results, args.turns)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
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
