"""The JSONL export of a thread's records, with its chain head, and verifying one.

:func:`export_jsonl` writes every record with its links, then each thread's head; a head kept
elsewhere (:func:`read_heads`) exposes a truncated tail when an export is verified against it
(:func:`verify_jsonl`). This is what ``algenta-graph receipts --jsonl`` prints.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import IO, Any

from algenta_graph.audit.chain import ChainHead, chain_head, record_items, sort_seq
from algenta_graph.audit.verification import Broken, ChainReport, verify_threads_values
from algenta_graph.state import RECORD_FIELDS

__all__ = ["export_jsonl", "read_heads", "read_jsonl", "verify_jsonl"]


def export_jsonl(
    threads: Mapping[str, Mapping[str, Any]],
    out: IO[str],
) -> dict[str, ChainHead]:
    """Write every thread's records, in ``seq`` order, then its chain head, one JSON per line.

    ``threads``: ``{thread_id: values}``. Lines::

        {"type": "record", "thread_id": ..., "field": "receipts", "record": {..., "hash": ...}}
        {"type": "head", "thread_id": ..., "seq": N, "hash": "...", "count": N}

    Returns the heads written (the last *record's* ``seq``/``hash``, as stored; verify first
    if the export should only contain intact chains). Keep a copy of the head lines elsewhere:
    :func:`verify_jsonl` against them detects a truncated tail.
    """
    heads: dict[str, ChainHead] = {}
    for tid, values in threads.items():
        rows = sorted(
            record_items(values),
            key=lambda r: (sort_seq(r[2]), RECORD_FIELDS.index(r[0]), r[1]),
        )
        for name, _, record in rows:
            line: dict[str, Any] = {
                "type": "record",
                "thread_id": tid,
                "field": name,
                "record": dict(record) if isinstance(record, Mapping) else record,
            }
            # ASCII only: a raw U+2028 in a record would split the line for some readers
            out.write(json.dumps(line, sort_keys=True) + "\n")
        head = chain_head(values)
        heads[tid] = head
        line = {
            "type": "head",
            "thread_id": tid,
            "seq": head.seq,
            "hash": head.hash,
            "count": len(rows),
        }
        out.write(json.dumps(line, sort_keys=True) + "\n")
    return heads


def read_jsonl(
    lines: Iterable[str],
) -> tuple[dict[str, dict[str, list[dict[str, Any]]]], dict[str, ChainHead]]:
    """An export's records per thread (as state values) and its head lines."""
    threads: dict[str, dict[str, list[dict[str, Any]]]] = {}
    heads: dict[str, ChainHead] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            tid = str(row["thread_id"])
            if row["type"] == "record":
                if row["field"] not in RECORD_FIELDS:
                    raise ValueError(f"unknown field {row['field']!r}")
                values = threads.setdefault(tid, {f: [] for f in RECORD_FIELDS})
                values[row["field"]].append(row["record"])
            elif row["type"] == "head":
                heads[tid] = ChainHead(int(row["seq"]), str(row["hash"]))
                threads.setdefault(tid, {f: [] for f in RECORD_FIELDS})
            else:
                raise ValueError(f"unknown type {row['type']!r}")
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"line {number}: not an algenta-graph audit export: {exc}") from None
    return threads, heads


def read_heads(path_or_lines: str | os.PathLike[str] | Iterable[str]) -> dict[str, ChainHead]:
    """The head lines of an export (a file path, or its lines)."""
    if isinstance(path_or_lines, str | os.PathLike):
        with open(path_or_lines, encoding="utf-8") as f:
            return read_jsonl(f)[1]
    return read_jsonl(path_or_lines)[1]


def verify_jsonl(
    path_or_lines: str | os.PathLike[str] | Iterable[str],
    *,
    key: str | bytes | None = None,
    expected: Mapping[str, ChainHead] | None = None,
) -> dict[str, ChainReport]:
    """Verify an export offline: every link, the export's own head lines, and ``expected``.

    Args:
        path_or_lines: the export (a file path, or its lines).
        key: the audit key (default ``ALGENTA_AUDIT_KEY``).
        expected: heads exported before (:func:`read_heads`), which exposes a truncated tail.

    Returns:
        One report per thread id.
    """
    if isinstance(path_or_lines, str | os.PathLike):
        with open(path_or_lines, encoding="utf-8") as f:
            threads, heads = read_jsonl(f)
    else:
        threads, heads = read_jsonl(path_or_lines)
    reports = verify_threads_values(threads, key, expected, None)
    for tid, report in list(reports.items()):
        own = heads.get(tid)
        problem: Broken | None = None
        if own is None and report.count:
            problem = Broken(None, None, None, "the export has no head line for this thread")
        elif own is not None and own != report.head:
            problem = Broken(
                None,
                None,
                own.seq,
                f"the export's head line (seq {own.seq}) is not its last intact link "
                f"(seq {report.head.seq})",
            )
        if problem is not None:
            problems = (*report.problems, problem)
            reports[tid] = ChainReport(False, report.count, report.head, problems[0], problems)
    return reports
