"""``algenta-graph receipts``: the governed records of a checkpoint store, read-only.

``algenta-graph receipts --db runs.sqlite [--thread t1] [--jsonl | --verify]`` prints every
receipt (with its trace id, when the engine wrote one), denial and operator decision of a SQLite
file or a ``postgresql://`` store (no engine needed); ``--verify`` checks every checkpoint of
each thread's history (:func:`algenta_graph.audit.history.verify_history`). Threads of another
graph in the same store are left out by name.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from algenta_graph.cli.common import (
    DEFAULT_DB,
    EXIT_FAILED,
    db_arg,
    one_line,
    pg_reason,
    postgres_failure,
    store_name,
)
from algenta_graph.errors import CommandError

__all__ = ["add_receipts_parser", "store_hint", "unreadable_store", "with_trace_ids"]

SERVED_STORE = ".langgraph_api"
"""Where ``langgraph dev`` keeps its own state (pickles only the running server reads)."""


def store_hint(db: str) -> str:
    """What to give ``--db`` instead of ``db``, which is not a checkpoint store it can read."""
    path = Path(db)
    if SERVED_STORE in path.parts or path.suffix == ".pckl" or Path(SERVED_STORE).is_dir():
        return (
            f"langgraph dev keeps its threads in {SERVED_STORE}/, which only the running server "
            'reads: serve with the server checkpointer (in langgraph.json, "checkpointer": '
            '{"path": "algenta_graph.serving.checkpointer.server_checkpointer"}, and '
            "ALGENTA_CHECKPOINTER=runs.sqlite or a postgresql:// URL), then give the same store "
            "here: --db runs.sqlite"
        )
    return (
        "give --db the SQLite file or postgresql:// URL the graph keeps its checkpoints in (a "
        "served graph's: the ALGENTA_CHECKPOINTER it is served with)"
    )


def unreadable_store(db: str) -> str | None:
    """Why ``db`` is no checkpoint store to read, with :func:`store_hint`; ``None``: it may be.

    A PostgreSQL URL is tried when opened; a path must be a SQLite file with a checkpoints
    table (opened read-only: nothing is created or changed).
    """
    import sqlite3

    from algenta_graph.serving.checkpoint_reader import open_sqlite_read_only
    from algenta_graph.serving.checkpointer import is_postgres_url

    if is_postgres_url(db):
        return None
    path = Path(db)
    if not path.exists():
        reason = "no checkpoint file there"
    elif not path.is_file():
        reason = "a directory, not a checkpoint file"
    else:
        try:
            with open_sqlite_read_only(path) as conn:
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        except sqlite3.DatabaseError as exc:
            tables, reason = set(), f"not a readable SQLite database ({exc})"
        else:
            reason = "not a LangGraph SQLite checkpoint file (no checkpoints table)"
        if "checkpoints" in tables:
            return None
    return f"--db {db}: {reason}; {store_hint(db)}"


def _receipts_handler(args: argparse.Namespace) -> int:
    from algenta_graph.audit.export import export_jsonl
    from algenta_graph.audit.records import format_records, thread_records
    from algenta_graph.errors import RecordsFileError
    from algenta_graph.serving.checkpointer import is_postgres_url

    where = store_name(args.db)
    try:
        if args.verify:
            history = _read_store(args.db, args.thread, "history")
            return _verify(args, history, _read_store(args.db, args.thread, "writes"), where)
        latest = _read_store(args.db, args.thread, "latest")
        records, foreign = thread_records(latest, where)
    except FileNotFoundError:
        raise CommandError(unreadable_store(args.db) or f"--db {args.db}: not found") from None
    except RecordsFileError as exc:
        hint = "" if is_postgres_url(args.db) else f"; {store_hint(args.db)}"
        raise CommandError(f"--db {exc}{hint}") from None
    if args.thread is not None and args.thread not in records:
        raise CommandError(f"no thread {args.thread!r} in {where}")
    if args.jsonl:
        export_jsonl(records, sys.stdout)  # records with their chain links, then each head
    else:
        print(format_records(with_trace_ids(records)))
    if foreign:
        print(f"algenta-graph receipts: note: {_not_ours(foreign)}", file=sys.stderr)
    return 0


def with_trace_ids(records: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The records as the table shows them: each receipt's detail ends with its trace id.

    The W3C trace id the engine wrote into the receipt (from the call's ``traceparent``): the
    trace of the run that executed it (``docs/TRACING.md``). Display only: the records
    themselves, and ``--jsonl``, are unchanged.

    >>> shown = with_trace_ids({"t": {"receipts": [{"source": "model", "trace_id": "ab" * 16}]}})
    >>> shown["t"]["receipts"][0]["source"]
    'model trace=abababababababababababababababab'
    >>> with_trace_ids({"t": {"receipts": [{"source": "model"}]}})["t"]["receipts"][0]["source"]
    'model'
    """
    shown: dict[str, dict[str, Any]] = {}
    for tid, kinds in records.items():
        shown[tid] = dict(kinds)
        receipts = []
        for receipt in kinds.get("receipts", []):
            trace = receipt.get("trace_id")
            if isinstance(trace, str) and trace:
                receipt = {**receipt, "source": f"{receipt.get('source')} trace={trace}"}
            receipts.append(receipt)
        shown[tid]["receipts"] = receipts
    return shown


def _not_ours(foreign: Mapping[str, str]) -> str:
    names = ", ".join(repr(t) for t in list(foreign)[:5]) + (", ..." if len(foreign) > 5 else "")
    return f"{len(foreign)} thread(s) of another graph left out ({names})"


def _read_store(db: str, thread: str | None, what: str) -> Any:
    """Read from a SQLite file or a PostgreSQL URL, read-only (nothing is created in either).

    ``what``: ``"latest"`` (each thread's latest checkpoint), ``"history"`` (every checkpoint of
    each thread), both of the record lists only, or ``"writes"`` (what each step wrote to them,
    :mod:`algenta_graph.audit.step_writes`).
    """
    from algenta_graph.audit.step_writes import aread_step_writes, read_step_writes
    from algenta_graph.errors import CheckpointerError
    from algenta_graph.serving.checkpoint_reader import (
        aread_history,
        aread_latest,
        read_history,
        read_latest,
    )
    from algenta_graph.serving.checkpointer import is_postgres_url
    from algenta_graph.state import RECORD_FIELDS

    readers: dict[str, tuple[Any, Any, dict[str, Any]]] = {
        "latest": (read_latest, aread_latest, {"fields": RECORD_FIELDS}),
        "history": (read_history, aread_history, {"fields": RECORD_FIELDS}),
        "writes": (read_step_writes, aread_step_writes, {}),
    }
    reader, areader, options = readers[what]
    if not is_postgres_url(db):
        return reader(db, thread, **options)
    try:
        return asyncio.run(areader(db.strip(), thread, **options))
    except CheckpointerError as exc:
        raise CommandError(f"--db {store_name(db)}: {one_line(exc)}", EXIT_FAILED) from None
    except Exception as exc:
        lost = postgres_failure(exc)
        if lost is None:
            raise
        raise CommandError(
            f"--db {store_name(db)}: reading the PostgreSQL checkpoint store failed "
            f"({pg_reason(lost)})",
            EXIT_FAILED,
        ) from None


def _verify(args: argparse.Namespace, history: Any, writes: Any, where: str) -> int:
    """``receipts --verify``: every checkpoint of each thread's history; exit 1 naming a break.

    ``writes``: what each step wrote (:mod:`algenta_graph.audit.step_writes`).
    """
    from algenta_graph.audit.chain import ChainHead
    from algenta_graph.audit.export import read_heads
    from algenta_graph.audit.history import verify_threads
    from algenta_graph.audit.records import no_thread_of_ours, split_threads
    from algenta_graph.audit.reports import format_reports

    expected: dict[str, ChainHead] = {}
    if args.head is not None:
        try:
            expected = read_heads(args.head)
        except (OSError, ValueError) as exc:
            raise CommandError(f"--head {args.head}: {one_line(exc)}") from None
    ours, foreign = split_threads(history)
    if foreign and not ours:
        raise CommandError(f"--db {no_thread_of_ours(where, foreign)}")
    if args.thread is not None and args.thread not in history:
        raise CommandError(f"no thread {args.thread!r} in {where}")
    for tid, head in expected.items():
        if tid not in ours and (args.thread is None or tid == args.thread) and head.seq > 0:
            other = ""
            if tid in foreign:
                other = f" (a thread of another graph has its id: {foreign[tid]})"
            raise CommandError(
                f"thread {tid!r} of the exported heads is gone from {where}{other}", EXIT_FAILED
            )
    reports = verify_threads(
        {tid: history[tid] for tid in ours},
        where,
        expected=expected,
        thread=args.thread,
        writes=writes,
    )
    print(format_reports(reports))
    for tid, reason in foreign.items():
        print(f"{tid}: left out: not an algenta-graph thread ({reason})")
    return 0 if all(r.ok for r in reports.values()) else EXIT_FAILED


def add_receipts_parser(sub: Any) -> None:
    """``algenta-graph receipts``."""
    p = sub.add_parser(
        "receipts",
        help="list receipts, denials and operator decisions in a checkpoint store",
        description=(
            "Every receipt, denial and operator decision in a checkpoint store (a SQLite "
            "checkpoint file or a postgresql:// URL), from each thread's latest checkpoint; a "
            "receipt shows its trace id (trace=..., the W3C trace the engine adopted from the "
            "call's traceparent) when it has one. "
            "Threads of another graph sharing the store are left out (and named on stderr); a "
            "store with none of ours is an error. Read-only: the file is never written or "
            "created, and nothing is created in a database."
        ),
    )
    p.add_argument(
        "--db",
        default=DEFAULT_DB,
        type=db_arg,
        help=f"SQLite checkpoint file or postgresql:// URL (default: {DEFAULT_DB}, the one "
        "`run` writes)",
    )
    p.add_argument("--thread", default=None, help="only this thread (default: every thread)")
    p.add_argument(
        "--jsonl",
        action="store_true",
        help="export: one JSON object per record (with its chain links), then each thread's "
        "chain head (keep the heads elsewhere to detect a truncated tail later)",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="recompute every thread's hash chain (ALGENTA_AUDIT_KEY if set) in every "
        "checkpoint of its history, not only the latest, and compare each checkpoint with the "
        "one it follows: a record edited, deleted, reordered or injected, or gone or changed "
        "between two checkpoints, or one the step between them did not write (as the store "
        "keeps each step's writes), is named with the checkpoint it was found in; exit 1 on a "
        "break. Not checked: the pending writes of a step that has not finished (checked once "
        "its checkpoint is written) and subgraph checkpoints; a record deleted from every "
        "checkpoint that holds it shows as a gap in the chain, unless it was the chain's last "
        "record: then the writes of the step that wrote it show it while the store keeps "
        "them, and --head shows a truncated tail",
    )
    p.add_argument(
        "--head",
        default=None,
        metavar="EXPORT.jsonl",
        help="with --verify: an earlier --jsonl export whose chain heads must still be there",
    )
    p.set_defaults(handler=_receipts_handler)
