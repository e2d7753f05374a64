"""A real HTTP webhook receiver for tests, notebooks and the demo.

It records the JSON body of every POST it receives and answers:

- ``POST /hook`` (``.url``): 200 ``{"ok": true}``;
- ``POST /status/<code>`` (``.url_for_status(code)``): that HTTP status;
- ``POST /delay/<seconds>`` (``.url_for_delay(s)``): 200 after sleeping ``s`` seconds.

:class:`SilentHost` is the opposite: a port that never answers a connection (a timing-out
upstream), so nothing can be sent to it.

With ``log_path`` every request is also appended to a JSONL file
(``{"path", "body", "received_at"}`` per line), so another process can see what arrived:
:func:`read_log` reads it back.

>>> with WebhookReceiver() as hook:                                   # doctest: +SKIP
...     httpx.post(hook.url, json={"decision_id": "dec_1"})
...     hook.received
[{'decision_id': 'dec_1'}]
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from algenta_graph._serve import BackgroundServer, ServiceContext
from algenta_graph.engine.store.base import utc_now

MAX_DELAY_SECONDS = 120.0


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """Every request recorded in a receiver's JSONL log: ``{"path", "body", "received_at"}``."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


class WebhookReceiver(ServiceContext):
    """Serve the webhook endpoints on ``host:port`` (a free port by default) in a thread.

    Use as a sync or async context manager, or call :meth:`start` / :meth:`stop`.

    Args:
        host: the host to serve on.
        port: the port (default: a free one).
        log_path: a JSONL file every request is appended to (:func:`read_log` reads it).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: str | Path | None = None,
    ) -> None:
        self.host = host
        self.log_path = Path(log_path) if log_path is not None else None
        self._requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        app = Starlette(
            routes=[
                Route("/hook", self._ok, methods=["POST"]),
                Route("/status/{code:int}", self._status, methods=["POST"]),
                Route("/delay/{seconds:float}", self._delay, methods=["POST"]),
            ]
        )
        self._server = BackgroundServer(app, host=host, port=port, name="webhook-receiver")
        self.port = self._server.port

    # -- endpoints -------------------------------------------------------------------------

    async def _record(self, request: Request) -> None:
        """Keep one request (and append it to the log file, if any)."""
        raw = await request.body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = {"_unparsed": raw.decode(errors="replace")}
        entry = {"path": request.url.path, "body": body, "received_at": utc_now()}
        with self._lock:
            self._requests.append(entry)
            if self.log_path is not None:
                with self.log_path.open("a") as fh:
                    fh.write(json.dumps(entry) + "\n")

    async def _ok(self, request: Request) -> JSONResponse:
        await self._record(request)
        return JSONResponse({"ok": True})

    async def _status(self, request: Request) -> Response:
        await self._record(request)
        code = int(request.path_params["code"])
        if not 200 <= code <= 599:
            return JSONResponse({"error": f"status {code} out of range"}, status_code=400)
        if code in (204, 205, 304):  # no body allowed
            return Response(status_code=code)
        return JSONResponse({"status": code}, status_code=code)

    async def _delay(self, request: Request) -> JSONResponse:
        await self._record(request)
        seconds = min(float(request.path_params["seconds"]), MAX_DELAY_SECONDS)
        await asyncio.sleep(seconds)
        return JSONResponse({"ok": True, "delayed": seconds})

    # -- addresses and records -------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the receiver."""
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """POST target that answers 200."""
        return f"{self.base_url}/hook"

    def url_for_status(self, code: int) -> str:
        """POST target that answers HTTP ``code``."""
        return f"{self.base_url}/status/{int(code)}"

    def url_for_delay(self, seconds: float) -> str:
        """POST target that answers 200 after ``seconds``."""
        return f"{self.base_url}/delay/{float(seconds):g}"

    @property
    def received(self) -> list[dict[str, Any]]:
        """The JSON bodies received so far, in arrival order (every path)."""
        with self._lock:
            return [r["body"] for r in self._requests]

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request so far: ``{"path", "body", "received_at"}``."""
        with self._lock:
            return [dict(r) for r in self._requests]

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> WebhookReceiver:
        """Serve in a background thread; returns the receiver."""
        self._server.start()
        return self

    def stop(self) -> None:
        """Stop serving (what it received stays readable)."""
        self._server.stop()


class SilentHost:
    """A TCP port on ``host`` that never answers (a timing-out upstream, for real).

    A listening socket nothing accepts, whose accept queue is kept full, so a client's
    connection attempt gets no answer until it times out, and no request is ever sent.

    Args:
        host: the host to listen on.
        probe_seconds: how long a probe connection waits before the queue counts as full.

    Raises:
        RuntimeError: the accept queue could not be filled.

    >>> with SilentHost() as silent:                                   # doctest: +SKIP
    ...     httpx.post(silent.url, timeout=1)   # httpx.ConnectTimeout after 1 s
    """

    def __init__(self, host: str = "127.0.0.1", *, probe_seconds: float = 0.2) -> None:
        self.host = host
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind((host, 0))
        self._listener.listen(0)
        self.port: int = self._listener.getsockname()[1]
        self._fillers: list[socket.socket] = []
        # Fill the accept queue: connect until a connection attempt is no longer answered.
        for _ in range(16):
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probe.settimeout(probe_seconds)
            try:
                probe.connect((host, self.port))
            except TimeoutError:
                probe.close()
                return
            self._fillers.append(probe)
        self.close()
        raise RuntimeError(f"could not fill the accept queue of {host}:{self.port}")

    @property
    def url(self) -> str:
        """A webhook URL on the silent port."""
        return f"http://{self.host}:{self.port}/hook"

    def close(self) -> None:
        """Close the port and its queued connections."""
        for s in self._fillers:
            s.close()
        self._fillers.clear()
        self._listener.close()

    def __enter__(self) -> SilentHost:
        """The silent host itself."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close it."""
        self.close()
