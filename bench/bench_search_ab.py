"""One-process A/B of BM25 search latency between two builds of the native module.

Separate ``bench_million`` processes are too noisy on a shared machine to resolve a change of
10% (the same binary gave 0.27-0.37 ms p50 at 1M in runs minutes apart). This script loads two
builds of ``algenta_graph._native`` side by side, builds one index with each from the same
pickled catalog (each module's ``Bm25Index`` with its defaults, searched directly), checks
that every query gives identical hits (names, order, scores) at k = 1, 5, 10 and 50, then times
the ``bench_million`` queries on A, B, B, A, ... and prints p50 / p95 of each build and B / A.

Run from the repository root (figures in ``bench/RESULTS.md``)::

    cargo build --release --lib --features pyo3/extension-module   # in each tree's native/
    cp native/target/release/lib_native.so /tmp/B.so                # and A's build to /tmp/A.so
    python bench/bench_search_ab.py --cache /tmp/nd1m.pkl /tmp/A.so /tmp/B.so --reps 4

``--cache`` is a pickle written by ``bench_million.py --cache`` (any size and catalog). Each
rep times the queries once on each build, in blocks of ``--block`` queries alternating (the
order of the two builds flips every rep: A B, B A, ...), so both see the same machine.
"""

from __future__ import annotations

import argparse
import gc
import importlib.machinery
import importlib.util
import json
import os
import pickle
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_retrieval as br  # noqa: E402


def load_native(path: Path, tag: str) -> ModuleType:
    """The native module built at ``path``, under a name of its own.

    The extension's init function is found by the last part of the module's name
    (``PyInit__native``), so each copy is imported as ``<tag>._native``; each file has its
    own statics, so PyO3's once-per-process check does not see the other.
    """
    name = f"_ab_{tag}._native"
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def build(native: ModuleType, tools: list[dict[str, Any]]) -> Any:
    """An index over ``tools`` from ``native``'s ``Bm25Index`` (its defaults), searched through
    ``search`` below: the two builds' Python facades may differ in what they pass."""
    from algenta_graph.retrieval.tools import tool_parts

    index = native.Bm25Index()
    start = time.perf_counter()
    index.add(tools, convert=tool_parts)
    print(f"  built in {time.perf_counter() - start:.2f} s", file=sys.stderr)
    return index


pct = br.pct


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", type=Path, help="build A (the baseline): a _native .so")
    parser.add_argument("b", type=Path, help="build B (the change): a _native .so")
    parser.add_argument("--cache", type=Path, required=True, help="bench_million's pickle")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--block", type=int, default=1000, help="queries per A or B block")
    parser.add_argument("--k", type=int, default=br.K)
    ns = parser.parse_args(argv)
    with open("/proc/loadavg") as fh:
        load = fh.read().split()[:3]
    print(f"load average before the run: {load}; cores: {os.cpu_count()}", file=sys.stderr)
    gc.disable()
    with ns.cache.open("rb") as fh:
        cached = pickle.load(fh)
    gc.enable()
    tools, intents = cached["tools"], cached["intents"]
    queries = br.generate_queries(intents, ns.queries)
    natives = {"A": load_native(ns.a, "a"), "B": load_native(ns.b, "b")}
    indexes = {}
    for tag, native in natives.items():
        print(f"{tag}: {native.__file__}", file=sys.stderr)
        indexes[tag] = build(native, tools)
        gc.collect()
    del tools
    gc.collect()
    # Identical hits on every query at four k: the change must not move a ranking.
    differ = 0
    for q in queries:
        for k in (1, 5, 10, 50):
            ha = indexes["A"].search(q, k)
            hb = indexes["B"].search(q, k)
            differ += ha != hb
    print(f"hits compared: {len(queries) * 4}, differing: {differ}", file=sys.stderr)
    for tag in ("A", "B"):  # warm-up
        for q in queries[:20]:
            indexes[tag].search(q, ns.k)
    runs: dict[str, list[list[float]]] = {"A": [], "B": []}
    for rep in range(ns.reps):
        order = ("A", "B") if rep % 2 == 0 else ("B", "A")
        lat: dict[str, list[float]] = {"A": [], "B": []}
        for start in range(0, len(queries), ns.block):
            block = queries[start : start + ns.block]
            for tag in order:
                search = indexes[tag].search
                for q in block:
                    t0 = time.perf_counter_ns()
                    search(q, ns.k)
                    lat[tag].append((time.perf_counter_ns() - t0) / 1e6)
        for tag in ("A", "B"):
            runs[tag].append(lat[tag])
        a50, b50 = pct(lat["A"], 0.5), pct(lat["B"], 0.5)
        print(
            f"rep {rep} ({' '.join(order)}): A p50 {a50:.4f} p95 {pct(lat['A'], 0.95):.4f}  "
            f"B p50 {b50:.4f} p95 {pct(lat['B'], 0.95):.4f}  B/A {b50 / a50:.3f}",
            file=sys.stderr,
        )
    with open("/proc/loadavg") as fh:
        load_after = fh.read().split()[:3]
    every = {tag: [x for run in runs[tag] for x in run] for tag in runs}
    result = {
        "catalog": cached["catalog"],
        "tools": cached["size"],
        "differing_hits": differ,
        "reps": ns.reps,
        "load_before": load,
        "load_after": load_after,
        "a_p50_ms_by_rep": [round(pct(r, 0.5), 4) for r in runs["A"]],
        "b_p50_ms_by_rep": [round(pct(r, 0.5), 4) for r in runs["B"]],
        "a_p50_ms": round(pct(every["A"], 0.5), 4),
        "a_p95_ms": round(pct(every["A"], 0.95), 4),
        "b_p50_ms": round(pct(every["B"], 0.5), 4),
        "b_p95_ms": round(pct(every["B"], 0.95), 4),
        "b_over_a_p50": round(pct(every["B"], 0.5) / pct(every["A"], 0.5), 4),
        "b_over_a_p95": round(pct(every["B"], 0.95) / pct(every["A"], 0.95), 4),
    }
    print(json.dumps(result))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
