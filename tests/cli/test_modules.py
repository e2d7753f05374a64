"""The CLI's helpers live in modules named for what they are, with no import cycle.

``console`` prints a stream, ``audit`` reads the records, ``commands`` holds the subcommands;
``demo`` uses the first two and nothing of the CLI.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys

from algenta_graph import console


def _modules_after(statement: str) -> set[str]:
    code = f"import sys, json; {statement}; print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return {m for m in json.loads(proc.stdout) if m.startswith("algenta_graph")}


def test_demo_imports_no_cli_module() -> None:
    loaded = _modules_after("import algenta_graph.demo")
    assert {"algenta_graph.audit.records", "algenta_graph.console"} <= loaded
    assert not loaded & {"algenta_graph.cli.common", "algenta_graph.cli"}


def test_audit_and_console_need_no_graph() -> None:
    loaded = _modules_after("import algenta_graph.audit.records, algenta_graph.console")
    assert not loaded & {
        "algenta_graph.graph",
        "algenta_graph.connection.engine",
        "algenta_graph.demo",
    }


def test_an_escalation_is_described_in_either_interrupt_shape() -> None:
    legacy = {
        "gate": "confidence",
        "decision_id": "dec_1",
        "message": "confidence 0.3 < 0.6",
        "override_flag": "override_safety",
        "error": "invalid resume payload",
    }
    text = console.describe_escalation(legacy)
    assert text.startswith("the confidence gate denied decision dec_1: confidence 0.3 < 0.6")
    assert "override_safety=true" in text and "previous answer rejected" in text
    hitl = {
        "action_requests": [
            {"name": "execute_decision", "args": {"decision_id": "dec_2"}, "description": "d2"},
            {"name": "execute_decision", "args": {"decision_id": "dec_3"}},
        ],
        "review_configs": [],
    }
    assert console.describe_escalation(hitl) == (
        'd2; {"name": "execute_decision", "args": {"decision_id": "dec_3"}}'
    )
    several = {
        **legacy,
        "escalations": [
            {"decision_id": "dec_1", "message": "confidence 0.3 < 0.6"},
            {"decision_id": "dec_4", "message": "confidence 0.2 < 0.6"},
        ],
    }
    assert console.describe_escalation(several).startswith(
        "the confidence gate denied 2 decisions (decision dec_1: confidence 0.3 < 0.6; "
        "decision dec_4: confidence 0.2 < 0.6); an override would set override_safety=true on each"
    )
    assert console.describe_escalation("plain") == "plain"


def test_the_operator_prompt_records_the_os_user_unless_told_otherwise() -> None:
    import getpass

    from algenta_graph.cli.run import ask_operator

    payload = {"gate": "confidence", "decision_id": "dec_1", "message": "low"}
    answers = iter(["override", "", "checked"])
    prompts: list[str] = []

    def read(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    out = io.StringIO()
    answer = ask_operator(payload, read, out)
    me = getpass.getuser()
    assert answer == {"action": "override", "operator": me, "reason": "checked"}
    assert f"[{me}]" in prompts[1]
    named = iter(["decline", "ana", "no"])
    assert ask_operator(payload, lambda _p: next(named), out)["operator"] == "ana"


def test_a_held_call_is_described_by_its_tool_never_as_decision_none() -> None:
    held = {
        "gate": "approval",
        "decision_id": None,
        "override_flag": None,
        "tool": "crm.delete_customer",
        "args": {"customer_id": "b2"},
        "message": "calls of crm.delete_customer need an operator's approval",
    }
    text = console.describe_escalation(held)
    assert text == (
        'the approval gate held the call of crm.delete_customer({"customer_id": "b2"}): calls '
        "of crm.delete_customer need an operator's approval; an approval runs it once"
    )
    out = io.StringIO()
    update = {
        "denials": [{**held, "kind": "denial"}],
        "operator_decisions": [
            {"operator": "ana", "action": "override", "gate": "approval", "reason": None,
             "result": "executed"}
        ],
    }  # fmt: skip
    console.print_update("governed_tool", update, out)
    printed = out.getvalue()
    assert "None" not in printed, printed
    assert "[denial] approval gate held the call of crm.delete_customer" in printed
    assert "[operator] ana chose override on the approval gate: executed" in printed


def test_json_events_carry_each_tool_result_whole() -> None:
    from langchain_core.messages import ToolMessage

    plan = {"plan_id": "plan_1", "plan_hash": "sha256:" + "ab" * 32, "nonce": "n" * 200}
    message = ToolMessage(
        content=json.dumps(plan, indent=2),
        name="plan_decision",
        tool_call_id="c1",
        artifact={"structured_content": plan},
    )
    out = io.StringIO()
    printer = console.JsonPrinter(out)
    printer.feed("updates", {"governed_tool": {"messages": [message]}})
    printer.feed("messages", ("token", {"langgraph_node": "model"}))  # tokens are not events
    [event] = [json.loads(line) for line in out.getvalue().splitlines()]
    assert event == {
        "event": "tool_result",
        "node": "governed_tool",
        "tool": "plan_decision",
        "tool_call_id": "c1",
        "status": "success",
        "result": plan,
    }
    text = io.StringIO()
    console.print_update("governed_tool", {"messages": [message]}, text)
    assert plan["nonce"] not in text.getvalue()  # shortened by default
    text = io.StringIO()
    console.print_update("governed_tool", {"messages": [message]}, text, full=True)
    assert json.loads(text.getvalue().split(": ", 1)[1]) == plan
