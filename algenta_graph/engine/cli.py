r"""``algenta-graph engine``: serve the reference engine in the foreground.

    algenta-graph engine --port 8000 --db engine.sqlite --api-key secret \
        --allow-webhook-host hooks.internal --denials sdk

Prints one ``serving <url>`` line once it listens, then one log line per tool call; stops
cleanly on Ctrl-C or SIGTERM. A bad option, a busy port, an unusable ``--db`` or keys file, or a
database another engine serves: one ``algenta-graph engine: error: ...`` line and a non-zero
exit (2 for a bad option value, 1 otherwise), before anything is served.
"""

from __future__ import annotations

import argparse
import errno
import logging
import math
import os
import signal
import socket
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn

import algenta_graph
from algenta_graph.engine.arguments import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_TIMEOUT_SECONDS,
    MIN_TIMEOUT_SECONDS,
)
from algenta_graph.engine.auth import KeyFileError, KeyRing
from algenta_graph.engine.contract import DEFAULT_RELAXED
from algenta_graph.engine.dblock import DatabaseInUse, DatabaseLock
from algenta_graph.engine.mcp_server import DENIAL_FORMS
from algenta_graph.engine.policy import Policy
from algenta_graph.engine.server import create_app
from algenta_graph.engine.store import Store

ENV_API_KEY = "ALGENTA_ENGINE_API_KEY"
DEFAULT_DB = "algenta-engine.sqlite"
DEFAULT_PORT = 8000


class EngineStartError(Exception):
    """The engine cannot start: one line saying what to change."""


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value + 0.0  # -0.0 -> 0.0


def _fraction(text: str) -> float:
    value = _number(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def _non_negative(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 1 and 65535, got {text}")
    return value


def add_engine_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``engine`` subcommand to an ``argparse`` subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "engine",
        help="serve the local reference engine (MCP at /mcp, the Algenta HTTP API at /v1)",
        description=(
            "Serve the local Algenta reference engine: MCP streamable HTTP at /mcp, and the"
            " Algenta HTTP API at /v1 (decision cases, analysis runs, action plans, the"
            " operator's approval at /v1/decision-plans/{plan_id}/approve, execution, replay,"
            " the audit export). One engine per database file: a second engine on the same"
            " --db is refused."
        ),
        epilog=(
            "Mode: relaxed keeps only the three gates (idempotency, confidence, risk_floor) on"
            " execute_decision; strict also requires a key with the agent role and execute"
            " enabled, a decision planned (plan_decision) and logged with its plan_hash, that"
            " plan approved by an operator over HTTP, and idempotency_key and nonce on the call"
            " (algenta_graph/engine/README.md). execute_decision's timeout_seconds must be"
            f" between {MIN_TIMEOUT_SECONDS:g} and {MAX_TIMEOUT_SECONDS:g} (default"
            f" {DEFAULT_TIMEOUT_SECONDS:g}); a delivery without an answer counts as executed."
        ),
    )
    parser.add_argument(
        "--version", action="version", version=f"algenta-graph engine {algenta_graph.__version__}"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)"
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"TCP port, 1-65535 (default {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--db",
        type=Path,
        default=Path(DEFAULT_DB),
        help=f"SQLite file of the engine's state, created (with its directory) if missing"
        f" (default {DEFAULT_DB} in the working directory); its lock file is <db>.lock",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help=f"require 'Authorization: Bearer KEY' (or 'X-API-Key: KEY') on every request; this"
        f" key has the agent and operator roles and execute enabled (default: ${ENV_API_KEY} if"
        f" set, else none)",
    )
    parser.add_argument(
        "--keys-file",
        type=Path,
        default=None,
        help='JSON {"<sha256 of token>": {"identity": ..., "roles": ["agent"|"operator"],'
        ' "execute": true|false}}; every MCP request then needs one of these tokens'
        " (default: none)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--relaxed",
        dest="relaxed",
        action="store_true",
        default=DEFAULT_RELAXED,
        help="only the three gates on execute_decision"
        + (" (the default)" if DEFAULT_RELAXED else " (default: --strict)"),
    )
    mode.add_argument(
        "--strict",
        dest="relaxed",
        action="store_false",
        help="enforce the execute profile's requirements, see below"
        + (" (default: --relaxed)" if DEFAULT_RELAXED else " (the default)"),
    )
    parser.add_argument(
        "--min-confidence",
        type=_fraction,
        default=0.6,
        help="confidence gate: block decisions below this, 0 to 1 (default 0.6)",
    )
    parser.add_argument(
        "--risk-floor",
        type=_non_negative,
        default=0.5,
        help="risk_floor gate: block decisions with risk_p5 below -FLOOR, finite and >= 0"
        " (default 0.5)",
    )
    parser.add_argument(
        "--allow-webhook-host",
        action="append",
        default=[],
        metavar="HOST",
        help="also deliver webhooks to HOST (loopback is always allowed); repeatable"
        " (default: loopback only)",
    )
    parser.add_argument(
        "--denials",
        choices=DENIAL_FORMS,
        default="mcp-error",
        help="wire form of denials and errors (default mcp-error)",
    )
    parser.set_defaults(handler=run_engine)
    return parser


def _bind(host: str, port: int) -> socket.socket:
    """Bind the listening socket before serving, so a busy port is one clear error."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise EngineStartError(f"cannot use --host {host!r}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise EngineStartError(
                f"port {port} on {host} is already in use; stop what holds it or pick"
                " another --port"
            ) from None
        raise EngineStartError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def _prepare(args: argparse.Namespace) -> tuple[Store, DatabaseLock, KeyRing | None]:
    """Open the database (holding its lock) and read the keys; EngineStartError if not."""
    keys = None
    if args.keys_file is not None:
        try:
            keys = KeyRing.from_file(args.keys_file)
        except KeyFileError as exc:
            raise EngineStartError(str(exc)) from None
    db: Path = args.db
    if db.exists() and db.is_dir():
        raise EngineStartError(f"--db {db} is a directory; give a file path")
    lock = DatabaseLock(db)
    try:
        lock.acquire()
    except DatabaseInUse as exc:
        raise EngineStartError(str(exc)) from None
    except OSError as exc:
        raise EngineStartError(f"cannot use --db {db}: {exc.strerror or exc}") from None
    try:
        store = Store(db)
    except (OSError, sqlite3.Error) as exc:
        lock.release()
        raise EngineStartError(
            f"cannot use --db {db}: {exc} (is it an engine SQLite file? its directory writable?)"
        ) from None
    return store, lock, keys


def run_engine(args: argparse.Namespace) -> int:
    """Serve until interrupted; return the exit code (1 with one line when it cannot start)."""
    try:
        return _serve(args)
    except EngineStartError as exc:
        print(f"algenta-graph engine: error: {exc}", file=sys.stderr)
        return 1


def _serve(args: argparse.Namespace) -> int:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    engine_logger = logging.getLogger("algenta_graph.engine")
    engine_logger.addHandler(handler)
    engine_logger.setLevel(logging.INFO)
    engine_logger.propagate = False

    api_key = args.api_key or os.environ.get(ENV_API_KEY) or None
    sock = _bind(args.host, args.port)
    try:
        store, lock, keys = _prepare(args)
    except BaseException:
        sock.close()
        raise
    try:
        app = create_app(
            store=store,
            policy=Policy(min_confidence=args.min_confidence, risk_floor=args.risk_floor),
            host=args.host,
            api_key=api_key,
            allow_webhook_hosts=tuple(args.allow_webhook_host),
            denials=args.denials,
            keys=keys,
            relaxed=args.relaxed,
        )
        url = f"http://{args.host}:{args.port}/mcp"
        auth = "off"
        if keys or api_key:
            auth = f"bearer, {len(keys or ()) + (1 if api_key else 0)} key(s)"
        engine_logger.info(
            "serving %s (db %s, %s, policy min_confidence=%g risk_floor=%g, denials %s, auth %s)",
            url,
            args.db,
            "relaxed" if args.relaxed else "strict",
            args.min_confidence,
            args.risk_floor,
            args.denials,
            auth,
        )
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        # uvicorn shuts down gracefully on SIGTERM and then re-raises the signal to the handler
        # that was installed before it: make that a no-op, so a terminated engine exits 0.
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
        try:
            server.run(sockets=[sock])
        finally:
            signal.signal(signal.SIGTERM, previous)
    finally:
        sock.close()
        lock.release()
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
