"""The compiled graph with the real ``ChatOpenAI`` and ``ChatAnthropic`` clients on the wire.

Each test points the real LangChain client class at a local stand-in of the provider's HTTP API
(``tests/support/provider_standins.py``: it answers from a script and rejects, with the provider's
own HTTP 400, every request the real API would reject: tool names, schemas, tool-call / tool-result
pairing, roles, empty text). The engine, the extra MCP server, the checkpointer and the graph are
real.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from ci_support import require_module
from graph_support import RELAXED_ENGINE, config, log_decision, tool_messages
from langchain_core.messages import AIMessageChunk, ToolMessage
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command
from provider_standins import (
    LONG_NAME,
    ProviderStandIn,
    Reply,
    Request,
    UnsafeNamesServer,
    anthropic_problems,
    openai_problems,
)

from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.graph import create_governed_agent
from algenta_graph.retrieval.naming import model_facing_name

require_module("langchain_openai")
require_module("langchain_anthropic")
pytestmark = pytest.mark.timeout(120)

KINDS = ["openai", "anthropic"]
OVERRIDE = {"action": "override", "operator": "ana", "reason": "ok"}
PATTERN = r"[a-zA-Z0-9_-]{1,64}"


@contextlib.asynccontextmanager
async def wired(
    kind: str,
    script: list[Any],
    engine: ReferenceEngine,
    db: Path,
    *,
    extra: str | None = None,
    profile: str = "execute",
    **options: Any,
) -> AsyncIterator[tuple[Any, ProviderStandIn, EngineConnection]]:
    """A compiled governed graph with the real client of ``kind`` pointed at its stand-in."""
    extra_servers = {"wx": {"transport": "streamable_http", "url": extra}} if extra else None
    with ProviderStandIn(kind, script) as standin:  # type: ignore[arg-type]
        async with (
            EngineConnection(
                engine.url, profile=profile, extra_servers=extra_servers, **RELAXED_ENGINE
            ) as conn,
            AsyncSqliteSaver.from_conn_string(str(db)) as saver,
        ):
            graph = await create_governed_agent(
                standin.chat_model(),
                connection=conn,
                checkpointer=saver,
                single_process=True,
                **options,
            )
            yield graph, standin, conn


def no_rejections(standin: ProviderStandIn) -> None:
    assert standin.requests, "the stand-in was never called"
    assert all(r == [] for r in standin.rejections), standin.rejections


def execute_args(decision: str, webhook: WebhookReceiver) -> dict[str, Any]:
    return {"decision_id": decision, "webhook_url": webhook.url, "timeout_seconds": 5}


# ------------------------------------------------------------------ the stand-ins bite


def test_the_stand_ins_reject_what_the_providers_reject() -> None:
    bad_tool = {"type": "function", "function": {"name": "weather.get", "parameters": {}}}
    user = {"role": "user", "content": "hi"}
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    unanswered = [user, {"role": "assistant", "content": None, "tool_calls": [call]}, user]
    assert any(
        p.startswith("O1") for p in openai_problems({"messages": [user], "tools": [bad_tool]})
    )
    assert any(
        p.startswith("O2") for p in openai_problems({"messages": [user], "tools": [bad_tool]})
    )
    assert any(p.startswith("O4") for p in openai_problems({"messages": unanswered}))
    answer = {"role": "tool", "tool_call_id": "c1", "content": "x"}
    twice = [user, {"role": "assistant", "content": None, "tool_calls": [call]}, answer, answer]
    assert any("second tool message" in p for p in openai_problems({"messages": twice}))
    orphan = [user, {"role": "tool", "tool_call_id": "c9", "content": "x"}]
    assert any(p.startswith("O5") for p in openai_problems({"messages": orphan}))
    no_items = {
        "type": "function",
        "function": {
            "name": "t",
            "parameters": {"type": "object", "properties": {"a": {"type": ["array", "null"]}}},
        },
    }
    [missing] = openai_problems({"messages": [user], "tools": [no_items]})
    assert "array schema missing items" in missing and "'properties', 'a'" in missing

    tool = {"name": "t", "input_schema": {"type": "object", "properties": {}}}
    use = {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}
    base = {"max_tokens": 10, "tools": [tool]}

    def problems(*messages: dict[str, Any], **body: Any) -> list[str]:
        return anthropic_problems({**base, **body, "messages": list(messages)})

    good = problems(
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result, {"type": "text", "text": "and now?"}]},
    )
    assert good == []
    assert any(
        "A5" in p
        for p in problems(
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": "no result"},
        )
    )
    assert any(
        "A6" in p
        for p in problems(
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [{"type": "text", "text": "x"}, result]},
        )
    )
    assert any(
        "more than one" in p
        for p in problems(
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result, result]},
        )
    )
    empty_text = {"type": "text", "text": ""}
    assert any(
        "A4" in p
        for p in problems(
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [empty_text, use]},
            {"role": "user", "content": [result]},
        )
    )
    assert any(
        "A3" in p
        for p in problems({"role": "user", "content": "a"}, {"role": "user", "content": "b"})
    )
    assert any("A2" in p for p in problems({"role": "system", "content": "s"}))
    unsafe = {"name": "files/read", "input_schema": {"type": "string"}}
    found = anthropic_problems(
        {"max_tokens": 1, "tools": [unsafe], "messages": [{"role": "user", "content": "x"}]}
    )
    assert sum(p.startswith("A1") for p in found) == 2


@pytest.mark.parametrize("kind", KINDS)
async def test_the_real_client_is_rejected_for_an_unsafe_tool_name(kind: str) -> None:
    """The stand-in turns a rule break into the provider's 400, which the real client raises."""
    unsafe = {
        "type": "function",
        "function": {
            "name": "weather.get_forecast",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    with (
        ProviderStandIn(kind, [Reply("never")]) as standin,  # type: ignore[arg-type]
        pytest.raises(Exception, match=r"weather\.get_forecast") as info,
    ):
        await standin.chat_model().bind_tools([unsafe]).ainvoke("hi")
    assert getattr(info.value, "status_code", None) == 400
    assert standin.script == [Reply("never")]  # rejected before any reply was used


# ------------------------------------------------------------------ the scenarios


@pytest.mark.parametrize("kind", KINDS)
async def test_parallel_calls_with_a_denial_an_escalation_and_an_override(
    kind: str, engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        setup = await stack.enter_async_context(EngineConnection(engine.url, profile="execute"))
        ok = await log_decision(setup)
        low = await log_decision(setup, confidence=0.2)  # confidence gate: escalated
        risky = await log_decision(setup, risk_p5=-0.9)  # risk_floor gate: reported

        def first(req: Request) -> Reply:
            name = req.tool("execute_decision")
            return Reply(
                calls=[(name, execute_args(d, webhook)) for d in (ok, low, risky)],
            )

        script = [first, Reply("One delivered, one overridden by ana, one denied by risk_floor.")]
        graph, standin, _ = await stack.enter_async_context(
            wired(
                kind,
                script,
                engine,
                tmp_path / "cp.sqlite",
                on_denial={"confidence": "escalate", "risk_floor": "report"},
                always_include=["execute_decision"],
            )
        )
        paused = await graph.ainvoke({"messages": [("user", "execute the three")]}, config("t"))
        assert [i.value["gate"] for i in paused["__interrupt__"]] == ["confidence"]
        assert len(standin.requests) == 1
        out = await graph.ainvoke(Command(resume=OVERRIDE), config("t"))
    no_rejections(standin)
    assert len(standin.requests) == 2
    assert out["messages"][-1].content.startswith("One delivered")
    by_source = {(r["decision_id"], r["source"]) for r in out["receipts"]}
    assert by_source == {(ok, "model"), (low, "operator")}
    assert {(d["decision_id"], d["gate"]) for d in out["denials"]} == {
        (low, "confidence"),
        (risky, "risk_floor"),
    }
    [decided] = out["operator_decisions"]
    assert (decided["operator"], decided["reason"], decided["result"]) == ("ana", "ok", "receipt")
    assert engine.executions(risky) == [] and len(webhook.received) == 2
    # the second request carried one answer per call: delivered, overridden, denied
    results = Request(standin.requests[1], []).last_tool_results()
    assert len(results) == 3
    assert "OVERRODE the confidence gate" in " ".join(results)
    assert any("risk_floor gate" in r for r in results)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_halt_then_a_new_user_turn_on_the_same_thread(
    kind: str, engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        setup = await stack.enter_async_context(EngineConnection(engine.url, profile="execute"))
        low = await log_decision(setup, confidence=0.2)
        script = [
            lambda req: Reply(calls=[(req.tool("execute_decision"), execute_args(low, webhook))]),
            Reply("The confidence gate blocked it; an operator must review it."),
        ]
        graph, standin, _ = await stack.enter_async_context(
            wired(
                kind,
                script,
                engine,
                tmp_path / "cp.sqlite",
                on_denial="halt",
                always_include=["execute_decision"],
            )
        )
        halted = await graph.ainvoke({"messages": [("user", "execute it")]}, config("t"))
        assert isinstance(halted["messages"][-1], ToolMessage)  # the run ended on the denial
        after = await graph.ainvoke({"messages": [("user", "what happened?")]}, config("t"))
    no_rejections(standin)
    assert len(standin.requests) == 2
    assert after["messages"][-1].content.startswith("The confidence gate blocked it")
    assert engine.executions(low) == [] and webhook.received == []
    # the new turn's request still answers the halted call before the new question
    second = json.dumps(standin.requests[1])
    assert "DENIED" in second and "what happened?" in second


@pytest.mark.parametrize("kind", KINDS)
async def test_search_tools_adds_a_tool_with_an_unsafe_name_that_the_model_then_calls(
    kind: str, engine: ReferenceEngine, tmp_path: Path
) -> None:
    forecast = model_facing_name("weather.get_forecast")
    with UnsafeNamesServer() as mcp_server:
        script = [
            Reply(calls=[("search_tools", {"query": "weather forecast for a city"})]),
            lambda req: Reply(calls=[(req.tool("weather_get_forecast_"), {"city": "Lisbon"})]),
            Reply("Sunny in Lisbon."),
        ]
        async with wired(
            kind, script, engine, tmp_path / "cp.sqlite", extra=mcp_server.url, top_k=1
        ) as (graph, standin, _):
            out = await graph.ainvoke({"messages": [("user", "log a decision")]}, config("t"))
    no_rejections(standin)
    assert forecast not in standin.tools_of(0) and forecast in standin.tools_of(1)
    [search_result, forecast_result] = tool_messages(out)
    found = json.loads(str(search_result.content))["tools"]
    entry = next(t for t in found if t.get("mcp_name") == "weather.get_forecast")
    assert entry["name"] == forecast  # what to call it by, and the real MCP name
    assert "weather.get_forecast" in out["selected_tools"]  # state keeps the real name
    assert mcp_server.calls == [("weather.get_forecast", {"city": "Lisbon"})]
    assert forecast_result.name == forecast  # the answer carries the name the model used
    assert out["messages"][-1].content == "Sunny in Lisbon."


@pytest.mark.parametrize("kind", KINDS)
async def test_an_extra_server_with_unsafe_names_is_bound_and_called_by_safe_names(
    kind: str, engine: ReferenceEngine, tmp_path: Path
) -> None:
    unsafe = ["weather.get_forecast", "files/read weather", LONG_NAME, "records.search"]
    with UnsafeNamesServer() as mcp_server:

        def parallel(req: Request) -> Reply:
            records = req.tool("records_search_")
            station, page, _tags = list(req.schema(records)["properties"])  # keys it was shown
            assert re.fullmatch(r"filter_name_[0-9a-f]{6}", station), station
            return Reply(
                calls=[
                    (req.tool("weather_get_forecast_"), {"city": "Porto"}),
                    (req.tool("files_read_weather_"), {"path": "/tmp/w.txt"}),
                    (req.tool("quarterly_revenue_"), {"quarter": "Q3"}),
                    (records, {station: "Porto", page: 2}),
                ]
            )

        script = [parallel, Reply("Done.")]
        async with wired(
            kind,
            script,
            engine,
            tmp_path / "cp.sqlite",
            extra=mcp_server.url,
            always_include=[*unsafe, "weather_no_params"],
        ) as (graph, standin, _):
            out = await graph.ainvoke({"messages": [("user", "weather and report")]}, config("t"))
            catalog_refused = "weather_string_input" not in json.dumps(standin.requests)
    no_rejections(standin)
    names = standin.tools_of(0)
    assert all(re.fullmatch(PATTERN, n) for n in names)
    assert len(names) == len(set(names))
    assert {model_facing_name(n) for n in unsafe} | {"weather_no_params"} <= set(names)
    assert catalog_refused  # the tool whose schema providers reject is never sent
    assert sorted(c[0] for c in mcp_server.calls) == sorted(unsafe)  # real MCP names
    # the renamed argument keys reach the MCP server as the real ones
    assert ("records.search", {"filter[name]": "Porto", "page size": 2}) in mcp_server.calls
    assert sorted(m.name or "" for m in tool_messages(out)) == sorted(
        model_facing_name(n) for n in unsafe
    )


@pytest.mark.parametrize("kind", KINDS)
async def test_stream_mode_messages_yields_the_model_tokens(
    kind: str, engine: ReferenceEngine, tmp_path: Path
) -> None:
    answer = "The forecast for Faro is sunny with a light breeze."
    with UnsafeNamesServer() as mcp_server:
        script = [
            lambda req: Reply("Let me check.", calls=[(req.tool("weather_get"), {"city": "Faro"})]),
            Reply(answer),
        ]
        async with wired(
            kind,
            script,
            engine,
            tmp_path / "cp.sqlite",
            extra=mcp_server.url,
            always_include=["weather.get_forecast"],
        ) as (graph, standin, _):
            chunks: list[AIMessageChunk] = []
            async for message, meta in graph.astream(
                {"messages": [("user", "forecast in Faro?")]}, config("t"), stream_mode="messages"
            ):
                if isinstance(message, AIMessageChunk) and meta.get("langgraph_node") == "model":
                    chunks.append(message)
            final = (await graph.aget_state(config("t"))).values
    no_rejections(standin)
    assert standin.streamed == [True, True]  # the client streamed both model calls
    texts = [c.text for c in chunks if c.text]
    assert len(texts) >= len(answer.split())  # token by token, not one final message
    assert "".join(texts).endswith(answer)
    assert final["messages"][-1].content in (answer, [{"type": "text", "text": answer, "index": 0}])
    assert mcp_server.calls == [("weather.get_forecast", {"city": "Faro"})]
