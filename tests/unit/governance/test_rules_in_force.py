"""Rules that mean what they say, through the compiled graph over a CRM's tools
(``gated_stub.CrmStub``; the real CRM over MCP is ``tests/integration/test_tool_gates.py``):

- every rule resolves against the live catalog when the graph is built, or the build is refused
  naming the rule and the nearest tool names; a server's posture for the tools no approval rule
  lists, and tools a server marks ``destructiveHint`` held by default;
- an operator's edit, and an approval, of any escalation (a held call or an engine gate's) meets
  every argument rule in force for the tool, on its real MCP name;
- an answer is bound to the rules in force: after the graph is rebuilt with a changed rule (same
  name) an answer carrying the digest shown under the old one is refused as stale, naming why.

(``docs/ARCHITECTURE.md``, "Graph-side gates", invariant 19.)
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from gated_stub import CrmStub
from governed_stub import answer as engine_answer
from governed_stub import denial_body, receipt_body
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import ValidationError

from algenta_graph import build_governed_graph
from algenta_graph.connection.outcomes import ExecutionReceipt
from algenta_graph.errors import ConfigError
from algenta_graph.governance.escalations import EscalationSettings
from algenta_graph.governance.tool_gates import ArgumentRule, Budget, ServerRules, ToolGates
from algenta_graph.testing import ScriptedChatModel

HOOK = "http://127.0.0.1:9/hook"


def calls(*batch: tuple[str, dict[str, Any]], n: int = 0) -> dict[str, Any]:
    """One model turn calling these tools."""
    return {
        "content": "",
        "tool_calls": [
            {"name": name, "args": args, "id": f"c{n}_{i}"} for i, (name, args) in enumerate(batch)
        ],
    }


def at_most(limit: int, name: str = "refund_limit") -> ArgumentRule:
    return ArgumentRule(
        name=name,
        tool="crm.refund",
        schema={"properties": {"amount": {"type": "number", "maximum": limit}}},
    )


class Agent:
    """The governed graph over a :class:`CrmStub`, on a checkpointer it may share."""

    def __init__(
        self,
        replies: list[Any],
        *,
        conn: CrmStub | None = None,
        saver: InMemorySaver | None = None,
        **options: Any,
    ) -> None:
        self.conn = conn or CrmStub()
        self.model = ScriptedChatModel(replies=replies)
        self.graph = build_governed_graph(self.conn, self.model, **options).compile(
            checkpointer=saver or InMemorySaver()
        )

    def run(self, value: Any, thread: str = "t") -> Any:
        return asyncio.run(self.graph.ainvoke(value, {"configurable": {"thread_id": thread}}))

    def say(self, text: str, thread: str = "t") -> Any:
        return self.run({"messages": [("user", text)]}, thread)

    def state(self, thread: str = "t") -> Any:
        return self.graph.get_state({"configurable": {"thread_id": thread}})


# --------------------------------------------------------------------------- every rule resolves


@pytest.mark.parametrize(
    ("gates", "named", "nearest"),
    [
        (
            ToolGates(require_approval=["crm.delete_custmer"]),
            "crm.delete_custmer",
            "delete_customer",
        ),
        (
            ToolGates(budgets=[Budget(tool="crm.lookup_custmer", thread_limit=1)]),
            "crm.lookup_custmer",
            "lookup_customer",
        ),
        (
            ToolGates(
                argument_rules=[
                    ArgumentRule(
                        name="r",
                        tool="crm.refnd",
                        schema={"properties": {"amount": {"type": "number", "maximum": 1}}},
                    )
                ]
            ),
            "crm.refnd",
            "refund",
        ),
    ],
)
def test_a_rule_that_names_no_tool_refuses_the_build_naming_the_nearest_tools(
    gates: ToolGates, named: str, nearest: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        Agent([], tool_gates=gates)
    message = str(refused.value)
    assert f"'{named}' names no tool" in message
    assert f"crm.{nearest}" in message.partition("nearest:")[2]


# --------------------------------------------------------------------------- every edit, every rule


def test_an_edit_of_an_engine_gate_escalation_meets_execute_decisions_argument_rules() -> None:
    """An operator's edit of a ``confidence`` escalation of ``execute_decision`` may not send the
    decision to a webhook an argument rule forbids (the escalation has no held tool)."""
    internal_only = ArgumentRule(
        name="internal_hooks",
        tool="algenta.execute_decision",
        schema={
            "properties": {"webhook_url": {"type": "string", "pattern": r"^http://127\.0\.0\.1:9/"}}
        },
    )
    a = Agent(
        [calls(("execute_decision", {"decision_id": "d1", "webhook_url": HOOK})), "asked"],
        tool_gates=ToolGates(argument_rules=[internal_only]),
    )
    a.conn.answers.append(engine_answer(denial_body("confidence")))
    a.conn.operator_answers.append(ExecutionReceipt.model_validate(receipt_body("d1")))
    a.say("execute d1")
    assert a.state().next == ("denial_handler_confidence",)
    evil = {"decision_id": "d1", "webhook_url": "https://evil.example/steal"}
    edit = {"type": "edit", "edited_action": {"name": "execute_decision", "args": evil}}
    with pytest.raises(ValidationError, match="internal_hooks"):
        a.run(Command(resume={"decisions": [edit], "operator": "ana"}))
    assert a.conn.operator_calls == [] and a.state().next == ("denial_handler_confidence",)


# --------------------------------------------------------------------------- bound to the rules


def test_an_answer_given_under_a_rule_since_changed_is_refused_as_stale_after_a_rebuild() -> None:
    """The graph is rebuilt on the same checkpoints with the rule that passed a held call changed
    (same name, a lower limit): the approval the operator gave for what was shown under the old
    rule is refused as stale, naming the rule, and nothing runs."""
    saver, conn = InMemorySaver(), CrmStub()
    before = ToolGates(require_approval=["crm.refund"], argument_rules=[at_most(1000)])
    first = Agent(
        [calls(("refund", {"account_id": "a1", "amount": 500})), "held"],
        conn=conn,
        saver=saver,
        tool_gates=before,
    )
    first.say("refund 500")
    [shown] = first.state().interrupts
    digest = shown.value["digest"]
    after = ToolGates(require_approval=["crm.refund"], argument_rules=[at_most(100)])
    rebuilt = Agent(["refunded"], conn=conn, saver=saver, tool_gates=after)
    approve = {"decisions": [{"type": "approve"}], "operator": "ana", "digest": digest}
    with pytest.raises(ValidationError, match=r"(?s)stale.*refund_limit"):
        rebuilt.run(Command(resume=approve))
    assert conn.crm_calls == [] and rebuilt.state().next == ("denial_handler_approval",)


def test_an_approval_after_a_rule_changed_is_checked_against_the_rule_in_force() -> None:
    """Without a digest the answer is for the question asked now, and the approval of a held call
    whose arguments break the rule now in force is refused: reject, or edit within it."""
    saver, conn = InMemorySaver(), CrmStub()
    before = ToolGates(require_approval=["crm.refund"], argument_rules=[at_most(1000)])
    Agent(
        [calls(("refund", {"account_id": "a1", "amount": 500})), "held"],
        conn=conn,
        saver=saver,
        tool_gates=before,
    ).say("refund 500")
    after = ToolGates(require_approval=["crm.refund"], argument_rules=[at_most(100)])
    rebuilt = Agent(["refunded", "done"], conn=conn, saver=saver, tool_gates=after)
    approve = {"decisions": [{"type": "approve"}], "operator": "ana"}
    with pytest.raises(ValidationError, match=r"approve: the arguments of crm\.refund break rule"):
        rebuilt.run(Command(resume=approve))
    assert conn.crm_calls == []
    edited = {"name": "refund", "args": {"account_id": "a1", "amount": 100}}
    edit = {"type": "edit", "edited_action": edited}
    rebuilt.run(Command(resume={"decisions": [edit], "operator": "ana"}))
    assert conn.crm_calls == [("refund", {"account_id": "a1", "amount": 100})]


def test_approving_an_arguments_escalation_overrides_its_rule_and_no_other() -> None:
    """A call breaking two rules is escalated under the first; the operator's approval overrides
    that one, and is refused while the call breaks the second."""
    second = ArgumentRule(
        name="known_accounts",
        tool="crm.refund",
        schema={"properties": {"account_id": {"type": "string", "pattern": "^a"}}},
    )
    a = Agent(
        [calls(("refund", {"account_id": "z9", "amount": 5000})), "asked", "done"],
        tool_gates=ToolGates(argument_rules=[at_most(1000), second]),
        on_denial={"arguments": "escalate"},
    )
    a.say("refund 5000 to z9")
    [held] = a.state().values["denials"]
    assert (held["gate"], held["rule"]) == ("arguments", "refund_limit")
    with pytest.raises(ValidationError, match="break rule 'known_accounts'"):
        a.run(Command(resume={"decisions": [{"type": "approve"}], "operator": "ana"}))
    assert a.conn.crm_calls == []
    edited = {"name": "refund", "args": {"account_id": "a9", "amount": 5000}}
    edit = {"decisions": [{"type": "edit", "edited_action": edited}], "operator": "ana"}
    with pytest.raises(ValidationError, match="break rule 'refund_limit'"):  # an edit meets all
        a.run(Command(resume=edit))
    a.conn.crm_calls.clear()
    b = Agent(
        [calls(("refund", {"account_id": "a1", "amount": 5000})), "asked", "done"],
        tool_gates=ToolGates(argument_rules=[at_most(1000), second]),
        on_denial={"arguments": "escalate"},
    )
    b.say("refund 5000 to a1")
    b.run(Command(resume={"decisions": [{"type": "approve"}], "operator": "ana"}))
    assert b.conn.crm_calls == [("refund", {"account_id": "a1", "amount": 5000})]


def test_per_call_answers_meet_the_rules_in_force_too() -> None:
    a = Agent(
        [calls(("refund", {"account_id": "a1", "amount": 10})), "held", "done"],
        tool_gates=ToolGates(require_approval=["crm.refund"], argument_rules=[at_most(1000)]),
        escalation=EscalationSettings(interrupt_mode="per_call"),
    )
    a.say("refund 10")
    [asked] = a.state().interrupts
    edited = {"name": "refund", "args": {"account_id": "a1", "amount": 5000}}
    edit = {"type": "edit", "edited_action": edited, "operator": "ana"}
    with pytest.raises(ValidationError, match="break rule 'refund_limit'"):
        a.run(Command(resume={asked.id: edit}))
    a.run(Command(resume={asked.id: {"type": "approve", "operator": "ana"}}))
    assert a.conn.crm_calls == [("refund", {"account_id": "a1", "amount": 10})]


# --------------------------------------------------------------------------- postures


def test_a_servers_approve_posture_holds_what_no_rule_lists_and_allow_lets_through() -> None:
    gates = ToolGates(
        allow=["crm.lookup_customer"], servers={"crm": ServerRules(unlisted="approve")}
    )
    a = Agent(
        [
            calls(
                ("lookup_customer", {"account_id": "a1"}),
                ("refund", {"account_id": "a1", "amount": 5}),
                ("shadow_delete_customer", {"account_id": "a1"}),
            ),
            "one held",
        ],
        tool_gates=gates,
    )
    out = a.say("look up, refund, and delete in the shadow crm")
    assert a.conn.crm_calls == [
        ("lookup_customer", {"account_id": "a1"}),
        ("shadow_delete_customer", {"account_id": "a1"}),
    ]
    [held] = out["denials"]
    assert (held["gate"], held["rule"], held["tool"]) == ("approval", "unlisted:crm", "refund")
    assert a.state().next == ("denial_handler_approval",)
    # the run lists the calls its rules decided: the allowed lookup, not the other server's
    assert [(c["server"], c["tool"]) for c in out["tool_calls"]] == [("crm", "lookup_customer")]


def test_a_servers_deny_posture_refuses_what_no_rule_lists() -> None:
    gates = ToolGates(
        require_approval=["crm.delete_customer"], servers={"crm": ServerRules(unlisted="deny")}
    )
    a = Agent(
        [
            calls(
                ("refund", {"account_id": "a1", "amount": 5}),
                ("delete_customer", {"account_id": "a1"}),
            ),
            "refused",
        ],
        tool_gates=gates,
    )
    out = a.say("refund and delete a1")
    assert a.conn.crm_calls == []
    assert [(d["gate"], d["rule"], d["code"], d["policy"]) for d in out["denials"]] == [
        ("arguments", "unlisted:crm", "tool_not_listed", "report"),
        ("approval", "require_approval:crm.delete_customer", "tool_approval_required", "escalate"),
    ]
