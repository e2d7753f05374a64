"""The receipts table and the JSONL export show every record, every kind, every column.

A real thread (reference engine over HTTP, SQLite checkpoint file) with a receipt, a
thread-receipts idempotency denial, an escalated confidence denial and the operator's decline;
then ``algenta-graph receipts`` as a table and as ``--jsonl``, compared row by row and field by
field with the checkpointed state (``docs/ARCHITECTURE.md``, "Outcomes").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import cli
from graph_support import agent, config, execute, log_decision, open_connection
from langgraph.types import Command

from algenta_graph.engine import ReferenceEngine, WebhookReceiver

pytestmark = pytest.mark.timeout(180)

DECLINE = {"action": "decline", "operator": "bo", "reason": "too risky this quarter"}


async def test_every_record_kind_and_column_is_listed_and_exported(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    db = tmp_path / "runs.sqlite"
    async with open_connection(engine) as conn:
        ok, low = await log_decision(conn), await log_decision(conn, confidence=0.3)
        replies = [
            execute(ok, webhook.url, "c1"),
            "sent",
            execute(ok, webhook.url, "c2"),
            "already sent",
            execute(low, webhook.url, "c3"),
            "declined",
        ]
        async with agent(conn, db, replies) as (graph, _):
            for text in ("one", "again", "low"):
                await graph.ainvoke({"messages": [("user", text)]}, config("t1"))
            state = await graph.ainvoke(Command(resume=DECLINE), config("t1"))

    table = cli("receipts", "--db", str(db), timeout=60)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["thread", "record", "decision_id", "outcome", "detail"]
    spans, start = [], 0
    for dashes in lines[1].split("  "):  # the column widths, from the rule under the header
        spans.append((start, start + len(dashes)))
        start += len(dashes) + 2
    rows = [
        [
            line[a:b].strip() if i < len(spans) - 1 else line[a:].strip()
            for i, (a, b) in enumerate(spans)
        ]
        for line in lines[2:]
    ]
    assert [r[:3] for r in rows] == [
        ["t1", "receipt", ok],
        ["t1", "denial", ok],
        ["t1", "denial", low],
        ["t1", "operator", low],
    ]
    assert rows[0][3:] == ["delivered HTTP 200", "overridden=False source=model"]
    assert rows[1][3] == "gate=idempotency" and "already executed" in rows[1][4]
    assert rows[2][3] == "gate=confidence" and "below the policy minimum" in rows[2][4]
    assert rows[3][3:] == ["decline confidence -> declined", "by bo: too risky this quarter"]

    exported = cli("receipts", "--db", str(db), "--jsonl", timeout=60)
    assert exported.returncode == 0, exported.stderr
    lines_json = [json.loads(line) for line in exported.stdout.splitlines()]
    records = [r for r in lines_json if r["type"] == "record"]
    # every record of the state, every field, in chain order
    for field in ("receipts", "denials", "operator_decisions"):
        assert [r["record"] for r in records if r["field"] == field] == state[field]
    assert [r["record"]["seq"] for r in records] == [1, 2, 3, 4]
    [head] = [r for r in lines_json if r["type"] == "head"]
    assert (head["thread_id"], head["seq"], head["count"]) == ("t1", 4, 4)
    assert head["hash"] == records[-1]["record"]["hash"]
