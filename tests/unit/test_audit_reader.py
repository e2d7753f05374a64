"""One reader of "a thread's latest values": ``algenta_graph.serving.checkpoint_reader``.

``audit.read_thread_values`` is ``checkpoint_reader.read_thread_values``; the records, the audit
verification and the CLI read through
:func:`~algenta_graph.serving.checkpoint_reader.read_latest` /
:func:`~algenta_graph.serving.checkpoint_reader.read_history`, and ``chain`` keeps no reader of
its own.
Every way in (a SQLite path, a sync saver, an async saver, sync and async) gives the same
values, and they are LangGraph's own idea of a thread's latest state: on a real file with
several threads, several checkpoints each, a branched history (time travel), and a subgraph's
checkpoint written after the root's latest (never taken for the thread's state).
"""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph

import algenta_graph
import algenta_graph.audit.chain as chain
import algenta_graph.audit.records as audit
import algenta_graph.serving.checkpoint_reader as checkpointer
from algenta_graph.audit.chain import seal
from algenta_graph.audit.history import averify_audit, verify_audit
from algenta_graph.errors import RecordsFileError
from algenta_graph.serving.checkpoint_reader import (
    aread_thread_values,
    read_latest,
    read_thread_records,
    read_thread_values,
)
from algenta_graph.state import RECORD_FIELDS, GovernedState


def _tool(state: GovernedState) -> dict[str, Any]:
    n = len(state.get("receipts") or [])
    receipt = {"decision_id": f"dec_{n}", "execution_status": "delivered", "response_code": 200}
    return seal(
        state, {"receipts": [receipt], "denials": [], "operator_decisions": [], "tool_calls": []}
    )


def _graph(saver: Any) -> Any:
    builder: StateGraph[Any] = StateGraph(GovernedState)
    builder.add_node("tool", _tool)
    builder.add_edge(START, "tool")
    builder.add_edge("tool", END)
    return builder.compile(checkpointer=saver)


def _file(tmp_path: Path) -> Path:
    db = tmp_path / "threads.sqlite"
    with SqliteSaver.from_conn_string(str(db)) as saver:
        graph = _graph(saver)
        for thread, turns in (("a", 3), ("b", 2)):
            for turn in range(turns):
                graph.invoke({"messages": [("user", f"turn {turn}")]}, _cfg(thread))
        # time travel on b: a new turn from its first turn's end (a branch; now its latest)
        first_end = [s for s in graph.get_state_history(_cfg("b")) if not s.next][-1]
        graph.invoke({"messages": [("user", "again")]}, first_end.config)
        # a subgraph's checkpoint in a, written after a's latest root checkpoint
        sub: Any = {"configurable": {"thread_id": "a", "checkpoint_ns": "inner:1"}}
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"receipts": [{"decision_id": "dec_subgraph"}]}
        saver.put(sub, checkpoint, {"step": 99}, {})
    return db


def _cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def test_there_is_one_reader() -> None:
    assert audit.read_thread_values is checkpointer.read_thread_values
    # the checkpoint reader re-exports what it raises and the fields it reads, the same objects
    assert audit.RecordsFileError is checkpointer.RecordsFileError is RecordsFileError
    assert audit.RECORD_FIELDS is checkpointer.RECORD_FIELDS is RECORD_FIELDS
    assert algenta_graph.RecordsFileError is RecordsFileError  # the public API's
    for gone in ("_latest_values", "_read_sqlite"):
        assert not hasattr(chain, gone), gone
    assert "SELECT" not in inspect.getsource(audit)  # no SQL of its own
    assert not inspect.iscoroutinefunction(read_thread_values)
    assert inspect.iscoroutinefunction(aread_thread_values)


def test_a_user_reading_a_file_that_is_no_checkpoint_file_catches_the_packages_error(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "notes.sqlite"
    notes.write_text("not a database, a note")
    with pytest.raises(algenta_graph.RecordsFileError, match=r"notes\.sqlite"):
        read_thread_values(notes)
    with pytest.raises(algenta_graph.RecordsFileError, match=r"notes\.sqlite"):
        verify_audit(notes)


def test_every_way_in_gives_langgraphs_own_latest_state(tmp_path: Path) -> None:
    db = _file(tmp_path)
    with SqliteSaver.from_conn_string(str(db)) as saver:
        graph = _graph(saver)
        truth = {t: graph.get_state(_cfg(t)).values for t in ("a", "b")}
        via_sync_saver = read_thread_values(saver)
        only_b = read_thread_values(saver, "b")
        audit_reports = verify_audit(saver)

    async def via_async() -> tuple[Any, ...]:
        async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
            return (
                await aread_thread_values(saver),
                await aread_thread_values(saver, "a"),
                await read_thread_records(saver),
                await averify_audit(saver),
                await aread_thread_values(db),
            )

    via_async_saver, only_a, async_records, async_reports, via_async_path = asyncio.run(via_async())
    via_path = read_thread_values(db)

    assert [r["decision_id"] for r in truth["a"]["receipts"]] == ["dec_0", "dec_1", "dec_2"]
    assert [r["decision_id"] for r in truth["b"]["receipts"]] == ["dec_0", "dec_1"]  # the branch
    assert [m.content for m in truth["b"]["messages"] if m.type == "human"] == ["turn 0", "again"]
    for values in (via_path, via_sync_saver, via_async_saver, via_async_path):
        assert sorted(values) == ["a", "b"]
        for thread in ("a", "b"):
            for kind in (*RECORD_FIELDS, "messages"):
                assert values[thread][kind] == truth[thread][kind], (thread, kind)
    assert only_a == {"a": via_path["a"]} and only_b == {"b": via_path["b"]}

    records = audit.read_records(db)
    assert records == async_records
    assert records == {t: {k: truth[t][k] for k in RECORD_FIELDS} for t in ("a", "b")}
    latest = read_latest(db)
    assert {t: cp.values for t, cp in latest.items()} == via_path
    assert all(cp.checkpoint_id == truth_id(db, t) for t, cp in latest.items())

    file_reports = verify_audit(db)
    assert file_reports == audit_reports == async_reports
    assert {t: (r.ok, r.count) for t, r in file_reports.items()} == {"a": (True, 3), "b": (True, 2)}


def truth_id(db: Path, thread: str) -> str:
    with SqliteSaver.from_conn_string(str(db)) as saver:
        item = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
    assert item is not None
    return str(item.config["configurable"]["checkpoint_id"])
