"""The governed records of a checkpoint file: reading, formatting and exporting them.

Every thread's ``receipts``, ``denials`` and ``operator_decisions`` live in its checkpointed
state. This module reads them back from a SQLite checkpoint file **read-only** (nothing is
ever written to the file, and a missing file is never created), with no engine and no graph:

- :func:`read_thread_values`: each thread's latest checkpointed state (the raw channel values);
- :func:`read_records`: the three kinds of records per thread;
- :func:`format_records`: a plain-text table; :func:`records_jsonl`: one JSON line per record.

A file that cannot be read as a checkpoint file raises :class:`RecordsFileError`, whose
message names the file and what is wrong with it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from algenta_graph.checkpointer import open_sqlite_read_only
from algenta_graph.console import short
from algenta_graph.errors import AlgentaGraphError

__all__ = [
    "RECORD_KINDS",
    "RecordsFileError",
    "format_records",
    "read_records",
    "read_thread_values",
    "records_jsonl",
]

RECORD_KINDS: tuple[str, ...] = ("receipts", "denials", "operator_decisions")
"""The governed record lists of a thread's state, in display order."""

Records = dict[str, dict[str, list[Any]]]

_LATEST = """
SELECT c.thread_id, c.checkpoint_id, c.type, c.checkpoint FROM checkpoints AS c
WHERE c.checkpoint_ns = '' {thread} AND c.checkpoint_id = (
    SELECT max(checkpoint_id) FROM checkpoints
    WHERE thread_id = c.thread_id AND checkpoint_ns = ''
)
ORDER BY c.thread_id
"""


class RecordsFileError(AlgentaGraphError, ValueError):
    """A file that is not a readable LangGraph SQLite checkpoint file (the message says why)."""


def read_thread_values(db: str | Path, thread: str | None = None) -> dict[str, dict[str, Any]]:
    """Each thread's latest checkpointed state values, from a SQLite checkpoint file.

    Only ``thread`` when given. Raises ``FileNotFoundError`` when ``db`` does not exist and
    :class:`RecordsFileError` when it is not a SQLite database, not a checkpoint file, or
    holds a checkpoint that cannot be decoded.
    """
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    path = Path(db)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    if not path.is_file():
        raise RecordsFileError(f"{path} is not a file")
    serde = JsonPlusSerializer()  # what langgraph's SqliteSaver writes with by default
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
            query = _LATEST.format(thread="AND c.thread_id = ?" if thread is not None else "")
            try:
                rows = conn.execute(query, (thread,) if thread is not None else ()).fetchall()
            except sqlite3.DatabaseError as exc:
                raise RecordsFileError(
                    f"{path} is not a readable LangGraph SQLite checkpoint file ({exc})"
                ) from None
    except sqlite3.Error as exc:  # e.g. the file cannot be opened at all
        raise RecordsFileError(f"{path} cannot be read as a SQLite database ({exc})") from None
    values: dict[str, dict[str, Any]] = {}
    for thread_id, checkpoint_id, kind, blob in rows:
        try:
            checkpoint = serde.loads_typed((kind, blob))
            channel_values = checkpoint["channel_values"]
            if not isinstance(channel_values, Mapping):
                raise TypeError(f"channel_values is a {type(channel_values).__name__}")
        except Exception as exc:
            raise RecordsFileError(
                f"{path}: checkpoint {checkpoint_id} of thread {thread_id!r} cannot be decoded "
                f"({type(exc).__name__}: {short(str(exc), 120)})"
            ) from None
        values[str(thread_id)] = dict(channel_values)
    return values


def read_records(db: str | Path, thread: str | None = None) -> Records:
    """Every thread's receipts, denials and operator decisions, read from a checkpoint file.

    Returns ``{thread_id: {"receipts": [...], "denials": [...], "operator_decisions": [...]}}``
    from each thread's latest checkpoint, threads sorted by id. Raises as
    :func:`read_thread_values` does.
    """
    return {
        tid: {kind: list(values.get(kind) or []) for kind in RECORD_KINDS}
        for tid, values in read_thread_values(db, thread).items()
    }


def records_jsonl(
    records: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]],
) -> Iterator[str]:
    """One JSON object per record: ``{"thread_id", "record": "receipt" | ..., **fields}``."""
    for tid, kinds in records.items():
        for kind in RECORD_KINDS:
            for record in kinds.get(kind, []):
                yield json.dumps({"thread_id": tid, "record": kind[:-1], **record}, default=str)


def format_records(records: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]]) -> str:
    """A plain-text table of receipts, then denials, then operator decisions, per thread."""
    rows: list[tuple[str, ...]] = []
    for tid, kinds in records.items():
        for r in kinds.get("receipts", []):
            rows.append(
                (
                    tid,
                    "receipt",
                    str(r.get("decision_id")),
                    f"{r.get('execution_status')} HTTP {r.get('response_code')}",
                    f"overridden={r.get('safety_overridden')} source={r.get('source')}",
                )
            )
        for d in kinds.get("denials", []):
            rows.append(
                (
                    tid,
                    "denial",
                    str(d.get("decision_id")),
                    f"gate={d.get('gate')}",
                    short(d.get("message"), 60),
                )
            )
        for o in kinds.get("operator_decisions", []):
            rows.append(
                (
                    tid,
                    "operator",
                    str(o.get("decision_id")),
                    f"{o.get('action')} {o.get('gate')} -> {o.get('result')}",
                    f"by {o.get('operator')}: {short(o.get('reason'), 40)}",
                )
            )
    header = ("thread", "record", "decision_id", "outcome", "detail")
    if not rows:
        return "(no receipts, denials or operator decisions)"
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(out)
