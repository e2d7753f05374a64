"""The one typed configuration of the governed agent, for the imported and the served graph.

:class:`AgentConfig` holds every option of
:func:`~algenta_graph.graph.create_governed_agent` that makes sense outside Python code; the
served graph (``langgraph.json``, :mod:`algenta_graph.serving.server`) is built from one, and
``create_governed_agent(config=...)`` takes the same object, so both share one code path and one
set of defaults (the ``DEFAULT_*`` constants here).

Where a configuration comes from (:func:`load_config`), later wins:

1. the defaults;
2. the file named by ``ALGENTA_CONFIG`` (or passed), TOML (``.toml``) or JSON (``.json``);
3. the environment variables of earlier releases, which keep working and win over the file:
   ``ALGENTA_BASE_URL``, ``ALGENTA_API_KEY``, ``ALGENTA_OPERATOR_API_KEY``, ``ALGENTA_PROFILE``,
   ``ALGENTA_MODEL``, ``ALGENTA_TOP_K``, ``ALGENTA_ON_DENIAL``.

Python objects are named by import path, ``"package.module:attribute"``: ``embeddings`` (a
LangChain ``Embeddings``, or a callable returning one), ``authorize_operator`` (the rule
``(identity, gate, config) -> bool`` itself) and ``model = {path = "..."}`` (a chat model, or a
callable returning one; a plain string is an ``init_chat_model`` id such as ``"openai:gpt-5"``).

**Secrets never go into the file**: a secret is written ``{env = "CRM_TOKEN"}`` (optionally
``prefix = "Bearer "``) in place of its value and read from the environment when the
configuration is resolved (:func:`resolve_config`); a literal value where a secret belongs (the
engine keys, a header or a stdio ``env`` entry whose name says token, key, secret, password,
cookie or authorization, a password in a URL) is refused.

Every problem is reported at once, each on one line naming its source (the file, or the
environment variable) and its key (:class:`ConfigError`)::

    /srv/agent.toml: extra_servers.crm.headers.Authorization: the environment variable
    CRM_TOKEN is not set

Example (``docs/CONFIGURATION.md`` has a commented file)::

    config = load_config("agent.toml")            # the file, then the ALGENTA_* variables
    graph = await create_governed_agent(config=config, checkpointer="runs.sqlite")

>>> AgentConfig().top_k, AgentConfig().profile, AgentConfig().step_limit
(5, 'observe', 50)
>>> parse_config({"top_k": 3, "always_include": ["get_contract"]}).always_include
['get_contract']
>>> parse_config({"top_k": "3"}, source="agent.toml")
Traceback (most recent call last):
  ...
algenta_graph.errors.ConfigError: agent.toml: top_k: Input should be a valid integer
"""

from __future__ import annotations

from algenta_graph.config.agent import AgentConfig
from algenta_graph.config.loading import load_config, parse_config, read_config_file
from algenta_graph.config.names import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_NAME,
    DEFAULT_STEP_LIMIT,
    DEFAULT_SYSTEM_PROMPT,
    DEFAULT_TOP_K,
    DEMO_MODEL,
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_CONFIG,
    ENV_MODEL,
    ENV_ON_DENIAL,
    ENV_OPERATOR_API_KEY,
    ENV_PROFILE,
    ENV_TOP_K,
    ENV_VARIABLES,
    NO_ENGINE_SYSTEM_PROMPT,
)
from algenta_graph.config.resolving import (
    ResolvedConfig,
    import_object,
    iter_secrets,
    resolve_config,
)
from algenta_graph.config.showing import masked
from algenta_graph.config.tables import (
    ConfigTable,
    EnvSecret,
    EscalationTable,
    HttpServer,
    ImportedModel,
    ImportPath,
    NotifyTable,
    StdioServer,
    TelemetryTable,
    UsageSettings,
    WebsocketServer,
)
from algenta_graph.errors import ConfigError, ConfigProblem

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_NAME",
    "DEFAULT_STEP_LIMIT",
    "DEFAULT_SYSTEM_PROMPT",
    "DEFAULT_TOP_K",
    "DEMO_MODEL",
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_CONFIG",
    "ENV_MODEL",
    "ENV_ON_DENIAL",
    "ENV_OPERATOR_API_KEY",
    "ENV_PROFILE",
    "ENV_TOP_K",
    "ENV_VARIABLES",
    "NO_ENGINE_SYSTEM_PROMPT",
    "AgentConfig",
    "ConfigError",
    "ConfigProblem",
    "ConfigTable",
    "EnvSecret",
    "EscalationTable",
    "HttpServer",
    "ImportPath",
    "ImportedModel",
    "NotifyTable",
    "ResolvedConfig",
    "StdioServer",
    "TelemetryTable",
    "UsageSettings",
    "WebsocketServer",
    "import_object",
    "iter_secrets",
    "load_config",
    "masked",
    "parse_config",
    "read_config_file",
    "resolve_config",
]
