"""Local servers in a background thread: uvicorn on a port, and the context-manager protocol.

Used by :class:`~algenta_graph.engine.ReferenceEngine`,
:class:`~algenta_graph.engine.WebhookReceiver`, :class:`~algenta_graph.catalog_server.CatalogServer`
and the tests' fixture servers; the CLI runs uvicorn in the foreground instead.
"""

from __future__ import annotations

import asyncio
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn
from typing_extensions import Self

from algenta_graph._net import free_port


class BackgroundServer:
    """One uvicorn server on ``host:port`` (a free port when ``port`` is None) in a thread."""

    def __init__(
        self,
        app: Any,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        name: str = "server",
        graceful_shutdown_seconds: float = 2.0,
    ) -> None:
        self.host = host
        self.port = port if port is not None else free_port(host)
        self._config = uvicorn.Config(
            app,
            host=host,
            port=self.port,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=int(max(1, graceful_shutdown_seconds)),
        )
        self._server = uvicorn.Server(self._config)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            self._server.run()
        except BaseException as exc:  # surfaced by start()
            self._error = exc

    def start(self, timeout: float = 20.0) -> None:
        """Start serving; return once the socket listens (raise if it cannot start)."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(
                    f"server on {self.host}:{self.port} exited during startup"
                    " (is the port already in use?)"
                ) from self._error
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"server on {self.host}:{self.port} did not start in {timeout}s")
            time.sleep(0.02)

    def stop(self, timeout: float = 10.0) -> None:
        """Ask uvicorn to exit and wait for the thread (open connections are closed)."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
            if self._thread.is_alive():
                self._server.force_exit = True
                self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and self._server.started


class ServiceContext:
    """Sync and async context manager over ``start()`` (returning ``self``) and ``stop()``.

    The async form runs both in a worker thread, so an event loop is never blocked.
    """

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)


class BackgroundService(ServiceContext):
    """A :class:`ServiceContext` over one :class:`BackgroundServer`.

    ``start()`` makes and starts it in ``_server``; ``stop()`` stops it, joins its thread and
    drops it.
    """

    _server: BackgroundServer | None = None

    @property
    def running(self) -> bool:
        """Whether the server thread is serving."""
        return self._server is not None and self._server.running

    def stop(self) -> None:
        """Stop serving and join the server thread."""
        if self._server is not None:
            self._server.stop()
            self._server = None
