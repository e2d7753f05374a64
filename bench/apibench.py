"""APIBench (Gorilla) as a tool-retrieval dev set, and the ranking report over both dev sets.

Setup: ``bench/eval/apibench/README.md``. The whole catalog (1,050 Hugging Face, TensorFlow
Hub and PyTorch Hub APIs) is indexed; each of the 1,773 instructions asks for its gold API; a
query's domain is the prefix of its gold name.

Run from the repository root; one command, every dev set, our index and the peers in one run::

    python bench/apibench.py                       # algenta, ratel, bm25s
    python bench/apibench.py --engines algenta     # ours only (fast)

It prints recall@1 / recall@5 (and MRR over the top 50) on APIBench (overall and per domain)
and on BFCL v3 in both loadings: ``merged`` (``bench/bfcl.py``: one tool per name, duplicate
definitions merged, the whole question as the query) and ``plain`` (``bench/eval/README.md``:
the first definition of each name, the first user message as the query). Peers are driven as
in ``bench/bench_retrieval.py`` (bm25s with k1 0.9, b 0.4 over our projection's text; ratel-ai
with name, description and schema).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import bfcl  # noqa: E402  (bench/bfcl.py)

DOMAINS = ("huggingface", "tensorflowhub", "torchhub")


def apibench_available(root: Path | None = None) -> bool:
    base = (root or bfcl.eval_dir()) / "apibench"
    return (base / "tools.json").is_file() and (base / "queries.jsonl").is_file()


@dataclass(frozen=True)
class ApiBench:
    tools: list[dict[str, Any]]  # {"name", "description", "input_schema"}
    queries: list[tuple[str, str]]  # (instruction, gold tool name)


def load_apibench(root: Path | None = None) -> ApiBench:
    """The 1,050 tools and the 1,773 (instruction, gold) pairs, unchanged."""
    base = (root or bfcl.eval_dir()) / "apibench"
    tools = json.loads((base / "tools.json").read_text(encoding="utf-8"))
    with (base / "queries.jsonl").open(encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return ApiBench(tools=tools, queries=[(r["query"], r["gold"]) for r in rows])


def multi_intent_available(root: Path | None = None) -> bool:
    return ((root or bfcl.eval_dir()) / "multi_intent" / "queries.jsonl").is_file()


def load_multi_intent(root: Path | None = None) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """The multi-intent set (``bench/eval/multi_intent``): (message, gold tools) by source,
    ``bfcl`` (scored on BFCL's merged catalog) and ``apibench``."""
    path = (root or bfcl.eval_dir()) / "multi_intent" / "queries.jsonl"
    out: dict[str, list[tuple[str, tuple[str, ...]]]] = {"bfcl": [], "apibench": []}
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                out[row["source"]].append((row["query"], tuple(row["gold"])))
    return out


def domain(tool_name: str) -> str:
    return tool_name.split(".", 1)[0]


Search = Callable[[Sequence[str], int], list[list[str]]]


def report(
    search_for: Callable[[list[dict[str, Any]]], Search],
    per_query: dict[str, list[tuple[float, float, float]]] | None = None,
) -> dict[str, Any]:
    """Every figure of every dev set for one engine: ``search_for(tools)`` builds an index.
    With ``per_query``, each set's per-query (hit@1, recall@5, reciprocal rank) go there."""
    out: dict[str, Any] = {}
    kept = per_query if per_query is not None else {}
    api = load_apibench()
    search = search_for(api.tools)
    out["apibench"] = bfcl.score(search, api.queries, per_query=kept.setdefault("apibench", []))
    for d in DOMAINS:
        out[f"apibench.{d}"] = bfcl.score(
            search,
            [q for q in api.queries if domain(q[1]) == d],
            per_query=kept.setdefault(f"apibench.{d}", []),
        )
    searches = {"apibench": search}
    for name, loader in (("bfcl.merged", bfcl.load_bfcl), ("bfcl.plain", bfcl.load_bfcl_plain)):
        data = loader()
        searches[name] = search_for(data.tools)
        out[name] = bfcl.score(searches[name], data.queries, per_query=kept.setdefault(name, []))
    multi = load_multi_intent()
    for source, catalog in (("bfcl", "bfcl.merged"), ("apibench", "apibench")):
        out[f"multi.{source}"] = bfcl.score(
            searches[catalog], multi[source], per_query=kept.setdefault(f"multi.{source}", [])
        )
    out["multi"] = _pooled(out["multi.bfcl"], out["multi.apibench"])
    kept["multi"] = kept["multi.bfcl"] + kept["multi.apibench"]
    return out


def _pooled(*parts: bfcl.RetrievalScore) -> bfcl.RetrievalScore:
    """The figures of several query sets taken as one."""
    n = sum(p.queries for p in parts)
    return bfcl.RetrievalScore(
        *(
            sum(getattr(p, f) * p.queries for p in parts) / n
            for f in ("recall_at_1", "recall_at_5", "mrr")
        ),
        n,
    )


def _engine_search(engine_name: str, kwargs: dict[str, Any]) -> Callable[..., Search]:
    import bench_retrieval as br

    def search_for(tools: list[dict[str, Any]]) -> Search:
        if engine_name == "algenta":
            from algenta_graph.retrieval import ToolIndex

            index = ToolIndex(**kwargs)
            index.add(tools)
            return lambda qs, k: [[h.tool_id for h in hits] for hits in index.search_many(qs, k)]
        engine = br.make_engine(engine_name)
        engine.build(tools)
        return lambda qs, k: [engine.search(q, k) for q in qs]

    return search_for


SETS = (
    "apibench",
    *(f"apibench.{d}" for d in DOMAINS),
    "bfcl.merged",
    "bfcl.plain",
    "multi",
    "multi.bfcl",
    "multi.apibench",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engines", nargs="*", default=["algenta", "ratel", "bm25s"])
    parser.add_argument(
        "--algenta", default="{}", help="ToolIndex keyword arguments as JSON (experiments)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    ns = parser.parse_args(argv)
    if not (apibench_available() and bfcl.bfcl_available() and multi_intent_available()):
        print(f"dev sets not found in {bfcl.eval_dir()} (set {bfcl.ENV_VAR})", file=sys.stderr)
        return 2
    kwargs = json.loads(ns.algenta)
    results: dict[str, dict[str, Any]] = {}
    for engine in ns.engines:
        start = time.perf_counter()
        results[engine] = report(_engine_search(engine, kwargs))
        print(f"{engine}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    print("recall@1 / recall@5 (MRR over the top 50)\n")
    print("| engine | " + " | ".join(SETS) + " |")
    print("|---|" + "---|" * len(SETS))
    for engine, figures in results.items():
        cells = [
            f"{figures[s].recall_at_1:.3f} / {figures[s].recall_at_5:.3f} ({figures[s].mrr:.3f})"
            for s in SETS
        ]
        print(f"| {engine} | " + " | ".join(cells) + " |")
    queries = {s: results[ns.engines[0]][s].queries for s in SETS}
    print("\nqueries: " + ", ".join(f"{s} {n}" for s, n in queries.items()))
    if ns.json:
        ns.json.write_text(
            json.dumps(
                {e: {s: vars(r) for s, r in f.items()} for e, f in results.items()}, indent=2
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
