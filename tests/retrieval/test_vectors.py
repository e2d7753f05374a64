"""Vectors in the native index: storage, exact and approximate search, incremental updates,
errors, the async query path (invariant 6: deterministic rankings)."""

from __future__ import annotations

import asyncio
import math
import random
import struct
import threading
from array import array
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings

from algenta_graph import _native
from algenta_graph.retrieval import ToolIndex

DIM = 32


def _vec(seed: int, dim: int = DIM) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(0.0, 1.0) for _ in range(dim)]


def _tools(n: int) -> list[dict[str, str]]:
    return [{"name": f"tool_{i:04d}", "description": f"does thing {i % 17}"} for i in range(n)]


def _cos(a: list[float], b: list[float]) -> float:
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(x * x for x in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb)


def test_exact_vector_search_is_the_cosine_ranking_with_ties_by_name() -> None:
    ix = _native.Bm25Index(vector_precision="f32")
    tools = _tools(200)
    vectors = [_vec(i) for i in range(200)]
    ix.add(tools, vectors=vectors)
    q = _vec(10_000)
    want = sorted(range(200), key=lambda i: (-_cos(q, vectors[i]), tools[i]["name"]))[:10]
    got = ix.search_vector(q, 10)
    assert [n for n, _ in got] == [tools[i]["name"] for i in want]
    assert got[0][1] == pytest.approx(_cos(q, vectors[want[0]]), abs=1e-5)
    # The same vector twice: equal cosines, ordered by name.
    ix.add([{"name": "b_same"}, {"name": "a_same"}], vectors=[q, [2 * x for x in q]])
    assert [n for n, _ in ix.search_vector(q, 2)] == ["a_same", "b_same"]
    assert [n for n, _ in ix.search_vector(q, 3, allow=["tool_0001", "b_same"])] == [
        "b_same",
        "tool_0001",
    ]


def test_bytes_and_buffer_rows_equal_lists_and_int8_stays_close() -> None:
    tools = _tools(50)
    vectors = [_vec(i) for i in range(50)]
    raw = b"".join(struct.pack(f"{DIM}f", *v) for v in vectors)
    flat = array("f", raw)
    rows = memoryview(flat)
    a, b, c, d = (_native.Bm25Index(vector_precision="f32") for _ in range(4))
    a.add(tools, vectors=vectors)
    b.add(tools, vectors=raw)
    c.add(tools, vectors=flat)  # one float32 buffer holding every row
    d.add(tools, vectors=[rows[i * DIM : (i + 1) * DIM] for i in range(50)])  # a buffer a row
    q = _vec(77)
    want = a.search_vector(q, 50)
    assert b.search_vector(struct.pack(f"{DIM}f", *q), 50) == want
    assert c.search_vector(array("f", q), 50) == want == d.search_vector(q, 50)
    default = _native.Bm25Index()
    default.add(tools, vectors=raw)
    assert default.vector_precision == "int8"
    exact = dict(want)
    for name, score in default.search_vector(q, 50):
        assert score == pytest.approx(exact[name], abs=0.03)
    assert a.stats()["vectors"] == 50 and a.stats()["vector_dim"] == DIM
    # An int8 vector is a quarter of an f32 one (plus its scale and sign bits).
    assert default.stats()["heap_bytes"] < a.stats()["heap_bytes"]


def test_incremental_vectors_rank_exactly_like_a_fresh_index() -> None:
    tools = _tools(120)
    vectors = [_vec(i) for i in range(120)]
    fresh = _native.Bm25Index(approx_from=50, rescore=20)
    fresh.add(tools, vectors=vectors)
    inc = _native.Bm25Index(approx_from=50, rescore=20)
    order = list(range(120))
    random.Random(3).shuffle(order)
    for i in order:
        inc.add([tools[i]], vectors=[_vec(i + 5000)])  # a wrong vector first ...
    inc.add([{"name": "gone"}], vectors=[_vec(1)])
    for i in order[:60]:
        inc.add([tools[i]], vectors=[vectors[i]])  # ... replaced
    inc.add([tools[i] for i in order[60:]], vectors=[vectors[i] for i in order[60:]])
    assert inc.remove("gone")
    for seed in range(30):
        q = _vec(9000 + seed)
        for exact in (True, False):
            assert inc.search_vector(q, 10, None, exact) == fresh.search_vector(q, 10, None, exact)
        text = f"thing {seed % 17}"
        assert inc.search(text, 5, None, q) == fresh.search(text, 5, None, q)


def test_approximate_search_finds_most_of_the_exact_top_10() -> None:
    # Clustered, like embeddings of texts (random vectors are sign bits' worst case).
    centers = [_vec(10**6 + c, 256) for c in range(30)]

    def clustered(seed: int) -> list[float]:
        center = centers[seed % 30]
        return [c + 0.7 * x for c, x in zip(center, _vec(seed, 256), strict=True)]

    n = 3000
    ix = _native.Bm25Index(approx_from=1000, rescore=300)
    ix.add(_tools(n), vectors=[clustered(i) for i in range(n)])
    found = 0
    for seed in range(50):
        q = clustered(100_000 + seed)
        exact = {name for name, _ in ix.search_vector(q, 10, None, True)}
        approx = ix.search_vector(q, 10)
        assert len(approx) == 10 and len({a for a, _ in approx}) == 10
        found += len(exact & {name for name, _ in approx})
    assert found / 500 >= 0.9, found / 500  # real embeddings: bench/RESULTS.md
    # Below the threshold the search is exact.
    small = _native.Bm25Index(approx_from=10**6, rescore=1)
    small.add(_tools(500), vectors=[_vec(i) for i in range(500)])
    q = _vec(5)
    assert small.search_vector(q, 10) == small.search_vector(q, 10, None, True)


def test_a_tool_without_a_vector_is_found_by_bm25_only() -> None:
    ix = _native.Bm25Index()
    ix.add([{"name": "with_vec", "description": "alpha"}], vectors=[_vec(1)])
    ix.add([{"name": "no_vec", "description": "alpha beta"}])
    assert [n for n, _ in ix.search_vector(_vec(1), 5)] == ["with_vec"]
    assert {n for n, _ in ix.search("alpha", 5, None, _vec(1))} == {"with_vec", "no_vec"}
    # Re-added without a vector (and no key to keep it by): the vector is gone.
    ix.add([{"name": "with_vec", "description": "alpha"}])
    assert ix.search_vector(_vec(1), 5) == []


def test_bad_vectors_are_clear_errors_and_change_nothing() -> None:
    ix = _native.Bm25Index()
    ix.add(_tools(3), vectors=[_vec(i) for i in range(3)])
    # deliberately wrong vectors, of every kind the native add must refuse
    cases: list[tuple[Any, type[Exception], str]] = [
        ([[1.0] * (DIM - 1)], ValueError, "dimensions"),
        ([[math.nan] * DIM], ValueError, "finite"),
        ([[]], ValueError, "at least one"),
        ([[1.0] * DIM, [1.0] * DIM], ValueError, "2 entries for 1 tools"),
        (["abc"], TypeError, "not a string"),
        ([[True] * DIM], TypeError, "bool"),
        (b"\x00\x00\x80", ValueError, "float32"),
        (3, TypeError, "sequence"),
    ]
    for vectors, error, match in cases:
        with pytest.raises(error, match=match):
            ix.add([{"name": "new_tool"}], vectors=vectors)
        assert "new_tool" not in ix and len(ix) == 3
    with pytest.raises(ValueError, match=r"query vector has 3 dimensions"):
        ix.search("thing", 5, None, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="tool 'y'"):
        ix.add([{"name": "x"}, {"name": "y"}], vectors=[[1.0, 2.0], [1.0]])
    with pytest.raises(ValueError, match="rescore"):
        _native.Bm25Index(rescore=0)


class CountingEmbeddings(Embeddings):
    """Deterministic vectors from the words of a text; counts its calls and their threads."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.threads: set[int] = set()

    def _v(self, text: str) -> list[float]:
        v = [0.0] * 8
        for word in text.lower().split():
            v[sum(map(ord, word)) % 8] += 1.0
        return v

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._v(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        self.threads.add(threading.get_ident())
        return self._v(text)


def test_async_search_embeds_off_the_event_loop_once_per_query() -> None:
    emb = CountingEmbeddings()
    index = ToolIndex(embeddings=emb)
    index.add(_tools(20))

    async def run() -> tuple[list[str], int]:
        loop_thread = threading.get_ident()
        hits = await asyncio.gather(*(index.asearch("does thing 3", 3) for _ in range(5)))
        assert all(h == hits[0] for h in hits)
        await index.aembed_query("does thing 4")
        return [h.tool_id for h in hits[0]], loop_thread

    names, loop_thread = asyncio.run(run())
    assert names and loop_thread not in emb.threads  # LangChain ran embed_query in a thread
    assert emb.queries == ["does thing 3", "does thing 4"]  # concurrent searches shared one
    index.search("does thing 4")  # cached by aembed_query: no call
    index.search_many(["does thing 3", "does thing 4"])
    assert emb.queries == ["does thing 3", "does thing 4"]


def test_hybrid_rankings_do_not_depend_on_insertion_order() -> None:
    tools = _tools(300)
    a = ToolIndex(embeddings=CountingEmbeddings(), approx_from=100, rescore=50)
    b = ToolIndex(embeddings=CountingEmbeddings(), approx_from=100, rescore=50)
    a.add(tools)
    for t in reversed(tools):
        b.add([t])
    for q in ("does thing 5", "thing 16 does", "nothing matches zzz"):
        assert a.search(q, 10) == b.search(q, 10)


def test_ties_are_broken_by_numbers_in_the_name() -> None:
    index = ToolIndex()
    index.add(
        [
            {"name": f"vision.resnet{n}", "description": "Residual network image classifier"}
            for n in (18, 34, 50, 101)
        ]
    )
    hits = index.search("a residual network with 50 layers to classify images", 4)
    assert len({h.score for h in hits}) == 1  # BM25 cannot tell them apart
    assert [h.tool_id for h in hits] == [
        "vision.resnet50",
        "vision.resnet101",
        "vision.resnet18",
        "vision.resnet34",
    ]
