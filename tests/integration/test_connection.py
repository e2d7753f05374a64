"""EngineConnection against real MCP servers over real HTTP.

Two servers: ``tests/support/wire_server.py`` (a FastMCP fixture that answers ``execute_decision``
in every wire form and records every JSON-RPC request it receives) and the reference engine
(``algenta_graph.engine``), also as an ``algenta-graph engine`` subprocess for SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import ToolMessage
from langchain_mcp_adapters.interceptors import MCPToolCallRequest
from mcp.types import CallToolResult, TextContent
from wire_server import DENIAL_FORMS, HINTS, RECEIPT_FORMS, WireServer

from algenta_graph._net import free_port
from algenta_graph.connection.engine import DEFAULT_BASE_URL, EngineConnection, resolve_base_url
from algenta_graph.connection.outcomes import (
    KNOWN_GATES,
    ExecutionDenial,
    ExecutionFailure,
    ExecutionReceipt,
    parse_execution_outcome,
)
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.errors import (
    AlgentaGraphError,
    EngineAuthError,
    EngineConnectionError,
    EngineTimeoutError,
    OperatorCredentialMissing,
    ToolCallLostError,
    ToolNotInProfileError,
)
from algenta_graph.governance.contract import resolve_profile
from algenta_graph.governance.scrub import GovernanceInterceptor, scrub_arguments, scrub_schema

SECRET = "sk-connection-test-secret-0123456789"
FLAG_KEYS = frozenset({"force", "overridesafety"})


def flag_paths(value: Any, path: str = "$") -> list[str]:
    """Every key spelling a flag (case, ``_``/``-``/space blind), at any depth, in JSON strings."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            normal = "".join(c for c in str(key).casefold() if c.isalnum())
            if normal in FLAG_KEYS:
                found.append(f"{path}.{key}")
            found += flag_paths(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += flag_paths(item, f"{path}[{i}]")
    elif isinstance(value, str) and value.strip()[:1] in ("{", "[", '"'):
        with contextlib.suppress(ValueError):
            found += flag_paths(json.loads(value), f"{path}<json>")
    return found


@pytest.fixture
def wire() -> Iterator[WireServer]:
    with WireServer() as server:
        yield server


@pytest.fixture
async def conn(wire: WireServer) -> AsyncIterator[EngineConnection]:
    async with EngineConnection(wire.url, profile="execute", timeout=10, call_timeout=10) as c:
        yield c


# --------------------------------------------------------------------------- catalog


@pytest.mark.parametrize("profile", ["observe", "govern", "execute", "full"])
async def test_the_catalog_is_the_profile(wire: WireServer, profile: str) -> None:
    async with EngineConnection(wire.url, profile=profile) as c:
        names = {t.name for t in c.tools}
        advertised = c.advertised_tool_names
        assert "delete_connector" in advertised
        expected = {n for n in advertised if resolve_profile(profile).allows(n)}
        assert names == expected
        assert all(c.is_algenta_tool(n) for n in names)
        assert c.profile.name == profile
    if profile == "observe":
        assert names == {"get_contract", "query_data", "recommend"}  # simulate not served


async def test_the_default_profile_is_observe(wire: WireServer) -> None:
    async with EngineConnection(wire.url) as c:
        assert c.profile.name == "observe"
        assert c.get_tool("execute_decision") is None


async def test_no_flag_survives_in_any_advertised_schema(conn: EngineConnection) -> None:
    for tool in conn.tools:
        advertised = tool.args_schema
        assert isinstance(advertised, dict)
        assert flag_paths(advertised) == [], (tool.name, flag_paths(advertised))
        for required in _all_required(advertised):
            assert not flag_paths({r: 1 for r in required}), (tool.name, required)
    execute = conn.get_tool("execute_decision")
    assert execute is not None
    schema: Any = execute.args_schema
    # everything else stays: top-level fields, the nested $defs model without its flags
    assert set(schema["properties"]) == {
        "decision_id",
        "webhook_url",
        "timeout_seconds",
        "metadata",
        "options",
    }
    assert set(schema["required"]) == {"decision_id", "webhook_url"}
    assert set(schema["$defs"]["ExecuteOptions"]["properties"]) == {"note"}
    plan: Any = conn.get_tool("plan_decision")
    assert plan is not None
    assert set(plan.args_schema["properties"]) == {"spec"}
    assert plan.args_schema["required"] == ["spec"]  # "Force" was required; it is gone
    assert set(plan.args_schema["$defs"]["PlanSpec"]["properties"]) == {"action", "limits"}


def _all_required(node: Any) -> Iterator[list[Any]]:
    if isinstance(node, dict):
        if isinstance(node.get("required"), list):
            yield node["required"]
        for item in node.values():
            yield from _all_required(item)
    elif isinstance(node, list):
        for item in node:
            yield from _all_required(item)


def test_scrub_schema_handles_nesting_defs_and_dependencies() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "Force": {"type": "boolean"},
            "opts": {
                "type": "object",
                "properties": {"override-safety": {"type": "boolean"}, "x": {"type": "string"}},
                "required": ["override-safety", "x"],
            },
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
        },
        "required": ["Force", "opts"],
        "dependentRequired": {"opts": ["OVERRIDE_SAFETY", "items"], "force": ["opts"]},
        "$defs": {"Item": {"properties": {"overrideSafety": {}, "keep": {}}, "required": ["keep"]}},
    }
    out = scrub_schema(schema)
    assert flag_paths(out) == []
    assert out["required"] == ["opts"]
    assert out["properties"]["opts"]["required"] == ["x"]
    assert out["dependentRequired"] == {"opts": ["items"]}
    assert out["$defs"]["Item"] == {"properties": {"keep": {}}, "required": ["keep"]}
    assert schema["properties"]["Force"] == {"type": "boolean"}  # the input is not modified


# --------------------------------------------------------------------------- the guard


async def test_a_tool_outside_the_profile_is_refused_and_never_sent(wire: WireServer) -> None:
    async with EngineConnection(wire.url, profile="observe") as c:
        before = len(wire.methods())
        for name in ("execute_decision", "delete_connector", "no_such_tool", "Execute_Decision"):
            with pytest.raises(ToolNotInProfileError) as info:
                await c.call_tool(name, {"decision_id": "d", "webhook_url": "u"}, tool_call_id="x")
            assert info.value.tool == name and info.value.profile == "observe"
        assert wire.methods()[before:] == []  # not a single request reached the server
        ok = await c.call_tool("get_contract", {}, tool_call_id="y")
        assert ok.status == "success"
        assert [r["tool"] for r in wire.methods("tools/call")] == ["get_contract"]


async def test_the_interceptor_refuses_before_the_handler_and_scrubs_nothing_else() -> None:
    handled: list[MCPToolCallRequest] = []

    async def handler(request: MCPToolCallRequest) -> CallToolResult:
        handled.append(request)
        return CallToolResult(content=[TextContent(type="text", text="{}")])

    guard = GovernanceInterceptor(resolve_profile("observe"))
    refused = MCPToolCallRequest(name="execute_decision", args={}, server_name="algenta")
    with pytest.raises(ToolNotInProfileError):
        await guard(refused, handler)
    assert handled == []
    args = {"dataset": "orders", "FORCE": 1, "filters": {"a": [1, {"b": None}]}}
    request = MCPToolCallRequest(
        name="query_data", args=args, server_name="algenta", headers={"X": "1"}
    )
    await guard(request, handler)
    (sent,) = handled
    assert sent.args == {"dataset": "orders", "filters": {"a": [1, {"b": None}]}}
    assert (sent.name, sent.server_name, sent.headers) == ("query_data", "algenta", {"X": "1"})
    assert request.args == args  # the original request is untouched


SMUGGLING: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    # (label, extra arguments the model sends, what the server must receive instead)
    ("force", {"force": True}, {}),
    ("Force", {"Force": True}, {}),
    ("FORCE-str", {"FORCE": "true"}, {}),
    ("override_safety", {"override_safety": True}, {}),
    ("overrideSafety", {"overrideSafety": 1}, {}),
    ("override-safety", {"override-safety": True}, {}),
    ("OVERRIDE_SAFETY", {"OVERRIDE_SAFETY": True}, {}),
    ("override safety", {"override safety": True}, {}),
    ("fullwidth", {"\uff46orce": True}, {}),
    ("zero-width", {"force\u200b": True}, {}),
    (
        "metadata",
        {"metadata": {"force": True, "trace": "t-1", "override_safety": True}},
        {"metadata": {"trace": "t-1"}},
    ),
    (
        "metadata-deep",
        {"metadata": {"a": {"b": [{"overrideSafety": True, "keep": 1}]}}},
        {"metadata": {"a": {"b": [{"keep": 1}]}}},
    ),
    (
        "metadata-json-string",
        {"metadata": {"note": json.dumps({"force": True, "why": "x"})}},
        {"metadata": {"note": json.dumps({"why": "x"})}},
    ),
    (
        "metadata-double-json",
        {"metadata": {"note": json.dumps(json.dumps({"Override-Safety": True, "k": 2}))}},
        {"metadata": {"note": json.dumps(json.dumps({"k": 2}))}},
    ),
    (
        "options-model",
        {"options": {"note": "n", "force": True, "override_safety": True}},
        {"options": {"note": "n"}},
    ),
    (
        "untouched-json-string",
        {"metadata": {"note": '{"a":  1,"b":[2]}', "text": "force override_safety"}},
        {"metadata": {"note": '{"a":  1,"b":[2]}', "text": "force override_safety"}},
    ),
    ("all-at-once", {"force": True, "metadata": {"x": '{"force": 1}'}}, {"metadata": {"x": "{}"}}),
]


@pytest.mark.parametrize(("label", "extra", "expected"), SMUGGLING, ids=[s[0] for s in SMUGGLING])
async def test_each_smuggling_variant_reaches_the_server_clean(
    wire: WireServer,
    conn: EngineConnection,
    label: str,
    extra: dict[str, Any],
    expected: dict[str, Any],
) -> None:
    base = {"decision_id": "mcp_error:confidence", "webhook_url": "http://hooks.test/x"}
    message = await conn.call_tool("execute_decision", {**base, **extra}, tool_call_id=label)
    (received,) = wire.tool_calls("execute_decision")
    assert received["arguments"] == {**base, **expected}
    assert flag_paths(received["arguments"]) == []
    # the flags never took effect: the server still denied
    outcome = parse_execution_outcome(message)
    assert isinstance(outcome, ExecutionDenial) and outcome.gate == "confidence"


def test_scrub_arguments_changes_nothing_without_flags() -> None:
    args = {"a": [1, "{not json", {"b": (1, 2)}], "s": '{"x":1}', "n": None, "f": 1.5}
    out = scrub_arguments(args)
    assert out == args
    assert out["s"] is args["s"] and out["a"] is args["a"]


FLAG_SPELLINGS = st.sampled_from(
    ["force", "Force", "FORCE", "override_safety", "overrideSafety", "Override-Safety", "o_f"]
)
PLAIN_KEYS = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)
json_leaves = st.none() | st.booleans() | st.integers() | st.text(max_size=8)


def _nested(keys: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        json_leaves,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(keys, inner, max_size=4)
            | st.dictionaries(keys, inner, max_size=3).map(json.dumps)
        ),
        max_leaves=20,
    )


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(PLAIN_KEYS | FLAG_SPELLINGS, _nested(PLAIN_KEYS | FLAG_SPELLINGS)))
def test_scrubbed_arguments_never_hold_a_flag_and_scrubbing_twice_changes_nothing(
    args: dict[str, Any],
) -> None:
    once = scrub_arguments(args)
    assert flag_paths(once) == []
    assert scrub_arguments(once) == once


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(PLAIN_KEYS, _nested(PLAIN_KEYS)))
def test_arguments_without_flags_pass_unchanged(args: dict[str, Any]) -> None:
    assert scrub_arguments(args) == args


# --------------------------------------------------------------------------- wire forms


@pytest.mark.parametrize("form", DENIAL_FORMS)
@pytest.mark.parametrize("gate", [*KNOWN_GATES, "approval_window"])
async def test_every_denial_wire_form_parses_to_its_gate(
    conn: EngineConnection, form: str, gate: str
) -> None:
    message = await conn.call_tool(
        "execute_decision",
        {"decision_id": f"{form}:{gate}", "webhook_url": "http://hooks.test/x"},
        tool_call_id="c",
    )
    assert isinstance(message, ToolMessage) and message.tool_call_id == "c"
    outcome = parse_execution_outcome(message)
    assert isinstance(outcome, ExecutionDenial), (form, message)
    assert outcome.gate == gate
    assert outcome.code == f"execution_blocked_{gate}"
    assert outcome.message == f"blocked by the {gate} gate"
    assert outcome.override_hint == HINTS.get(gate, "ask an operator")
    assert message.status == ("error" if form.startswith("mcp_error") else "success")


@pytest.mark.parametrize("form", RECEIPT_FORMS)
async def test_every_receipt_wire_form_parses_to_a_receipt(
    conn: EngineConnection, form: str
) -> None:
    message = await conn.call_tool(
        "execute_decision", {"decision_id": form, "webhook_url": "http://h/x"}, tool_call_id="c"
    )
    outcome = parse_execution_outcome(message)
    assert isinstance(outcome, ExecutionReceipt), message
    assert (outcome.decision_id, outcome.safety_overridden) == (form, False)


async def test_an_unrecognised_answer_is_a_failure(conn: EngineConnection) -> None:
    message = await conn.call_tool(
        "execute_decision", {"decision_id": "junk", "webhook_url": "http://h/x"}, tool_call_id="c"
    )
    outcome = parse_execution_outcome(message)
    assert isinstance(outcome, ExecutionFailure) and "ok, probably" in outcome.raw


@pytest.mark.parametrize("form", ["mcp_error", "sdk", "structured_wrapped"])
async def test_the_operator_path_sends_the_flags_and_returns_a_parsed_outcome(
    wire: WireServer, form: str
) -> None:
    # the operator path works whatever the profile: it is not a model tool
    async with EngineConnection(wire.url, profile="observe", operator_key_is_agent_key=True) as c:
        assert c.get_tool("execute_decision") is None
        denied = await c.execute_as_operator(f"{form}:idempotency", "http://h/x")
        forced = await c.execute_as_operator(
            f"{form}:idempotency",
            "http://h/x",
            force=True,
            timeout_seconds=3,
            metadata={"algenta_graph": {"operator": "ana"}},
        )
    assert isinstance(denied, ExecutionDenial) and denied.gate == "idempotency"
    assert isinstance(forced, ExecutionReceipt) and forced.safety_overridden
    sent = [c["arguments"] for c in wire.tool_calls("execute_decision")]
    assert sent == [
        {
            "decision_id": f"{form}:idempotency",
            "webhook_url": "http://h/x",
            "force": False,
            "override_safety": False,
        },
        {
            "decision_id": f"{form}:idempotency",
            "webhook_url": "http://h/x",
            "force": True,
            "override_safety": False,
            "timeout_seconds": 3,
            "metadata": {"algenta_graph": {"operator": "ana"}},
        },
    ]


async def _override(c: EngineConnection, flag: str) -> Any:
    """The operator path with one override flag set."""
    return await c.execute_as_operator(
        "receipt_text", "http://h/x", force=flag == "force", override_safety=flag != "force"
    )


@pytest.mark.parametrize("flag", ["force", "override_safety"])
async def test_an_override_without_an_operator_credential_is_refused_and_never_sent(
    wire: WireServer, flag: str
) -> None:
    async with EngineConnection(wire.url, api_key=SECRET, profile="execute") as c:
        with pytest.raises(OperatorCredentialMissing) as info:
            await _override(c, flag)
        assert wire.tool_calls("execute_decision") == []  # nothing was sent
        # not an override: the operator path may still send it
        assert isinstance(
            await c.execute_as_operator("receipt_text", "http://h/x"), ExecutionReceipt
        )
    text = str(info.value)
    assert isinstance(info.value, PermissionError) and "was not sent" in text
    assert "operator_api_key=" in text and "ALGENTA_OPERATOR_API_KEY" in text
    assert "operator_key_is_agent_key=True" in text and SECRET not in text
    # told explicitly that the one key is also the operator credential: sent with that key
    async with EngineConnection(
        wire.url, api_key=SECRET, profile="execute", operator_key_is_agent_key=True
    ) as c:
        forced = await _override(c, flag)
    assert isinstance(forced, ExecutionReceipt)
    [_, sent] = wire.tool_calls("execute_decision")
    assert sent["arguments"][flag] is True
    # an operator credential of its own: sent over its own session, with its key
    operator = WireServer(api_key="op-key").start()
    try:
        async with EngineConnection(
            operator.url, api_key="op-key", operator_api_key="op-key", profile="execute"
        ) as c:
            assert "operator token" in repr(c)
            await c.call_tool("get_contract", {}, tool_call_id="g")
            await _override(c, flag)
        [model] = operator.tool_calls("get_contract")
        [call] = operator.tool_calls("execute_decision")
        assert call["session"] and call["session"] != model["session"]  # its own session
    finally:
        operator.stop()


async def test_the_operator_path_rejects_missing_ids(conn: EngineConnection) -> None:
    with pytest.raises(ValueError, match="decision_id"):
        await conn.execute_as_operator("", "http://h/x")
    with pytest.raises(ValueError, match="webhook_url"):
        await conn.execute_as_operator("d", None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- extra servers


async def test_extra_servers_join_and_never_borrow_algentas_trust(wire: WireServer) -> None:
    with WireServer(name="shadow") as shadow:
        extra = {"shadow": {"transport": "streamable_http", "url": shadow.url}}
        async with EngineConnection(wire.url, profile="execute", extra_servers=extra) as c:
            names = [t.name for t in c.tools]
            assert len(names) == len(set(names))
            # a name the engine advertises is prefixed, whether or not the profile admits it
            for taken in ("execute_decision", "get_contract", "delete_connector", "slow"):
                assert f"shadow_{taken}" in names
                assert not c.is_algenta_tool(f"shadow_{taken}")
            assert c.is_algenta_tool("execute_decision")
            shadow_exec = c.get_tool("shadow_execute_decision")
            assert shadow_exec is not None and shadow_exec.args_schema is not None
            assert flag_paths(shadow_exec.args_schema) == []
            # calling the shadow tool reaches the shadow server, scrubbed, never the engine
            await c.call_tool(
                "shadow_execute_decision",
                {"decision_id": "receipt_text", "webhook_url": "u", "force": True},
                tool_call_id="s",
            )
            # an extra server's tools are not under the Algenta profile
            await c.call_tool("shadow_delete_connector", {"connector_id": "c1"}, tool_call_id="d")
        assert wire.tool_calls() == []
        assert [(r["tool"], r["arguments"]) for r in shadow.tool_calls()] == [
            ("execute_decision", {"decision_id": "receipt_text", "webhook_url": "u"}),
            ("delete_connector", {"connector_id": "c1"}),
        ]


async def test_an_extra_server_without_collisions_keeps_its_names(wire: WireServer) -> None:
    from mcp.server.fastmcp import FastMCP

    from algenta_graph._serve import BackgroundServer

    app = FastMCP("weather", log_level="WARNING")

    @app.tool()
    def forecast(city: str) -> str:
        """Weather for a city."""
        return f"sunny in {city}"

    @app.tool()
    def search_tools(query: str) -> str:
        """Clashes with the graph's own gateway tool."""
        return query

    server = BackgroundServer(app.streamable_http_app(), name="weather")
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/mcp"
        extra = {"weather": {"transport": "streamable_http", "url": url}}
        async with EngineConnection(wire.url, extra_servers=extra) as c:
            assert c.get_tool("forecast") is not None and not c.is_algenta_tool("forecast")
            assert c.get_tool("weather_search_tools") is not None
            assert c.get_tool("search_tools") is None
            answer = await c.call_tool("forecast", {"city": "Lyon"}, tool_call_id="w")
            assert "sunny in Lyon" in str(answer.content)
    finally:
        server.stop()


def test_bad_extra_servers_are_rejected() -> None:
    with pytest.raises(ValueError, match="reserved"):
        EngineConnection("http://x/mcp", extra_servers={"algenta": {"transport": "stdio"}})
    with pytest.raises(ValueError, match="transport"):
        EngineConnection("http://x/mcp", extra_servers={"w": {"url": "http://y"}})
    with pytest.raises(ValueError, match="valid profiles"):
        EngineConnection("http://x/mcp", profile="admin")


# --------------------------------------------------------------------------- URL and token


def test_url_resolution_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ALGENTA_BASE_URL", raising=False)
    assert resolve_base_url() == DEFAULT_BASE_URL == "http://localhost:8000/mcp"
    monkeypatch.setenv("ALGENTA_BASE_URL", "http://env:1/mcp")
    assert EngineConnection().url == "http://env:1/mcp"
    assert EngineConnection("http://arg:2/mcp").url == "http://arg:2/mcp"


async def test_the_token_goes_as_bearer_from_the_argument_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with WireServer(api_key=SECRET) as server:
        monkeypatch.setenv("ALGENTA_API_KEY", SECRET)
        async with EngineConnection(server.url) as c:
            await c.call_tool("get_contract", {}, tool_call_id="1")
            assert SECRET not in repr(c)
        monkeypatch.delenv("ALGENTA_API_KEY")
        async with EngineConnection(server.url, api_key=SECRET) as c:
            await c.call_tool("get_contract", {}, tool_call_id="2")
        assert server.methods() and all(r["authorised"] for r in server.methods())


@pytest.mark.parametrize("key", [None, "sk-wrong-key-9876543210"])
async def test_a_rejected_token_is_an_auth_error_that_never_shows_the_token(
    monkeypatch: pytest.MonkeyPatch, key: str | None
) -> None:
    monkeypatch.delenv("ALGENTA_API_KEY", raising=False)
    with WireServer(api_key=SECRET) as server:
        conn = EngineConnection(server.url, api_key=key, timeout=5)
        with pytest.raises(EngineAuthError) as info:
            await conn.open()
        await conn.aclose()
    text = str(info.value)
    assert "401" in text and "token" in text and server.url in text
    assert info.value.url == server.url
    assert SECRET not in text and (key is None or key not in text)
    assert "ExceptionGroup" not in text and "TaskGroup" not in text


async def test_a_rejected_token_is_an_auth_error_when_the_connection_opens(
    start_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the reference engine asks for the token on every MCP request: open() itself fails
    monkeypatch.delenv("ALGENTA_API_KEY", raising=False)
    engine = start_engine(api_key=SECRET)
    conn = EngineConnection(engine.url, api_key="sk-stale-token-000111")
    with pytest.raises(EngineAuthError) as info:
        await conn.open()
    await conn.aclose()
    assert "sk-stale-token-000111" not in str(info.value)
    assert engine.url in str(info.value)
    async with EngineConnection(engine.url, api_key=SECRET) as c:
        assert (await c.call_tool("get_contract", {}, tool_call_id="2")).status == "success"


# --------------------------------------------------------------------------- failures


async def test_an_unreachable_engine_names_the_url_and_what_to_check() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    conn = EngineConnection(url, api_key=SECRET, timeout=5)
    with pytest.raises(EngineConnectionError) as info:
        await conn.open()
    await conn.aclose()
    text = str(info.value)
    assert info.value.url == url and url in text
    assert "URL" in text and "running" in text and "token" in text
    assert SECRET not in text and "ExceptionGroup" not in text
    assert not isinstance(info.value, EngineAuthError | EngineTimeoutError)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections and never answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


async def test_an_engine_that_never_answers_times_out_naming_the_url(silent_port: int) -> None:
    url = f"http://127.0.0.1:{silent_port}/mcp"
    conn = EngineConnection(url, timeout=0.5)
    with pytest.raises(EngineTimeoutError) as info:
        await conn.open()
    await conn.aclose()
    assert url in str(info.value) and "timed out" in str(info.value)
    assert "0.5 s" in str(info.value)


class _FaultHandler(http.server.BaseHTTPRequestHandler):
    mode = "500"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.mode == "500":
            body, status, kind = b"internal error", 500, "text/plain"
        else:  # HTTP 200 application/json, but not JSON-RPC
            body, status, kind = b"<html>not json</html>", 200, "application/json"
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_DELETE = do_POST

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def fault_server(mode: str, port: int | None = None) -> Iterator[str]:
    """A plain HTTP server on ``port`` that answers every request wrongly (``mode``)."""
    handler = type("Handler", (_FaultHandler,), {"mode": mode})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port or free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.parametrize(
    ("mode", "needle"), [("500", "HTTP 500"), ("malformed", "not an MCP JSON-RPC message")]
)
async def test_a_server_that_is_not_an_mcp_endpoint_is_one_clear_error(
    mode: str, needle: str
) -> None:
    with fault_server(mode) as url:
        conn = EngineConnection(url, api_key=SECRET, timeout=5)
        with pytest.raises(EngineConnectionError) as info:
            await conn.open()
        await conn.aclose()
    text = str(info.value)
    assert needle in text and url in text and info.value.url == url
    assert not isinstance(info.value, EngineTimeoutError | EngineAuthError)
    assert SECRET not in text and "ExceptionGroup" not in text and "Traceback" not in text


@pytest.mark.parametrize(
    ("mode", "needle"), [("500", "HTTP 500"), ("malformed", "not an MCP JSON-RPC message")]
)
async def test_a_fault_mid_session_fails_that_call_and_the_next_call_reconnects(
    mode: str, needle: str
) -> None:
    wire = WireServer().start()
    try:
        async with EngineConnection(wire.url, timeout=5, call_timeout=20) as c:
            await c.call_tool("get_contract", {}, tool_call_id="1")
            await asyncio.to_thread(wire.stop)
            with fault_server(mode, wire.port), pytest.raises(EngineConnectionError) as info:
                await c.call_tool("get_contract", {}, tool_call_id="2")
            # the failure came with the answer, not from waiting out call_timeout
            assert not isinstance(info.value, EngineTimeoutError)
            assert needle in str(info.value) and wire.url in str(info.value)
            await asyncio.to_thread(wire.start)
            assert (await c.call_tool("get_contract", {}, tool_call_id="3")).status == "success"
            assert c.sessions_opened == 2
    finally:
        wire.stop()


async def test_a_slow_call_times_out_naming_the_tool_and_the_session_survives(
    wire: WireServer,
) -> None:
    async with EngineConnection(wire.url, profile="full", call_timeout=0.5) as c:
        with pytest.raises(EngineTimeoutError) as info:
            await c.call_tool("slow", {"seconds": 3}, tool_call_id="s")
        text = str(info.value)
        assert "'slow'" in text and "0.5 s" in text and wire.url in text
        # it was sent and may still run: nothing invites sending it again
        assert "may have run" in text and "do not call it again" in text
        assert "raise" not in text and "if it is just slow" not in text
        fast = await c.call_tool("slow", {"seconds": 0}, tool_call_id="f")
        assert fast.status == "success"
        assert c.sessions_opened == 1
    assert len(wire.methods("initialize")) == 1


async def test_calls_on_a_closed_connection_fail_clearly(wire: WireServer) -> None:
    c = EngineConnection(wire.url)
    with pytest.raises(AlgentaGraphError, match="not open"):
        await c.call_tool("get_contract", {}, tool_call_id="x")
    async with c:
        pass
    with pytest.raises(AlgentaGraphError, match="not open"):
        await c.call_tool("get_contract", {}, tool_call_id="x")
    await c.aclose()  # idempotent


# --------------------------------------------------------------------------- one session


async def test_one_session_serves_every_call(wire: WireServer) -> None:
    async with EngineConnection(wire.url, profile="execute") as c:
        for i in range(20):
            await c.call_tool("get_contract", {}, tool_call_id=f"s{i}")
        await asyncio.gather(
            *(
                c.call_tool("query_data", {"dataset": f"d{i}"}, tool_call_id=f"p{i}")
                for i in range(10)
            )
        )
        await c.execute_as_operator("receipt_text", "http://h/x")
        await c.get_decision("d1")
        assert c.sessions_opened == 1
    assert len(wire.methods("initialize")) == 1
    calls = wire.methods("tools/call")
    assert len(calls) == 32
    assert len({r["session"] for r in calls}) == 1 and calls[0]["session"]


async def test_closing_the_connection_fails_a_call_in_flight_clearly(wire: WireServer) -> None:
    c = await EngineConnection(wire.url, profile="full", call_timeout=60).open()
    call = asyncio.ensure_future(c.call_tool("slow", {"seconds": 30}, tool_call_id="s"))
    for _ in range(600):  # wait until the request is at the server
        if wire.tool_calls("slow"):
            break
        await asyncio.sleep(0.02)
    await c.aclose()
    with pytest.raises(EngineConnectionError) as info:
        await call
    assert not isinstance(info.value, EngineTimeoutError)
    assert wire.url in str(info.value)


async def test_concurrent_calls_after_a_restart_share_one_new_session(wire: WireServer) -> None:
    async with EngineConnection(wire.url, timeout=5) as c:
        await c.call_tool("get_contract", {}, tool_call_id="0")
        await asyncio.to_thread(wire.stop)
        with pytest.raises(EngineConnectionError):
            await c.call_tool("get_contract", {}, tool_call_id="down")
        await asyncio.to_thread(wire.start)
        answers = await asyncio.gather(
            *(c.call_tool("get_contract", {}, tool_call_id=f"c{i}") for i in range(8))
        )
        assert all(a.status == "success" for a in answers)
        assert c.sessions_opened == 2
    assert len(wire.methods("initialize")) == 2


async def test_get_decision_reads_outside_the_profile(wire: WireServer) -> None:
    async with EngineConnection(wire.url, profile="observe") as c:
        assert c.get_tool("get_decision") is None
        record = await c.get_decision("dec_9")
    assert record == {"decision": {"decision_id": "dec_9"}, "executions": []}


# --------------------------------------------------------------------------- reconnect


async def test_a_stopped_engine_fails_the_call_and_the_next_call_reconnects(
    wire: WireServer,
) -> None:
    async with EngineConnection(wire.url, timeout=5) as c:
        await c.call_tool("get_contract", {}, tool_call_id="1")
        await asyncio.to_thread(wire.stop)
        with pytest.raises(EngineConnectionError) as info:
            await c.call_tool("get_contract", {}, tool_call_id="2")
        assert wire.url in str(info.value) and "ExceptionGroup" not in str(info.value)
        await asyncio.to_thread(wire.start)
        again = await c.call_tool("get_contract", {}, tool_call_id="3")
        assert again.status == "success"
        assert c.sessions_opened == 2
    assert len(wire.methods("initialize")) == 2


async def test_an_engine_restarted_between_calls_is_rejoined_transparently(
    wire: WireServer,
) -> None:
    async with EngineConnection(wire.url, timeout=5) as c:
        await c.call_tool("get_contract", {}, tool_call_id="1")
        await asyncio.to_thread(wire.stop)
        await asyncio.to_thread(wire.start)  # the new process does not know the old session
        again = await c.call_tool("get_contract", {}, tool_call_id="2")
        assert again.status == "success"
        assert c.sessions_opened == 2
    assert [r["tool"] for r in wire.methods("tools/call")].count("get_contract") == 3
    assert len(wire.calls) == 2  # the call refused with HTTP 404 ran once, on the new session


ENGINE_CLI = (sys.executable, "-m", "algenta_graph.cli", "engine", "--relaxed")


def _engine_process(port: int, db: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [*ENGINE_CLI, "--port", str(port), "--db", str(db)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, "the engine subprocess exited"
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        assert time.monotonic() < deadline, "the engine subprocess did not listen"
        time.sleep(0.05)


async def test_a_killed_engine_fails_the_call_and_the_thread_can_resume(tmp_path: Path) -> None:
    port = free_port()
    db = tmp_path / "engine.sqlite"
    proc = await asyncio.to_thread(_engine_process, port, db)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        async with EngineConnection(url, profile="execute", timeout=5) as c:
            await c.call_tool("get_contract", {}, tool_call_id="1")
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            with pytest.raises(EngineConnectionError) as info:
                await c.call_tool("get_contract", {}, tool_call_id="2")
            assert url in str(info.value)
            proc = await asyncio.to_thread(_engine_process, port, db)
            back = await c.call_tool("get_contract", {}, tool_call_id="3")
            assert back.status == "success"
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=15)


async def test_an_engine_killed_mid_answer_fails_that_call_at_once(
    tmp_path: Path, webhook: WebhookReceiver
) -> None:
    # the engine holds execute_decision open on a slow webhook; SIGKILL it mid-answer
    port = free_port()
    db = tmp_path / "engine.sqlite"
    proc = await asyncio.to_thread(_engine_process, port, db)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        async with EngineConnection(url, profile="execute", call_timeout=120) as c:
            decision = await _log(c)
            args = {"decision_id": decision, "webhook_url": webhook.url_for_delay(60)}
            call = asyncio.ensure_future(c.call_tool("execute_decision", args, tool_call_id="e"))
            for _ in range(1200):  # wait until the engine is inside the call
                if webhook.requests:
                    break
                await asyncio.sleep(0.05)
            assert webhook.requests, "the engine never reached the webhook"
            os.kill(proc.pid, signal.SIGKILL)
            with pytest.raises(EngineConnectionError) as info:
                await call
            # it failed on the lost connection, not by waiting out call_timeout
            assert isinstance(info.value, ToolCallLostError)
            assert info.value.tool == "execute_decision"
            assert "lost the connection" in str(info.value) and url in str(info.value)
            assert "may have run" in str(info.value)
            proc.wait(timeout=10)
            proc = await asyncio.to_thread(_engine_process, port, db)
            back = await c.call_tool("get_contract", {}, tool_call_id="3")
            assert back.status == "success" and c.sessions_opened == 2
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=15)


# --------------------------------------------------------------------------- reference engine


async def _log(c: EngineConnection, **fields: Any) -> str:
    args = {
        "chosen_action": "restock",
        "expected_value": 100.0,
        "confidence": 0.9,
        "risk_p5": 0.05,
        "risk_p95": 0.4,
        **fields,
    }
    message = await c.call_tool("log_decision", args, tool_call_id="log")
    artifact = message.artifact or {}
    body = artifact.get("structured_content") or json.loads(message.content[0]["text"])  # type: ignore[index]
    body = body.get("result", body)
    return str(body["decision_id"])


@pytest.mark.parametrize("denials", ["mcp-error", "json-body", "sdk"])
async def test_the_reference_engine_gates_in_every_wire_form(
    start_engine: Any, webhook: WebhookReceiver, denials: str
) -> None:
    engine: ReferenceEngine = start_engine(denials=denials)
    async with EngineConnection(engine.url, profile="execute", operator_key_is_agent_key=True) as c:
        low = await _log(c, confidence=0.2)
        risky = await _log(c, risk_p5=-1000.0)
        good = await _log(c)

        async def execute(decision: str, **extra: Any) -> Any:
            args = {"decision_id": decision, "webhook_url": webhook.url, **extra}
            return parse_execution_outcome(
                await c.call_tool("execute_decision", args, tool_call_id=decision)
            )

        confidence = await execute(low, override_safety=True)
        risk = await execute(risky, overrideSafety=True, metadata={"force": True, "k": "v"})
        receipt = await execute(good)
        again = await execute(good, force=True)
        assert isinstance(confidence, ExecutionDenial) and confidence.gate == "confidence"
        assert isinstance(risk, ExecutionDenial) and risk.gate == "risk_floor"
        assert isinstance(again, ExecutionDenial) and again.gate == "idempotency"
        for denial in (confidence, risk, again):
            assert denial.override_hint and denial.message
        assert isinstance(receipt, ExecutionReceipt)
        assert receipt.execution_status == "delivered" and not receipt.safety_overridden
        # the operator path overrides, and the engine records the flag it received
        forced = await c.execute_as_operator(good, webhook.url, force=True)
        assert isinstance(forced, ExecutionReceipt) and forced.decision_id == good
        record = await c.get_decision(good)
        assert len(record["executions"]) == 2
        with pytest.raises(AlgentaGraphError, match="dec_missing"):
            await c.get_decision("dec_missing")
    model_calls = [e for e in engine.call_log() if e["name"] == "execute_decision"]
    assert [flag_paths(e["arguments"]) for e in model_calls[:4]] == [[]] * 4
    assert model_calls[1]["arguments"]["metadata"] == {"k": "v"}
    assert model_calls[4]["arguments"]["force"] is True
    assert [e["decision_id"] for e in engine.executions()] == [good, good]
