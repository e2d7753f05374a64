"""The telemetry vocabulary: every span name, attribute, metric and LangSmith key, one each.

Spans follow the OpenTelemetry GenAI semantic conventions where one applies (``gen_ai.*``,
``mcp.*``, ``server.*``, ``error.type``: Development status, as of semantic-conventions-genai
v0.1); what the conventions have no name for is this project's, under one prefix,
:data:`PREFIX` (``algenta.``). ``docs/TRACING.md`` lists them with their meaning.

>>> ATTR_GATE, ATTR_OUTCOME, METRIC_EXECUTIONS
('algenta.gate', 'algenta.outcome', 'algenta.executions')
>>> engine_span_name("execute_decision")
'tools/call execute_decision'
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = [
    "ATTR_DECISION_ID",
    "ATTR_DECISION_IDS",
    "ATTR_ESCALATION_ID",
    "ATTR_ESCALATION_WAITING",
    "ATTR_EXECUTION_ID",
    "ATTR_GATE",
    "ATTR_GATES",
    "ATTR_LINK_REASON",
    "ATTR_NODE",
    "ATTR_OPERATOR_ACTION",
    "ATTR_OPERATOR_IDENTITY",
    "ATTR_OPERATOR_PATH",
    "ATTR_OUTCOME",
    "ATTR_OUTCOMES",
    "ATTR_POLICY",
    "ATTR_RECEIPT_TRACE_ID",
    "ATTR_RESUME",
    "ATTR_SELECTED_TOOLS",
    "ATTR_SOURCE",
    "ATTR_STEP",
    "ERROR_TYPE",
    "EVENT_DENIAL",
    "EVENT_FAILURE",
    "EVENT_OPERATOR_DECISION",
    "EVENT_RECEIPT",
    "GEN_AI_AGENT_NAME",
    "GEN_AI_CONVERSATION_ID",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "INSTRUMENTATION_NAME",
    "LANGSMITH_RUN_NAME",
    "MCP_METHOD_NAME",
    "METRIC_DECISION_TIME",
    "METRIC_DENIALS",
    "METRIC_ENGINE_DURATION",
    "METRIC_ENGINE_ERRORS",
    "METRIC_ESCALATIONS_ANSWERED",
    "METRIC_ESCALATIONS_EXPIRED",
    "METRIC_ESCALATIONS_RAISED",
    "METRIC_EXECUTIONS",
    "METRIC_RETRIEVAL_DURATION",
    "NETWORK_TRANSPORT",
    "OTEL_SPAN_ID",
    "OTEL_TRACE_ID",
    "PREFIX",
    "SERVER_ADDRESS",
    "SERVER_PORT",
    "TRACE_ARTIFACT_KEY",
    "Outcome",
    "engine_span_name",
]

INSTRUMENTATION_NAME: Final = "algenta_graph"
"""The instrumentation scope of every span and metric (the package's name)."""
PREFIX: Final = "algenta."
"""The prefix of every attribute, event and metric this project names itself."""

Outcome = Literal["receipt", "denial", "failed", "unknown"]
"""An execution's outcome: a delivered receipt, a named-gate denial, a failed delivery or an
answer that is neither a receipt nor a denial (``failed``), a delivery whose end is unknown."""

# ---------------------------------------------------------------- the conventions' names

GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
"""``invoke_agent`` (a run of the graph), ``chat`` (a model call), ``execute_tool`` (an engine
call), ``retrieval`` (``retrieve_tools``)."""
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
"""The compiled graph's name (``algenta_governed_agent`` by default)."""
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
"""The LangGraph thread id."""
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
"""A chat model's provider, as LangChain reports it (``ls_provider``)."""
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
"""A chat model's name, as LangChain reports it (``ls_model_name``)."""
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
"""Input tokens of a model call, when the model reports them."""
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
"""Output tokens of a model call, when the model reports them."""
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
"""The engine tool called (its MCP name)."""
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
"""The model's tool call an engine call answers (the escalated call's, on the operator path)."""
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
"""Opt-in content (``capture_content=True``): an engine call's arguments as JSON, without the
graph-supplied ``idempotency_key`` and ``nonce``. Never recorded otherwise."""
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
"""Opt-in content (``capture_content=True``): ``execute_decision``'s parsed outcome as JSON.
Never recorded otherwise."""
MCP_METHOD_NAME: Final = "mcp.method.name"
"""Always ``tools/call`` for an engine call."""
SERVER_ADDRESS: Final = "server.address"
"""The engine's host."""
SERVER_PORT: Final = "server.port"
"""The engine's port."""
NETWORK_TRANSPORT: Final = "network.transport"
"""``tcp`` (streamable HTTP)."""
ERROR_TYPE: Final = "error.type"
"""Why an engine call failed: ``tool_error`` (an MCP error result) or the error's class name."""

# ---------------------------------------------------------------- this project's attributes

ATTR_NODE: Final = "algenta.node"
"""The graph node a span ran (``retrieve_tools``, ``model``, ``governed_tool``,
``denial_handler_<gate>``)."""
ATTR_STEP: Final = "algenta.step"
"""The LangGraph step of a node run."""
ATTR_RESUME: Final = "algenta.resume"
"""True on a run that resumed a thread waiting on an interrupt (an operator's answer)."""
ATTR_GATE: Final = "algenta.gate"
"""The gate: of a denial, of a denial handler, of an escalation answered."""
ATTR_POLICY: Final = "algenta.policy"
"""The policy a denial was raised under and its handler applied (``report``, ``escalate``,
``halt``)."""
ATTR_DECISION_ID: Final = "algenta.decision.id"
"""The decision an engine call or a record is about."""
ATTR_EXECUTION_ID: Final = "algenta.execution.id"
"""The engine's id of an execution (engines that version their receipts)."""
ATTR_OUTCOME: Final = "algenta.outcome"
"""An execution's outcome (:data:`Outcome`)."""
ATTR_SOURCE: Final = "algenta.source"
"""Where a record came from: ``model``, ``operator``, ``recovered``, ``thread_receipts``."""
ATTR_RECEIPT_TRACE_ID: Final = "algenta.receipt.trace_id"
"""The trace id the engine wrote into a receipt (from the call's ``traceparent``)."""
ATTR_OPERATOR_PATH: Final = "algenta.operator.path"
"""True when an execution went over the operator path (an override, with its credential)."""
ATTR_OPERATOR_IDENTITY: Final = "algenta.operator.identity"
"""Who answered an escalation (the authenticated identity when served)."""
ATTR_OPERATOR_ACTION: Final = "algenta.operator.action"
"""What the operator decided: ``override`` or ``decline``."""
ATTR_ESCALATION_ID: Final = "algenta.escalation.id"
"""An escalation's own identity (``esc_<hex>``)."""
ATTR_ESCALATION_WAITING: Final = "algenta.escalation.waiting"
"""True on the node (and the run) that stopped to wait for an operator's answer."""
ATTR_SELECTED_TOOLS: Final = "algenta.retrieval.selected_tools"
"""The tools ``retrieve_tools`` selected for the turn, in rank order (its timing is the span's
duration and :data:`METRIC_RETRIEVAL_DURATION`)."""
ATTR_OUTCOMES: Final = "algenta.outcomes"
"""On a node span: the outcome of each execution the node recorded, in order."""
ATTR_GATES: Final = "algenta.gates"
"""On a node span: the gate of each denial the node recorded, in order."""
ATTR_DECISION_IDS: Final = "algenta.decision.ids"
"""On a node span: the decision of each record the node wrote, in order."""
ATTR_LINK_REASON: Final = "algenta.link.reason"
"""Why a span links to another: ``escalation`` (the span whose denial raised the escalation
this run answers) or ``execution`` (the span that sent an execution this call read back)."""

EVENT_RECEIPT: Final = "algenta.receipt"
"""A span event per receipt a node recorded."""
EVENT_DENIAL: Final = "algenta.denial"
"""A span event per denial a node recorded."""
EVENT_OPERATOR_DECISION: Final = "algenta.operator_decision"
"""A span event per operator decision a node recorded."""
EVENT_FAILURE: Final = "algenta.failure"
"""A span event per execution that ended in neither a receipt nor a denial (nothing recorded)."""

# ---------------------------------------------------------------- metrics

METRIC_EXECUTIONS: Final = "algenta.executions"
"""Counter: executions recorded, by ``algenta.outcome`` and ``algenta.source`` (and
``algenta.gate`` for a denial)."""
METRIC_DENIALS: Final = "algenta.denials"
"""Counter: denials recorded, by ``algenta.gate``, ``algenta.policy``, ``algenta.source``."""
METRIC_ESCALATIONS_RAISED: Final = "algenta.escalations.raised"
"""Counter: escalations raised (a denial under ``escalate`` in a step that does not halt), by
``algenta.gate``."""
METRIC_ESCALATIONS_ANSWERED: Final = "algenta.escalations.answered"
"""Counter: operator answers recorded, by ``algenta.gate`` and ``algenta.operator.action``."""
METRIC_ESCALATIONS_EXPIRED: Final = "algenta.escalations.expired"
"""Counter: escalations recorded as expired (an operator record saying ``expired``), by
``algenta.gate``."""
METRIC_DECISION_TIME: Final = "algenta.escalation.decision_time"
"""Histogram (s): from an escalation's denial to its operator's answer, by ``algenta.gate``
and ``algenta.operator.action``."""
METRIC_RETRIEVAL_DURATION: Final = "algenta.retrieval.duration"
"""Histogram (s): each ``retrieve_tools`` run."""
METRIC_ENGINE_DURATION: Final = "mcp.client.operation.duration"
"""Histogram (s), the MCP conventions' own: each engine call, by ``mcp.method.name``,
``gen_ai.tool.name``, ``server.*`` and ``error.type`` when it failed."""
METRIC_ENGINE_ERRORS: Final = "algenta.engine.errors"
"""Counter: engine calls that failed, by ``gen_ai.tool.name`` and ``error.type``."""

# ---------------------------------------------------------------- elsewhere

TRACE_ARTIFACT_KEY: Final = "algenta_trace"
"""The key, in a catalog call's ``ToolMessage.artifact``, of ``{"traceparent", "at"}``: the
trace context the call was sent under and when it was answered. It rides in checkpointed state,
so a run hours later (an operator's answer) links to it and times the decision."""
LANGSMITH_RUN_NAME: Final = "algenta.engine"
"""The name of the LangChain run recorded for each ``execute_decision`` (LangSmith shows its
metadata and tags: gate, decision, outcome, operator). Its inputs are the tool and the names of
its arguments, its outputs the outcome's governance facts; the argument values and the whole
outcome (the webhook URL, the caller's metadata, the payload summary) only with
``capture_content=True``, as on the spans."""
OTEL_TRACE_ID: Final = "otel.trace_id"
"""In a LangSmith run's metadata: the OpenTelemetry trace id of the engine call."""
OTEL_SPAN_ID: Final = "otel.span_id"
"""In a LangSmith run's metadata: the OpenTelemetry span id of the engine call."""


def engine_span_name(tool: str) -> str:
    """The name of an engine call's span: ``tools/call <tool>`` (the MCP conventions')."""
    return f"tools/call {tool}"
