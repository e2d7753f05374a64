"""The strict execute flow, driven from the command line alone (``run --json``).

A strict reference engine with keys (an agent key, an operator who approves plans, the operator
path's own key), as real processes over real HTTP: ``run --json`` prints the plan whole, so its
``plan_id``, ``plan_hash`` and ``nonce`` are read from the command's output; the operator
approves the plan over HTTP; ``run`` logs the decision under the plan and executes it; the
confidence gate escalates; ``run --resume`` approves. One webhook POST, a receipt naming the
plan. The default output shortens a result (the plan's hash is cut off), ``--full`` prints it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_support import cli

from algenta_graph.audit.records import read_records
from algenta_graph.engine import ApiKey, ReferenceEngine, WebhookReceiver

pytestmark = pytest.mark.timeout(300)

AGENT, OPERATOR, OVERRIDE = (secrets.token_urlsafe(24) for _ in range(3))
KEYS = {
    AGENT: ApiKey("graph", frozenset({"agent"}), execute=True),
    OPERATOR: ApiKey("ana", frozenset({"operator"})),
    OVERRIDE: ApiKey("graph-operator-path", frozenset({"operator"}), execute=True),
}
ENV = {"ALGENTA_API_KEY": AGENT, "ALGENTA_OPERATOR_API_KEY": OVERRIDE}


def _events(stdout: str) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert all("event" in e for e in events), stdout[-2000:]
    return events


def _result(events: list[dict[str, Any]], tool: str) -> dict[str, Any]:
    [result] = [e["result"] for e in events if e["event"] == "tool_result" and e["tool"] == tool]
    assert isinstance(result, dict), result
    return result


def test_the_strict_flow_runs_from_the_command_line_alone(
    start_engine: Callable[..., ReferenceEngine], webhook: WebhookReceiver, tmp_path: Path
) -> None:
    engine = start_engine(relaxed=False, keys=KEYS)
    db = tmp_path / "runs.sqlite"
    base = ["--profile", "execute", "--thread", "s", "--db", str(db), "--base-url", engine.url]

    def run(*args: str, code: int = 0) -> list[dict[str, Any]]:
        proc = cli("run", *args, *base, "--json", env=ENV)
        assert proc.returncode == code, (proc.stdout[-3000:], proc.stderr)
        return _events(proc.stdout)

    plan = _result(run("plan_decision scenario=price_increase"), "plan_decision")
    for key in ("plan_id", "plan_hash", "nonce"):
        assert plan[key], plan
    # an operator approves the plan out of band (HTTP, never a model tool)
    httpx.post(
        engine.approve_url.format(plan_id=plan["plan_id"]),
        json={"plan_hash": plan["plan_hash"], "nonce": plan["nonce"]},
        headers={"Authorization": f"Bearer {OPERATOR}"},
    ).raise_for_status()
    numbers = " ".join(
        f"{k}={plan[k]}"
        for k in ("chosen_action", "expected_value", "confidence", "risk_p5", "risk_p95")
    )
    logged = _result(run(f"log_decision {numbers} plan_id={plan['plan_id']}"), "log_decision")
    decision = logged["decision_id"]
    asked = run(f"execute_decision decision_id={decision} webhook_url={webhook.url}", code=3)
    [pending] = [e["value"] for e in asked if e["event"] == "pending_escalation"]
    assert (pending["gate"], pending["decision_id"]) == ("confidence", decision)
    answered = run("--resume", '{"decisions": [{"type": "approve", "message": "signed off"}]}')
    [receipt] = [e["record"] for e in answered if e["event"] == "receipt"]
    assert receipt["execution_status"] == "delivered" and receipt["safety_overridden"] is True
    [summary] = [e for e in answered if e["event"] == "summary"]
    assert summary["new"]["receipts"] == 1
    assert [b["decision_id"] for b in webhook.received] == [decision]
    [execution] = engine.executions(decision)
    assert execution["plan_id"] == plan["plan_id"]
    [record] = read_records(db)["s"]["operator_decisions"]
    assert record["reason"] == "signed off" and record["result"] == "receipt"

    # the readable output: shortened by default (no plan hash), whole with --full
    short = cli("run", "plan_decision scenario=price_increase", *base, env=ENV)
    full = cli("run", "plan_decision scenario=price_increase", *base, "--full", env=ENV)
    assert short.returncode == 0 and full.returncode == 0, (short.stderr, full.stderr)
    assert '"plan_hash": "sha256:' not in short.stdout
    assert '"plan_hash": "sha256:' in full.stdout and '"nonce": "' in full.stdout
