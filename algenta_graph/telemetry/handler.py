"""The graph's spans and metrics, from LangChain callbacks: :func:`instrument`.

The nodes are not instrumented themselves: LangGraph runs every node as a child run with
callbacks, and :class:`TelemetryHandler`, attached to the compiled graph's config, sees each
run start and end, its name and its output. It makes

- one ``invoke_agent <graph>`` span per graph run (``gen_ai.conversation.id``: the thread),
  the child of whatever span is current where the run is invoked;
- one span per node run, named after the node, under it; ``retrieve_tools`` carries the
  selected tools (``gen_ai.operation.name = retrieval``), every node what it recorded (a span
  event per receipt, denial, operator decision and failure, and their outcomes, gates and
  decisions), a denial handler its gate and policy, whether it stopped for an operator, and
  the operator's identity and action once answered;
- one ``chat <model>`` span per model call;
- the metrics of the records (:mod:`~algenta_graph.telemetry.instruments`): executions by
  outcome, denials by gate, escalations raised / answered / expired and the time to decide,
  the retrieval's latency.

An escalation that waits for hours is two runs, two traces: the run that answers it links to
the span of the engine call whose denial raised it (``algenta.link.reason = escalation``),
read from the checkpointed state, so the link holds across processes and restarts. Engine
calls (:mod:`~algenta_graph.telemetry.engine_calls`) find their parent here
(:mod:`~algenta_graph.telemetry.runs`).

Example::

    graph = instrument(await create_governed_agent(...))   # the factory does it already
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, TypeVar
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.runnables import Runnable
from langgraph.errors import GraphBubbleUp, GraphInterrupt
from langgraph.types import Command
from opentelemetry import metrics, trace
from opentelemetry.trace import Link, Span, SpanKind

from algenta_graph.governance.gates import GATE_NAMES
from algenta_graph.telemetry import names
from algenta_graph.telemetry.instruments import Telemetry
from algenta_graph.telemetry.records import (
    Asked,
    Fact,
    asked_escalations,
    message_ids,
    seconds_between,
    step_policy,
    update_facts,
    update_of,
)
from algenta_graph.telemetry.redaction import record_error
from algenta_graph.telemetry.runs import REGISTRY, RunEntry
from algenta_graph.topology import GOVERNED_TOOL_NODE, RETRIEVE_NODE, handler_node_name

__all__ = ["TelemetryHandler", "instrument"]

logger = logging.getLogger(__name__)

_HANDLER_GATES = {handler_node_name(g): g for g in GATE_NAMES}
_R = TypeVar("_R", bound=Runnable[Any, Any])


def instrument(
    graph: _R,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
    always: bool = False,
    capture_content: bool = False,
) -> _R:
    """``graph`` with a :class:`TelemetryHandler` in its config (idempotent).

    With nothing configured (no provider given, and the global ones the API's no-ops) the graph
    is returned as it is: a handler costs every LangChain run its callbacks, and would record
    nowhere. Configure OpenTelemetry before building the graph, or pass ``always=True``.

    Args:
        graph: a compiled governed graph (any LangChain runnable).
        tracer_provider: where spans go (default the global provider).
        meter_provider: where metrics go (default the global provider).
        always: attach the handler even when nothing is configured yet (an application that
            sets its providers after building the graph).
        capture_content: record argument values and results too (opt-in content, the
            OpenTelemetry GenAI conventions'; see :class:`Telemetry`). Off by default.

    Returns:
        The graph with the handler (``graph.with_config``); a graph already instrumented, or
        nothing configured, the graph as it is.
    """
    config = getattr(graph, "config", None) or {}
    callbacks = config.get("callbacks") if isinstance(config, dict) else None
    if isinstance(callbacks, list) and any(isinstance(c, TelemetryHandler) for c in callbacks):
        return graph
    telemetry = Telemetry(tracer_provider, meter_provider, capture_content=capture_content)
    if not (always or telemetry.configured):
        return graph
    handler = TelemetryHandler(telemetry)
    instrumented: _R = graph.with_config({"callbacks": [handler]})  # type: ignore[assignment]
    return instrumented


def _attributes(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


class TelemetryHandler(BaseCallbackHandler):
    """The callback handler behind :func:`instrument` (see the module docs).

    Called inline (``run_inline``), in the run's own thread and task, never in an executor;
    it never changes the caller's OpenTelemetry context.

    Args:
        telemetry: the tracer and instruments (default: from the global providers).
    """

    run_inline = True
    raise_error = False
    algenta_telemetry = True
    """Marks this handler: an engine call's LangChain run is for the other handlers."""

    def __init__(self, telemetry: Telemetry | None = None) -> None:
        self.telemetry = telemetry or Telemetry()

    # ------------------------------------------------------------------ runs

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A graph run (no known parent), a node run, or another run (recorded, no span)."""
        metadata = metadata or {}
        name = kwargs.get("name") or (serialized or {}).get("name") or "graph"
        parent = REGISTRY.get(parent_run_id)
        if parent is None:
            self._graph_start(run_id, str(name), inputs, metadata)
            return
        node = metadata.get("langgraph_node")
        if node == name and any(t.startswith("graph:step:") for t in tags or ()):
            self._node_start(run_id, parent_run_id, str(node), inputs, metadata)
            return
        REGISTRY.add(run_id, parent_run_id, span=None, telemetry=self.telemetry)

    def _graph_start(self, run_id: UUID, name: str, inputs: Any, metadata: dict[str, Any]) -> None:
        attributes = _attributes(
            **{
                names.GEN_AI_OPERATION_NAME: "invoke_agent",
                names.GEN_AI_AGENT_NAME: name,
                names.GEN_AI_CONVERSATION_ID: _str(metadata.get("thread_id")),
            }
        )
        if isinstance(inputs, Command) and inputs.resume is not None:
            attributes[names.ATTR_RESUME] = True
        span = self.telemetry.tracer.start_span(
            f"invoke_agent {name}", kind=SpanKind.INTERNAL, attributes=attributes
        )
        entry = REGISTRY.add(
            run_id, None, span=span, telemetry=self.telemetry, started=time.perf_counter()
        )
        # decided once per run: nothing configured leaves only the bookkeeping of the runs
        entry.facts["tracing"] = span.is_recording()
        entry.facts["counting"] = self.telemetry.counting

    def _node_start(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        node: str,
        inputs: Any,
        metadata: dict[str, Any],
    ) -> None:
        above = REGISTRY.nearest(parent_run_id)
        root = REGISTRY.get(above.root) if above is not None else None
        tracing = bool(root and root.facts.get("tracing"))
        if not tracing and not (root and root.facts.get("counting")):
            # nothing configured: the run is recorded (engine calls and LangSmith runs find
            # their graph run), on the graph run's no-op span; nothing is read or counted
            REGISTRY.add(
                run_id,
                parent_run_id,
                span=root.span if root else None,
                telemetry=self.telemetry,
                owned=False,
            )
            return
        attributes = _attributes(
            **{names.ATTR_NODE: node, names.ATTR_STEP: _int(metadata.get("langgraph_step"))}
        )
        facts: dict[str, Any] = {}
        links: list[Link] = []
        if node == RETRIEVE_NODE:
            attributes[names.GEN_AI_OPERATION_NAME] = "retrieval"
        elif node == GOVERNED_TOOL_NODE:
            facts["known"] = message_ids(inputs)
        elif node in _HANDLER_GATES:
            gate = _HANDLER_GATES[node]
            attributes[names.ATTR_GATE] = gate
            policy = step_policy(inputs, gate)
            if policy is not None:
                attributes[names.ATTR_POLICY] = policy
            asks = asked_escalations(inputs, gate)
            facts["asks"] = {a.tool_call_id: a for a in asks}
            own = root.span.get_span_context().trace_id if root and root.span else None
            links = [_escalation_link(a) for a in asks if _elsewhere(a, own)]
        span: Span
        if tracing:
            context = trace.set_span_in_context(above.span) if above and above.span else None
            span = self.telemetry.tracer.start_span(
                node, context=context, kind=SpanKind.INTERNAL, attributes=attributes, links=links
            )
            if root is not None and root.span is not None:
                for link in links:
                    root.span.add_link(link.context, link.attributes)
        else:  # counted, not traced
            span = root.span if root and root.span else trace.INVALID_SPAN
        entry = REGISTRY.add(
            run_id,
            parent_run_id,
            span=span,
            telemetry=self.telemetry,
            started=time.perf_counter(),
            node=node,
            owned=tracing,
        )
        entry.facts = facts

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A node's records onto its span and into the metrics; a graph run's end."""
        entry = REGISTRY.get(run_id)
        if entry is None or entry.span is None:
            return
        if entry.parent is None:
            entry.span.end()
            REGISTRY.drop_root(run_id)
            return
        if entry.node is not None:
            try:
                self._node_end(entry, update_of(outputs))
            except Exception:  # telemetry never costs a governed step
                logger.debug("telemetry: reading %s's update failed", entry.node, exc_info=True)
        if entry.owned:
            entry.span.end()

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A run that raised: an interrupt waits for an operator; anything else is an error."""
        entry = REGISTRY.get(run_id)
        if entry is None or entry.span is None or not entry.owned:
            return
        if isinstance(error, GraphBubbleUp):
            if isinstance(error, GraphInterrupt) and entry.node in _HANDLER_GATES:
                entry.span.set_attribute(names.ATTR_ESCALATION_WAITING, True)
                root = REGISTRY.get(entry.root)
                if root is not None and root.span is not None:
                    root.span.set_attribute(names.ATTR_ESCALATION_WAITING, True)
        else:
            record_error(entry.span, error)
        entry.span.end()
        if entry.parent is None:
            REGISTRY.drop_root(run_id)

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool run inside a node: recorded, so the engine call under it finds the node."""
        if REGISTRY.get(parent_run_id) is not None:
            REGISTRY.add(run_id, parent_run_id, span=None, telemetry=self.telemetry)

    # ------------------------------------------------------------------ model calls

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A ``chat <model>`` span under the node that calls the model."""
        above = REGISTRY.nearest(parent_run_id)
        if above is None or above.span is None or not above.span.is_recording():
            return
        metadata = metadata or {}
        model = _str(metadata.get("ls_model_name"))
        attributes = _attributes(
            **{
                names.GEN_AI_OPERATION_NAME: "chat",
                names.GEN_AI_PROVIDER_NAME: _str(metadata.get("ls_provider")),
                names.GEN_AI_REQUEST_MODEL: model,
            }
        )
        span = self.telemetry.tracer.start_span(
            f"chat {model}" if model else "chat",
            context=trace.set_span_in_context(above.span),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        REGISTRY.add(run_id, parent_run_id, span=span, telemetry=self.telemetry)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        """The model's token usage, when it reports it; the span's end."""
        entry = REGISTRY.get(run_id)
        if entry is None or entry.span is None:
            return
        generation = response.generations[0][0] if response.generations else None
        usage = getattr(getattr(generation, "message", None), "usage_metadata", None)
        if isinstance(generation, ChatGeneration) and usage:
            entry.span.set_attributes(
                {
                    names.GEN_AI_USAGE_INPUT_TOKENS: int(usage.get("input_tokens", 0)),
                    names.GEN_AI_USAGE_OUTPUT_TOKENS: int(usage.get("output_tokens", 0)),
                }
            )
        entry.span.end()

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A model call that raised."""
        entry = REGISTRY.get(run_id)
        if entry is None or entry.span is None:
            return
        record_error(entry.span, error)
        entry.span.end()

    # ------------------------------------------------------------------ records

    def _node_end(self, entry: RunEntry, update: Any) -> None:
        span, t = entry.span, self.telemetry
        assert span is not None
        if entry.node == RETRIEVE_NODE:
            selected = update.get("selected_tools")
            if isinstance(selected, list):
                span.set_attribute(names.ATTR_SELECTED_TOOLS, [str(s) for s in selected])
            t.retrieval_duration.record(time.perf_counter() - entry.started)
        facts = update_facts(update, entry.facts.get("known", ()))
        if not facts:
            return
        executions = [f for f in facts if f.kind in ("receipt", "denial", "failure")]
        halts = any(f.kind == "denial" and f.policy == "halt" for f in facts)
        for fact in facts:
            span.add_event(_EVENTS[fact.kind], fact.attributes)
        span.set_attributes(
            {
                names.ATTR_OUTCOMES: [str(f.outcome) for f in executions],
                names.ATTR_GATES: [str(f.gate) for f in facts if f.kind == "denial"],
                names.ATTR_DECISION_IDS: [str(f.decision_id) for f in facts if f.decision_id],
            }
        )
        for fact in executions:
            attributes = _attributes(
                **{
                    names.ATTR_OUTCOME: fact.outcome,
                    names.ATTR_SOURCE: fact.source,
                    names.ATTR_GATE: fact.gate if fact.kind == "denial" else None,
                }
            )
            t.executions.add(1, attributes)
            if fact.kind != "denial":
                continue
            t.denials.add(
                1,
                _attributes(
                    **{
                        names.ATTR_GATE: fact.gate,
                        names.ATTR_POLICY: fact.policy,
                        names.ATTR_SOURCE: fact.source,
                    }
                ),
            )
            if fact.policy == "escalate" and fact.source == "model" and not halts:
                t.escalations_raised.add(1, _attributes(**{names.ATTR_GATE: fact.gate}))
        self._answers(entry, [f for f in facts if f.kind == "operator_decision"])

    def _answers(self, entry: RunEntry, decisions: Sequence[Fact]) -> None:
        if not decisions:
            return
        t = self.telemetry
        asks: dict[str, Asked] = entry.facts.get("asks") or {}
        for fact in decisions:
            gate = _attributes(**{names.ATTR_GATE: fact.gate})
            if fact.expired:
                t.escalations_expired.add(1, gate)
                continue
            answered = {**gate, **_attributes(**{names.ATTR_OPERATOR_ACTION: fact.action})}
            t.escalations_answered.add(1, answered)
            ask = asks.get(fact.tool_call_id or "")
            waited = seconds_between(ask.at if ask else None, fact.time)
            if waited is not None and waited >= 0:
                t.decision_time.record(waited, answered)
        operators = sorted({f.operator for f in decisions if f.operator})
        actions = sorted({f.action for f in decisions if f.action})
        summary = _attributes(
            **{
                names.ATTR_OPERATOR_IDENTITY: ", ".join(operators) or None,
                names.ATTR_OPERATOR_ACTION: ", ".join(actions) or None,
                names.ATTR_OPERATOR_PATH: "override" in actions,
            }
        )
        assert entry.span is not None
        entry.span.set_attributes(summary)
        root = REGISTRY.get(entry.root)
        if root is not None and root.span is not None:
            root.span.set_attributes(summary)


_EVENTS = {
    "receipt": names.EVENT_RECEIPT,
    "denial": names.EVENT_DENIAL,
    "operator_decision": names.EVENT_OPERATOR_DECISION,
    "failure": names.EVENT_FAILURE,
}


def _elsewhere(ask: Asked, own_trace: int | None) -> bool:
    """Whether an escalation was raised in another trace than this run's (an earlier run)."""
    return ask.raised_in is not None and ask.raised_in.trace_id != own_trace


def _escalation_link(ask: Asked) -> Link:
    return Link(
        ask.raised_in,
        _attributes(
            **{
                names.ATTR_LINK_REASON: "escalation",
                names.ATTR_ESCALATION_ID: ask.escalation_id,
                names.GEN_AI_TOOL_CALL_ID: ask.tool_call_id,
            }
        ),
    )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
