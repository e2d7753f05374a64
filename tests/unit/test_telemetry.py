"""The telemetry's parts in-process: the handler's spans, the records it reads.

The handler runs over small real LangGraph graphs (no engine), with the OpenTelemetry SDK's
in-memory exporter; the record readers over the shapes the governed nodes write.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from typing_extensions import TypedDict

from algenta_graph.connection.watched_http import trace_headers
from algenta_graph.telemetry import TelemetryHandler, instrument
from algenta_graph.telemetry.engine_calls import EngineCall, span_context_of
from algenta_graph.telemetry.names import TRACE_ARTIFACT_KEY
from algenta_graph.telemetry.records import asked_escalations, step_policy, update_facts
from algenta_graph.telemetry.runs import REGISTRY

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class State(TypedDict, total=False):
    n: int


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp, exporter
    tp.shutdown()


def small_graph(middle: Any = None) -> Any:
    def first(state: State) -> State:
        return {"n": 1}

    def second(state: State) -> State:
        return {"n": 2}

    g = StateGraph(State)
    g.add_node("first", first)
    g.add_node("second", middle or second)
    g.add_edge(START, "first")
    g.add_edge("first", "second")
    g.add_edge("second", END)
    return g


def names(spans: tuple[ReadableSpan, ...]) -> list[str]:
    return [s.name for s in sorted(spans, key=lambda s: s.start_time or 0)]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_run_nests_under_the_callers_span_and_leaves_its_context_alone(
    provider: tuple[TracerProvider, InMemorySpanExporter], mode: str
) -> None:
    tp, exporter = provider
    graph = instrument(small_graph().compile(name="g"), tracer_provider=tp)
    with tp.get_tracer("app").start_as_current_span("caller") as caller:
        if mode == "sync":
            graph.invoke({"n": 0})
        else:
            await graph.ainvoke({"n": 0})
        assert trace.get_current_span() is caller  # the run did not leave its span current
    assert trace.get_current_span() is trace.INVALID_SPAN
    spans = exporter.get_finished_spans()
    assert names(spans) == ["caller", "invoke_agent g", "first", "second"]
    by_name = {s.name: s for s in spans}
    root = by_name["invoke_agent g"]
    assert root.parent is not None and root.parent.span_id == caller.get_span_context().span_id
    for node in ("first", "second"):
        parent = by_name[node].parent
        assert parent is not None and parent.span_id == root.context.span_id
        assert dict(by_name[node].attributes or {})["algenta.node"] == node
    assert len(REGISTRY) == 0  # every run of it forgotten at its end


async def test_a_node_that_raises_is_an_error_and_an_interrupt_is_not(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tp, exporter = provider

    def boom(state: State) -> State:
        raise ValueError("the node broke")

    graph = instrument(small_graph(boom).compile(name="g"), tracer_provider=tp)
    with pytest.raises(ValueError, match="broke"):
        await graph.ainvoke({"n": 0})
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    for name in ("second", "invoke_agent g"):
        span = by_name[name]
        assert span.status.status_code is StatusCode.ERROR
        assert dict(span.attributes or {})["error.type"] == "ValueError"
    assert by_name["first"].status.status_code is StatusCode.UNSET
    exporter.clear()

    def ask(state: State) -> State:
        interrupt("an operator, please")
        return {"n": 2}

    from langgraph.checkpoint.memory import InMemorySaver

    graph = instrument(small_graph(ask).compile(checkpointer=InMemorySaver()), tracer_provider=tp)
    cfg: Any = {"configurable": {"thread_id": "t"}}
    out = await graph.ainvoke({"n": 0}, cfg)
    assert out["__interrupt__"]
    for span in exporter.get_finished_spans():
        assert span.status.status_code is not StatusCode.ERROR
    exporter.clear()
    await graph.ainvoke(Command(resume="yes"), cfg)
    [root] = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert dict(root.attributes or {})["algenta.resume"] is True
    assert len(REGISTRY) == 0


def test_instrument_attaches_only_what_records_and_only_once(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tp, _ = provider
    graph = small_graph().compile().with_config({"recursion_limit": 7})
    # nothing configured (the global providers are the API's no-ops): the graph as it is
    assert instrument(graph) is graph
    for once in (instrument(graph, tracer_provider=tp), instrument(graph, always=True)):
        assert instrument(once, always=True) is once
        assert once.config["recursion_limit"] == 7
        handlers = [c for c in once.config["callbacks"] if isinstance(c, TelemetryHandler)]
        assert len(handlers) == 1


def test_an_engine_call_outside_any_trace_sends_no_trace_context() -> None:
    # no span current and no instrumented run: the global provider's no-op span
    call = EngineCall("tools/call", "get_contract", "http://127.0.0.1:8000/mcp")
    assert call.meta is None and call.traceparent is None
    assert call.tag_arguments({"metadata": {"algenta_graph": {}}}) == {
        "metadata": {"algenta_graph": {}}
    }


def test_the_transport_lifts_the_trace_context_from_meta_into_headers(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tp, _ = provider
    body = (
        b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x","_meta":'
        b'{"traceparent":"' + PARENT.encode() + b'","tracestate":"k=v","other":"kept"}}}'
    )
    request = httpx.Request("POST", "http://e/mcp", content=body)
    assert trace_headers(request) == {"traceparent": PARENT, "tracestate": "k=v"}
    plain = httpx.Request("POST", "http://e/mcp", content=b'{"jsonrpc":"2.0","method":"x"}')
    assert trace_headers(plain) == {}  # nothing current: nothing sent
    with tp.get_tracer("t").start_as_current_span("opening the session") as span:
        headers = trace_headers(plain)  # (initialize, notifications: the session's context)
    found = span_context_of(headers["traceparent"])
    assert found is not None and found.span_id == span.get_span_context().span_id
    assert trace_headers(httpx.Request("GET", "http://e/mcp")) == {}


def test_span_context_of_takes_only_w3c_traceparents() -> None:
    found = span_context_of(PARENT)
    assert found is not None and f"{found.trace_id:032x}" == PARENT.split("-")[1]
    for bad in (None, 7, "", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "x-y"):
        assert span_context_of(bad) is None


def test_update_facts_reads_every_record_and_the_failures() -> None:
    old = ToolMessage(
        "earlier",
        tool_call_id="c0",
        name="execute_decision",
        id="m0",
        response_metadata={"algenta_outcome": "failed"},
    )
    failed = ToolMessage(
        "Error",
        tool_call_id="c4",
        name="execute_decision",
        id="m4",
        response_metadata={"algenta_outcome": "failed"},
    )
    not_sent = ToolMessage(
        "Error",
        tool_call_id="c5",
        name="query_data",
        id="m5",
        response_metadata={"algenta_outcome": "failed"},
    )
    update = {
        "receipts": [
            {
                "decision_id": "d1",
                "execution_status": "delivered",
                "source": "model",
                "tool_call_id": "c1",
                "trace_id": "ab" * 16,
            },
            {
                "decision_id": "d2",
                "execution_status": "unknown",
                "source": "recovered",
                "tool_call_id": "c2",
            },
        ],
        "denials": [
            {
                "decision_id": "d3",
                "gate": "risk_floor",
                "policy": "halt",
                "source": "model",
                "tool_call_id": "c3",
            },
        ],
        "operator_decisions": [
            {
                "operator": "ana",
                "action": "override",
                "gate": "confidence",
                "decision_id": "d6",
                "result": "failed",
                "tool_call_id": "c6",
                "time": "2026-01-01T00:00:00+00:00",
            },
            {
                "operator": "bo",
                "action": "decline",
                "gate": "confidence",
                "decision_id": "d7",
                "result": "expired",
                "tool_call_id": "c7",
            },
        ],
        "messages": [old, failed, not_sent],
    }
    facts = update_facts(update, known={"m0"})
    assert [(f.kind, f.outcome, f.source, f.decision_id) for f in facts] == [
        ("receipt", "receipt", "model", "d1"),
        ("receipt", "unknown", "recovered", "d2"),
        ("denial", "denial", "model", "d3"),
        ("operator_decision", None, "operator", "d6"),
        ("failure", "failed", "operator", "d6"),  # an override that failed, nothing recorded
        ("operator_decision", None, "operator", "d7"),
        ("failure", "failed", "model", None),  # c4: an execute_decision answered "failed"
    ]
    assert facts[0].attributes["algenta.receipt.trace_id"] == "ab" * 16
    assert facts[2].attributes["algenta.policy"] == "halt"
    assert [f.expired for f in facts if f.kind == "operator_decision"] == [False, True]
    assert update_facts({"receipts": "junk", "denials": [None], "messages": 3}) == []


def test_a_pending_escalation_is_read_with_where_and_when_it_was_raised() -> None:
    step = AIMessage(
        "",
        tool_calls=[
            {"name": "execute_decision", "args": {}, "id": "c1"},
            {"name": "execute_decision", "args": {}, "id": "c2"},
        ],
    )
    stamp = {TRACE_ARTIFACT_KEY: {"traceparent": PARENT, "at": "2026-01-01T00:00:00+00:00"}}
    state = {
        "messages": [
            step,
            ToolMessage("DENIED", tool_call_id="c1", artifact=stamp),
            ToolMessage("DENIED", tool_call_id="c2"),
        ],
        "denials": [
            {
                "gate": "confidence",
                "policy": "escalate",
                "tool_call_id": "c1",
                "escalation_id": "esc_1",
            },
            {
                "gate": "confidence",
                "policy": "escalate",
                "tool_call_id": "c2",
                "escalation_id": "esc_2",
            },
            {"gate": "idempotency", "policy": "report", "tool_call_id": "c2"},
            {"gate": "confidence", "policy": "halt", "tool_call_id": "c_old"},  # not this step
        ],
        "operator_decisions": [],
    }
    first, second = asked_escalations(state, "confidence")
    assert (first.escalation_id, first.at) == ("esc_1", "2026-01-01T00:00:00+00:00")
    assert first.raised_in is not None and first.raised_in.span_id == 0x00F067AA0BA902B7
    assert (second.escalation_id, second.raised_in, second.at) == ("esc_2", None, None)
    assert step_policy(state, "confidence") == "escalate"
    assert step_policy(state, "idempotency") == "report"
    assert step_policy(state, "risk_floor") is None
    answered = {**state, "operator_decisions": [{"tool_call_id": "c1"}]}
    assert [a.tool_call_id for a in asked_escalations(answered, "confidence")] == ["c2"]


class Governed(TypedDict, total=False):
    messages: list[Any]
    denials: list[dict[str, Any]]
    operator_decisions: list[dict[str, Any]]


async def test_answers_expiries_and_the_time_to_decide_are_counted_exactly() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    asked = {TRACE_ARTIFACT_KEY: {"traceparent": PARENT, "at": "2026-01-01T00:00:00+00:00"}}
    step = AIMessage(
        "",
        tool_calls=[
            {"name": "execute_decision", "args": {}, "id": "c1"},
            {"name": "execute_decision", "args": {}, "id": "c2"},
        ],
    )

    def governed_tool(state: Governed) -> Governed:  # the shapes governed_tool writes
        denials = [
            {"gate": "confidence", "policy": "escalate", "source": "model", "tool_call_id": c}
            for c in ("c1", "c2")
        ]
        answers = [
            ToolMessage("DENIED", tool_call_id=c, name="execute_decision", artifact=asked)
            for c in ("c1", "c2")
        ]
        return {"messages": [step, *answers], "denials": denials}

    def denial_handler_confidence(state: Governed) -> Governed:
        decided = [
            {
                "operator": "ana",
                "action": "decline",
                "gate": "confidence",
                "result": "declined",
                "tool_call_id": "c1",
                "time": "2026-01-01T01:00:00+00:00",
            },
            {
                "operator": "ana",
                "action": "decline",
                "gate": "confidence",
                "result": "expired",
                "tool_call_id": "c2",
                "time": "2026-01-02T00:00:00+00:00",
            },
        ]
        return {"operator_decisions": decided}

    g = StateGraph(Governed)
    g.add_node("governed_tool", governed_tool)
    g.add_node("denial_handler_confidence", denial_handler_confidence)
    g.add_edge(START, "governed_tool")
    g.add_edge("governed_tool", "denial_handler_confidence")
    g.add_edge("denial_handler_confidence", END)
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    graph = instrument(g.compile(), meter_provider=meters)  # counted, not traced
    await graph.ainvoke({"messages": [], "denials": [], "operator_decisions": []})
    points: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for metric in data.resource_metrics[0].scope_metrics[0].metrics:
        points[metric.name] = list(metric.data.data_points)
    [raised] = points["algenta.escalations.raised"]
    assert (dict(raised.attributes or {}), raised.value) == ({"algenta.gate": "confidence"}, 2)
    [answered] = points["algenta.escalations.answered"]
    assert answered.value == 1
    assert dict(answered.attributes or {}) == {
        "algenta.gate": "confidence",
        "algenta.operator.action": "decline",
    }
    [expired] = points["algenta.escalations.expired"]
    assert (dict(expired.attributes or {}), expired.value) == ({"algenta.gate": "confidence"}, 1)
    [waited] = points["algenta.escalation.decision_time"]
    assert (waited.count, waited.sum) == (1, 3600.0)  # asked at 00:00, answered at 01:00
    meters.shutdown()
