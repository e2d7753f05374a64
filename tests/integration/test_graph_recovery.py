"""Crash recovery (docs/ARCHITECTURE.md, invariant 5): a delivery whose checkpoint was never
written.

The checkpointer below fails exactly like a process dying after the webhook was delivered and
before the step's checkpoint reached disk: every write carrying the receipt is refused. A new
graph (new connection, new saver on the same SQLite file) then resumes the thread: it re-runs
``governed_tool``, the engine's idempotency gate denies the repeat, and the graph recognises
its own earlier delivery through ``get_decision`` and records the engine's receipt instead of
a denial. The webhook is never called twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from graph_support import config, execute, log_decision, open_connection
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.errors import EscalationAlreadyDecided
from algenta_graph.graph import create_governed_agent
from algenta_graph.testing import ScriptedChatModel

pytestmark = pytest.mark.timeout(120)


class SimulatedCrash(RuntimeError):
    pass


class CrashBeforeReceiptIsSaved(AsyncSqliteSaver):
    """Refuses every checkpoint write that would persist a receipt."""

    async def aput_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        if any(channel == "receipts" and value for channel, value in writes):
            raise SimulatedCrash("process died before the receipt was checkpointed")
        await super().aput_writes(config, writes, task_id, task_path)

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if checkpoint["channel_values"].get("receipts"):
            raise SimulatedCrash("process died before the receipt was checkpointed")
        return await super().aput(config, checkpoint, metadata, new_versions)


async def test_delivery_lost_between_webhook_and_checkpoint_is_recovered(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    db = tmp_path / "cp.sqlite"
    async with open_connection(engine) as conn:
        decision = await log_decision(conn)
        replies = [execute(decision, webhook.url, "c1"), "delivered"]
        async with CrashBeforeReceiptIsSaved.from_conn_string(str(db)) as saver:
            graph = await create_governed_agent(
                ScriptedChatModel(replies=replies),
                connection=conn,
                checkpointer=saver,
                single_process=True,
            )
            with pytest.raises(SimulatedCrash):
                await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
    assert len(webhook.received) == 1  # delivered ...
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        lost = await saver.aget_tuple(config("t"))
        assert lost is not None and not lost.checkpoint["channel_values"].get("receipts")

    # a new process: new connection, new saver, same file; resume the thread
    async with open_connection(engine) as conn2, AsyncSqliteSaver.from_conn_string(str(db)) as s2:
        graph2 = await create_governed_agent(
            ScriptedChatModel(replies=["delivered"]),  # the tool call is already checkpointed
            connection=conn2,
            checkpointer=s2,
            single_process=True,
        )
        assert (await graph2.aget_state(config("t"))).next == ("governed_tool",)
        out = await graph2.ainvoke(None, config("t"))
    assert len(webhook.received) == 1  # ... exactly once
    [receipt] = out["receipts"]
    assert receipt["decision_id"] == decision and receipt["source"] == "recovered"
    assert receipt["execution_status"] == "delivered"
    assert out["denials"] == []
    assert len(engine.executions(decision)) == 1
    calls = [c for c in engine.call_log() if c["name"] == "execute_decision"]
    assert len(calls) == 2  # the repeat reached the engine and its gate held


async def test_another_threads_delivery_is_not_claimed(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    async with open_connection(engine) as conn:
        decision = await log_decision(conn)
        replies = [execute(decision, webhook.url, "c1"), "ok", execute(decision, webhook.url, "c1")]
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:
            graph = await create_governed_agent(
                ScriptedChatModel(replies=[*replies, "denied"]),
                connection=conn,
                checkpointer=saver,
                single_process=True,
            )
            await graph.ainvoke({"messages": [("user", "go")]}, config("owner"))
            out = await graph.ainvoke({"messages": [("user", "go")]}, config("other"))
    assert out["receipts"] == []
    assert out["denials"][0]["gate"] == "idempotency"


async def test_override_delivered_before_a_crash_is_not_delivered_twice(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    from langgraph.types import Command

    db = tmp_path / "cp.sqlite"
    resume: Command[str] = Command(
        resume={"action": "override", "operator": "ana", "reason": "approved"}
    )
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
        replies = [execute(decision, webhook.url, "c1")]
        async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
            graph = await create_governed_agent(
                ScriptedChatModel(replies=replies),
                connection=conn,
                checkpointer=saver,
                single_process=True,
            )
            await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
        async with CrashBeforeReceiptIsSaved.from_conn_string(str(db)) as saver:
            graph = await create_governed_agent(
                ScriptedChatModel(replies=[]),
                connection=conn,
                checkpointer=saver,
                single_process=True,
            )
            with pytest.raises(SimulatedCrash):
                await graph.ainvoke(resume, config("t"))
    assert len(webhook.received) == 1  # the override was delivered, its checkpoint lost
    async with open_connection(engine) as conn2, AsyncSqliteSaver.from_conn_string(str(db)) as s2:
        graph2 = await create_governed_agent(
            ScriptedChatModel(replies=["done"]),
            connection=conn2,
            checkpointer=s2,
            single_process=True,
        )
        assert (await graph2.aget_state(config("t"))).interrupts  # still waiting
        # the answer given before the crash is completed, and its repeat told so
        with pytest.raises(EscalationAlreadyDecided, match="already decided by ana"):
            await graph2.ainvoke(resume, config("t"))
        out = (await graph2.aget_state(config("t"))).values
    assert len(webhook.received) == 1 and len(engine.executions(decision)) == 1
    [receipt] = out["receipts"]
    assert receipt["safety_overridden"] is True and receipt["source"] == "operator"
    assert out["operator_decisions"][0]["result"] == "receipt"
