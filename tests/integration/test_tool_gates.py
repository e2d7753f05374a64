"""Gates on any tool, end to end: a real CRM over MCP, the reference engine, SQLite checkpoints.

``require_approval`` holds a call before it runs; the operator's approve runs it exactly once,
an edit runs the edited arguments (recorded ``modified``), a reject runs nothing and tells the
model. Budgets and argument rules deny by name. Every held, approved, edited, rejected and
denied call is a record in the thread's chain. The chat model is the scripted stand-in.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crm_support import CrmServer, running_crm
from graph_support import agent, config, log_decision, tool_messages
from langgraph.types import Command
from pydantic import ValidationError

from algenta_graph.audit.verification import verify_chain
from algenta_graph.config import ConfigError, parse_config
from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.governance.tool_gates import ArgumentRule, Budget, ToolGates
from algenta_graph.graph import create_governed_agent
from algenta_graph.testing import ScriptedChatModel

pytestmark = pytest.mark.timeout(180)

APPROVE = {"decisions": [{"type": "approve", "message": "customer asked"}], "operator": "ana"}
REJECT = {"decisions": [{"type": "reject", "message": "not verified"}], "operator": "bo"}


def calls(*batch: tuple[str, dict[str, Any]], n: int = 0) -> dict[str, Any]:
    """One model turn calling these tools."""
    return {
        "content": "",
        "tool_calls": [
            {"name": name, "args": args, "id": f"c{n}_{i}"} for i, (name, args) in enumerate(batch)
        ],
    }


def escalations(tmp_path: Path, *args: str) -> str:
    """``algenta-graph escalations`` on the test's checkpoint file: its output."""
    db = str(tmp_path / "cp.sqlite")
    command = [sys.executable, "-m", "algenta_graph.cli", "escalations", "--db", db, *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def crm() -> Iterator[CrmServer]:
    with running_crm() as server:
        yield server


def connection(engine: ReferenceEngine, crm: CrmServer, **servers: CrmServer) -> EngineConnection:
    extra = {"crm": crm.connection(), **{k: v.connection() for k, v in servers.items()}}
    return EngineConnection(engine.url, profile="execute", extra_servers=extra)


async def test_a_held_call_runs_once_on_approval_and_every_step_is_a_chained_record(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> None:
    gates = ToolGates(require_approval=["crm.delete_customer"])
    replies = [calls(("delete_customer", {"account_id": "a1"})), "deleted", "it is done"]
    async with (
        connection(engine, crm) as conn,
        agent(conn, tmp_path / "cp.sqlite", replies, tool_gates=gates) as (graph, _),
    ):
        await graph.ainvoke({"messages": [("user", "delete a1")]}, config("t"))
        pending = await graph.aget_state(config("t"))
        assert crm.count("delete_customer") == 0  # held: nothing ran
        # `algenta-graph escalations` names the held call (there is no engine decision)
        listed = [json.loads(line) for line in escalations(tmp_path, "--json").splitlines()]
        assert [(r["gate"], r["calls"], r["decision_ids"], r["state"]) for r in listed] == [
            ("approval", ["crm.delete_customer"], [None], "waiting")
        ]
        [row] = escalations(tmp_path).splitlines()[2:]
        assert row.split()[1:3] == ["approval", "crm.delete_customer"]
        out = await graph.ainvoke(Command(resume=APPROVE), config("t"))
        # a second resume, a new turn: never runs it again
        again = await graph.ainvoke({"messages": [("user", "and now?")]}, config("t"))
    assert pending.next == ("denial_handler_approval",)
    [interrupt] = pending.interrupts
    request = interrupt.value
    assert request["action_requests"][0]["name"] == "delete_customer"
    assert request["action_requests"][0]["args"] == {"account_id": "a1"}
    assert request["escalations"][0]["tool"] == "crm.delete_customer"
    assert request["gate"] == "approval" and request["override_flag"] is None
    assert crm.count("delete_customer") == 1
    [held] = out["denials"]
    assert (held["gate"], held["tool"], held["server"], held["source"]) == (
        "approval",
        "delete_customer",
        "crm",
        "graph",
    )
    assert held["rule"] == "require_approval:crm.delete_customer"
    assert held["args_digest"].startswith("sha256:")
    [decision] = out["operator_decisions"]
    assert (decision["operator"], decision["verdict"], decision["result"]) == (
        "ana",
        "approved",
        "executed",
    )
    assert decision["tool"] == "crm.delete_customer"
    assert decision["args_digest"] == held["args_digest"]
    # the held call that ran is counted like any call let through (the budgets read it)
    [ran] = out["tool_calls"]
    assert (ran["tool"], ran["server"], ran["args_digest"]) == (
        "delete_customer",
        "crm",
        held["args_digest"],
    )
    [message] = tool_messages(out)
    assert "APPROVED" in str(message.content) and "deleted" in str(message.content)
    assert verify_chain(again).ok and verify_chain(again).count == 3
    assert crm.count("delete_customer") == 1
    # `algenta-graph receipts` shows the held call and who approved it, by its tool
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "algenta_graph.cli",
            "receipts",
            "--db",
            str(tmp_path / "cp.sqlite"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    [denial_row] = [line for line in shown.splitlines() if " denial " in line]
    assert "crm.delete_customer" in denial_row and "gate=approval" in denial_row
    assert "rule=require_approval:crm.delete_customer" in denial_row
    [operator_row] = [line for line in shown.splitlines() if " operator " in line]
    assert "override approval -> executed" in operator_row and "by ana" in operator_row


async def test_an_edit_runs_the_edited_arguments_scrubbed_and_is_recorded_modified(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> None:
    gates = ToolGates(require_approval=["delete_*"])
    replies = [calls(("delete_customer", {"account_id": "a1"})), "done"]
    edit: dict[str, Any] = {
        "decisions": [
            {
                "type": "edit",
                "edited_action": {
                    "name": "delete_customer",
                    "args": {"account_id": "a2", "reason": "dup", "force": True},
                },
            }
        ],
        "operator": "ana",
    }
    async with (
        connection(engine, crm) as conn,
        agent(conn, tmp_path / "cp.sqlite", replies, tool_gates=gates) as (graph, _),
    ):
        await graph.ainvoke({"messages": [("user", "delete a1")]}, config("t"))
        with pytest.raises(ValidationError, match="Input should be 'delete_customer'"):
            bad = {
                "decisions": [
                    {**edit["decisions"][0], "edited_action": {"name": "refund", "args": {}}}
                ],
                "operator": "ana",
            }
            await graph.ainvoke(Command(resume=bad), config("t"))
        assert crm.calls == []
        out = await graph.ainvoke(Command(resume=edit), config("t"))
    assert crm.calls == [("delete_customer", {"account_id": "a2", "reason": "dup"})]
    [decision] = out["operator_decisions"]
    assert decision["verdict"] == "modified"
    assert decision["edited_args"] == {"account_id": "a2", "reason": "dup"}
    assert decision["original_args"] == {"account_id": "a1"}
    assert decision["args_digest"] != out["denials"][0]["args_digest"]


async def test_a_reject_runs_nothing_and_the_model_is_told(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> None:
    gates = ToolGates(require_approval=["crm.*"])
    replies = [calls(("delete_customer", {"account_id": "a1"})), "ok, not deleted"]
    async with (
        connection(engine, crm) as conn,
        agent(conn, tmp_path / "cp.sqlite", replies, tool_gates=gates) as (graph, _),
    ):
        await graph.ainvoke({"messages": [("user", "delete a1")]}, config("t"))
        out = await graph.ainvoke(Command(resume=REJECT), config("t"))
    assert crm.calls == []
    [decision] = out["operator_decisions"]
    assert (decision["verdict"], decision["result"], decision["operator"]) == (
        "declined",
        "declined",
        "bo",
    )
    [message] = tool_messages(out)
    assert "REJECTED" in str(message.content) and "NOT run" in str(message.content)
    assert verify_chain(out).ok and verify_chain(out).count == 2


async def test_budgets_deny_by_name_and_count_from_the_threads_records(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> None:
    gates = ToolGates(budgets=[Budget(tool="crm.lookup_customer", thread_limit=2)])
    look = ("lookup_customer", {"account_id": "a1"})
    replies = [calls(look, look, look), "two of three", calls(look, n=1), "none"]
    async with (
        connection(engine, crm) as conn,
        agent(conn, tmp_path / "cp.sqlite", replies, tool_gates=gates) as (graph, _),
    ):
        first = await graph.ainvoke({"messages": [("user", "look thrice")]}, config("t"))
        second = await graph.ainvoke({"messages": [("user", "once more")]}, config("t"))
    assert crm.count("lookup_customer") == 2
    [denied] = first["denials"]
    assert (denied["gate"], denied["rule"], denied["code"]) == (
        "budget",
        "budget:crm.lookup_customer",
        "tool_budget_exceeded",
    )
    assert [d["gate"] for d in second["denials"]] == ["budget", "budget"]
    assert len(second["tool_calls"]) == 2


async def test_an_argument_rule_denies_a_call_naming_the_rule(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> None:
    rule = ArgumentRule(
        name="refund_at_most_1000",
        tool="crm.refund",
        schema={"properties": {"amount": {"type": "number", "maximum": 1000}}},
    )
    gates = ToolGates(argument_rules=[rule])
    replies = [
        calls(
            ("refund", {"account_id": "a1", "amount": 5000}),
            ("refund", {"account_id": "a1", "amount": 10}),
        ),
        "one refunded",
    ]
    async with (
        connection(engine, crm) as conn,
        agent(conn, tmp_path / "cp.sqlite", replies, tool_gates=gates) as (graph, _),
    ):
        out = await graph.ainvoke({"messages": [("user", "refund")]}, config("t"))
    assert crm.calls == [("refund", {"account_id": "a1", "amount": 10})]
    [denied] = out["denials"]
    assert (denied["gate"], denied["rule"]) == ("arguments", "refund_at_most_1000")
    assert "amount" in denied["message"] and "1000" in denied["message"]


async def test_the_configuration_files_tool_gates_hold_a_bare_name_on_every_server(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> None:
    tomllib = pytest.importorskip("tomllib")
    with running_crm("shadow") as shadow:
        text = (
            'profile = "execute"\n'
            "[tool_gates]\n"
            'require_approval = ["delete_customer"]\n'
            "[[tool_gates.budgets]]\n"
            'tool = "*"\n'
            "run_limit = 5\n"
        )
        cfg = parse_config(tomllib.loads(text), source="agent.toml")
        assert cfg.tool_gates.require_approval == ["delete_customer"]
        replies = [
            calls(
                ("delete_customer", {"account_id": "a1"}),
                ("shadow_delete_customer", {"account_id": "a1"}),
            ),
            "both held",
        ]
        async with (
            connection(engine, crm, shadow=shadow) as conn,
            agent(conn, tmp_path / "cp.sqlite", replies, config=cfg) as (graph, _),
        ):
            out = await graph.ainvoke({"messages": [("user", "delete a1")]}, config("t"))
    assert crm.calls == [] and shadow.calls == []
    assert [(d["server"], d["tool"], d["gate"]) for d in out["denials"]] == [
        ("crm", "delete_customer", "approval"),
        ("shadow", "delete_customer", "approval"),
    ]
    with pytest.raises(ConfigError, match="tool_gates"):
        parse_config({"tool_gates": {"budgets": [{"tool": "x"}]}}, source="agent.toml")


async def test_the_engines_execute_decision_is_left_to_the_engines_gates(
    engine: ReferenceEngine, crm: CrmServer, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    gates = ToolGates(
        require_approval=["*"], budgets=[Budget(tool="*.execute_decision", thread_limit=1)]
    )
    async with connection(engine, crm) as conn:
        low = await log_decision(conn, confidence=0.3)
        replies = [
            calls(("execute_decision", {"decision_id": low, "webhook_url": webhook.url})),
            "asked",
        ]
        async with agent(conn, tmp_path / "cp.sqlite", replies, tool_gates=gates) as (graph, _):
            await graph.ainvoke({"messages": [("user", "execute")]}, config("t"))
            pending = await graph.aget_state(config("t"))
    # no graph-side hold: the engine's confidence gate escalates it, as without tool gates
    assert pending.next == ("denial_handler_confidence",)
    assert [d["gate"] for d in pending.values["denials"]] == ["confidence"]
    assert len(pending.values["tool_calls"]) == 1  # counted against its budget


async def test_an_edit_that_breaks_an_argument_rule_is_refused_before_it_is_saved(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> None:
    rule = ArgumentRule(
        name="refund_at_most_1000",
        tool="crm.refund",
        schema={"properties": {"amount": {"type": "number", "maximum": 1000}}},
    )
    gates = ToolGates(require_approval=["crm.refund"], argument_rules=[rule])
    replies = [calls(("refund", {"account_id": "a1", "amount": 10})), "refunded"]
    edited = {"name": "refund", "args": {"account_id": "a1", "amount": 5000}}
    bigger = {"decisions": [{"type": "edit", "edited_action": edited}], "operator": "ana"}
    async with (
        connection(engine, crm) as conn,
        agent(conn, tmp_path / "cp.sqlite", replies, tool_gates=gates) as (graph, _),
    ):
        await graph.ainvoke({"messages": [("user", "refund 10")]}, config("t"))
        with pytest.raises(ValidationError, match="break rule 'refund_at_most_1000'"):
            await graph.ainvoke(Command(resume=bigger), config("t"))
        waiting = await graph.aget_state(config("t"))
        assert crm.calls == [] and waiting.next == ("denial_handler_approval",)
        out = await graph.ainvoke(Command(resume=APPROVE), config("t"))
    assert crm.calls == [("refund", {"account_id": "a1", "amount": 10})]
    assert [d["verdict"] for d in out["operator_decisions"]] == ["approved"]


async def test_a_run_may_only_tighten_a_graph_side_gate(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> None:
    gates = ToolGates(require_approval=["crm.delete_customer"])
    replies = [calls(("delete_customer", {"account_id": "a1"})), "halted?"]
    async with (
        connection(engine, crm) as conn,
        agent(conn, tmp_path / "cp.sqlite", replies, tool_gates=gates) as (graph, _),
    ):
        with pytest.raises(ValueError, match=r"\['approval'\]: 'report' is looser"):
            await graph.ainvoke(
                {"messages": [("user", "delete a1")]},
                config("loose", on_denial={"approval": "report"}),
            )
        out = await graph.ainvoke(
            {"messages": [("user", "delete a1")]}, config("t", on_denial={"approval": "halt"})
        )
        state = await graph.aget_state(config("t"))
    assert crm.calls == [] and state.next == () and not state.interrupts
    [held] = out["denials"]
    assert (held["gate"], held["policy"]) == ("approval", "halt")
    assert "escalation_id" not in held


async def test_per_call_mode_asks_about_each_held_call_and_runs_each_approved_once(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> None:
    from algenta_graph.governance.escalations import EscalationSettings

    gates = ToolGates(require_approval=["crm.delete_customer"])
    replies = [
        calls(
            ("delete_customer", {"account_id": "a1"}),
            ("delete_customer", {"account_id": "a2"}),
        ),
        "one of two",
    ]
    settings = EscalationSettings(interrupt_mode="per_call")
    async with (
        connection(engine, crm) as conn,
        agent(conn, tmp_path / "cp.sqlite", replies, tool_gates=gates, escalation=settings) as (
            graph,
            _,
        ),
    ):
        await graph.ainvoke({"messages": [("user", "delete both")]}, config("t"))
        first = await graph.aget_state(config("t"))
        [asked] = first.interrupts
        assert asked.value["type"] == "tool_approval" and asked.value["name"] == "delete_customer"
        assert asked.value["args"] == {"account_id": "a1"}
        await graph.ainvoke(
            Command(resume={asked.id: {"type": "approve", "operator": "ana"}}), config("t")
        )
        second = await graph.aget_state(config("t"))
        [then] = second.interrupts
        assert then.value["args"] == {"account_id": "a2"}
        out = await graph.ainvoke(
            Command(resume={then.id: {"type": "reject", "operator": "ana"}}), config("t")
        )
    assert crm.calls == [("delete_customer", {"account_id": "a1", "reason": ""})]
    assert [d["verdict"] for d in out["operator_decisions"]] == ["approved", "declined"]


async def test_an_approval_cannot_spend_a_budget_the_calls_beside_it_spent(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> None:
    # the attack: hold one call for approval and spend the budget with the calls beside it in
    # the same model turn; the approval must not run a call past the spent budget
    gates = ToolGates(
        require_approval=["crm.delete_customer"], budgets=[Budget(tool="crm.*", thread_limit=2)]
    )
    look = ("lookup_customer", {"account_id": "a1"})
    replies = [calls(("delete_customer", {"account_id": "a1"}), look, look), "looked twice"]
    async with (
        connection(engine, crm) as conn,
        agent(conn, tmp_path / "cp.sqlite", replies, tool_gates=gates) as (graph, _),
    ):
        await graph.ainvoke({"messages": [("user", "delete a1, look it up twice")]}, config("t"))
        assert crm.count("lookup_customer") == 2 and crm.count("delete_customer") == 0
        out = await graph.ainvoke(Command(resume=APPROVE), config("t"))
    assert crm.count("delete_customer") == 0
    [decision] = out["operator_decisions"]
    assert (decision["operator"], decision["verdict"], decision["result"]) == (
        "ana",
        "approved",
        "failed",
    )
    assert len(out["tool_calls"]) == 2  # the two lookups; the refused call is not counted
    [held] = [m for m in tool_messages(out) if m.tool_call_id == "c0_0"]
    text = str(held.content)
    assert "APPROVED" in text and "NOT run" in text
    assert "the call budget for tools 'crm.*' is spent: thread limit 2 (2 calls counted)" in text
    assert verify_chain(out).ok


async def test_approving_a_batch_counts_each_call_it_runs_against_the_next(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> None:
    gates = ToolGates(
        require_approval=["crm.delete_customer"],
        budgets=[Budget(tool="crm.delete_customer", thread_limit=1)],
    )
    both = calls(
        ("delete_customer", {"account_id": "a1"}), ("delete_customer", {"account_id": "a2"})
    )
    approve_both = {"decisions": [{"type": "approve"}, {"type": "approve"}], "operator": "ana"}
    async with (
        connection(engine, crm) as conn,
        agent(conn, tmp_path / "cp.sqlite", [both, "one of two"], tool_gates=gates) as (graph, _),
    ):
        await graph.ainvoke({"messages": [("user", "delete both")]}, config("t"))
        out = await graph.ainvoke(Command(resume=approve_both), config("t"))
    assert crm.calls == [("delete_customer", {"account_id": "a1", "reason": ""})]
    assert [(d["verdict"], d["result"]) for d in out["operator_decisions"]] == [
        ("approved", "executed"),
        ("approved", "failed"),
    ]
    assert len(out["tool_calls"]) == 1


# --------------------------------------------------------------------------- rules in force


async def test_a_typo_in_a_rule_refuses_the_build_naming_the_real_tool(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> None:
    """``require_approval = ["crm.delete_custmer"]`` would leave ``delete_customer`` ungated:
    the graph is not built, and the error names the tool meant."""
    gates = ToolGates(require_approval=["crm.delete_custmer"])
    replies = [calls(("delete_customer", {"account_id": "a1"})), "deleted"]
    async with connection(engine, crm) as conn:
        with pytest.raises(ConfigError) as refused:
            async with agent(conn, tmp_path / "cp.sqlite", replies, tool_gates=gates):
                pass  # pragma: no cover - never built
    assert "'crm.delete_custmer' names no tool" in str(refused.value)
    assert "crm.delete_customer" in str(refused.value).partition("nearest:")[2]
    assert crm.calls == []


async def test_a_string_amount_cannot_slip_past_a_numeric_limit(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> None:
    """FastMCP converts ``"5000"`` to 5000.0 for ``refund(amount: float)``: a limit written
    without ``type`` is refused when it is made, and with ``type`` the string is denied."""
    with pytest.raises(ValidationError, match='"type"'):
        ArgumentRule(
            name="refund_at_most_1000",
            tool="crm.refund",
            schema={"properties": {"amount": {"maximum": 1000}}},
        )
    rule = ArgumentRule(
        name="refund_at_most_1000",
        tool="crm.refund",
        schema={"properties": {"amount": {"type": "number", "maximum": 1000}}},
    )
    replies = [calls(("refund", {"account_id": "a1", "amount": "5000"})), "refused"]
    async with (
        connection(engine, crm) as conn,
        agent(
            conn, tmp_path / "cp.sqlite", replies, tool_gates=ToolGates(argument_rules=[rule])
        ) as (graph, _),
    ):
        out = await graph.ainvoke({"messages": [("user", "refund 5000")]}, config("t"))
    assert crm.calls == []
    [denied] = out["denials"]
    assert (denied["gate"], denied["rule"]) == ("arguments", "refund_at_most_1000")


async def test_a_server_name_with_a_dot_is_refused_by_the_python_api_as_by_the_file(
    engine: ReferenceEngine, crm: CrmServer
) -> None:
    """Rules name a tool ``server.name``: a server ``crm.eu`` would make ``crm.eu.refund``
    ambiguous, so it is refused wherever servers are named."""
    with pytest.raises(ConfigError, match=r"crm\.eu"):
        await create_governed_agent(
            ScriptedChatModel(replies=["hi"]),
            base_url=engine.url,
            profile="execute",
            extra_servers={"crm.eu": crm.connection()},
        )
    with pytest.raises(ConfigError, match=r"crm\.eu"):
        async with EngineConnection(engine.url, extra_servers={"crm.eu": crm.connection()}):
            pass  # pragma: no cover - never opened
    with pytest.raises(ConfigError, match=r"crm\.eu"):
        parse_config({"extra_servers": {"crm.eu": crm.connection()}}, source="agent.toml")
    assert crm.calls == []


async def test_a_tool_its_server_marks_destructive_is_held_unless_allowed(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    """FastMCP's ``destructiveHint: true`` reaches the catalog (the adapters keep the
    annotations in the tool's ``metadata``): its calls are held with no rule at all, and an
    explicit ``allow`` releases them."""
    replies = [calls(("purge_customer", {"account_id": "a1"})), "held", "purged"]
    with running_crm(destructive=True) as crm:
        async with connection(engine, crm) as conn:
            [purge] = [t for t in conn.tools if t.name == "purge_customer"]
            assert (purge.metadata or {}).get("destructiveHint") is True
            async with agent(conn, tmp_path / "held.sqlite", replies) as (graph, _):
                out = await graph.ainvoke({"messages": [("user", "purge a1")]}, config("t"))
                assert crm.calls == []
                [held] = out["denials"]
                assert (held["gate"], held["rule"], held["tool"]) == (
                    "approval",
                    "destructiveHint",
                    "purge_customer",
                )
                await graph.ainvoke(Command(resume=APPROVE), config("t"))
            assert crm.calls == [("purge_customer", {"account_id": "a1"})]
            allowed = ToolGates(allow=["crm.purge_customer"])
            async with agent(conn, tmp_path / "allowed.sqlite", replies, tool_gates=allowed) as (
                graph,
                _,
            ):
                out = await graph.ainvoke({"messages": [("user", "purge a1")]}, config("u"))
    assert out["denials"] == [] and crm.count("purge_customer") == 2
    assert [(c["tool"], c["server"]) for c in out["tool_calls"]] == [("purge_customer", "crm")]


async def test_a_configured_deny_posture_refuses_the_crms_unlisted_tools(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> None:
    tomllib = pytest.importorskip("tomllib")
    text = (
        'profile = "execute"\n'
        "[tool_gates]\n"
        'allow = ["crm.lookup_customer"]\n'
        "[tool_gates.servers.crm]\n"
        'unlisted = "deny"\n'
    )
    cfg = parse_config(tomllib.loads(text), source="agent.toml")
    replies = [
        calls(
            ("lookup_customer", {"account_id": "a1"}),
            ("refund", {"account_id": "a1", "amount": 5}),
            ("delete_customer", {"account_id": "a1"}),
        ),
        "one of three",
    ]
    async with (
        connection(engine, crm) as conn,
        agent(conn, tmp_path / "cp.sqlite", replies, config=cfg) as (graph, _),
    ):
        out = await graph.ainvoke({"messages": [("user", "do it all")]}, config("t"))
    assert crm.calls == [("lookup_customer", {"account_id": "a1"})]
    assert [(d["tool"], d["gate"], d["rule"]) for d in out["denials"]] == [
        ("refund", "arguments", "unlisted:crm"),
        ("delete_customer", "arguments", "unlisted:crm"),
    ]


async def test_an_optional_server_down_at_start_keeps_its_rules_and_a_required_one_refuses(
    engine: ReferenceEngine, crm: CrmServer, tmp_path: Path
) -> None:
    from algenta_graph._net import free_port

    dead = {"transport": "streamable_http", "url": f"http://127.0.0.1:{free_port()}/mcp"}
    servers = {"crm": crm.connection(), "billing": dead}
    gates = {"require_approval": ["billing.refund", "crm.delete_customer"]}
    model = ScriptedChatModel(replies=["hi"])
    with pytest.raises(ConfigError, match=r"server 'billing' is unreachable; to start without"):
        await create_governed_agent(
            model, base_url=engine.url, extra_servers=servers, tool_gates=gates
        )
    optional = {**gates, "servers": {"billing": {"optional": True}}}
    graph = await create_governed_agent(
        model, base_url=engine.url, extra_servers=servers, tool_gates=optional
    )
    try:
        out = await graph.ainvoke({"messages": [("user", "hello")]}, config("t"))
        assert out["messages"][-1].content == "hi"
    finally:
        from algenta_graph.graph import aclose_governed_agent

        await aclose_governed_agent(graph)
