"""Ranking quality of two builds on every committed dev set at once, query by query.

``run`` scores every dev set (``bench/apibench.py``'s sets: APIBench and its three slices, BFCL
v3 in both loadings, the multi-intent set and its two parts) with whichever ``algenta_graph``
is imported, and writes each query's hit@1, recall@5 and reciprocal rank (MRR over the top 50)
for our BM25 (``ToolIndex()``), our hybrid (``ToolIndex(embeddings=WordLlama)``, with
``--hybrid``) and the peers asked for. ``compare`` reads two such files and prints, per set and
ranking, A, B and the paired difference B - A with a bootstrap 95% interval over the queries
(1,000 resamples of the same queries for both), and the hybrid against BM25 within one file.

Run from the repository root; A is main's build, put first on the path::

    PYTHONPATH=/tmp/main-site python bench/quality_ab.py run --hybrid --out main.json
    python bench/quality_ab.py run --hybrid --peers ratel bm25s rank_bm25 --out branch.json
    python bench/quality_ab.py compare main.json branch.json

A hybrid search fuses the best ``max(depth, k)`` of each ranking, so hit@1 and recall@5 come
from a search for 5 hits (what ``retrieve_tools`` asks) and the reciprocal rank from a search
for 50, as in ``bench/bench_hybrid.py``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import apibench  # noqa: E402

RECALL_HITS = 5
FIGURES = ("hit@1", "recall@5", "MRR")
PerQuery = dict[str, list[tuple[float, float, float]]]


def _ours(kwargs: dict[str, Any]) -> PerQuery:
    from algenta_graph.retrieval import ToolIndex

    def search_for(tools: list[dict[str, Any]], hits: int | None = None) -> apibench.Search:
        index = ToolIndex(**kwargs)
        index.add(tools)
        return lambda qs, k: [[h.tool_id for h in f] for f in index.search_many(qs, hits or k)]

    at50: PerQuery = {}
    at5: PerQuery = {}
    apibench.report(search_for, at50)
    apibench.report(lambda tools: search_for(tools, RECALL_HITS), at5)
    return {s: [(a[0], a[1], b[2]) for a, b in zip(at5[s], at50[s], strict=True)] for s in at50}


def _peer(name: str) -> PerQuery:
    out: PerQuery = {}
    apibench.report(apibench._engine_search(name, {}), out)
    return out


def run(ns: argparse.Namespace) -> int:
    import algenta_graph

    result: dict[str, Any] = {"algenta_graph": algenta_graph.__file__, "rankings": {}}
    rankings = result["rankings"]
    rankings["bm25"] = _ours({})
    if ns.hybrid:
        from algenta_graph.retrieval.static_embeddings import WordLlamaEmbeddings

        rankings["hybrid"] = _ours({"embeddings": WordLlamaEmbeddings()})
    for peer in ns.peers:
        rankings[peer] = _peer(peer)
    ns.out.write_text(json.dumps(result))
    print(f"{result['algenta_graph']}: {', '.join(rankings)} -> {ns.out}", file=sys.stderr)
    return 0


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _paired(a: list[float], b: list[float], rng: random.Random) -> tuple[float, float, float]:
    """Mean of b - a and its bootstrap 95% interval."""
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    means = sorted(_mean([diffs[rng.randrange(n)] for _ in range(n)]) for _ in range(1000))
    return _mean(diffs), means[25], means[974]


def _cell(a: list[float], b: list[float], rng: random.Random) -> str:
    d, lo, hi = _paired(a, b, rng)
    if d == lo == hi == 0:
        return f"{_mean(b):.3f} (=)"
    outside = "**" if lo > 0 or hi < 0 else ""
    return f"{_mean(b):.3f} ({outside}{d:+.3f} [{lo:+.3f}, {hi:+.3f}]{outside})"


def compare(ns: argparse.Namespace) -> int:
    a, b = (json.loads(p.read_text())["rankings"] for p in (ns.a, ns.b))
    rng = random.Random(0)
    lines = []
    pairs = [(f"{r}: A -> B", a[r], b[r]) for r in ("bm25", "hybrid") if r in a and r in b]
    pairs += [
        (f"{label}: BM25 -> hybrid", x["bm25"], x["hybrid"])
        for label, x in (("A", a), ("B", b))
        if "hybrid" in x
    ]
    for title, left, right in pairs:
        lines.append(f"\n{title}: right-hand figure (mean paired difference [95% interval])\n")
        lines.append("| set | queries | " + " | ".join(FIGURES) + " |")
        lines.append("|---|---|" + "---|" * len(FIGURES))
        for s in apibench.SETS:
            cells = [
                f"{_mean([q[i] for q in left[s]]):.3f} -> "
                + _cell([q[i] for q in left[s]], [q[i] for q in right[s]], rng)
                for i in range(len(FIGURES))
            ]
            lines.append(f"| {s} | {len(left[s])} | " + " | ".join(cells) + " |")
    peers = [p for p in b if p not in ("bm25", "hybrid")]
    if peers:
        lines.append("\nhit@1 / recall@5 (MRR), every ranking (A's then B's; peers from B's run)\n")
        lines.append("| ranking | " + " | ".join(apibench.SETS) + " |")
        lines.append("|---|" + "---|" * len(apibench.SETS))
        rows = [(f"{r} (A)", a[r]) for r in ("bm25", "hybrid") if r in a]
        rows += [(f"{r} (B)", b[r]) for r in ("bm25", "hybrid") if r in b]
        rows += [(p, b[p]) for p in peers]
        for label, per in rows:
            cells = [
                "{:.3f} / {:.3f} ({:.3f})".format(
                    *(_mean([q[i] for q in per[s]]) for i in range(3))
                )
                for s in apibench.SETS
            ]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="score every dev set with the imported algenta_graph")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--hybrid", action="store_true", help="also the hybrid (WordLlama)")
    r.add_argument("--peers", nargs="*", default=[], choices=["ratel", "bm25s", "rank_bm25"])
    c = sub.add_parser("compare", help="A against B, paired by query")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    ns = parser.parse_args(argv)
    if not (
        apibench.apibench_available()
        and apibench.bfcl.bfcl_available()
        and apibench.multi_intent_available()
    ):
        print("dev sets not found (bench/eval/README.md)", file=sys.stderr)
        return 2
    return run(ns) if ns.command == "run" else compare(ns)


if __name__ == "__main__":
    sys.exit(main())
