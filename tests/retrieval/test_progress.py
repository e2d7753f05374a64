"""ToolIndex.add(progress=...): reports per batch, indexes exactly what a plain add does."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.types import Tool as McpTool

from algenta_graph.retrieval import ToolIndex
from algenta_graph.retrieval import index as retrieval


def _tools(n: int) -> list[dict[str, Any]]:
    verbs = ("get", "list", "create", "delete", "sync")
    return [
        {
            "name": f"svc{i % 7}.{verbs[i % 5]}_item_{i}",
            "description": f"{verbs[i % 5]} items number {i} in service {i % 7}",
            "input_schema": {"type": "object", "properties": {f"p{i % 3}": {"type": "string"}}},
        }
        for i in range(n)
    ]


def test_progress_reports_each_batch_and_ranks_like_a_plain_add(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(retrieval, "PROGRESS_BATCH", 40)
    tools = _tools(100)
    calls: list[tuple[str, int, int]] = []
    with_progress = ToolIndex()
    with_progress.add(tools, progress=lambda *a: calls.append(a))
    assert calls == [
        (phase, done, 100) for phase in ("project", "tokenize", "index") for done in (40, 80, 100)
    ]
    plain = ToolIndex()
    plain.add(tools)
    assert len(with_progress) == len(plain) == 100
    for query in ("get items", "delete item 42 in service 3", "sync svc2", "p1"):
        assert with_progress.search(query, 10) == plain.search(query, 10)


def test_progress_keeps_add_all_or_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retrieval, "PROGRESS_BATCH", 10)
    index = ToolIndex()
    index.add(_tools(3))
    bad = [*_tools(25), {"name": "broken", "input_schema": [1, 2]}]
    phases: list[str] = []
    with pytest.raises(ValueError, match="broken"):
        index.add(bad, progress=lambda phase, done, total: phases.append(phase))
    assert phases == ["project", "project"]
    assert len(index) == 3


def test_progress_true_prints_to_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(retrieval, "PROGRESS_BATCH", 50)
    ToolIndex().add(_tools(60), progress=True)
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"tool index: {phase} {done} / 60"
        for phase in ("project", "tokenize", "index")
        for done in (50, 60)
    ]


def test_a_callback_cannot_use_the_index_it_is_building() -> None:
    index = ToolIndex()
    index.add(_tools(5))
    seen: list[str] = []

    def progress(phase: str, done: int, total: int) -> None:
        seen.append(phase)
        if phase == "index":
            index.search("items")  # would wait forever on the lock this add holds

    with pytest.raises(RuntimeError, match="being built"):
        index.add(_tools(30), progress=progress)
    assert seen == ["project", "tokenize", "index"]  # no call after the first error
    assert len(index) == 30  # the add itself completed
    assert index.search("items", 1)


def test_an_exception_while_projecting_aborts_the_add() -> None:
    index = ToolIndex()

    def progress(phase: str, done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        index.add(_tools(10), progress=progress)
    assert len(index) == 0


# Past its first chunk (16,384 tools) an add tokenizes on a worker thread while it projects.
BIG = 40_000


def test_a_large_add_tokenizes_while_it_projects_and_indexes_as_small_adds_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(retrieval, "PROGRESS_BATCH", 10_000)
    tools = _tools(BIG)
    calls: list[tuple[str, int, int]] = []
    big = ToolIndex()
    big.add(tools, progress=lambda *a: calls.append(a))
    steps = [10_000, 20_000, 30_000, 40_000]
    for phase in ("project", "tokenize", "index"):
        assert [(d, t) for p, d, t in calls if p == phase] == [(d, BIG) for d in steps], phase
    # Nothing is tokenized before it is projected; indexing comes after both.
    seen = {"project": 0, "tokenize": 0}
    for phase, done, _ in calls:
        if phase == "tokenize":
            assert done <= seen["project"]
        if phase == "index":
            assert seen == {"project": BIG, "tokenize": BIG}
        else:
            seen[phase] = done
    small = ToolIndex()
    for i in range(0, BIG, 10_000):
        small.add(tools[i : i + 10_000])  # below one chunk: no worker
    assert len(big) == len(small) == BIG
    assert big.tool_names == small.tool_names
    sizes = ("tools", "terms", "postings")
    assert [big.stats()[s] for s in sizes] == [small.stats()[s] for s in sizes]
    for query in ("get items", "delete item 31234 in service 3", "sync svc2", "p1 list"):
        assert big.search(query, 10) == small.search(query, 10)


def test_a_bad_tool_after_the_worker_started_leaves_the_index_as_it_was() -> None:
    index = ToolIndex()
    index.add(_tools(3))
    before = index.search("items", 3)
    bad = _tools(BIG)
    bad[30_000] = {"name": "broken", "input_schema": [1, 2]}
    with pytest.raises(ValueError, match="broken"):
        index.add(bad)
    assert len(index) == 3
    assert index.search("items", 3) == before


def test_an_exception_in_a_tokenize_report_aborts_a_large_add() -> None:
    index = ToolIndex()
    index.add(_tools(3))

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "tokenize":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        index.add(_tools(BIG), progress=progress)
    assert len(index) == 3


def test_vectors_of_another_dimension_in_a_later_chunk_are_refused() -> None:
    index = ToolIndex()
    tools = _tools(BIG)
    vectors: list[list[float] | None] = [[1.0, 0.0, 0.5]] * BIG
    vectors[20_000] = [1.0, 0.0]
    with pytest.raises(ValueError, match="2 dimensions, the others of this add have 3"):
        index.add(tools, vectors=vectors)
    assert len(index) == 0
    vectors[20_000] = [0.0, 1.0, 0.0]
    index.add(tools, vectors=vectors)
    assert len(index) == BIG


def _as_objects(tools: list[dict[str, Any]]) -> list[Any]:
    """Every third tool as an ``mcp.types.Tool``, every third as an OpenAI-style dict (neither
    is a dict holding a ``name``: both are read through ``tool_parts``), the rest as dicts."""
    out: list[Any] = []
    for i, t in enumerate(tools):
        if i % 3 == 1:
            out.append(
                McpTool(name=t["name"], description=t["description"], inputSchema=t["input_schema"])
            )
        elif i % 3 == 2:
            out.append({"type": "function", "function": {**t, "parameters": t["input_schema"]}})
        else:
            out.append(t)
    return out


def test_tool_objects_are_read_in_the_same_pass_as_dicts_and_index_alike() -> None:
    tools = _tools(BIG)
    plain = ToolIndex()
    plain.add(tools)
    mixed = ToolIndex()
    mixed.add(_as_objects(tools))  # a large add: read (and converted) while the worker tokenizes
    from_generator = ToolIndex()
    from_generator.add(t for t in _as_objects(tools[:20_000]))
    assert mixed.tool_names == plain.tool_names
    sizes = ("tools", "terms", "postings")
    assert [mixed.stats()[s] for s in sizes] == [plain.stats()[s] for s in sizes]
    for query in ("get items", "delete item 31234 in service 3", "sync svc2", "p1 list"):
        assert mixed.search(query, 10) == plain.search(query, 10)
    assert len(from_generator) == 20_000 and "svc5.create_item_19997" in from_generator


def test_an_unreadable_tool_object_after_the_worker_started_adds_nothing() -> None:
    index = ToolIndex()
    index.add(_tools(3))
    bad = _as_objects(_tools(BIG))
    bad[30_001] = object()
    with pytest.raises(ValueError, match="unsupported tool of type object"):
        index.add(bad)
    assert len(index) == 3
