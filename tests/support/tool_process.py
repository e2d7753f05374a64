"""A real MCP tool server in a process of its own, to be stopped (SIGTERM) or killed mid-call.

``python tool_process.py PORT ANSWERS`` serves FastMCP over streamable HTTP with
``refund(account_id, amount)``, which prints ``started <account_id>`` to its stdout, waits
``HOLD_SECONDS`` and prints ``ran <account_id>``: a test starts a call, waits for ``started`` in
the log (:meth:`ToolProcess.wait_started`), then signals the process while the call is in
flight. ``ANSWERS`` is ``sse`` (FastMCP's defaults: sessions, each answer a stream of
server-sent events), ``resumable`` (the same with an event store: events carry ids, and a
client resumes a stream that ended early) or ``json`` (stateless, each answer one JSON body).
:func:`tool_process` runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOLD_SECONDS = 5.0
"""How long ``refund`` runs: long enough for a test to signal the server meanwhile."""


@dataclass
class ToolProcess:
    """A running tool server: its process, its URL and its log."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def connection(self) -> dict[str, Any]:
        """Its ``extra_servers`` entry."""
        return {"transport": "streamable_http", "url": self.url}

    def lines(self) -> list[str]:
        """What the server printed so far."""
        return self.log.read_text(errors="replace").splitlines()

    async def wait_started(self, account: str, seconds: float = 60.0) -> None:
        """Wait until ``refund(account)`` is running in the server."""
        for _ in range(int(seconds / 0.05)):
            if f"started {account}" in self.lines():
                return
            assert self.proc.poll() is None, self.log.read_text()
            await asyncio.sleep(0.05)
        raise AssertionError(f"refund({account}) never started: {self.log.read_text()}")

    def stop(self, how: signal.Signals) -> int:
        """Send ``how`` and wait for the process to exit; its exit code."""
        self.proc.send_signal(how)
        return self.proc.wait(timeout=30)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def tool_process(port: int, log: Path, answers: str = "sse") -> Iterator[ToolProcess]:
    """Run this module as a server on ``port`` (``answers``: ``sse`` or ``json``), logging to
    ``log``; kill it afterwards."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-u", __file__, str(port), answers],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not _listening(port):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the tool server did not start"
            time.sleep(0.05)
        yield ToolProcess(proc, f"http://127.0.0.1:{port}/mcp", log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def _serve(port: int, answers: str) -> None:
    from mcp.server.fastmcp import FastMCP
    from mcp.server.streamable_http import EventCallback, EventMessage, EventStore

    class Events(EventStore):
        """Every event kept in memory, in order (what resuming a stream replays)."""

        def __init__(self) -> None:
            self.events: list[tuple[str, str, Any]] = []

        async def store_event(self, stream_id: str, message: Any) -> str:
            event_id = str(len(self.events) + 1)
            self.events.append((event_id, stream_id, message))
            return event_id

        async def replay_events_after(
            self, last_event_id: str, send_callback: EventCallback
        ) -> str | None:
            stream = next((s for e, s, _ in self.events if e == last_event_id), None)
            for event_id, stream_id, message in self.events:
                if stream_id == stream and int(event_id) > int(last_event_id) and message:
                    await send_callback(EventMessage(message, event_id))
            return stream

    json_answers = answers == "json"
    mcp = FastMCP(
        "crm",
        host="127.0.0.1",
        port=port,
        log_level="WARNING",
        stateless_http=json_answers,
        json_response=json_answers,
        event_store=Events() if answers == "resumable" else None,
    )

    @mcp.tool()
    async def refund(account_id: str, amount: float) -> dict[str, Any]:
        """Refund an amount of money to a customer's card."""
        print(f"started {account_id}", flush=True)
        await asyncio.sleep(HOLD_SECONDS)
        print(f"ran {account_id}", flush=True)
        return {"refunded": amount, "account": account_id}

    mcp.run(transport="streamable-http")


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2])
