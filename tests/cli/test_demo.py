"""``algenta-graph demo`` runs to its end offline, and its receipts match the webhook log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "algenta_graph.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home())},  # no API keys, no engine URL
    )


def test_demo_runs_to_the_end_and_its_receipts_match_the_webhook_log(tmp_path: Path) -> None:
    db = tmp_path / "not-yet" / "demo.sqlite"  # the directory is created, as engine --db does
    hooks = tmp_path / "logs" / "hooks.jsonl"  # created too
    demo = _cli("demo", "--db", str(db), "--webhook-log", str(hooks))
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    out = demo.stdout
    for step in ("Observe", "Plan and log", "Execute", "Execute again", "Low confidence", "Risky"):
        assert f". {step} ===" in out
    assert "[escalation]" in out and "chose override on the confidence gate" in out
    assert "chose decline on the risk_floor gate" in out
    assert "OK: 2 delivered receipts in the checkpoint file match the 2 POSTs" in out

    listing = _cli("receipts", "--db", str(db), "--jsonl", timeout=60)
    assert listing.returncode == 0, listing.stderr
    lines = [json.loads(line) for line in listing.stdout.splitlines()]
    records = [{"record": r["field"][:-1], **r["record"]} for r in lines if r["type"] == "record"]
    delivered = sorted(
        r["decision_id"]
        for r in records
        if r["record"] == "receipt" and r["execution_status"] == "delivered"
    )
    posted = sorted(
        json.loads(line)["body"]["decision_id"] for line in hooks.read_text().splitlines()
    )
    assert delivered == posted and len(posted) == 2
    overridden = [r for r in records if r["record"] == "receipt" and r["safety_overridden"]]
    assert len(overridden) == 1 and overridden[0]["source"] == "operator"
    gates = sorted(r["gate"] for r in records if r["record"] == "denial")
    assert gates == ["confidence", "idempotency", "idempotency", "risk_floor"]
    results = sorted(r["result"] for r in records if r["record"] == "operator_decision")
    assert results == ["declined", "receipt"]

    table = _cli("receipts", "--db", str(db), "--thread", "demo", timeout=60)
    assert table.returncode == 0 and "override confidence -> receipt" in table.stdout


def test_receipts_command_rejects_a_missing_or_foreign_file(tmp_path: Path) -> None:
    missing = _cli("receipts", "--db", str(tmp_path / "nope.sqlite"), timeout=60)
    assert missing.returncode == 2 and "no checkpoint file" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and "Traceback" not in missing.stderr
    assert not (tmp_path / "nope.sqlite").exists()
    import sqlite3

    foreign = tmp_path / "other.sqlite"
    sqlite3.connect(foreign).execute("create table t(x)").connection.commit()
    result = _cli("receipts", "--db", str(foreign), timeout=60)
    assert result.returncode == 2 and "not a LangGraph SQLite checkpoint file" in result.stderr


def test_demo_refuses_a_bad_model_or_db_in_one_line(tmp_path: Path) -> None:
    bad_model = _cli("demo", "--model", "nosuch:model", timeout=60)
    assert bad_model.returncode == 2 and "Traceback" not in bad_model.stderr
    assert bad_model.stderr.startswith("algenta-graph demo: error: --model 'nosuch:model'")
    foreign = tmp_path / "notes.sqlite"
    foreign.write_text("not a database\n" * 100)
    before = foreign.read_bytes()
    bad_db = _cli("demo", "--db", str(foreign), timeout=120)
    assert bad_db.returncode == 2 and "Traceback" not in bad_db.stderr, bad_db.stderr
    assert len(bad_db.stderr.strip().splitlines()) == 1
    assert f"--db {foreign} is not a usable SQLite checkpoint file" in bad_db.stderr
    assert foreign.read_bytes() == before
