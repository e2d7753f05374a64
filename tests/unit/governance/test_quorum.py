"""Two-person approval in process (``EscalationSettings.quorum``; ``nodes/quorum.py``;
``docs/ARCHITECTURE.md``, "Two-person approval", invariant 12): a held call under a quorum of
two runs once after two distinct operators approved its digest, never after one; an operator's
second approval and a mixed answer are refused by name; a reject ends it; the approvals are
counted in the ledger's slots, once per operator. The fast twin of
``tests/integration/test_quorum.py`` (the reference engine, two workers racing)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from langgraph.types import Command
from pydantic import ValidationError

from algenta_graph.audit.verification import verify_chain
from algenta_graph.errors import ApprovalAlreadyCounted, EscalationAlreadyDecided, ToolGatesError
from algenta_graph.governance.escalations import (
    EscalationSettings,
    already_approved,
    approvals_said,
)
from algenta_graph.governance.tool_gates import (
    Approvals,
    CallCounts,
    CatalogTool,
    GateCatalog,
    ServerRules,
    ToolGates,
    ToolRef,
)
from algenta_graph.graph.resumes import check_resumes
from algenta_graph.ledger import ApprovalMark, MemoryLedger, approval_key
from algenta_graph.nodes import denial_handler
from algenta_graph.nodes.answers import Decided, OperatorAnswer, check_quorum
from algenta_graph.nodes.quorum import approvals, count_approval

from .test_gated_graph import DELETE, Agent, _copy_thread, calls

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


def test_served_each_approval_is_replayed_in_the_name_stamped_on_it() -> None:
    """Served with auth, each answer carries its operator (stamped by the server) and the node
    replays ana's in bo's run: read in ana's name, not checked against bo's identity."""
    a = Agent([calls(DELETE), "deleted"], tool_gates=HELD, escalation=TWO)
    a.say("delete a1")

    def user(name: str) -> dict[str, object]:
        return {"identity": name, "is_authenticated": True}

    a.run(Command(resume=approve("ana")), langgraph_auth_user=user("ana"))
    with pytest.raises(ValidationError, match="operator 'ana' already approved"):
        a.run(Command(resume=approve("ana")), langgraph_auth_user=user("ana"))
    out = a.run(Command(resume=approve("bo")), langgraph_auth_user=user("bo"))
    assert a.conn.crm_calls == [DELETE]
    [record] = out["operator_decisions"]
    assert (record["operator"], record["approvers"]) == ("bo", ["ana", "bo"])


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
        assert [
            m.operator for m in await count_approval(ledger, key, 3, mark("ana"), replayed=True)
        ] == ["ana"]
        assert [
            m.operator for m in await count_approval(ledger, key, 3, mark("ana"), replayed=True)
        ] == ["ana"]
        assert [
            m.operator for m in await count_approval(ledger, key, 3, mark("bo"), replayed=False)
        ] == [
            "ana",
            "bo",
        ]
        # counted before: ana's again reads the slots after hers, and takes none
        again = await count_approval(ledger, key, 3, mark("ana"), replayed=True)
        assert [m.operator for m in again] == ["ana", "bo"]
        assert [m.operator for m in await approvals(ledger, key, "sha256:a", 3)] == ["ana", "bo"]
        assert await ledger.peek(approval_key(key, "sha256:a", 3), ApprovalMark) is None
        first = await ledger.peek(approval_key(key, "sha256:a", 1), ApprovalMark)
        assert first is not None and first.done
        # another digest (the rules changed): a count of its own
        other = await count_approval(ledger, key, 3, mark("bo", "sha256:b"), replayed=False)
        assert [m.operator for m in other] == ["bo"]
        # a quorum of two: the slots stop at two
        assert len(await count_approval(ledger, key, 2, mark("cy"), replayed=False)) == 2

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


# ------------------------------------------------------- the same identity twice, not counted


def test_the_ledger_refuses_an_identitys_second_approval_given_now_and_keeps_a_replayed_one() -> (
    None
):
    """Two approvals of one identity at the same moment (two workers, two tokens): the slot
    walk meets the first in its slot and refuses the second by name; a replayed one is found
    again, not refused."""

    async def go() -> None:
        ledger, key = MemoryLedger(), "escalations:esc_1"
        ana = ApprovalMark(operator="ana", digest="sha256:a")
        first = await count_approval(ledger, key, 2, ana, replayed=False)
        assert [m.operator for m in first] == ["ana"]
        with pytest.raises(ApprovalAlreadyCounted) as refused:
            await count_approval(ledger, key, 2, ana, replayed=False)
        assert str(refused.value) == already_approved("ana", ["ana"], 2)
        assert "(1 of 2 approvals: ana); a quorum of 2 needs" in str(refused.value)
        again = await count_approval(ledger, key, 2, ana, replayed=True)
        assert [m.operator for m in again] == ["ana"]
        assert await ledger.peek(approval_key(key, "sha256:a", 2), ApprovalMark) is None

    asyncio.run(go())


def test_answering_a_checkpoint_left_behind_after_the_quorum_ran_elsewhere_runs_nothing() -> None:
    """ana approves; a copy of that waiting thread gets bo's approval and runs the call. The
    original still shows "1 of 2 approvals: ana"; answered there later, nothing runs again,
    and the answer is refused naming bo, who completed it."""
    a = Agent([calls(DELETE), "deleted", "again"], tool_gates=HELD, escalation=TWO)
    a.graph = check_resumes(a.graph)  # as the factory's graph: a resume that lost is told
    a.say("delete a1")
    a.run(Command(resume=approve("ana")))
    _copy_thread(a, "t", "copy")
    a.run(Command(resume=approve("bo")), thread="copy")
    assert a.conn.crm_calls == [DELETE]
    [left] = a.state().interrupts
    assert "1 of 2 approvals: ana" in left.value["action_requests"][0]["description"]
    with pytest.raises(EscalationAlreadyDecided, match=r"already decided by bo \("):
        a.run(Command(resume=approve("cy")))
    assert a.conn.crm_calls == [DELETE]
    [record] = a.state().values["operator_decisions"]
    assert (record["operator"], record["approvers"]) == ("bo", ["ana", "bo"])


# ------------------------------------------------------- deadlines and edits under a quorum


def test_a_held_call_under_a_quorum_is_not_offered_an_edit() -> None:
    a = Agent([calls(DELETE), "deleted"], tool_gates=HELD, escalation=TWO)
    a.say("delete a1")
    [asked] = a.state().interrupts
    said = asked.value["action_requests"][0]["description"]
    assert "edit" not in said and "Approve to run it once as shown; reject" in said
    one = Agent([calls(DELETE), "deleted"], tool_gates=HELD)
    one.say("delete a1")
    [asked] = one.state().interrupts
    assert "edit to run it with other arguments" in asked.value["action_requests"][0]["description"]


@pytest.fixture
def shift(monkeypatch: pytest.MonkeyPatch) -> list[timedelta]:
    """The denial handlers' clock, moved on by ``shift[0]`` (set before a graph is built)."""
    moved = [timedelta(0)]
    monkeypatch.setattr(denial_handler, "_now", lambda: datetime.now(timezone.utc) + moved[0])
    return moved


def waiting_an_hour() -> Agent:
    """A held call under a quorum of two with a deadline an hour away, waiting."""
    hour = timedelta(hours=1)
    late = EscalationSettings(quorum={"approval": 2}, expires_after={"approval": hour})
    a = Agent([calls(DELETE), "expired"], tool_gates=HELD, escalation=late)
    a.say("delete a1")
    return a


def test_an_approval_after_the_deadline_is_declined_at_once_and_not_counted(
    shift: list[timedelta],
) -> None:
    a = waiting_an_hour()
    shift[0] = timedelta(hours=2)
    out = a.run(Command(resume=approve("ana")))
    assert a.conn.crm_calls == [] and a.state().interrupts == ()
    [record] = out["operator_decisions"]
    assert (record["operator"], record["verdict"]) == ("ana", "expired")
    assert "approvers" not in record  # no approval was counted


def test_an_approval_after_the_deadline_following_one_in_time_is_declined_in_its_own_name(
    shift: list[timedelta],
) -> None:
    a = waiting_an_hour()
    a.run(Command(resume=approve("ana")))
    shift[0] = timedelta(hours=2)
    out = a.run(Command(resume=approve("bo")))
    assert a.conn.crm_calls == []
    [record] = out["operator_decisions"]
    assert (record["operator"], record["verdict"], record["approvers"]) == (
        "bo",
        "expired",
        ["ana"],
    )


# ------------------------------------------------------- a tool's own quorum


DELETE_TWICE = ToolGates(approvals=[Approvals(tool="crm.delete_customer", quorum=2)])


def test_a_tools_quorum_holds_its_calls_until_two_distinct_operators_approved() -> None:
    a = Agent([calls(DELETE), "deleted"], tool_gates=DELETE_TWICE)
    a.say("delete a1")
    [first] = a.state().interrupts
    assert first.value["quorum"] == 2 and first.value["rule"] == "approvals:crm.delete_customer"
    assert first.value["allowed_decisions"] == ["approve", "reject", "respond"]
    assert first.value["rules"]["approvals"] == [{"tool": "crm.delete_customer", "quorum": 2}]
    assert "edit" not in first.value["action_requests"][0]["description"]
    a.run(Command(resume=approve("ana")))
    assert a.conn.crm_calls == []
    with pytest.raises(ValidationError, match="operator 'ana' already approved"):
        a.run(Command(resume=approve("ana")))
    with pytest.raises(ValidationError, match=r"approvals 'crm.delete_customer' quorum 2"):
        a.run(Command(resume={**approve("bo"), "digest": "sha256:other"}))  # stale: named
    out = a.run(Command(resume=approve("bo")))
    assert a.conn.crm_calls == [DELETE]
    [record] = out["operator_decisions"]
    assert record["approvers"] == ["ana", "bo"]


def test_answers_saved_tells_a_replayed_answer_from_the_runs_own() -> None:
    from langgraph._internal._constants import CONFIG_KEY_RESUME_MAP, CONFIG_KEY_SCRATCHPAD
    from langgraph.types import _interrupt_id

    from algenta_graph._langgraph import answers_saved

    pad = SimpleNamespace(resume=["a0", "a1"])  # LangGraph's task scratchpad: its answers

    def conf(**more: object) -> Any:
        return {"configurable": {CONFIG_KEY_SCRATCHPAD: pad, "checkpoint_ns": "n", **more}}

    assert answers_saved(conf()) == 2  # a plain resume is not among them yet
    assert answers_saved(conf(**{CONFIG_KEY_RESUME_MAP: {_interrupt_id("n", 1): "a1"}})) == 1
    assert answers_saved(conf(**{CONFIG_KEY_RESUME_MAP: {_interrupt_id("n", 0): "a1"}})) == 1
    assert answers_saved(conf(**{CONFIG_KEY_RESUME_MAP: {"elsewhere": "x"}})) == 2
    assert answers_saved({"configurable": {}}) is None


def test_a_tools_quorum_is_bound_in_the_digest_and_the_higher_quorum_wins() -> None:
    digests = []
    for quorum in (2, 3):
        gates = ToolGates(
            require_approval=["crm.delete_customer"],
            approvals=[Approvals(tool="crm.delete_*", quorum=quorum)],
        )
        a = Agent([calls(DELETE), "deleted"], tool_gates=gates, escalation=TWO)
        a.say("delete a1")
        [asked] = a.state().interrupts
        digests.append(asked.value["digest"])
        assert asked.value["quorum"] == quorum  # the gate's 2, or the tool's 3
        assert asked.value["rule"] == "require_approval:crm.delete_customer"
    assert digests[0] != digests[1]


def test_a_tools_quorum_rule_resolves_against_the_catalog_like_every_rule() -> None:
    delete, lookup = ToolRef("crm", "delete_customer"), ToolRef("crm", "lookup")
    catalog = GateCatalog(tools=(CatalogTool(delete), CatalogTool(lookup)))
    with pytest.raises(ToolGatesError, match=r"tool_gates.approvals\[0\].*'crm.delte_customer'"):
        ToolGates(approvals=[Approvals(tool="crm.delte_customer", quorum=2)]).compile(catalog)
    gates = ToolGates(
        approvals=[Approvals(tool="crm.delete_customer", quorum=2)],
        servers={"crm": ServerRules(unlisted="deny")},
    )
    assert not gates.empty
    rules = gates.compile(catalog)
    [shown, posture] = [r.shown() for r in rules.resolution]
    assert shown == {
        "rule": "approvals 'crm.delete_customer' (quorum 2)",
        "gate": "approval",
        "tools": ["crm.delete_customer"],
    }
    assert posture["tools"] == ["crm.lookup"]  # the quorum's tool is listed: not unlisted
    held = rules.check(delete, {}, CallCounts())
    assert held is not None and (held.gate, held.rule) == (
        "approval",
        "approvals:crm.delete_customer",
    )
    assert "need 2 distinct operators' approvals" in held.message
    assert rules.in_force(delete, "escalate")["approvals"] == [
        {"tool": "crm.delete_customer", "quorum": 2}
    ]
    assert "approvals" not in rules.in_force(lookup, "escalate")
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Approvals(tool="crm.delete_customer", quorum=0)
    with pytest.raises(ValidationError, match="tool pattern"):
        Approvals(tool=" crm", quorum=2)
    parsed = ToolGates.model_validate(
        {"approvals": [{"tool": "crm.delete_customer", "quorum": 2}], "require_approval": ["x"]}
    )
    assert parsed.approvals == [Approvals(tool="crm.delete_customer", quorum=2)]
