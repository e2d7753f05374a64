"""``create_governed_agent(config=...)`` and the served factory, on one configuration.

A real reference engine over HTTP, a real FastMCP server as the extra server (a bearer token
from the environment), real SQLite checkpoints, LangGraph's own stores. The chat model is the
scripted stand-in (a test cannot reach a paid model).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from graph_support import execute, executions, log_decision, open_connection
from langchain_core.embeddings import Embeddings
from langchain_core.messages import SystemMessage
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command
from mcp.server.fastmcp import FastMCP
from pydantic import ValidationError

from algenta_graph._net import free_port
from algenta_graph._serve import BackgroundServer
from algenta_graph.config import ConfigError, parse_config
from algenta_graph.engine import ReferenceEngine
from algenta_graph.engine.webhook import WebhookReceiver
from algenta_graph.errors import EngineConnectionError
from algenta_graph.graph import aclose_governed_agent, create_governed_agent
from algenta_graph.retrieval.usage import DEFAULT_NAMESPACE
from algenta_graph.testing import ScriptedChatModel

pytestmark = pytest.mark.timeout(180)

TOKEN = "crm-s3cret"


def bound_names(model: ScriptedChatModel) -> list[list[str]]:
    return [[t["function"]["name"] for t in step] for step in model.bound_tools]


@pytest.fixture
def crm() -> Iterator[dict[str, Any]]:
    """A FastMCP server with one CRM tool, behind a bearer token; what it saw."""
    seen: dict[str, Any] = {"calls": [], "authorization": []}
    mcp = FastMCP("crm", stateless_http=True, json_response=True)

    @mcp.tool()
    def crm_lookup_customer(account_id: str) -> dict[str, Any]:
        """Find a customer record in the CRM by account."""
        seen["calls"].append(account_id)
        return {"account": account_id, "tier": "silver"}

    inner = mcp.streamable_http_app()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"").decode()
            seen["authorization"].append(given)
            if given != f"Bearer {TOKEN}":
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await inner(scope, receive, send)

    server = BackgroundServer(app, name="crm-fastmcp")
    server.start()
    seen["url"] = f"http://127.0.0.1:{server.port}/mcp"
    try:
        yield seen
    finally:
        server.stop()


def _crm_server(url: str) -> dict[str, Any]:
    return {
        "transport": "streamable_http",
        "url": url,
        "headers": {"Authorization": {"env": "CRM_TOKEN", "prefix": "Bearer "}},
    }


def _call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"content": "", "tool_calls": [{"name": name, "args": args, "id": call_id}]}


def _cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


async def test_the_configuration_builds_the_imported_graph(
    engine: ReferenceEngine, crm: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRM_TOKEN", TOKEN)
    config = parse_config(
        {
            "base_url": engine.url,
            "profile": "execute",
            "top_k": 2,
            "always_include": ["get_contract"],
            "system_prompt": "Be brief.",
            "step_limit": 12,
            "call_timeout": 15,
            "extra_servers": {"crm": _crm_server(crm["url"])},
        }
    )
    model = ScriptedChatModel(
        replies=[_call("crm_lookup_customer", {"account_id": "acct-7"}, "c1"), "silver tier"]
    )
    graph = await create_governed_agent(model, config=config, checkpointer=tmp_path / "cp.sqlite")
    try:
        out = await graph.ainvoke(
            {"messages": [("user", "look up the crm customer account acct-7")]}, _cfg("t1")
        )
        assert graph.config is not None and graph.config["recursion_limit"] == 12
    finally:
        await aclose_governed_agent(graph)
    assert "crm_lookup_customer" in out["selected_tools"]  # retrieved from the extra server
    assert crm["calls"] == ["acct-7"]  # ... and called, with the token from the environment
    assert f"Bearer {TOKEN}" in crm["authorization"]
    steps = bound_names(model)
    assert len(steps) == 2 and all("get_contract" in step for step in steps)  # a base tool
    for conversation in model.seen:
        assert isinstance(conversation[0], SystemMessage)
        assert conversation[0].content == "Be brief."
    # at most top_k; in a catalog mixing the engine's tools and the CRM's, only hits of at least
    # a quarter of the best are bound (MIXED_CATALOG_FLOOR): the engine's weak matches are not
    assert out["selected_tools"] == ["crm_lookup_customer"]


async def test_arguments_win_over_the_configuration_and_a_path_reads_the_environment(
    engine: ReferenceEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(f'base_url = "{engine.url}"\nprofile = "execute"\ntop_k = 2\n')
    ask = {"messages": [("user", "recommend a scenario for restock inventory")]}

    async def selected(**options: Any) -> list[str]:
        graph = await create_governed_agent(ScriptedChatModel(replies=["ok"]), **options)
        try:
            out = await graph.ainvoke(ask, _cfg("t"))
        finally:
            await aclose_governed_agent(graph)
        return list(out["selected_tools"])

    assert len(await selected(config=str(path))) == 2
    assert len(await selected(config=str(path), top_k=4)) == 4  # the argument wins
    monkeypatch.setenv("ALGENTA_TOP_K", "1")
    assert len(await selected(config=path)) == 1  # the variable wins over the file
    with pytest.raises(TypeError, match="AgentConfig or the path"):
        await create_governed_agent(config={"top_k": 3})  # type: ignore[arg-type]


async def test_an_unreachable_extra_server_is_left_out_with_a_warning_naming_its_url(
    engine: ReferenceEngine, caplog: pytest.LogCaptureFixture
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    config = parse_config(
        {
            "base_url": engine.url,
            "profile": "execute",
            "extra_servers": {"crm": {"transport": "streamable_http", "url": dead}},
            # a base tool of the server that is down is not bound (a warning, not a failure)
            "always_include": ["get_contract", "crm_lookup_customer"],
        }
    )
    with caplog.at_level(logging.WARNING, logger="algenta_graph.graph.connecting"):
        graph = await create_governed_agent(ScriptedChatModel(replies=["ok"]), config=config)
    try:
        out = await graph.ainvoke({"messages": [("user", "recommend a scenario")]})
    finally:
        await aclose_governed_agent(graph)
    assert out["selected_tools"][0] == "recommend"  # the engine's tools are served
    [warning] = [r.getMessage() for r in caplog.records if "is unreachable" in r.getMessage()]
    assert f"'crm' at {dead} is unreachable" in warning
    [lost] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("always_")]
    assert "'crm_lookup_customer' is not bound" in lost and dead in lost
    # a base tool that is in no catalog at all is still an error
    with pytest.raises(ValueError, match="no tool 'no_such_tool'"):
        await create_governed_agent(
            config=config.model_copy(
                update={"extra_servers": {}, "always_include": ["no_such_tool"]}
            )
        )
    # the engine itself unreachable is still an error
    with pytest.raises(EngineConnectionError, match=re.escape(dead)):
        await create_governed_agent(config=parse_config({"base_url": dead}))


class ThreadRecordingEmbeddings(Embeddings):
    """An offline embedding model that records the thread of every call."""

    threads: ClassVar[list[tuple[str, int]]] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.threads.append(("documents", threading.get_ident()))
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.threads.append(("query", threading.get_ident()))
        return self._vector(text)

    @staticmethod
    def _vector(text: str) -> list[float]:
        return [1.0 + text.count(c) for c in "aeiou"]


async def test_embeddings_from_an_import_path_run_off_the_event_loop_and_are_made_once(
    engine: ReferenceEngine,
) -> None:
    ThreadRecordingEmbeddings.threads.clear()
    config = parse_config(
        {
            "base_url": engine.url,
            "profile": "execute",
            "embeddings": f"{__name__}:ThreadRecordingEmbeddings",
        }
    )
    loop_thread = threading.get_ident()
    graphs = [
        await create_governed_agent(ScriptedChatModel(replies=["ok"]), config=config)
        for _ in range(2)
    ]
    try:
        await graphs[0].ainvoke({"messages": [("user", "recommend a scenario")]})
    finally:
        for graph in graphs:
            await aclose_governed_agent(graph)
    kinds = [kind for kind, _ in ThreadRecordingEmbeddings.threads]
    assert kinds.count("documents") == 2 and "query" in kinds  # the catalog twice, a query
    assert all(thread != loop_thread for _, thread in ThreadRecordingEmbeddings.threads)
    from algenta_graph.config import resolve_config

    first = resolve_config(config).embeddings
    assert first is resolve_config(config).embeddings  # one model per import path


async def test_the_configured_usage_signal_learns_into_the_graphs_store(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    config = parse_config({"base_url": engine.url, "profile": "execute", "usage": {}})
    with pytest.raises(ValueError, match="pass store="):
        await create_governed_agent(config=config, checkpointer=tmp_path / "cp.sqlite")
    store = InMemoryStore()
    model = ScriptedChatModel(replies=[_call("get_contract", {}, "c1"), "here it is", "again"])
    graph = await create_governed_agent(
        model, config=config, checkpointer=tmp_path / "cp.sqlite", store=store
    )
    try:
        await graph.ainvoke({"messages": [("user", "show me the contract")]}, _cfg("t"))
        learned = {i.key for i in store.search((*DEFAULT_NAMESPACE, "execute"))}
        assert learned == {"get_contract"}
        out = await graph.ainvoke({"messages": [("user", "the contract again")]}, _cfg("t"))
        assert "get_contract" in out["selected_tools"]
    finally:
        await aclose_governed_agent(graph)


async def test_a_usage_signal_without_any_store_is_logged_and_retrieval_goes_on(
    engine: ReferenceEngine, caplog: pytest.LogCaptureFixture
) -> None:
    config = parse_config({"base_url": engine.url, "profile": "execute", "usage": {}})
    model = ScriptedChatModel(replies=[_call("get_contract", {}, "c1"), "ok", "ok"])
    graph = await create_governed_agent(model, config=config)  # no checkpointer, no store
    try:
        with caplog.at_level(logging.WARNING):
            out = await graph.ainvoke({"messages": [("user", "show me the contract")]})
            await graph.ainvoke({"messages": [("user", "show me the contract")]})
    finally:
        await aclose_governed_agent(graph)
    assert out["selected_tools"]
    warnings = [r.getMessage() for r in caplog.records if "usage signal" in r.getMessage()]
    assert len(warnings) == 1 and "has no store" in warnings[0]


# ---------------------------------------------------------------------------------------------
# the served factory, in-process


async def test_the_served_factory_builds_from_the_configuration_file(
    engine: ReferenceEngine, crm: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from algenta_graph.serving.server import aclose_cached, make_graph, startup_check

    path = tmp_path / "agent.toml"
    path.write_text(
        f'base_url = "{engine.url}"\nprofile = "execute"\ntop_k = 2\n'
        'always_include = ["get_contract"]\n'
        f'[extra_servers.crm]\ntransport = "streamable_http"\nurl = "{crm["url"]}"\n'
        'headers = { Authorization = { env = "CRM_TOKEN", prefix = "Bearer " } }\n'
    )
    monkeypatch.setenv("ALGENTA_CONFIG", str(path))
    for name in ("ALGENTA_TOP_K", "ALGENTA_PROFILE", "ALGENTA_BASE_URL", "ALGENTA_MODEL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="CRM_TOKEN is not set"):
        startup_check()
    monkeypatch.setenv("CRM_TOKEN", TOKEN)
    assert startup_check().top_k == 2
    try:
        graph = await make_graph()
        assert graph is await make_graph()
        assert graph.checkpointer is None and graph.store is None  # the server supplies both
        out = await graph.ainvoke(
            {"messages": [("user", "look up crm customer account_id=acct-9")]}
        )
        assert crm["calls"] == ["acct-9"]  # the offline demo model called the extra tool
        assert "crm_lookup_customer" in out["selected_tools"] and len(out["selected_tools"]) <= 2
    finally:
        await aclose_cached()


def test_startup_check_warns_about_an_unreachable_extra_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from algenta_graph.serving.server import startup_check

    dead = f"http://127.0.0.1:{free_port()}/mcp"
    path = tmp_path / "agent.toml"
    path.write_text(f'[extra_servers.crm]\ntransport = "sse"\nurl = "{dead}"\n')
    monkeypatch.setenv("ALGENTA_CONFIG", str(path))
    startup_check()
    err = capsys.readouterr().err
    assert f"warning: {path}: extra_servers.crm: unreachable at {dead}" in err


async def test_the_configured_escalation_settings_reach_the_denial_handlers(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """``[escalation]`` is what the handlers ask with: the gate's decisions, a required reason."""
    config = parse_config(
        {
            "base_url": engine.url,
            "profile": "execute",
            "on_denial": {"confidence": "escalate"},
            "escalation": {
                "require_reason": True,
                "allowed_decisions": {"confidence": ["approve", "reject"]},
                "expires_after": {"confidence": "PT4H"},
            },
        }
    )
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
    model = ScriptedChatModel(replies=[execute(decision, webhook.url, "c1"), "done"])
    graph = await create_governed_agent(model, config=config, checkpointer=tmp_path / "cp.sqlite")
    try:
        out = await graph.ainvoke({"messages": [("user", "execute it")]}, _cfg("esc"))
        [asked] = out["__interrupt__"]
        assert asked.value["review_configs"][0]["allowed_decisions"] == ["approve", "reject"]
        assert asked.value["escalations"][0]["expires_at"]  # PT4H from the denial
        # a reason is required: refused (by the response_schema) before it is saved
        with pytest.raises(ValidationError, match=r"approve\.message\n  Field required"):
            await graph.ainvoke(
                Command(resume={"decisions": [{"type": "approve"}], "operator": "ana"}),
                _cfg("esc"),
            )
        assert (await graph.aget_state(_cfg("esc"))).interrupts  # the escalation still waits
    finally:
        await aclose_governed_agent(graph)
    assert executions(engine, decision) == []
