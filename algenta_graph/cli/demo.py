"""``algenta-graph demo``: the offline walkthrough (:mod:`algenta_graph.demo`) as a subcommand."""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
from typing import Any

from algenta_graph.cli.common import (
    EXIT_FAILED,
    db_arg,
    db_error,
    model_arg,
    one_line,
    prepare_db,
    store_failure,
)
from algenta_graph.errors import CommandError

__all__ = ["add_demo_parser"]


def _demo_handler(args: argparse.Namespace) -> int:
    from algenta_graph.demo import run_demo
    from algenta_graph.errors import AlgentaGraphError

    model = model_arg(args.model)
    db = prepare_db(args.db) if args.db is not None else None
    if args.webhook_log is not None:
        prepare_db(args.webhook_log, "--webhook-log")
    try:
        return asyncio.run(
            run_demo(model=model, db=db, keep=args.keep, webhook_log=args.webhook_log)
        )
    except sqlite3.DatabaseError as exc:
        raise db_error(str(db), exc) from None
    except CommandError:
        raise  # already one line with its own exit code
    except AlgentaGraphError as exc:
        raise CommandError(one_line(exc), EXIT_FAILED) from None
    except Exception as exc:
        failure = store_failure(None if db is None else str(db), exc)
        if failure is None:
            raise
        raise failure from None


def add_demo_parser(sub: Any) -> None:
    """``algenta-graph demo``."""
    p = sub.add_parser(
        "demo",
        help="offline walkthrough: reference engine, webhook receiver, the governed graph",
        description=(
            "Start a reference engine and a webhook receiver in-process and walk through "
            "observe, plan, log, execute, a repeated execution, a low-confidence decision "
            "(escalation, operator override) and a risky one (declined). Offline, no API key."
        ),
    )
    p.add_argument(
        "--model", default=None, help="init_chat_model string (default: the offline demo model)"
    )
    p.add_argument(
        "--db",
        default=None,
        type=db_arg,
        help="checkpoint file, its directory created if missing (default: a temporary file)",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary checkpoint file")
    p.add_argument(
        "--webhook-log", default=None, help="append every webhook POST to this JSONL file"
    )
    p.set_defaults(handler=_demo_handler)
