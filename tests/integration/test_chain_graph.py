"""The chain on the real governed graph, wired the way the lead will wire it.

The governed tool node's update and each denial handler's ``Command.update`` pass through
:func:`algenta_graph.audit.chain.seal` in the nodes themselves. A real reference engine; receipts,
denials, an override and a decline; a resume in a fresh graph over the same checkpoint file; then
:func:`verify_audit` from the file, with ``ALGENTA_AUDIT_KEY`` set, and a record forged past the
nodes (no key) named.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from graph_support import agent, config, execute, log_decision, open_connection
from langgraph.types import Command

from algenta_graph.audit.chain import ENV_AUDIT_KEY, chain_head, link_hash
from algenta_graph.audit.history import verify_audit
from algenta_graph.engine import ReferenceEngine, WebhookReceiver

pytestmark = pytest.mark.timeout(180)

OVERRIDE = {"action": "override", "operator": "ana", "reason": "committee approved"}
DECLINE = {"action": "decline", "operator": "bo", "reason": "too risky"}


async def test_a_governed_thread_verifies_from_its_checkpoint_file(
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV_AUDIT_KEY, "audit-key")
    db = tmp_path / "cp.sqlite"
    async with open_connection(engine) as conn:
        sure = await log_decision(conn, confidence=0.9)
        shaky = await log_decision(conn, confidence=0.3)
        risky = await log_decision(conn, risk_p5=-0.9)
        replies = [
            execute(sure, webhook.url, "c1"),
            "executed",
            execute(shaky, webhook.url, "c2"),
            "overridden",
            execute(risky, webhook.url, "c3"),
            "declined",
        ]
        async with agent(conn, db, replies) as (graph, _):
            await graph.ainvoke({"messages": [("user", "one")]}, config("t"))
            await graph.ainvoke({"messages": [("user", "two")]}, config("t"))
            await graph.ainvoke(Command(resume=OVERRIDE), config("t"))
            await graph.ainvoke({"messages": [("user", "three")]}, config("t"))
            pending = await graph.aget_state(config("t"))
            assert pending.next == ("denial_handler_risk_floor",)
        # the last resume in a fresh graph over the same file (as after a restart)
        async with agent(conn, db, replies[5:]) as (graph, _):
            out = await graph.ainvoke(Command(resume=DECLINE), config("t"))
            values = (await graph.aget_state(config("t"))).values

    assert [r["decision_id"] for r in out["receipts"]] == [sure, shaky]
    assert [d["action"] for d in out["operator_decisions"]] == ["override", "decline"]
    # one chain across the three lists, in the order the records were made
    order = sorted(
        (r["seq"], name, r.get("decision_id"))
        for name in ("receipts", "denials", "operator_decisions")
        for r in values[name]
    )
    assert [(seq, name) for seq, name, _ in order] == [
        (1, "receipts"),
        (2, "denials"),
        (3, "receipts"),
        (4, "operator_decisions"),
        (5, "denials"),
        (6, "operator_decisions"),
    ]
    [report] = verify_audit(db).values()
    assert report.ok and report.count == 6, report
    assert report.head == chain_head(values)
    assert not verify_audit(db, key="another key")["t"].ok

    # a record written past the nodes by someone with state access but not the key
    async with open_connection(engine) as conn, agent(conn, db, []) as (graph, _):
        head = chain_head(values)
        forged = {
            "decision_id": shaky,
            "execution_status": "delivered",
            "source": "operator",
            "operator": "mallory",
            "seq": head.seq + 1,
            "prev": head.hash,
        }
        forged["hash"] = link_hash("receipts", forged)  # a valid plain SHA-256 link
        await graph.aupdate_state(config("t"), {"receipts": [forged]})
    report = verify_audit(db)["t"]
    assert not report.ok and report.broken is not None
    assert (report.broken.field, report.broken.index, report.broken.seq) == ("receipts", 2, 7)
    assert "forged without the key" in report.broken.reason
    assert report.head == head  # the last intact link
