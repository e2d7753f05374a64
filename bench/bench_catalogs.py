"""Pruning on any catalog: search p50 at a million tools against p50 at 10k, and exactness, on
catalogs generated in several ways.

Run from the repository root (figures in ``bench/RESULTS.md``)::

    python bench/bench_catalogs.py                        # every catalog, 10k and 1M
    python bench/bench_catalogs.py --catalogs families-1k --sizes 10000 100000
    python bench/bench_catalogs.py --check-exact 200      # also pruned == exhaustive, 200 queries

Each catalog is made by one generator at every size (fixed seeds), its queries drawn
independently of the tools (words of the vocabulary, or the dev sets' requests), never from a
tool's own text:

* ``small-vocab``: 5,000 words, Zipf-distributed (s = 1.1), descriptions of 6-20 words;
* ``large-vocab``: 500,000 words, the same shape (most words rare);
* ``long-descriptions``: 50,000 words, descriptions of 60-150 words;
* ``families-20``: tools of the 50,000-word vocabulary in look-alike families of 20 (one base
  tool, then copies that each add 3 words of the vocabulary);
* ``families-1k``: the 1,639 tools of BFCL v3 and APIBench (another generator's catalog)
  copied until the size is reached (about 600 copies each at a million), each copy with 3
  random words of their vocabulary, queried with the dev sets' own requests;
* ``generated`` / ``near-duplicate``: the catalogs of ``bench_million.py``.

Queries of the vocabulary catalogs: 2-6 words drawn from the same Zipf distribution. For each
catalog and size: the build, then p50 / p95 of 1,000 searches (k = 5, after 20 warm-up
searches), the ratio of the 1M p50 to the 10k p50, and with ``--check-exact N`` the first N
queries searched at k = 1, 5, 10 and 50 both pruned and exhaustively (names, order, scores).
With ``--hardness N``, per query of the first N, how many tools score within 10% of the 5th
best (near ties: an exact top 5 must score every one of them; counted up to 20,000).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_million  # noqa: E402
import bench_retrieval as br  # noqa: E402

SEED = 46
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def words(n: int) -> list[str]:
    """``n`` distinct pseudo-words of 2-5 syllables (no digits: stemmed like prose)."""
    out = []
    base = len(SYLLABLES)
    for i in range(n):
        parts, x = [], i + base  # at least two syllables
        while x:
            x, r = divmod(x, base)
            parts.append(SYLLABLES[r])
        out.append("".join(parts))
    return out


def zipf_weights(n: int, s: float = 1.1) -> list[float]:
    return list(itertools.accumulate(1.0 / (r**s) for r in range(1, n + 1)))


Catalog = tuple[list[dict[str, Any]], list[str]]


def vocabulary_catalog(
    n: int, vocab: int, length: tuple[int, int], family: int = 1, seed: int = SEED
) -> Catalog:
    """``n`` tools of Zipf-drawn words; with ``family`` > 1, look-alike families of that size:
    a base tool, then copies of it that each add 3 words of the vocabulary."""
    rng = random.Random(seed)
    vs = words(vocab)
    cum = zipf_weights(vocab)
    tools: list[dict[str, Any]] = []
    base: dict[str, Any] = {}
    for i in range(n):
        if i % family == 0:
            text = rng.choices(vs, cum_weights=cum, k=rng.randint(*length))
            params = {
                w: {
                    "type": "string",
                    "description": " ".join(rng.choices(vs, cum_weights=cum, k=4)),
                }
                for w in rng.choices(vs, cum_weights=cum, k=rng.randint(0, 4))
            }
            base = {"description": " ".join(text), "input_schema": {"properties": params}}
            description = base["description"]
        else:
            description = base["description"] + " " + " ".join(rng.choices(vs, k=3))
        tools.append(
            {
                "name": f"{vs[i % vocab]}_{i}",
                "description": description,
                "input_schema": base["input_schema"],
            }
        )
    qrng = random.Random(seed + 1)
    queries = [
        " ".join(qrng.choices(vs, cum_weights=cum, k=qrng.randint(2, 6))) for _ in range(1000)
    ]
    return tools, queries


def families_of_dev_sets(n: int, seed: int = SEED) -> Catalog:
    """BFCL v3's and APIBench's tools copied until ``n``, each copy with 3 random words of
    their vocabulary; queries: the dev sets' requests."""
    import apibench
    import bfcl

    api = apibench.load_apibench()
    merged = bfcl.load_bfcl()
    base = merged.tools + api.tools
    tools = bench_million.copied_catalog(base, n, random.Random(seed))
    queries = [q for q, _ in merged.queries] + [q for q, _ in api.queries]
    random.Random(seed + 1).shuffle(queries)
    return tools, queries[:1000]


def generated(n: int) -> Catalog:
    tools, intents = br.generate_catalog(n)
    return tools, br.generate_queries(intents, 1000)


def near_duplicate(n: int) -> Catalog:
    tools, intents = bench_million.near_duplicate_catalog(n)
    return tools, br.generate_queries(intents, 1000)


CATALOGS: dict[str, Callable[[int], Catalog]] = {
    "small-vocab": lambda n: vocabulary_catalog(n, 5_000, (6, 20)),
    "large-vocab": lambda n: vocabulary_catalog(n, 500_000, (6, 20)),
    "long-descriptions": lambda n: vocabulary_catalog(n, 50_000, (60, 150)),
    "families-20": lambda n: vocabulary_catalog(n, 50_000, (6, 20), family=20),
    "families-1k": families_of_dev_sets,
    "generated": generated,
    "near-duplicate": near_duplicate,
}


NEAR = 0.9
"""A tool scoring at least this share of the k-th best score is a near tie (``--hardness``)."""
NEAR_CAP = 20_000


def hardness(native: Any, queries: list[str]) -> dict[str, float]:
    """What makes a catalog hard for exact pruning: per query, how many tools score within 10%
    of the 5th best (each must be scored to prove the top 5; counted up to 20,000), and how
    many postings its terms have (what exhaustive scoring reads)."""
    near = []
    for q in queries:
        hits = native.search_exhaustive(q, NEAR_CAP)
        if len(hits) >= br.K:
            kth = hits[br.K - 1][1]
            near.append(sum(s >= NEAR * kth for _, s in hits))
    near.sort()
    return {
        "near_ties_p50": near[len(near) // 2] if near else 0,
        "near_ties_mean": round(sum(near) / max(1, len(near)), 1),
    }


def measure(name: str, size: int, check_exact: int, hard: int = 0) -> dict[str, Any]:
    from algenta_graph.retrieval import ToolIndex

    start = time.perf_counter()
    tools, queries = CATALOGS[name](size)
    made_s = time.perf_counter() - start
    index = ToolIndex()
    gc.collect()
    before = br.rss_bytes()
    start = time.perf_counter()
    index.add(tools)
    build_s = time.perf_counter() - start
    gc.collect()
    memory_mb = (br.rss_bytes() - before) / 2**20  # the catalog still held: the index's growth
    del tools
    gc.collect()
    lat = br.latencies(lambda i: index.search(queries[i], br.K), len(queries))
    out: dict[str, Any] = {
        "catalog": name,
        "tools": len(index),
        "made_s": round(made_s, 1),
        "build_s": round(build_s, 2),
        **bench_million.index_figures(index, memory_mb, lat),
    }
    if hard:
        out |= hardness(index._index, queries[:hard])
    if check_exact:
        native = index._index
        bad = [
            (q, k)
            for q in queries[:check_exact]
            for k in (1, 5, 10, 50)
            if native.search(q, k) != native.search_exhaustive(q, k)
        ]
        exh = br.latencies(lambda i: native.search_exhaustive(queries[i], br.K), len(queries))
        out |= {
            "exact_checked": 4 * len(queries[:check_exact]),
            "exact_mismatches": len(bad),
            "exhaustive_p50_ms": round(br.pct(exh, 0.5), 4),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--catalogs", nargs="*", default=list(CATALOGS), choices=list(CATALOGS))
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 1_000_000])
    parser.add_argument("--check-exact", type=int, default=0, metavar="N")
    parser.add_argument(
        "--hardness", type=int, default=0, metavar="N", help="near ties of the first N queries"
    )
    parser.add_argument("--json", type=Path)
    ns = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()}", file=sys.stderr)
    results = []
    for name in ns.catalogs:
        row = {}
        for size in ns.sizes:
            r = measure(name, size, ns.check_exact, ns.hardness)
            print(json.dumps(r), flush=True)
            results.append(r)
            row[size] = r["p50_ms"]
            gc.collect()
        if len(ns.sizes) > 1:
            lo, hi = min(ns.sizes), max(ns.sizes)
            print(f"{name}: p50 {hi:,} / p50 {lo:,} = {row[hi] / row[lo]:.1f}x", flush=True)
    print(f"load average after: {os.getloadavg()}", file=sys.stderr)
    if ns.json:
        ns.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
