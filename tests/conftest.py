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

The tier of a test is the directory it sits in (``TIERS``), set here as its marker; no test
file carries one, and a test file outside these directories is an error:

- ``unit``: in-process, no server (``unit/``, ``retrieval/``); ``unit/governance/`` is what
  mutation testing runs (``[tool.mutmut]`` in ``pyproject.toml``);
- ``integration``: a real engine, PostgreSQL, a stand-in server or a CLI subprocess, seconds;
- ``slow``: the guarantees, ``langgraph dev``, PostgreSQL under load, the README and notebooks.

``pytest -m "not slow"`` is the fast tier; ``pytest -n auto --dist loadfile`` (the README's
command, CI) runs everything, a file at a time on each core.
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

HERE = Path(__file__).resolve().parent
SUPPORT = HERE / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

TIERS = {
    "unit": "unit",  # in-process: the governance core (unit/governance), contract, audit, ...
    "retrieval": "unit",  # the tool index, the native tokenizer, the recall floors
    "support": "unit",  # the helpers' own docstring examples
    "integration": "integration",  # the graph (and the served factory) on a real engine
    "engine": "integration",  # the reference engine, in-process and as a subprocess
    "cli": "integration",  # the algenta-graph command as a subprocess
    "providers": "integration",  # the real provider clients against local stand-ins
    "guarantees": "slow",  # the guarantees (FIGURE lines): crashes, races, faults, fuzzing
    "served": "slow",  # langgraph dev
    "browser": "slow",  # the operator inbox in headless Chromium, on langgraph dev
    "postgres": "slow",  # PostgreSQL under load, served, and the CLI on it
    "deployments": "slow",  # every guarantee on every deployment shape (served, library)
    "docs": "slow",  # the README's snippets and the notebooks
}
"""Each directory of ``tests/`` and the tier marker of every test in it."""
TIER_MARKERS = frozenset(TIERS.values())


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            where = item.path.resolve().relative_to(HERE).parts
        except ValueError:  # the package's docstring examples
            item.add_marker("unit")
            continue
        carried = TIER_MARKERS & {mark.name for mark in item.iter_markers()}
        if carried:
            raise pytest.UsageError(
                f"{item.nodeid}: a test file carries no tier marker ({', '.join(sorted(carried))}):"
                " the tier is its directory's (TIERS in tests/conftest.py)"
            )
        tier = TIERS.get(where[0]) if len(where) > 1 else None
        if tier is None:
            raise pytest.UsageError(
                f"{item.nodeid}: a test lives in one of the tier directories of tests/"
                f" ({', '.join(sorted(TIERS))}; TIERS in tests/conftest.py)"
            )
        item.add_marker(tier)


@pytest.fixture
def start_engine(tmp_path: Path) -> Iterator[Callable[..., ReferenceEngine]]:
    started: list[ReferenceEngine] = []

    def start(**options: Any) -> ReferenceEngine:
        options.setdefault("db", tmp_path / f"engine-{len(started)}.sqlite")
        # tests about something else than the execute requirements run the engine relaxed
        # (the three gates only); tests/engine/test_strict.py asks for strict explicitly
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
