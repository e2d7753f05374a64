"""``open_checkpointer("postgresql://...")`` against a real PostgreSQL server.

The saver is an ``AsyncPostgresSaver`` over a connection pool with the settings it requires;
its tables are set up once (many openers at once do not race); the pool is closed on exit; a
governed turn's receipt is read back by a second opener through :func:`read_thread_records`,
which reads from any saver.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import psycopg
import pytest
from guarantee_support import log_decision
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from mcp import ClientSession
from postgres_support import PostgresServer, postgres_server, postgres_url  # noqa: F401
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from algenta_graph._net import free_port
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.errors import CheckpointerError
from algenta_graph.graph import governed_agent
from algenta_graph.models import DemoChatModel
from algenta_graph.serving.checkpoint_reader import aread_thread_values, read_thread_records
from algenta_graph.serving.checkpointer import (
    is_postgres_url,
    open_checkpointer,
    redact_url,
    server_checkpointer,
)


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
    return {r[0] for r in rows}


def test_postgres_urls_are_recognised() -> None:
    assert is_postgres_url("postgresql://u@h/db")
    assert is_postgres_url(" POSTGRES://u@h/db")
    assert not is_postgres_url("runs.sqlite")
    assert not is_postgres_url(Path("postgresql://x"))  # a Path is always a file


async def test_a_url_opens_a_pooled_saver_sets_up_its_tables_and_closes_the_pool(
    postgres_url: str,  # noqa: F811
) -> None:
    assert _tables(postgres_url) == set()
    async with open_checkpointer(postgres_url, pool_size=3) as saver:
        assert isinstance(saver, AsyncPostgresSaver)
        pool = saver.conn
        assert isinstance(pool, AsyncConnectionPool)
        assert pool.max_size == 3 and not pool.closed
        assert pool.kwargs == {
            "autocommit": True,
            "prepare_threshold": 0,
            "row_factory": dict_row,
        }
        assert {"checkpoints", "checkpoint_blobs", "checkpoint_writes"} <= _tables(postgres_url)
        assert await saver.aget_tuple({"configurable": {"thread_id": "none"}}) is None
    assert pool.closed


async def test_many_openers_at_once_set_up_the_tables_once_without_racing(
    postgres_url: str,  # noqa: F811
) -> None:
    async def open_and_read() -> int:
        async with open_checkpointer(postgres_url, pool_size=1) as saver:
            return len([c async for c in saver.alist(None)])

    assert await asyncio.gather(*(open_and_read() for _ in range(8))) == [0] * 8
    with psycopg.connect(postgres_url) as conn:
        versions = [r[0] for r in conn.execute("SELECT v FROM checkpoint_migrations ORDER BY v")]
    assert versions == list(range(len(AsyncPostgresSaver.MIGRATIONS)))


async def test_a_reader_creates_nothing_and_names_a_database_without_checkpoints(
    postgres_url: str,  # noqa: F811
) -> None:
    with pytest.raises(CheckpointerError, match="holds no LangGraph checkpoints"):
        async with open_checkpointer(postgres_url, setup=False):
            pass
    assert _tables(postgres_url) == set()


async def test_an_unreachable_server_is_a_clear_error_without_the_password() -> None:
    url = f"postgresql://someone:hunter2@127.0.0.1:{free_port()}/nowhere"
    with pytest.raises(CheckpointerError) as caught:
        async with open_checkpointer(url):
            pass
    message = str(caught.value)
    assert "postgresql://someone:***@127.0.0.1" in message
    assert redact_url(url) in message
    assert "hunter2" not in message
    assert "check that the server runs" in message


async def test_the_server_checkpointer_opens_the_database_its_variable_names(
    postgres_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ALGENTA_CHECKPOINTER", raising=False)
    with pytest.raises(CheckpointerError, match="ALGENTA_CHECKPOINTER is not set"):
        async with server_checkpointer():
            pass
    monkeypatch.setenv("ALGENTA_CHECKPOINTER", postgres_url)
    async with server_checkpointer() as saver:
        assert isinstance(saver, AsyncPostgresSaver)
        pool = saver.conn
        assert isinstance(pool, AsyncConnectionPool) and not pool.closed
    assert pool.closed
    assert "checkpoints" in _tables(postgres_url)


async def test_a_governed_turn_on_postgres_is_read_back_by_another_opener(
    postgres_url: str,  # noqa: F811
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
    tmp_path: Path,
) -> None:
    async with mcp_session(engine.url) as session:
        decision_id = await log_decision(session, action="postgres-smoke")
        low = await log_decision(session, action="postgres-low", confidence=0.3)
    prompt = f"execute decision_id={decision_id} webhook_url={webhook.url}"
    escalate = f"execute decision_id={low} webhook_url={webhook.url}"
    async with (
        open_checkpointer(postgres_url) as saver,
        governed_agent(
            DemoChatModel(), base_url=engine.url, profile="execute", checkpointer=saver
        ) as graph,
    ):
        await graph.ainvoke(
            {"messages": [HumanMessage(prompt)]}, {"configurable": {"thread_id": "a"}}
        )
        out = await graph.ainvoke(
            {"messages": [HumanMessage(escalate)]}, {"configurable": {"thread_id": "b"}}
        )
        assert out.get("__interrupt__")
    async with open_checkpointer(postgres_url, setup=False) as saver:
        everything = await read_thread_records(saver)
        only_a = await read_thread_records(saver, "a")
        missing = await read_thread_records(saver, "nobody")
        values = await aread_thread_values(saver, "a")
    assert sorted(everything) == ["a", "b"]
    assert [r["decision_id"] for r in everything["a"]["receipts"]] == [decision_id]
    assert everything["a"]["denials"] == everything["a"]["operator_decisions"] == []
    assert everything["b"]["receipts"] == []
    assert [(d["decision_id"], d["gate"]) for d in everything["b"]["denials"]] == [
        (low, "confidence")
    ]
    assert only_a == {"a": everything["a"]}
    assert missing == {}
    assert values["a"]["receipts"] == everything["a"]["receipts"]
    assert any(decision_id in str(m.content) for m in values["a"]["messages"])

    # the same reader works on any saver: the SQLite file of the same turn
    db = tmp_path / "same.sqlite"
    async with mcp_session(engine.url) as session:
        other = await log_decision(session, action="sqlite-smoke")
    async with (
        open_checkpointer(db) as saver,
        governed_agent(
            DemoChatModel(), base_url=engine.url, profile="execute", checkpointer=saver
        ) as graph,
    ):
        text = f"execute decision_id={other} webhook_url={webhook.url}"
        await graph.ainvoke(
            {"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": "s"}}
        )
        records = await read_thread_records(saver)
    assert [r["decision_id"] for r in records["s"]["receipts"]] == [other]


def test_missing_binaries_fail_under_ci_and_skip_elsewhere_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import postgres_support

    monkeypatch.setattr(postgres_support, "find_bindir", lambda: None)
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match=r"apt-get install postgresql-15"):
        postgres_support.require_bindir()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match=r"apt-get install postgresql-15"):
        postgres_support.require_bindir()


def test_the_binaries_are_found_on_this_machine_image() -> None:
    import postgres_support

    bindir = postgres_support.find_bindir()
    if bindir is None:  # the harness's own verdict: skip here, fail under CI
        postgres_support.require_bindir()
    assert bindir is not None
    assert (bindir / "initdb").is_file() and (bindir / "postgres").is_file()


async def test_the_cli_runs_on_and_reads_a_postgres_store(
    postgres_server: PostgresServer,  # noqa: F811
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
) -> None:
    """A governed thread kept in PostgreSQL: ``receipts`` and ``--verify`` read it back
    (read-only); a database without the tables is one clear line and stays untouched."""
    from cli_support import assert_one_line_error, cli

    url = postgres_server.create_database()
    async with (
        open_checkpointer(url) as saver,  # the tables, as a first `run` creates them
        governed_agent(
            DemoChatModel(), base_url=engine.url, profile="execute", checkpointer=saver
        ) as graph,
    ):
        await graph.ainvoke(
            {"messages": [HumanMessage("recommend scenario=restock_inventory")]},
            {"configurable": {"thread_id": "pg-cli"}},
        )
    listing = cli("receipts", "--db", url, timeout=120)
    assert listing.returncode == 0, listing.stderr
    verified = cli("receipts", "--db", url, "--verify", timeout=120)
    assert verified.returncode == 0, verified.stderr
    assert "pg-cli: ok" in verified.stdout and "all chains intact" in verified.stdout
    empty = postgres_server.create_database()
    refused = cli("receipts", "--db", empty, timeout=120)
    assert_one_line_error(refused, "--db", code=1)
    assert _tables(empty) == set()  # the reader created nothing
