"""Chain reports shown: as text for ``algenta-graph receipts --verify``, or as JSON-ready data.

One line per thread (``ok`` with its head, or ``BROKEN`` with the first broken record and
why), the further problems of a broken thread under it (a bounded number), and a summary
line. This module verifies nothing (:mod:`algenta_graph.audit.verification`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from algenta_graph.audit.verification import ChainReport

__all__ = ["SHOWN_PROBLEMS", "format_reports", "report_dict"]


SHOWN_PROBLEMS = 20
"""How many problems of one thread :func:`format_reports` lists (the rest are counted)."""


def format_reports(reports: Mapping[str, ChainReport]) -> str:
    """The reports as text, for ``algenta-graph receipts --verify``.

    One line per thread (``ok`` or ``BROKEN`` with the first broken record and why), each
    further problem of a broken thread indented under it (up to :data:`SHOWN_PROBLEMS`), then
    a summary line.

    >>> from algenta_graph.audit.verification import verify_chain
    >>> print(format_reports({"t1": verify_chain({})}))
    t1: ok: 0 record(s), head seq 0 0000000000000000
    1 thread(s), 0 record(s): all chains intact
    """
    lines: list[str] = []
    for tid, report in reports.items():
        lines.append(f"{tid}: {report}")
        more = report.problems[1:]
        lines += [f"  also: {problem}" for problem in more[: SHOWN_PROBLEMS - 1]]
        if len(more) > SHOWN_PROBLEMS - 1:
            lines.append(f"  ... and {len(more) - SHOWN_PROBLEMS + 1} more problem(s)")
    broken = [tid for tid, report in reports.items() if not report.ok]
    count = sum(report.count for report in reports.values())
    lines.append(
        f"{len(reports)} thread(s), {count} record(s): "
        + (f"{len(broken)} BROKEN chain(s): {', '.join(broken)}" if broken else "all chains intact")
    )
    return "\n".join(lines)


def report_dict(report: ChainReport) -> dict[str, Any]:
    """A report as JSON-ready data (for ``--verify --jsonl`` output)."""
    return asdict(report)
