"""``algenta-graph engine`` as a real subprocess: options take effect, one log line per call,
a clean SIGTERM shutdown with no traceback, state kept across a restart."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine_support import engine_process, text

from algenta_graph._net import free_port
from algenta_graph.engine import WebhookReceiver

Session = Callable[..., Any]


async def test_cli_engine_serves_with_its_options_and_stops_cleanly(
    tmp_path: Path, mcp_session: Session, webhook: WebhookReceiver
) -> None:
    port, db, log = free_port(), tmp_path / "cli.sqlite", tmp_path / "engine.log"
    args = ("--db", str(db), "--api-key", "k1", "--min-confidence", "0.8", "--denials", "sdk")
    url = f"http://127.0.0.1:{port}/mcp"
    with engine_process(port, log, *args) as proc:
        async with mcp_session(url, api_key="k1") as s:
            contract = json.loads(text(await s.call_tool("get_contract", {})))
            logged = await s.call_tool(
                "log_decision",
                {
                    "chosen_action": "ship_it",
                    "expected_value": 10.0,
                    "confidence": 0.7,
                    "risk_p5": 0.0,
                    "risk_p95": 1.0,
                },
            )
            decision_id = json.loads(text(logged))["decision_id"]
            denied = await s.call_tool(
                "execute_decision", {"decision_id": decision_id, "webhook_url": webhook.url}
            )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    assert contract["policy"]["min_confidence"] == 0.8 and contract["auth"] == "bearer"
    assert contract["denial_wire_form"] == "sdk"
    error = json.loads(text(denied))["error"]
    assert denied.isError is False and error["code"] == "execution_blocked_confidence"
    output = log.read_text()
    assert "Traceback" not in output, output
    calls = [line for line in output.splitlines() if "tools/call" in line]
    assert len(calls) == 3, output
    assert "execute_decision -> denied confidence" in calls[-1]
    assert webhook.received == []

    # the same database after a restart: the decision is still there
    with engine_process(port, log, "--db", str(db)):
        async with mcp_session(url) as s:
            got = await s.call_tool("get_decision", {"decision_id": decision_id})
    assert json.loads(text(got))["decision"]["confidence"] == 0.7


def test_cli_rejects_bad_options() -> None:
    for bad in (["--denials", "smoke"], ["--min-confidence", "1.5"], ["--risk-floor", "-1"]):
        proc = subprocess.run(
            [sys.executable, "-m", "algenta_graph.engine.cli", *bad],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert bad[0] in proc.stderr
