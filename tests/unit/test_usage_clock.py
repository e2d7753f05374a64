"""The usage history's cap and decay hold whatever clock a read uses.

(``algenta_graph.retrieval.usage``.)

Workers sharing one store do not share a clock: a read can come from a clock behind the one
that wrote the history (``now`` earlier than the item's ``at``). Such a read must count the
history as it was written, never more: never beyond ``per_tool_cap``, never "un-decayed" into
a weight it never had. A read after the write decays it, the further the less.
"""

from __future__ import annotations

import asyncio

import pytest
from langgraph.store.memory import InMemoryStore

from algenta_graph.retrieval import Hit, ToolIndex
from algenta_graph.retrieval.usage import UsageSignal

QUERY = "categories for my bird images"
WRITTEN_AT = 1_000.0
SETTINGS = {"half_life": 10.0, "per_tool_cap": 5.0}


@pytest.fixture
def hits() -> list[Hit]:
    index = ToolIndex()
    index.add(
        [
            {"name": "image_classifier", "description": "Classify images into categories"},
            {"name": "image_tagger", "description": "Tag images with categories"},
            {"name": "text_classifier", "description": "Classify text into categories"},
        ]
    )
    return index.search(QUERY, 50)


def _signal(calls: int) -> UsageSignal:
    usage = UsageSignal(InMemoryStore(), **SETTINGS)  # type: ignore[arg-type]
    for _ in range(calls):
        assert usage.record("bird images to sort", "image_tagger", now=WRITTEN_AT)
    return usage


def _lift(reranked: list[Hit], hits: list[Hit], tool: str = "image_tagger") -> float:
    base = {h.tool_id: h.score for h in hits}
    return next(h.score for h in reranked if h.tool_id == tool) / base[tool]


def test_a_read_before_the_write_counts_the_history_as_written_never_beyond_the_cap(
    hits: list[Hit],
) -> None:
    capped = _signal(50)  # 50 calls, worth the cap: 5
    at_write = capped.rerank(QUERY, hits, now=WRITTEN_AT)
    assert at_write == _signal(5).rerank(QUERY, hits, now=WRITTEN_AT)  # the cap, exactly
    assert _lift(at_write, hits) > 1.0
    for earlier in (WRITTEN_AT - 1, WRITTEN_AT - 100, 0.0, -1e9):
        assert capped.rerank(QUERY, hits, now=earlier) == at_write, earlier
        assert asyncio.run(capped.arerank(QUERY, hits, now=earlier)) == at_write, earlier
    # below the cap too: a read from a lagging clock never adds weight
    few = _signal(2)
    assert few.rerank(QUERY, hits, now=0.0) == few.rerank(QUERY, hits, now=WRITTEN_AT)


def test_a_read_after_the_write_decays_the_history(hits: list[Hit]) -> None:
    usage = _signal(50)
    lifts = [_lift(usage.rerank(QUERY, hits, now=WRITTEN_AT + dt), hits) for dt in (0, 10, 20, 200)]
    assert lifts == sorted(lifts, reverse=True) and len(set(lifts)) == len(lifts)
    assert 1.0 < lifts[-1] < lifts[0] < 1.0 + usage.weight


def test_a_record_from_a_lagging_clock_keeps_the_cap(hits: list[Hit]) -> None:
    usage = _signal(50)
    assert usage.record("bird images to sort", "image_tagger", now=0.0)  # a clock far behind
    assert usage.store is not None
    item = usage.store.get((*usage.namespace, "default"), "image_tagger")
    assert item is not None
    assert item.value["calls"] <= SETTINGS["per_tool_cap"]
    assert max(item.value["terms"].values()) <= SETTINGS["per_tool_cap"] + 1e-9
    assert _lift(usage.rerank(QUERY, hits, now=0.0), hits) <= _lift(
        _signal(5).rerank(QUERY, hits, now=WRITTEN_AT), hits
    )
