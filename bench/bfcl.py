"""BFCL v3 as a tool-retrieval benchmark (setup: ``bench/eval/README.md``).

Shared by ``bench/bench_retrieval.py`` and ``tests/retrieval/test_bfcl.py``. The whole catalog
(every function definition of ``BFCL_v3_simple`` and ``BFCL_v3_multiple``) is indexed; each of
the 600 queries asks for its gold function. A name defined more than once (130 of the 589) is
merged deliberately into one tool: its distinct descriptions joined, its parameters united
into one object schema (a parameter defined twice keeps every distinct description and enum
value), a shape every engine reads.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FILES = ("BFCL_v3_simple.json", "BFCL_v3_multiple.json")
ENV_VAR = "ALGENTA_EVAL_DIR"


def eval_dir() -> Path:
    """``$ALGENTA_EVAL_DIR``, else ``bench/eval`` (the repository's copy of ``../shared/eval``)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    return Path(__file__).resolve().parent / "eval"


def bfcl_available(root: Path | None = None) -> bool:
    base = (root or eval_dir()) / "bfcl_v3"
    return all((base / f).is_file() and (base / "possible_answer" / f).is_file() for f in FILES)


@dataclass(frozen=True)
class Bfcl:
    tools: list[dict[str, Any]]  # {"name", "description", "input_schema"}
    queries: list[tuple[str, str]]  # (query text, gold tool name)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_bfcl(root: Path | None = None) -> Bfcl:
    """Load the catalog and the 600 (query, gold) pairs."""
    base = (root or eval_dir()) / "bfcl_v3"
    variants: dict[str, list[dict[str, Any]]] = {}
    queries: list[tuple[str, str]] = []
    for name in FILES:
        answers = _read_jsonl(base / "possible_answer" / name)
        gold = {row["id"]: row["ground_truth"] for row in answers}
        for row in _read_jsonl(base / name):
            for fn in row["function"]:
                defs = variants.setdefault(fn["name"], [])
                if fn not in defs:
                    defs.append(fn)
            text = " ".join(m["content"] for turn in row["question"] for m in turn)
            (gold_name,) = gold[row["id"]][0].keys()
            queries.append((text, _resolve(gold_name, row["function"])))
    tools = [_merge(name, defs) for name, defs in variants.items()]
    return Bfcl(tools=tools, queries=queries)


def load_bfcl_plain(root: Path | None = None) -> Bfcl:
    """The plain loading of ``bench/eval/README.md``: the first definition of each name,
    unchanged, and the first user message of each entry as its query."""
    base = (root or eval_dir()) / "bfcl_v3"
    first: dict[str, dict[str, Any]] = {}
    queries: list[tuple[str, str]] = []
    for name in FILES:
        answers = _read_jsonl(base / "possible_answer" / name)
        gold = {row["id"]: row["ground_truth"] for row in answers}
        for row in _read_jsonl(base / name):
            for fn in row["function"]:
                first.setdefault(fn["name"], fn)
            text = next(
                m["content"] for turn in row["question"] for m in turn if m["role"] == "user"
            )
            (gold_name,) = gold[row["id"]][0].keys()
            queries.append((text, _resolve(gold_name, row["function"])))
    tools = [
        {
            "name": n,
            "description": fn.get("description") or "",
            "input_schema": fn.get("parameters"),
        }
        for n, fn in first.items()
    ]
    return Bfcl(tools=tools, queries=queries)


def _resolve(gold: str, functions: list[dict[str, Any]]) -> str:
    """The gold name as the catalog spells it.

    One answer (``multiple_185``: ``find_closest``) drops the namespace of the function its
    query offers (``restaurant_search.find_closest``); resolve it against that query's own
    candidates when exactly one ends in ``.<gold>``. Every other answer is used unchanged.
    """
    names = [fn["name"] for fn in functions]
    if gold in names:
        return gold
    matches = [n for n in names if n.endswith("." + gold)]
    return matches[0] if len(matches) == 1 else gold


def _merge(name: str, defs: list[dict[str, Any]]) -> dict[str, Any]:
    descriptions: list[str] = []
    properties: dict[str, Any] = {}
    for d in defs:
        if d.get("description") and d["description"] not in descriptions:
            descriptions.append(d["description"])
        for key, prop in ((d.get("parameters") or {}).get("properties") or {}).items():
            properties[key] = _merge_param(properties[key], prop) if key in properties else prop
    return {
        "name": name,
        "description": " ".join(descriptions),
        "input_schema": {"type": "object", "properties": properties},
    }


def _merge_param(first: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """One parameter defined twice: keep the first, with every distinct description and enum."""
    merged = dict(first)
    texts = [t for t in (first.get("description"), other.get("description")) if t]
    if texts:
        merged["description"] = " ".join(dict.fromkeys(texts))
    if "enum" in first or "enum" in other:
        merged["enum"] = list(dict.fromkeys([*first.get("enum", []), *other.get("enum", [])]))
    return merged


@dataclass(frozen=True)
class RetrievalScore:
    """recall@1, recall@5 and MRR over ``queries``. A query with several gold tools (the
    multi-intent set) counts a hit at 1 when its first hit is any of them, the share of them
    in the top 5 as its recall@5, and the rank of the first one found for its MRR."""

    recall_at_1: float
    recall_at_5: float
    mrr: float
    queries: int


Gold = str | tuple[str, ...]
"""One gold tool, or every gold tool of a query with several requests."""


def score(
    search: Callable[[Sequence[str], int], list[list[str]]],
    queries: Sequence[tuple[str, Gold]],
    depth: int = 50,
    per_query: list[tuple[float, float, float]] | None = None,
) -> RetrievalScore:
    """Rank each query with ``search(texts, depth)`` (a batch: ranked names per query);
    each query's (hit@1, recall@5, reciprocal rank) is appended to ``per_query`` if given."""
    ranked = search([q for q, _ in queries], depth)
    figures = []
    for names, (_, gold) in zip(ranked, queries, strict=True):
        golds = (gold,) if isinstance(gold, str) else gold
        ranks = [names.index(g) + 1 for g in golds if g in names]
        if ranks:
            r5 = sum(r <= 5 for r in ranks) / len(golds)
            figures.append((float(min(ranks) == 1), r5, 1.0 / min(ranks)))
        else:
            figures.append((0.0, 0.0, 0.0))
    if per_query is not None:
        per_query.extend(figures)
    n = len(queries)
    return RetrievalScore(*(sum(f[i] for f in figures) / n for i in range(3)), n)
