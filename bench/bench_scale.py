"""Benchmark scale-out: governed turns per second at 1, 2 and 4 worker processes, on
PostgreSQL and on SQLite, with an instant engine and with the real reference engine.

A **turn** is one new thread executing one decision through the whole governed graph:
``retrieve_tools -> model -> governed_tool (execute_decision: a receipt) -> model -> END``,
with the offline ``DemoChatModel`` and the graph's default ``"sync"`` durability, so every step's
checkpoint is written before the next step starts. A worker is a separate OS process with its
own checkpointer (a ``psycopg_pool`` of 10 connections, or its own ``AsyncSqliteSaver``
connection to the shared file) and its own engine connection; it runs ``--concurrency``
turns at once (asyncio tasks). The same total number of turns is split evenly over the
workers; the workers start together (a start line), and throughput is the total turns over
the wall time from the first worker's start to the last worker's end.

Two engines:

- ``instant``: ``execute_decision`` is answered inside the worker process at once with a
  receipt in the reference engine's own wire form (captured from one real execution when the
  worker starts): no HTTP, no engine work, no webhook. What is measured is the graph, the
  model stand-in and the checkpoint store.
- ``engine``: every ``execute_decision`` goes over MCP streamable HTTP to one reference engine
  process (``algenta-graph engine``, its own SQLite file), which delivers a real webhook POST to
  a receiver that answers 200 at once. The decisions are logged before the timed part.

PostgreSQL is a throwaway PostgreSQL 15 server started the way the tests start it
(``tests/postgres_support.py``) but with its durability settings at their defaults (``fsync``,
``synchronous_commit`` and ``full_page_writes`` on: every commit is flushed, as SQLite's are),
or with ``--pg-no-fsync`` as the tests start it (flushes off: what is left is CPU), or
``--pg-url`` (a database the run may fill). SQLite is one file per run, shared by all the
workers, in the temporary directory (on this machine an ext4 disk), in LangGraph's WAL mode.

Every configuration runs ``--repeat`` times, in rounds (each round runs every configuration once,
after one discarded warm-up run), and the median is reported with the range: on a shared machine
one run says little.

Run: ``python bench/bench_scale.py [--turns 240] [--repeat 3] [--append bench/RESULTS.md]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# --------------------------------------------------------------------------- the worker


def _instant_connection_class() -> Any:
    from langchain_core.messages import ToolMessage

    from algenta_graph.connection.client import EXECUTE_TOOL
    from algenta_graph.connection.engine import EngineConnection

    class InstantConnection(EngineConnection):
        """A real engine connection (catalog, profile) whose ``execute_decision`` answers at
        once, in-process, with a copy of one real receipt."""

        template: ToolMessage | None = None
        template_decision = ""

        async def call_tool(self, name: str, args: Any, *, tool_call_id: str) -> ToolMessage:
            if name != EXECUTE_TOOL or self.template is None:
                return await super().call_tool(name, args, tool_call_id=tool_call_id)
            old, new = self.template_decision, str(args["decision_id"])
            content = json.loads(json.dumps(self.template.content).replace(old, new))
            artifact = json.loads(json.dumps(self.template.artifact).replace(old, new))
            return ToolMessage(
                content=content,
                artifact=artifact,
                name=name,
                tool_call_id=tool_call_id,
                status=self.template.status,
            )

    return InstantConnection


async def _log_decisions(conn: Any, count: int, tag: str) -> list[str]:
    """Log ``count`` decisions on the engine through the connection's raw session."""
    out = []
    for i in range(count):
        result = await conn.call_tool(
            "log_decision",
            {
                "chosen_action": f"{tag}-{i}",
                "expected_value": 1000.0,
                "confidence": 0.9,
                "risk_p5": 10.0,
                "risk_p95": 2000.0,
                "rationale": "bench_scale",
            },
            tool_call_id=f"log-{tag}-{i}",
        )
        payload = result.artifact.get("structured_content") if result.artifact else None
        if isinstance(payload, dict) and set(payload) == {"result"}:
            payload = payload["result"]
        if not isinstance(payload, dict):
            text = "".join(b.get("text", "") for b in result.content if isinstance(b, dict))
            payload = json.loads(text)
        out.append(str(payload["decision_id"]))
    return out


async def run_worker(spec: dict[str, Any]) -> dict[str, Any]:
    from langchain_core.messages import HumanMessage

    from algenta_graph.connection.engine import EngineConnection
    from algenta_graph.graph import create_governed_agent
    from algenta_graph.models import DemoChatModel
    from algenta_graph.serving.checkpointer import open_checkpointer

    warmup = 2
    instant = spec["engine"] == "instant"
    cls: Any = _instant_connection_class() if instant else EngineConnection
    tag = f"w{spec['index']}-{os.getpid()}"
    async with (
        cls(spec["engine_url"], profile="execute") as conn,
        open_checkpointer(spec["db"], setup=False, pool_size=10) as saver,
    ):
        graph = await create_governed_agent(DemoChatModel(), connection=conn, checkpointer=saver)
        if instant:
            first = (await _log_decisions(conn, 1, tag + "-template"))[0]
            conn.template = await conn.call_tool(
                "execute_decision",
                {"decision_id": first, "webhook_url": spec["webhook_url"]},
                tool_call_id="template",
            )
            conn.template_decision = first
            decisions = [f"dec_instant_{tag}_{i}" for i in range(warmup + spec["turns"])]
        else:
            decisions = await _log_decisions(conn, warmup + spec["turns"], tag)

        async def turn(i: int) -> bool:
            text = f"execute decision_id={decisions[i]} webhook_url={spec['webhook_url']}"
            config: Any = {"configurable": {"thread_id": f"{tag}-{i}"}}
            out = await graph.ainvoke({"messages": [HumanMessage(text)]}, config)
            return [r["decision_id"] for r in out.get("receipts", [])] == [decisions[i]]

        for i in range(warmup):
            assert await turn(i), "warm-up turn gave no receipt"
        print(json.dumps({"ready": True}), flush=True)
        sys.stdin.readline()  # the start line

        queue = list(range(warmup, warmup + spec["turns"]))
        ok = failed = 0
        errors: list[str] = []

        async def lane() -> None:
            nonlocal ok, failed
            while queue:
                i = queue.pop(0)
                try:
                    if await turn(i):
                        ok += 1
                    else:
                        failed += 1
                except Exception as exc:
                    failed += 1
                    if len(errors) < 3:
                        errors.append(f"{type(exc).__name__}: {exc}"[:300])

        start = time.time()
        await asyncio.gather(*(lane() for _ in range(spec["concurrency"])))
        end = time.time()
    return {"ok": ok, "failed": failed, "errors": errors, "start": start, "end": end}


def worker_main(raw: str) -> int:
    result = asyncio.run(run_worker(json.loads(raw)))
    print(json.dumps(result), flush=True)
    return 0


# --------------------------------------------------------------------------- the driver


@contextlib.contextmanager
def engine_process(tmp: Path) -> Iterator[str]:
    from algenta_graph._net import free_port

    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from guarantee_support import EngineProcess

    with EngineProcess(port=free_port(), db=tmp / "engine.sqlite") as engine:
        yield engine.url


@contextlib.contextmanager
def postgres(pg_url: str | None, *, durable: bool = True) -> Iterator[Any]:
    """A function that makes a fresh database URL each call."""
    if pg_url:
        import psycopg

        def fresh() -> str:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                for table in ("checkpoint_writes", "checkpoint_blobs", "checkpoints"):
                    conn.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
                conn.execute("DROP TABLE IF EXISTS checkpoint_migrations")
            return pg_url

        yield fresh
        return
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from postgres_support import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("PostgreSQL binaries not found: apt-get install postgresql-15")
    # durable: fsync and synchronous_commit on, as SQLite flushes each commit (WAL, FULL)
    with PostgresServer(bindir, durable=durable) as server:
        yield server.create_database


def run_config(
    *,
    engine: str,
    store: str,
    workers: int,
    db: str,
    engine_url: str,
    webhook_url: str,
    turns: int,
    concurrency: int,
) -> dict[str, Any]:
    from algenta_graph.serving.checkpointer import open_checkpointer

    async def setup() -> None:  # the tables exist before the workers start (setup once)
        async with open_checkpointer(db):
            pass

    asyncio.run(setup())
    procs = []
    for index in range(workers):
        spec = {
            "index": index,
            "engine": engine,
            "db": db,
            "engine_url": engine_url,
            "webhook_url": webhook_url,
            "turns": turns // workers,
            "concurrency": concurrency,
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__, "--worker", json.dumps(spec)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
        )
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line or not json.loads(line).get("ready"):
                raise RuntimeError(f"worker did not get ready: {line!r}")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = []
        for proc in procs:
            assert proc.stdout is not None
            results.append(json.loads(proc.stdout.readline()))
            proc.wait(timeout=120)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    ok = sum(r["ok"] for r in results)
    return {
        "engine": engine,
        "store": store,
        "workers": workers,
        "concurrent_turns": workers * concurrency,
        "ok": ok,
        "failed": sum(r["failed"] for r in results),
        "errors": [e for r in results for e in r["errors"]][:3],
        "wall_s": wall,
        "turns_per_s": ok / wall if wall > 0 else 0.0,
    }


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per configuration: the median turns/s over the rounds, and its range."""
    import statistics

    out: dict[tuple[str, str, int], dict[str, Any]] = {}
    for r in rows:
        key = (r["engine"], r["store"], r["workers"])
        agg = out.setdefault(
            key, {**{k: r[k] for k in ("engine", "store", "workers", "concurrent_turns")}}
        )
        agg.setdefault("rates", []).append(r["turns_per_s"])
        agg["ok"] = agg.get("ok", 0) + r["ok"]
        agg["failed"] = agg.get("failed", 0) + r["failed"]
        agg.setdefault("errors", []).extend(r["errors"])
    for agg in out.values():
        agg["median"] = statistics.median(agg["rates"])
    return list(out.values())


def render(rows: list[dict[str, Any]], args: argparse.Namespace, info: dict[str, Any]) -> str:
    table = summarise(rows)
    first = table[0]["workers"]
    base = {(r["engine"], r["store"]): r["median"] for r in table if r["workers"] == first}
    lines = [
        "## Scale",
        "",
        "```bash",
        f"python bench/bench_scale.py --turns {args.turns} --concurrency {args.concurrency}"
        f" --workers {args.workers} --repeat {args.repeat}"
        + (" --pg-no-fsync" if args.pg_no_fsync else ""),
        "```",
        "",
        f"Run on {info['date']} on {info['machine']}: {info['cpus']} CPUs, load average "
        f"{info['load_before']} before and {info['load_after']} after, Python {info['python']}, "
        f"PostgreSQL {info['pg']}"
        + (" with fsync and synchronous_commit off" if args.pg_no_fsync else "")
        + f". {args.turns} turns per run, split evenly over the workers; "
        f"{args.repeat} rounds over every configuration (after one warm-up run); the median "
        "turns/s, and the rounds' range.",
        "",
        "| engine | store | workers | turns at once | turns ok | failed | turns/s (median) "
        f"| range | vs {first} worker{'s' if first > 1 else ''} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        ratio = r["median"] / base[(r["engine"], r["store"])]
        lines.append(
            f"| {r['engine']} | {r['store']} | {r['workers']} | {r['concurrent_turns']} "
            f"| {r['ok']} | {r['failed']} | {r['median']:.1f} "
            f"| {min(r['rates']):.1f}-{max(r['rates']):.1f} | {ratio:.2f}x |"
        )
    errors = [(r["engine"], r["store"], r["workers"], e) for r in table for e in r["errors"]]
    if errors:
        lines += ["", "Errors seen (the first few):", ""]
        lines += [f"- {e} / {s} / {w} workers: `{msg}`" for e, s, w, msg in errors[:6]]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--turns", type=int, default=240, help="total turns per configuration")
    parser.add_argument("--concurrency", type=int, default=4, help="turns at once per worker")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--engines", default="instant,engine")
    parser.add_argument("--stores", default="postgres,sqlite")
    parser.add_argument("--repeat", type=int, default=3, help="rounds over every configuration")
    parser.add_argument(
        "--pg-no-fsync",
        action="store_true",
        help="start PostgreSQL as the tests do (fsync, synchronous_commit off): CPU-bound figures",
    )
    parser.add_argument("--pg-url", default=None, help="use this database (its tables dropped)")
    parser.add_argument("--append", default=None, help="append the section to this file")
    parser.add_argument("--json", default=None, help="write the raw rows here")
    args = parser.parse_args()
    if args.worker:
        return worker_main(args.worker)
    # a SIGTERM unwinds the context managers: the engine, PostgreSQL and workers are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    from algenta_graph.engine import WebhookReceiver

    info: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d at %H:%M UTC", time.gmtime()),
        "machine": platform.node() or "this machine",
        "cpus": os.cpu_count(),
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "python": platform.python_version(),
    }
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp_dir,
        WebhookReceiver() as hook,
        engine_process(Path(tmp_dir)) as engine_url,
        postgres(args.pg_url, durable=not args.pg_no_fsync) as fresh_pg,
    ):
        import psycopg

        with psycopg.connect(fresh_pg()) as conn:
            info["pg"] = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
        configs = [
            (engine, store, int(w))
            for engine in args.engines.split(",")
            for store in args.stores.split(",")
            for w in args.workers.split(",")
        ]
        # round 0 warms the machine up (PostgreSQL's caches, the engine, the page cache) and
        # is not reported; then every round runs every configuration once, so a change in
        # the machine's load during the run falls on all configurations alike
        for rnd in range(args.repeat + 1):
            for engine, store, workers in configs if rnd else configs[:1]:
                db = (
                    fresh_pg()
                    if store == "postgres"
                    else str(Path(tmp_dir) / f"{engine}-{workers}-{rnd}.sqlite")
                )
                row = run_config(
                    engine=engine,
                    store=store,
                    workers=workers,
                    db=db,
                    engine_url=engine_url,
                    webhook_url=hook.url,
                    turns=args.turns,
                    concurrency=args.concurrency,
                )
                row["round"] = rnd
                print(json.dumps(row), flush=True)
                if rnd:
                    rows.append(row)
    info["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    if args.json:
        Path(args.json).write_text(json.dumps({"info": info, "rows": rows}, indent=1))
    section = render(rows, args, info)
    print(section)
    if args.append:
        with open(args.append, "a", encoding="utf-8") as fh:
            fh.write("\n" + section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
