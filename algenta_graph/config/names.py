"""The configuration's names and defaults: the environment variables, every ``DEFAULT_*``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from algenta_graph.governance.gates import describe_gates

if TYPE_CHECKING:
    pass


ENV_CONFIG = "ALGENTA_CONFIG"
"""The environment variable naming the configuration file (TOML or JSON)."""
ENV_BASE_URL = "ALGENTA_BASE_URL"
"""The engine's MCP endpoint, or ``none`` (``false``): no Algenta engine (``base_url = false``)."""
NO_ENGINE_WORDS = frozenset({"none", "false"})
"""The values of ``ALGENTA_BASE_URL`` that say there is no engine (any case)."""
ENV_API_KEY = "ALGENTA_API_KEY"
ENV_OPERATOR_API_KEY = "ALGENTA_OPERATOR_API_KEY"
ENV_OPERATOR_KEY_IS_AGENT_KEY = "ALGENTA_OPERATOR_KEY_IS_AGENT_KEY"
"""``1`` / ``true``: the engine takes the one ``api_key`` as the operator credential too (a
relaxed local engine); without it and without ``operator_api_key`` an override is refused."""
ENV_CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""OpenTelemetry's GenAI content-capture switch: ``SPAN_ONLY``, ``SPAN_AND_EVENT`` or ``true``
record argument values and results on spans (``[telemetry] capture_content``)."""
ENV_PROFILE = "ALGENTA_PROFILE"
ENV_MODEL = "ALGENTA_MODEL"
ENV_TOP_K = "ALGENTA_TOP_K"
ENV_ON_DENIAL = "ALGENTA_ON_DENIAL"
ENV_LEDGER = "ALGENTA_LEDGER"
"""The ledger every process serving the graph shares: ``memory``, a SQLite file, a
``postgresql://`` URL."""
ENV_SINGLE_PROCESS = "ALGENTA_SINGLE_PROCESS"
"""``1`` / ``true``: the deployment declares itself one process (its ledger is in memory)."""
ENV_CHECKPOINTER = "ALGENTA_CHECKPOINTER"
"""The served graph's checkpoint store (``server_checkpointer``): a ``postgresql://`` URL or a
SQLite file."""
ENV_VARIABLES: Mapping[str, str] = {
    "base_url": ENV_BASE_URL,
    "api_key": ENV_API_KEY,
    "operator_api_key": ENV_OPERATOR_API_KEY,
    "operator_key_is_agent_key": ENV_OPERATOR_KEY_IS_AGENT_KEY,
    "profile": ENV_PROFILE,
    "model": ENV_MODEL,
    "top_k": ENV_TOP_K,
    "on_denial": ENV_ON_DENIAL,
    "ledger": ENV_LEDGER,
    "single_process": ENV_SINGLE_PROCESS,
}
"""``{key: the environment variable that wins over the file for it}``."""

DEFAULT_TOP_K = 5
"""How many tools retrieval binds per turn by default (plus the base tools and
``search_tools``)."""
DEFAULT_STEP_LIMIT = 50
"""The default ``recursion_limit`` of a run (LangGraph's own default, 25, is about 10 tool
rounds of this graph)."""
DEFAULT_CONNECT_TIMEOUT = 30.0
"""Seconds for connecting to an MCP server, initialising and listing its tools."""
DEFAULT_CALL_TIMEOUT = 60.0
"""Seconds one tool call may take."""
DEFAULT_NAME = "algenta_governed_agent"
"""The compiled graph's name."""
DEMO_MODEL = "demo"
"""The ``model`` value (also the default) that selects the offline
:class:`~algenta_graph.models.DemoChatModel`."""
DEFAULT_SYSTEM_PROMPT = (
    "You are a governed agent working on an Algenta decision engine through tools. "
    "If the tool you need is not bound, call search_tools to find it. "
    "execute_decision is governed by named policy gates:\n"
    + describe_gates()
    + "\nWhen a gate denies an execution, you cannot override it; tell the user which gate "
    "blocked which decision and why."
)
"""The system prompt by default: what the gates are, and that the model cannot override them."""
NO_ENGINE_SYSTEM_PROMPT = (
    "You are a governed agent working through tools. If the tool you need is not bound, call "
    "search_tools to find it. Some tool calls are held for an operator's approval, limited by "
    "budgets or checked against argument rules before they run. When a call is held, denied "
    "or rejected you cannot override it; tell the user which call was stopped and why."
)
"""The system prompt by default of a graph without an engine (its gates are the graph's own)."""

_RESERVED_SERVERS = frozenset({"algenta", "algenta-operator"})
"""The connection's own server names (the engine, and its operator session)."""
_SECRET_NAME = re.compile(
    r"authorization|token|secret|passw|cookie|(^|[-_])(api)?key($|[-_])", re.I
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_MASK = "****"
_TRANSPORTS = frozenset({"streamable_http", "streamable-http", "http", "sse", "stdio", "websocket"})
