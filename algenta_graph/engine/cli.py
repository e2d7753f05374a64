"""``algenta-graph engine``: serve the reference engine in the foreground.

    algenta-graph engine --port 8000 --db engine.sqlite --api-key secret \\
        --allow-webhook-host hooks.internal --denials sdk

Prints one ``serving <url>`` line once it listens, then one log line per tool call; stops
cleanly on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn

from algenta_graph.engine.policy import Policy
from algenta_graph.engine.server import DENIAL_FORMS, create_app
from algenta_graph.engine.store import Store

ENV_API_KEY = "ALGENTA_ENGINE_API_KEY"


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def add_engine_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``engine`` subcommand to an ``argparse`` subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "engine",
        help="serve the local reference engine (MCP streamable HTTP at /mcp)",
        description="Serve the local Algenta reference engine over MCP streamable HTTP at /mcp.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    parser.add_argument(
        "--db", type=Path, default=Path("algenta-engine.sqlite"), help="SQLite file (state)"
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get(ENV_API_KEY),
        help=f"require 'Authorization: Bearer KEY' on tools/call (default: ${ENV_API_KEY})",
    )
    parser.add_argument(
        "--min-confidence",
        type=_fraction,
        default=0.6,
        help="confidence gate: block decisions below this (default 0.6)",
    )
    parser.add_argument(
        "--risk-floor",
        type=_non_negative,
        default=0.5,
        help="risk_floor gate: block decisions with risk_p5 below -FLOOR (default 0.5)",
    )
    parser.add_argument(
        "--allow-webhook-host",
        action="append",
        default=[],
        metavar="HOST",
        help="also deliver webhooks to HOST (loopback is always allowed); repeatable",
    )
    parser.add_argument(
        "--denials",
        choices=DENIAL_FORMS,
        default="mcp-error",
        help="wire form of denials and errors (default mcp-error)",
    )
    parser.set_defaults(handler=run_engine)
    return parser


def run_engine(args: argparse.Namespace) -> int:
    """Serve until interrupted; return the exit code."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    engine_logger = logging.getLogger("algenta_graph.engine")
    engine_logger.addHandler(handler)
    engine_logger.setLevel(logging.INFO)
    engine_logger.propagate = False

    app = create_app(
        store=Store(args.db),
        policy=Policy(min_confidence=args.min_confidence, risk_floor=args.risk_floor),
        host=args.host,
        api_key=args.api_key or None,
        allow_webhook_hosts=tuple(args.allow_webhook_host),
        denials=args.denials,
    )
    url = f"http://{args.host}:{args.port}/mcp"
    engine_logger.info(
        "serving %s (db %s, policy min_confidence=%g risk_floor=%g, denials %s, auth %s)",
        url,
        args.db,
        args.min_confidence,
        args.risk_floor,
        args.denials,
        "bearer" if args.api_key else "off",
    )
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    # uvicorn shuts down gracefully on SIGTERM and then re-raises the signal to the handler that
    # was installed before it: make that a no-op, so a terminated engine exits 0 (a clean stop).
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    engine_logger.info("stopped")
    return 0 if server.started else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run only the ``engine`` subcommand (``python -m algenta_graph.engine.cli``)."""
    parser = argparse.ArgumentParser(prog="algenta-graph")
    sub = parser.add_subparsers(dest="command", required=True)
    add_engine_parser(sub)
    args = parser.parse_args(["engine", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
