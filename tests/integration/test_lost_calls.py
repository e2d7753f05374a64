"""A tool call whose server leaves mid-call fails at once, saying it may have run.

A real FastMCP server in a process of its own (streamable HTTP) runs ``refund``; while the call
is in flight the process is stopped gracefully (SIGTERM) or killed (SIGKILL). Stopped, a server
answering with server-sent events closes the call's answer stream cleanly with no answer in it
(mcp's client would wait for ``call_timeout``), or, when its events carry ids, leaves the
client nowhere to resume the stream from; killed, the connection is reset. Either way the
call fails with :class:`ToolCallLostError` as soon as the connection is gone, never by waiting
out ``call_timeout`` (set here far beyond the test's own timeout), and what the model and the
operator read says the call may have run and must not be repeated blindly; it never suggests
raising a timeout. A stateless server answering with JSON bodies finishes the call in flight
when stopped gracefully: its answer arrives.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from graph_support import agent, config, tool_messages
from tool_process import tool_process

from algenta_graph._net import free_port
from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine
from algenta_graph.errors import EngineConnectionError, EngineTimeoutError, ToolCallLostError

pytestmark = pytest.mark.timeout(120)

CALL_TIMEOUT = 600.0
"""Far beyond the test's timeout: a call that waited for it would fail the test."""
STOPS = [signal.SIGTERM, signal.SIGKILL]
ANSWERS = ["sse", "resumable", "json"]


def refund_call(account: str) -> dict[str, object]:
    """One model turn calling the server's ``refund``."""
    args = {"account_id": account, "amount": 50}
    return {"content": "", "tool_calls": [{"name": "refund", "args": args, "id": "r1"}]}


def assert_may_have_run(text: str, url: str) -> None:
    """What a lost call says: where, that it may have run, not to repeat it; no timeout."""
    assert url in text and "'refund'" in text, text
    assert "may have run" in text and "do not call it again" in text, text
    assert "timeout" not in text and "timed out" not in text, text


@pytest.mark.parametrize("answers", ANSWERS)
@pytest.mark.parametrize("stop", STOPS, ids=lambda s: s.name)
async def test_a_server_that_leaves_mid_call_fails_the_call_at_once(
    engine: ReferenceEngine, tmp_path: Path, stop: signal.Signals, answers: str
) -> None:
    with tool_process(free_port(), tmp_path / "crm.log", answers) as crm:
        extra = {"crm": crm.connection()}
        async with EngineConnection(
            engine.url, extra_servers=extra, call_timeout=CALL_TIMEOUT
        ) as conn:
            call = asyncio.ensure_future(
                conn.call_tool("refund", {"account_id": "a1", "amount": 50}, tool_call_id="r1")
            )
            await crm.wait_started("a1")
            await asyncio.to_thread(crm.stop, stop)
            if (stop, answers) == (signal.SIGTERM, "json"):  # a graceful stop finishes it
                assert (await call).status == "success"
                assert "ran a1" in crm.lines()
                return
            with pytest.raises(ToolCallLostError) as info:
                await call
    error = info.value
    assert isinstance(error, EngineConnectionError) and not isinstance(error, EngineTimeoutError)
    assert error.url == crm.url and error.tool == "refund"
    assert_may_have_run(str(error), crm.url)


@pytest.mark.parametrize("stop", STOPS, ids=lambda s: s.name)
async def test_through_the_graph_the_model_is_told_the_call_may_have_run(
    engine: ReferenceEngine, tmp_path: Path, stop: signal.Signals
) -> None:
    with tool_process(free_port(), tmp_path / "crm.log") as crm:
        extra = {"crm": crm.connection()}
        async with (
            EngineConnection(engine.url, extra_servers=extra, call_timeout=CALL_TIMEOUT) as conn,
            agent(conn, tmp_path / "cp.sqlite", [refund_call("a1"), "told"]) as (graph, _),
        ):
            run = asyncio.ensure_future(
                graph.ainvoke({"messages": [("user", "refund a1")]}, config("t"))
            )
            await crm.wait_started("a1")
            await asyncio.to_thread(crm.stop, stop)
            out = await run
    [message] = tool_messages(out)
    assert message.status == "error"
    assert_may_have_run(str(message.content), crm.url)
    assert out["messages"][-1].content == "told"  # the run went on to the model, at once
