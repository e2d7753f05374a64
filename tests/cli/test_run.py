"""``algenta-graph run`` against the reference engine over real HTTP, as real processes.

- a run SIGKILLed while ``execute_decision`` is in flight is resumed by ``run`` without a
  prompt (the webhook got exactly one POST; the receipt is recorded after the resume), and a
  new prompt on such a thread first answers the pending tool call;
- at the operator prompt: Ctrl-C aborts at once (exit 130, nothing recorded), stdin at EOF
  and invalid UTF-8 decide nothing; ``--resume`` with nothing pending is refused;
- ``--on-denial halt`` applies to every gate; ``--db`` in a missing directory is created
  (like ``engine --db``); a ``--db`` that is not SQLite is refused and left untouched.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from cli_support import RELAXED_ENGINE_ENV, assert_one_line_error, cli, cli_env, command
from guarantee_support import async_wait_until, log_decision
from mcp import ClientSession

from algenta_graph.audit.records import read_records
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.serving.checkpoint_reader import read_thread_values

pytestmark = pytest.mark.timeout(300)

Session = Callable[..., AbstractAsyncContextManager[ClientSession]]
OVERRIDE = {"action": "override", "operator": "ana", "reason": "signed off in OPS-7"}


async def _decision(engine: ReferenceEngine, session: Session, **kw: Any) -> str:
    async with session(engine.url) as s:
        return await log_decision(s, action=f"cli-{time.monotonic_ns()}", **kw)


def _run_args(engine: ReferenceEngine, db: Path, thread: str = "t") -> list[str]:
    return ["--profile", "execute", "--thread", thread, "--db", str(db), "--base-url", engine.url]


def _execute(decision: str, url: str) -> str:
    return f"execute_decision decision_id={decision} webhook_url={url}"


def _start(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*command(), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(**RELAXED_ENGINE_ENV),
    )


def _read_until(proc: subprocess.Popen[bytes], text: bytes, timeout: float = 120) -> bytes:
    """Read ``proc``'s stdout until ``text`` appears (a hang guard, not a timed assertion)."""
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout
    while text not in seen:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(proc.stdout.fileno(), 65536) if ready else b""
        if not chunk:
            proc.kill()
            raise AssertionError(f"no {text!r} in the output: {seen[-2000:]!r}")
        seen += chunk
    return seen


def _unanswered_tool_calls(values: dict[str, Any]) -> list[str]:
    answered = {m.tool_call_id for m in values["messages"] if m.type == "tool"}
    return [
        c["id"]
        for m in values["messages"]
        if m.type == "ai"
        for c in m.tool_calls
        if c["id"] not in answered
    ]


async def _kill_mid_execute(
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    decision: str,
    db: Path,
    thread: str,
    sig: signal.Signals = signal.SIGKILL,
) -> None:
    """Start a real ``run`` that executes ``decision`` on a slow webhook; kill it with ``sig``
    while the engine waits for the webhook; return once the engine has recorded the execution."""
    proc = _start(
        "run", _execute(decision, webhook.url_for_delay(4)), *_run_args(engine, db, thread)
    )
    try:
        await async_wait_until(lambda: webhook.received, timeout=120, what="the webhook POST")
    finally:
        proc.send_signal(sig)
        _, stderr = proc.communicate()
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:  # Ctrl-C: exit 130, one line saying how to resume
        assert proc.returncode == 130 and b"Traceback" not in stderr, stderr
        assert f"run --thread {thread} --db {db}` resumes".encode() in stderr
    await async_wait_until(
        lambda: engine.executions(decision), timeout=60, what="the engine's execution record"
    )
    assert read_thread_values(db)[thread]["receipts"] == []  # the kill came before the receipt


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
async def test_run_without_a_prompt_resumes_a_killed_run(
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Session,
    tmp_path: Path,
    sig: signal.Signals,
) -> None:
    decision = await _decision(engine, mcp_session)
    db = tmp_path / "runs.sqlite"
    await _kill_mid_execute(engine, webhook, decision, db, "t", sig)

    proc = cli("run", *_run_args(engine, db))
    assert proc.returncode == 0, proc.stderr
    assert "stopped before governed_tool" in proc.stdout
    assert f"recovered from the engine: the receipt of {decision}" in proc.stdout
    assert [b["decision_id"] for b in webhook.received] == [decision]  # exactly one POST
    [receipt] = read_records(db)["t"]["receipts"]
    assert receipt["decision_id"] == decision and receipt["source"] == "recovered"
    assert _unanswered_tool_calls(read_thread_values(db)["t"]) == []

    again = cli("run", *_run_args(engine, db))  # nothing left: says so, records nothing
    assert again.returncode == 0 and "nothing pending" in again.stdout
    assert len(read_records(db)["t"]["receipts"]) == 1
    assert len(engine.executions(decision)) == 1


async def test_a_new_prompt_on_a_killed_thread_answers_the_pending_call_first(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session, tmp_path: Path
) -> None:
    decision = await _decision(engine, mcp_session)
    db = tmp_path / "runs.sqlite"
    await _kill_mid_execute(engine, webhook, decision, db, "t")

    proc = cli("run", "What can this engine do? Show me its contract.", *_run_args(engine, db))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.index("stopped before governed_tool") < out.index("calls get_contract")
    values = read_thread_values(db)["t"]
    assert _unanswered_tool_calls(values) == []
    assert [r["decision_id"] for r in values["receipts"]] == [decision]
    assert [b["decision_id"] for b in webhook.received] == [decision]
    humans = [m.content for m in values["messages"] if m.type == "human"]
    assert humans[-1].startswith("What can this engine do?")


async def test_ctrl_c_at_the_operator_prompt_aborts_and_records_nothing(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session, tmp_path: Path
) -> None:
    decision = await _decision(engine, mcp_session, confidence=0.3)
    db = tmp_path / "runs.sqlite"
    proc = _start("run", _execute(decision, webhook.url), *_run_args(engine, db), "--interactive")
    out = _read_until(proc, b"override or decline? ")
    assert b"ESCALATION: the confidence gate denied decision" in out
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, (stdout[-2000:], stderr[-2000:])
    assert b"Traceback" not in stderr and b"interrupted" in stderr
    values = read_thread_values(db)["t"]
    assert values["operator_decisions"] == [] and values["receipts"] == []
    assert [d["gate"] for d in values["denials"]] == ["confidence"]
    assert engine.executions(decision) == [] and webhook.received == []
    # the escalation still waits for an operator, and can be answered
    pending = cli("run", *_run_args(engine, db))
    assert pending.returncode == 3 and '"pending_escalation"' in pending.stdout
    typo = {**OVERRIDE, "action": "approve"}
    rejected = cli("run", *_run_args(engine, db), "--resume", json.dumps(typo))
    # refused before it is saved (the interrupt's response_schema), named, nothing done
    assert_one_line_error(
        rejected, "--resume: the answer was refused", "'override' or 'decline'", "nothing was done"
    )
    assert engine.executions(decision) == []
    done = cli(
        "run", *_run_args(engine, db), "--resume", json.dumps(OVERRIDE), env=RELAXED_ENGINE_ENV
    )
    assert done.returncode == 0, done.stderr
    [operator] = read_records(db)["t"]["operator_decisions"]
    assert operator["operator"] == "ana" and operator["result"] == "receipt"
    assert [b["decision_id"] for b in webhook.received] == [decision]


@pytest.mark.parametrize(
    ("stdin", "code", "words"),
    [
        (b"", 3, "stdin ended at the operator prompt"),
        (b"override\n\xff\xfeana\nok\n", 2, "not valid UTF-8"),
    ],
    ids=["eof", "invalid-utf8"],
)
async def test_a_bad_operator_answer_decides_nothing(
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Session,
    tmp_path: Path,
    stdin: bytes,
    code: int,
    words: str,
) -> None:
    decision = await _decision(engine, mcp_session, confidence=0.3)
    db = tmp_path / "runs.sqlite"
    proc = cli(
        "run", _execute(decision, webhook.url), *_run_args(engine, db), "--interactive",
        input=stdin,
    )  # fmt: skip
    assert_one_line_error(proc, words, code=code)
    values = read_thread_values(db)["t"]
    assert values["operator_decisions"] == [] and values["receipts"] == []
    assert engine.executions(decision) == [] and webhook.received == []


async def test_resume_with_nothing_pending_is_refused(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    db = tmp_path / "runs.sqlite"
    resume = ["--resume", json.dumps(OVERRIDE)]
    assert_one_line_error(cli("run", *_run_args(engine, db), *resume), "'t'", "no pending")
    done = cli("run", "What can this engine do?", *_run_args(engine, db))
    assert done.returncode == 0, done.stderr
    before = read_thread_values(db)["t"]
    assert_one_line_error(cli("run", *_run_args(engine, db), *resume), "'t'", "no pending")
    assert_one_line_error(
        cli("run", "hello again", *_run_args(engine, db), *resume), "no pending escalation"
    )
    assert len(read_thread_values(db)["t"]["messages"]) == len(before["messages"])
    assert_one_line_error(cli("run", *_run_args(engine, db, "nobody")), "'nobody'", "PROMPT")


async def test_a_bare_on_denial_policy_applies_to_every_gate(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session, tmp_path: Path
) -> None:
    low = await _decision(engine, mcp_session, confidence=0.3)
    risky = await _decision(engine, mcp_session, risk_p5=-5000.0)
    db = tmp_path / "runs.sqlite"
    for thread, decision in (("low", low), ("risky", risky)):
        proc = cli(
            "run", _execute(decision, webhook.url), *_run_args(engine, db, thread),
            "--on-denial", "halt", "--interactive",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "ESCALATION" not in proc.stdout and "[escalation]" not in proc.stdout
    records = read_records(db)
    assert [d["gate"] for d in records["low"]["denials"]] == ["confidence"]
    assert [d["gate"] for d in records["risky"]["denials"]] == ["risk_floor"]
    assert all(not r["operator_decisions"] for r in records.values())
    assert webhook.received == []


async def test_run_creates_a_missing_db_directory_and_refuses_a_foreign_file(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    db = tmp_path / "new" / "deeper" / "runs.sqlite"
    proc = cli("run", "What can this engine do?", *_run_args(engine, db))
    assert proc.returncode == 0, proc.stderr
    assert "t" in read_records(db)

    foreign = tmp_path / "notes.sqlite"
    foreign.write_text("not a database\n" * 100)
    before = (foreign.read_bytes(), foreign.stat().st_mtime_ns)
    proc = cli("run", "hello", *_run_args(engine, foreign))
    assert_one_line_error(proc, str(foreign), "not a usable SQLite checkpoint file")
    assert (foreign.read_bytes(), foreign.stat().st_mtime_ns) == before

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    proc = cli("run", "hello", *_run_args(engine, blocked / "runs.sqlite"))
    assert_one_line_error(proc, "cannot create the directory", str(blocked))
