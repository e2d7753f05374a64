"""Fuzzing: hostile and malformed ``execute_decision`` results never become false receipts.

Hypothesis generates engine results of every kind -- genuine receipts and named-gate denials in
every wire form an engine uses, and malformed bodies (mutated receipts, receipts flagged as
errors, truncated JSON, contradicting gates, random JSON and text) -- and drives them

1. through :func:`algenta_graph.connection.outcomes.parse_execution_outcome` (1,000 cases, each
   in three input forms);
2. through the real ``governed_tool`` node (1,000 cases) and the whole compiled, checkpointed
   graph (150 cases), with a real FastMCP server standing in for a hostile engine whose
   ``execute_decision`` answers with the generated body over real HTTP.

Every case must end as the correct outcome (a receipt for a receipt, a denial naming the gate
for a denial) or as a typed failure; a malformed body never yields a receipt, and no exception
escapes the graph. A hostile *model* is fuzzed too: arbitrary ``execute_decision`` arguments
never crash the graph, never produce a receipt, and never carry a flag to the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, cast

import pytest
from guarantee_support import figure, smuggled_flags
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from mcp.server.fastmcp import FastMCP
from mcp.types import CallToolResult, ImageContent, TextContent

from algenta_graph._serve import BackgroundServer
from algenta_graph.connection.engine import EngineConnection
from algenta_graph.connection.outcomes import (
    ExecutionDenial,
    ExecutionFailure,
    ExecutionReceipt,
    parse_execution_outcome,
)
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.governance.gates import GATE_NAMES
from algenta_graph.graph import build_governed_graph, create_governed_agent
from algenta_graph.models import DemoChatModel
from algenta_graph.testing import ScriptedChatModel

GATES = GATE_NAMES  # derived from the one gate table
TOOL_ERROR_PREFIX = "Error executing tool execute_decision: "


@dataclass(frozen=True)
class Wire:
    """One engine answer as it travels: text content blocks, structured content, ``isError``."""

    texts: tuple[str, ...]
    structured: dict[str, Any] | None = None
    is_error: bool = False
    images: int = 0

    def call_tool_result(self) -> CallToolResult:
        content: list[Any] = [TextContent(type="text", text=t) for t in self.texts]
        content += [
            ImageContent(type="image", data="aGVsbG8=", mimeType="image/png")
            for _ in range(self.images)
        ]
        return CallToolResult(
            content=content, structuredContent=self.structured, isError=self.is_error
        )


@dataclass(frozen=True)
class Case:
    """A generated engine answer and what it truly is.

    ``expect`` is ``"receipt"`` (``decision_id`` / ``status`` / ``overridden`` say which),
    ``"denial"`` (``gate`` says which) or ``"not_receipt"`` (a typed failure, or a denial when
    the body names a gate: anything but a receipt).
    """

    label: str
    wire: Wire
    expect: str
    decision_id: str = "dec_fuzz"
    webhook_url: str = "http://127.0.0.1:9/hook"
    gate: str | None = None
    status: str | None = None
    overridden: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- strategies

# Any character but lone surrogates; no ``codec=`` (hypothesis builds that table at start-up).
SURROGATES: tuple[Literal["Cs"]] = ("Cs",)
ANY_CHAR = st.characters(exclude_categories=SURROGATES)
JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**9), 10**9),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(ANY_CHAR, max_size=16),
)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(ANY_CHAR, max_size=10), inner, max_size=4),
    ),
    max_leaves=12,
)
IDENT = st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=1, max_size=24)
SAFE_TEXT = st.text(alphabet=string.ascii_letters + string.digits + " .,:;!?()'-_=<>", max_size=60)
URL = st.builds(
    lambda host, port, path: f"http://{host}:{port}/{path}",
    st.sampled_from(["127.0.0.1", "localhost", "hooks.example.test"]),
    st.integers(1024, 65535),
    st.text(alphabet=string.ascii_lowercase + "/_-", max_size=16),
)
TIMESTAMP = st.datetimes(
    min_value=datetime(2000, 1, 1),
    max_value=datetime(2099, 12, 31),
    timezones=st.just(timezone.utc),
).flatmap(lambda moment: st.sampled_from([moment.isoformat(), moment.isoformat()[:-6] + "Z"]))
EXTRA_KEYS = ("trace_id", "latency_ms", "engine_version", "attempt", "region")


@st.composite
def receipt_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "decision_id": draw(IDENT),
        "webhook_url": draw(URL),
        "execution_status": draw(st.sampled_from(["delivered", "failed"])),
        "response_code": draw(st.one_of(st.none(), st.integers(100, 599))),
        "executed_at": draw(TIMESTAMP),
        "policy_snapshot_id": draw(st.one_of(st.none(), IDENT)),
        "schema_snapshot_id": draw(st.one_of(st.none(), IDENT)),
        "manifest_version": draw(st.one_of(st.none(), st.sampled_from(["1.0.0", "2.3.1"]))),
        "payload_summary": draw(st.dictionaries(IDENT, JSON_LEAF, max_size=4)),
        "safety_overridden": draw(st.booleans()),
    }
    extras = draw(st.lists(st.sampled_from(EXTRA_KEYS), unique=True, max_size=2))
    for key in extras:
        body[key] = draw(JSON_LEAF)
    return body


def denial_body(gate: str, message: str, hint: str | None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": f"execution_blocked_{gate}", "gate": gate, "message": message}
    if hint is not None:
        error["override_hint"] = hint
    return {"error": error}


# A receipt's fields broken so that it is no longer a receipt.
RECEIPT_BREAKS: tuple[tuple[str, Any], ...] = (
    ("decision_id", None),
    ("decision_id", 123),
    ("decision_id", ""),
    ("decision_id", ["dec"]),
    ("webhook_url", None),
    ("webhook_url", 5),
    ("execution_status", "pending"),
    ("execution_status", "queued"),
    ("execution_status", ""),
    ("execution_status", None),
    ("execution_status", 1),
    ("executed_at", "yesterday"),
    ("executed_at", ""),
    ("executed_at", 1700000000),
    ("safety_overridden", "false"),
    ("safety_overridden", "true"),
    ("safety_overridden", 0),
    ("safety_overridden", None),
)
REQUIRED = ("decision_id", "webhook_url", "execution_status", "executed_at", "safety_overridden")


def receipt_wires(body: dict[str, Any], draw: st.DrawFn) -> Wire:
    """A receipt-shaped body in one of the forms an engine sends a successful result."""
    text = json.dumps(body)
    form = draw(
        st.sampled_from(
            ["text", "pretty", "text+structured", "structured", "result-wrapped", "double"]
        )
    )
    if form == "text":
        return Wire((text,))
    if form == "pretty":
        return Wire((json.dumps(body, indent=2, sort_keys=True),))
    if form == "text+structured":
        return Wire((text,), structured=body)
    if form == "structured":
        return Wire((), structured=body)
    if form == "result-wrapped":
        return Wire((text,), structured={"result": body})
    return Wire((json.dumps(text),))


def denial_wires(body: dict[str, Any], draw: st.DrawFn) -> Wire:
    """A denial body in one of the forms engines use (MCP error, error body, public server)."""
    error = body["error"]
    text = json.dumps(body)
    form = draw(
        st.sampled_from(
            ["mcp-error", "mcp-error-prefixed", "json-body", "structured", "public", "double"]
        )
    )
    if form == "mcp-error":
        return Wire((text,), is_error=True)
    if form == "mcp-error-prefixed":
        return Wire((TOOL_ERROR_PREFIX + text,), is_error=True)
    if form == "json-body":
        return Wire((text,))
    if form == "structured":
        return Wire((text,), structured={"result": body})
    if form == "public":
        public = {
            "error": {
                "code": error["code"],
                "message": f"API error 409: {json.dumps(body, sort_keys=True)}",
                "status_code": 409,
            }
        }
        return Wire((json.dumps(public),))
    return Wire((json.dumps(text),))


@st.composite
def cases(draw: st.DrawFn) -> Case:
    kind = draw(
        st.sampled_from(
            [
                "receipt",
                "denial",
                "unknown-gate",
                "broken-receipt",
                "missing-field",
                "receipt-flagged-error",
                "truncated-receipt",
                "receipt-and-denial",
                "contradicting-gates",
                "gateless-error",
                "random-json",
                "random-text",
                "non-text-content",
            ]
        )
    )
    if kind == "receipt":
        body = draw(receipt_bodies())
        return Case(
            kind,
            receipt_wires(body, draw),
            "receipt",
            decision_id=body["decision_id"],
            webhook_url=body["webhook_url"],
            status=body["execution_status"],
            overridden=body["safety_overridden"],
        )
    if kind in ("denial", "unknown-gate"):
        gate = draw(
            st.sampled_from(GATES)
            if kind == "denial"
            else st.text(alphabet=string.ascii_lowercase + "_", min_size=3, max_size=12).filter(
                lambda g: g not in GATES and g[0] != "_"
            )
        )
        body = denial_body(gate, draw(SAFE_TEXT), draw(st.one_of(st.none(), SAFE_TEXT)))
        return Case(kind, denial_wires(body, draw), "denial", gate=gate)
    if kind == "broken-receipt":
        body = draw(receipt_bodies())
        key, value = draw(st.sampled_from(RECEIPT_BREAKS))
        body[key] = value
        return Case(kind, receipt_wires(body, draw), "not_receipt")
    if kind == "missing-field":
        body = draw(receipt_bodies())
        del body[draw(st.sampled_from(REQUIRED))]
        return Case(kind, receipt_wires(body, draw), "not_receipt")
    if kind == "receipt-flagged-error":
        body = draw(receipt_bodies())
        text = json.dumps(body)
        prefix = draw(st.sampled_from(["", TOOL_ERROR_PREFIX]))
        return Case(kind, Wire((prefix + text,), is_error=True), "not_receipt")
    if kind == "truncated-receipt":
        text = json.dumps(draw(receipt_bodies()))
        cut = draw(st.integers(0, len(text) - 1))
        return Case(kind, Wire((text[:cut],)), "not_receipt")
    if kind == "receipt-and-denial":
        body = draw(receipt_bodies())
        gate = draw(st.sampled_from(GATES))
        body.update(denial_body(gate, "blocked", None))
        return Case(kind, receipt_wires(body, draw), "not_receipt")
    if kind == "contradicting-gates":
        code_gate, named_gate = draw(st.permutations(GATES))[:2]
        body = {"error": {"code": f"execution_blocked_{code_gate}", "gate": named_gate}}
        return Case(kind, Wire((json.dumps(body),), is_error=draw(st.booleans())), "not_receipt")
    if kind == "gateless-error":
        code = draw(st.sampled_from(["internal_error", "not_found", "bad_request", "timeout"]))
        body = {"error": {"code": code, "message": draw(SAFE_TEXT)}}
        return Case(kind, Wire((json.dumps(body),), is_error=draw(st.booleans())), "not_receipt")
    if kind == "random-json":
        value = draw(JSON_VALUE)
        text = json.dumps(value)
        structured = value if isinstance(value, dict) else {"result": value}
        wire = draw(
            st.sampled_from(
                [Wire((text,)), Wire((text,), structured=structured), Wire((text,), is_error=True)]
            )
        )
        return Case(kind, wire, "not_receipt")
    if kind == "random-text":
        texts = tuple(draw(st.lists(st.text(ANY_CHAR, max_size=80), max_size=3)))
        return Case(kind, Wire(texts, is_error=draw(st.booleans())), "not_receipt")
    return Case(kind, Wire((), images=draw(st.integers(1, 2))), "not_receipt")


# --------------------------------------------------------------------------- the oracle


def check(case: Case, outcome: Any) -> str:
    """Assert ``outcome`` is right for ``case``; return the outcome's kind."""
    assert isinstance(outcome, ExecutionReceipt | ExecutionDenial | ExecutionFailure), (
        case.label,
        outcome,
    )
    if case.expect == "receipt":
        assert isinstance(outcome, ExecutionReceipt), (case, outcome)
        assert outcome.decision_id == case.decision_id
        assert outcome.execution_status == case.status
        assert outcome.safety_overridden is case.overridden
        return "receipt"
    assert not isinstance(outcome, ExecutionReceipt), (case, outcome)
    if case.expect == "denial":
        assert isinstance(outcome, ExecutionDenial), (case, outcome)
        assert outcome.gate == case.gate
        return "denial"
    return "denial" if isinstance(outcome, ExecutionDenial) else "failure"


def parser_inputs(case: Case) -> list[Any]:
    """The same answer in every form a caller may hand the parser."""
    wire = case.wire
    inputs: list[Any] = [wire.call_tool_result(), wire.call_tool_result().model_dump()]
    if not wire.images:
        artifact = {"structured_content": wire.structured} if wire.structured else None
        content: Any = wire.texts[0] if len(wire.texts) == 1 else list(wire.texts)
        inputs.append(
            ToolMessage(
                content=content,
                tool_call_id="call_fuzz",
                artifact=artifact,
                status="error" if wire.is_error else "success",
            )
        )
    return inputs


# --------------------------------------------------------------------------- 1. the parser

PARSER_EXAMPLES = 1000
NODE_EXAMPLES = 1000
GRAPH_EXAMPLES = 150
REPORT_ALL = "report"  # every gate of the one gate table
FUZZ_SETTINGS = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_fuzz_parser_never_yields_a_false_receipt() -> None:
    seen: dict[str, int] = {
        "cases": 0,
        "inputs": 0,
        "receipt": 0,
        "denial": 0,
        "failure": 0,
        "false_receipts": 0,
        "exceptions": 0,
    }
    labels: dict[str, int] = {}
    wrong: list[tuple[str, str]] = []

    @settings(FUZZ_SETTINGS, max_examples=PARSER_EXAMPLES)
    @given(cases())
    def run(case: Case) -> None:
        seen["cases"] += 1
        labels[case.label] = labels.get(case.label, 0) + 1
        for value in parser_inputs(case):
            seen["inputs"] += 1
            try:
                outcome = parse_execution_outcome(value)
            except Exception as exc:  # counted: the parser promises never to raise
                seen["exceptions"] += 1
                wrong.append((case.label, repr(exc)))
                continue
            if isinstance(outcome, ExecutionReceipt) and case.expect != "receipt":
                seen["false_receipts"] += 1
                wrong.append((case.label, repr(outcome)))
                continue
            seen[check(case, outcome)] += 1

    run()
    figure(
        "fuzz_parser",
        cases=seen["cases"],
        inputs=seen["inputs"],
        receipts=seen["receipt"],
        denials=seen["denial"],
        failures=seen["failure"],
        false_receipts=seen["false_receipts"],
        exceptions=seen["exceptions"],
    )
    assert seen["cases"] == PARSER_EXAMPLES
    assert len(labels) == 13, labels  # every kind of answer was generated
    assert (seen["false_receipts"], seen["exceptions"]) == (0, 0), wrong[:5]
    assert seen["receipt"] + seen["denial"] + seen["failure"] == seen["inputs"]


# --------------------------------------------------------------------------- 2. the graph


class HostileEngine:
    """A real MCP server over HTTP whose ``execute_decision`` answers with the current case.

    ``get_decision`` (the graph's read-back after an idempotency denial) answers with an
    execution that carries another thread's tag, or with junk, so recovery must find nothing.
    """

    def __init__(self) -> None:
        self.answer: CallToolResult = CallToolResult(content=[])
        self.calls = 0
        server: FastMCP = FastMCP("hostile-engine", log_level="WARNING")

        @server.tool(name="execute_decision")
        def execute_decision(
            decision_id: str,
            webhook_url: str,
            timeout_seconds: float = 10.0,
            metadata: dict[str, Any] | None = None,
        ) -> CallToolResult:
            """Dispatch a logged decision to its webhook (hostile test double)."""
            self.calls += 1
            return self.answer

        @server.tool(name="get_decision")
        def get_decision(decision_id: str) -> CallToolResult:
            """Read a decision and its executions (hostile test double)."""
            body = {
                "decision": {"decision_id": decision_id},
                "executions": [
                    {"decision_id": decision_id, "metadata": {"algenta_graph": {"thread_id": "x"}}},
                    "junk",
                    None,
                ],
            }
            return CallToolResult(content=[TextContent(type="text", text=json.dumps(body))])

        self.server = BackgroundServer(server.streamable_http_app(), name="hostile-engine")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/mcp"


@contextlib.contextmanager
def hostile_connection() -> Iterator[
    tuple[HostileEngine, EngineConnection, asyncio.AbstractEventLoop]
]:
    """The hostile engine, an open connection to it, and the loop that connection lives on."""
    hostile = HostileEngine()
    hostile.server.start()
    loop = asyncio.new_event_loop()
    conn = EngineConnection(hostile.url, profile="execute")
    try:
        loop.run_until_complete(conn.open())
        yield hostile, conn, loop
    finally:
        loop.run_until_complete(conn.aclose())
        loop.close()
        hostile.server.stop()


def check_update(
    case: Case,
    receipts: list[dict[str, Any]],
    denials: list[dict[str, Any]],
    answers: list[ToolMessage],
) -> str:
    """Assert what the graph recorded for ``case``; return the outcome's kind."""
    assert len(answers) == 1, answers
    if case.expect == "receipt":
        assert [r["decision_id"] for r in receipts] == [case.decision_id], (case, receipts)
        assert receipts[0]["safety_overridden"] is case.overridden
        assert denials == []
        return "receipt"
    assert receipts == [], (case, receipts)
    assert answers[0].status == "error", (case, answers[0])
    if case.expect == "denial":
        assert [d["gate"] for d in denials] == [case.gate], (case, denials)
        return "denial"
    return "denial" if denials else "failure"


def test_fuzz_governed_tool_node_never_records_a_false_receipt() -> None:
    """1,000 hostile answers through the real ``governed_tool`` node over real MCP."""
    seen = {"cases": 0, "receipt": 0, "denial": 0, "failure": 0, "false_receipts": 0}
    seen["exceptions"] = 0
    wrong: list[tuple[str, str]] = []
    with hostile_connection() as (hostile, conn, loop):
        builder = build_governed_graph(conn, DemoChatModel(), on_denial=REPORT_ALL)
        # the node object the graph runs (as a runnable outside a run, LangGraph would want the
        # run's Runtime, which only a graph run supplies)
        node = cast(Any, builder.nodes["governed_tool"].runnable).afunc

        @settings(FUZZ_SETTINGS, max_examples=NODE_EXAMPLES)
        @given(cases())
        def run(case: Case) -> None:
            seen["cases"] += 1
            hostile.answer = case.wire.call_tool_result()
            call = {
                "name": "execute_decision",
                "args": {"decision_id": case.decision_id, "webhook_url": case.webhook_url},
                "id": f"call_{seen['cases']}",
                "type": "tool_call",
            }
            state = {
                "messages": [HumanMessage("execute"), AIMessage("", tool_calls=[call])],
                "selected_tools": ["execute_decision"],
                "receipts": [],
                "denials": [],
                "operator_decisions": [],
            }
            config: Any = {"configurable": {"thread_id": f"node-{seen['cases']}"}}
            calls_before = hostile.calls
            try:
                update = loop.run_until_complete(node(state, config))
            except Exception as exc:  # counted: the node must never raise on an answer
                seen["exceptions"] += 1
                wrong.append((case.label, repr(exc)))
                return
            assert hostile.calls == calls_before + 1
            answers = [m for m in update["messages"] if isinstance(m, ToolMessage)]
            receipts = update.get("receipts", [])
            if receipts and case.expect != "receipt":
                seen["false_receipts"] += 1
                wrong.append((case.label, repr(receipts)))
                return
            seen[check_update(case, receipts, update.get("denials", []), answers)] += 1

        run()
    figure(
        "fuzz_governed_tool",
        cases=seen["cases"],
        receipts=seen["receipt"],
        denials=seen["denial"],
        failures=seen["failure"],
        false_receipts=seen["false_receipts"],
        exceptions=seen["exceptions"],
    )
    assert seen["cases"] == NODE_EXAMPLES
    assert (seen["false_receipts"], seen["exceptions"]) == (0, 0), wrong[:5]
    assert seen["receipt"] + seen["denial"] + seen["failure"] == seen["cases"]


def test_fuzz_compiled_graph_never_lets_an_exception_escape() -> None:
    """Hostile answers through the whole compiled graph, checkpointed: no exception escapes."""
    seen = {"cases": 0, "receipt": 0, "denial": 0, "failure": 0, "false_receipts": 0}
    seen["escaped_exceptions"] = 0
    wrong: list[tuple[str, str]] = []
    with hostile_connection() as (hostile, conn, loop):
        graph = loop.run_until_complete(
            create_governed_agent(
                DemoChatModel(), connection=conn, checkpointer=InMemorySaver(), on_denial=REPORT_ALL
            )
        )

        @settings(FUZZ_SETTINGS, max_examples=GRAPH_EXAMPLES)
        @given(cases())
        def run(case: Case) -> None:
            seen["cases"] += 1
            hostile.answer = case.wire.call_tool_result()
            prompt = f"execute decision_id={case.decision_id} webhook_url={case.webhook_url}"
            config: Any = {"configurable": {"thread_id": f"graph-{seen['cases']}"}}
            calls_before = hostile.calls
            # ainvoke returning (not raising) is part of the property: counted
            try:
                state = loop.run_until_complete(
                    graph.ainvoke({"messages": [("user", prompt)]}, config)
                )
            except Exception as exc:
                seen["escaped_exceptions"] += 1
                wrong.append((case.label, repr(exc)))
                return
            assert hostile.calls == calls_before + 1
            answers = [
                m
                for m in state["messages"]
                if isinstance(m, ToolMessage) and m.name == "execute_decision"
            ]
            if state["receipts"] and case.expect != "receipt":
                seen["false_receipts"] += 1
                wrong.append((case.label, repr(state["receipts"])))
                return
            seen[check_update(case, state["receipts"], state["denials"], answers)] += 1
            assert not loop.run_until_complete(graph.aget_state(config)).next

        run()
    figure(
        "fuzz_graph",
        cases=seen["cases"],
        receipts=seen["receipt"],
        denials=seen["denial"],
        failures=seen["failure"],
        false_receipts=seen["false_receipts"],
        escaped_exceptions=seen["escaped_exceptions"],
    )
    assert seen["cases"] == GRAPH_EXAMPLES
    assert (seen["false_receipts"], seen["escaped_exceptions"]) == (0, 0), wrong[:5]
    assert seen["receipt"] + seen["denial"] + seen["failure"] == seen["cases"]


# --------------------------------------------------------------------------- 3. a hostile model

MODEL_EXAMPLES = 100
HASHABLE_JSON = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(ANY_CHAR, max_size=30),
)
JUNK_EXTRAS = {
    "timeout_seconds": JSON_LEAF,
    "metadata": JSON_VALUE,
    "force": JSON_LEAF,
    "Override-Safety": JSON_LEAF,
    "options": JSON_VALUE,
}
MODEL_ARGS = st.one_of(
    # well-formed enough to reach the engine (a timeout the graph sends: 1-60 s), with junk and
    # flags alongside
    st.fixed_dictionaries(
        {"decision_id": IDENT, "webhook_url": URL},
        optional={**JUNK_EXTRAS, "timeout_seconds": st.floats(1, 60)},
    ),
    # anything at all
    st.fixed_dictionaries(
        {},
        optional={
            "decision_id": st.one_of(HASHABLE_JSON, JSON_VALUE),
            "webhook_url": st.one_of(URL, JSON_LEAF),
            **JUNK_EXTRAS,
        },
    ),
    st.dictionaries(st.text(ANY_CHAR, max_size=12), JSON_VALUE, max_size=4),
)


def _one_call(args: dict[str, Any]) -> ScriptedChatModel:
    call = {"name": "execute_decision", "args": args, "id": "call_hostile"}
    return ScriptedChatModel(replies=[{"content": "", "tool_calls": [call]}] + ["done"] * 3)


def test_fuzz_model_arguments_never_crash_the_graph_nor_reach_the_engine_with_a_flag(
    engine: ReferenceEngine,
) -> None:
    """Arbitrary ``execute_decision`` arguments from the model, against the reference engine:
    the run ends normally with one error answer, no receipt, and no flag at the engine."""
    seen = {"cases": 0, "escaped_exceptions": 0}
    wrong: list[tuple[Any, str]] = []
    loop = asyncio.new_event_loop()
    conn = EngineConnection(engine.url, profile="execute")
    log_before = len(engine.call_log())
    try:
        loop.run_until_complete(conn.open())

        @settings(FUZZ_SETTINGS, max_examples=MODEL_EXAMPLES)
        @given(MODEL_ARGS)
        def run(args: dict[str, Any]) -> None:
            seen["cases"] += 1
            graph = loop.run_until_complete(
                create_governed_agent(
                    _one_call(args), connection=conn, checkpointer=InMemorySaver()
                )
            )
            config: Any = {"configurable": {"thread_id": f"model-{seen['cases']}"}}
            try:
                state = loop.run_until_complete(
                    graph.ainvoke({"messages": [("user", "go")]}, config)
                )
            except Exception as exc:  # counted: no argument may crash the graph
                seen["escaped_exceptions"] += 1
                wrong.append((args, repr(exc)))
                return
            answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
            assert len(answers) == 1 and answers[0].status == "error", answers
            assert state["receipts"] == []

        run()
    finally:
        loop.run_until_complete(conn.aclose())
        loop.close()
    calls = [c for c in engine.call_log()[log_before:] if c["name"] == "execute_decision"]
    flagged = [p for c in calls for p in smuggled_flags(c["arguments"])]
    figure(
        "fuzz_model_arguments",
        cases=seen["cases"],
        execute_calls_at_engine=len(calls),
        flags_at_engine=len(flagged),
        executions=len(engine.executions()),
        escaped_exceptions=seen["escaped_exceptions"],
    )
    assert seen["cases"] == MODEL_EXAMPLES
    assert seen["escaped_exceptions"] == 0, wrong[:5]
    assert len(calls) >= MODEL_EXAMPLES // 5  # enough of them reached the engine
    assert flagged == []
    assert engine.executions() == []


@pytest.mark.parametrize("decision_id", [["dec_1"], {"id": "dec_1"}], ids=["list", "dict"])
async def test_an_unhashable_decision_id_from_the_model_does_not_crash_the_graph(
    engine: ReferenceEngine, webhook: WebhookReceiver, decision_id: Any
) -> None:
    async with EngineConnection(engine.url, profile="execute") as conn:
        graph = await create_governed_agent(
            _one_call({"decision_id": decision_id, "webhook_url": webhook.url}),
            connection=conn,
            checkpointer=InMemorySaver(),
        )
        state = await graph.ainvoke(
            {"messages": [("user", "go")]}, {"configurable": {"thread_id": "unhashable"}}
        )
    answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert len(answers) == 1 and answers[0].status == "error"
    assert state["receipts"] == []


def test_a_receipt_for_another_decision_is_not_recorded_as_this_ones() -> None:
    other = {
        "decision_id": "dec_other",
        "webhook_url": "http://127.0.0.1:9/hook",
        "execution_status": "delivered",
        "response_code": 200,
        "executed_at": "2026-01-01T00:00:00Z",
        "policy_snapshot_id": None,
        "schema_snapshot_id": None,
        "manifest_version": None,
        "payload_summary": {},
        "safety_overridden": False,
    }
    with hostile_connection() as (hostile, conn, loop):
        hostile.answer = Wire((json.dumps(other),)).call_tool_result()
        graph = loop.run_until_complete(
            create_governed_agent(
                DemoChatModel(), connection=conn, checkpointer=InMemorySaver(), on_denial=REPORT_ALL
            )
        )
        config: Any = {"configurable": {"thread_id": "mismatch"}}
        prompt = "execute decision_id=dec_mine webhook_url=http://127.0.0.1:9/hook"
        state = loop.run_until_complete(graph.ainvoke({"messages": [("user", prompt)]}, config))
    assert state["receipts"] == [], state["receipts"]
