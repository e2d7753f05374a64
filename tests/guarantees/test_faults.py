"""Engine faults: one clear error naming the URL, and the thread stays resumable.

At start (``create_governed_agent`` against a URL where the engine is down, answers HTTP 500,
answers with something that is not JSON-RPC, or never answers): one typed
``EngineConnectionError`` whose message names the URL, not an exception group or a traceback
from deep inside the MCP client.

Mid-run, on a thread checkpointed in a SQLite file, while the model is executing a decision:
the engine stopped, the engine process SIGKILLed, the engine too slow (call timeout), the token
rejected (HTTP 401), HTTP 500 from whatever took the engine's port, a malformed JSON-RPC answer.
The run surfaces one clear error naming the URL (as the tool result the model sees, or as one
typed exception), nothing is recorded as a receipt, and once the engine is back on the same port
and database the same thread completes: the decision is delivered exactly once and its receipt
is in the thread's state.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from guarantee_support import (
    EngineProcess,
    FaultHTTPServer,
    async_wait_until,
    figure,
    log_decision,
)
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from mcp import ClientSession

from algenta_graph._net import free_port
from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.errors import EngineConnectionError, EngineTimeoutError
from algenta_graph.graph import create_governed_agent
from algenta_graph.models import DemoChatModel

SECRET = "sk-guarantee-test-not-a-real-key"
TRACE_WORDS = ("Traceback", "ExceptionGroup", "TaskGroup", "unhandled errors")


def _assert_clear(message: str, url: str) -> None:
    assert url in message, f"the error does not name {url}: {message}"
    assert SECRET not in message
    for word in TRACE_WORDS:
        assert word not in message, f"{word!r} leaks into the error: {message}"


# --------------------------------------------------------------------------- at start


@asynccontextmanager
async def _nothing(port: int) -> AsyncIterator[None]:
    yield None


def _fault_at_start(kind: str, port: int) -> AbstractAsyncContextManager[Any]:
    if kind == "down":
        return _nothing(port)
    return _as_async(FaultHTTPServer(kind, port=port))


@asynccontextmanager
async def _as_async(server: FaultHTTPServer) -> AsyncIterator[FaultHTTPServer]:
    await asyncio.to_thread(server.__enter__)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.__exit__, None, None, None)


@pytest.mark.parametrize("kind", ["down", "500", "malformed", "garbage", "hang"])
async def test_engine_fault_at_start_is_one_clear_error_naming_the_url(kind: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    async with _fault_at_start(kind, port):
        connection = EngineConnection(url, api_key=SECRET, profile="execute", timeout=2.0)
        with pytest.raises(EngineConnectionError) as caught:
            await connection.open()
        await connection.aclose()
        errors = [caught.value]
        if kind != "hang":  # the product entry point, with its default timeouts
            with pytest.raises(EngineConnectionError) as caught_default:
                await create_governed_agent(DemoChatModel(), base_url=url, api_key=SECRET)
            errors.append(caught_default.value)
    for exc in errors:
        _assert_clear(str(exc), url)
        assert exc.url == url
    if kind == "hang":
        assert isinstance(caught.value, EngineTimeoutError)
    figure(f"engine_fault_start_{kind}", error=type(caught.value).__name__, names_url=1)


# --------------------------------------------------------------------------- mid-run


class Engine:
    """The engine on a fixed port and database, taken away and brought back by each fault."""

    def __init__(self, tmp: Path, kind: str) -> None:
        self.kind = kind
        self.port = free_port()
        self.db = tmp / "engine.sqlite"
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        # "401": the engine starts with the connection's token and rotates it mid-run
        self.api_key = SECRET if kind == "401" else None
        self.process: EngineProcess | None = None
        self.inproc: ReferenceEngine | None = None
        self.fault: FaultHTTPServer | None = None

    def start(self, api_key: str | None = None) -> None:
        if self.kind == "killed":
            self.process = EngineProcess(port=self.port, db=self.db, api_key=api_key).start()
        else:
            self.inproc = ReferenceEngine(
                port=self.port, db=self.db, api_key=api_key, relaxed=True
            ).start()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
        if self.inproc is not None:
            self.inproc.stop()
            self.inproc = None
        if self.fault is not None:
            self.fault.__exit__(None, None, None)
            self.fault = None

    def break_it(self) -> None:
        """Apply the fault (called while the model is about to execute)."""
        if self.kind == "down":
            self.stop()
        elif self.kind == "killed":
            assert self.process is not None and self.process.proc is not None
            os.kill(self.process.proc.pid, signal.SIGKILL)
            self.process.proc.wait(timeout=10)
            self.process = None
        elif self.kind in ("500", "malformed"):
            self.stop()
            self.fault = FaultHTTPServer(self.kind, port=self.port).__enter__()
        elif self.kind == "401":  # the token is rotated: the connection's no longer works
            self.stop()
            self.start(api_key="k-rotated")
        # "slow": the webhook holds its answer longer than the call timeout

    def bring_back(self) -> None:
        if self.kind == "slow":  # it never went away; it was only slow
            return
        self.stop()
        self.start(api_key=SECRET if self.kind == "401" else None)


def _error_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [
        m
        for m in state["messages"]
        if isinstance(m, ToolMessage) and m.status == "error" and m.name == "execute_decision"
    ]


MID_RUN_FAULTS = ("down", "killed", "slow", "401", "500", "malformed")


async def _fault_mid_run(
    kind: str,
    tmp_path: Path,
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
) -> str:
    """One fault scenario on its own engine, port, database and thread; returns its figure."""
    tmp_path.mkdir()
    engine = Engine(tmp_path, kind)
    engine.start(api_key=engine.api_key)
    try:
        async with WebhookReceiver() as hook:
            async with mcp_session(engine.url, api_key=engine.api_key) as session:
                decision_id = await log_decision(session, action=f"fault-{kind}")
            webhook = hook.url_for_delay(2.5) if kind == "slow" else hook.url
            prompt = f"execute decision_id={decision_id} webhook_url={webhook}"
            config: Any = {"configurable": {"thread_id": f"fault-{kind}"}}
            connection = EngineConnection(
                engine.url,
                api_key=SECRET,
                profile="execute",
                timeout=5.0,
                call_timeout=1.0 if kind == "slow" else 10.0,
            )
            async with (
                AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver,
                connection as conn,
            ):
                graph = await create_governed_agent(
                    DemoChatModel(),
                    connection=conn,
                    checkpointer=saver,
                    single_process=True,
                )
                # 1. the fault strikes after the model chose execute_decision
                raised: BaseException | None = None
                broken = False
                try:
                    async for update in graph.astream(
                        {"messages": [("user", prompt)]}, config, stream_mode="updates"
                    ):
                        if "model" in update and not broken:
                            broken = True
                            await asyncio.to_thread(engine.break_it)
                except Exception as exc:  # the exception path: it must be one typed error
                    raised = exc
                after_fault = await graph.aget_state(config)
                assert after_fault.values.get("receipts", []) == []
                if raised is not None:
                    assert isinstance(raised, EngineConnectionError), repr(raised)
                    message = str(raised)
                    surface = "exception"
                else:
                    errors = _error_messages(after_fault.values)
                    assert len(errors) == 1, after_fault.values["messages"]
                    message = str(errors[0].content)
                    surface = "tool_message"
                _assert_clear(message, engine.url)
                if kind == "slow":
                    assert "time" in message.lower(), message
                if kind == "401":
                    assert "401" in message or "token" in message.lower(), message

                # 2. the engine comes back on the same port and database; the thread resumes
                await asyncio.to_thread(engine.bring_back)
                if kind == "slow":
                    # "back" = the slow call has finished on the engine and its late answer
                    # has reached the client (a retry racing it is the last test below); then
                    # retry with what the error advises, a longer timeout
                    store = ReferenceEngine(db=engine.db)
                    await async_wait_until(
                        lambda: store.executions(decision_id), timeout=20, what="the delivery"
                    )
                    await asyncio.sleep(1.0)
                    conn.call_timeout = 10.0
                if raised is not None:
                    final = await graph.ainvoke(None, config)
                else:
                    final = await graph.ainvoke({"messages": [("user", prompt)]}, config)
                snapshot = await graph.aget_state(config)

            receipts = [r for r in final["receipts"] if r["decision_id"] == decision_id]
            await asyncio.sleep(0.1)
            posts = [
                r
                for r in hook.requests
                if isinstance(r["body"], dict) and r["body"].get("decision_id") == decision_id
            ]
    finally:
        await asyncio.to_thread(engine.stop)

    assert snapshot.next == ()
    assert len(receipts) == 1, final
    assert receipts[0]["execution_status"] == "delivered"
    assert len(posts) == 1, posts
    executions = ReferenceEngine(db=engine.db).executions(decision_id)
    assert [e["execution_status"] for e in executions] == ["delivered"]
    print(f"ERROR engine_fault_{kind}: {' '.join(message.split())[:300]}")
    return figure(
        f"engine_fault_{kind}",
        surface=surface,
        names_url=1,
        resumed=int(not snapshot.next),
        receipts=len(receipts),
        receipt_source=receipts[0].get("source"),
        deliveries=len(posts),
    )


async def test_engine_faults_mid_run_name_the_url_and_the_thread_resumes(
    tmp_path: Path,
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
) -> None:
    """Every mid-run fault, each on its own engine and thread, run side by side."""
    results = await asyncio.gather(
        *(_fault_mid_run(kind, tmp_path / kind, mcp_session) for kind in MID_RUN_FAULTS),
        return_exceptions=True,
    )
    failures = {
        k: r for k, r in zip(MID_RUN_FAULTS, results, strict=True) if isinstance(r, BaseException)
    }
    figure("engine_faults_mid_run", faults=len(MID_RUN_FAULTS), resumed=6 - len(failures))
    for kind, failure in failures.items():
        raise AssertionError(f"fault {kind!r} failed: {failure!r}") from failure


async def test_a_retry_during_a_timed_out_call_is_not_failed_by_its_late_answer(
    tmp_path: Path,
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
) -> None:
    """A retry sent while the timed-out call still runs on the engine: the late answer of the
    first call must not fail the retry, which ends in the recovered receipt."""
    async with mcp_session(engine.url) as session:
        decision_id = await log_decision(session, action="slow-then-retry")
    prompt = f"execute decision_id={decision_id} webhook_url={webhook.url_for_delay(4.0)}"
    config: Any = {"configurable": {"thread_id": "retry-while-slow"}}
    async with (
        AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver,
        EngineConnection(engine.url, profile="execute", call_timeout=1.0) as conn,
    ):
        graph = await create_governed_agent(
            DemoChatModel(), connection=conn, checkpointer=saver, single_process=True
        )
        first = await graph.ainvoke({"messages": [("user", prompt)]}, config)
        assert "did not answer within 1 s" in str(_error_messages(first)[-1].content)
        # retry at once, with a timeout long enough: the engine serialises it behind the
        # first delivery (4 s), then denies it (idempotency) and the graph recovers the receipt
        conn.call_timeout = 10.0
        final = await graph.ainvoke({"messages": [("user", prompt)]}, config)
    assert len(_error_messages(final)) == 1, _error_messages(final)[-1].content
    assert [r["source"] for r in final["receipts"]] == ["recovered"]
