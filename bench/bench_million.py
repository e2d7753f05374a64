"""A million tools: build time, index memory and search latency of ``ToolIndex``.

Run from the repository root (figures in ``bench/RESULTS.md``)::

    python bench/bench_million.py                          # 1,000,000 generated tools
    python bench/bench_million.py --catalog near-duplicate # the 50k catalog copied 20 times
    python bench/bench_million.py --size 50000
    python bench/bench_million.py --hybrid                 # also vectors (embeddings extra)
    python bench/bench_million.py --check-exact            # pruned top-k == exhaustive top-k
    python bench/bench_million.py --cache /tmp/gen1m-intents.pkl   # generate once, then load

The ``generated`` catalog comes from ``bench_retrieval.generate_catalog`` (fixed seed): the same
generator as the 1k-50k figures, whose long tail of product names grows with the catalog beyond
50k tools (one per 10 tools). The ``near-duplicate`` catalog is the 50k catalog copied until it
has ``--size`` tools, each copy of a tool renamed (``<name>_c<copy>``) and its description
given three extra words drawn from the catalog's own vocabulary (real registries are full of
look-alike tools: every postings list of the query terms is long). The build runs with
``progress=True`` (its lines go to stderr). Memory is the RSS growth of this process from
building the index, after ``gc.collect()``; latency is measured on 1,000 generated queries
after 20 warm-up searches. ``--hybrid`` embeds every tool with WordLlama (time reported
apart), adds the vectors (a float32 array, stored as ``--vector-precision``) with the tools,
and measures hybrid search with the query vectors precomputed, and the recall of the
approximate vector search against the exact scan of the stored vectors and against the exact
cosines of the f32 vectors (numpy). ``heap_mb`` is the index's own heap estimate (every
table's capacity), ``memory_mb`` the RSS growth.
``--check-exact`` compares, for every query and k in 1, 5, 10 and 50, the pruned search
(``search``) with exhaustive scoring (``search_exhaustive``: every posting of every query term
scored): names, order and scores; it reports the mismatches (0 is exact) and the exhaustive
search's latency beside the pruned one.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_retrieval as br  # noqa: E402


def index_figures(index: Any, memory_mb: float, lat: list[float]) -> dict[str, Any]:
    """An index's memory (RSS growth, its heap estimate), sizes and search p50 / p95."""
    stats = index.stats()
    return {
        "memory_mb": round(memory_mb, 1),
        "heap_mb": round(stats["heap_bytes"] / 2**20, 1),
        "terms": stats["terms"],
        "postings": stats["postings"],
        "p50_ms": round(br.pct(lat, 0.5), 4),
        "p95_ms": round(br.pct(lat, 0.95), 4),
    }


def near_duplicate_catalog(n: int, seed: int = br.SEED) -> tuple[list[dict[str, Any]], list[Any]]:
    """The 50k catalog copied until ``n`` tools, each copy with three extra words."""
    base, intents = br.generate_catalog(50_000, seed)
    return copied_catalog(base, n, random.Random(seed + 7)), intents


def copied_catalog(base: list[dict[str, Any]], n: int, rng: random.Random) -> list[dict[str, Any]]:
    """``base`` copied until ``n`` tools (``<name>_c<copy>``), each copy's description with
    three random words of ``base``'s vocabulary added."""
    vocab = sorted(
        {w for t in base for w in re.findall(r"[a-z]{3,}", (t["description"] or "").lower())}
    )
    tools: list[dict[str, Any]] = []
    copy = 0
    while len(tools) < n:
        for t in base:
            if len(tools) == n:
                break
            extra = " ".join(rng.choice(vocab) for _ in range(3))
            tools.append(
                {
                    "name": f"{t['name']}_c{copy}",
                    "description": f"{t['description']} {extra}",
                    "input_schema": t["input_schema"],
                }
            )
        copy += 1
    return tools


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--catalog", choices=("generated", "near-duplicate"), default="generated")
    parser.add_argument("--hybrid", action="store_true")
    parser.add_argument(
        "--vector-precision",
        choices=("int8", "f32"),
        default="int8",
        help="with --hybrid: how the vectors are stored (default: the index's default, int8)",
    )
    parser.add_argument("--check-exact", action="store_true")
    parser.add_argument(
        "--cache",
        type=Path,
        help="pickle of the catalog and its intents (written if absent; same --catalog and --size)",
    )
    parser.add_argument(
        "--vectors-cache",
        type=Path,
        help="with --hybrid: load the tools' vectors from this .npy file, or save them there",
    )
    ns = parser.parse_args(argv)
    with open("/proc/loadavg") as fh:
        load = fh.read().split()[:3]
    print(f"load average before the run: {load}; cores: {os.cpu_count()}", file=sys.stderr)
    start = time.perf_counter()
    if ns.cache is not None and ns.cache.exists():
        gc.disable()
        with ns.cache.open("rb") as fh:
            cached = pickle.load(fh)
        gc.enable()
        if (cached["catalog"], cached["size"]) != (ns.catalog, ns.size):
            raise SystemExit(
                f"--cache {ns.cache} holds the {cached['catalog']} catalog of {cached['size']:,} "
                f"tools, not --catalog {ns.catalog} --size {ns.size}"
            )
        tools, intents = cached["tools"], cached["intents"]
    else:
        if ns.catalog == "generated":
            tools, intents = br.generate_catalog(ns.size)
        else:
            tools, intents = near_duplicate_catalog(ns.size)
        if ns.cache is not None:
            with ns.cache.open("wb") as fh:
                cached = {"catalog": ns.catalog, "size": ns.size, "tools": tools}
                pickle.dump({**cached, "intents": intents}, fh, protocol=5)
    queries = br.generate_queries(intents, ns.queries)
    print(f"generated {len(tools):,} tools in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    from algenta_graph.retrieval import ToolIndex

    vectors = qv = None
    embed_s = 0.0
    if ns.hybrid:
        import numpy as np

        from algenta_graph.retrieval.static_embeddings import WordLlamaEmbeddings
        from algenta_graph.retrieval.vectors import embedding_text

        model = WordLlamaEmbeddings()
        start = time.perf_counter()
        cache = ns.vectors_cache
        if cache is not None and cache.exists():
            array = np.load(cache)
            print(f"vectors loaded from {cache} (embedding time not measured)", file=sys.stderr)
        else:
            texts = [embedding_text(t["name"], t["description"], t["input_schema"]) for t in tools]
            array = np.concatenate(
                [
                    model.embed_documents_array(texts[i : i + 50_000])
                    for i in range(0, len(texts), 50_000)
                ]
            )
            del texts
            embed_s = time.perf_counter() - start
            if cache is not None:
                np.save(cache, array)
        if len(array) != len(tools):
            raise SystemExit(f"{cache}: {len(array)} vectors for {len(tools)} tools")
        # The array as it is: the index reads the float32 buffer (no bytes copy).
        vectors = np.ascontiguousarray(array, dtype=np.float32)
        del array
        qarr = model.embed_documents_array(queries)
        qv = [v.tobytes() for v in qarr]
        # The exact top k of the f32 vectors (true cosines) for the recall figures.
        sample = min(200, len(qv))
        qn = qarr[:sample] / np.linalg.norm(qarr[:sample], axis=1, keepdims=True)
        cos = np.concatenate(
            [
                qn @ (c / np.linalg.norm(c, axis=1, keepdims=True)).T
                for c in np.array_split(vectors, max(1, len(vectors) // 100_000))
            ],
            axis=1,
        )
        true_top = np.argsort(-cos, axis=1)[:, :50]
        del cos
        print(f"embedded {len(tools):,} tools in {embed_s:.0f} s", file=sys.stderr)

    index = ToolIndex(vector_precision=ns.vector_precision)
    gc.collect()
    before = br.rss_bytes()
    start, cpu = time.perf_counter(), time.process_time()
    index.add(tools, progress=True, vectors=vectors)
    build_s, build_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    gc.collect()
    # Measured with the input vectors still held: freeing them first would net their pages
    # out of the index's growth (what part 8's 593 MB for the 1M hybrid index did).
    memory_mb = (br.rss_bytes() - before) / 2**20
    del vectors
    gc.collect()
    lat = br.latencies(lambda i: index.search(queries[i], br.K), len(queries))
    cpu = time.process_time()
    index.search_many(queries, br.K)
    many_ms = (time.process_time() - cpu) * 1000 / len(queries)
    result: dict[str, Any] = {
        "catalog": ns.catalog,
        "tools": len(index),
        "build_s": round(build_s, 2),
        "build_cpu_s": round(build_cpu_s, 2),
        **index_figures(index, memory_mb, lat),
        "search_many_cpu_ms_per_query": round(many_ms, 4),
    }
    if ns.check_exact:
        native = index._index
        mismatches = []
        for q in queries:
            for k in (1, 5, 10, 50):
                if native.search(q, k) != native.search_exhaustive(q, k):
                    mismatches.append((q, k))
        exh = br.latencies(lambda i: native.search_exhaustive(queries[i], br.K), len(queries))
        result["exact_checked"] = len(queries) * 4
        result["exact_mismatches"] = len(mismatches)
        result["exact_mismatch_examples"] = mismatches[:5]
        result["exhaustive_p50_ms"] = round(br.pct(exh, 0.5), 4)
        result["exhaustive_p95_ms"] = round(br.pct(exh, 0.95), 4)
    if qv is not None:
        rows = qv
        hyb = br.latencies(lambda i: index.search(queries[i], br.K, vector=rows[i]), len(queries))
        result["embed_tools_s"] = round(embed_s, 1) if embed_s else None
        result["hybrid_p50_ms"] = round(br.pct(hyb, 0.5), 4)
        result["hybrid_p95_ms"] = round(br.pct(hyb, 0.95), 4)
        native = index._index
        from algenta_graph.retrieval import FUSION_DEPTH

        result["vector_precision"] = ns.vector_precision
        for k in sorted({10, FUSION_DEPTH, 50}):
            got = got_true = 0
            for i, row in enumerate(rows[:sample]):
                exact = {n for n, _ in native.search_vector(row, k, None, True)}
                approx = {n for n, _ in native.search_vector(row, k, None, False)}
                true = {tools[j]["name"] for j in true_top[i, :k]}
                got += len(exact & approx)
                got_true += len(true & approx)
            result[f"vector_recall_at_{k}"] = round(got / (k * sample), 4)
            result[f"vector_recall_at_{k}_vs_exact_f32"] = round(got_true / (k * sample), 4)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
