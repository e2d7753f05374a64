"""The governed records of a checkpoint store: reading, formatting and exporting them.

Every thread's ``receipts``, ``denials`` and ``operator_decisions`` live in its checkpointed
state. This module reads them back **read-only** (nothing is ever written, and a missing file
is never created), with no engine and no graph, through the one checkpoint reader of
:mod:`algenta_graph.serving.checkpointer`:

- :func:`read_thread_values`: each thread's latest checkpointed state (the raw channel values);
- :func:`read_records`: the three kinds of records per thread;
- :func:`split_threads`: which threads are algenta-graph threads, and why the others are not
  (a store can be shared with other graphs);
- :func:`format_records`: a plain-text table (the JSONL export with chain links is
  :func:`algenta_graph.audit.export.export_jsonl`).

A file that cannot be read as a checkpoint file, or whose checkpoints are another graph's,
raises :class:`RecordsFileError`, whose message names the file and what is wrong with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from algenta_graph.audit.chain import a_type
from algenta_graph.console import short
from algenta_graph.errors import RecordsFileError
from algenta_graph.serving.checkpoint_reader import (
    StoredCheckpoint,
    read_latest,
    read_thread_values,
)
from algenta_graph.state import RECORD_FIELDS

__all__ = [
    "GOVERNED_NODES",
    "RECORD_FIELDS",
    "RecordsFileError",
    "foreign_reason",
    "format_records",
    "no_thread_of_ours",
    "read_records",
    "read_thread_values",
    "records_of",
    "split_threads",
    "thread_records",
]

GOVERNED_NODES: tuple[str, ...] = ("retrieve_tools", "governed_tool")
"""Nodes only the governed graph has (named in :mod:`algenta_graph.graph`; a test checks they
match): a thread whose checkpoints have seen one of them is an algenta-graph thread."""

Records = dict[str, dict[str, list[Any]]]

_INTERNAL_CHANNELS = ("__", "branch:")


def _governed_nodes_ran(cp: StoredCheckpoint) -> bool:
    return any(node in cp.nodes or f"branch:to:{node}" in cp.channels for node in GOVERNED_NODES)


def _shape_problem(values: Mapping[str, Any]) -> str | None:
    """Why the record lists of ``values`` are not lists of records, or ``None``."""
    for kind in RECORD_FIELDS:
        listed = values.get(kind)
        if listed is None:
            continue
        if not isinstance(listed, list | tuple):
            return f"its {kind} is {a_type(listed)}, not a list of records"
        for index, record in enumerate(listed):
            if not isinstance(record, Mapping):
                return f"its {kind}[{index}] is {a_type(record)}, not a record"
    return None


def foreign_reason(checkpoints: StoredCheckpoint | Sequence[StoredCheckpoint]) -> str | None:
    """Why a thread is not an algenta-graph thread, or ``None`` when it is one.

    ``checkpoints``: its latest checkpoint, or its history (oldest first). It is one when any
    of its checkpoints has seen a node only the governed graph has (:data:`GOVERNED_NODES`),
    or when its latest state holds record lists that are lists of records; a thread with no
    state yet (only its input) counts as one, with no records. Otherwise the reason names
    what its state holds instead.
    """
    history = [checkpoints] if isinstance(checkpoints, StoredCheckpoint) else list(checkpoints)
    if not history or any(_governed_nodes_ran(cp) for cp in history):
        return None
    latest = max(history, key=lambda cp: cp.checkpoint_id)
    shape = _shape_problem(latest.values)
    if shape is not None:
        return shape
    if any(kind in latest.values for kind in RECORD_FIELDS):
        return None
    channels = sorted(c for c in latest.channels if not c.startswith(_INTERNAL_CHANNELS))
    if not channels:
        return None  # no state yet: nothing to tell it by, and no records either way
    shown = ", ".join(channels[:6]) + (", ..." if len(channels) > 6 else "")
    return f"its state has no {', '.join(RECORD_FIELDS)}, only {shown}"


def split_threads(
    threads: Mapping[str, StoredCheckpoint | Sequence[StoredCheckpoint]],
) -> tuple[list[str], dict[str, str]]:
    """Tell the algenta-graph threads of ``threads`` from the others.

    Args:
        threads: latest checkpoints or histories, by thread id.

    Returns:
        ``(ours, foreign)``: the ids of the algenta-graph threads, and ``{thread_id: reason}``
        for the others.
    """
    ours: list[str] = []
    foreign: dict[str, str] = {}
    for tid, checkpoints in threads.items():
        reason = foreign_reason(checkpoints)
        if reason is None:
            ours.append(tid)
        else:
            foreign[tid] = reason
    return ours, foreign


def no_thread_of_ours(where: str, foreign: Mapping[str, str]) -> RecordsFileError:
    """The error for a store none of whose threads is an algenta-graph thread.

    Args:
        where: the store (a file, or a URL without its password).
        foreign: ``{thread_id: reason}`` for its threads.
    """
    if len(foreign) == 1:
        [(tid, reason)] = foreign.items()
        what = f"thread {tid!r} is not an algenta-graph thread: {reason}"
    else:
        listed = "; ".join(f"{tid!r}: {reason}" for tid, reason in list(foreign.items())[:3])
        more = "; ..." if len(foreign) > 3 else ""
        what = f"none of its {len(foreign)} threads is an algenta-graph thread ({listed}{more})"
    return RecordsFileError(f"{where}: {what} (checkpoints of another graph?)")


def records_of(cp: StoredCheckpoint, where: str) -> dict[str, list[Any]]:
    """The three record lists of an algenta-graph thread's checkpoint (``[]`` when absent).

    Raises :class:`RecordsFileError` (naming ``where``, the thread and the entry) when a list
    is not a list of records: the state was changed outside the graph (``receipts --verify``
    names every break).
    """
    shape = _shape_problem(cp.values)
    if shape is not None:
        raise RecordsFileError(
            f"{where}: thread {cp.thread_id!r}: {shape} (changed outside the graph? "
            "receipts --verify names every break)"
        )
    return {kind: list(cp.values.get(kind) or []) for kind in RECORD_FIELDS}


def thread_records(
    latest: Mapping[str, StoredCheckpoint], where: str
) -> tuple[Records, dict[str, str]]:
    """The records of each thread's latest checkpoint, and the threads that are not ours.

    Args:
        latest: each thread's latest checkpoint, by thread id.
        where: names the store in errors.

    Returns:
        ``(records, foreign)``: the records of the algenta-graph threads, and why the other
        threads are not (see :func:`split_threads`).

    Raises:
        RecordsFileError: there are threads and none is ours, or a record list of ours is not
            a list of records.
    """
    ours, foreign = split_threads(latest)
    if foreign and not ours:
        raise no_thread_of_ours(where, foreign)
    return {tid: records_of(latest[tid], where) for tid in ours}, foreign


def read_records(db: str | Path, thread: str | None = None) -> Records:
    """Every thread's receipts, denials and operator decisions, read from a checkpoint file.

    Returns ``{thread_id: {"receipts": [...], "denials": [...], "operator_decisions": [...]}}``
    from each thread's latest checkpoint, threads sorted by id. Threads of another graph
    sharing the file are left out (:func:`split_threads`). Raises ``FileNotFoundError`` when
    ``db`` does not exist, and :class:`RecordsFileError` when it is not a readable checkpoint
    file or none of its threads is an algenta-graph thread.
    """
    latest = read_latest(db, thread, fields=RECORD_FIELDS)
    return thread_records(latest, str(db))[0]


def _subject(record: Mapping[str, Any]) -> str:
    """What a record is about: its decision, else (a graph-side gate's) its tool."""
    tool = record.get("tool")
    if record.get("decision_id") is None and tool:
        server = record.get("server")
        return f"{server}.{tool}" if server else str(tool)
    return str(record.get("decision_id"))


def format_records(records: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]]) -> str:
    """A plain-text table of receipts, denials, operator decisions and gated calls, per thread.

    A record of a graph-side gate (a held, denied or approved call of any tool) shows its tool,
    ``server.name``, where an ``execute_decision`` record shows its decision.
    """
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
                    _subject(d),
                    f"gate={d.get('gate')}" + (f" rule={d['rule']}" if d.get("rule") else ""),
                    short(d.get("message"), 60),
                )
            )
        for o in kinds.get("operator_decisions", []):
            rows.append(
                (
                    tid,
                    "operator",
                    _subject(o),
                    f"{o.get('action')} {o.get('gate')} -> {o.get('result')}",
                    f"by {o.get('operator')}: {short(o.get('reason'), 40)}",
                )
            )
        for c in kinds.get("tool_calls", []):
            rows.append(
                (
                    tid,
                    "tool_call",
                    f"{c.get('server')}.{c.get('tool')}",
                    "let through",
                    f"args {short(c.get('args_digest'), 24)}",
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
