"""The ``algenta-graph`` command.

Subcommands:

- ``demo``: the main job, offline: reference engine, webhook receiver, the governed graph.
- ``run [PROMPT]``: one turn against a real engine, asking the operator on an escalation; or,
  without a prompt, resume a thread (a pending escalation, a killed run's unfinished step).
- ``receipts``: every receipt, denial and operator decision in a checkpoint file.
- ``escalations``: what waits for an operator in a checkpoint store; ``--expire`` the overdue.
- ``engine``: serve the local reference engine over MCP streamable HTTP.
- ``init [DIR]``: the files that serve the agent (``langgraph.json``, ``agent.toml``, ``.env``,
  a tokens file); ``tokens add | list | revoke``: that tokens file.

The subcommands live in :mod:`algenta_graph.cli.common` and :mod:`algenta_graph.engine.cli`;
this file parses and dispatches, and turns every error into one line on stderr and an exit
code (2 a bad input, 1 a failure, 3 an escalation left pending, 130 Ctrl-C): never a traceback.
Set ``ALGENTA_GRAPH_DEBUG=1`` to see the traceback of an unexpected error (and psycopg's own
log lines, which are otherwise kept off stderr: a lost PostgreSQL store is reported in one line).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

PROG = "algenta-graph"


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def version() -> str:
    """The installed distribution's version (the package's own when not installed)."""
    from importlib import metadata

    try:
        return metadata.version(PROG)
    except metadata.PackageNotFoundError:
        from algenta_graph import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    """The ``algenta-graph`` parser, with every subcommand (``--db`` URLs checked first)."""
    from algenta_graph.cli.config import add_config_parser
    from algenta_graph.cli.demo import add_demo_parser
    from algenta_graph.cli.escalations import add_escalations_parser
    from algenta_graph.cli.receipts import add_receipts_parser
    from algenta_graph.cli.run import add_run_parser
    from algenta_graph.cli.scaffold import add_init_parser
    from algenta_graph.cli.tokens import add_tokens_parser
    from algenta_graph.engine.cli import add_engine_parser

    parser = _Parser(prog=PROG, description="A governed LangGraph agent on an Algenta engine.")
    parser.add_argument("--version", action="version", version=f"{PROG} {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_demo_parser(sub)
    add_run_parser(sub)
    add_receipts_parser(sub)
    add_escalations_parser(sub)
    add_config_parser(sub)
    add_engine_parser(sub)
    add_init_parser(sub)
    add_tokens_parser(sub)
    for subparser in sub.choices.values():
        _check_db_urls(subparser)
    return parser


def _check_db_urls(parser: argparse.ArgumentParser) -> None:
    """Make every subcommand's ``--db`` refuse a malformed ``postgresql://`` URL first.

    It is a usage error (exit 2, naming ``--db``), before the option's own type (a path, for
    the engine) sees the value.
    """
    from algenta_graph.cli.common import db_arg

    for action in parser._actions:  # argparse keeps no public list of a parser's options
        if "--db" in action.option_strings and action.type is not db_arg:
            action.type = _url_checked(action.type)


def _url_checked(inner: Any) -> Callable[[str], Any]:
    from algenta_graph.cli.common import db_arg

    def checked(text: str) -> Any:
        db_arg(text)
        return inner(text) if callable(inner) else text

    return functools.wraps(inner)(checked) if callable(inner) else checked


def _quiet_store_logs() -> None:
    """Keep psycopg's log lines off stderr; the error that ends the command says it in one line.

    Its pool logs a warning per reconnection attempt while a PostgreSQL server is down.
    """
    if os.environ.get("ALGENTA_GRAPH_DEBUG"):
        return
    log = logging.getLogger("psycopg")  # psycopg_pool logs as "psycopg.pool"
    log.addHandler(logging.NullHandler())
    log.propagate = False


def _fail(command: str | None, message: str, code: int) -> int:
    where = f"{PROG} {command}" if command else PROG
    print(f"{where}: error: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``algenta-graph`` console script."""
    from algenta_graph.cli.common import one_line
    from algenta_graph.errors import CommandError

    parser = build_parser()
    args = parser.parse_args(argv)
    command = getattr(args, "command", None)
    _quiet_store_logs()
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except CommandError as exc:
        return _fail(command, str(exc), exc.code)
    except Exception as exc:
        if os.environ.get("ALGENTA_GRAPH_DEBUG"):
            raise
        return _fail(command, f"{type(exc).__name__}: {one_line(exc)}", 1)
