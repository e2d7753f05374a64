"""The ``algenta-graph`` command.

Subcommands:

- ``demo``: the main job, offline: reference engine, webhook receiver, the governed graph.
- ``run PROMPT``: one turn against a real engine, asking the operator on an escalation.
- ``receipts --db PATH``: every receipt, denial and operator decision in a checkpoint file.
- ``engine``: serve the local reference engine over MCP streamable HTTP.

Each subcommand lives in its own module; this file only parses and dispatches.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    from algenta_graph.engine.cli import add_engine_parser
    from algenta_graph.runner import add_demo_parser, add_receipts_parser, add_run_parser

    parser = argparse.ArgumentParser(
        prog="algenta-graph",
        description="A governed LangGraph agent on an Algenta engine.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_demo_parser(sub)
    add_run_parser(sub)
    add_receipts_parser(sub)
    add_engine_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``algenta-graph`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = args.handler
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
