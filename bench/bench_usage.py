"""The usage signal's lift on APIBench (``algenta_graph.retrieval.usage.UsageSignal``).

Run from the repository root (figures in ``bench/RESULTS.md``)::

    python bench/bench_usage.py

Protocol: for each gold tool, its queries in file order; the first half (rounded down) are
history, recorded as successful calls of that tool into an ``InMemoryStore``; the rest are
evaluated, by ``ToolIndex`` alone and by ``UsageSignal.search`` over the same index (whole
catalog indexed, default settings, one fixed ``now``). A tool with one query has no history,
and its query is evaluated. Also reported: the same split with the signal in a second profile
(nothing recorded there, so it must equal the baseline), and per domain.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import apibench  # noqa: E402
import bfcl  # noqa: E402


def split(queries: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(history, evaluated): per gold tool, the first half of its queries, then the rest."""
    by_gold: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for q in queries:
        by_gold[q[1]].append(q)
    history, evaluated = [], []
    for qs in by_gold.values():
        half = len(qs) // 2
        history += qs[:half]
        evaluated += qs[half:]
    return history, evaluated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weight", type=float, default=None, help="UsageSignal weight")
    ns = parser.parse_args(argv)
    from langgraph.store.memory import InMemoryStore

    from algenta_graph.retrieval import ToolIndex
    from algenta_graph.retrieval.usage import UsageSignal

    data = apibench.load_apibench()
    index = ToolIndex()
    index.add(data.tools)
    history, evaluated = split(data.queries)
    kwargs = {} if ns.weight is None else {"weight": ns.weight}
    usage = UsageSignal(InMemoryStore(), **kwargs)
    for query, gold in history:
        usage.record(query, gold, profile="p", now=0.0)

    def plain(qs: Sequence[str], k: int) -> list[list[str]]:
        return [[h.tool_id for h in hits] for hits in index.search_many(qs, k)]

    def with_usage(profile: str) -> apibench.Search:
        def search(qs: Sequence[str], k: int) -> list[list[str]]:
            return [
                [h.tool_id for h in usage.search(index, q, k, profile=profile, now=0.0)] for q in qs
            ]

        return search

    print(f"history {len(history)} queries, evaluated {len(evaluated)}\n")
    print("| set | queries | BM25 R@1 / R@5 | with usage R@1 / R@5 | other profile R@1 / R@5 |")
    print("|---|---|---|---|---|")
    sets = [("all", evaluated)] + [
        (d, [q for q in evaluated if apibench.domain(q[1]) == d]) for d in apibench.DOMAINS
    ]
    for name, qs in sets:
        base = bfcl.score(plain, qs)
        lifted = bfcl.score(with_usage("p"), qs)
        other = bfcl.score(with_usage("other"), qs)
        print(
            f"| {name} | {len(qs)} | {base.recall_at_1:.3f} / {base.recall_at_5:.3f} | "
            f"{lifted.recall_at_1:.3f} / {lifted.recall_at_5:.3f} | "
            f"{other.recall_at_1:.3f} / {other.recall_at_5:.3f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
