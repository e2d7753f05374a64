"""``algenta-graph escalations``: what waits for an operator in a checkpoint store, and expiry.

``algenta-graph escalations --db runs.sqlite`` lists every escalation that waits for an operator
(thread, gate, the engine decision or the held call, escalation, age, deadline) in a SQLite file or
a ``postgresql://`` store, from each thread's latest checkpoint and its pending interrupt (no
engine, no graph needed). ``--expire`` records the expiry of every one past its deadline
(``expires_after``): it takes the escalation's one answer (its claim in the ledger every process
serving the graph shares, :mod:`algenta_graph.ledger`) as a decline with the verdict ``expired``, so
no answer given later can execute it; the thread's record of it is written into its hash chain by
the graph, the next time the thread runs (any resume or new message), without asking anyone. Run it
from cron next to the server::

    */5 * * * *  algenta-graph escalations --db postgresql://... --expire

The ledger is chosen as the graph chooses it (:func:`~algenta_graph.ledger.choose_ledger`):
``--ledger``, else the configuration's (``ALGENTA_LEDGER``), else the store's own database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from algenta_graph.cli.common import (
    DEFAULT_DB,
    EXIT_FAILED,
    db_arg,
    one_line,
    store_failure,
    store_name,
)
from algenta_graph.deadlines import Waiting, expire_overdue, list_waiting
from algenta_graph.errors import CommandError

if TYPE_CHECKING:
    from algenta_graph.ledger import LedgerSpec

__all__ = ["Waiting", "add_escalations_parser", "expire_overdue", "list_waiting"]

EXPIRY_OPERATOR = "algenta-graph escalations --expire"
"""Who the record of an expiry names by default."""


def _row(w: Waiting, now: datetime) -> tuple[str, ...]:
    # what each escalation is about: the engine's decision, or the call a graph-side gate held
    decisions = ",".join(
        str(decision or call) for decision, call in zip(w.decision_ids, w.calls, strict=True)
    )
    return (
        w.thread_id,
        w.gate,
        decisions,
        ",".join(w.escalation_ids),
        w.age(now),
        w.expires_at or "-",
        w.state,
    )


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    header = ("thread", "gate", "decision or call", "escalation", "age", "deadline", "state")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def _now_arg(text: str) -> datetime:
    from algenta_graph.governance.escalations import parse_time

    try:
        return parse_time(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from None


def _ledger_spec(args: argparse.Namespace) -> LedgerSpec:
    """The ledger, chosen as the graph chooses it: ``--ledger``, the configuration's, the store."""
    from algenta_graph.config import load_config
    from algenta_graph.config.resolving import ledger_spec
    from algenta_graph.ledger import choose_ledger

    configured = args.ledger or ledger_spec(load_config())
    return choose_ledger(configured, implied=args.db.strip(), deployment=f"--db {args.db}")


async def _run(args: argparse.Namespace) -> int:
    from algenta_graph.cli.receipts import unreadable_store
    from algenta_graph.ledger import open_ledger
    from algenta_graph.serving.checkpointer import open_checkpointer

    now: datetime = args.now or datetime.now(timezone.utc)
    unreadable = unreadable_store(args.db)
    if unreadable is not None:
        raise CommandError(unreadable)
    async with (
        open_checkpointer(args.db.strip(), setup=False) as saver,
        open_ledger(_ledger_spec(args)) as ledger,
    ):
        expired: list[Waiting] = []
        if args.expire:
            expired = await expire_overdue(
                saver, ledger, now, operator=args.operator, thread=args.thread
            )
        waiting = await list_waiting(saver, ledger, now, args.thread)
    if args.gate:
        waiting = [w for w in waiting if w.gate == args.gate]
    if args.json:
        for w in waiting:
            print(json.dumps({**asdict(w), "age": w.age(now)}, sort_keys=True))
    elif waiting:
        print(_table([_row(w, now) for w in waiting]))
    else:
        print("(nothing waits for an operator)")
    if args.expire:
        note = (
            f"{len(expired)} escalation(s) expired now; recorded in each thread when it next runs"
            if expired
            else "no escalation was past its deadline"
        )
        print(f"algenta-graph escalations: {note}", file=sys.stderr)
    return 0


def _handler(args: argparse.Namespace) -> int:
    from algenta_graph.errors import CheckpointerError, ConfigError, LedgerError

    try:
        return asyncio.run(_run(args))
    except CheckpointerError as exc:
        raise CommandError(f"--db {store_name(args.db)}: {one_line(exc)}", EXIT_FAILED) from None
    except (LedgerError, ConfigError) as exc:
        raise CommandError(f"the ledger: {one_line(exc)}", EXIT_FAILED) from None
    except CommandError:
        raise
    except Exception as exc:
        failure = store_failure(args.db, exc)
        if failure is None:
            raise
        raise failure from None


def add_escalations_parser(sub: Any) -> None:
    """``algenta-graph escalations``."""
    from algenta_graph.governance.gates import GATE_NAMES

    p = sub.add_parser(
        "escalations",
        help="list what waits for an operator in a checkpoint store; --expire the overdue",
        description=(
            "Every escalation that waits for an operator in a checkpoint store (a SQLite file "
            "or a postgresql:// URL): thread, gate, the engine decision or the held call, "
            "escalation, age and deadline. "
            "--expire records the expiry of every one past its deadline (usable from cron): no "
            "answer given later executes it, and the graph records it in the thread's chain "
            "when the thread next runs."
        ),
    )
    p.add_argument(
        "--db",
        default=DEFAULT_DB,
        type=db_arg,
        help=f"SQLite checkpoint file or postgresql:// URL (default: {DEFAULT_DB})",
    )
    p.add_argument(
        "--ledger",
        default=None,
        type=db_arg,
        help=(
            "the ledger the graph's processes share (a SQLite file or postgresql:// URL; default "
            "ALGENTA_LEDGER, else the --db store's own database)"
        ),
    )
    p.add_argument("--thread", default=None, help="only this thread (default: every thread)")
    p.add_argument("--gate", default=None, choices=GATE_NAMES, help="only this gate's")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument(
        "--expire",
        action="store_true",
        help="record the expiry of every escalation past its deadline",
    )
    p.add_argument(
        "--operator",
        default=EXPIRY_OPERATOR,
        help=f"who the expiry record names (default: {EXPIRY_OPERATOR!r})",
    )
    p.add_argument(
        "--now",
        type=_now_arg,
        default=None,
        help="judge deadlines at this ISO 8601 time instead of the clock's",
    )
    p.set_defaults(handler=_handler)
