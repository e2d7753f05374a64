"""Dynamic pruning is exact: ``search`` (MaxScore) returns what exhaustive scoring returns.

On the 50k generated catalog of ``bench/`` and on a near-duplicate one (that catalog copied,
every copy with three extra words: every query term's postings list is long), for 1,000
generated queries at several ``k``, with and without an allow-list, and after adds and
removes. Names, order and scores must be identical. The same check at a million tools is
``python bench/bench_million.py --check-exact`` (committed figures in ``bench/RESULTS.md``).
"""

from __future__ import annotations

import importlib.util
import random
import sys
from functools import cache
from types import ModuleType
from typing import Any

import pytest
from repo_paths import REPO

from algenta_graph.retrieval import ToolIndex

BENCH = REPO / "bench"
KS = (1, 5, 10, 50)


def _load(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # bench_million imports bench_retrieval
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


@cache
def _catalog(kind: str) -> tuple[list[dict[str, Any]], list[str]]:
    br = _load("bench_retrieval")
    if kind == "generated":
        tools, intents = br.generate_catalog(50_000)
    else:
        tools, intents = _load("bench_million").near_duplicate_catalog(100_000)
    return tools, br.generate_queries(intents, 1000)


def _mismatches(native: Any, queries: list[str], allow: list[str] | None = None) -> list[str]:
    bad = []
    for q in queries:
        for k in KS:
            pruned = native.search(q, k, allow)
            exhaustive = native.search_exhaustive(q, k, allow)
            if pruned != exhaustive:
                bad.append(f"{q!r} k={k}: {pruned[:3]} != {exhaustive[:3]}")
    return bad


@pytest.mark.parametrize("kind", ["generated", "near-duplicate"])
def test_pruned_top_k_is_the_exhaustive_top_k(kind: str) -> None:
    tools, queries = _catalog(kind)
    index = ToolIndex()
    index.add(tools)
    native = index._index
    assert len(index) == len(tools)
    hits = sum(len(native.search(q, 5)) for q in queries)
    assert hits > 4 * len(queries)  # the queries do match: the comparison is not vacuous
    assert _mismatches(native, queries) == []


def test_pruned_top_k_is_exact_with_an_allow_list_and_after_adds_and_removes() -> None:
    tools, queries = _catalog("generated")
    index = ToolIndex()
    index.add(tools)
    native = index._index
    rng = random.Random(25)
    allow = rng.sample([t["name"] for t in tools], 5_000)
    assert _mismatches(native, queries[:300], allow) == []
    # Remove a tenth of the catalog, add a tenth back renamed (statistics drift; bounds are
    # kept under the reference statistics and rebased): still exact.
    for t in rng.sample(tools, 5_000):
        assert index.remove(t["name"])
    index.add([{**t, "name": f"{t['name']}_again"} for t in rng.sample(tools, 5_000)])
    assert _mismatches(native, queries) == []
