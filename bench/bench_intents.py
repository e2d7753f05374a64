"""What the split of a message into its requests costs a search, and where it belongs.

Run from the repository root::

    python bench/bench_intents.py                  # 10k generated tools, 10 alternating rounds
    python bench/bench_intents.py --rounds 20

Three query sets: 1,000 generated single-request queries on the generated catalog (what most
searches are), the 600 messages of the multi-intent dev set, and the 600 single requests of
BFCL v3 (both on their own catalogs). For each, the time per query of ``ToolIndex.search``
with ``multi_intent`` off and on, in alternating rounds (the median of each round's mean, so
a busy moment of a shared machine hits both alike); and the split alone, as the native
function (``split_intents``: the split, each part tokenized and counted, no search) and as
the same rules written with Python's ``re`` (what the split would cost in Python, which
decided where it lives: ``bench/RESULTS.md``).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import apibench  # noqa: E402
import bench_retrieval as br  # noqa: E402
import bfcl  # noqa: E402

# The split's rules in Python (src/intents.rs is the reference; this is for timing only).
_REQUEST = (
    "add|analyse|analyze|apply|book|buy|calculate|call|can|cancel|check|classify|compare|"
    "compute|convert|could|count|create|delete|detect|determine|display|download|draw|email|"
    "estimate|evaluate|extract|fetch|fill|find|generate|get|give|help|how|identify|list|locate|"
    "look|lookup|make|measure|monitor|open|order|pay|please|plot|post|predict|provide|read|"
    "recommend|remove|reserve|retrieve|run|save|schedule|search|sell|send|set|share|show|solve|"
    "sort|start|stop|store|suggest|summarise|summarize|switch|tell|track|transfer|translate|"
    "turn|update|upload|what|whats|when|where|which|who|whom|whose|why|would|write"
)
_CUT = re.compile(
    r"(?:\band\s+)?\bthen\b|(?:^|(?<=[.?!]\s))\s*(?:also|additionally|and)\b|\band\s+also\b"
    r"|\bas\s+well\s+as\b|\band\b(?=\W+(?:" + _REQUEST + r")\b)",
    re.IGNORECASE,
)


def split_python(text: str) -> list[str]:
    parts = []
    for piece in re.split(r"[\n\r;\uff1b]", text):
        parts += [p for p in _CUT.split(piece) if p and p.strip()]
    return parts


def _per_query_us(run: Callable[[list[str]], object], queries: list[str]) -> float:
    start = time.perf_counter()
    run(queries)
    return (time.perf_counter() - start) / len(queries) * 1e6


def measure(label: str, tools: list[dict], queries: list[str], rounds: int) -> dict[str, float]:
    from algenta_graph import _native
    from algenta_graph.retrieval import ToolIndex

    off, on = ToolIndex(multi_intent=False), ToolIndex()
    off.add(tools)
    on.add(tools)
    runs: dict[str, Callable[[list[str]], object]] = {
        "search, split off": lambda qs: [off.search(q) for q in qs],
        "search, split on": lambda qs: [on.search(q) for q in qs],
        "split alone, native": lambda qs: [_native.split_intents(q) for q in qs],
        "split alone, Python re": lambda qs: [split_python(q) for q in qs],
    }
    for run in runs.values():  # warm-up
        run(queries[:50])
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(_per_query_us(run, queries))
    out = {name: statistics.median(t) for name, t in times.items()}
    split = sum(bool(_native.split_intents(q)) for q in queries)
    print(f"\n{label}: {len(queries)} queries, {split} split into requests")
    for name, us in out.items():
        print(f"  {name:<24} {us:8.2f} us per query")
    cost = out["search, split on"] - out["search, split off"]
    print(f"  the split's cost in a search: {cost:+.2f} us")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=10)
    ns = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()}")
    tools, intents = br.generate_catalog(ns.size)
    measure(f"generated {ns.size:,}", tools, br.generate_queries(intents, 1000), ns.rounds)
    merged = bfcl.load_bfcl()
    multi = apibench.load_multi_intent()
    measure("multi-intent set, BFCL part", merged.tools, [q for q, _ in multi["bfcl"]], ns.rounds)
    measure("BFCL v3 (single requests)", merged.tools, [q for q, _ in merged.queries], ns.rounds)
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
