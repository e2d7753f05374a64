"""The graph factory that ``langgraph.json`` points at, so ``langgraph dev`` serves the graph.

``langgraph dev`` (and any LangGraph server) calls :func:`make_graph` on **every** access to the
graph: each run, each state read, each drawing in Studio. The factory therefore caches what is
expensive (the engine connection with its catalog, and the compiled graph) per event loop and
per setting, and compiles the graph **without** a checkpointer or a store: the server supplies
its own (the usage signal keeps its history in the server's store).

The served graph is configured exactly like the imported one: by an
:class:`~algenta_graph.config.AgentConfig` (:mod:`algenta_graph.config`), read from the file
``ALGENTA_CONFIG`` names (TOML or JSON) and from the environment variables of earlier releases,
which win over the file (the server's process environment, or the ``env`` file named in
``langgraph.json``):

- ``ALGENTA_BASE_URL``: the engine's MCP endpoint (default ``http://localhost:8000/mcp``), or
  ``none``: no Algenta engine (the file's ``base_url = false``): the graph serves the extra
  servers' tools with every graph-side gate, nothing connects to an engine, and the engine's
  gates do not exist (neither an engine nor an extra server refuses to start:
  :class:`~algenta_graph.errors.NoToolServers`).
- ``ALGENTA_API_KEY``: bearer token for the engine (default: none).
- ``ALGENTA_OPERATOR_API_KEY``: the engine credential of the operator path alone (a key with the
  engine's operator role): overrides are sent with it after an operator's answer, never the
  model's calls (default: none; an override is then refused, unless
  ``ALGENTA_OPERATOR_KEY_IS_AGENT_KEY=1`` says ``ALGENTA_API_KEY`` is the operator credential
  too, for a relaxed local engine).
- ``ALGENTA_PROFILE``: ``observe`` (default), ``govern``, ``execute`` or ``full``.
- ``ALGENTA_MODEL``: an ``init_chat_model`` string (``"openai:gpt-5"``), or ``demo`` (default)
  for the offline :class:`~algenta_graph.models.DemoChatModel` stand-in.
- ``ALGENTA_TOP_K``: how many tools retrieval binds per turn (default ``5``).
- ``ALGENTA_ON_DENIAL``: ``report``, ``escalate`` or ``halt`` for every gate, or JSON per gate
  (``{"confidence": "escalate", "idempotency": "report"}``); default: the graph's policies
  (:data:`~algenta_graph.governance.gates.DEFAULT_POLICIES`). A run may only make them stricter.

**Bad configuration refuses to start the server** (:func:`startup_check`, run when a LangGraph
server imports this module): an unknown key, a wrong type, an import path that does not import,
a secret missing from the environment, each one line naming the key and the file (or the
variable). An extra MCP server that cannot be reached is a warning naming its URL; the graph
serves without its tools.

**The ledger** (:mod:`algenta_graph.ledger`: escalation claims, notices, the write-ahead of every
governed call) is the one every process serving the graph shares, chosen by :func:`served_ledger`
from the configuration and the server's own (:mod:`algenta_graph.config.deployment`), never from
the adapter object a run sees: ``ALGENTA_LEDGER`` (``ledger = ...``) when set; else, under the
server checkpointer (:func:`~algenta_graph.serving.checkpointer.server_checkpointer`), its
database (``ALGENTA_CHECKPOINTER``); else, under ``langgraph dev``'s in-memory runtime, a SQLite
file beside its state (``.langgraph_api/algenta-ledger.sqlite``, kept across restarts as that
state is; memory when the runtime keeps none). A custom checkpointer or another runtime needs
``ALGENTA_LEDGER`` (or ``ALGENTA_SINGLE_PROCESS=1``): the server does not start without it
(:class:`~algenta_graph.errors.LedgerRequired`).

Security (see :mod:`algenta_graph.serving.auth`): ``langgraph.json`` names the custom auth object
``algenta_graph.serving.auth:auth`` (bearer tokens from ``ALGENTA_AUTH_FILE``, roles ``agent``,
``operator[:<gate>]``, ``auditor``; open with a loud warning when unset). The served graph asks
:func:`~algenta_graph.serving.auth.served_authorize_operator` before an operator's answer takes
effect (and then the configuration's ``authorize_operator``, which may only refuse more), and
its ``update_state`` (:func:`guard_records`), for every caller, with or without auth,
refuses the governed record fields, any update as a governance node, and any update while an
escalation (or a governed step) is pending on the thread: only an operator's resume answers an
escalation. The usage signal's namespace in the server's store is the graph's alone
(:mod:`algenta_graph.serving.store_auth`).

``ALGENTA_PROFILE`` is the ceiling: the served graph's catalog is that profile's tools. Per run,
``profile`` (narrowing only), ``top_k`` and ``on_denial`` can be changed through the run's
context (the graph's ``context_schema``, :class:`~algenta_graph.governance.run_settings.
RunContext`: Studio's context panel, or ``context={...}`` in ``langgraph_sdk``). Example::

    client = get_client(url="http://127.0.0.1:2024")
    await client.runs.wait(None, "governed_agent", input={"messages": [...]},
                           context={"top_k": 3, "on_denial": {"confidence": "report"}})
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph

from algenta_graph.config import (
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
    AgentConfig,
    ResolvedConfig,
    iter_secrets,
    load_config,
    resolve_config,
)
from algenta_graph.config.deployment import DEV_STATE_DIR, ServedRuntime, served_runtime
from algenta_graph.governance.record_guard import guard_records
from algenta_graph.graph.connecting import (
    check_tool_sources,
    open_engine_connection,
    unreachable_servers,
)
from algenta_graph.graph.factory import create_governed_agent
from algenta_graph.graph.resumes import check_resumes
from algenta_graph.ledger import MEMORY, Ledger, choose_ledger, connect_ledger, describe_ledger
from algenta_graph.serving.auth import served_authorize_operator

if TYPE_CHECKING:
    from algenta_graph.connection.engine import EngineConnection

__all__ = [
    "DEFAULT_TOP_K",
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_CONFIG",
    "ENV_MODEL",
    "ENV_ON_DENIAL",
    "ENV_OPERATOR_API_KEY",
    "ENV_PROFILE",
    "ENV_TOP_K",
    "ServerSettings",
    "aclose_cached",
    "build_graph",
    "make_graph",
    "served_ledger",
    "startup_check",
]

DEV_LEDGER_FILE = "algenta-ledger.sqlite"
"""The ledger's file beside ``langgraph dev``'s own state (:data:`DEV_STATE_DIR`)."""
SERVER_CHECKPOINTER = "algenta_graph.serving.checkpointer.server_checkpointer"
"""How ``langgraph.json`` names :func:`~algenta_graph.serving.checkpointer.server_checkpointer`
(langgraph-api's dotted ``module.attribute``; any other spelling is taken for a custom one)."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class ServerSettings:
    """The configuration one served graph is built from; equal settings share one graph.

    Two settings are equal when their configurations are, and so are the secrets those read
    from the environment (a rotated token is a new connection). The secrets themselves are
    kept only as a digest.

    Args:
        config: the configuration (default: the defaults).
        secrets: a digest of the secret values ``config`` reads (set by :meth:`from_env`).
    """

    config: AgentConfig = field(default_factory=AgentConfig)
    secrets: str = field(default="", repr=False)

    def _key(self) -> tuple[str, str]:
        return (self.config.model_dump_json(), self.secrets)

    def __eq__(self, other: object) -> bool:
        """Same configuration, same secrets."""
        return isinstance(other, ServerSettings) and self._key() == other._key()

    def __hash__(self) -> int:
        """Hash of the configuration and the secrets' digest."""
        return hash(self._key())

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServerSettings:
        """The file ``ALGENTA_CONFIG`` names and the ``ALGENTA_*`` variables (which win).

        Raises:
            ConfigError: every problem, one line each naming the file or the variable and the
                key (a ``ValueError``).

        >>> ServerSettings.from_env({"ALGENTA_PROFILE": "execute", "ALGENTA_TOP_K": "3"}).top_k
        3
        """
        env = os.environ if environ is None else environ
        config = load_config(environ=env)
        return cls(config, _secrets_digest(config, env))

    @property
    def base_url(self) -> str | Literal[False] | None:
        """The engine's MCP endpoint (``None``: the default; ``False``: no engine)."""
        return self.config.base_url

    @property
    def profile(self) -> str:
        """The tool profile (the ceiling of every run's)."""
        return self.config.profile

    @property
    def top_k(self) -> int:
        """How many tools retrieval binds per turn."""
        return self.config.top_k

    @property
    def model(self) -> str | None:
        """The ``init_chat_model`` id or import path; ``None`` for the offline demo model."""
        setting = self.config.model
        if setting is None or setting == DEMO_MODEL:
            return None
        return setting if isinstance(setting, str) else setting.path

    @property
    def on_denial_policy(self) -> dict[str, str] | None:
        """``on_denial`` as ``create_governed_agent`` takes it: ``{gate: policy}``."""
        policies = self.config.on_denial or {}
        return {str(gate): str(policy) for gate, policy in policies.items()} or None

    def connection_key(self) -> str:
        """What one engine connection is opened for: engine, credentials, profile, servers."""
        c = self.config
        parts = [
            c.base_url,
            c.profile,
            c.connect_timeout,
            c.call_timeout,
            c.model_dump(
                mode="json",
                include={
                    "api_key",
                    "operator_api_key",
                    "operator_key_is_agent_key",
                    "extra_servers",
                },
            ),
            self.secrets,
        ]
        return json.dumps(parts, sort_keys=True, default=str)


def _secrets_digest(config: AgentConfig, environ: Mapping[str, str]) -> str:
    """A digest of every secret value ``config`` reads (never the values); ``""`` for none."""
    values = [f"{key}={secret.value(environ) or ''}" for key, secret in iter_secrets(config)]
    # the engine keys fall back to the environment when the configuration names none
    values += [
        f"{name}={environ[name]}"
        for name in (ENV_API_KEY, ENV_OPERATOR_API_KEY)
        if environ.get(name)
    ]
    if not any(v.partition("=")[2] for v in values):
        return ""
    return hashlib.sha256("\0".join(values).encode()).hexdigest()


def served_rule(
    configured: Callable[[str, str, Any], bool] | None,
) -> Callable[[str, str, RunnableConfig], bool]:
    """The served graph's operator rule: the server's own, then the configured one (if any).

    The configured rule can only refuse more: an answer takes effect when both allow it.
    """
    if configured is None:
        return served_authorize_operator

    def rule(identity: str, gate: str, config: RunnableConfig) -> bool:
        return served_authorize_operator(identity, gate, config) and bool(
            configured(identity, gate, config)
        )

    return rule


# ---------------------------------------------------------------------------------------------
# the ledger


def _implied_ledger(runtime: ServedRuntime) -> tuple[str | None, str]:
    """The ledger the server's runtime implies (``None``: none), and what the deployment is."""
    path = runtime.checkpointer_path
    if path is not None:
        if path == SERVER_CHECKPOINTER:
            return runtime.algenta_checkpointer, "the server checkpointer (ALGENTA_CHECKPOINTER)"
        return None, f"a LangGraph server with the custom checkpointer {path!r}"
    if runtime.edition is None:  # imported outside a server: compiled without a checkpointer
        return MEMORY, "the served graph outside a LangGraph server"
    if runtime.edition == "inmem":
        if not runtime.file_persistence:
            return MEMORY, "langgraph dev's in-memory runtime, kept in memory only"
        return os.path.join(DEV_STATE_DIR, DEV_LEDGER_FILE), "langgraph dev's in-memory runtime"
    return None, f"a LangGraph server on its {runtime.edition!r} runtime"


def served_ledger(
    settings: ServerSettings, ledger: str | None, runtime: ServedRuntime | None = None
) -> str | Ledger:
    """The ledger the served graph uses (see the module docs).

    Args:
        settings: the served configuration (its ``single_process``).
        ledger: the configured ledger, its secret read (``ALGENTA_LEDGER``), if any.
        runtime: the server's runtime (default: read from the environment).

    Raises:
        LedgerRequired: a custom checkpointer or another runtime, no ledger configured, and no
            single process declared (the server does not start).
    """
    implied, deployment = _implied_ledger(runtime or served_runtime())
    chosen = choose_ledger(
        ledger,
        implied=implied,
        deployment=deployment,
        single_process=settings.config.single_process,
    )
    return chosen if isinstance(chosen, Ledger) else os.fspath(chosen)


# ---------------------------------------------------------------------------------------------
# the per-event-loop cache


@dataclass
class _LoopCache:
    loop: asyncio.AbstractEventLoop
    lock: asyncio.Lock
    connections: dict[str, EngineConnection]
    graphs: dict[ServerSettings, CompiledStateGraph[Any, Any, Any, Any]]
    ledgers: dict[str, Ledger]
    opened: contextlib.AsyncExitStack


_CACHES: dict[int, _LoopCache] = {}


def _loop_cache() -> _LoopCache:
    loop = asyncio.get_running_loop()
    for key, cache in list(_CACHES.items()):
        if cache.loop.is_closed():
            del _CACHES[key]
    found = _CACHES.get(id(loop))
    if found is None or found.loop is not loop:
        found = _CACHES[id(loop)] = _LoopCache(
            loop, asyncio.Lock(), {}, {}, {}, contextlib.AsyncExitStack()
        )
    return found


async def _connection(
    cache: _LoopCache, settings: ServerSettings, resolved: ResolvedConfig
) -> EngineConnection:
    key = settings.connection_key()
    conn = cache.connections.get(key)
    if conn is None:
        config = settings.config
        conn = await open_engine_connection(
            config,
            base_url=config.base_url,
            api_key=resolved.api_key or "",
            # "": no operator credential of its own (never the process environment again)
            operator_api_key=resolved.operator_api_key or "",
            operator_key_is_agent_key=config.operator_key_is_agent_key,
            profile=config.profile,
            extra_servers=resolved.extra_servers,
        )  # EngineConnectionError naming the URL; nothing is cached then
        cache.connections[key] = conn
    return conn


async def _ledger(cache: _LoopCache, spec: str | Ledger) -> Ledger:
    """The ledger ``spec`` names, opened once per event loop (closed by :func:`aclose_cached`)."""
    if isinstance(spec, Ledger):
        return spec
    found = cache.ledgers.get(spec)
    if found is None:
        if spec.startswith(DEV_STATE_DIR + os.sep):  # the runtime makes it too, maybe later
            await asyncio.to_thread(os.makedirs, DEV_STATE_DIR, exist_ok=True)
        found, opened = await connect_ledger(spec)
        if opened:
            cache.opened.push_async_callback(found.aclose)
        cache.ledgers[spec] = found
        logger.info("algenta-graph: ledger %s", describe_ledger(found))
    return found


async def build_graph(settings: ServerSettings) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The compiled graph for ``settings`` on the running event loop, built once and cached.

    One engine connection (MCP sessions, catalog) and one ledger (:func:`served_ledger`) per
    event loop and setting; a failed connection raises
    :class:`~algenta_graph.errors.EngineConnectionError` and caches nothing.
    The configuration's objects (model, embeddings, operator rule) are made off the event loop.
    """
    cache = _loop_cache()
    graph = cache.graphs.get(settings)
    if graph is not None:
        return graph
    async with cache.lock:
        graph = cache.graphs.get(settings)
        if graph is None:
            resolved = await asyncio.to_thread(resolve_config, settings.config)
            ledger = await _ledger(cache, served_ledger(settings, resolved.ledger))
            conn = await _connection(cache, settings, resolved)
            graph = await create_governed_agent(
                resolved.model,
                config=settings.config,
                connection=conn,
                embeddings=resolved.embeddings,
                authorize_operator=served_rule(resolved.authorize_operator),
                checkpointer=None,
                ledger=ledger,
            )
            graph = check_resumes(guard_records(graph))
            cache.graphs[settings] = graph
    return graph


async def aclose_cached() -> None:
    """Close the connections cached on the running event loop and forget its graphs."""
    loop = asyncio.get_running_loop()
    cache = _CACHES.pop(id(loop), None)
    if cache is None or cache.loop is not loop:
        return
    cache.graphs.clear()
    for conn in cache.connections.values():
        await conn.aclose()
    cache.connections.clear()
    cache.ledgers.clear()
    await cache.opened.aclose()


async def make_graph() -> CompiledStateGraph[Any, Any, Any, Any]:
    """The factory ``langgraph.json`` names: the governed graph for the current configuration.

    Compiled without a checkpointer or a store (the server supplies its own). The configuration
    (the ``ALGENTA_CONFIG`` file and the environment) is read on every call, off the event loop;
    the graph for each distinct setting is built once per event loop. Per-run settings travel
    in the run's context, which the graph itself reads.
    """
    return await build_graph(await asyncio.to_thread(ServerSettings.from_env))


# ---------------------------------------------------------------------------------------------
# start-up


def startup_check(environ: Mapping[str, str] | None = None) -> ServerSettings:
    """Check the configuration before the server serves anything; returns its settings.

    Reads and resolves it (secrets, import paths, the model), chooses the ledger
    (:func:`served_ledger`) and connects once to each extra server; an unreachable one is a
    warning naming its URL (the graph serves without it). Without an engine (``base_url =
    false``) it says so: the engine's gates are off.

    Raises:
        NoToolServers: no engine and no extra server (the server does not start).
        ConfigError: the configuration is wrong (the server does not start); every problem
            on its own line, naming the key and the file or variable.
        LedgerRequired: no ledger every process shares can be found (the server does not
            start); the message names what to set.
    """
    env = os.environ if environ is None else environ
    settings = ServerSettings.from_env(env)
    resolved = resolve_config(settings.config, environ=env)
    if settings.config.base_url is False:
        check_tool_sources(
            False,
            resolved.extra_servers,
            no_engine=f"base_url = false ({settings.config.source_of('base_url')})",
        )
        note = (
            f"algenta-graph: no engine: the engine's gates are off; the graph serves the tools "
            f"of {', '.join(sorted(resolved.extra_servers))} with its own gates"
        )
        print(note, file=sys.stderr, flush=True)
        logger.info("%s", note)
    chosen = served_ledger(settings, resolved.ledger, served_runtime(env))
    logger.info("algenta-graph: the ledger is %s", describe_ledger(chosen))
    if resolved.extra_servers:
        for name, why in _run_now(
            unreachable_servers(resolved.extra_servers, settings.config.connect_timeout)
        ).items():
            where = settings.config.source_of("extra_servers")
            message = (
                f"algenta-graph: warning: {where}: extra_servers.{name}: unreachable at {why}; "
                "the graph serves without its tools"
            )
            print(message, file=sys.stderr, flush=True)
            logger.warning("%s", message)
    source = settings.config.file or "no configuration file"
    logger.info("algenta-graph: configuration checked (%s)", source)
    return settings


def _run_now(coro: Any) -> Any:
    """Run ``coro`` to its end from synchronous code, in a thread of its own if a loop runs here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="algenta-graph-startup")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


if "langgraph_api" in sys.modules:  # imported by a LangGraph server: check before serving
    startup_check()
