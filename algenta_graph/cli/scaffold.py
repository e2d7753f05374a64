"""``algenta-graph init [DIR]``: the files that serve a governed agent from an app of your own.

Writes four files, each working as written (``tests/served/test_scaffold.py`` serves them):

- ``langgraph.json``: the graph, auth and inbox entry points of this package, with
  ``dependencies`` naming the installed ``algenta-graph`` (``langgraph dev`` imports it from the
  venv; ``langgraph build`` installs it) and ``"."``, the app's own directory (its predicates,
  hooks and the files below, in an image too);
- ``agent.toml``: a commented minimal configuration (:mod:`algenta_graph.config`), which
  ``algenta-graph config check`` accepts as written;
- ``.env``: what ``langgraph dev`` sets before it starts (``ALGENTA_CONFIG``,
  ``ALGENTA_AUTH_FILE``), rendered by :func:`env_file`, the same text as the repository's
  ``.env.example`` with the two files named;
- ``tokens.json``: the tokens file, empty until ``algenta-graph tokens add``.

An existing file is never overwritten without ``--force``: the command refuses, naming every
one, and writes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from algenta_graph.cli.common import EXIT_FAILED
from algenta_graph.errors import CommandError

__all__ = [
    "AGENT_TOML",
    "SCAFFOLD_FILES",
    "add_init_parser",
    "env_file",
    "langgraph_json",
]

CONFIG_FILE = "agent.toml"
TOKENS_FILE = "tokens.json"

AGENT_TOML = """\
# agent.toml: the governed agent's configuration. The served graph reads it (ALGENTA_CONFIG in
# .env names it), and so does `algenta-graph run --config agent.toml`. Every key is optional;
# docs/CONFIGURATION.md lists them all. Check it: `algenta-graph config check agent.toml`.

# The Algenta engine's MCP endpoint (ALGENTA_BASE_URL wins). `algenta-graph engine --port 8000
# --relaxed` serves the local reference engine there.
# Or base_url = false: no engine, only your [extra_servers] with the graph's own gates.
base_url = "http://localhost:8000/mcp"
# Its token, if it needs one: the name of a variable (set it in .env), never the value.
# api_key = { env = "ENGINE_API_KEY" }
# An operator's override is sent with an operator credential of its own (with a real engine:
# operator_api_key = { env = "ENGINE_OPERATOR_KEY" }). The local --relaxed engine has no keys,
# so the one (absent) key stands for both: delete this line when you point at a real engine.
operator_key_is_agent_key = true

profile = "execute"      # observe (read-only) | govern | execute (execute_decision too) | full
model = "demo"           # "demo": offline; or an init_chat_model id such as "openai:gpt-5"
                         # (pip install langchain-openai, OPENAI_API_KEY in .env)
top_k = 5                # tools retrieval binds to the model per turn

# Your own MCP servers: their tools join the catalog. A secret is { env = "NAME" }.
# [extra_servers.crm]
# transport = "streamable_http"
# url = "http://localhost:9000/mcp"
# headers = { Authorization = { env = "CRM_TOKEN", prefix = "Bearer " } }

# Gates on any tool, by its real MCP name ("crm.delete_customer") or a pattern ("crm.*").
# [tool_gates]
# require_approval = ["crm.delete_customer"]   # held until an operator approves it
# [[tool_gates.budgets]]
# tool = "crm.refund"
# thread_limit = 2                             # calls a thread may make

# How operators are asked (answered in the inbox at /inbox, or with any LangGraph client).
# [escalation]
# require_reason = true                        # every answer must say why
"""
"""The scaffold's ``agent.toml``."""


def langgraph_json() -> dict[str, Any]:
    """The scaffold's ``langgraph.json``: this package's entry points, the installed package.

    The same graph, auth and inbox entries as the repository's own ``langgraph.json`` (a test
    keeps them equal); ``python_version`` is the running interpreter's (the in-memory server
    needs 3.11 or later).
    """
    return {
        "$schema": "https://langgra.ph/schema.json",
        "python_version": f"{sys.version_info.major}.{max(sys.version_info.minor, 11)}",
        # langgraph dev imports the installed algenta-graph; langgraph build installs it. "."
        # is this directory: the app's own modules and files (agent.toml, tokens.json).
        "dependencies": ["algenta-graph", "."],
        "graphs": {
            "governed_agent": {
                "path": "algenta_graph.serving.server:make_graph",
                "description": (
                    "A governed agent on an Algenta engine: BM25 tool retrieval, MCP tools, "
                    "named-gate denial routing, receipts in checkpointed state."
                ),
            }
        },
        "env": ".env",
        "auth": {"path": "algenta_graph.serving.auth:auth", "disable_studio_auth": True},
        "http": {"app": "algenta_graph.inbox.app:app"},
    }


def env_file(*, config: str | None = None, auth_file: str | None = None) -> str:
    """The ``.env`` the scaffold writes, or (no files named) the repository's ``.env.example``.

    One text for both, so they never disagree: a file named here is set, one not named is a
    commented line saying what writes it.
    """

    def setting(name: str, value: str | None, example: str, why: str) -> str:
        return f"{name}={value}" if value else f"# {name}={example}   # {why}"

    return f"""\
# The environment `langgraph dev` sets before it starts: it reads this file from the directory
# it is started in (langgraph.json "env"). Never commit a real token or key.
# `algenta-graph init` writes it as .env, next to agent.toml, tokens.json and langgraph.json.

# The configuration file (TOML or JSON; docs/CONFIGURATION.md has every key).
# `algenta-graph config check` shows what it resolves to, secrets masked.
{setting("ALGENTA_CONFIG", config, CONFIG_FILE, "`algenta-graph init` writes one")}

# Who may use the server: the tokens file (the SHA-256 of each token, its roles), managed with
# `algenta-graph tokens add NAME --role operator` (the token is printed once), `tokens list` and
# `tokens revoke NAME`. Unset, and no identity provider below: the server runs OPEN and the
# inbox refuses to serve.
{setting("ALGENTA_AUTH_FILE", auth_file, TOKENS_FILE, "`algenta-graph init` writes one")}

# ...and/or your identity provider's JWTs (docs/DEPLOYING.md "Operators from your identity
# provider"), next to the tokens file or alone. The issuer exactly as its tokens carry it; the
# audience your tokens are issued for (this API); where the roles are in a token and which of
# its values grant which role (agent, operator, operator:<gate>, auditor). Any ALGENTA_OIDC_*
# variable without the issuer stops the server from starting.
# ALGENTA_OIDC_ISSUER=https://id.example.com/realms/acme
# ALGENTA_OIDC_AUDIENCE=algenta-api
# ALGENTA_OIDC_ROLES_CLAIM=realm_access.roles
# ALGENTA_OIDC_ROLE_MAP={{"agents": "agent", "ops": "operator", "risk": "operator:risk_floor"}}
# ALGENTA_OIDC_IDENTITY_CLAIM=sub
# Optional: the keys (default: the discovery document's jwks_uri), the discovery document
# (default: <issuer>/.well-known/openid-configuration), the algorithms (asymmetric only), the
# clock skew, how long the keys are kept, and the least time between two refreshes an unknown
# key id causes.
# ALGENTA_OIDC_JWKS_URL=https://id.example.com/realms/acme/protocol/openid-connect/certs
# ALGENTA_OIDC_DISCOVERY_URL=
# ALGENTA_OIDC_ALGORITHMS=RS256,ES256
# ALGENTA_OIDC_LEEWAY_SECONDS=30
# ALGENTA_OIDC_JWKS_CACHE_SECONDS=300
# ALGENTA_OIDC_JWKS_REFRESH_SECONDS=30
# The inbox signs in with the provider (authorization code + PKCE) once it has a client id;
# without one it takes a pasted token. The secret for a confidential client; the callback as
# registered at the provider (default: <the URL the browser used>/inbox/oidc/callback).
# ALGENTA_OIDC_CLIENT_ID=algenta-inbox
# ALGENTA_OIDC_CLIENT_SECRET=
# ALGENTA_OIDC_REDIRECT_URL=https://agents.example.com/inbox/oidc/callback
# ALGENTA_OIDC_SCOPES=openid profile

# The secrets the configuration names as {{ env = "NAME" }} live here, never in the file, e.g.:
# ENGINE_API_KEY=
# CRM_TOKEN=
# OPENAI_API_KEY=

# The operator inbox at /inbox (docs/ESCALATIONS.md): the key that signs its session
# cookies (set it when several workers serve it; default a random key per process), and how long
# a session lasts. Without ALGENTA_AUTH_FILE or an identity provider the inbox refuses to serve
# unless opened on purpose.
# ALGENTA_INBOX_SECRET=
# ALGENTA_INBOX_SESSION_SECONDS=28800
# ALGENTA_INBOX_ALLOW_OPEN=1

# The variables below win over the configuration file, key by key: leave them commented out to
# use the file.

# The engine's MCP endpoint. `algenta-graph engine --port 8000` serves the local reference
# engine here.
# ALGENTA_BASE_URL=http://localhost:8000/mcp

# Bearer token for the engine, if it requires one.
# ALGENTA_API_KEY=

# The operator path's own engine credential (the override flags are sent with it, never the
# model's calls).
# ALGENTA_OPERATOR_API_KEY=

# Without an operator credential an override is refused before it is sent; 1 says the engine's
# one key (ALGENTA_API_KEY, or none) is also the operator's: a local engine with no keys only.
# ALGENTA_OPERATOR_KEY_IS_AGENT_KEY=1

# Tool profile: observe (default, read-only), govern, execute, or full (opt-in, every tool).
# ALGENTA_PROFILE=observe

# Chat model: an init_chat_model string such as openai:gpt-5 (needs that provider's package and
# key, e.g. OPENAI_API_KEY), or `demo` for the offline deterministic stand-in.
# ALGENTA_MODEL=demo

# How many tools retrieval binds to the model per turn (plus the base tools and search_tools).
# ALGENTA_TOP_K=5

# Denial policy for every gate (report | escalate | halt), or JSON per gate, e.g.
# {{"idempotency": "report", "confidence": "escalate", "risk_floor": "halt"}}.
# Empty: the graph's default.
# ALGENTA_ON_DENIAL=

# The ledger every process serving the graph shares (escalation answers, the write-ahead of every
# governed call): a postgresql:// URL (several workers), a SQLite file (one machine) or memory.
# Default: the database of ALGENTA_CHECKPOINTER, or a file beside langgraph dev's own state; any
# other deployment refuses to start without it (docs/DEPLOYING.md).
# ALGENTA_LEDGER=postgresql://user:password@db:5432/agents

# Declares the deployment one process (its ledger in memory; a restart forgets it).
# ALGENTA_SINGLE_PROCESS=1
"""


def _files() -> dict[str, str]:
    from algenta_graph.cli.tokens import empty_tokens_file

    return {
        "langgraph.json": json.dumps(langgraph_json(), indent=2) + "\n",
        CONFIG_FILE: AGENT_TOML,
        ".env": env_file(config=CONFIG_FILE, auth_file=TOKENS_FILE),
        TOKENS_FILE: empty_tokens_file(),
    }


SCAFFOLD_FILES: tuple[str, ...] = ("langgraph.json", CONFIG_FILE, ".env", TOKENS_FILE)
"""The files ``init`` writes, in order."""

_PRIVATE = frozenset({".env", TOKENS_FILE})
"""Written owner-only: secrets may be added to them."""


def _init(args: argparse.Namespace) -> int:
    target = Path(args.dir)
    if target.exists() and not target.is_dir():
        raise CommandError(f"{target} is a file, not a directory")
    files = _files()
    present = [name for name in SCAFFOLD_FILES if (target / name).exists()]
    if present and not args.force:
        raise CommandError(
            f"{target} already has {', '.join(present)}: nothing was written (--force "
            "overwrites them, the tokens file's tokens included)"
        )
    try:
        target.mkdir(parents=True, exist_ok=True)
        for name in SCAFFOLD_FILES:
            path = target / name
            path.write_text(files[name], encoding="utf-8")
            if name in _PRIVATE:
                path.chmod(0o600)
    except OSError as exc:
        raise CommandError(f"cannot write the scaffold in {target} ({exc})", EXIT_FAILED) from None
    cd = "" if target.resolve() == Path.cwd().resolve() else f"\n  cd {args.dir}"
    print(
        f"wrote {', '.join(SCAFFOLD_FILES)} in {target}"
        + (f" (overwrote {', '.join(present)})" if present else "")
        + f"""

Next, from that directory:{cd}
  algenta-graph tokens add ana --role operator   # prints ana's token once
  algenta-graph engine --port 8000 --relaxed &   # the reference engine, or set base_url
  algenta-graph config check agent.toml          # the configuration, secrets masked
  langgraph dev --no-browser                     # pip install "algenta-graph[serve]" first
Then the API answers at the URL langgraph dev prints (a token on every request) and the
operator inbox at /inbox/."""
    )
    return 0


def add_init_parser(sub: Any) -> None:
    """``algenta-graph init [DIR]``."""
    p = sub.add_parser(
        "init",
        help="write langgraph.json, agent.toml, .env and a tokens file to serve the agent",
        description=(
            "Write the files that serve the governed agent from DIR with `langgraph dev`: "
            "langgraph.json (the installed algenta-graph), a commented agent.toml, .env and an "
            "empty tokens file (add one with `algenta-graph tokens add`). Existing files are "
            "never overwritten without --force."
        ),
    )
    p.add_argument(
        "dir", nargs="?", default=".", metavar="DIR", help="where (default: the working directory)"
    )
    p.add_argument("--force", action="store_true", help="overwrite files that exist")
    p.set_defaults(handler=_init)
