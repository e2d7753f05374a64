"""One engine call, traced: its span, its ``traceparent``, its metrics, its LangSmith run.

:class:`EngineCall` is what :mod:`algenta_graph.connection.engine` wraps around every MCP
``tools/call`` (and ``tools/list``):

- a ``CLIENT`` span named ``tools/call <tool>`` (the MCP conventions': ``mcp.method.name``,
  ``gen_ai.operation.name = execute_tool``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
  ``server.*``, ``error.type``), the child of the node that made the call
  (:func:`~algenta_graph.telemetry.runs.current_parent`); on ``execute_decision`` the decision,
  the outcome, the gate, the operator path and identity, the receipt's trace id;
- the trace context for the engine (:attr:`EngineCall.meta`): the W3C ``traceparent`` (and
  ``tracestate``, ``baggage``) of that span, sent in the request's ``params._meta`` as
  SEP-414 and the MCP conventions ask, and as HTTP headers by the transport
  (:mod:`algenta_graph.connection.transport`), where the engine reads it into the receipt's
  ``trace_id``; on ``execute_decision`` it is also kept in the execution's
  ``metadata.algenta_graph.traceparent`` (:meth:`EngineCall.tag`), so whoever reads the
  execution back later (a recovery after a crash) links to the span that sent it;
- ``mcp.client.operation.duration`` and ``algenta.engine.errors``;
- for ``execute_decision`` inside a LangChain run, a child run named ``algenta.engine
  execute_decision`` whose metadata and tags carry the gate, the decision, the outcome and the
  operator, so a LangSmith trace shows governance without opening the state.

Argument values and results are content, recorded only when the telemetry captures content
(``Telemetry(capture_content=True)``, the OpenTelemetry GenAI conventions' opt-in
``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result``): by default the span has none, and
the LangChain run's inputs are the tool and its argument names, its outputs the outcome's
governance facts (never the webhook URL, the caller's metadata or the payload summary). An
error is recorded without the credentials its message may name
(:mod:`algenta_graph.telemetry.redaction`).

Without a configured SDK the span is a no-op and no ``traceparent`` exists, so nothing is
added to the request.

>>> EngineCall("tools/call", "get_contract", "http://127.0.0.1:8000/mcp").meta is None
True
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timezone
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from langchain_core.runnables.config import var_child_runnable_config
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from algenta_graph.telemetry import names
from algenta_graph.telemetry.instruments import Telemetry
from algenta_graph.telemetry.redaction import record_error, without_credentials
from algenta_graph.telemetry.runs import current_parent

if TYPE_CHECKING:
    from algenta_graph.connection.outcomes import ExecutionOutcome

__all__ = [
    "CALL_SCOPE",
    "CallScope",
    "EngineCall",
    "default_telemetry",
    "now_iso",
    "outcome_of",
    "span_context_of",
]

_W3C = TraceContextTextMapPropagator()
_TRACE_KEYS = ("traceparent", "tracestate", "baggage")
_DEFAULT: list[Telemetry] = []


def default_telemetry() -> Telemetry:
    """The instruments of engine calls made outside an instrumented graph (global providers)."""
    if not _DEFAULT:
        _DEFAULT.append(Telemetry())
    return _DEFAULT[0]


@dataclass
class CallScope:
    """What a catalog call (:meth:`EngineConnection.call_tool`) tells the engine call under it.

    The model's tool call id goes down; the trace context the call was sent under comes back up
    (the adapters' tool runs in between are opaque).
    """

    tool_call_id: str | None = None
    """The model's tool call being answered."""
    traceparent: str | None = None
    """Set by the engine call: the ``traceparent`` it was sent with."""
    instrumented: bool = False
    """Set by the engine call: it ran inside an instrumented graph run."""


CALL_SCOPE: ContextVar[CallScope | None] = ContextVar("algenta_call_scope", default=None)
"""The catalog call being made in this context, if any."""


def span_context_of(traceparent: Any) -> trace.SpanContext | None:
    """The span context a W3C ``traceparent`` names, or None when it is not one.

    >>> span_context_of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").trace_id > 0
    True
    >>> span_context_of("junk") is None
    True
    """
    if not isinstance(traceparent, str):
        return None
    found = trace.get_current_span(_W3C.extract({"traceparent": traceparent})).get_span_context()
    return found if found.is_valid else None


def outcome_of(outcome: ExecutionOutcome) -> str:
    """An ``execute_decision`` outcome's name (:data:`~algenta_graph.telemetry.names.Outcome`)."""
    if outcome.kind == "denial":
        return "denial"
    if outcome.kind == "failure":
        return "failed"
    status = getattr(outcome, "execution_status", "unknown")
    return "receipt" if status == "delivered" else str(status)


def _recorded() -> bool:
    """Whether the current LangChain run has a handler that records runs (LangSmith's, ...).

    The telemetry handler itself does not count: it has the span already.
    """
    config = var_child_runnable_config.get()
    callbacks = config.get("callbacks") if config else None
    handlers = getattr(callbacks, "handlers", callbacks)
    return isinstance(handlers, list) and any(
        not getattr(h, "algenta_telemetry", False) for h in handlers
    )


@functools.lru_cache(maxsize=64)
def _server(url: str) -> dict[str, Any]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return {}
    out: dict[str, Any] = {}
    if parts.hostname:
        out[names.SERVER_ADDRESS] = parts.hostname
        if port is None and parts.scheme in ("http", "https"):
            port = 80 if parts.scheme == "http" else 443
        if port is not None:
            out[names.SERVER_PORT] = port
    if parts.scheme in ("http", "https"):
        out[names.NETWORK_TRANSPORT] = "tcp"
    return out


class EngineCall:
    """The telemetry of one MCP request to an engine (see the module docs).

    Use it as a context manager around the request (the span is current inside, so the
    transport's own requests nest under it), then :meth:`answered` or :meth:`failed`.

    Args:
        method: ``tools/call`` or ``tools/list``.
        tool: the tool called (``None`` for ``tools/list``).
        url: the server's URL (``server.address`` / ``server.port``).
        arguments: the call's arguments (the decision, the operator path's tag are read).
        operator: whether this is the operator path's ``execute_decision``.
        shown: the arguments as a trace may show them (the graph-supplied ones left out);
            their values are recorded only when the telemetry captures content.
    """

    def __init__(
        self,
        method: str,
        tool: str | None,
        url: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        operator: bool = False,
        shown: Mapping[str, Any] | None = None,
    ) -> None:
        parent, entry = current_parent()
        self.telemetry = entry.telemetry if entry and entry.telemetry else default_telemetry()
        self.instrumented = entry is not None
        self.tool = tool
        self.scope = CALL_SCOPE.get()
        # outside an instrumented graph run, with nothing configured: nothing to record
        self.active = self.instrumented or self.telemetry.configured
        self.recorded = _recorded()
        """Whether a LangChain handler records runs here (the governance run is made then)."""
        self.span: trace.Span = trace.INVALID_SPAN
        self.meta: dict[str, str] | None = None
        self.traceparent: str | None = None
        self._use: Any = None
        self._started = time.perf_counter()
        self.tag: Mapping[str, Any] = {}
        self.shown: Mapping[str, Any] = shown or {}
        self.capture = self.telemetry.capture_content
        """Whether argument values and results are recorded (opt-in content)."""
        self.governed = False
        self.base: dict[str, Any] = {}
        self.attributes: dict[str, Any] = {}
        if self.scope is not None:
            self.scope.instrumented = self.instrumented
        if not (self.active or self.recorded):
            return  # the common default: nothing configured, nobody recording
        args = arguments or {}
        metadata = args.get("metadata")
        tag = metadata.get("algenta_graph") if isinstance(metadata, Mapping) else None
        self.tag = tag if isinstance(tag, Mapping) else {}
        self.base = {names.MCP_METHOD_NAME: method, **_server(url)}
        if tool is not None:
            self.base[names.GEN_AI_TOOL_NAME] = tool
            self.base[names.GEN_AI_OPERATION_NAME] = "execute_tool"
        attributes = dict(self.base)
        call_id = self.scope.tool_call_id if self.scope else self.tag.get("tool_call_id")
        if isinstance(call_id, str) and call_id:
            attributes[names.GEN_AI_TOOL_CALL_ID] = call_id
        decision = args.get("decision_id")
        if isinstance(decision, str):
            attributes[names.ATTR_DECISION_ID] = decision
        if operator:
            attributes[names.ATTR_OPERATOR_PATH] = True
            for key, attr in (
                ("operator", names.ATTR_OPERATOR_IDENTITY),
                ("escalation_id", names.ATTR_ESCALATION_ID),
            ):
                if isinstance(self.tag.get(key), str):
                    attributes[attr] = self.tag[key]
        self.attributes = attributes
        if not self.active:
            return
        if self.capture and tool is not None:
            attributes = {**attributes, names.GEN_AI_TOOL_CALL_ARGUMENTS: _json(self.shown)}
        span_name = names.engine_span_name(tool) if tool else method
        self.span = self.telemetry.tracer.start_span(
            span_name, context=parent, kind=SpanKind.CLIENT, attributes=attributes
        )
        carrier: dict[str, str] = {}
        if self.span.get_span_context().is_valid:
            ctx = trace.set_span_in_context(self.span, parent)
            propagate.inject(carrier, context=ctx)
            if "traceparent" not in carrier:  # the engine reads W3C, whatever else is set
                _W3C.inject(carrier, context=ctx)
        self.meta = {k: v for k, v in carrier.items() if k in _TRACE_KEYS} or None
        self.traceparent = self.meta.get("traceparent") if self.meta else None
        if self.scope is not None:
            self.scope.traceparent = self.traceparent
        self._started = time.perf_counter()

    @property
    def wants_answer(self) -> bool:
        """Whether :meth:`answered` reads the answer (else the caller need not parse it)."""
        return self.active or self.recorded

    def tag_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """``execute_decision``'s arguments with the ``traceparent`` in the graph's own tag.

        Only when the graph tagged the call (``metadata.algenta_graph``) and a trace exists;
        else ``arguments`` unchanged.
        """
        self.governed = True
        metadata = arguments.get("metadata")
        tag = metadata.get("algenta_graph") if isinstance(metadata, Mapping) else None
        if self.traceparent is None or not isinstance(tag, Mapping):
            return arguments
        assert isinstance(metadata, Mapping)
        tagged = {**tag, "traceparent": self.traceparent}
        return {**arguments, "metadata": {**metadata, "algenta_graph": tagged}}

    def __enter__(self) -> EngineCall:
        """Make the call's span current (the transport's requests nest under it)."""
        if not self.active:
            return self
        self._use = trace.use_span(
            self.span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        )
        self._use.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Leave the span current no longer (it is ended by :meth:`answered` / :meth:`failed`)."""
        if self._use is not None:
            self._use.__exit__(exc_type, exc, tb)
            self._use = None

    def _metrics(self, error: str | None) -> None:
        if not self.active:
            return
        attributes = dict(self.base)
        if error is not None:
            attributes[names.ERROR_TYPE] = error
            self.telemetry.engine_errors.add(
                1,
                {
                    names.GEN_AI_TOOL_NAME: self.tool or "",
                    names.ERROR_TYPE: error,
                },
            )
        self.telemetry.engine_duration.record(time.perf_counter() - self._started, attributes)

    def failed(self, exc: BaseException) -> None:
        """The request raised (the connection's typed error, a cancellation): end the span."""
        error = type(exc).__name__
        record_error(self.span, exc)
        self._metrics(error)
        self.span.end()

    async def answered(
        self,
        *,
        is_error: bool,
        outcome: ExecutionOutcome | None = None,
        body: Any = None,
    ) -> None:
        """The engine answered: record what it said, end the span, record the LangSmith run.

        Args:
            is_error: the MCP result's ``isError``.
            outcome: ``execute_decision``'s parsed outcome.
            body: ``get_decision``'s JSON body (the executions read back are linked to).
        """
        error = "tool_error" if is_error else None
        facts: dict[str, Any] = {}
        if outcome is not None:
            facts[names.ATTR_OUTCOME] = outcome_of(outcome)
            gate = getattr(outcome, "gate", None)
            if isinstance(gate, str):
                facts[names.ATTR_GATE] = gate
            dumped = outcome.model_dump(mode="json") if outcome.kind == "receipt" else {}
            for key, attr in (
                ("execution_id", names.ATTR_EXECUTION_ID),
                ("trace_id", names.ATTR_RECEIPT_TRACE_ID),
            ):
                if isinstance(dumped.get(key), str):
                    facts[attr] = dumped[key]
            # a denial or a failure is the engine's answer, not a failed request
            error = None if outcome.kind != "failure" else (error or "no_outcome")
        if error is not None:
            facts[names.ERROR_TYPE] = error
            self.span.set_status(Status(StatusCode.ERROR, error))
        if facts:
            self.span.set_attributes(facts)
        if outcome is not None and self.capture:
            result = _json(outcome.model_dump(mode="json"))
            self.span.set_attribute(names.GEN_AI_TOOL_CALL_RESULT, result)
        if body is not None:
            self._link_executions(body)
        self._metrics(error)
        self.span.end()
        if outcome is not None and self.recorded:
            await self._langsmith_run(outcome, facts)

    def _link_executions(self, body: Any) -> None:
        """Link to the span that sent each execution read back (in another trace)."""
        executions = body.get("executions") if isinstance(body, Mapping) else None
        own = self.span.get_span_context().trace_id
        for execution in executions if isinstance(executions, list) else []:
            meta = execution.get("metadata") if isinstance(execution, Mapping) else None
            tag = meta.get("algenta_graph") if isinstance(meta, Mapping) else None
            found = span_context_of(tag.get("traceparent")) if isinstance(tag, Mapping) else None
            if found is None or found.trace_id == own:
                continue
            attributes = {names.ATTR_LINK_REASON: "execution"}
            if isinstance(execution.get("execution_id"), str):
                attributes[names.ATTR_EXECUTION_ID] = execution["execution_id"]
            self.span.add_link(found, attributes)

    async def _langsmith_run(self, outcome: ExecutionOutcome, facts: Mapping[str, Any]) -> None:
        """A child LangChain run of the current run, its metadata and tags the governance.

        Its inputs: the tool and its argument names (their values with content capture); its
        outputs: the outcome's governance facts (the whole outcome with content capture).
        """
        from langchain_core.runnables import RunnableLambda

        metadata: dict[str, Any] = {
            k: v
            for k, v in {**self.attributes, **facts}.items()
            if k.startswith(names.PREFIX) or k in (names.GEN_AI_TOOL_CALL_ID,)
        }
        context = self.span.get_span_context()
        if context.is_valid:
            metadata[names.OTEL_TRACE_ID] = trace.format_trace_id(context.trace_id)
            metadata[names.OTEL_SPAN_ID] = trace.format_span_id(context.span_id)
        tags = [f"algenta:outcome:{facts.get(names.ATTR_OUTCOME)}"]
        if names.ATTR_GATE in facts:
            tags.append(f"algenta:gate:{facts[names.ATTR_GATE]}")
        if names.ATTR_OPERATOR_IDENTITY in metadata:
            tags.append(f"algenta:operator:{metadata[names.ATTR_OPERATOR_IDENTITY]}")
        if self.capture:
            result = outcome.model_dump(mode="json")
            arguments: Any = dict(self.shown)
        else:
            result = governance_facts(outcome)
            arguments = sorted(self.shown)  # their names only
        record: RunnableLambda[Any, dict[str, Any]] = RunnableLambda(
            lambda _: result, name=names.LANGSMITH_RUN_NAME
        )
        await record.ainvoke(
            {"tool": self.tool, "arguments": arguments},
            {
                "run_name": f"{names.LANGSMITH_RUN_NAME} {self.tool}",
                "tags": tags,
                "metadata": metadata,
            },
        )


_FACTS = {
    "receipt": (
        "kind",
        "decision_id",
        "execution_status",
        "response_code",
        "executed_at",
        "policy_snapshot_id",
        "schema_snapshot_id",
        "manifest_version",
        "safety_overridden",
        "receipt_version",
        "execution_id",
        "approval_state",
        "trace_id",
    ),
    "denial": ("kind", "gate", "code", "status_code", "message", "override_hint"),
    "failure": ("kind", "message"),
}
"""What an outcome's governance facts are, by kind (its webhook URL, the caller's metadata,
its payload summary and a failure's raw answer are content)."""


def governance_facts(outcome: ExecutionOutcome) -> dict[str, Any]:
    """What a trace shows of an outcome without content capture: its governance facts.

    Texts (a denial's message, a failure's) without the credentials they may name.
    """
    dumped = outcome.model_dump(mode="json")
    facts = {k: dumped[k] for k in _FACTS.get(outcome.kind, ("kind",)) if k in dumped}
    return {k: without_credentials(v) if isinstance(v, str) else v for k, v in facts.items()}


def _json(value: Any) -> str:
    return json.dumps(value, default=str, sort_keys=True)


def now_iso() -> str:
    """The current time, ISO 8601 UTC (when a catalog call was answered)."""
    return datetime.now(timezone.utc).isoformat()
