"""Reading checkpoints back, read-only: the one reader of a SQLite file, a URL or a saver.

:func:`read_latest` / :func:`aread_latest` give each thread's latest root checkpoint and
:func:`read_history` / :func:`aread_history` every root checkpoint of each thread, oldest first,
as :class:`StoredCheckpoint`; :func:`read_thread_values`, :func:`read_thread_records` and the
audit modules are views of them. A SQLite file is read with plain SQL over a read-only
connection (a saver would run its ``setup()``, a write); anything else through
:func:`~algenta_graph.serving.checkpointer.open_checkpointer`.

A file that is not a readable LangGraph SQLite checkpoint file, or a store whose threads are
not an algenta-graph's, raises :class:`~algenta_graph.errors.RecordsFileError` (re-exported
here, with :data:`~algenta_graph.state.RECORD_FIELDS`, the fields
:func:`read_thread_records` returns).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from algenta_graph.errors import RecordsFileError
from algenta_graph.serving.checkpointer import is_postgres_url, open_checkpointer
from algenta_graph.state import RECORD_FIELDS

__all__ = [
    "RECORD_FIELDS",
    "RecordsFileError",
    "StoredCheckpoint",
    "aread_history",
    "aread_latest",
    "aread_thread_values",
    "open_sqlite_read_only",
    "read_history",
    "read_latest",
    "read_thread_records",
    "read_thread_values",
]


@dataclass(frozen=True)
class StoredCheckpoint:
    """One root checkpoint of a thread, as read back from a checkpoint file or a saver.

    ``values``: its channel values (the state; only the fields asked for, when a reader was
    given ``fields``); ``channels``: every channel it holds a value or a version of (its
    ``channel_values`` and ``channel_versions``: each channel written so far); ``nodes``: the
    nodes whose input it has seen (``versions_seen``); ``versions``: its ``channel_versions``
    (a channel's version changes whenever LangGraph writes it); ``parent_id``: the checkpoint
    it follows (``None`` for a thread's first); ``step``: the superstep its metadata names
    (``None`` when it names none).
    """

    thread_id: str
    checkpoint_id: str
    parent_id: str | None
    step: int | None
    values: dict[str, Any]
    channels: frozenset[str] = field(default_factory=frozenset)
    nodes: frozenset[str] = field(default_factory=frozenset)
    versions: dict[str, Any] = field(default_factory=dict)


def _stored(
    thread_id: Any,
    checkpoint_id: Any,
    parent_id: Any,
    metadata: Any,
    checkpoint: Mapping[str, Any],
    fields: Collection[str] | None,
) -> StoredCheckpoint:
    channel_values = checkpoint["channel_values"]
    if not isinstance(channel_values, Mapping):
        raise TypeError(f"channel_values is a {type(channel_values).__name__}")
    if fields is None:
        values = dict(channel_values)
    else:
        values = {k: channel_values[k] for k in fields if k in channel_values}
    step = metadata.get("step") if isinstance(metadata, Mapping) else None
    versions = checkpoint.get("channel_versions")
    versions = dict(versions) if isinstance(versions, Mapping) else {}
    return StoredCheckpoint(
        thread_id=str(thread_id),
        checkpoint_id=str(checkpoint_id),
        parent_id=None if parent_id is None else str(parent_id),
        step=step if isinstance(step, int) and not isinstance(step, bool) else None,
        values=values,
        channels=frozenset(str(c) for c in (*channel_values, *versions)),
        nodes=frozenset(str(n) for n in checkpoint.get("versions_seen") or ()),
        versions={str(c): v for c, v in versions.items()},
    )


def _pick_latest(checkpoints: Iterable[StoredCheckpoint]) -> dict[str, StoredCheckpoint]:
    """The one rule for "a thread's latest checkpoint", applied to every thread.

    A thread's latest checkpoint is its root checkpoint with the greatest ``checkpoint_id``
    (LangGraph's ids sort in creation order); threads are sorted by id.
    """
    latest: dict[str, StoredCheckpoint] = {}
    for cp in checkpoints:
        have = latest.get(cp.thread_id)
        if have is None or cp.checkpoint_id > have.checkpoint_id:
            latest[cp.thread_id] = cp
    return dict(sorted(latest.items()))


def _group_history(checkpoints: Iterable[StoredCheckpoint]) -> dict[str, list[StoredCheckpoint]]:
    """Every root checkpoint per thread, oldest first (by ``checkpoint_id``); threads sorted."""
    history: dict[str, list[StoredCheckpoint]] = {}
    for cp in checkpoints:
        history.setdefault(cp.thread_id, []).append(cp)
    return {tid: sorted(cps, key=lambda c: c.checkpoint_id) for tid, cps in sorted(history.items())}


# SQLite files are read with plain SQL over a read-only connection (a SqliteSaver would run its
# setup(), a write); the rows are decoded with the serializer SqliteSaver writes with.
_SQLITE_COLUMNS = (
    "c.thread_id, c.checkpoint_id, c.parent_checkpoint_id, c.type, c.checkpoint, c.metadata"
)
_SQLITE_LATEST = f"""
SELECT {_SQLITE_COLUMNS} FROM checkpoints AS c
WHERE c.checkpoint_ns = '' {{thread}} AND c.checkpoint_id = (
    SELECT max(checkpoint_id) FROM checkpoints
    WHERE thread_id = c.thread_id AND checkpoint_ns = ''
)
ORDER BY c.thread_id
"""
_SQLITE_HISTORY = f"""
SELECT {_SQLITE_COLUMNS} FROM checkpoints AS c
WHERE c.checkpoint_ns = '' {{thread}}
ORDER BY c.thread_id, c.checkpoint_id
"""


def _sqlite_metadata(raw: Any) -> Any:
    try:
        return json.loads(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None  # metadata only names the step: never a reason to refuse a checkpoint


def _sqlite_checkpoints(
    db: str | os.PathLike[str], thread: str | None, *, latest: bool, fields: Collection[str] | None
) -> list[StoredCheckpoint]:
    """Root checkpoints of a SQLite checkpoint file, read-only; errors name the file."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    path = Path(db)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    if not path.is_file():
        raise RecordsFileError(f"{path} is not a file")
    serde = JsonPlusSerializer()  # what langgraph's SqliteSaver writes with by default
    query = (_SQLITE_LATEST if latest else _SQLITE_HISTORY).format(
        thread="AND c.thread_id = ?" if thread is not None else ""
    )
    out: list[StoredCheckpoint] = []
    try:
        with open_sqlite_read_only(path) as conn:
            try:
                tables = {
                    r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
                }
            except sqlite3.DatabaseError as exc:
                raise RecordsFileError(
                    f"{path} is not a readable SQLite database ({exc})"
                ) from None
            if "checkpoints" not in tables:
                raise RecordsFileError(
                    f"{path} is not a LangGraph SQLite checkpoint file (no checkpoints table)"
                )
            try:
                rows = conn.execute(query, (thread,) if thread is not None else ())
                for thread_id, checkpoint_id, parent_id, kind, blob, metadata in rows:
                    try:
                        checkpoint = serde.loads_typed((kind, blob))
                        cp = _stored(
                            thread_id,
                            checkpoint_id,
                            parent_id,
                            _sqlite_metadata(metadata),
                            checkpoint,
                            fields,
                        )
                    except Exception as exc:
                        raise RecordsFileError(
                            f"{path}: checkpoint {checkpoint_id} of thread {thread_id!r} cannot "
                            f"be decoded ({type(exc).__name__}: {_short(str(exc), 120)})"
                        ) from None
                    out.append(cp)
            except sqlite3.DatabaseError as exc:
                raise RecordsFileError(
                    f"{path} is not a readable LangGraph SQLite checkpoint file ({exc})"
                ) from None
    except sqlite3.Error as exc:  # e.g. the file cannot be opened at all
        raise RecordsFileError(f"{path} cannot be read as a SQLite database ({exc})") from None
    return out


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _from_tuple(item: Any, fields: Collection[str] | None) -> StoredCheckpoint | None:
    """A saver's ``CheckpointTuple`` as a :class:`StoredCheckpoint` (``None``: not a root one)."""
    conf = item.config["configurable"]
    if conf.get("checkpoint_ns"):
        return None
    parent = ((item.parent_config or {}).get("configurable") or {}).get("checkpoint_id")
    return _stored(
        conf["thread_id"], conf["checkpoint_id"], parent, item.metadata, item.checkpoint, fields
    )


def _saver_config(thread: str | None) -> Any:
    return None if thread is None else {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _is_file(source: Any) -> bool:
    return isinstance(source, str | os.PathLike) and not is_postgres_url(source)


def _saver_checkpoints(
    saver: Any, thread: str | None, *, latest: bool, fields: Collection[str] | None
) -> Iterator[StoredCheckpoint]:
    if is_postgres_url(saver):
        raise TypeError(
            "a PostgreSQL URL is read through the async readers (aread_latest, aread_history)"
        )
    items: Iterable[Any]
    if latest and thread is not None:
        item = saver.get_tuple(_saver_config(thread))
        items = () if item is None else (item,)
    else:
        items = saver.list(_saver_config(thread))
    for item in items:
        cp = _from_tuple(item, fields)
        if cp is not None:
            yield cp


async def _asaver_checkpoints(
    saver: Any, thread: str | None, *, latest: bool, fields: Collection[str] | None
) -> list[StoredCheckpoint]:
    out: list[StoredCheckpoint] = []
    if latest and thread is not None:
        item = await saver.aget_tuple(_saver_config(thread))
        items = [] if item is None else [item]
    else:
        items = [item async for item in saver.alist(_saver_config(thread))]
    for item in items:
        cp = _from_tuple(item, fields)
        if cp is not None:
            out.append(cp)
    return out


async def _acheckpoints(
    source: Any, thread: str | None, *, latest: bool, fields: Collection[str] | None
) -> list[StoredCheckpoint]:
    if _is_file(source):
        return await asyncio.to_thread(
            _sqlite_checkpoints, source, thread, latest=latest, fields=fields
        )
    if is_postgres_url(source):
        async with open_checkpointer(str(source), setup=False) as saver:
            return await _asaver_checkpoints(saver, thread, latest=latest, fields=fields)
    return await _asaver_checkpoints(source, thread, latest=latest, fields=fields)


def read_latest(
    source: str | os.PathLike[str] | BaseCheckpointSaver[Any],
    thread: str | None = None,
    *,
    fields: Collection[str] | None = None,
) -> dict[str, StoredCheckpoint]:
    """Each thread's latest root checkpoint: ``{thread_id: StoredCheckpoint}``, sorted by id.

    ``source``: a SQLite checkpoint file (opened read-only: never written, never created) or a
    saver with a synchronous ``list`` (for an async saver or a PostgreSQL URL use
    :func:`aread_latest`). Only ``thread`` when given (``{}`` when it has no checkpoint);
    ``fields``: keep only these state values. For a file, raises ``FileNotFoundError`` when
    it does not exist and :class:`RecordsFileError` when it is not a SQLite database, not a
    checkpoint file, or holds a checkpoint that cannot be decoded.
    """
    if _is_file(source):
        rows: Iterable[StoredCheckpoint] = _sqlite_checkpoints(
            source,  # type: ignore[arg-type]
            thread,
            latest=True,
            fields=fields,
        )
    else:
        rows = _saver_checkpoints(source, thread, latest=True, fields=fields)
    return _pick_latest(rows)


async def aread_latest(
    source: str | os.PathLike[str] | BaseCheckpointSaver[Any],
    thread: str | None = None,
    *,
    fields: Collection[str] | None = None,
) -> dict[str, StoredCheckpoint]:
    """:func:`read_latest` for any saver (``alist``), a SQLite file, or a ``postgresql://`` URL.

    A URL is opened without creating anything (``open_checkpointer(url, setup=False)``).
    """
    return _pick_latest(await _acheckpoints(source, thread, latest=True, fields=fields))


def read_history(
    source: str | os.PathLike[str] | BaseCheckpointSaver[Any],
    thread: str | None = None,
    *,
    fields: Collection[str] | None = None,
) -> dict[str, list[StoredCheckpoint]]:
    """Every root checkpoint of each thread, oldest first: ``{thread_id: [StoredCheckpoint]}``.

    Sources, ``thread``, ``fields`` and errors as in :func:`read_latest`. A thread's history
    can branch (LangGraph's time travel): follow ``parent_id``, not the list order.
    """
    if _is_file(source):
        rows: Iterable[StoredCheckpoint] = _sqlite_checkpoints(
            source,  # type: ignore[arg-type]
            thread,
            latest=False,
            fields=fields,
        )
    else:
        rows = _saver_checkpoints(source, thread, latest=False, fields=fields)
    return _group_history(rows)


async def aread_history(
    source: str | os.PathLike[str] | BaseCheckpointSaver[Any],
    thread: str | None = None,
    *,
    fields: Collection[str] | None = None,
) -> dict[str, list[StoredCheckpoint]]:
    """:func:`read_history` for any saver, a SQLite file, or a ``postgresql://`` URL."""
    return _group_history(await _acheckpoints(source, thread, latest=False, fields=fields))


def read_thread_values(
    source: str | os.PathLike[str] | BaseCheckpointSaver[Any], thread: str | None = None
) -> dict[str, dict[str, Any]]:
    """Each thread's latest checkpointed state values: ``{thread_id: channel_values}``.

    The values of :func:`read_latest` (same sources, same errors), threads sorted by id.
    """
    return {tid: cp.values for tid, cp in read_latest(source, thread).items()}


async def aread_thread_values(
    source: str | os.PathLike[str] | BaseCheckpointSaver[Any], thread: str | None = None
) -> dict[str, dict[str, Any]]:
    """:func:`read_thread_values` for any saver, a SQLite file, or a ``postgresql://`` URL."""
    return {tid: cp.values for tid, cp in (await aread_latest(source, thread)).items()}


async def read_thread_records(
    saver: str | os.PathLike[str] | BaseCheckpointSaver[Any], thread: str | None = None
) -> dict[str, dict[str, list[Any]]]:
    """Every thread's receipts, denials and operator decisions, from any checkpoint saver.

    Returns ``{thread_id: {"receipts": [...], "denials": [...], "operator_decisions": [...]}}``
    from each thread's latest root checkpoint, sorted by thread id; only ``thread`` when given
    (``{}`` when it has no checkpoint). Reads only: nothing is written.
    """
    latest = await aread_latest(saver, thread, fields=RECORD_FIELDS)
    return {
        tid: {kind: list(cp.values.get(kind) or []) for kind in RECORD_FIELDS}
        for tid, cp in latest.items()
    }


def open_sqlite_read_only(path: str | Path) -> contextlib.closing[Any]:
    """A read-only ``sqlite3`` connection to the file ``path``, as a context manager.

    Use it as ``with open_sqlite_read_only(path) as conn``. The file is opened with
    ``mode=ro`` and ``query_only``: nothing is ever written to it, and a missing file raises
    ``FileNotFoundError`` instead of being created. (``receipts`` reads through this; graphs
    write through :func:`open_checkpointer`.)
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no SQLite file at {file}")
    conn = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
    try:
        conn.execute("PRAGMA query_only = 1")
    except BaseException:
        conn.close()
        raise
    return contextlib.closing(conn)
