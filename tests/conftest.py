"""Shared pytest fixtures: a real reference engine, a real webhook receiver, an MCP session.

- ``engine``: a :class:`ReferenceEngine` on a free port with its SQLite file in ``tmp_path``,
  stopped after the test.
- ``start_engine(**options)``: start more engines (any ``ReferenceEngine`` option; ``db``
  defaults to a fresh file in ``tmp_path``); every one is stopped after the test.
- ``webhook``: a :class:`WebhookReceiver` on a free port (JSONL log in ``tmp_path``).
- ``mcp_session(url, api_key=None)``: an async context manager yielding an initialised plain
  ``mcp.ClientSession`` over streamable HTTP.

The helper modules live in ``tests/support`` (put on ``sys.path`` here, so a test imports them
by name: ``from graph_support import agent``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from algenta_graph.engine import ReferenceEngine, WebhookReceiver

SUPPORT = Path(__file__).resolve().parent / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))


@pytest.fixture
def start_engine(tmp_path: Path) -> Iterator[Callable[..., ReferenceEngine]]:
    started: list[ReferenceEngine] = []

    def start(**options: Any) -> ReferenceEngine:
        options.setdefault("db", tmp_path / f"engine-{len(started)}.sqlite")
        # tests about something else than the execute requirements run the engine relaxed
        # (the three gates only); tests/test_engine_strict.py asks for strict explicitly
        options.setdefault("relaxed", True)
        engine = ReferenceEngine(**options).start()
        started.append(engine)
        return engine

    yield start
    for engine in reversed(started):
        engine.stop()


@pytest.fixture
def engine(start_engine: Callable[..., ReferenceEngine]) -> ReferenceEngine:
    return start_engine()


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[WebhookReceiver]:
    with WebhookReceiver(log_path=tmp_path / "webhook.jsonl") as receiver:
        yield receiver


@contextlib.asynccontextmanager
async def _mcp_session(url: str, api_key: str | None = None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as client,
        streamable_http_client(url, http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@pytest.fixture
def mcp_session() -> Callable[..., contextlib.AbstractAsyncContextManager[ClientSession]]:
    return _mcp_session
