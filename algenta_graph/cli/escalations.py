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
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
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
from algenta_graph.errors import CommandError

if TYPE_CHECKING:
    from algenta_graph.ledger import Ledger, LedgerSpec

__all__ = ["Waiting", "add_escalations_parser", "expire_overdue", "list_waiting"]

EXPIRY_OPERATOR = "algenta-graph escalations --expire"
"""Who the record of an expiry names by default."""


@dataclass(frozen=True)
class Waiting:
    """One gate's escalations that wait for an operator on one thread."""

    thread_id: str
    gate: str
    decision_ids: list[str | None]
    """The engine decision of each escalation (``None`` for a call a graph-side gate held)."""
    calls: list[str | None]
    """The held call of each escalation, ``server.tool`` (``None`` for an engine decision)."""
    escalation_ids: list[str]
    asked_at: str | None
    expires_at: str | None
    digest: str | None
    interrupt_id: str | None
    state: str
    """``waiting``, ``overdue`` (past its deadline), ``expired`` (its expiry is recorded) or
    ``answered`` (an answer is taken, recorded when the thread next runs)."""

    def age(self, now: datetime) -> str:
        """How long it has waited, ``1h02m03s``."""
        from algenta_graph.governance.escalations import parse_time

        if not self.asked_at:
            return "?"
        seconds = max(0, int((now - parse_time(self.asked_at)).total_seconds()))
        hours, rest = divmod(seconds, 3600)
        minutes, seconds = divmod(rest, 60)
        return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"


def _interrupt_items(pending_writes: Sequence[Any]) -> dict[str, Mapping[str, Any]]:
    """The escalation items of a checkpoint's pending interrupts, by escalation id."""
    found: dict[str, Mapping[str, Any]] = {}
    for write in pending_writes or ():
        if len(write) < 3 or write[1] != "__interrupt__":
            continue
        values = write[2] if isinstance(write[2], list | tuple) else [write[2]]
        for interrupt in values:
            value = getattr(interrupt, "value", interrupt)
            if not isinstance(value, Mapping):
                continue
            for item in value.get("escalations") or ():
                if isinstance(item, Mapping) and item.get("escalation_id"):
                    found[str(item["escalation_id"])] = {
                        **item,
                        "interrupt_id": getattr(interrupt, "id", item.get("interrupt_id")),
                    }
    return found


async def list_waiting(
    saver: Any, ledger: Ledger, now: datetime, thread: str | None = None
) -> list[Waiting]:
    """Every gate's escalations that wait for an operator, per thread, oldest first.

    Each one's state reads its claim in ``ledger`` (nothing is written there).
    """
    from algenta_graph.governance.escalations import is_overdue
    from algenta_graph.governance.gates import GATE_NAMES
    from algenta_graph.ledger import ClaimAnswer, escalation_key
    from algenta_graph.nodes.questions import open_denials
    from algenta_graph.records import escalation_id_of
    from algenta_graph.serving.checkpoint_reader import aread_latest

    out: list[Waiting] = []
    for tid, cp in (await aread_latest(saver, thread)).items():
        if "denials" not in cp.values:
            continue  # not a thread of ours
        tup = await saver.aget_tuple({"configurable": {"thread_id": tid, "checkpoint_ns": ""}})
        items = _interrupt_items(tup.pending_writes if tup is not None else ())
        for gate in GATE_NAMES:
            group = [d for d in open_denials(cp.values, gate) if d.get("policy") == "escalate"]
            if not group:
                continue
            ids = [escalation_id_of(d) for d in group]
            shown = [items.get(i, {}) for i in ids]
            deadlines = sorted(str(s["expires_at"]) for s in shown if s.get("expires_at"))
            expires_at = deadlines[0] if deadlines else None
            claim = await ledger.peek(escalation_key(ids), ClaimAnswer)
            if claim is not None:
                verdicts = {d.verdict for d in claim.value.decisions}
                state = "expired" if verdicts == {"expired"} else "answered"
            else:
                state = "overdue" if is_overdue(expires_at, now) else "waiting"
            out.append(
                Waiting(
                    thread_id=tid,
                    gate=gate,
                    decision_ids=[d.get("decision_id") for d in group],
                    calls=[f"{d['server']}.{d['tool']}" if d.get("tool") else None for d in group],
                    escalation_ids=ids,
                    asked_at=min(
                        (str(d["raised_at"]) for d in group if d.get("raised_at")), default=None
                    ),
                    expires_at=expires_at,
                    digest=shown[0].get("digest") if len(shown) == 1 else None,
                    interrupt_id=shown[0].get("interrupt_id"),
                    state=state,
                )
            )
    return sorted(out, key=lambda w: (w.asked_at or "", w.thread_id, w.gate))


async def expire_overdue(
    saver: Any,
    ledger: Ledger,
    now: datetime,
    *,
    operator: str = EXPIRY_OPERATOR,
    thread: str | None = None,
) -> list[Waiting]:
    """Record the expiry of every escalation past its deadline; the ones expired now.

    Each is claimed in ``ledger`` as a decline with the verdict ``expired`` (its one answer: an
    answer given later meets the claim and executes nothing); one already answered is left alone.
    """
    from algenta_graph.ledger import (
        AnswerDecision,
        ClaimAnswer,
        escalation_key,
        new_entry,
        release,
    )

    expired: list[Waiting] = []
    for waiting in await list_waiting(saver, ledger, now, thread):
        if waiting.state != "overdue":
            continue
        decision = AnswerDecision(
            action="decline",
            type="reject",
            verdict="expired",
            reason=f"the escalation expired at {waiting.expires_at}; expired by {operator}",
            digest=waiting.digest,
            interrupt_id=waiting.interrupt_id,
            asked_at=waiting.asked_at,
            expires_at=waiting.expires_at,
        )
        answer = ClaimAnswer(
            operator=operator,
            roles=["system"],
            decided_at=now.isoformat(),
            decisions=[decision for _ in waiting.escalation_ids],
            thread_id=waiting.thread_id,
        )
        mine = new_entry(escalation_key(waiting.escalation_ids), answer)
        try:
            current = await ledger.insert(mine)
            if current.token == mine.token:
                await ledger.finish(mine)  # nothing to execute: the answer is complete
                expired.append(waiting)
        finally:
            release(mine)
    return expired


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
