"""A million tools: build time, index memory and search latency of ``ToolIndex``.

Run from the repository root (figures in ``bench/RESULTS.md``)::

    python bench/bench_million.py                    # 1,000,000 generated tools
    python bench/bench_million.py --size 50000

The catalog comes from ``bench_retrieval.generate_catalog`` (fixed seed): the same generator
as the 1k-50k figures, whose long tail of product names grows with the catalog beyond 50k
tools (one per 10 tools), so names, descriptions, schemas and the vocabulary vary as they do
there. The build runs with ``progress=True`` (its lines go to stderr). Memory is the RSS growth
of this process from building the index, after ``gc.collect()``; latency is measured on 1,000
generated queries after 20 warm-up searches.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_retrieval as br  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=1000)
    ns = parser.parse_args(argv)
    with open("/proc/loadavg") as fh:
        load = fh.read().split()[:3]
    print(f"load average before the run: {load}; cores: {os.cpu_count()}", file=sys.stderr)
    start = time.perf_counter()
    tools, intents = br.generate_catalog(ns.size)
    queries = br.generate_queries(intents, ns.queries)
    print(f"generated {len(tools):,} tools in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    from algenta_graph.retrieval import ToolIndex

    index = ToolIndex()
    gc.collect()
    before = br.rss_bytes()
    start, cpu = time.perf_counter(), time.process_time()
    index.add(tools, progress=True)
    build_s, build_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    gc.collect()
    memory_mb = (br.rss_bytes() - before) / 2**20
    for q in queries[:20]:
        index.search(q, br.K)
    lat = []
    for q in queries:
        t0 = time.perf_counter_ns()
        index.search(q, br.K)
        lat.append((time.perf_counter_ns() - t0) / 1e6)
    cpu = time.process_time()
    index.search_many(queries, br.K)
    many_ms = (time.process_time() - cpu) * 1000 / len(queries)
    stats = index.stats()
    result = {
        "tools": len(index),
        "build_s": round(build_s, 2),
        "build_cpu_s": round(build_cpu_s, 2),
        "memory_mb": round(memory_mb, 1),
        "heap_mb": round(stats["heap_bytes"] / 2**20, 1),
        "terms": stats["terms"],
        "postings": stats["postings"],
        "p50_ms": round(br.pct(lat, 0.5), 4),
        "p95_ms": round(br.pct(lat, 0.95), 4),
        "search_many_cpu_ms_per_query": round(many_ms, 4),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
