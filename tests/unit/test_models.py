"""The offline chat models: DemoChatModel's tool choice and summary, ScriptedChatModel's copies."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from pydantic import BaseModel

from algenta_graph.models import DemoChatModel, parse_key_values, resolve_model
from algenta_graph.testing import ScriptedChatModel


class _ExecArgs(BaseModel):
    decision_id: str
    webhook_url: str
    timeout_seconds: float = 10.0


class _LogArgs(BaseModel):
    chosen_action: str
    confidence: float
    risk_p5: float | None = None


class _GetArgs(BaseModel):
    decision_id: str


class _SearchArgs(BaseModel):
    query: str


def _tool(name: str, schema: type[BaseModel]) -> StructuredTool:
    def run(**kwargs: Any) -> str:
        return "unused"

    return StructuredTool.from_function(
        func=run, name=name, description=f"{name} tool", args_schema=schema
    )


EXEC = _tool("execute_decision", _ExecArgs)
LOG = _tool("log_decision", _LogArgs)
GET = _tool("get_decision", _GetArgs)
SEARCH = _tool("search_tools", _SearchArgs)


def _ask(tools: list[StructuredTool], *messages: Any) -> AIMessage:
    reply = DemoChatModel().bind_tools(tools).invoke(list(messages))
    assert isinstance(reply, AIMessage)
    return reply


def test_parse_key_values_keeps_urls_whole_and_quoted_values() -> None:
    pairs = parse_key_values(
        'run decision_id=dec_1 webhook_url=http://127.0.0.1:9/hook?a=1&b=x=y, rationale="two words"'
    )
    assert pairs == {
        "decision_id": "dec_1",
        "webhook_url": "http://127.0.0.1:9/hook?a=1&b=x=y",
        "rationale": "two words",
    }


def test_demo_model_prefers_the_tool_using_most_arguments() -> None:
    text = "execute decision_id=dec_9 webhook_url=http://h:1/hook?x=1"
    # get_decision comes first (better rank) but uses one pair; execute_decision uses two
    reply = _ask([GET, EXEC], HumanMessage(text))
    assert reply.tool_calls[0]["name"] == "execute_decision"
    assert reply.tool_calls[0]["args"] == {
        "decision_id": "dec_9",
        "webhook_url": "http://h:1/hook?x=1",
    }


def test_demo_model_breaks_ties_by_bound_order_and_coerces_types() -> None:
    reply = _ask([GET, EXEC], HumanMessage("decision_id=dec_1"))
    assert reply.tool_calls[0]["name"] == "get_decision"
    reply = _ask([LOG], HumanMessage("chosen_action=ship confidence=0.25 risk_p5=-0.1"))
    assert reply.tool_calls[0]["args"] == {
        "chosen_action": "ship",
        "confidence": 0.25,
        "risk_p5": -0.1,
    }


def test_demo_model_falls_back_to_search_tools_then_summarises() -> None:
    question = HumanMessage("please log chosen_action=ship")  # log_decision needs confidence
    reply = _ask([LOG, SEARCH], question)
    assert reply.tool_calls[0]["name"] == "search_tools"
    searched = ToolMessage('{"tools": []}', name="search_tools", tool_call_id="s1")
    reply = _ask([LOG, SEARCH], question, reply, searched)
    assert not reply.tool_calls
    assert "found no bound tool" in str(reply.content)


def test_demo_model_summary_includes_denials() -> None:
    question = HumanMessage("decision_id=dec_1 webhook_url=http://h/hook")
    call = _ask([EXEC], question)
    denial = ToolMessage(
        "DENIED: execute_decision for decision dec_1 was blocked by the confidence gate",
        name="execute_decision",
        tool_call_id=call.tool_calls[0]["id"],
        status="error",
    )
    answer = _ask([EXEC], question, call, denial)
    assert not answer.tool_calls
    assert "execute_decision (error)" in str(answer.content)
    assert "confidence gate" in str(answer.content)


def test_demo_model_is_deterministic() -> None:
    question = HumanMessage("decision_id=dec_1 webhook_url=http://h/hook")
    first, second = _ask([EXEC], question), _ask([EXEC], question)
    assert first.tool_calls == second.tool_calls


def test_scripted_model_hands_out_deep_copies_and_records_tools() -> None:
    reply = AIMessage(
        "", tool_calls=[{"name": "get_decision", "args": {"decision_id": "d"}, "id": "c1"}]
    )
    model = ScriptedChatModel(replies=[reply, "done"])
    bound = model.bind_tools([GET])
    got = bound.invoke("hi")
    got.tool_calls[0]["args"]["decision_id"] = "mutated"
    got.id = "set-by-add-messages"
    assert reply.tool_calls[0]["args"] == {"decision_id": "d"}
    assert reply.id is None
    assert bound.invoke("again").content == "done"
    assert [t["function"]["name"] for t in model.bound_tools[0]] == ["get_decision"]
    with pytest.raises(IndexError, match="ran out of replies \\(2 given\\)"):
        bound.invoke("more")


def test_scripted_model_accepts_dict_replies() -> None:
    model = ScriptedChatModel(
        replies=[{"content": "", "tool_calls": [{"name": "x", "args": {"a": 1}}]}]
    )
    got = model.invoke("q")
    assert got.tool_calls[0]["name"] == "x" and got.tool_calls[0]["id"]


def test_resolve_model() -> None:
    assert isinstance(resolve_model(None), DemoChatModel)
    scripted = ScriptedChatModel(replies=["x"])
    assert resolve_model(scripted) is scripted
    with pytest.raises(TypeError, match="chat model"):
        resolve_model(42)  # type: ignore[arg-type]
