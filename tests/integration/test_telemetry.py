"""One trace from retrieval to the engine's receipt, on the reference engine.

Every test runs the real governed graph over the reference engine (real HTTP, real webhook,
real SQLite checkpoints), instrumented with the OpenTelemetry SDK's own in-memory span exporter
and metric reader (``algenta_graph.telemetry.instrument(..., tracer_provider=, meter_provider=)``:
no global state). The model is the scripted stand-in.

- a full run with retrieval, two parallel calls (a delivery and an escalated denial), an
  operator override on the resumed thread, then a reported denial: the span tree and its
  attributes, sibling spans for the parallel calls, the resume linked to the span whose denial
  raised the escalation, one trace id in the spans, the engine's execution log and each receipt,
  and every metric counted exactly;
- a crash between the delivery and its checkpoint, then a resume in a new process: the
  recovered receipt keeps the delivery's trace id, and the recovery links to the delivery span;
- the LangChain runs carry the governance in their metadata and tags (a recording tracer, no
  network);
- every MCP request carries the ``traceparent`` of the span that made it (a wire server that
  records headers).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from cli_support import cli
from graph_support import call, config, execute, log_decision, open_connection
from langchain_core.tracers.base import BaseTracer
from langchain_core.tracers.schemas import Run
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, format_span_id, format_trace_id
from wire_server import WireServer

from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.graph import create_governed_agent
from algenta_graph.telemetry import instrument
from algenta_graph.telemetry.engine_calls import span_context_of
from algenta_graph.testing import ScriptedChatModel

OVERRIDE: Command[str] = Command(
    resume={"action": "override", "operator": "ana", "reason": "signed off"}
)


class Telemetry:
    """An SDK tracer and meter provider, in memory, for one test."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def instrument(self, graph: Any) -> Any:
        return instrument(
            graph, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
        )

    @property
    def spans(self) -> list[ReadableSpan]:
        return sorted(self.exporter.get_finished_spans(), key=lambda s: s.start_time or 0)

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, Any]]], float]:
        """Every data point: counters by value, histograms by count."""
        out: dict[tuple[str, frozenset[tuple[str, Any]]], float] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        key = (metric.name, frozenset(dict(point.attributes or {}).items()))
                        out[key] = getattr(point, "value", None) or point.count  # type: ignore[union-attr]
        return out


@pytest.fixture
def wire() -> Iterator[WireServer]:
    with WireServer() as server:
        yield server


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    t = Telemetry()
    yield t
    t.tracer_provider.shutdown()
    t.meter_provider.shutdown()


def children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def tree(spans: Sequence[ReadableSpan], root: ReadableSpan) -> list[Any]:
    """``[name, [children...]]`` in start order: the shape of a trace."""
    return [root.name, [tree(spans, c) for c in children(spans, root)]]


def trace_hex(span: ReadableSpan) -> str:
    return format_trace_id(span.context.trace_id)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def metric_points(
    metrics: dict[tuple[str, frozenset[tuple[str, Any]]], float], name: str
) -> dict[frozenset[tuple[str, Any]], float]:
    return {labels: value for (n, labels), value in metrics.items() if n == name}


def labels(**values: Any) -> frozenset[tuple[str, Any]]:
    return frozenset((f"algenta.{k.replace('__', '.')}", v) for k, v in values.items())


async def test_one_trace_from_retrieval_to_the_receipt(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path, telemetry: Telemetry
) -> None:
    async with open_connection(engine) as conn:
        ok = await log_decision(conn)
        low = await log_decision(conn, confidence=0.3)  # the confidence gate escalates
        # one model turn, two calls: a delivery and an escalated denial
        both = {
            "content": "",
            "tool_calls": [
                execute(ok, webhook.url, "c1")["tool_calls"][0],
                execute(low, webhook.url, "c2")["tool_calls"][0],
            ],
        }
        # after the override: the model executes `ok` again -> the thread's own idempotency
        # denial (the graph does not send it; reported), then answers
        replies = [both, execute(ok, webhook.url, "c3"), "done"]
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:
            graph = telemetry.instrument(
                await create_governed_agent(
                    ScriptedChatModel(replies=replies),
                    connection=conn,
                    checkpointer=saver,
                    single_process=True,
                )
            )
            first = await graph.ainvoke({"messages": [("user", "execute both")]}, config("t"))
            assert first["__interrupt__"]  # the escalation waits for an operator
            out = await graph.ainvoke(OVERRIDE, config("t"))

    spans = telemetry.spans
    roots = [s for s in spans if s.parent is None]
    assert [r.name for r in roots] == ["invoke_agent algenta_governed_agent"] * 2
    run1, run2 = roots
    # --- the shape: two runs, two traces, one span per node run and per engine call
    call_exec = "tools/call execute_decision"
    assert tree(spans, run1) == [
        run1.name,
        [
            ["retrieve_tools", []],
            ["model", [["chat", []]]],
            ["governed_tool", [[call_exec, []], [call_exec, []]]],  # parallel calls: siblings
            # the escalation reads the engine's policy snapshot once (shown to the operator)
            ["denial_handler_confidence", [["tools/call get_contract", []]]],
        ],
    ]
    assert tree(spans, run2) == [
        run2.name,
        [
            ["denial_handler_confidence", [["tools/call get_decision", []], [call_exec, []]]],
            ["model", [["chat", []]]],
            ["governed_tool", []],  # the repeat is refused by the graph: no engine call
            ["denial_handler_idempotency", []],
            ["model", [["chat", []]]],
        ],
    ]
    assert {trace_hex(s) for s in spans if s.context.trace_id == run1.context.trace_id} == {
        trace_hex(run1)
    }
    assert run1.context.trace_id != run2.context.trace_id
    # every span is in its run's trace
    for span in spans:
        assert span.context.trace_id in (run1.context.trace_id, run2.context.trace_id)

    # --- the conventions' attributes
    assert attrs(run1)["gen_ai.operation.name"] == "invoke_agent"
    assert attrs(run1)["gen_ai.agent.name"] == "algenta_governed_agent"
    assert attrs(run1)["gen_ai.conversation.id"] == "t"
    assert attrs(run1)["algenta.escalation.waiting"] is True
    assert attrs(run2)["algenta.resume"] is True
    retrieve = next(s for s in children(spans, run1) if s.name == "retrieve_tools")
    assert attrs(retrieve)["gen_ai.operation.name"] == "retrieval"
    assert "execute_decision" in attrs(retrieve)["algenta.retrieval.selected_tools"]
    governed = next(s for s in children(spans, run1) if s.name == "governed_tool")
    delivered, denied = children(spans, governed)
    for span, call_id, decision in ((delivered, "c1", ok), (denied, "c2", low)):
        assert span.kind is SpanKind.CLIENT
        a = attrs(span)
        assert a["mcp.method.name"] == "tools/call"
        assert a["gen_ai.operation.name"] == "execute_tool"
        assert a["gen_ai.tool.name"] == "execute_decision"
        assert a["gen_ai.tool.call.id"] == call_id
        assert a["algenta.decision.id"] == decision
        assert a["server.address"] == "127.0.0.1" and a["server.port"] == engine.port
    assert attrs(delivered)["algenta.outcome"] == "receipt"
    assert (attrs(denied)["algenta.outcome"], attrs(denied)["algenta.gate"]) == (
        "denial",
        "confidence",
    )
    assert attrs(governed)["algenta.outcomes"] == ("receipt", "denial")
    assert attrs(governed)["algenta.gates"] == ("confidence",)
    assert [e.name for e in governed.events] == ["algenta.receipt", "algenta.denial"]
    [asked] = [s for s in children(spans, run1) if s.name == "denial_handler_confidence"]
    assert attrs(asked)["algenta.gate"] == "confidence"
    assert attrs(asked)["algenta.policy"] == "escalate"
    assert attrs(asked)["algenta.escalation.waiting"] is True

    # --- the escalation: two runs linked, never one span hours long
    answered = next(s for s in children(spans, run2) if s.name == "denial_handler_confidence")
    [escalation_id] = {d["escalation_id"] for d in out["denials"] if d.get("escalation_id")}
    for span in (run2, answered):
        [link] = span.links
        assert link.context.span_id == denied.context.span_id  # the call whose denial raised it
        assert link.context.trace_id == run1.context.trace_id
        assert dict(link.attributes or {}) == {
            "algenta.link.reason": "escalation",
            "algenta.escalation.id": escalation_id,
            "gen_ai.tool.call.id": "c2",
        }
    for span in (run2, answered):
        a = attrs(span)
        assert a["algenta.operator.identity"] == "ana"
        assert a["algenta.operator.action"] == "override"
        assert a["algenta.operator.path"] is True
    _, override = children(spans, answered)
    a = attrs(override)
    assert a["algenta.operator.path"] is True and a["algenta.operator.identity"] == "ana"
    assert a["algenta.escalation.id"] == escalation_id and a["gen_ai.tool.call.id"] == "c2"
    assert a["algenta.outcome"] == "receipt"
    assert [e.name for e in answered.events] == ["algenta.receipt", "algenta.operator_decision"]
    reported = next(s for s in children(spans, run2) if s.name == "denial_handler_idempotency")
    assert attrs(reported)["algenta.policy"] == "report"

    # --- one trace id: the span, the engine's execution log, the receipt
    model_receipt, operator_receipt = out["receipts"]
    assert (model_receipt["source"], operator_receipt["source"]) == ("model", "operator")
    for receipt, span in ((model_receipt, delivered), (operator_receipt, override)):
        [execution] = engine.executions(receipt["decision_id"])
        assert receipt["trace_id"] == execution["trace_id"] == trace_hex(span)
        assert attrs(span)["algenta.receipt.trace_id"] == trace_hex(span)
        assert attrs(span)["algenta.execution.id"] == execution["execution_id"]
        tag = execution["metadata"]["algenta_graph"]
        assert tag["traceparent"] == (
            f"00-{trace_hex(span)}-{format_span_id(span.context.span_id)}-"
            + tag["traceparent"][-2:]
        )
    assert model_receipt["trace_id"] == trace_hex(run1)
    assert operator_receipt["trace_id"] == trace_hex(run2)

    # --- the metrics, counted exactly
    metrics = telemetry.metrics()
    assert metric_points(metrics, "algenta.executions") == {
        labels(outcome="receipt", source="model"): 1,
        labels(outcome="denial", source="model", gate="confidence"): 1,
        labels(outcome="receipt", source="operator"): 1,
        labels(outcome="denial", source="thread_receipts", gate="idempotency"): 1,
    }
    assert metric_points(metrics, "algenta.denials") == {
        labels(gate="confidence", policy="escalate", source="model"): 1,
        labels(gate="idempotency", policy="report", source="thread_receipts"): 1,
    }
    assert metric_points(metrics, "algenta.escalations.raised") == {labels(gate="confidence"): 1}
    answered_labels = labels(gate="confidence", operator__action="override")
    assert metric_points(metrics, "algenta.escalations.answered") == {answered_labels: 1}
    assert metric_points(metrics, "algenta.escalation.decision_time") == {answered_labels: 1}
    assert metric_points(metrics, "algenta.escalations.expired") == {}
    assert metric_points(metrics, "algenta.retrieval.duration") == {frozenset(): 1}
    engine_calls = metric_points(metrics, "mcp.client.operation.duration")
    by_tool = {dict(k)["gen_ai.tool.name"]: v for k, v in engine_calls.items()}
    assert by_tool == {"execute_decision": 3, "get_decision": 1, "get_contract": 1}
    assert metric_points(metrics, "algenta.engine.errors") == {}


class CrashBeforeReceiptIsSaved(AsyncSqliteSaver):
    """Refuses every checkpoint write that would persist a receipt (a process dying there)."""

    async def aput_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        if any(channel == "receipts" and value for channel, value in writes):
            raise RuntimeError("process died before the receipt was checkpointed")
        await super().aput_writes(config, writes, task_id, task_path)

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if checkpoint["channel_values"].get("receipts"):
            raise RuntimeError("process died before the receipt was checkpointed")
        return await super().aput(config, checkpoint, metadata, new_versions)


async def test_a_crash_and_resume_keep_the_deliverys_trace_id(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path, telemetry: Telemetry
) -> None:
    db = str(tmp_path / "cp.sqlite")
    async with open_connection(engine) as conn:
        decision = await log_decision(conn)
        replies = [execute(decision, webhook.url, "c1"), "delivered"]
        async with CrashBeforeReceiptIsSaved.from_conn_string(db) as saver:
            graph = telemetry.instrument(
                await create_governed_agent(
                    ScriptedChatModel(replies=replies),
                    connection=conn,
                    checkpointer=saver,
                    single_process=True,
                )
            )
            with pytest.raises(RuntimeError, match="process died"):
                await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
    [delivery] = [s for s in telemetry.spans if s.name == "tools/call execute_decision"]
    telemetry.exporter.clear()
    # a new process: a new connection and saver on the same file resume the thread
    async with open_connection(engine) as conn2, AsyncSqliteSaver.from_conn_string(db) as saver2:
        graph2 = telemetry.instrument(
            await create_governed_agent(
                ScriptedChatModel(replies=["delivered"]),
                connection=conn2,
                checkpointer=saver2,
                single_process=True,
            )
        )
        out = await graph2.ainvoke(None, config("t"))
    assert len(webhook.received) == 1  # delivered once
    [receipt] = out["receipts"]
    [execution] = engine.executions(decision)
    assert receipt["source"] == "recovered"
    # the recovered receipt, the engine's execution and the delivery span share one trace id
    assert receipt["trace_id"] == execution["trace_id"] == trace_hex(delivery)
    spans = telemetry.spans
    [run2] = [s for s in spans if s.parent is None]
    assert run2.context.trace_id != delivery.context.trace_id  # a new run, a new trace ...
    governed = next(s for s in children(spans, run2) if s.name == "governed_tool")
    [event] = [e for e in governed.events if e.name == "algenta.receipt"]
    assert dict(event.attributes or {})["algenta.receipt.trace_id"] == trace_hex(delivery)
    assert dict(event.attributes or {})["algenta.source"] == "recovered"
    # ... whose recovery links to the span that delivered: the engine kept its traceparent
    reads = [s for s in children(spans, governed) if s.name == "tools/call get_decision"]
    links = [link for s in reads for link in s.links]
    assert links and all(link.context.span_id == delivery.context.span_id for link in links)
    assert all(link.context.trace_id == delivery.context.trace_id for link in links)
    assert {dict(link.attributes or {})["algenta.link.reason"] for link in links} == {"execution"}
    repeat = next(s for s in children(spans, governed) if s.name == "tools/call execute_decision")
    assert (attrs(repeat)["algenta.outcome"], attrs(repeat)["algenta.gate"]) == (
        "denial",
        "idempotency",
    )
    metrics = metric_points(telemetry.metrics(), "algenta.executions")
    # the first run's node finished (its receipt counted) before the write that died
    assert metrics == {
        labels(outcome="receipt", source="model"): 1,
        labels(outcome="receipt", source="recovered"): 1,
    }


class RecordingTracer(BaseTracer):
    """Every LangChain run, as a tracer (LangSmith's) receives it; no network."""

    def __init__(self) -> None:
        super().__init__()
        self.finished: list[Run] = []

    def _persist_run(self, run: Run) -> None:
        pass

    def _end_trace(self, run: Run) -> None:
        super()._end_trace(run)
        self.finished.append(run)


def walk(run: Run) -> Iterator[Run]:
    yield run
    for child in run.child_runs:
        yield from walk(child)


async def test_langchain_runs_carry_the_governance(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path, telemetry: Telemetry
) -> None:
    recorder = RecordingTracer()
    async with open_connection(engine) as conn:
        low = await log_decision(conn, confidence=0.3)
        replies = [execute(low, webhook.url, "c1"), "done"]
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:
            graph = telemetry.instrument(
                await create_governed_agent(
                    ScriptedChatModel(replies=replies),
                    connection=conn,
                    checkpointer=saver,
                    single_process=True,
                )
            )
            cfg = {**config("t"), "callbacks": [recorder]}
            await graph.ainvoke({"messages": [("user", "go")]}, cfg)
            await graph.ainvoke(OVERRIDE, cfg)
    runs = [r for root in recorder.finished if root.parent_run_id is None for r in walk(root)]
    records = [r for r in runs if r.name == "algenta.engine execute_decision"]
    assert len(records) == 2
    by_id = {r.id: r for r in runs}
    denial, receipt = records
    assert denial.parent_run_id is not None and receipt.parent_run_id is not None
    assert by_id[denial.parent_run_id].name in ("governed_tool", "execute_decision")
    assert by_id[receipt.parent_run_id].name == "denial_handler_confidence"
    meta = denial.extra["metadata"]
    assert meta["algenta.outcome"] == "denial" and meta["algenta.gate"] == "confidence"
    assert meta["algenta.decision.id"] == low and meta["gen_ai.tool.call.id"] == "c1"
    assert {"algenta:outcome:denial", "algenta:gate:confidence"} <= set(denial.tags or [])
    meta = receipt.extra["metadata"]
    assert meta["algenta.outcome"] == "receipt" and meta["algenta.operator.identity"] == "ana"
    assert meta["algenta.operator.path"] is True
    assert {"algenta:outcome:receipt", "algenta:operator:ana"} <= set(receipt.tags or [])
    # the LangChain run names the OpenTelemetry span of the same call
    spans = {format_span_id(s.context.span_id): s for s in telemetry.spans}
    for record in records:
        span = spans[record.extra["metadata"]["otel.span_id"]]
        assert span.name == "tools/call execute_decision"
        assert record.extra["metadata"]["otel.trace_id"] == trace_hex(span)
    assert "nonce" not in str(receipt.inputs) and "idempotency_key" not in str(receipt.inputs)


async def test_every_mcp_request_carries_the_traceparent_of_its_span(
    wire: WireServer, telemetry: Telemetry
) -> None:
    async with EngineConnection(wire.url, profile="execute") as conn:
        before = len(wire.methods())
        replies = [
            call("get_contract", {}, "c1"),
            execute("receipt_text", "http://h/x", "c2"),
            execute("mcp_error:confidence", "http://h/x", "c3"),
            "done",
        ]
        graph = telemetry.instrument(
            await create_governed_agent(
                ScriptedChatModel(replies=replies), connection=conn, on_denial="report"
            )
        )
        await graph.ainvoke({"messages": [("user", "go")]}, config("t"))
    sent = [r for r in wire.methods()[before:] if r["method"] == "tools/call"]
    assert [r["tool"] for r in sent] == ["get_contract", "execute_decision", "execute_decision"]
    spans = {
        format_span_id(s.context.span_id): s
        for s in telemetry.spans
        if s.name.startswith("tools/call")
    }
    for request in sent:
        header = request["traceparent"]
        assert header is not None and request["meta"]["traceparent"] == header
        context = span_context_of(header)
        assert context is not None
        span = spans[format_span_id(context.span_id)]  # the span of that very call
        assert span.name == f"tools/call {request['tool']}"
        assert span.parent is not None and span.context.trace_id == context.trace_id


async def test_the_receipts_command_shows_each_receipts_trace_id(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path, telemetry: Telemetry
) -> None:
    db = tmp_path / "runs.sqlite"
    async with open_connection(engine) as conn:
        decision = await log_decision(conn)
        replies = [execute(decision, webhook.url, "c1"), "sent"]
        async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
            graph = telemetry.instrument(
                await create_governed_agent(
                    ScriptedChatModel(replies=replies),
                    connection=conn,
                    checkpointer=saver,
                    single_process=True,
                )
            )
            out = await graph.ainvoke({"messages": [("user", "go")]}, config("t1"))
    [receipt] = out["receipts"]
    [span] = [s for s in telemetry.spans if s.name == "tools/call execute_decision"]
    assert receipt["trace_id"] == trace_hex(span)
    table = cli("receipts", "--db", str(db), timeout=60)
    assert table.returncode == 0, table.stderr
    [row] = [line for line in table.stdout.splitlines() if " receipt " in line]
    assert row.split()[:3] == ["t1", "receipt", decision]
    assert row.endswith(f"source=model trace={trace_hex(span)}")


async def test_with_nothing_configured_nothing_is_added_but_langsmith_still_sees_governance(
    wire: WireServer,
) -> None:
    recorder = RecordingTracer()
    async with EngineConnection(wire.url, profile="execute") as conn:
        before = len(wire.methods())
        replies = [execute("mcp_error:confidence", "http://h/x", "c1"), "done"]
        graph = await create_governed_agent(
            ScriptedChatModel(replies=replies), connection=conn, on_denial="report"
        )
        assert instrument(graph) is graph  # the global providers are the API's no-ops
        out = await graph.ainvoke(
            {"messages": [("user", "go")]}, {**config("t"), "callbacks": [recorder]}
        )
    [request] = [r for r in wire.methods()[before:] if r["method"] == "tools/call"]
    assert request["traceparent"] is None and request["meta"] is None
    assert "traceparent" not in request["arguments"]["metadata"]["algenta_graph"]
    denied = next(m for m in out["messages"] if getattr(m, "tool_call_id", None) == "c1")
    assert "algenta_trace" not in (denied.artifact or {})  # the state is as it was
    runs = [r for root in recorder.finished if root.parent_run_id is None for r in walk(root)]
    [record] = [r for r in runs if r.name == "algenta.engine execute_decision"]
    assert record.extra["metadata"]["algenta.outcome"] == "denial"
    assert record.extra["metadata"]["algenta.gate"] == "confidence"
    assert "otel.trace_id" not in record.extra["metadata"]


SECRETS = {
    "agent": "tok-agent-0f3c9a",
    "operator": "tok-operator-7b21e4",
    "url": "url-s3cret-51d0",
    "hook_password": "hook-pass-9e77",
    "hook_token": "hook-s3cret-2c4a",
    "metadata": "meta-s3cret-a8f1",
}
"""Every credential the run below handles: engine keys, a tool server's URL token, a webhook
URL's user info and query token, a secret in the caller's metadata."""
CONTENT = ("hook_password", "hook_token", "metadata")
"""Those that are argument values (the model's own messages carry them: conversation)."""


def _found(text: str, names: Sequence[str]) -> list[str]:
    return [n for n in names if SECRETS[n] in text]


def _span_text(span: ReadableSpan) -> str:
    parts = [span.name, repr(dict(span.attributes or {})), str(span.status.description)]
    parts += [f"{e.name} {dict(e.attributes or {})!r}" for e in span.events]
    parts += [repr(dict(link.attributes or {})) for link in span.links]
    return "\n".join(parts)


def _run_text(run: Run) -> str:
    return "\n".join(
        repr(x) for x in (run.name, run.inputs, run.outputs, run.error, run.extra, run.tags)
    )


@pytest.mark.parametrize("capture", [False, True], ids=["default", "capture_content"])
async def test_no_token_key_or_url_credential_reaches_a_trace(
    start_engine: Any, webhook: WebhookReceiver, tmp_path: Path, capture: bool
) -> None:
    from tool_process import tool_process

    from algenta_graph._net import free_port
    from algenta_graph.engine import ApiKey

    keys = {
        SECRETS["agent"]: ApiKey("graph-worker", frozenset({"agent"}), execute=True),
        SECRETS["operator"]: ApiKey("ops-desk", frozenset({"operator"}), execute=True),
    }
    engine: ReferenceEngine = start_engine(keys=keys)
    scheme, rest = webhook.url.split("://", 1)
    hook = f"{scheme}://hook-user:{SECRETS['hook_password']}@{rest}?token={SECRETS['hook_token']}"
    telemetry = Telemetry()
    recorder = RecordingTracer()
    with tool_process(free_port(), tmp_path / "crm.log", "json") as crm:
        extra = {"crm": {**crm.connection(), "url": f"{crm.url}?key={SECRETS['url']}"}}
        async with EngineConnection(
            engine.url,
            profile="execute",
            api_key=SECRETS["agent"],
            operator_api_key=SECRETS["operator"],
            extra_servers=extra,
        ) as conn:
            low = await log_decision(conn, confidence=0.3)
            crm.stop(signal.SIGKILL)  # its calls now fail, naming its URL
            replies = [
                call("refund", {"account_id": "a1", "amount": 5}, "r1"),
                execute(low, hook, "c1", metadata={"api_token": SECRETS["metadata"]}),
                "done",
            ]
            graph = instrument(
                await create_governed_agent(
                    ScriptedChatModel(replies=replies),
                    connection=conn,
                    checkpointer=InMemorySaver(),
                ),
                tracer_provider=telemetry.tracer_provider,
                meter_provider=telemetry.meter_provider,
                capture_content=capture,
            )
            cfg: Any = {**config("t"), "callbacks": [recorder]}
            await graph.ainvoke({"messages": [("user", "go")]}, cfg)
            out = await graph.ainvoke(OVERRIDE, cfg)
    assert out["receipts"][-1]["safety_overridden"] is True  # sent with the operator key
    assert len(webhook.requests) == 1
    runs = [r for root in recorder.finished if root.parent_run_id is None for r in walk(root)]
    [record] = [r for r in runs if r.name == "algenta.engine execute_decision"][-1:]
    spans = telemetry.spans
    [failed] = [s for s in spans if s.name == "tools/call refund"]
    assert failed.status.description and "[redacted]" in failed.status.description
    [sent] = [
        s for s in spans if s.name == "tools/call execute_decision" and s.attributes
        and s.attributes.get("algenta.operator.path")
    ]  # fmt: skip
    keys_and_urls = ("agent", "operator", "url")
    # never, anywhere: not in a span, not in any LangChain run (the whole tree)
    assert [(_span_text(s), _found(_span_text(s), keys_and_urls)) for s in spans
            if _found(_span_text(s), keys_and_urls)] == []  # fmt: skip
    assert [r.name for r in runs if _found(_run_text(r), keys_and_urls)] == []
    if not capture:  # argument values: not on the spans, not in the governance run
        assert [s.name for s in spans if _found(_span_text(s), CONTENT)] == []
        assert _found(_run_text(record), CONTENT) == []
        assert record.inputs["arguments"] == sorted(record.inputs["arguments"])
        assert "webhook_url" in record.inputs["arguments"]  # named, not shown
        assert record.outputs and record.outputs["execution_status"] == "delivered"
        assert "gen_ai.tool.call.arguments" not in (sent.attributes or {})
    else:  # opted in: the values are there (the default above is not vacuous)
        executes = [s for s in spans if s.name == "tools/call execute_decision"]
        shown = " ".join(str((s.attributes or {})["gen_ai.tool.call.arguments"]) for s in executes)
        assert _found(shown, CONTENT) == ["hook_password", "hook_token", "metadata"]
        assert _found(_run_text(record), CONTENT) != []
        assert "gen_ai.tool.call.result" in (sent.attributes or {})
