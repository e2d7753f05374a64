"""``algenta-graph run --resume`` takes every answer the graph takes, and says why it refuses one.

Against the reference engine over real HTTP, as real processes: a low-confidence decision is
escalated, then answered with LangChain's decisions (with and without an operator), one decision
in ``per_call`` mode, the short form and Agent Inbox's list. Each answer is recorded once under
the operator it names, or under the OS user running the command when it names none (as the
prompt's empty name is); an approval executes the decision once (one webhook POST), a rejection
executes nothing. A refused answer is one line in the graph's own words, without pydantic's
report, and changes nothing.
"""

from __future__ import annotations

import getpass
import json
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from cli_support import RELAXED_ENGINE_ENV, assert_one_line_error, cli
from guarantee_support import log_decision
from mcp import ClientSession

from algenta_graph.audit.records import read_records
from algenta_graph.engine import ReferenceEngine, WebhookReceiver

pytestmark = pytest.mark.timeout(300)

Session = Callable[..., AbstractAsyncContextManager[ClientSession]]


async def _escalated(
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    session: Session,
    db: Path,
    *extra: str,
) -> tuple[str, list[str]]:
    """A thread waiting for an operator on a low-confidence decision; the decision, run args."""
    async with session(engine.url) as s:
        decision = await log_decision(s, action=f"a-{time.monotonic_ns()}", confidence=0.3)
    args = ["--profile", "execute", "--thread", "t", "--db", str(db), "--base-url", engine.url]
    asked = cli(
        "run",
        f"execute_decision decision_id={decision} webhook_url={webhook.url}",
        *args,
        *extra,
        env=RELAXED_ENGINE_ENV,
    )
    assert asked.returncode == 3, (asked.stdout[-2000:], asked.stderr)
    return decision, [*args, *extra]


ME = getpass.getuser()


@pytest.mark.parametrize(
    ("answer", "operator", "executed"),
    [
        ({"decisions": [{"type": "approve"}]}, ME, True),
        ({"decisions": [{"type": "approve", "message": "ok"}], "operator": "ana"}, "ana", True),
        ({"decisions": [{"type": "reject", "message": "too risky"}]}, ME, False),
        ({"action": "override", "operator": "ana", "reason": "signed off"}, "ana", True),
        ([{"type": "accept", "args": None}], ME, True),
        ([{"type": "ignore", "args": None, "operator": "bo"}], "bo", False),
    ],
    ids=["hitl", "hitl-named", "hitl-reject", "short", "inbox", "inbox-ignore"],
)
async def test_resume_takes_every_answer_shape(
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Session,
    tmp_path: Path,
    answer: Any,
    operator: str,
    executed: bool,
) -> None:
    db = tmp_path / "runs.sqlite"
    decision, args = await _escalated(engine, webhook, mcp_session, db)
    done = cli("run", *args, "--resume", json.dumps(answer), env=RELAXED_ENGINE_ENV)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr)
    assert ("the answer names no operator: recorded as" in done.stdout) is (operator == ME)
    [record] = read_records(db)["t"]["operator_decisions"]
    assert record["operator"] == operator
    assert record["action"] == ("override" if executed else "decline")
    assert len(engine.executions(decision)) == (1 if executed else 0)
    assert [b["decision_id"] for b in webhook.received] == ([decision] if executed else [])


async def test_resume_takes_one_decision_in_per_call_mode(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session, tmp_path: Path
) -> None:
    config = tmp_path / "agent.toml"
    config.write_text('[escalation]\ninterrupt_mode = "per_call"\n')
    db = tmp_path / "runs.sqlite"
    decision, args = await _escalated(engine, webhook, mcp_session, db, "--config", str(config))
    done = cli(
        "run",
        *args,
        "--resume",
        '{"type": "approve", "message": "one call"}',
        env=RELAXED_ENGINE_ENV,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr)
    [record] = read_records(db)["t"]["operator_decisions"]
    assert (record["operator"], record["reason"], record["result"]) == (ME, "one call", "receipt")
    assert [b["decision_id"] for b in webhook.received] == [decision]


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ({"decisions": [{"type": "approved"}]}, ["'approved'", "'approve'"]),
        ({"decisions": [{"type": "approve"}, {"type": "approve"}]}, ["at most 1 item"]),
        (
            {
                "decisions": [
                    {
                        "type": "edit",
                        "edited_action": {
                            "name": "execute_decision",
                            "args": {"decision_id": "dec_other"},
                        },
                    }
                ]
            },
            ["'dec_other' is not the decision reviewed"],
        ),
        ({"action": "approve"}, ["'override' or 'decline'"]),
    ],
    ids=["unknown-type", "too-many", "edit-other-decision", "short-typo"],
)
async def test_a_refused_answer_is_one_line_in_the_graphs_words(
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Session,
    tmp_path: Path,
    answer: Any,
    words: list[str],
) -> None:
    db = tmp_path / "runs.sqlite"
    decision, args = await _escalated(engine, webhook, mcp_session, db)
    refused = cli("run", *args, "--resume", json.dumps(answer), env=RELAXED_ENGINE_ENV)
    line = assert_one_line_error(refused, "--resume: the answer was refused", *words)
    for noise in ("validation error for", "errors.pydantic.dev", "input_value", "type=value"):
        assert noise not in line, line
    assert line.endswith("nothing was done")
    assert read_records(db)["t"]["operator_decisions"] == []
    assert engine.executions(decision) == [] and webhook.received == []


def test_resume_must_be_a_json_object_or_list(tmp_path: Path) -> None:
    proc = cli("run", "--db", str(tmp_path / "x.sqlite"), "--resume", '"approve"')
    assert_one_line_error(proc, "--resume", "is not an answer", '{"decisions"')
