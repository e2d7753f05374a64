"""The reference engine: its ASGI app, and the engine on a free port in a background thread.

:func:`create_app` builds the app; :class:`ReferenceEngine` runs it. The app is the MCP
server (:mod:`~algenta_graph.engine.mcp_server`) at ``/mcp`` and the Algenta HTTP API
(:mod:`~algenta_graph.engine.api`) at ``/v1``, behind one
:class:`~algenta_graph.engine.guard.EngineGuard`.

>>> from algenta_graph.engine import ReferenceEngine
>>> with ReferenceEngine() as engine:                                 # doctest: +SKIP
...     print(engine.url)          # http://127.0.0.1:PORT/mcp, ready for any MCP client
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import weakref
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from algenta_graph._net import free_port
from algenta_graph._serve import BackgroundServer, BackgroundService
from algenta_graph.engine.api.app import api_app
from algenta_graph.engine.auth import API_KEY_IDENTITY, ROLES, ApiKey, KeyRing
from algenta_graph.engine.contract import DEFAULT_RELAXED
from algenta_graph.engine.dblock import DatabaseLock
from algenta_graph.engine.guard import ASGIApp, EngineGuard
from algenta_graph.engine.mcp_server import DENIAL_FORMS, EngineMCP, quiet_mcp_stream_logger
from algenta_graph.engine.policy import Policy
from algenta_graph.engine.registry import registry_names, registry_tools
from algenta_graph.engine.store import Store
from algenta_graph.engine.tools import GovernedTools

logger = logging.getLogger("algenta_graph.engine")


def create_app(
    *,
    store: Store,
    policy: Policy,
    host: str = "127.0.0.1",
    api_key: str | None = None,
    allow_webhook_hosts: Collection[str] = (),
    denials: str = "mcp-error",
    keys: KeyRing | None = None,
    relaxed: bool = DEFAULT_RELAXED,
) -> ASGIApp:
    """The engine's ASGI app: MCP at ``/mcp``, the HTTP API (approval included) at ``/v1``.

    A fresh one per server start.

    Args:
        store: the engine's store.
        policy: the execution policy.
        host: the host it serves on.
        api_key: one more key (identity ``api-key``, both roles, execute enabled), added to
            ``keys``.
        allow_webhook_hosts: the hosts besides loopback that may receive a webhook.
        denials: the wire form of a refused call (:data:`DENIAL_FORMS`).
        keys: the engine's API keys.
        relaxed: the mode (:data:`~algenta_graph.engine.contract.DEFAULT_RELAXED`).

    Raises:
        ValueError: ``denials`` is not one of :data:`DENIAL_FORMS`.
    """
    if denials not in DENIAL_FORMS:
        raise ValueError(f"denials must be one of {', '.join(DENIAL_FORMS)}, got {denials!r}")
    quiet_mcp_stream_logger()
    ring = combined_keys(keys, api_key)
    executors = [k for k in (ring.api_keys() if ring else []) if k.execute and k.has("agent")]
    if not relaxed and not executors:
        logger.warning(
            "strict mode and no API key with the agent role and execute enabled:"
            " execute_decision is refused for every caller (--keys-file, or --api-key)"
        )
    registry = registry_tools()
    governed = GovernedTools(
        store,
        policy,
        allow_webhook_hosts=allow_webhook_hosts,
        denials=denials,
        auth_required=bool(ring),
        registry_tool_count=sum(len(v) for v in registry_names().values()),
        relaxed=relaxed,
    )
    server = EngineMCP(
        store=store, governed=governed, registry=registry, denials=denials, host=host, keys=ring
    )
    app: ASGIApp = server.streamable_http_app()
    return EngineGuard(app, ring, api=api_app(store, governed.executor, ring))


def combined_keys(keys: KeyRing | None, api_key: str | None) -> KeyRing | None:
    """``keys`` plus the ``--api-key`` key; None when there is no key at all."""
    ring = KeyRing() if keys is None else keys.copy()
    if api_key:
        ring.add_token(api_key, ApiKey(API_KEY_IDENTITY, frozenset(ROLES), execute=True))
    return ring or None


class ReferenceEngine(BackgroundService):
    """The reference engine on ``host:port`` (a free port by default) in a background thread.

    State survives a restart on the same ``db`` file. While it serves, the engine holds the
    file's exclusive lock (``<db>.lock``): a second engine on the same file fails to start with
    :class:`~algenta_graph.engine.dblock.DatabaseInUse`. Use as a sync or async context
    manager, or call :meth:`start` / :meth:`stop` (it can be started again after a stop).

    Args:
        host: the host to serve on.
        port: the port (default: a free one).
        db: the SQLite file (default: a temporary one, removed when the object is collected).
        api_key: one more key with both roles and execute enabled.
        min_confidence: the policy's confidence minimum, in [0, 1].
        risk_floor: the policy's risk floor, >= 0.
        allow_webhook_hosts: the hosts besides loopback that may receive a webhook.
        denials: the wire form of a refused call
            (:data:`~algenta_graph.engine.mcp_server.DENIAL_FORMS`).
        relaxed: (default :data:`~algenta_graph.engine.contract.DEFAULT_RELAXED`) True keeps
            only the three gates on ``execute_decision``; False enforces the execute profile's
            requirements (keys with roles and execute enabled, a planned and logged decision,
            an out-of-band approval, ``idempotency_key`` and ``nonce``: see
            ``algenta_graph/engine/README.md``).
        keys: plaintext token -> :class:`~algenta_graph.engine.auth.ApiKey`, or a
            :class:`~algenta_graph.engine.auth.KeyRing`.
        keys_file: a JSON keys file (sha256 of each token).

    Raises:
        ValueError: ``denials``, ``relaxed``, ``port`` or a policy value out of range.
        KeyFileError: ``keys_file`` cannot be used.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        db: str | Path | None = None,
        api_key: str | None = None,
        min_confidence: float = 0.6,
        risk_floor: float = 0.5,
        allow_webhook_hosts: Collection[str] = (),
        denials: str = "mcp-error",
        relaxed: bool = DEFAULT_RELAXED,
        keys: KeyRing | Mapping[str, ApiKey] | None = None,
        keys_file: str | Path | None = None,
    ) -> None:
        if denials not in DENIAL_FORMS:
            raise ValueError(f"denials must be one of {', '.join(DENIAL_FORMS)}, got {denials!r}")
        if not isinstance(relaxed, bool):
            raise ValueError(f"relaxed must be True or False, got {relaxed!r}")
        if port is not None and (isinstance(port, bool) or not 1 <= int(port) <= 65535):
            raise ValueError(f"port must be in 1..65535, got {port!r}")
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.policy = Policy(min_confidence=min_confidence, risk_floor=risk_floor)
        self.api_key = api_key
        self.allow_webhook_hosts = tuple(allow_webhook_hosts)
        self.denials = denials
        self.relaxed = relaxed
        ring = keys if isinstance(keys, KeyRing) or keys is None else KeyRing.from_tokens(keys)
        if keys_file is not None:
            from_file = KeyRing.from_file(keys_file)
            ring = from_file if ring is None else ring.merged(from_file)
        self.keys = ring
        if db is None:
            tmp = tempfile.mkdtemp(prefix="algenta-engine-")
            weakref.finalize(self, shutil.rmtree, tmp, ignore_errors=True)
            db = Path(tmp) / "engine.db"
        self.db_path = Path(db)
        self.store = Store(self.db_path)
        self._lock = DatabaseLock(self.db_path)
        self._server: BackgroundServer | None = None

    @property
    def url(self) -> str:
        """The MCP endpoint, e.g. ``http://127.0.0.1:PORT/mcp``."""
        return f"http://{self.host}:{self.port}/mcp"

    def start(self) -> ReferenceEngine:
        """Serve in a background thread (no-op while running); returns the engine.

        Raises:
            DatabaseInUse: another engine serves the same database file.
        """
        if self.running:
            return self
        self._lock.acquire()  # DatabaseInUse when another engine serves this file
        try:
            app = create_app(
                store=self.store,
                policy=self.policy,
                host=self.host,
                api_key=self.api_key,
                allow_webhook_hosts=self.allow_webhook_hosts,
                denials=self.denials,
                keys=self.keys,
                relaxed=self.relaxed,
            )
            self._server = BackgroundServer(
                app, host=self.host, port=self.port, name=f"algenta-engine-{self.port}"
            )
            self._server.start()
        except BaseException:
            self._server = None
            self._lock.release()
            raise
        logger.info(
            "reference engine serving %s (db %s, %s)",
            self.url,
            self.db_path,
            "relaxed" if self.relaxed else "strict",
        )
        return self

    def stop(self) -> None:
        """Stop serving and release the database's lock."""
        super().stop()
        self._lock.release()

    @property
    def approve_url(self) -> str:
        """``http://host:port/v1/decision-plans/{plan_id}/approve`` (format ``plan_id``)."""
        return f"http://{self.host}:{self.port}/v1/decision-plans/{{plan_id}}/approve"

    def call_log(self) -> list[dict[str, Any]]:
        """Every tools/call the engine received, oldest first: name and arguments as sent."""
        return self.store.call_log()

    def executions(self, decision_id: str | None = None) -> list[dict[str, Any]]:
        """Executions (receipt fields + force, override_safety, metadata), oldest first."""
        return self.store.executions(decision_id)
