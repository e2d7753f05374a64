"""The served check of an operator's answer before its run, case by case (fast tier).

The thread's state is given as the server's API returns it (the served matrix,
``tests/deployments/test_matrix.py``, runs the same check on real servers): nothing waits and
someone decided, 409 naming them; nothing ever asked, 409 ``NoEscalationPending``; an
escalation waits on the operator's gate, the operator recorded; another gate's operator, let
through unrecorded and told nothing of who decided; a state that cannot be read, or an operator
who cannot be recorded, 503 (never let in unchecked).
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph_sdk import Auth

from algenta_graph.governance.visibility import answered_key, is_graph_metadata
from algenta_graph.serving import answer_check
from algenta_graph.serving.auth import read_filter

DECIDED = {
    "values": {
        "operator_decisions": [
            {
                "operator": "ana",
                "action": "override",
                "gate": "confidence",
                "decided_at": "2026-01-01T00:00:00+00:00",
            }
        ]
    },
    "tasks": [],
}
WAITING = {"values": {}, "tasks": [{"interrupts": [{"value": {"gate": "confidence"}}]}]}


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The thread's state the check reads, and the operators it records."""
    seen: dict[str, Any] = {"state": None, "recorded": [], "fail": None}

    async def state(thread_id: str) -> dict[str, Any] | None:
        if seen["fail"] == "read":
            raise OSError("the server is gone")
        return seen["state"]  # type: ignore[no-any-return]

    async def record(thread_id: str, identity: str) -> None:
        if seen["fail"] == "record":
            raise OSError("no write")
        seen["recorded"].append((thread_id, identity))

    monkeypatch.setattr(answer_check, "_thread_state", state)
    monkeypatch.setattr(answer_check, "record_answered", record)
    return seen


async def _refused(thread: str, identity: str, roles: list[str]) -> Auth.exceptions.HTTPException:
    with pytest.raises(Auth.exceptions.HTTPException) as refused:
        await answer_check.check_answer(thread, identity, frozenset(roles))
    return refused.value


async def test_a_late_answer_is_refused_with_409_naming_who_decided(served: dict[str, Any]) -> None:
    served["state"] = DECIDED
    refused = await _refused("t1", "olga", ["operator:confidence"])
    assert refused.status_code == 409
    assert str(refused.detail).startswith("EscalationAlreadyDecided: escalation already decided")
    assert "by ana (override in thread t1 at 2026-01-01" in str(refused.detail)
    assert served["recorded"] == []


async def test_an_answer_to_a_thread_that_never_asked_is_refused_with_409(
    served: dict[str, Any],
) -> None:
    served["state"] = {"values": {"messages": []}, "tasks": []}
    refused = await _refused("t1", "olga", ["operator"])
    assert refused.status_code == 409 and "NoEscalationPending" in str(refused.detail)


async def test_an_answer_to_a_waiting_gate_of_theirs_is_recorded_and_let_in(
    served: dict[str, Any],
) -> None:
    served["state"] = WAITING
    await answer_check.check_answer("t1", "olga", frozenset({"operator:confidence"}))
    assert served["recorded"] == [("t1", "olga")]


async def test_another_gates_operator_is_let_through_unrecorded_and_told_nothing(
    served: dict[str, Any],
) -> None:
    for state in (WAITING, DECIDED):
        served["state"] = state
        await answer_check.check_answer("t1", "rita", frozenset({"operator:risk_floor"}))
    assert served["recorded"] == []


async def test_an_unknown_thread_is_left_to_the_server(served: dict[str, Any]) -> None:
    await answer_check.check_answer("nope", "olga", frozenset({"operator"}))
    assert served["recorded"] == []


@pytest.mark.parametrize("failing", ["read", "record"])
async def test_a_check_that_cannot_be_made_refuses_the_answer(
    served: dict[str, Any], failing: str
) -> None:
    served["state"], served["fail"] = WAITING, failing
    refused = await _refused("t1", "olga", ["operator"])
    assert refused.status_code == 503 and "nothing was sent" in str(refused.detail)


def test_only_those_who_answered_read_by_the_answered_key() -> None:
    key = answered_key("olga")
    assert is_graph_metadata(key) and not is_graph_metadata("olga")
    assert {key: "olga"} in read_filter("olga", ["operator"])["$or"]  # type: ignore[index]
    assert read_filter("bob", ["agent"]) == {"algenta_owner": "bob"}  # an agent: never by it
