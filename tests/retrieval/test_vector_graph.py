"""The HNSW graph of the vectors (from ``ann_from`` vectors on): it only proposes candidates,
so removed tools never come back, an allow-list holds and every score is the exact cosine."""

from __future__ import annotations

import math
import random

from algenta_graph import _native
from algenta_graph.retrieval import ToolIndex

DIM = 32


def _clustered(n: int, seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    centres = [[rng.gauss(0.0, 1.0) for _ in range(DIM)] for _ in range(20)]
    return [[x + rng.gauss(0.0, 0.3) for x in centres[i % 20]] for i in range(n)]


def _cos(a: list[float], b: list[float]) -> float:
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(x * x for x in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb)


def _index(n: int) -> tuple[_native.Bm25Index, list[list[float]]]:
    ix = ToolIndex(
        vector_precision="f32", ann_from=1000, approx_from=500, rescore=100, expansion=64
    )._index
    vectors = _clustered(n, 7)
    ix.add([{"name": f"t{i:05d}", "description": "a tool"} for i in range(n)], vectors=vectors)
    return ix, vectors


def test_the_graph_finds_the_exact_top_10_and_scores_exactly() -> None:
    ix, vectors = _index(3000)
    assert ix.fusion["ann_from"] == 1000 and ix.fusion["expansion"] == 64
    got = 0
    for i in range(0, 3000, 97):
        q = vectors[i]
        exact = ix.search_vector(q, 10, None, True)
        approx = ix.search_vector(q, 10, None, False)
        assert len(approx) == 10
        for name, score in approx:
            assert abs(score - _cos(q, vectors[int(name[1:])])) < 1e-5
        got += len({n for n, _ in exact} & {n for n, _ in approx})
    assert got >= 0.9 * 10 * len(range(0, 3000, 97))


def test_removed_tools_never_come_back_and_the_allow_list_holds() -> None:
    ix, vectors = _index(3000)
    removed = {f"t{i:05d}" for i in range(0, 3000, 3)}
    for name in removed:
        assert ix.remove(name)
    # New tools take the removed tools' slots, with other vectors.
    fresh = _clustered(300, 99)
    ix.add([{"name": f"new{i}", "description": "a tool"} for i in range(300)], vectors=fresh)
    allowed = [f"t{i:05d}" for i in range(3000) if i % 3 and i % 10 != 7]
    allowed += [f"new{i}" for i in range(300)]
    for i in range(0, 3000, 61):
        q = vectors[i]
        hits = [n for n, _ in ix.search_vector(q, 50, None, False)]
        assert len(hits) == 50 and not removed & set(hits)
        kept = [n for n, _ in ix.search_vector(q, 20, allowed, False)]
        assert len(kept) == 20 and set(kept) <= set(allowed)
    for i in range(0, 300, 29):
        hits = [n for n, _ in ix.search_vector(fresh[i], 5, None, False)]
        assert f"new{i}" in hits
