"""Where a step goes once a gate's escalations are answered, and the policy of a denial the
operator path meets (``docs/ARCHITECTURE.md``, "Escalation and the operator", invariant 7):
the handler harness of ``test_denial_handler.py`` over the scripted connection."""

from __future__ import annotations

from typing import Any

import pytest

from algenta_graph.connection.outcomes import ExecutionDenial
from algenta_graph.nodes.denial_handler import MODEL_NODE, handler_node_name
from tests.unit.governance.test_denial_handler import (
    DECLINE,
    OVERRIDE,
    Harness,
    denial,
    denied_state,
)

CONFIDENCE = handler_node_name("confidence")
RISK = handler_node_name("risk_floor")
IDEMPOTENCY = handler_node_name("idempotency")
ASKS = [CONFIDENCE, "__interrupt__"]  # answered, then the next handler asks


def after_answering(other: dict[str, Any]) -> tuple[list[str], tuple[str, ...]]:
    """The nodes that run after an operator declines a confidence escalation, when the step
    also holds ``other``."""
    h = Harness("confidence")
    state = denied_state(denial("confidence", "c1", policy="escalate"), other)
    assert h.nodes(state) == ["__interrupt__"]  # it asks
    return h.nodes(_resume(DECLINE)), h.graph.get_state(h.config).next


def _resume(value: Any) -> Any:
    from langgraph.types import Command

    return Command(resume=value)


@pytest.mark.parametrize(
    ("other", "then"),
    [
        (denial("risk_floor", "c2", policy="report"), ([CONFIDENCE, MODEL_NODE], ())),
        (denial("risk_floor", "c2", policy="escalate"), (ASKS, (RISK,))),
        (denial("risk_floor", "c2"), (ASKS, (RISK,))),  # no policy: the gate's default
        (denial("risk_floor", "c2", policy="bogus"), (ASKS, (RISK,))),
        (denial("idempotency", "c2"), ([CONFIDENCE, MODEL_NODE], ())),  # default: report
        (denial("idempotency", "c2", policy="halt"), ([CONFIDENCE, IDEMPOTENCY], ())),
        (denial("mystery", "c2"), ([CONFIDENCE], ())),  # a gate it does not know: halt
    ],
)
def test_after_an_answer_the_step_goes_to_the_next_gate_that_is_not_reported(
    other: dict[str, Any], then: tuple[list[str], tuple[str, ...]]
) -> None:
    assert after_answering(other) == then


@pytest.mark.parametrize(
    ("run_policy", "expected"), [(None, "escalate"), ("halt", "halt"), ("escalate", "escalate")]
)
def test_a_denial_the_operator_path_meets_takes_the_runs_policy_and_the_calls_timeout(
    run_policy: str | None, expected: str
) -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate", timeout_seconds=7)))
    h.conn.operator_answers.append(_denial_outcome("risk_floor"))
    context = {} if run_policy is None else {"on_denial": {"risk_floor": run_policy}}
    out = h.resume(OVERRIDE, **context)
    new = [d for d in out["denials"] if d.get("source") == "operator"]
    assert [(d["gate"], d["policy"], d.get("timeout_seconds")) for d in new] == [
        ("risk_floor", expected, 7)
    ]


def test_a_timeout_that_is_not_a_number_is_not_carried_over() -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate", timeout_seconds=True)))
    h.conn.operator_answers.append(_denial_outcome("risk_floor"))
    out = h.resume(OVERRIDE)
    [new] = [d for d in out["denials"] if d.get("source") == "operator"]
    assert new.get("timeout_seconds") is None


def test_an_engine_gate_the_graph_does_not_know_is_met_with_a_halt() -> None:
    h = Harness("confidence")
    h.start(denied_state(denial("confidence", policy="escalate")))
    h.conn.operator_answers.append(_denial_outcome("mystery"))
    out = h.resume(OVERRIDE)
    [new] = [d for d in out["denials"] if d.get("source") == "operator"]
    assert (new["gate"], new["policy"]) == ("mystery", "halt")


def _denial_outcome(gate: str) -> ExecutionDenial:
    return ExecutionDenial(
        gate=gate, code=f"execution_blocked_{gate}", message=f"blocked by {gate}"
    )
