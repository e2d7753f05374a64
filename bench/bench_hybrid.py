"""Hybrid retrieval (BM25F + embeddings, fused in Rust) against BM25 alone: quality on every dev
set, latency at 10k and 50k generated tools, and the recall of the approximate vector search.

Run from the repository root (needs the ``embeddings`` extra: ``pip install -e ".[embeddings]"``;
the model is WordLlama's packaged 256-dimension ``l2_supercat``, nothing is downloaded)::

    python bench/bench_hybrid.py                     # everything
    python bench/bench_hybrid.py --no-latency        # dev sets only
    python bench/bench_hybrid.py --sizes 10000
    python bench/bench_hybrid.py --no-latency --depths 50 40 30 20 15 10   # the fusion depth
    python bench/bench_hybrid.py --no-latency --fusions 0.9:0 0.8:0.4      # weight:floor pairs
    python bench/bench_hybrid.py --memory-only int8 --sizes 10000          # memory of add()

Quality: recall@1 / recall@5 (MRR over the top 50) on APIBench (whole and per domain), BFCL v3
in both loadings and the multi-intent set (as ``bench/apibench.py``), for ``ToolIndex()`` and
``ToolIndex(embeddings=WordLlamaEmbeddings())`` (f32 and int8 vectors), each also with
``multi_intent=False`` ("split off": a message is never split into its requests). Recall is
scored from a search for 5 hits, MRR from a search for 50: a hybrid search fuses the best
``max(depth, k)`` of each ranking, so asking for 50 would fuse 50 whatever the default depth.
Latency: p50 / p95 of
1,000 generated queries after 20 warm-up searches, each search through ``ToolIndex.search``
with the query's vector precomputed (``vector=``), so embedding time is excluded; the time to
embed one query is measured on its own. Recall of the approximate vector search: the share of
the exact top k (full scan) that the default search returns, over the same queries, for k = 5,
10, the fusion's default depth and 50, against the same storage's exact scan and against the
exact scan of the f32 vectors (the true cosines). Memory: RSS growth of the add and the index's
own heap estimate, from a float32 array and through the model (``ToolIndex(embeddings=...)``).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import apibench  # noqa: E402
import bench_retrieval as br  # noqa: E402

RECALL_HITS = 5
"""Hits asked for when recall@1 / recall@5 are scored (``retrieve_tools``' default ``top_k``)."""


def _model() -> Any:
    from algenta_graph.retrieval.static_embeddings import WordLlamaEmbeddings

    return WordLlamaEmbeddings()


def _texts(tools: list[dict[str, Any]]) -> list[str]:
    from algenta_graph.retrieval.vectors import embedding_text

    return [
        embedding_text(t["name"], t.get("description") or "", t.get("input_schema")) for t in tools
    ]


def _fusion(text: str) -> tuple[float, float]:
    """``"0.8:0.2"`` -> (BM25 weight 0.8, cosine floor 0.2), for ``--fusions``."""
    weight, sep, floor = text.partition(":")
    try:
        if not sep:
            raise ValueError(text)
        return float(weight), float(floor)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a fusion is WEIGHT:FLOOR (for example 0.8:0.2), got {text!r}"
        ) from None


def quality(
    model: Any,
    depths: list[int] | None = None,
    fusions: list[tuple[float, float]] | None = None,
) -> dict[str, dict[str, Any]]:
    from algenta_graph.retrieval import ToolIndex

    variants: dict[str, dict[str, Any]] = {
        "bm25": {},
        "bm25, split off": {"multi_intent": False},
        "hybrid f32": {"embeddings": model},
        "hybrid f32, split off": {"embeddings": model, "multi_intent": False},
        "hybrid int8": {"embeddings": model, "vector_precision": "int8"},
    }
    for depth in depths or []:
        variants[f"hybrid f32, depth {depth}"] = {"embeddings": model, "depth": depth}
    for weight, floor in fusions or []:
        variants[f"hybrid f32, weight {weight}, floor {floor}"] = {
            "embeddings": model,
            "bm25_weight": weight,
            "cosine_floor": floor,
        }
    out: dict[str, dict[str, Any]] = {}
    for label, kwargs in variants.items():

        def search_for(
            tools: list[dict[str, Any]], kwargs: dict[str, Any] = kwargs, hits: int | None = None
        ) -> Any:
            index = ToolIndex(**kwargs)
            index.add(tools)
            return lambda qs, k: [
                [h.tool_id for h in found] for found in index.search_many(qs, hits or k)
            ]

        # A hybrid search reads max(depth, k) hits of each ranking, so its top 5 depends on
        # k: recall@1 / recall@5 come from a search for 5 hits (what `retrieve_tools` asks,
        # at the default depth), MRR from the search for 50 (depth 50).
        at50 = apibench.report(search_for)
        at5 = apibench.report(lambda tools: search_for(tools, hits=RECALL_HITS))
        out[label] = {
            s: {
                **vars(at50[s]),
                "recall_at_1": at5[s].recall_at_1,
                "recall_at_5": at5[s].recall_at_5,
            }
            for s in at50
        }
    return out


def latency(model: Any, size: int, n_queries: int) -> dict[str, Any]:
    import numpy as np

    from algenta_graph.retrieval import FUSION_DEPTH, ToolIndex

    tools, intents = br.generate_catalog(size)
    queries = br.generate_queries(intents, n_queries)
    start = time.perf_counter()
    vectors = model.embed_documents_array(_texts(tools))
    embed_docs_s = time.perf_counter() - start
    qv = model.embed_documents_array(queries)
    one = []
    for q in queries[:300]:
        t0 = time.perf_counter_ns()
        model.embed_query(q)
        one.append((time.perf_counter_ns() - t0) / 1e6)
    result: dict[str, Any] = {
        "size": size,
        "embed_tools_s": round(embed_docs_s, 2),
        "embed_query_p50_ms": round(br.pct(one, 0.5), 4),
    }
    rows = [v.tobytes() for v in qv]
    ks = sorted({5, 10, FUSION_DEPTH, 50})
    exact_f32: dict[int, list[set[str]]] = {}
    for precision in ("f32", "int8"):
        index = ToolIndex(vector_precision=precision)
        gc.collect()
        before = br.rss_bytes()
        start = time.perf_counter()
        index.add(tools, vectors=np.ascontiguousarray(vectors, dtype=np.float32))
        result[f"build_s {precision}"] = round(time.perf_counter() - start, 3)
        gc.collect()
        result[f"memory_mb {precision}"] = round((br.rss_bytes() - before) / 2**20, 1)
        result[f"heap_mb {precision}"] = round(index.stats()["heap_bytes"] / 2**20, 1)
        runs = {
            "bm25": lambda i, index=index: index.search(queries[i], br.K),
            "hybrid": lambda i, index=index, rows=rows: index.search(
                queries[i], br.K, vector=rows[i]
            ),
        }
        for label, run in runs.items():
            if label == "bm25" and precision != "f32":
                continue
            lat = br.latencies(run, len(queries))
            name = label if label == "bm25" else f"{label} {precision}"
            result[f"{name} p50_ms"] = round(br.pct(lat, 0.5), 4)
            result[f"{name} p95_ms"] = round(br.pct(lat, 0.95), 4)
        # Recall of the default vector search: against this storage's own exact scan, and
        # against the exact scan of the f32 vectors (the true cosines).
        native = index._index
        for k in ks:
            own = []
            for row in rows[:300]:
                own.append({n for n, _ in native.search_vector(row, k, None, True)})
            if precision == "f32":
                exact_f32[k] = own
            approx = [{n for n, _ in native.search_vector(r, k, None, False)} for r in rows[:300]]
            total = k * len(approx)
            got_own = sum(len(a & e) for a, e in zip(approx, own, strict=True))
            got_f32 = sum(len(a & e) for a, e in zip(approx, exact_f32[k], strict=True))
            result[f"vector recall@{k} {precision}"] = round(got_own / total, 4)
            result[f"vector recall@{k} {precision} vs exact f32"] = round(got_f32 / total, 4)
        del index, native
        gc.collect()
    result["hybrid/bm25 p50"] = round(result["hybrid f32 p50_ms"] / result["bm25 p50_ms"], 1)
    result |= _memory_through_model(model, tools)
    return result


def _memory_through_model(
    model: Any, tools: list[dict[str, Any]], precisions: tuple[str, ...] = ("f32", "int8")
) -> dict[str, Any]:
    """``ToolIndex(embeddings=model).add(tools)``: the model embeds every tool (its vectors
    reach the index as float32 buffers); the RSS growth of the whole add, the growth of the
    process's peak RSS during it, and the index's heap estimate, per precision. The model
    embeds the same texts once before (its own buffers warm), so the figures are what the add
    keeps and what it passes through, not the model's first use."""
    import resource

    from algenta_graph.retrieval import ToolIndex

    out: dict[str, Any] = {}
    warm = model.embed_documents_array(_texts(tools))
    del warm
    for precision in precisions:
        gc.collect()
        before = br.rss_bytes()
        peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        index = ToolIndex(embeddings=model, vector_precision=precision)
        index.add(tools)
        gc.collect()
        out[f"through the model: memory_mb {precision}"] = round(
            (br.rss_bytes() - before) / 2**20, 1
        )
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        out[f"through the model: peak_growth_mb {precision}"] = round(
            max(0, peak - max(peak_before, before)) / 2**20, 1
        )
        # What of the growth is freed memory the C allocator kept (glibc's malloc_trim).
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        out[f"through the model: memory_mb after malloc_trim {precision}"] = round(
            (br.rss_bytes() - before) / 2**20, 1
        )
        out[f"through the model: heap_mb {precision}"] = round(
            index.stats()["heap_bytes"] / 2**20, 1
        )
        del index
        gc.collect()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 50_000])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--no-quality", action="store_true")
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument(
        "--depths",
        type=int,
        nargs="*",
        default=[],
        help="also score hybrid f32 at these fusion depths (how the default was chosen)",
    )
    parser.add_argument(
        "--fusions",
        type=_fusion,
        nargs="*",
        default=[],
        metavar="WEIGHT:FLOOR",
        help="also score hybrid f32 with these BM25 weights and cosine floors (default depth)",
    )
    parser.add_argument(
        "--memory-only",
        choices=["f32", "int8"],
        help="only the memory of ToolIndex(embeddings=...).add() at --sizes, this precision "
        "(one process per figure: runs under any build of the module)",
    )
    parser.add_argument("--json", type=Path)
    ns = parser.parse_args(argv)
    if ns.memory_only:
        model = _model()
        for size in ns.sizes:
            figures = _memory_through_model(model, br.generate_tools(size), (ns.memory_only,))
            print(json.dumps({"size": size, **figures}))
        return 0
    with open("/proc/loadavg") as fh:
        print(f"load average before the run: {fh.read().split()[:3]}; cores: {os.cpu_count()}")
    model = _model()
    results: dict[str, Any] = {}
    if not ns.no_quality:
        q = results["quality"] = quality(model, ns.depths, ns.fusions)
        print("\nrecall@1 / recall@5 (MRR over the top 50)\n")
        print("| ranking | " + " | ".join(apibench.SETS) + " |")
        print("|---|" + "---|" * len(apibench.SETS))
        for label, figures in q.items():
            cells = [
                f"{figures[s]['recall_at_1']:.3f} / {figures[s]['recall_at_5']:.3f} "
                f"({figures[s]['mrr']:.3f})"
                for s in apibench.SETS
            ]
            print(f"| {label} | " + " | ".join(cells) + " |")
    if not ns.no_latency:
        results["latency"] = []
        for size in ns.sizes:
            r = latency(model, size, ns.queries)
            results["latency"].append(r)
            print("\n" + json.dumps(r))
    if ns.json:
        ns.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
