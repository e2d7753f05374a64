"""What each step of a thread wrote to its record lists, as the checkpoint store keeps it.

LangGraph saves the writes of every task with the checkpoint the task ran from (SQLite's
``writes`` table, PostgreSQL's ``checkpoint_writes``, a saver's ``CheckpointTuple.
pending_writes``): a checkpoint's record lists are the lists of the checkpoint it follows plus
what that step wrote. :func:`~algenta_graph.audit.history.verify_history` uses them to explain
every record that appears between two checkpoints; a record neither checkpoint before it holds
nor the step wrote was removed from the checkpoints before it (or added outside the graph),
even when the step also wrote its list (which the lists' channel versions alone cannot tell).

Read-only, like :mod:`algenta_graph.serving.checkpoint_reader` (a SQLite file through a
read-only connection; a PostgreSQL URL opened without creating anything), root checkpoints
only. A checkpoint whose tasks' writes are not in the store (a run with ``durability="exit"``,
a step that did not finish, the end of a run) has no :class:`StepWrites`: what came after it
is then checked by the channel versions only.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from algenta_graph.errors import RecordsFileError
from algenta_graph.state import RECORD_FIELDS

__all__ = ["StepWrites", "ThreadWrites", "aread_step_writes", "read_step_writes"]


@dataclass(frozen=True)
class StepWrites:
    """What the tasks run from one checkpoint wrote to the record lists (``field -> records``).

    Only a checkpoint with the writes of at least one finished task has one (a task's writes to
    the graph's own channels: LangGraph's internal ``__interrupt__``, ``__resume__``,
    ``__error__`` writes are no task's result).
    """

    records: dict[str, list[Any]] = field(default_factory=dict)


ThreadWrites = dict[str, dict[str, StepWrites]]
"""``{thread_id: {checkpoint_id: StepWrites}}``."""


def _collect(rows: Iterable[tuple[str, str, str, Any]]) -> ThreadWrites:
    """``(thread_id, checkpoint_id, channel, value)`` rows, in any order, as :data:`ThreadWrites`.

    >>> rows = [("t", "c1", "messages", []), ("t", "c1", "receipts", [{"seq": 1}]),
    ...         ("t", "c2", "__interrupt__", [])]
    >>> _collect(rows)
    {'t': {'c1': StepWrites(records={'receipts': [{'seq': 1}]})}}
    """
    out: ThreadWrites = {}
    unknown: set[tuple[str, str]] = set()
    for thread_id, checkpoint_id, channel, value in rows:
        if channel.startswith("__"):  # LangGraph's own (interrupt, resume, error): no result
            continue
        where = (str(thread_id), str(checkpoint_id))
        step = out.setdefault(where[0], {}).setdefault(where[1], StepWrites())
        if value is _UNREADABLE:
            unknown.add(where)
        elif channel in RECORD_FIELDS:
            # what the reducer appends: a record, or a list of them (anything else is kept
            # as one value, which no checkpoint's record can match)
            written = list(value) if isinstance(value, list | tuple) else [value]
            step.records.setdefault(channel, []).extend(written)
    for thread_id, checkpoint_id in unknown:  # a write that cannot be read: unknown step
        del out[thread_id][checkpoint_id]
    return out


_UNREADABLE = object()
"""A stored write that cannot be decoded: what its step wrote is then unknown."""


# the writes of root checkpoints, read with the serializer SqliteSaver writes with
_SQLITE_WRITES = """
SELECT thread_id, checkpoint_id, channel, type, value FROM writes
WHERE checkpoint_ns = '' {thread}
ORDER BY thread_id, checkpoint_id, task_id, idx
"""


def _sqlite_writes(path: str | os.PathLike[str], thread: str | None) -> ThreadWrites:
    """The writes of a SQLite checkpoint file (read-only); none when it keeps no writes table."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from algenta_graph.serving.checkpoint_reader import open_sqlite_read_only

    serde = JsonPlusSerializer()
    query = _SQLITE_WRITES.format(thread="AND thread_id = ?" if thread is not None else "")
    try:
        with open_sqlite_read_only(Path(path)) as conn:
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            if "writes" not in tables:
                return {}
            rows = conn.execute(query, (thread,) if thread is not None else ()).fetchall()
    except sqlite3.Error as exc:
        raise RecordsFileError(f"{path}: its writes table cannot be read ({exc})") from None

    def decoded(channel: str, kind: Any, blob: Any) -> Any:
        if channel not in RECORD_FIELDS:
            return None
        try:
            return serde.loads_typed((kind, blob))
        except Exception:
            return _UNREADABLE

    return _collect(
        (tid, cid, channel, decoded(channel, kind, blob)) for tid, cid, channel, kind, blob in rows
    )


def _tuple_rows(items: Iterable[Any]) -> Iterable[tuple[str, str, str, Any]]:
    for item in items:
        conf = item.config["configurable"]
        if conf.get("checkpoint_ns"):
            continue
        for _task, channel, value in item.pending_writes or ():
            yield conf["thread_id"], conf["checkpoint_id"], channel, value


def _saver_config(thread: str | None) -> Any:
    return None if thread is None else {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _is_file(source: Any) -> bool:
    from algenta_graph.serving.checkpointer import is_postgres_url

    return isinstance(source, str | os.PathLike) and not is_postgres_url(source)


def read_step_writes(source: Any, thread: str | None = None) -> ThreadWrites:
    """What each step wrote to the record lists, from a SQLite file or a saver's ``list``.

    Args:
        source: a SQLite checkpoint file (opened read-only) or a saver with a synchronous
            ``list`` (for an async saver or a PostgreSQL URL use :func:`aread_step_writes`).
        thread: only this thread (None: every thread).
    """
    if _is_file(source):
        return _sqlite_writes(source, thread)
    return _collect(_tuple_rows(source.list(_saver_config(thread))))


async def aread_step_writes(source: Any, thread: str | None = None) -> ThreadWrites:
    """:func:`read_step_writes` for any saver (``alist``), a SQLite file or a PostgreSQL URL."""
    import asyncio

    from algenta_graph.serving.checkpointer import is_postgres_url, open_checkpointer

    if _is_file(source):
        return await asyncio.to_thread(_sqlite_writes, source, thread)
    if is_postgres_url(source):
        async with open_checkpointer(str(source).strip(), setup=False) as saver:
            return _collect(_tuple_rows([i async for i in saver.alist(_saver_config(thread))]))
    return _collect(_tuple_rows([i async for i in source.alist(_saver_config(thread))]))
