"""``algenta-graph receipts --verify`` and ``--jsonl``: the audit chain from the command line
(``docs/ARCHITECTURE.md``, invariant 10).

A real governed thread (reference engine over HTTP, SQLite checkpoint file) is verified intact;
a record forged into its state past the graph's nodes is named, exit 1; an export's heads kept
from before expose a thread that is gone; the export verifies offline.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import assert_one_line_error, cli
from graph_support import agent, config, execute, log_decision, open_connection

from algenta_graph.audit.export import read_jsonl, verify_jsonl
from algenta_graph.engine import ReferenceEngine, WebhookReceiver

pytestmark = pytest.mark.timeout(180)


async def test_receipts_verify_names_a_forged_record_and_the_export_verifies_offline(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    db = tmp_path / "runs.sqlite"
    async with open_connection(engine) as conn:
        ok, low = await log_decision(conn), await log_decision(conn, confidence=0.3)
        replies = [execute(ok, webhook.url, "c1"), "done", execute(low, webhook.url, "c2"), "no"]
        policies = {"confidence": "report"}
        async with agent(conn, db, replies, on_denial=policies) as (graph, _):
            await graph.ainvoke({"messages": [("user", "one")]}, config("t1"))
            await graph.ainvoke({"messages": [("user", "two")]}, config("t1"))

    intact = cli("receipts", "--db", str(db), "--verify", timeout=60)
    assert intact.returncode == 0, intact.stderr
    assert "t1: ok: 2 record(s)" in intact.stdout and "all chains intact" in intact.stdout

    exported = cli("receipts", "--db", str(db), "--jsonl", timeout=60)
    assert exported.returncode == 0, exported.stderr
    export = tmp_path / "export.jsonl"
    export.write_text(exported.stdout)
    threads, heads = read_jsonl(exported.stdout.splitlines())
    assert [r["decision_id"] for r in threads["t1"]["receipts"]] == [ok]
    assert heads["t1"].seq == 2
    assert all(report.ok for report in verify_jsonl(export.open()).values())

    # a record written into the thread's state past the nodes (no valid link)
    async with open_connection(engine) as conn, agent(conn, db, []) as (graph, _):
        forged = {"decision_id": low, "execution_status": "delivered", "source": "operator"}
        await graph.aupdate_state(config("t1"), {"receipts": [forged]})
    broken = cli("receipts", "--db", str(db), "--verify", timeout=60)
    assert broken.returncode == 1, broken.stdout
    assert "t1: BROKEN" in broken.stdout and "receipts[1]" in broken.stdout

    # the heads exported before: a thread that is gone from another file is named
    other = tmp_path / "other.sqlite"
    async with open_connection(engine) as conn, agent(conn, other, ["hi"]) as (graph, _):
        await graph.ainvoke({"messages": [("user", "hi")]}, config("t2"))
    gone = cli("receipts", "--db", str(other), "--verify", "--head", str(export), timeout=60)
    assert_one_line_error(gone, "'t1'", "gone", code=1)
    bad_head = cli("receipts", "--db", str(db), "--verify", "--head", str(db), timeout=60)
    assert_one_line_error(bad_head, "--head", code=2)
    assert json.loads(export.read_text().splitlines()[-1])["type"] == "head"
