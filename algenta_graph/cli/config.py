"""``algenta-graph config check [FILE]``: the configuration the served graph would start with.

Reads ``FILE`` (default: the file ``ALGENTA_CONFIG`` names, else none) and the ``ALGENTA_*``
variables, which win over it, exactly as the served graph does (:mod:`algenta_graph.config`);
resolves it (every secret read from the environment, every import path imported, the model
made); connects once to each extra server (``--no-connect`` skips it). With ``[tool_gates]``
rules it also opens the engine connection as the served graph would and resolves every rule
against the live catalog (:meth:`~algenta_graph.governance.tool_gates.ToolGates.compile`): a
pattern that names no tool is an error naming the nearest tool names. Then prints the resolved
configuration as JSON, every secret masked, with where each key came from, and under
``tool_gates_resolved`` each rule with the tools it governs. A configuration without an engine
(``base_url = false``, ``ALGENTA_BASE_URL=none``) is said so on stderr ("no engine: the engine's
gates are off"), its rules resolved against the extra servers alone; one with neither an engine
nor an extra server is an error naming what to set.

Exit codes: 0 the configuration is good (an unreachable extra server is a warning on stderr,
as when serving); 2 it is not: one line on stderr per problem, naming the key and the file or
variable, and nothing on stdout (an engine that cannot be reached while there are rules to
resolve is one: ``--no-connect`` skips the check, with a warning).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from algenta_graph.cli.common import EXIT_USAGE

if TYPE_CHECKING:
    from algenta_graph.config import AgentConfig, ResolvedConfig

__all__ = ["add_config_parser"]

_WHERE = "algenta-graph config check"


async def _resolved_rules(config: AgentConfig, resolved: ResolvedConfig) -> list[dict[str, Any]]:
    """Each ``[tool_gates]`` rule with the tools it governs in the live catalog.

    Raises:
        ToolGatesError: a rule does not resolve (every problem named).
        EngineConnectionError: the engine could not be reached.
        ValueError: a predicate does not import.
    """
    from algenta_graph.connection.catalog import gate_catalog
    from algenta_graph.graph.connecting import open_engine_connection, unreachable_of

    # the extra servers were probed (and each unreachable one warned about) already
    quiet = logging.getLogger("algenta_graph.graph.connecting")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        connection = await open_engine_connection(
            config,
            base_url=config.base_url,
            api_key=resolved.api_key,
            operator_api_key=resolved.operator_api_key,
            profile=config.profile,
            extra_servers=resolved.extra_servers,
        )
    finally:
        quiet.setLevel(level)
    try:
        catalog = gate_catalog(connection, unreachable=unreachable_of(connection))
    finally:
        await connection.aclose()
    return [rule.shown() for rule in config.tool_gates.compile(catalog).resolution]


def _check_handler(args: argparse.Namespace) -> int:
    from algenta_graph.config import ConfigError, load_config, masked, resolve_config
    from algenta_graph.errors import EngineConnectionError, NoToolServers, ToolGatesError
    from algenta_graph.governance.gates import ENGINE_GATE_NAMES
    from algenta_graph.graph.connecting import check_tool_sources

    environ = os.environ
    try:
        config = load_config(args.file, environ=environ)
        resolved = resolve_config(config, environ=environ)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"{_WHERE}: error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    no_engine = config.base_url is False
    if no_engine:
        where = config.source_of("base_url")
        try:
            check_tool_sources(False, resolved.extra_servers, no_engine="base_url = false")
        except NoToolServers as exc:
            print(f"{_WHERE}: error: {where}: base_url: {exc}", file=sys.stderr)
            return EXIT_USAGE
        ignored = " (profile applies to an engine's tools: none here)"
        print(
            f"{_WHERE}: note: {where}: base_url = false: no engine: the engine's gates "
            f"({', '.join(ENGINE_GATE_NAMES)}) are off; the graph's own gates govern the tools "
            f"of {', '.join(sorted(resolved.extra_servers))}"
            + (ignored if "profile" in config.model_fields_set else ""),
            file=sys.stderr,
        )
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
    rules: list[dict[str, Any]] | None = None
    where = config.source_of("tool_gates")
    if not config.tool_gates.empty and args.no_connect:
        print(
            f"{_WHERE}: warning: {where}: tool_gates: not resolved against the catalog "
            "(--no-connect): a rule that names no tool is not found",
            file=sys.stderr,
        )
    elif not config.tool_gates.empty:
        try:
            rules = asyncio.run(_resolved_rules(config, resolved))
        except ToolGatesError as exc:
            for problem in exc.located(where).problems:
                print(f"{_WHERE}: error: {problem}", file=sys.stderr)
            return EXIT_USAGE
        except EngineConnectionError as exc:
            if no_engine:
                print(
                    f"{_WHERE}: error: {config.source_of('extra_servers')}: extra_servers: no "
                    f"server could be reached to resolve [tool_gates] against: {exc} (start "
                    "them, or pass --no-connect)",
                    file=sys.stderr,
                )
                return EXIT_USAGE
            print(
                f"{_WHERE}: error: {config.source_of('base_url')}: base_url: the engine is "
                f"needed to resolve [tool_gates] against its catalog: {exc} (start it, or pass "
                "--no-connect)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        except ValueError as exc:  # a predicate that does not import, named with its rule
            print(f"{_WHERE}: error: {where}: tool_gates: {exc}", file=sys.stderr)
            return EXIT_USAGE
    shown: dict[str, Any] = masked(config, environ=environ)
    if rules is not None:
        shown["tool_gates_resolved"] = rules
    print(json.dumps(shown, indent=2, sort_keys=False))
    return 0


def add_config_parser(sub: Any) -> None:
    """``algenta-graph config check [FILE]``."""
    p = sub.add_parser(
        "config",
        help="check a configuration file (TOML or JSON) of the served graph",
        description="The governed agent's configuration (see docs/CONFIGURATION.md).",
    )
    actions = p.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = actions.add_parser(
        "check",
        help="resolve the configuration and print it, secrets masked; exit 2 on any error",
        description=(
            "Read FILE (default: $ALGENTA_CONFIG) and the ALGENTA_* variables (which win over "
            "it), resolve every secret and import path, connect once to each extra server, "
            "resolve every [tool_gates] rule against the live catalog (the engine's and the "
            "extra servers' tools), and print the resolved configuration as JSON with every "
            "secret masked, and each rule with the tools it governs. Each problem is one line "
            "on stderr naming the key and the file or variable (exit 2); an unreachable extra "
            "server is a warning."
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
        help=(
            "connect to nothing: no reachability warnings, and [tool_gates] rules not resolved "
            "against the catalog (a warning)"
        ),
    )
    check.set_defaults(handler=_check_handler)
