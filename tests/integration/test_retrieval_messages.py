"""What users type, through the governed graph: a message of several requests brings each
request's tool to ``retrieve_tools`` and to ``search_tools``, and a request written
``q=Paris`` reaches the tool whose parameter is ``q``.

A real reference engine over HTTP and a real FastMCP server (the tools below) as the extra
server, real SQLite checkpoints; the chat model is the scripted stand-in.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from mcp.server.fastmcp import FastMCP

from algenta_graph._serve import BackgroundServer
from algenta_graph.config import parse_config
from algenta_graph.engine import ReferenceEngine
from algenta_graph.graph import aclose_governed_agent, create_governed_agent
from algenta_graph.testing import ScriptedChatModel

pytestmark = pytest.mark.timeout(180)

TWO_REQUESTS = "Weather alerts and the rain radar for Paris, and send an email to Ann"
"""The weather tools mention email too: ranked as one request, two weather tools lead and
``send_email`` is third."""


def _desk_app() -> Any:
    mcp = FastMCP("desk", stateless_http=True, json_response=True, log_level="WARNING")

    @mcp.tool()
    def weather_alerts(region: str) -> str:
        """Severe weather alerts for a region, by email."""
        return region

    @mcp.tool()
    def weather_radar(city: str) -> str:
        """Rain radar images of a city, sent by email."""
        return city

    @mcp.tool()
    def forecast_weather(city: str, days: int = 3) -> str:
        """Weather forecast for a city, by day, by email."""
        return city

    @mcp.tool()
    def send_email(to: str, subject: str, body: str) -> str:
        """Send an email message to a recipient."""
        return to

    @mcp.tool()
    def web_search(q: str, lang: str = "en") -> str:
        """Search the web."""
        return q

    @mcp.tool()
    def geocode(address: str, country: str = "") -> str:
        """Coordinates of a place."""
        return address

    @mcp.tool()
    def currency_convert(amount: float, source: str, target: str) -> str:
        """Convert an amount between two currencies."""
        return source

    return mcp.streamable_http_app()


@pytest.fixture
def desk() -> Iterator[str]:
    """The URL of a running FastMCP server with the tools above."""
    server = BackgroundServer(_desk_app(), name="desk-fastmcp")
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}/mcp"
    finally:
        server.stop()


async def _turn(
    engine: ReferenceEngine, desk: str, db: Path, message: str, search: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """One turn: the tools ``retrieve_tools`` selected for ``message`` (bound on the model's
    first step, before ``search_tools``), and the tools a ``search_tools`` call with
    ``search`` as its arguments found."""
    config = parse_config(
        {
            "base_url": engine.url,
            "profile": "execute",
            "top_k": 2,
            "extra_servers": {"desk": {"transport": "streamable_http", "url": desk}},
        }
    )
    replies: list[Any] = [
        {"content": "", "tool_calls": [{"name": "search_tools", "args": search, "id": "s1"}]},
        "done",
    ]
    model = ScriptedChatModel(replies=replies)
    graph = await create_governed_agent(model, config=config, checkpointer=db)
    try:
        out = await graph.ainvoke(
            {"messages": [("user", message)]}, {"configurable": {"thread_id": "t"}}
        )
    finally:
        await aclose_governed_agent(graph)
    [answer] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    found = [t["name"] for t in json.loads(str(answer.content))["tools"]]
    first_step = [t["function"]["name"] for t in model.bound_tools[0]]
    assert first_step[-1] == "search_tools"
    return first_step[:-1], found


async def test_each_request_of_a_message_reaches_retrieve_tools_and_search_tools(
    engine: ReferenceEngine, desk: str, tmp_path: Path
) -> None:
    selected, found = await _turn(
        engine, desk, tmp_path / "cp.sqlite", TWO_REQUESTS, {"query": TWO_REQUESTS, "k": 2}
    )
    assert selected[0] in {"weather_alerts", "weather_radar"}
    assert "send_email" in selected
    assert found[0] in {"weather_alerts", "weather_radar"}
    assert "send_email" in found


async def test_a_parameter_written_name_equals_value_reaches_its_tool(
    engine: ReferenceEngine, desk: str, tmp_path: Path
) -> None:
    selected, found = await _turn(
        engine, desk, tmp_path / "cp.sqlite", "q=Paris", {"query": "q=Paris", "k": 2}
    )
    assert selected[:1] == ["web_search"]
    assert found[:1] == ["web_search"]
