"""Which ledger a graph uses, chosen from its configuration, never from its saver's class
(``docs/ARCHITECTURE.md``, invariant 17; ``graph/factory.py``, ``ledger/choosing.py``).

A saver algenta-graph did not open from a path or URL (a subclass of ``AsyncSqliteSaver``, a
wrapper delegating to one, a subclass of ``InMemorySaver``) may keep its state where other
processes see it: the graph refuses to build without a ledger, naming what to set (or a
declared single process). Given one, two graphs (as two workers) on custom savers over one
SQLite file keep one answer per escalation: a copy answered the other way is refused by name
and completes the first answer; nothing is executed twice. The configuration's ``ledger``
(``ALGENTA_LEDGER``) and ``single_process`` (``ALGENTA_SINGLE_PROCESS``) are the same switches.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from deployment_savers import DelegatingSaver, UnknownSqliteSaver
from graph_support import (
    config,
    copy_thread,
    execute,
    log_decision,
    open_connection,
)
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command

from algenta_graph.config import load_config
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.errors import ConfigError, EscalationAlreadyDecided, LedgerRequired
from algenta_graph.graph import aclose_governed_agent, create_governed_agent
from algenta_graph.ledger import MemoryLedger
from algenta_graph.testing import OfflineConnection, ScriptedChatModel

OVERRIDE = {"action": "override", "operator": "ana", "reason": "committee approved"}
DECLINE = {"action": "decline", "operator": "bo", "reason": "too risky"}


def offline() -> Any:
    """A connection with no engine: the graph builds over it (nothing here calls a tool)."""
    return OfflineConnection()


class MemorySubclass(InMemorySaver):
    """An ``InMemorySaver`` subclass: it could keep its state anywhere (never taken for one)."""


def wrapped(inner: AsyncSqliteSaver) -> BaseCheckpointSaver[Any]:
    return DelegatingSaver(inner)


def subclassed(inner: AsyncSqliteSaver) -> BaseCheckpointSaver[Any]:
    return UnknownSqliteSaver(inner.conn)


CUSTOM = pytest.mark.parametrize("custom", [subclassed, wrapped], ids=["subclass", "wrapper"])


@pytest.fixture
async def sqlite_saver(tmp_path: Path) -> AsyncIterator[AsyncSqliteSaver]:
    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:
        yield saver


@CUSTOM
async def test_a_custom_saver_without_a_ledger_refuses_to_build_naming_what_to_set(
    custom: Any, sqlite_saver: AsyncSqliteSaver
) -> None:
    saver = custom(sqlite_saver)
    with pytest.raises(LedgerRequired) as refused:
        await create_governed_agent(connection=offline(), checkpointer=saver)
    message = str(refused.value)
    assert message.startswith(f"the checkpointer {type(saver).__name__} (")
    assert "ledger=" in message and "ALGENTA_LEDGER" in message
    assert "single_process=True" in message and "ALGENTA_SINGLE_PROCESS=1" in message


async def test_only_an_in_memory_saver_itself_or_none_keeps_the_ledger_in_this_process() -> None:
    with pytest.raises(LedgerRequired, match="the checkpointer MemorySubclass"):
        await create_governed_agent(connection=offline(), checkpointer=MemorySubclass())
    for saver in (InMemorySaver(), None):
        graph = await create_governed_agent(connection=offline(), checkpointer=saver)
        await aclose_governed_agent(graph)
    declared = await create_governed_agent(
        connection=offline(), checkpointer=MemorySubclass(), single_process=True
    )
    await aclose_governed_agent(declared)


def test_the_configuration_names_the_ledger_and_the_single_process(tmp_path: Path) -> None:
    file = tmp_path / "agent.toml"
    file.write_text('ledger = "shared.sqlite"\nsingle_process = true\n')
    config = load_config(file, environ={})
    assert (config.ledger, config.single_process) == ("shared.sqlite", True)
    env = {"ALGENTA_LEDGER": "postgresql://u:pw@db/x", "ALGENTA_SINGLE_PROCESS": "0"}
    from_env = load_config(file, environ=env)
    assert from_env.single_process is False
    assert from_env.source_of("ledger") == "environment variable ALGENTA_LEDGER"
    from algenta_graph.config.resolving import ledger_spec

    assert ledger_spec(from_env, env) == "postgresql://u:pw@db/x"  # a secret: only from there
    with pytest.raises(ConfigError, match="ALGENTA_SINGLE_PROCESS: single_process: must be 1"):
        load_config(file, environ={"ALGENTA_SINGLE_PROCESS": "maybe"})
    file.write_text('ledger = "postgresql://u:secret@db/x"\n')
    with pytest.raises(ConfigError, match="a password in the URL is a secret"):
        load_config(file, environ={})


@CUSTOM
async def test_a_configured_ledger_builds_the_graph_on_any_saver(
    custom: Any, sqlite_saver: AsyncSqliteSaver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALGENTA_LEDGER", str(tmp_path / "ledger.sqlite"))
    graph = await create_governed_agent(
        connection=offline(), checkpointer=custom(sqlite_saver), config=load_config()
    )
    await aclose_governed_agent(graph)
    assert (tmp_path / "ledger.sqlite").is_file()


@CUSTOM
async def test_two_graphs_on_custom_savers_with_one_ledger_keep_one_answer(
    custom: Any, engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """As two workers: each its own custom saver on one SQLite file and the ledger there. A
    copy answered the other way in the second: refused naming the first's operator, which the
    copy's records complete; the decision is never delivered."""
    db = tmp_path / "cp.sqlite"
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
        async with (
            AsyncSqliteSaver.from_conn_string(str(db)) as one,
            AsyncSqliteSaver.from_conn_string(str(db)) as two,
        ):
            model = ScriptedChatModel(replies=[execute(decision, webhook.url, "c1"), "ok", "ok"])
            east = await create_governed_agent(
                model, connection=conn, checkpointer=custom(one), ledger=str(db)
            )
            west = await create_governed_agent(
                ScriptedChatModel(replies=["ok", "ok"]),
                connection=conn,
                checkpointer=custom(two),
                ledger=str(db),
            )
            try:
                await east.ainvoke({"messages": [("user", "go")]}, config("orig"))
                await copy_thread(one, "orig", "copy")
                await east.ainvoke(Command(resume=DECLINE), config("orig"))
                with pytest.raises(
                    EscalationAlreadyDecided, match=r"by bo \(decline in thread orig"
                ):
                    await west.ainvoke(Command(resume=OVERRIDE), config("copy"))
                copied = (await west.aget_state(config("copy"))).values
            finally:
                await aclose_governed_agent(east)
                await aclose_governed_agent(west)
    [decided] = copied["operator_decisions"]
    assert (decided["operator"], decided["action"], decided["answered_in_thread"]) == (
        "bo",
        "decline",
        "orig",
    )
    assert engine.executions(decision) == [] and webhook.received == []


async def test_every_governance_node_holds_the_graphs_one_ledger_never_the_savers() -> None:
    from algenta_graph.topology import GOVERNANCE_NODES

    mine = MemoryLedger()
    graph = await create_governed_agent(
        connection=offline(), checkpointer=MemorySubclass(), ledger=mine
    )
    try:
        held = {name: graph.nodes[name].bound.afunc.ledger for name in GOVERNANCE_NODES}  # type: ignore[attr-defined]
    finally:
        await aclose_governed_agent(graph)  # closes nothing of the caller's
    assert set(held) == set(GOVERNANCE_NODES) and all(ledger is mine for ledger in held.values())


async def test_the_escalations_command_expires_in_the_ledger_it_is_given(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """``algenta-graph escalations --expire`` chooses its ledger as the graph does: ``--ledger``,
    else ``ALGENTA_LEDGER``, else the store's own database; the expiry is claimed there only."""
    from datetime import datetime, timedelta, timezone

    from cli_support import cli
    from graph_support import agent

    from algenta_graph.governance.escalations import EscalationSettings

    db, elsewhere = tmp_path / "cp.sqlite", tmp_path / "ledger.sqlite"
    settings = EscalationSettings(expires_after={"confidence": timedelta(minutes=5)})
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
        replies = [execute(decision, webhook.url, "c1"), "done"]
        async with agent(conn, db, replies, escalation=settings) as (graph, _):
            await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
    later = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()

    def states(*ledger: str) -> set[str]:
        listed = cli("escalations", "--db", str(db), "--json", "--now", later, *ledger)
        assert listed.returncode == 0, listed.stderr
        return {json.loads(line)["state"] for line in listed.stdout.splitlines()}

    expired = cli(
        "escalations", "--db", str(db), "--expire", "--now", later, "--ledger", str(elsewhere)
    )
    assert expired.returncode == 0 and "1 escalation(s) expired now" in expired.stderr
    assert states("--ledger", str(elsewhere)) == {"expired"}
    assert states() == {"overdue"}  # the store's own ledger never saw it


async def test_a_graph_built_by_hand_without_a_ledger_refuses_a_shared_saver_before_sending(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """``build_governed_graph`` compiled by hand and given no ledger: on a saver other processes
    may share (an ``AsyncSqliteSaver`` file) the run is refused naming ``build_governed_graph``
    before the governed call is sent; on an ``InMemorySaver`` it runs with this process's
    ledger; given an open ledger it runs on the shared saver. A call is never sent unguarded."""
    from algenta_graph.graph import build_governed_graph
    from algenta_graph.ledger import open_ledger

    gates = {"budgets": [{"tool": "*.execute_decision", "thread_limit": 3}]}
    async with open_connection(engine) as conn:
        decisions = [await log_decision(conn) for _ in range(3)]

        def graph(decision: str, **options: Any) -> Any:
            model = ScriptedChatModel(replies=[execute(decision, webhook.url, "c1"), "done"])
            return build_governed_graph(conn, model, tool_gates=gates, **options)

        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as shared:
            with pytest.raises(LedgerRequired, match="build_governed_graph") as refused:
                await (
                    graph(decisions[0])
                    .compile(checkpointer=shared)
                    .ainvoke({"messages": [("user", "go")]}, config("t"))
                )
            assert "the checkpointer AsyncSqliteSaver" in str(refused.value)

            async with open_ledger(str(tmp_path / "ledger.sqlite")) as ledger:
                built = graph(decisions[1], ledger=ledger).compile(checkpointer=shared)
                await built.ainvoke({"messages": [("user", "go")]}, config("t2"))
        alone = graph(decisions[2]).compile(checkpointer=InMemorySaver())
        await alone.ainvoke({"messages": [("user", "go")]}, config("t3"))
    assert len(engine.executions(decisions[0])) == 0
    assert len(engine.executions(decisions[1])) == 1
    assert len(engine.executions(decisions[2])) == 1
