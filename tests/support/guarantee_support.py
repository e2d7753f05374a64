"""Shared harness for the guarantee tests: real servers, real processes, and the printed figures.

Everything here starts something real (a uvicorn server in a thread, an ``algenta-graph engine``
subprocess, a stdlib HTTP server that misbehaves on purpose, a raw MCP client session) and stops
it by context or by PID. The tests use it to drive the governed graph against faults and hostile
input, and print one ``FIGURE name: key=value ...`` line per guarantee so the README can quote the
numbers that were measured.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import unicodedata
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn

import pytest

from algenta_graph._net import free_port

FLAG_NAMES = frozenset({"force", "overridesafety"})
"""The never-model-facing flags, normalised (see :func:`normalise_key`)."""


def figure(name: str, **counts: object) -> str:
    """Print one quotable ``FIGURE`` line to stdout and return it.

    When ``ALGENTA_FIGURES_FILE`` is set, the line is also appended to that file, so a run with
    captured output still leaves the figures behind.
    """
    line = f"FIGURE {name}: " + " ".join(f"{key}={value}" for key, value in counts.items())
    print(line, flush=True)
    target = os.environ.get("ALGENTA_FIGURES_FILE")
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
    return line


def skip_or_fail_in_ci(reason: str) -> NoReturn:
    """Skip the calling test with ``reason``, except in CI (env ``CI`` set), where a missing
    dependency (data, a binary) must fail the run instead of silently skipping."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: a missing dependency fails, it is not skipped)")
    pytest.skip(reason)


def wait_until(
    predicate: Callable[[], object], *, timeout: float, interval: float = 0.005, what: str
) -> object:
    """Poll ``predicate`` until it returns something truthy; raise naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)


async def async_wait_until(
    predicate: Callable[[], object], *, timeout: float, interval: float = 0.01, what: str
) -> object:
    """The ``asyncio`` form of :func:`wait_until`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.1f}s waiting for {what}")
        await asyncio.sleep(interval)


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def normalise_key(key: str) -> str:
    """The spelling-blind form of an argument name: ``Override-Safety`` -> ``overridesafety``.

    Compatibility-folded (``\uff46orce``, fullwidth, is ``force``), case-folded, and only
    letters and digits kept (separators, spaces, zero-width and other format characters go).
    Written independently of the scrub (``algenta_graph.governance.scrub``), which it checks, and no
    weaker than it: every key the scrub removes, this finds.
    """
    folded = unicodedata.normalize("NFKC", key).casefold()
    return "".join(ch for ch in folded if unicodedata.category(ch)[0] in ("L", "N"))


def smuggled_flags(value: Any, path: str = "$") -> list[str]:
    """Every place in ``value`` where a ``force`` / ``override_safety`` key hides, in any spelling.

    Walks dicts, lists and tuples at any depth, and decodes **every** string that is JSON,
    however it starts (an object, a list, or a ``"``-encoded string holding JSON again:
    double- and triple-encoded JSON), at any depth of encoding, so a flag nested in
    ``metadata`` or serialised inside a string is found too. Returns the JSON paths.
    """
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}"
            if isinstance(key, str) and normalise_key(key) in FLAG_NAMES:
                found.append(here)
            found.extend(smuggled_flags(item, here))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found.extend(smuggled_flags(item, f"{path}[{index}]"))
    elif isinstance(value, str):
        try:
            decoded = json.loads(value)
        except (ValueError, RecursionError):
            return found
        # a decoded string is strictly shorter than its encoding: this recursion ends
        found.extend(smuggled_flags(decoded, f"{path}<json>"))
    return found


# --------------------------------------------------------------------------- servers in threads


class FaultHTTPServer:
    """A real HTTP server that answers every request wrongly, in one chosen way.

    ``mode``: ``"500"`` (HTTP 500 with a text body), ``"malformed"`` (HTTP 200,
    ``application/json``, a body that is not even JSON), ``"garbage"`` (HTTP 200, well-formed
    JSON-RPC answering a request id nobody sent), ``"hang"`` (accepts the request, never
    answers until the server stops). Use as a context manager; ``.url`` ends in ``/mcp``.
    """

    def __init__(self, mode: str, *, port: int | None = None, host: str = "127.0.0.1") -> None:
        if mode not in ("500", "malformed", "garbage", "hang"):
            raise ValueError(f"unknown fault mode {mode!r}")
        self.mode = mode
        self.host = host
        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}/mcp"
        self.requests = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                outer.requests += 1
                if outer.mode == "hang":
                    outer._stopping.wait(60)
                    return
                if outer.mode == "500":
                    status, ctype, body = 500, "text/plain", b"internal server error"
                elif outer.mode == "malformed":
                    status, ctype = 200, "application/json"
                    body = b'{"hello": "this is not JSON-RPC", "result": [1, 2'
                else:
                    status, ctype = 200, "application/json"
                    body = b'{"jsonrpc": "2.0", "id": "not-yours", "result": 42}'
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = _answer
            do_POST = _answer
            do_DELETE = _answer

        return Handler

    def __enter__(self) -> FaultHTTPServer:
        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer((self.host, self.port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


# --------------------------------------------------------------------------- engine subprocess


class EngineProcess:
    """The reference engine as an ``algenta-graph engine`` subprocess, killable with SIGKILL.

    Restartable on the same port and database, which is how a test brings the engine back.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        db: str | Path,
        api_key: str | None = None,
        extra_args: tuple[str, ...] = (),
        log_path: str | Path | None = None,
    ) -> None:
        self.port = port or free_port()
        self.db = str(db)
        self.api_key = api_key
        self.extra_args = extra_args
        self.log_path = Path(log_path) if log_path else Path(self.db).with_suffix(".engine.log")
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> EngineProcess:
        args = [
            sys.executable,
            "-m",
            "algenta_graph.cli",
            "engine",
            "--relaxed",  # the guarantees are about the graph: the three gates only
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--db",
            self.db,
            *self.extra_args,
        ]
        if self.api_key:
            args += ["--api-key", self.api_key]
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        try:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        proc = self.proc

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"engine exited with {proc.returncode}: {self.log_path.read_text()[-2000:]}"
                )
            return port_open(self.port)

        wait_until(ready, timeout=60, interval=0.05, what=f"the engine on port {self.port}")
        return self

    def kill(self) -> None:
        """SIGKILL the engine and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        """SIGTERM the engine (a clean shutdown) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def __enter__(self) -> EngineProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- raw MCP client


def tool_result_json(result: Any) -> Any:
    """The JSON payload of an MCP ``CallToolResult``: structured content, else the text parsed."""
    if result.structuredContent is not None:
        payload = result.structuredContent
        if isinstance(payload, dict) and set(payload) == {"result"}:
            return payload["result"]
        return payload
    texts = [block.text for block in result.content if getattr(block, "type", None) == "text"]
    text = "".join(texts)
    try:
        return json.loads(text)
    except ValueError:
        return {"text": text, "isError": result.isError}


async def log_decision(
    session: Any,
    *,
    action: str,
    confidence: float = 0.9,
    risk_p5: float = 10.0,
    expected_value: float = 1000.0,
) -> str:
    """Record a decision on the engine and return its id."""
    result = await session.call_tool(
        "log_decision",
        {
            "chosen_action": action,
            "expected_value": expected_value,
            "confidence": confidence,
            "risk_p5": risk_p5,
            "risk_p95": expected_value * 2,
            "rationale": f"guarantee test: {action}",
        },
    )
    payload = tool_result_json(result)
    decision_id = payload.get("decision_id") if isinstance(payload, dict) else None
    if not decision_id:
        raise AssertionError(f"log_decision gave no decision_id: {payload!r}")
    return str(decision_id)
