"""UsageSignal: recording rules, bounded reranking, decay, caps, profiles, persistence."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from algenta_graph.retrieval import Hit, ToolIndex
from algenta_graph.retrieval.usage import DEFAULT_NAMESPACE, UsageSignal

DAY = 86_400.0


@pytest.fixture
def index() -> ToolIndex:
    ix = ToolIndex()
    ix.add(
        [
            {"name": "image_classifier", "description": "Classify images into categories"},
            {"name": "image_tagger", "description": "Tag images with categories"},
            {"name": "text_classifier", "description": "Classify text into categories"},
        ]
    )
    return ix


def _ids(hits: list[Hit]) -> list[str]:
    return [h.tool_id for h in hits]


def test_history_lifts_the_tool_that_served_similar_queries(index: ToolIndex) -> None:
    usage = UsageSignal(InMemoryStore())
    query = "categories for my bird images"
    before = index.search(query, 5)
    assert before[0].tool_id == "image_classifier"
    for q in ("bird images to sort", "label my bird images", "which bird is in these images"):
        assert usage.record(q, "image_tagger", now=0.0)
    after = usage.search(index, query, 5, now=0.0)
    assert after[0].tool_id == "image_tagger"
    # Bounded: the lift is less than (1 + weight) times the tool's own score, and the
    # candidates are the index's own hits.
    base = {h.tool_id: h.score for h in index.search(query, 50)}
    for hit in after:
        assert base[hit.tool_id] <= hit.score < base[hit.tool_id] * (1 + usage.weight)
    assert set(_ids(after)) == set(base)


def test_failed_calls_other_tools_and_empty_queries_record_nothing(index: ToolIndex) -> None:
    store = InMemoryStore()
    usage = UsageSignal(store)
    assert not usage.record("classify birds", "image_tagger", ok=False)
    assert not usage.record("classify birds", "image_tagger", allowed={"image_classifier"})
    assert not usage.record("the of and", "image_tagger")
    assert store.search(DEFAULT_NAMESPACE) == []
    assert usage.record("classify birds", "image_tagger", allowed={"image_tagger"})
    assert store.get((*DEFAULT_NAMESPACE, "default"), "image_tagger") is not None


def test_profiles_are_separate(index: ToolIndex) -> None:
    usage = UsageSignal(InMemoryStore())
    for _ in range(3):
        usage.record("bird images to sort", "image_tagger", profile="ops", now=0.0)
    query = "categories for my bird images"
    assert usage.search(index, query, profile="ops", now=0.0)[0].tool_id == "image_tagger"
    assert usage.search(index, query, profile="viewer", now=0.0) == index.search(query)


def test_weights_decay_and_are_capped() -> None:
    store = InMemoryStore()
    usage = UsageSignal(store, half_life=10.0, per_tool_cap=5.0, max_terms=3)
    ns = (*DEFAULT_NAMESPACE, "default")
    usage.record("alpha beta", "t", now=0.0)
    usage.record("alpha gamma", "t", now=10.0)  # the first call now counts half
    item = store.get(ns, "t")
    assert item is not None
    assert item.value["calls"] == pytest.approx(1.5)
    assert item.value["terms"] == pytest.approx({"alpha": 1.5, "beta": 0.5, "gamma": 1.0})
    for _ in range(20):
        usage.record("alpha delta epsilon", "t", now=10.0)
    item = store.get(ns, "t")
    assert item is not None
    assert item.value["calls"] == pytest.approx(5.0)
    assert len(item.value["terms"]) == 3
    assert max(item.value["terms"].values()) <= 5.0 + 1e-9


def test_ranking_is_deterministic_for_a_given_store(index: ToolIndex) -> None:
    def build() -> UsageSignal:
        usage = UsageSignal(InMemoryStore())
        usage.record("classify images", "image_classifier", now=0.0)
        usage.record("classify images", "image_tagger", now=0.0)
        return usage

    a = build().search(index, "classify images", 3, now=5.0)
    b = build().search(index, "classify images", 3, now=5.0)
    assert a == b
    # Equal lifts on equal BM25 scores stay ordered by name.
    hits = [Hit("b_tool", 1.0), Hit("a_tool", 1.0)]
    assert _ids(UsageSignal(InMemoryStore()).rerank("anything", hits)) == ["a_tool", "b_tool"]


def test_history_survives_a_restart_in_sqlite(index: ToolIndex, tmp_path: Path) -> None:
    path = str(tmp_path / "usage.sqlite")
    with SqliteStore.from_conn_string(path) as store:
        store.setup()
        usage = UsageSignal(store)
        for _ in range(3):
            usage.record("bird images to sort", "image_tagger", now=0.0)
    with SqliteStore.from_conn_string(path) as store:
        hits = UsageSignal(store).search(index, "categories for my bird images", now=0.0)
    assert hits[0].tool_id == "image_tagger"


def test_async_api_matches_the_sync_one(index: ToolIndex) -> None:
    async def run() -> list[Hit]:
        usage = UsageSignal(InMemoryStore())
        for _ in range(3):
            assert await usage.arecord("bird images to sort", "image_tagger", now=0.0)
        return await usage.asearch(index, "categories for my bird images", now=0.0)

    sync = UsageSignal(InMemoryStore())
    for _ in range(3):
        sync.record("bird images to sort", "image_tagger", now=0.0)
    assert asyncio.run(run()) == sync.search(index, "categories for my bird images", now=0.0)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="weight"):
        UsageSignal(InMemoryStore(), weight=-1)
    with pytest.raises(ValueError, match="half_life"):
        UsageSignal(InMemoryStore(), half_life=0)
    with pytest.raises(ValueError, match="profile"):
        UsageSignal(InMemoryStore()).record("q", "t", profile="")


async def test_concurrent_records_of_one_tool_are_all_counted(tmp_path: Path) -> None:
    # Many threads of one worker finish calls of the same tool at once: read-modify-write on
    # one store item must not lose any of them (docs/ARCHITECTURE.md, the `usage.py` row).
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    async with AsyncSqliteStore.from_conn_string(str(tmp_path / "usage.sqlite")) as store:
        await store.setup()
        usage = UsageSignal(store)
        results = await asyncio.gather(
            *(usage.arecord(f"label bird photo {i}", "image_tagger", now=0.0) for i in range(40))
        )
        item = await store.aget((*DEFAULT_NAMESPACE, "default"), "image_tagger")
    assert results == [True] * 40
    assert item is not None and item.value["calls"] == 40.0
    assert item.value["terms"]["bird"] == 40.0


def test_concurrent_sync_records_from_threads_are_all_counted(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with SqliteStore.from_conn_string(str(tmp_path / "usage.sqlite")) as store:
        store.setup()
        usage = UsageSignal(store)
        with ThreadPoolExecutor(8) as pool:
            done = list(
                pool.map(
                    lambda i: usage.record(f"tag bird {i}", "image_tagger", now=0.0), range(40)
                )
            )
        item = store.get((*DEFAULT_NAMESPACE, "default"), "image_tagger")
    assert done == [True] * 40
    assert item is not None and item.value["calls"] == 40.0
