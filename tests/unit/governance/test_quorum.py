"""Two-person approval in process (``EscalationSettings.quorum``; ``nodes/quorum.py``;
``docs/ARCHITECTURE.md``, "Two-person approval", invariant 12): a held call under a quorum of
two runs once after two distinct operators approved its digest, never after one; an operator's
second approval and a mixed answer are refused by name; a reject ends it; the approvals are
counted in the ledger's slots, once per operator. The fast twin of
``tests/integration/test_quorum.py`` (the reference engine, two workers racing)."""

from __future__ import annotations

import asyncio

import pytest
from langgraph.types import Command
from pydantic import ValidationError

from algenta_graph.audit.verification import verify_chain
from algenta_graph.governance.escalations import EscalationSettings, approvals_said
from algenta_graph.governance.tool_gates import ToolGates
from algenta_graph.ledger import ApprovalMark, MemoryLedger, approval_key
from algenta_graph.nodes.answers import Decided, OperatorAnswer, check_quorum
from algenta_graph.nodes.quorum import approvals, count_approval

from .test_gated_graph import DELETE, Agent, calls

HELD = ToolGates(require_approval=["crm.delete_customer"])
TWO = EscalationSettings(quorum={"approval": 2})


def approve(operator: str) -> dict[str, object]:
    return {"decisions": [{"type": "approve", "message": "ok"}], "operator": operator}


def reject(operator: str) -> dict[str, object]:
    return {"decisions": [{"type": "reject", "message": "no"}], "operator": operator}


def test_one_approval_runs_nothing_and_asks_again_saying_who_then_two_run_it_once() -> None:
    a = Agent([calls(DELETE), "deleted"], tool_gates=HELD, escalation=TWO)
    a.say("delete a1")
    [first] = a.state().interrupts
    assert first.value["approvals"] == [] and first.value["quorum"] == 2
    assert "edit" not in first.value["allowed_decisions"]
    a.run(Command(resume=approve("ana")))
    assert a.conn.crm_calls == []
    [second] = a.state().interrupts
    assert second.id != first.id and second.value["interrupt_id"] == second.id
    assert second.value["approvals"] == ["ana"] and second.value["digest"] == first.value["digest"]
    assert "1 of 2 approvals: ana" in second.value["action_requests"][0]["description"]
    assert a.state().values["operator_decisions"] == []
    out = a.run(Command(resume=approve("bo")))
    assert a.conn.crm_calls == [DELETE]
    [record] = out["operator_decisions"]
    assert (record["operator"], record["verdict"], record["approvers"]) == (
        "bo",
        "approved",
        ["ana", "bo"],
    )
    assert verify_chain(out).ok and a.state().interrupts == ()


def test_the_same_operator_is_refused_by_name_and_counted_once() -> None:
    a = Agent([calls(DELETE), "deleted"], tool_gates=HELD, escalation=TWO)
    a.say("delete a1")
    a.run(Command(resume=approve("ana")))
    with pytest.raises(ValidationError, match="operator 'ana' already approved"):
        a.run(Command(resume=approve("ana")))
    assert a.conn.crm_calls == []
    [waiting] = a.state().interrupts
    assert waiting.value["approvals"] == ["ana"]


def test_a_reject_after_one_approval_runs_nothing_and_names_who_had_approved() -> None:
    a = Agent([calls(DELETE), "kept"], tool_gates=HELD, escalation=TWO)
    a.say("delete a1")
    a.run(Command(resume=approve("ana")))
    out = a.run(Command(resume=reject("bo")))
    assert a.conn.crm_calls == []
    [record] = out["operator_decisions"]
    assert (record["operator"], record["verdict"], record["approvers"]) == (
        "bo",
        "declined",
        ["ana"],
    )


def test_without_a_quorum_the_record_names_no_approvers() -> None:
    a = Agent([calls(DELETE), "deleted"], tool_gates=HELD)
    a.say("delete a1")
    [asked] = a.state().interrupts
    assert "quorum" not in asked.value and "approvals" not in asked.value
    assert "approvals" not in asked.value["action_requests"][0]["description"]
    out = a.run(Command(resume=approve("ana")))
    assert a.conn.crm_calls == [DELETE]
    [record] = out["operator_decisions"]
    assert record["operator"] == "ana" and "approvers" not in record


def test_per_call_under_a_quorum_asks_each_call_per_round_and_refuses_a_mix() -> None:
    second_call = ("delete_customer", {"account_id": "a2"})
    a = Agent(
        [calls(DELETE, second_call), "both"],
        tool_gates=HELD,
        escalation=EscalationSettings(quorum={"approval": 2}, interrupt_mode="per_call"),
    )
    a.say("delete both")
    for _ in range(2):
        [asked] = a.state().interrupts
        a.run(Command(resume={asked.id: {"type": "approve", "operator": "ana"}}))
    assert a.conn.crm_calls == []
    [again] = a.state().interrupts
    assert again.value["args"] == {"account_id": "a1"}
    assert again.value["escalations"][0]["approvals"] == ["ana"]
    assert again.value["escalations"][0]["interrupt_id"] == again.id
    a.run(Command(resume={again.id: {"type": "approve", "operator": "bo"}}))
    [last] = a.state().interrupts
    with pytest.raises(ValidationError, match="not a mix"):
        a.run(Command(resume={last.id: {"type": "reject", "operator": "bo"}}))
    out = a.run(Command(resume={last.id: {"type": "approve", "operator": "bo"}}))
    assert a.conn.crm_calls == [DELETE, second_call]
    assert [d["approvers"] for d in out["operator_decisions"]] == [["ana", "bo"]] * 2


def _answer(operator: str, *types: str) -> OperatorAnswer:
    return OperatorAnswer(operator, tuple(Decided(t) for t in types))  # type: ignore[arg-type]


def test_check_quorum_refuses_a_second_approval_and_a_mix_only_under_a_quorum() -> None:
    check_quorum(_answer("ana", "approve"), ["ana"], 1)  # no quorum: nothing to count
    check_quorum(_answer("bo", "approve"), ["ana"], 2)
    check_quorum(_answer("ana", "reject"), ["ana"], 2)  # a reject ends it, whoever gives it
    with pytest.raises(ValueError, match=r"'ana' already approved .*1 of 2 approvals: ana"):
        check_quorum(_answer("ana", "approve", "approve"), ["ana"], 2)
    with pytest.raises(ValueError, match=r"not a mix \(approve, respond\)"):
        check_quorum(_answer("bo", "approve", "respond"), [], 2)
    check_quorum(_answer("bo", "reject", "respond"), [], 2)


def test_each_operator_takes_one_slot_and_the_count_reads_every_slot_filled() -> None:
    async def go() -> None:
        ledger, key = MemoryLedger(), "escalations:esc_1"

        def mark(operator: str, digest: str = "sha256:a") -> ApprovalMark:
            return ApprovalMark(operator=operator, digest=digest)

        assert await approvals(ledger, key, "sha256:a", 2) == []
        assert [m.operator for m in await count_approval(ledger, key, 3, mark("ana"))] == ["ana"]
        assert [m.operator for m in await count_approval(ledger, key, 3, mark("ana"))] == ["ana"]
        assert [m.operator for m in await count_approval(ledger, key, 3, mark("bo"))] == [
            "ana",
            "bo",
        ]
        # counted before: ana's again reads the slots after hers, and takes none
        again = await count_approval(ledger, key, 3, mark("ana"))
        assert [m.operator for m in again] == ["ana", "bo"]
        assert [m.operator for m in await approvals(ledger, key, "sha256:a", 3)] == ["ana", "bo"]
        assert await ledger.peek(approval_key(key, "sha256:a", 3), ApprovalMark) is None
        first = await ledger.peek(approval_key(key, "sha256:a", 1), ApprovalMark)
        assert first is not None and first.done
        # another digest (the rules changed): a count of its own
        other = await count_approval(ledger, key, 3, mark("bo", "sha256:b"))
        assert [m.operator for m in other] == ["bo"]
        # a quorum of two: the slots stop at two
        assert len(await count_approval(ledger, key, 2, mark("cy"))) == 2

    asyncio.run(go())


def test_edit_is_refused_under_a_quorum_and_a_quorum_is_at_least_one() -> None:
    with pytest.raises(ValidationError, match=r"allowed_decisions.approval: edit is refused"):
        EscalationSettings(quorum={"approval": 2}, allowed_decisions={"approval": ["edit"]})
    EscalationSettings(quorum={"approval": 1}, allowed_decisions={"approval": ["edit"]})
    EscalationSettings(quorum={"confidence": 2}, allowed_decisions={"approval": ["edit"]})
    assert EscalationSettings(
        quorum={"approval": 2}, allowed_decisions={"approval": ["approve", "reject"]}
    ).decisions_for("approval") == ["approve", "reject"]
    assert TWO.decisions_for("approval") == ["approve", "reject", "respond"]
    assert TWO.decisions_for("confidence") == ["approve", "edit", "reject", "respond"]
    assert TWO.quorum_for("approval") == 2 and TWO.quorum_for("budget") == 1
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        EscalationSettings(quorum={"approval": 0})
    assert approvals_said(["ana", "bo"], 3) == "2 of 3 approvals: ana, bo"
