"""The whole governed graph in process: retrieval, the model node, the tool node and the denial
handlers over a scripted connection with a CRM's tools (``gated_stub.CrmStub``).

It is the fast, mutation-tested twin of ``tests/integration/test_tool_gates.py`` (a real CRM
over MCP and the reference engine): what a held call becomes on approve, edit and reject, the
budgets and argument rules by name, the records each step leaves (``docs/ARCHITECTURE.md``,
"Gates on any tool", invariants 1 and 15), and what the model node binds and when it stops at
the step limit ("The graph", invariant 2).
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from gated_stub import CrmStub
from governed_stub import StubCatalog, denial_body, make_node, receipt_body
from governed_stub import answer as engine_answer
from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pydantic import ValidationError

from algenta_graph import build_governed_graph
from algenta_graph.audit.verification import verify_chain
from algenta_graph.governance.escalations import EscalationSettings, escalation_digest
from algenta_graph.governance.gates import GATE_NAMES
from algenta_graph.governance.run_settings import GraphSettings
from algenta_graph.governance.tool_gates import ArgumentRule, Budget, ToolGates, ToolRef
from algenta_graph.nodes.agent import STEP_LIMIT_MESSAGE, AgentNodes
from algenta_graph.nodes.executor import DecisionExecutor
from algenta_graph.nodes.governed_tool import GovernedToolNode
from algenta_graph.retrieval import ToolIndex
from algenta_graph.retrieval.catalog import GovernedCatalog
from algenta_graph.state import RECORD_FIELDS
from algenta_graph.testing import ScriptedChatModel

APPROVE = {"decisions": [{"type": "approve", "message": "customer asked"}], "operator": "ana"}
REJECT = {"decisions": [{"type": "reject", "message": "not verified"}], "operator": "bo"}
DELETE = ("delete_customer", {"account_id": "a1"})

DENIAL_FIELDS = {
    "kind", "gate", "code", "message", "override_hint", "status_code", "decision_id",
    "webhook_url", "tool_call_id", "source", "tool", "server", "catalog_name", "args",
    "args_digest", "rule", "turn", "policy",
}  # fmt: skip
CALL_FIELDS = {"kind", "tool", "server", "catalog_name", "tool_call_id", "args_digest", "turn"}
CHAIN = {"seq", "prev", "hash"}


def calls(*batch: tuple[str, dict[str, Any]], n: int = 0) -> dict[str, Any]:
    """One model turn calling these tools."""
    return {
        "content": "",
        "tool_calls": [
            {"name": name, "args": args, "id": f"c{n}_{i}"} for i, (name, args) in enumerate(batch)
        ],
    }


class Agent:
    """The governed graph over a :class:`CrmStub`, compiled with an in-memory checkpointer."""

    def __init__(self, replies: list[Any], **options: Any) -> None:
        self.conn = CrmStub()
        self.model = ScriptedChatModel(replies=replies)
        self.graph = build_governed_graph(self.conn, self.model, **options).compile(
            checkpointer=InMemorySaver()
        )

    def config(self, thread: str = "t", **context: Any) -> Any:
        return {"configurable": {"thread_id": thread, **context}}

    def run(self, value: Any, thread: str = "t", **context: Any) -> Any:
        return asyncio.run(self.graph.ainvoke(value, self.config(thread, **context)))

    def say(self, text: str, thread: str = "t", **context: Any) -> Any:
        return self.run({"messages": [("user", text)]}, thread, **context)

    def state(self, thread: str = "t") -> Any:
        return self.graph.get_state(self.config(thread))


def answers(out: Any) -> list[ToolMessage]:
    return [m for m in out["messages"] if isinstance(m, ToolMessage)]


# --------------------------------------------------------------------------- the agent's nodes


def test_the_model_sees_the_system_prompt_then_only_the_ranked_tools_and_the_gateway() -> None:
    a = Agent(["no tool needed"], top_k=1, system_prompt="be careful")
    out = a.say("refund money to the customer account")
    assert out["selected_tools"] == ["refund"]
    [shown] = a.model.bound_tools
    assert [t["function"]["name"] for t in shown] == ["refund", "search_tools"]
    [messages] = a.model.seen
    assert isinstance(messages[0], SystemMessage) and messages[0].content == "be careful"
    assert messages[1].content == "refund money to the customer account"
    # every record list is present from the first turn, and empty without a governed step
    assert all(out[field] == [] for field in RECORD_FIELDS)
    assert out["messages"][-1].content == "no tool needed"


def test_without_a_system_prompt_the_conversation_goes_to_the_model_as_it_is() -> None:
    a = Agent(["hi"], system_prompt=None)
    a.say("hello there")
    [messages] = a.model.seen
    assert [m.content for m in messages] == ["hello there"]


def test_a_run_sees_only_its_profiles_tools_even_when_they_were_selected_before() -> None:
    conn = CrmStub()
    model = ScriptedChatModel(replies=["ok", "ok"])
    index = ToolIndex()
    index.add(conn.tools)
    nodes = AgentNodes(
        GovernedCatalog(conn, model, index), GraphSettings(top_k=5, policies={}), None
    )
    selected = ["execute_decision", "refund"]
    state: Any = {"messages": [HumanMessage("go")], "selected_tools": selected}
    asyncio.run(nodes.call_model(state, {"configurable": {"profile": "observe"}}))
    asyncio.run(nodes.call_model(state, {"configurable": {"profile": "execute"}}))
    observed, executing = ([t["function"]["name"] for t in b] for b in model.bound_tools)
    assert observed == ["refund", "search_tools"]
    assert executing == ["execute_decision", "refund", "search_tools"]


def test_a_tool_call_goes_to_the_tool_node_and_a_plain_answer_ends_the_turn() -> None:
    a = Agent([calls(("lookup_customer", {"account_id": "a1"})), "found a1"])
    out = a.say("look up customer a1")
    assert a.conn.crm_calls == [("lookup_customer", {"account_id": "a1"})]
    [found] = answers(out)
    assert '"tool": "lookup_customer"' in str(found.content)
    assert out["messages"][-1].content == "found a1"
    assert a.state().next == ()


def _stopped(limit: int | None) -> bool:
    """Whether a run with this ``recursion_limit`` stopped before its tool call."""
    a = Agent([calls(("lookup_customer", {"account_id": "a1"})), "done"])
    cfg: RunnableConfig = {"configurable": {"thread_id": "t"}}
    if limit is not None:
        cfg["recursion_limit"] = limit
    out = asyncio.run(a.graph.ainvoke({"messages": [("user", "look up a1")]}, cfg))
    last = out["messages"][-1]
    if last.content == STEP_LIMIT_MESSAGE.format(limit=limit):
        assert a.conn.crm_calls == [] and not last.tool_calls
        return True
    assert a.conn.crm_calls == [("lookup_customer", {"account_id": "a1"})]
    assert last.content == "done"
    return False


def test_a_tool_call_that_cannot_fit_another_round_is_replaced_by_the_step_limit_message() -> None:
    # a tool round is governed_tool, up to one handler per gate, then the model again
    round_steps = 2 + len(GATE_NAMES)
    # the model runs as the second step: it has `limit - 2` steps left after it
    fits = round_steps + 3
    assert _stopped(fits - 1) is True
    assert _stopped(fits) is False
    assert _stopped(None) is False  # the default limit


def test_tool_refs_name_the_server_and_the_real_tool() -> None:
    node, _, _ = make_node()  # a connection that reports no origin
    assert node.tool_ref("execute_decision") == ToolRef("algenta", "execute_decision")
    assert node.tool_ref("shadow_tool") == ToolRef("?", "shadow_tool")
    conn = CrmStub()
    crm_node = GovernedToolNode(
        StubCatalog(conn),  # type: ignore[arg-type]
        DecisionExecutor(conn),
        GraphSettings(top_k=5, policies={}),
    )
    assert crm_node.tool_ref("refund") == ToolRef("crm", "refund")
    assert crm_node.tool_ref("execute_decision") == ToolRef("algenta", "execute_decision")
    assert crm_node.tool_ref("unknown") == ToolRef("?", "unknown")


# --------------------------------------------------------------------------- held calls


def test_a_held_call_runs_once_on_approval_and_every_step_is_a_chained_record() -> None:
    a = Agent(
        [calls(DELETE), "deleted", "it is done"],
        tool_gates=ToolGates(require_approval=["crm.delete_customer"]),
    )
    first = a.say("delete customer a1")
    pending = a.state()
    assert a.conn.crm_calls == []  # held: nothing ran
    assert pending.next == ("denial_handler_approval",)
    [held_answer] = answers(first)
    assert held_answer.status == "error" and "approval" in str(held_answer.content)
    [interrupt] = pending.interrupts
    request = interrupt.value
    [action] = request["action_requests"]
    assert (action["name"], action["args"]) == ("delete_customer", {"account_id": "a1"})
    assert "crm.delete_customer" in request["action_requests"][0]["description"]
    assert request["escalations"][0]["tool"] == "crm.delete_customer"
    assert (request["gate"], request["override_flag"], request["decision_id"]) == (
        "approval",
        None,
        None,
    )
    out = a.run(Command(resume=APPROVE))
    assert a.conn.crm_calls == [DELETE]
    [held] = out["denials"]
    assert set(held) - CHAIN - {"escalation_id", "raised_at"} == DENIAL_FIELDS
    assert (held["kind"], held["gate"], held["code"], held["source"]) == (
        "denial",
        "approval",
        "tool_approval_required",
        "graph",
    )
    assert (held["tool"], held["server"], held["catalog_name"]) == (
        "delete_customer",
        "crm",
        "delete_customer",
    )
    assert (held["args"], held["rule"], held["policy"]) == (
        {"account_id": "a1"},
        "require_approval:crm.delete_customer",
        "escalate",
    )
    assert held["args_digest"].startswith("sha256:") and held["turn"]
    assert held["decision_id"] is None and held["webhook_url"] is None
    assert held["tool_call_id"] == "c0_0" and held["escalation_id"].startswith("esc_")
    [decision] = out["operator_decisions"]
    assert (decision["operator"], decision["verdict"], decision["result"]) == (
        "ana",
        "approved",
        "executed",
    )
    assert (decision["reason"], decision["gate"], decision["tool_call_id"]) == (
        "customer asked",
        "approval",
        "c0_0",
    )
    assert decision["tool"] == "crm.delete_customer"
    assert decision["args_digest"] == held["args_digest"]
    assert decision["escalation_id"] == held["escalation_id"]
    assert decision["original_args"] is None and decision["edited_args"] is None
    [ran] = out["tool_calls"]
    assert set(ran) - CHAIN - {"time"} == CALL_FIELDS | {"result"}
    assert ran["result"] == "executed"
    assert (ran["tool"], ran["server"], ran["catalog_name"], ran["tool_call_id"]) == (
        "delete_customer",
        "crm",
        "delete_customer",
        "c0_0",
    )
    assert ran["args_digest"] == held["args_digest"] and ran["turn"] == held["turn"]
    [message] = answers(out)
    assert message.status == "success" and message.tool_call_id == "c0_0"
    assert "APPROVED" in str(message.content) and '"tool": "delete_customer"' in str(
        message.content
    )
    assert verify_chain(out).ok and verify_chain(out).count == 3
    again = a.say("and now?")  # a new turn: never runs it again
    assert a.conn.crm_calls == [DELETE]
    assert verify_chain(again).ok and verify_chain(again).count == 3


def test_an_edit_runs_the_edited_arguments_scrubbed_and_is_recorded_modified() -> None:
    a = Agent([calls(DELETE), "done"], tool_gates=ToolGates(require_approval=["delete_*"]))
    edited = {"name": "delete_customer", "args": {"account_id": "a2", "reason": "dup", "force": 1}}
    edit = {"decisions": [{"type": "edit", "edited_action": edited}], "operator": "ana"}
    a.say("delete a1")
    wrong = {"name": "refund", "args": {}}
    with pytest.raises(ValidationError, match="Input should be 'delete_customer'"):
        a.run(Command(resume={**edit, "decisions": [{"type": "edit", "edited_action": wrong}]}))
    assert a.conn.crm_calls == [] and a.state().next == ("denial_handler_approval",)
    out = a.run(Command(resume=edit))
    assert a.conn.crm_calls == [("delete_customer", {"account_id": "a2", "reason": "dup"})]
    [decision] = out["operator_decisions"]
    assert (decision["verdict"], decision["result"]) == ("modified", "executed")
    assert decision["edited_args"] == {"account_id": "a2", "reason": "dup"}
    assert decision["original_args"] == {"account_id": "a1"}
    assert decision["args_digest"] != out["denials"][0]["args_digest"]
    [ran] = out["tool_calls"]
    assert ran["args_digest"] == decision["args_digest"]
    [message] = answers(out)
    assert "a2" in str(message.content) and message.status == "success"


def test_a_reject_runs_nothing_and_the_model_is_told() -> None:
    a = Agent([calls(DELETE), "ok, not deleted"], tool_gates=ToolGates(require_approval=["crm.*"]))
    a.say("delete a1")
    out = a.run(Command(resume=REJECT))
    assert a.conn.crm_calls == []
    [decision] = out["operator_decisions"]
    assert (decision["verdict"], decision["result"], decision["operator"]) == (
        "declined",
        "declined",
        "bo",
    )
    assert decision["reason"] == "not verified"
    [message] = answers(out)
    assert "REJECTED" in str(message.content) and "NOT run" in str(message.content)
    assert "not verified" in str(message.content)
    assert out["tool_calls"] == []
    assert verify_chain(out).ok and verify_chain(out).count == 2
    assert out["messages"][-1].content == "ok, not deleted"


def test_an_edit_that_breaks_an_argument_rule_is_refused_before_it_is_saved() -> None:
    rule = ArgumentRule(
        name="refund_at_most_1000",
        tool="crm.refund",
        schema={"properties": {"amount": {"type": "number", "maximum": 1000}}},
    )
    a = Agent(
        [calls(("refund", {"account_id": "a1", "amount": 10})), "refunded"],
        tool_gates=ToolGates(require_approval=["crm.refund"], argument_rules=[rule]),
    )
    a.say("refund 10")
    edited = {"name": "refund", "args": {"account_id": "a1", "amount": 5000}}
    bigger = {"decisions": [{"type": "edit", "edited_action": edited}], "operator": "ana"}
    with pytest.raises(ValidationError, match="break rule 'refund_at_most_1000'"):
        a.run(Command(resume=bigger))
    assert a.conn.crm_calls == [] and a.state().next == ("denial_handler_approval",)
    out = a.run(Command(resume=APPROVE))
    assert a.conn.crm_calls == [("refund", {"account_id": "a1", "amount": 10})]
    assert [d["verdict"] for d in out["operator_decisions"]] == ["approved"]


def test_per_call_mode_asks_about_each_held_call_and_runs_each_approved_once() -> None:
    a = Agent(
        [calls(DELETE, ("delete_customer", {"account_id": "a2"})), "one of two"],
        tool_gates=ToolGates(require_approval=["crm.delete_customer"]),
        escalation=EscalationSettings(interrupt_mode="per_call"),
    )
    a.say("delete both")
    [asked] = a.state().interrupts
    assert (asked.value["type"], asked.value["name"], asked.value["args"]) == (
        "tool_approval",
        "delete_customer",
        {"account_id": "a1"},
    )
    a.run(Command(resume={asked.id: {"type": "approve", "operator": "ana"}}))
    [then] = a.state().interrupts
    assert then.value["args"] == {"account_id": "a2"}
    out = a.run(Command(resume={then.id: {"type": "reject", "operator": "ana"}}))
    assert a.conn.crm_calls == [DELETE]
    assert [d["verdict"] for d in out["operator_decisions"]] == ["approved", "declined"]
    assert [d["tool_call_id"] for d in out["operator_decisions"]] == ["c0_0", "c0_1"]
    assert len(out["tool_calls"]) == 1


def test_a_run_may_only_tighten_a_graph_side_gate() -> None:
    a = Agent([calls(DELETE), "halted?"], tool_gates=ToolGates(require_approval=["crm.*"]))
    with pytest.raises(ValueError, match=r"\['approval'\]: 'report' is looser"):
        a.say("delete a1", thread="loose", on_denial={"approval": "report"})
    out = a.say("delete a1", on_denial={"approval": "halt"})
    state = a.state()
    assert a.conn.crm_calls == [] and state.next == () and not state.interrupts
    [held] = out["denials"]
    assert (held["gate"], held["policy"]) == ("approval", "halt")
    assert "escalation_id" not in held
    [message] = answers(out)
    assert "halt" in str(message.content).lower() or "not" in str(message.content).lower()


# --------------------------------------------------------------------------- budgets and rules


def test_budgets_deny_by_name_and_count_from_the_threads_records() -> None:
    look = ("lookup_customer", {"account_id": "a1"})
    a = Agent(
        [calls(look, look, look), "two of three", calls(look, n=1), "none"],
        tool_gates=ToolGates(budgets=[Budget(tool="crm.lookup_customer", thread_limit=2)]),
    )
    first = a.say("look thrice")
    assert len(a.conn.crm_calls) == 2
    [denied] = first["denials"]
    assert (denied["gate"], denied["rule"], denied["code"], denied["tool_call_id"]) == (
        "budget",
        "budget:crm.lookup_customer",
        "tool_budget_exceeded",
        "c0_2",
    )
    assert denied["policy"] == "report" and "escalation_id" not in denied
    assert [c["tool_call_id"] for c in first["tool_calls"]] == ["c0_0", "c0_1"]
    second = a.say("once more")
    assert len(a.conn.crm_calls) == 2
    assert [d["gate"] for d in second["denials"]] == ["budget", "budget"]
    assert len(second["tool_calls"]) == 2
    assert second["messages"][-1].content == "none"


def test_a_run_budget_counts_this_runs_calls_only() -> None:
    look = ("lookup_customer", {"account_id": "a1"})
    a = Agent(
        [calls(look, look), "one", calls(look, n=1), "again one"],
        tool_gates=ToolGates(budgets=[Budget(tool="crm.*", run_limit=1)]),
    )
    first = a.say("look twice")
    assert len(a.conn.crm_calls) == 1 and [d["gate"] for d in first["denials"]] == ["budget"]
    second = a.say("look once")  # a new run: its own budget
    assert len(a.conn.crm_calls) == 2 and len(second["denials"]) == 1


def test_an_approval_runs_nothing_past_a_budget_the_calls_beside_it_spent() -> None:
    look = ("lookup_customer", {"account_id": "a1"})
    a = Agent(
        [calls(DELETE, look, look), "looked twice"],
        tool_gates=ToolGates(
            require_approval=["crm.delete_customer"],
            budgets=[Budget(tool="crm.*", thread_limit=2)],
        ),
    )
    a.say("delete a1 and look it up twice")
    out = a.run(Command(resume=APPROVE))
    assert [name for name, _ in a.conn.crm_calls] == ["lookup_customer", "lookup_customer"]
    [decision] = out["operator_decisions"]
    assert (decision["verdict"], decision["result"]) == ("approved", "failed")
    assert [c["tool_call_id"] for c in out["tool_calls"]] == ["c0_1", "c0_2"]
    held = answers(out)[0]
    assert held.status == "error" and held.content == (
        "Operator ana APPROVED the call of crm.delete_customer (customer asked), but it was NOT "
        "run: the call budget for tools 'crm.*' is spent: thread limit 2 (2 calls counted). Do "
        "not call 'delete_customer' again in this thread."
    )


def test_an_approval_counts_the_budget_of_the_run_the_call_was_made_in() -> None:
    look = ("lookup_customer", {"account_id": "a1"})
    a = Agent(
        [calls(DELETE, look), "looked"],
        tool_gates=ToolGates(
            require_approval=["crm.delete_customer"], budgets=[Budget(tool="crm.*", run_limit=1)]
        ),
    )
    a.say("delete a1 and look it up")
    out = a.run(Command(resume=APPROVE))
    assert a.conn.crm_calls == [look]
    assert [d["result"] for d in out["operator_decisions"]] == ["failed"]
    assert "run limit 1 (1 calls counted)" in str(answers(out)[0].content)


def test_an_approval_counts_this_runs_budget_denials_against_the_run_limit() -> None:
    # the lookup is denied by its own budget; that attempt counts in the run limit of crm.*
    look = ("lookup_customer", {"account_id": "a1"})
    a = Agent(
        [calls(DELETE, look), "denied"],
        tool_gates=ToolGates(
            require_approval=["crm.delete_customer"],
            budgets=[
                Budget(tool="crm.*", run_limit=1),
                Budget(tool="crm.lookup_customer", run_limit=0),
            ],
        ),
    )
    a.say("delete a1 and look it up")
    assert [d["gate"] for d in a.state().values["denials"]] == ["approval", "budget"]
    out = a.run(Command(resume=APPROVE))
    assert a.conn.crm_calls == []
    assert [d["result"] for d in out["operator_decisions"]] == ["failed"]
    assert "run limit 1 (1 calls counted)" in str(answers(out)[0].content)


def test_an_approved_budget_escalation_is_that_budgets_override() -> None:
    look = ("lookup_customer", {"account_id": "a1"})
    a = Agent(
        [calls(look, look), "looked twice"],
        tool_gates=ToolGates(budgets=[Budget(tool="crm.lookup_customer", thread_limit=1)]),
        on_denial={"budget": "escalate"},
    )
    a.say("look it up twice")
    assert len(a.conn.crm_calls) == 1 and a.state().next == ("denial_handler_budget",)
    out = a.run(Command(resume=APPROVE))
    assert a.conn.crm_calls == [look, look]
    assert [(d["verdict"], d["result"]) for d in out["operator_decisions"]] == [
        ("approved", "executed")
    ]
    assert len(out["tool_calls"]) == 2  # the override ran, and it counts


def test_an_approved_argument_escalation_still_meets_the_budgets() -> None:
    rule = ArgumentRule(
        name="refund_at_most_1000",
        tool="crm.refund",
        schema={"properties": {"amount": {"type": "number", "maximum": 1000}}},
    )
    small = ("refund", {"account_id": "a1", "amount": 10})
    a = Agent(
        [calls(("refund", {"account_id": "a1", "amount": 5000}), small), "one refunded"],
        tool_gates=ToolGates(
            argument_rules=[rule], budgets=[Budget(tool="crm.refund", thread_limit=1)]
        ),
        on_denial={"arguments": "escalate"},
    )
    a.say("refund twice")
    assert a.conn.crm_calls == [small]
    out = a.run(Command(resume=APPROVE))
    assert a.conn.crm_calls == [small]  # the rule's override is not the budget's
    assert [d["result"] for d in out["operator_decisions"]] == ["failed"]
    assert "thread limit 1 (1 calls counted)" in str(answers(out)[0].content)


def test_an_argument_rule_denies_a_call_naming_the_rule() -> None:
    rule = ArgumentRule(
        name="refund_at_most_1000",
        tool="crm.refund",
        schema={"properties": {"amount": {"type": "number", "maximum": 1000}}},
    )
    a = Agent(
        [
            calls(
                ("refund", {"account_id": "a1", "amount": 5000}),
                ("refund", {"account_id": "a1", "amount": 10}),
            ),
            "one refunded",
        ],
        tool_gates=ToolGates(argument_rules=[rule]),
    )
    out = a.say("refund")
    assert a.conn.crm_calls == [("refund", {"account_id": "a1", "amount": 10})]
    [denied] = out["denials"]
    assert (denied["gate"], denied["rule"], denied["args"]) == (
        "arguments",
        "refund_at_most_1000",
        {"account_id": "a1", "amount": 5000},
    )
    assert "amount" in denied["message"] and "1000" in denied["message"]
    denied_answer, ran_answer = answers(out)
    assert denied_answer.status == "error" and "refund_at_most_1000" in str(denied_answer.content)
    assert ran_answer.status == "success"


def test_an_ungoverned_tool_is_neither_held_nor_counted() -> None:
    a = Agent(
        [calls(("lookup_customer", {"account_id": "a1"})), "found"],
        tool_gates=ToolGates(require_approval=["crm.delete_customer"]),
    )
    out = a.say("look up a1")
    assert a.conn.crm_calls == [("lookup_customer", {"account_id": "a1"})]
    assert out["denials"] == [] and out["tool_calls"] == []


def test_the_engines_execute_decision_is_left_to_the_engines_gates() -> None:
    call = ("execute_decision", {"decision_id": "d1", "webhook_url": "http://127.0.0.1:9/hook"})
    a = Agent(
        [calls(call), "executed", calls(call, n=1), "over budget"],
        tool_gates=ToolGates(
            require_approval=["*"], budgets=[Budget(tool="*.execute_decision", thread_limit=1)]
        ),
        on_denial={"budget": "escalate"},
    )
    a.conn.answers.append(engine_answer(receipt_body("d1")))
    out = a.say("execute d1")
    assert a.state().next == () and out["denials"] == []  # no graph-side approval asked
    assert [r["decision_id"] for r in out["receipts"]] == ["d1"]
    assert len(out["tool_calls"]) == 1  # counted against its budget
    over = a.say("execute it again")
    [denied] = over["denials"]
    # an escalated graph-side gate on the engine's execute_decision halts instead: never run
    # on a graph-side approval
    assert (denied["gate"], denied["policy"]) == ("budget", "halt")
    assert a.state().next == () and len(a.conn.calls) == 1


def test_what_the_operator_is_shown_is_what_the_digest_binds() -> None:
    """Each field of a held call's question, and its digest over exactly what was shown (an
    answer carrying another digest is refused: invariant 14)."""
    a = Agent(
        [calls(("shadow_delete_customer", {"account_id": "a1", "force": True})), "done"],
        tool_gates=ToolGates(require_approval=["shadow.*"]),
        escalation=EscalationSettings(
            allowed_decisions={"approval": ["approve", "reject"]},
            expires_after={"approval": timedelta(minutes=5)},
        ),
    )
    a.say("delete a1 in the shadow crm")
    [interrupt] = a.state().interrupts
    request = interrupt.value
    [held] = a.state().values["denials"]
    [item] = request["escalations"]
    shown = {
        "thread_id": "t",
        "tool_call_id": "c0_0",
        "gate": "approval",
        "tool": "shadow.delete_customer",
        "args": {"account_id": "a1"},  # the model's force flag scrubbed before it was held
        "args_digest": held["args_digest"],
        "rule": "require_approval:shadow.*",
        "denial": {
            "code": "tool_approval_required",
            "message": held["message"],
            "escalation_id": held["escalation_id"],
        },
        # the graph's rules in force for the tool, with the gate's policy
        "rules": {
            "tool": "shadow.delete_customer",
            "policy": "escalate",
            "require_approval": ["shadow.*"],
            "allow": [],
            "destructive": False,
            "unlisted": "allow",
            "budgets": [],
            "argument_rules": [],
        },
    }
    asked_at = held["raised_at"]
    expires_at = (datetime.fromisoformat(asked_at) + timedelta(minutes=5)).isoformat()
    assert item == {
        "gate": "approval",
        "code": "tool_approval_required",
        "message": held["message"],
        "override_hint": None,
        "decision_id": None,
        "webhook_url": None,
        "override_flag": None,
        "tool_call_id": "c0_0",
        "escalation_id": held["escalation_id"],
        "thread_id": "t",
        "args": {"account_id": "a1"},
        "allowed_decisions": ["approve", "reject"],
        "policy_snapshot_id": None,
        "rules": shown["rules"],
        "digest": escalation_digest(shown),
        "interrupt_id": interrupt.id,
        "asked_at": asked_at,
        "expires_at": expires_at,
        "action_name": "shadow_delete_customer",
        "tool": "shadow.delete_customer",
        "args_digest": held["args_digest"],
        "rule": "require_approval:shadow.*",
    }
    assert held["message"] == (
        "calls of shadow.delete_customer need an operator's approval (require_approval 'shadow.*')"
    )
    assert request["digest"] == item["digest"] and request["expires_at"] == expires_at
    assert request["review_configs"] == [
        {"action_name": "shadow_delete_customer", "allowed_decisions": ["approve", "reject"]}
    ]
    [action] = request["action_requests"]
    assert action["description"] == (
        "The approval gate held the call of shadow.delete_customer (tool_approval_required): "
        f"{held['message']}. Approve to run it once as shown; reject to keep it from running. "
        f"It expires at {expires_at}."  # edit is not offered: not among the allowed decisions
    )
    stale = {**APPROVE, "digest": "sha256:" + "0" * 64}
    with pytest.raises(ValidationError, match="digest"):
        a.run(Command(resume=stale))
    assert a.conn.crm_calls == []
    a.run(Command(resume={**APPROVE, "digest": item["digest"]}))
    assert a.conn.crm_calls == [("shadow_delete_customer", {"account_id": "a1"})]


def test_a_per_call_question_carries_its_one_items_binding() -> None:
    a = Agent(
        [calls(DELETE), "done"],
        tool_gates=ToolGates(require_approval=["crm.delete_customer"]),
        escalation=EscalationSettings(
            interrupt_mode="per_call", expires_after={"approval": timedelta(hours=1)}
        ),
    )
    a.say("delete a1")
    [asked] = a.state().interrupts
    value = asked.value
    [item] = value["escalations"]
    assert set(value) == {
        "type", "tool_call_id", "name", "args", "description", "escalations", "gate",
        "escalation_id", "digest", "expires_at",
    }  # fmt: skip
    assert (value["type"], value["tool_call_id"], value["name"], value["args"]) == (
        "tool_approval",
        "c0_0",
        "delete_customer",
        {"account_id": "a1"},
    )
    assert (value["gate"], value["escalation_id"], value["digest"], value["expires_at"]) == (
        "approval",
        item["escalation_id"],
        item["digest"],
        item["expires_at"],
    )
    assert item["expires_at"] and value["description"].startswith(
        "The approval gate held the call of crm.delete_customer (tool_approval_required): "
    )
    assert value["description"].endswith(f" It expires at {item['expires_at']}.")


def _answer_of(out: Any) -> ToolMessage:
    [message] = answers(out)
    return message


def _text_of(message: ToolMessage) -> str:
    """A governed answer's content: always text, never content blocks."""
    assert isinstance(message.content, str), message.content
    return message.content


def test_each_answer_tells_the_model_exactly_what_happened() -> None:
    """The held call's answer is replaced in place by what the operator decided."""
    gates = ToolGates(require_approval=["crm.delete_customer"])
    approve = Agent([calls(DELETE), "done"], tool_gates=gates)
    approve.say("delete a1")
    [held_before] = answers(approve.state().values)
    [interrupt] = approve.state().interrupts
    out = approve.run(Command(resume=APPROVE))
    message = _answer_of(out)
    ran = '{"ok": true, "tool": "delete_customer", "args": {"account_id": "a1"}}'
    assert message.content == (
        "Operator ana APPROVED the call of crm.delete_customer (customer asked); it ran once "
        f"and answered:\n{ran}"
    )
    assert (message.id, message.name, message.status) == (
        held_before.id,
        "delete_customer",
        "success",
    )
    assert message.response_metadata["algenta_outcome"] == "gate:approval"
    [decision] = out["operator_decisions"]
    [held] = out["denials"]
    assert (decision["action"], decision["override_flag"], decision["decision_id"]) == (
        "override",
        None,
        None,
    )
    assert decision["interrupt_id"] == interrupt.id
    assert decision["digest"] == interrupt.value["digest"]
    assert decision["asked_at"] == held["raised_at"] and decision["decided_at"]
    assert decision["roles"] == [] and decision["answered_in_thread"] is None
    assert decision["expires_at"] is None
    assert decision["outcome"]["result"] == "executed"
    assert decision["outcome"]["content"] == ran and decision["outcome"]["status"] == "success"

    edit = Agent([calls(DELETE), "done"], tool_gates=gates)
    edit.say("delete a1")
    edited = {"name": "delete_customer", "args": {"account_id": "a9"}}
    out = edit.run(
        Command(
            resume={
                "decisions": [{"type": "edit", "edited_action": edited, "message": "typo"}],
                "operator": "ana",
            }
        )
    )
    assert _text_of(_answer_of(out)).startswith(
        "Operator ana APPROVED the call of crm.delete_customer (typo) with edited arguments "
        '{"account_id": "a9"}; it ran once and answered:\n'
    )

    reject = Agent([calls(DELETE), "not done"], tool_gates=gates)
    reject.say("delete a1")
    out = reject.run(Command(resume=REJECT))
    message = _answer_of(out)
    assert message.content == (
        "Operator bo REJECTED the call of crm.delete_customer (not verified). It was NOT run; "
        "do not call it again for this request."
    )
    assert message.status == "error"
    [decision] = out["operator_decisions"]
    assert (decision["action"], decision["outcome"]) == ("decline", None)

    respond = Agent([calls(DELETE), "told"], tool_gates=gates)
    respond.say("delete a1")
    told = {"decisions": [{"type": "respond", "message": "Account kept: legal hold"}]}
    out = respond.run(Command(resume={**told, "operator": "cy"}))
    message = _answer_of(out)
    assert message.content == (
        "Account kept: legal hold\n(Operator cy answered in the tool's place; the call of "
        "crm.delete_customer was not run.)"
    )
    assert message.status == "success" and respond.conn.crm_calls == []
    [decision] = out["operator_decisions"]
    assert (decision["verdict"], decision["result"], decision["outcome"]) == (
        "responded",
        "declined",
        None,
    )
    assert out["tool_calls"] == []


def test_an_answer_after_the_deadline_runs_nothing_and_says_it_expired() -> None:
    a = Agent(
        [calls(DELETE), "expired"],
        tool_gates=ToolGates(require_approval=["crm.delete_customer"]),
        escalation=EscalationSettings(expires_after={"approval": timedelta(milliseconds=1)}),
    )
    a.say("delete a1")
    [interrupt] = a.state().interrupts
    expires_at = interrupt.value["expires_at"]
    time.sleep(0.01)
    out = a.run(Command(resume=APPROVE))
    assert a.conn.crm_calls == []
    message = _answer_of(out)
    assert message.content == (
        f"The approval escalation EXPIRED at {expires_at} before an operator's answer could "
        "take effect. The call of crm.delete_customer was NOT run."
    )
    assert message.status == "error"
    [decision] = out["operator_decisions"]
    assert (decision["verdict"], decision["action"], decision["expires_at"]) == (
        "expired",
        "decline",
        expires_at,
    )
    assert out["tool_calls"] == []


def _copy_thread(a: Agent, source: str, target: str) -> None:
    """What a server's thread copy does: the latest checkpoint and its pending writes."""
    saver = a.graph.checkpointer
    assert isinstance(saver, BaseCheckpointSaver)  # the agent's own saver, not True or None
    saved = saver.get_tuple(a.config(source))
    assert saved is not None
    written = saver.put(
        {"configurable": {"thread_id": target, "checkpoint_ns": ""}},
        saved.checkpoint,
        saved.metadata,
        saved.checkpoint["channel_versions"],
    )
    for task_id, channel, value in saved.pending_writes or []:
        saver.put_writes(written, [(channel, value)], task_id)


def test_a_copy_answered_after_the_original_completes_in_the_winners_name_and_never_reruns() -> (
    None
):
    a = Agent(
        [calls(DELETE), "deleted", "the copy"],
        tool_gates=ToolGates(require_approval=["crm.delete_customer"]),
    )
    a.say("delete a1", thread="t0")
    _copy_thread(a, "t0", "t1")
    assert a.state("t1").next == ("denial_handler_approval",)
    a.run(Command(resume=APPROVE), thread="t0")
    assert a.conn.crm_calls == [DELETE]
    out = a.run(Command(resume=REJECT), thread="t1")  # bo, too late: ana decided in t0
    assert a.conn.crm_calls == [DELETE]  # never run a second time
    [decision] = out["operator_decisions"]
    assert (decision["operator"], decision["verdict"], decision["answered_in_thread"]) == (
        "ana",
        "approved",
        "t0",
    )
    message = _answer_of(out)
    assert _text_of(message).startswith(
        "Operator ana APPROVED the call of crm.delete_customer (customer asked) (answered in "
        "thread t0); it ran once and answered:\n"
    )


def test_the_model_is_told_in_words_that_nothing_ran_and_why() -> None:
    held = Agent([calls(DELETE), "waiting"], tool_gates=ToolGates(require_approval=["crm.*"]))
    [waiting] = answers(held.say("delete a1"))
    message = "calls of crm.delete_customer need an operator's approval (require_approval 'crm.*')"
    assert waiting.content == (
        f"HELD: the call of crm.delete_customer was not run: {message}. It waits for an "
        "operator's decision, outside this conversation; calling it again will be held again. "
        "Tell the user the call waits for approval."
    )
    halted = Agent([calls(DELETE), "halted"], tool_gates=ToolGates(require_approval=["crm.*"]))
    [stopped] = answers(halted.say("delete a1", on_denial={"approval": "halt"}))
    assert stopped.content == (
        "DENIED: the call of crm.delete_customer was blocked by the approval gate "
        f"(tool_approval_required, rule require_approval:crm.*): {message}. Nothing was run. "
        "You (the model) cannot override this gate; only a human operator can. Tell the user."
    )
    look = ("lookup_customer", {"account_id": "a1"})
    budget = Agent(
        [calls(look, look), "one"],
        tool_gates=ToolGates(budgets=[Budget(tool="crm.lookup_customer", run_limit=1)]),
    )
    _, over = answers(budget.say("look twice"))
    assert str(over.content).startswith(
        "DENIED: the call of crm.lookup_customer was blocked by the budget gate "
        "(tool_budget_exceeded, rule budget:crm.lookup_customer): "
    )
    assert over.response_metadata["algenta_outcome"] == "gate:budget"


def test_the_step_limit_message_keeps_the_replys_id_and_names_the_limit() -> None:
    a = Agent([{**calls(("lookup_customer", {"account_id": "a1"})), "id": "reply-1"}])
    limit = 2 + len(GATE_NAMES) + 2
    cfg: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": limit}
    out = asyncio.run(a.graph.ainvoke({"messages": [("user", "look up a1")]}, cfg))
    last = out["messages"][-1]
    assert (last.id, last.content) == ("reply-1", STEP_LIMIT_MESSAGE.format(limit=limit))


def test_run_settings_given_as_the_graphs_context_are_the_runs() -> None:
    a = Agent(["ok"], top_k=5)
    out = asyncio.run(
        a.graph.ainvoke(
            {"messages": [("user", "refund money to the customer account")]},
            {"configurable": {"thread_id": "t"}},
            context={"top_k": 1, "profile": "observe"},
        )
    )
    assert out["selected_tools"] == ["refund"]
    [shown] = a.model.bound_tools
    assert [t["function"]["name"] for t in shown] == ["refund", "search_tools"]


def test_the_model_node_reads_the_runs_profile_from_the_context_too() -> None:
    a = Agent(["ok", "ok"], always_include=["execute_decision"])
    for thread, context in (("observe", {"profile": "observe"}), ("execute", {})):
        asyncio.run(
            a.graph.ainvoke(
                {"messages": [("user", "refund money")]},
                {"configurable": {"thread_id": thread}},
                context=context,
            )
        )
    observed, executing = ([t["function"]["name"] for t in b] for b in a.model.bound_tools)
    assert "execute_decision" not in observed and "execute_decision" in executing


def test_a_run_budget_counts_the_calls_another_budget_denied_this_run() -> None:
    refund = ("refund", {"account_id": "a1", "amount": 5})
    a = Agent(
        [
            calls(
                ("lookup_customer", {"account_id": "a1"}), ("lookup_customer", {"account_id": "a2"})
            ),
            calls(refund, n=1),
            "done",
        ],
        tool_gates=ToolGates(
            budgets=[
                Budget(tool="crm.lookup_customer", run_limit=1),
                Budget(tool="crm.*", run_limit=2),
            ]
        ),
    )
    out = a.say("look up a1 and a2, then refund")
    assert a.conn.crm_calls == [("lookup_customer", {"account_id": "a1"})]
    assert [(d["gate"], d["rule"], d["tool_call_id"]) for d in out["denials"]] == [
        ("budget", "budget:crm.lookup_customer", "c0_1"),
        ("budget", "budget:crm.*", "c1_0"),  # one ran and one was denied: the third attempt
    ]


def test_an_engine_denial_escalated_carries_its_escalation_id_and_a_halted_one_none() -> None:
    call = ("execute_decision", {"decision_id": "d1", "webhook_url": "http://127.0.0.1:9/hook"})
    for policy, escalated in (("escalate", True), ("halt", False)):
        a = Agent([calls(call), "asked"], on_denial={"confidence": policy})
        a.conn.answers.append(engine_answer(denial_body("confidence")))
        a.say("execute d1")
        [denied] = a.state().values["denials"]
        assert (denied["gate"], denied["policy"]) == ("confidence", policy)
        if escalated:
            [interrupt] = a.state().interrupts
            assert denied["escalation_id"].startswith("esc_")
            assert interrupt.value["escalation_id"] == denied["escalation_id"]
        else:
            assert "escalation_id" not in denied and not a.state().interrupts
