"""``algenta-graph config check [FILE]``: the configuration the served graph would start with.

Reads ``FILE`` (default: the file ``ALGENTA_CONFIG`` names, else none) and the ``ALGENTA_*``
variables, which win over it, exactly as the served graph does (:mod:`algenta_graph.config`);
resolves it (every secret read from the environment, every import path imported, the model
made); connects once to each extra server (``--no-connect`` skips it). Then prints the resolved
configuration as JSON, every secret masked, with where each key came from.

Exit codes: 0 the configuration is good (an unreachable extra server is a warning on stderr,
as when serving); 2 it is not: one line on stderr per problem, naming the key and the file or
variable, and nothing on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from algenta_graph.cli.common import EXIT_USAGE

__all__ = ["add_config_parser"]

_WHERE = "algenta-graph config check"


def _check_handler(args: argparse.Namespace) -> int:
    from algenta_graph.config import ConfigError, load_config, masked, resolve_config

    environ = os.environ
    try:
        config = load_config(args.file, environ=environ)
        resolved = resolve_config(config, environ=environ)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"{_WHERE}: error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if resolved.extra_servers and not args.no_connect:
        from algenta_graph.graph.connecting import unreachable_servers

        found = asyncio.run(unreachable_servers(resolved.extra_servers, config.connect_timeout))
        for name, why in found.items():
            where = config.source_of("extra_servers")
            print(
                f"{_WHERE}: warning: {where}: extra_servers.{name}: unreachable at {why}; the "
                "graph would serve without its tools",
                file=sys.stderr,
            )
    shown: dict[str, Any] = masked(config, environ=environ)
    print(json.dumps(shown, indent=2, sort_keys=False))
    return 0


def add_config_parser(sub: Any) -> None:
    """``algenta-graph config check [FILE]``."""
    p = sub.add_parser(
        "config",
        help="check a configuration file (TOML or JSON) of the served graph",
        description="The governed agent's configuration (see the README, 'Configuration').",
    )
    actions = p.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = actions.add_parser(
        "check",
        help="resolve the configuration and print it, secrets masked; exit 2 on any error",
        description=(
            "Read FILE (default: $ALGENTA_CONFIG) and the ALGENTA_* variables (which win over "
            "it), resolve every secret and import path, connect once to each extra server, and "
            "print the resolved configuration as JSON with every secret masked. Each problem is "
            "one line on stderr naming the key and the file or variable (exit 2); an "
            "unreachable extra server is a warning."
        ),
    )
    check.add_argument(
        "file",
        nargs="?",
        default=None,
        metavar="FILE",
        help="the configuration file, .toml or .json (default: $ALGENTA_CONFIG, else none)",
    )
    check.add_argument(
        "--no-connect",
        action="store_true",
        help="do not connect to the extra servers (no reachability warnings)",
    )
    check.set_defaults(handler=_check_handler)
