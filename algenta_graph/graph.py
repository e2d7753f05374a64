"""The governed graph: nodes, named-gate routing, operator escalation, receipts in state.

::

    START -> retrieve_tools -> model --(no tool call)--> END
                                 |  (tool calls)
                                 v
                           governed_tool --(ok / failed)--> model
                                 |--(idempotency)--> denial_handler_idempotency --.
                                 |--(confidence)---> denial_handler_confidence ---+--> model | END
                                 |--(risk_floor)---> denial_handler_risk_floor ---'
                                 '--(halt: an unknown gate)--> END

Usage::

    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.types import Command
    from algenta_graph import governed_agent

    async with (
        AsyncSqliteSaver.from_conn_string("runs.sqlite") as saver,
        governed_agent("openai:gpt-5", profile="execute", checkpointer=saver) as graph,
    ):
        cfg = {"configurable": {"thread_id": "t1"}}
        out = await graph.ainvoke({"messages": [("user", "execute decision dec_1 ...")]}, cfg)
        out["receipts"], out["denials"], out["operator_decisions"]
        if out.get("__interrupt__"):          # an escalated denial waits for an operator
            out = await graph.ainvoke(
                Command(resume={"action": "override", "operator": "ana", "reason": "..."}), cfg
            )

What happens to a denial: ``governed_tool`` records it in ``denials`` and answers the model's
call with a ToolMessage naming the gate and the reason (the model cannot override it); the
gate's handler then applies its policy (:data:`DEFAULT_POLICIES`, ``on_denial=``):

- ``report``: back to the model, which tells the user;
- ``halt``: the run ends, the denial in state;
- ``escalate``: ``interrupt()`` with ``{gate, code, message, override_hint, decision_id,
  webhook_url, override_flag, tool_call_id}``; resume with ``Command(resume={"action":
  "override" | "decline", "operator": str, "reason": str})``. An override re-executes on the
  operator path (``force`` for idempotency, ``override_safety`` for confidence and risk_floor),
  never through a model-facing tool; the receipt (or the new denial) and an
  :class:`~algenta_graph.state.OperatorDecision` are recorded, and the model is told. A
  malformed answer interrupts again with an ``error`` and executes nothing. Resuming needs a
  checkpointer (``langgraph dev`` supplies one).

A decision already delivered in the thread is never sent again (the thread's receipts are
checked first, an idempotency denial with ``source="thread_receipts"``). A delivery whose
checkpoint was lost (a crash between the webhook and the checkpoint write) is recognised on
resume: every execution carries ``metadata.algenta_graph = {thread_id, tool_call_id}`` (set by
the graph, never the model), and an idempotency denial for this thread's own delivery is
replaced by the engine's receipt (``source="recovered"``).

Per-run settings. Besides the build-time arguments, a run may narrow its behaviour through
``config["configurable"]`` (this is what LangGraph Studio's assistant configuration and
``langgraph_sdk`` ``config=`` set):

- ``profile``: a profile name; the run sees and may call only the tools of the graph's catalog
  that this profile also allows (it can narrow the connection's profile, never widen it);
- ``top_k``: how many tools ``retrieve_tools`` selects (an int >= 1);
- ``on_denial``: ``{gate: "report" | "halt" | "escalate"}`` merged over the build-time policies.

Invalid values raise ``ValueError`` naming the key. The connection, catalog and BM25 index are
built once per graph (in :func:`build_governed_graph`), never per turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from pydantic import BaseModel, Field, ValidationError

from algenta_graph.contract import Profile, resolve_profile
from algenta_graph.errors import AlgentaGraphError, ToolNotInProfileError
from algenta_graph.models import resolve_model
from algenta_graph.outcomes import (
    KNOWN_GATES,
    ExecutionDenial,
    ExecutionFailure,
    ExecutionOutcome,
    ExecutionReceipt,
    parse_execution_outcome,
)
from algenta_graph.state import GovernedInput, GovernedState, OperatorDecision, OperatorResume

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.graph.state import CompiledStateGraph

    from algenta_graph.connection import EngineConnection
    from algenta_graph.retrieval import ToolIndex

__all__ = [
    "DEFAULT_POLICIES",
    "DEFAULT_SYSTEM_PROMPT",
    "EXECUTE_TOOL",
    "OVERRIDE_FLAGS",
    "SEARCH_TOOL",
    "GovernedAgentSync",
    "aclose_governed_agent",
    "build_governed_graph",
    "create_governed_agent",
    "create_governed_agent_sync",
    "governed_agent",
]

Policy = Literal["report", "halt", "escalate"]
POLICIES: tuple[str, ...] = ("report", "halt", "escalate")
DEFAULT_POLICIES: Mapping[str, Policy] = {
    "idempotency": "report",
    "confidence": "escalate",
    "risk_floor": "escalate",
    "unknown": "halt",
}
"""Default denial policy per gate; a gate the graph does not know always halts."""

OVERRIDE_FLAGS: Mapping[str, str] = {
    "idempotency": "force",
    "confidence": "override_safety",
    "risk_floor": "override_safety",
}
"""The operator-path flag that overrides each gate (never model-facing)."""

SEARCH_TOOL = "search_tools"
EXECUTE_TOOL = "execute_decision"
DEFAULT_SYSTEM_PROMPT = (
    "You are a governed agent working on an Algenta decision engine through tools. "
    "If the tool you need is not bound, call search_tools to find it. "
    "execute_decision is governed by named policy gates (idempotency, confidence, risk_floor): "
    "when a gate denies an execution, you cannot override it; tell the user which gate "
    "blocked which decision and why."
)

_NODE_MODEL = "model"
_NODE_RETRIEVE = "retrieve_tools"
_NODE_TOOLS = "governed_tool"
_OUTCOME_KEY = "algenta_outcome"
_HALT = "halt"
_BOUND_CACHE = 256


def handler_node_name(gate: str) -> str:
    """The node that applies the policy for ``gate``: ``denial_handler_<gate>``."""
    return f"denial_handler_{gate}"


class _SearchToolsArgs(BaseModel):
    query: str = Field(description="What you need a tool for, in a few words.")
    k: int = Field(default=5, ge=1, le=20, description="How many tools to return.")


async def _search_tools_placeholder(query: str, k: int = 5) -> str:
    raise RuntimeError("search_tools is answered inside the governed graph, not executed")


def _make_search_tool() -> BaseTool:
    return StructuredTool.from_function(
        coroutine=_search_tools_placeholder,
        name=SEARCH_TOOL,
        description=(
            "Search the catalog of tools available to you (BM25 over names, descriptions and "
            "parameters). The tools found become callable on your next step. Use it when none "
            "of your current tools fits the task."
        ),
        args_schema=_SearchToolsArgs,
    )


def _validate_policies(on_denial: Mapping[str, str] | None, where: str) -> dict[str, Policy]:
    policies: dict[str, Policy] = {}
    for gate, policy in (on_denial or {}).items():
        if gate not in (*KNOWN_GATES, "unknown"):
            raise ValueError(
                f"{where}: unknown gate {gate!r}; expected one of "
                f"{', '.join((*KNOWN_GATES, 'unknown'))}"
            )
        if policy not in POLICIES:
            raise ValueError(
                f"{where}[{gate!r}]: unknown policy {policy!r}; expected one of "
                f"{', '.join(POLICIES)}"
            )
        if gate == "unknown" and policy != "halt":
            raise ValueError(
                f"{where}['unknown']: a gate the graph does not know always halts "
                "(no override flag is known for it)"
            )
        policies[gate] = cast(Policy, policy)
    return policies


@dataclass(frozen=True)
class _RunSettings:
    profile: Profile | None
    top_k: int
    policies: Mapping[str, Policy]
    thread_id: str | None


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content)


def _last_step(messages: Sequence[BaseMessage]) -> tuple[AIMessage | None, list[ToolMessage]]:
    """The latest AI message with tool calls and the tool messages answering it."""
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        if isinstance(msg, AIMessage) and msg.tool_calls:
            ids = {c["id"] for c in msg.tool_calls}
            answers = [
                m for m in messages[i + 1 :] if isinstance(m, ToolMessage) and m.tool_call_id in ids
            ]
            return msg, answers
    return None, []


def _dump(outcome: ExecutionOutcome) -> dict[str, Any]:
    return outcome.model_dump(mode="json")


def _tool_message(
    content: str | list[Any],
    *,
    name: str,
    tool_call_id: str,
    outcome: str,
    status: Literal["success", "error"] = "success",
    artifact: Any = None,
    msg_id: str | None = None,
) -> ToolMessage:
    return ToolMessage(
        content=content,
        name=name,
        tool_call_id=tool_call_id,
        status=status,
        artifact=artifact,
        id=msg_id or str(uuid.uuid4()),
        response_metadata={_OUTCOME_KEY: outcome},
    )


def _denial_text(decision_id: Any, denial: ExecutionDenial) -> str:
    return (
        f"DENIED: execute_decision for decision {decision_id} was blocked by the "
        f"{denial.gate} gate ({denial.code}): {denial.message}. Nothing was executed. "
        "You (the model) cannot override this gate, and retrying will be denied again; "
        "only a human operator can override it, outside this conversation. "
        "Tell the user which gate blocked the decision and why."
    )


def _receipt_text(receipt: ExecutionReceipt, note: str = "") -> str:
    data = receipt.model_dump(mode="json")
    head = (
        f"Executed decision {receipt.decision_id}: {receipt.execution_status}"
        f" (webhook {receipt.webhook_url} answered {receipt.response_code})"
    )
    return f"{head}{note}.\nReceipt: {json.dumps(data, sort_keys=True)}"


def _for_decision(outcome: ExecutionOutcome, decision_id: str) -> ExecutionOutcome:
    """``outcome``, unless it is a receipt for another decision: that is a failure, never a
    receipt of this call (it would also block that other decision in this thread)."""
    if isinstance(outcome, ExecutionReceipt) and outcome.decision_id != decision_id:
        return ExecutionFailure(
            message=(
                f"the engine answered with a receipt for decision {outcome.decision_id!r}, "
                f"not the decision executed ({decision_id!r})"
            ),
            raw=outcome.model_dump_json(),
        )
    return outcome


def _plain_content(content: Any) -> str | list[Any]:
    """MCP text blocks joined into one string; any other content passed through unchanged."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(b, Mapping) and b.get("type") == "text" for b in content
    ):
        return "\n".join(str(b.get("text", "")) for b in content)
    return list(content) if isinstance(content, list) else str(content)


class _GovernedNodes:
    """The node implementations, sharing one connection, catalog and index per graph."""

    def __init__(
        self,
        connection: EngineConnection,
        model: BaseChatModel,
        index: ToolIndex,
        *,
        top_k: int,
        policies: Mapping[str, Policy],
        system_prompt: str | None,
    ) -> None:
        self.conn = connection
        self.model = model
        self.index = index
        self.top_k = top_k
        self.policies = policies
        self.system_prompt = system_prompt
        self.tools: dict[str, BaseTool] = {t.name: t for t in connection.tools}
        self.search_tool = _make_search_tool()
        # the model-facing schemas, converted once per graph; bound models cached per selection
        self.schemas: dict[str, dict[str, Any]] = {
            name: convert_to_openai_tool(tool) for name, tool in self.tools.items()
        }
        self.schemas[SEARCH_TOOL] = convert_to_openai_tool(self.search_tool)
        self._bound: OrderedDict[tuple[str, ...], Runnable[Any, BaseMessage]] = OrderedDict()

    def bound_model(self, names: Sequence[str]) -> Runnable[Any, BaseMessage]:
        """The model bound to ``names`` plus ``search_tools`` (a small LRU per selection)."""
        key = (*dict.fromkeys(n for n in names if n != SEARCH_TOOL), SEARCH_TOOL)
        bound = self._bound.get(key)
        if bound is None:
            bound = self.model.bind_tools([self.schemas[n] for n in key])
            self._bound[key] = bound
            if len(self._bound) > _BOUND_CACHE:
                self._bound.popitem(last=False)
        else:
            self._bound.move_to_end(key)
        return bound

    # ------------------------------------------------------------------ settings

    def settings(self, config: RunnableConfig | None) -> _RunSettings:
        conf: Mapping[str, Any] = (config or {}).get("configurable") or {}
        profile = conf.get("profile")
        resolved = resolve_profile(profile) if profile else None
        top_k = conf.get("top_k", self.top_k)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"configurable['top_k'] must be an int >= 1, got {top_k!r}")
        policies = dict(self.policies)
        policies.update(_validate_policies(conf.get("on_denial"), "configurable['on_denial']"))
        thread = conf.get("thread_id")
        return _RunSettings(resolved, top_k, policies, str(thread) if thread else None)

    def allowed(self, name: str, run: _RunSettings) -> bool:
        """Whether this run may see and call ``name`` (catalog, then the run's profile)."""
        if name not in self.tools:
            return False
        if run.profile is None or not self.conn.is_algenta_tool(name):
            return True
        return run.profile.allows(name)

    def allow_list(self, run: _RunSettings) -> list[str] | None:
        if run.profile is None:
            return None
        return [n for n in self.tools if self.allowed(n, run)]

    # ------------------------------------------------------------------ nodes

    async def retrieve_tools(self, state: GovernedState, config: RunnableConfig) -> dict[str, Any]:
        run = self.settings(config)
        query = next(
            (_text(m) for m in reversed(state.get("messages", [])) if isinstance(m, HumanMessage)),
            "",
        )
        hits = self.index.search(query, k=run.top_k, allow=self.allow_list(run)) if query else []
        return {
            "selected_tools": [h.tool_id for h in hits],
            # present (possibly empty) in every thread; the reducers only append
            "receipts": [],
            "denials": [],
            "operator_decisions": [],
        }

    async def call_model(self, state: GovernedState, config: RunnableConfig) -> dict[str, Any]:
        run = self.settings(config)
        names = [n for n in state.get("selected_tools") or [] if self.allowed(n, run)]
        bound = self.bound_model(names)
        messages: list[BaseMessage] = list(state.get("messages", []))
        if self.system_prompt:
            messages = [SystemMessage(self.system_prompt), *messages]
        reply = await bound.ainvoke(messages, config)
        return {"messages": [reply]}

    async def governed_tool(self, state: GovernedState, config: RunnableConfig) -> dict[str, Any]:
        run = self.settings(config)
        ai, answered = _last_step(state.get("messages", []))
        if ai is None:
            return {}
        done = {m.tool_call_id for m in answered}
        delivered = {
            r.get("decision_id")
            for r in state.get("receipts") or []
            if r.get("execution_status") == "delivered"
        }
        selected = list(state.get("selected_tools") or [])
        out_messages: list[ToolMessage] = []
        receipts: list[dict[str, Any]] = []
        denials: list[dict[str, Any]] = []
        for call in ai.tool_calls:
            call_id = call["id"] or ""
            if call_id in done:
                continue
            name, args = call["name"], dict(call.get("args") or {})
            if name == SEARCH_TOOL:
                message, hits = self._search(args, call_id, run)
                selected.extend(h for h in hits if h not in selected)
                out_messages.append(message)
                continue
            if not self.allowed(name, run):
                profile = run.profile.name if run.profile else self.conn.profile.name
                err = ToolNotInProfileError(name, profile)
                out_messages.append(
                    _tool_message(
                        f"Error: {err}",
                        name=name,
                        tool_call_id=call_id,
                        outcome="failed",
                        status="error",
                    )
                )
                continue
            if name == EXECUTE_TOOL and self.conn.is_algenta_tool(name):
                message, receipt, denial = await self._execute(
                    args, call_id, run.thread_id, delivered
                )
                if receipt is not None:
                    receipts.append(receipt)
                    if receipt.get("execution_status") == "delivered":
                        delivered.add(receipt.get("decision_id"))
                if denial is not None:
                    denials.append(denial)
                out_messages.append(message)
                continue
            out_messages.append(await self._plain_call(name, args, call_id))
        update: dict[str, Any] = {"messages": out_messages}
        if receipts:
            update["receipts"] = receipts
        if denials:
            update["denials"] = denials
        if selected != list(state.get("selected_tools") or []):
            update["selected_tools"] = selected
        return update

    def route_after_tools(self, state: GovernedState) -> str:
        """Name the outcome of the latest tool step: a gate, ``halt``, ``failed`` or ``ok``."""
        _, answered = _last_step(state.get("messages", []))
        outcomes = [m.response_metadata.get(_OUTCOME_KEY, "ok") for m in answered]
        for outcome in outcomes:
            if outcome.startswith("gate:") and outcome[5:] not in KNOWN_GATES:
                return _HALT
        for gate in KNOWN_GATES:
            if f"gate:{gate}" in outcomes:
                return gate
        return "failed" if "failed" in outcomes else "ok"

    @staticmethod
    def route_after_model(state: GovernedState) -> str:
        messages = state.get("messages", [])
        last = messages[-1] if messages else None
        if isinstance(last, AIMessage) and last.tool_calls:
            return "tool_calls"
        return "answer"

    # ------------------------------------------------------------------ tool calls

    def _search(
        self, args: Mapping[str, Any], call_id: str, run: _RunSettings
    ) -> tuple[ToolMessage, list[str]]:
        try:
            parsed = _SearchToolsArgs.model_validate(args)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'args'}: {e['msg']}" for e in exc.errors()
            )
            return (
                _tool_message(
                    f"Error: invalid search_tools arguments: {problems}",
                    name=SEARCH_TOOL,
                    tool_call_id=call_id,
                    outcome="failed",
                    status="error",
                ),
                [],
            )
        hits = self.index.search(parsed.query, k=parsed.k, allow=self.allow_list(run))
        found = [
            {
                "name": h.tool_id,
                "description": (self.tools[h.tool_id].description or "")[:200],
                "score": round(h.score, 3),
            }
            for h in hits
            if h.tool_id in self.tools
        ]
        body = json.dumps({"tools": found, "note": "these tools are callable on your next step"})
        return (
            _tool_message(body, name=SEARCH_TOOL, tool_call_id=call_id, outcome="ok"),
            [str(f["name"]) for f in found],
        )

    async def _plain_call(self, name: str, args: dict[str, Any], call_id: str) -> ToolMessage:
        try:
            result = await self.conn.call_tool(name, args, tool_call_id=call_id)
        except AlgentaGraphError as exc:
            return _tool_message(
                f"Error: {exc}", name=name, tool_call_id=call_id, outcome="failed", status="error"
            )
        status: Literal["success", "error"] = (
            "error" if getattr(result, "status", "success") == "error" else "success"
        )
        return _tool_message(
            _plain_content(result.content),
            name=name,
            tool_call_id=call_id,
            outcome="failed" if status == "error" else "ok",
            status=status,
            artifact=result.artifact,
        )

    async def _execute(
        self,
        args: dict[str, Any],
        call_id: str,
        thread_id: str | None,
        delivered: set[Any],
    ) -> tuple[ToolMessage, dict[str, Any] | None, dict[str, Any] | None]:
        decision_id = args.get("decision_id")
        webhook_url = args.get("webhook_url")
        if not isinstance(decision_id, str) or not isinstance(webhook_url, str):
            # malformed model arguments: named, never sent, never a crash of the graph
            bad = [
                f"{key} must be a string, got {type(value).__name__}"
                for key, value in (("decision_id", decision_id), ("webhook_url", webhook_url))
                if not isinstance(value, str)
            ]
            msg = _tool_message(
                f"Error: execute_decision was not called: {'; '.join(bad)}",
                name=EXECUTE_TOOL,
                tool_call_id=call_id,
                outcome="failed",
                status="error",
            )
            return msg, None, None
        if decision_id in delivered:
            denial = ExecutionDenial(
                gate="idempotency",
                code="execution_blocked_idempotency",
                message=(
                    f"decision {decision_id} was already delivered in this thread (its receipt "
                    "is in the thread's state); the graph did not send it to the engine again"
                ),
            )
            record = {
                **_dump(denial),
                "decision_id": decision_id,
                "webhook_url": webhook_url,
                "tool_call_id": call_id,
                "source": "thread_receipts",
            }
            msg = _tool_message(
                _denial_text(decision_id, denial),
                name=EXECUTE_TOOL,
                tool_call_id=call_id,
                outcome="gate:idempotency",
                status="error",
            )
            return msg, None, record
        metadata = dict(args["metadata"]) if isinstance(args.get("metadata"), Mapping) else {}
        metadata["algenta_graph"] = {"thread_id": thread_id, "tool_call_id": call_id}
        args = {**args, "metadata": metadata}
        try:
            result: Any = await self.conn.call_tool(EXECUTE_TOOL, args, tool_call_id=call_id)
        except AlgentaGraphError as exc:
            msg = _tool_message(
                f"Error: execute_decision for decision {decision_id} failed: {exc}",
                name=EXECUTE_TOOL,
                tool_call_id=call_id,
                outcome="failed",
                status="error",
            )
            return msg, None, None
        outcome = parse_execution_outcome(result)
        if isinstance(outcome, ExecutionDenial) and outcome.gate == "idempotency":
            recovered = await self._recover(decision_id, thread_id)
            if recovered is not None:
                record = {**_dump(recovered), "tool_call_id": call_id, "source": "recovered"}
                msg = _tool_message(
                    _receipt_text(
                        recovered, " (delivered earlier by this thread; receipt recovered)"
                    ),
                    name=EXECUTE_TOOL,
                    tool_call_id=call_id,
                    outcome="ok",
                )
                return msg, record, None
        outcome = _for_decision(outcome, decision_id)
        if isinstance(outcome, ExecutionReceipt):
            record = {**_dump(outcome), "tool_call_id": call_id, "source": "model"}
            delivered_ok = outcome.execution_status == "delivered"
            msg = _tool_message(
                _receipt_text(outcome),
                name=EXECUTE_TOOL,
                tool_call_id=call_id,
                outcome="ok" if delivered_ok else "failed",
                status="success" if delivered_ok else "error",
                artifact=getattr(result, "artifact", None),
            )
            return msg, record, None
        if isinstance(outcome, ExecutionDenial):
            record = {
                **_dump(outcome),
                "decision_id": decision_id,
                "webhook_url": webhook_url,
                "tool_call_id": call_id,
                "source": "model",
            }
            if "timeout_seconds" in args:
                record["timeout_seconds"] = args["timeout_seconds"]
            msg = _tool_message(
                _denial_text(decision_id, outcome),
                name=EXECUTE_TOOL,
                tool_call_id=call_id,
                outcome=f"gate:{outcome.gate}",
                status="error",
                artifact=getattr(result, "artifact", None),
            )
            return msg, None, record
        assert isinstance(outcome, ExecutionFailure)
        msg = _tool_message(
            f"Error: execute_decision for decision {decision_id} returned neither a receipt nor "
            f"a named-gate denial: {outcome.message}",
            name=EXECUTE_TOOL,
            tool_call_id=call_id,
            outcome="failed",
            status="error",
            artifact=getattr(result, "artifact", None),
        )
        return msg, None, None

    async def _find_execution(
        self, decision_id: Any, match: Callable[[Mapping[str, Any]], bool]
    ) -> ExecutionReceipt | None:
        """A delivered execution of ``decision_id`` on the engine whose metadata ``match``es."""
        if not isinstance(decision_id, str):
            return None
        try:
            record = await self.conn.get_decision(decision_id)
        except AlgentaGraphError:
            return None
        executions = record.get("executions") if isinstance(record, Mapping) else None
        for execution in executions or []:
            if not isinstance(execution, Mapping):
                continue
            meta = execution.get("metadata")
            tag = meta.get("algenta_graph") if isinstance(meta, Mapping) else None
            if not isinstance(tag, Mapping) or not match(tag):
                continue
            fields = {
                k: v
                for k, v in execution.items()
                if k not in {"force", "override_safety", "metadata", "kind"}
            }
            outcome = parse_execution_outcome(fields)
            if isinstance(outcome, ExecutionReceipt) and outcome.execution_status == "delivered":
                return outcome
        return None

    async def _recover(self, decision_id: Any, thread_id: str | None) -> ExecutionReceipt | None:
        """Crash recovery: this thread's own earlier delivery, read back from the engine."""
        if thread_id is None:
            return None
        return await self._find_execution(
            decision_id, lambda tag: tag.get("thread_id") == thread_id
        )

    # ------------------------------------------------------------------ denial handlers

    def make_handler(self, gate: str) -> Callable[..., Awaitable[Command[Any]]]:
        """The denial handler for one gate (one implementation, instantiated per gate)."""

        async def handler(state: GovernedState, config: RunnableConfig) -> Command[Any]:
            return await self._handle(gate, state, config)

        handler.__name__ = handler_node_name(gate)
        return handler

    async def _handle(
        self, gate: str, state: GovernedState, config: RunnableConfig
    ) -> Command[Any]:
        run = self.settings(config)
        policy = run.policies.get(gate, DEFAULT_POLICIES.get(gate, "halt"))
        if policy == "report":
            return Command(goto=_NODE_MODEL)
        if policy == "halt":
            return Command(goto=END)
        _, answered = _last_step(state.get("messages", []))
        step_ids = {m.tool_call_id for m in answered}
        pending = [
            d
            for d in state.get("denials") or []
            if d.get("tool_call_id") in step_ids
            and d.get("gate") == gate
            and d.get("source") in {"model", "thread_receipts"}
        ]
        # 1. every interrupt first: no side effect may precede one (the node re-runs on resume)
        answers: list[tuple[dict[str, Any], OperatorResume]] = []
        for denial in pending:
            payload = {
                "gate": gate,
                "code": denial.get("code"),
                "message": denial.get("message"),
                "override_hint": denial.get("override_hint"),
                "decision_id": denial.get("decision_id"),
                "webhook_url": denial.get("webhook_url"),
                "override_flag": OVERRIDE_FLAGS[gate],
                "tool_call_id": denial.get("tool_call_id"),
                "resume_with": {
                    "action": "override | decline",
                    "operator": "who decides",
                    "reason": "why",
                },
            }
            error: str | None = None
            while True:
                raw = interrupt({**payload, "error": error} if error else payload)
                try:
                    answers.append((denial, OperatorResume.model_validate(raw)))
                    break
                except ValidationError as exc:
                    error = "invalid resume payload: " + "; ".join(
                        f"{'.'.join(map(str, e['loc'])) or 'payload'}: {e['msg']}"
                        for e in exc.errors()
                    )
        # 2. side effects, after every interrupt has been answered
        receipts: list[dict[str, Any]] = []
        denials: list[dict[str, Any]] = []
        decisions: list[dict[str, Any]] = []
        messages: list[ToolMessage] = []
        by_call = {m.tool_call_id: m for m in answered}
        for denial, answer in answers:
            call_id = denial.get("tool_call_id")
            decision_id = denial.get("decision_id")
            flag = OVERRIDE_FLAGS[gate]
            note: str
            outcome_dump: dict[str, Any] | None = None
            if answer.action == "decline":
                result = "declined"
                note = (
                    f"Operator {answer.operator} reviewed the {gate} denial and DECLINED to "
                    f"override it ({answer.reason}). Decision {decision_id} was not executed."
                )
            else:
                outcome = await self._override(denial, answer, flag, run.thread_id)
                outcome_dump = _dump(outcome)
                if isinstance(outcome, ExecutionReceipt):
                    result = "receipt" if outcome.execution_status == "delivered" else "failed"
                    receipts.append({**outcome_dump, "tool_call_id": call_id, "source": "operator"})
                    note = (
                        f"Operator {answer.operator} OVERRODE the {gate} gate ({answer.reason}) "
                        f"with {flag}. " + _receipt_text(outcome)
                    )
                elif isinstance(outcome, ExecutionDenial):
                    result = "denied"
                    denials.append(
                        {
                            **outcome_dump,
                            "decision_id": decision_id,
                            "webhook_url": denial.get("webhook_url"),
                            "tool_call_id": call_id,
                            "source": "operator",
                        }
                    )
                    note = (
                        f"Operator {answer.operator} tried to override the {gate} gate, but the "
                        f"engine denied the override too: {outcome.gate} gate ({outcome.code}): "
                        f"{outcome.message}. Nothing was executed."
                    )
                else:
                    result = "failed"
                    note = (
                        f"Operator {answer.operator} overrode the {gate} gate, but the execution "
                        f"failed: {outcome.message}"
                    )
            decisions.append(
                OperatorDecision(
                    operator=answer.operator,
                    reason=answer.reason,
                    action=answer.action,
                    gate=gate,
                    decision_id=decision_id,
                    override_flag=flag,
                    result=result,  # type: ignore[arg-type]
                    outcome=outcome_dump,
                    tool_call_id=call_id,
                ).model_dump(mode="json")
            )
            original = by_call.get(call_id or "")
            if original is not None:
                messages.append(
                    _tool_message(
                        f"{note}\n(The model's call was first denied: {_text(original)})",
                        name=EXECUTE_TOOL,
                        tool_call_id=original.tool_call_id,
                        msg_id=original.id,
                        outcome=original.response_metadata.get(_OUTCOME_KEY, "ok"),
                        status="success" if result == "receipt" else "error",
                    )
                )
        return Command(
            goto=_NODE_MODEL,
            update={
                "messages": messages,
                "receipts": receipts,
                "denials": denials,
                "operator_decisions": decisions,
            },
        )

    async def _override(
        self, denial: Mapping[str, Any], answer: OperatorResume, flag: str, thread_id: str | None
    ) -> ExecutionOutcome:
        decision_id = denial.get("decision_id")
        webhook_url = denial.get("webhook_url")
        call_id = denial.get("tool_call_id")
        if not isinstance(decision_id, str) or not isinstance(webhook_url, str):
            return ExecutionFailure(
                message="the denied call named no decision_id/webhook_url; nothing to override"
            )

        # a crash after an override's delivery and before the checkpoint must not deliver twice
        def ours(tag: Mapping[str, Any]) -> bool:
            return (
                tag.get("tool_call_id") == call_id
                and tag.get("thread_id") == thread_id
                and tag.get("operator") is not None
            )

        previous = await self._find_execution(decision_id, ours)
        if previous is not None:
            return previous
        timeout = denial.get("timeout_seconds")
        try:
            outcome = await self.conn.execute_as_operator(
                decision_id,
                webhook_url,
                force=flag == "force",
                override_safety=flag == "override_safety",
                timeout_seconds=timeout if isinstance(timeout, (int, float)) else None,
                metadata={
                    "algenta_graph": {
                        "thread_id": thread_id,
                        "tool_call_id": call_id,
                        "operator": answer.operator,
                        "reason": answer.reason,
                    }
                },
            )
        except AlgentaGraphError as exc:
            return ExecutionFailure(message=f"operator execution failed: {exc}")
        if isinstance(outcome, ExecutionDenial) and outcome.gate == "idempotency":
            # our own override was still in flight when we looked above (a resumed process
            # races the crashed one's delivery); the engine serialised us behind it
            delivered = await self._find_execution(decision_id, ours)
            if delivered is not None:
                return delivered
        return _for_decision(outcome, decision_id)


def build_governed_graph(
    connection: EngineConnection,
    model: BaseChatModel | str | None = None,
    *,
    top_k: int = 5,
    on_denial: Mapping[str, str] | None = None,
    index: ToolIndex | None = None,
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
) -> StateGraph[Any, Any, Any, Any]:
    """Build the governed graph (uncompiled) over an **open** connection.

    The catalog (``connection.tools``) and the BM25 index over it are built here, once. Pass
    ``index`` to reuse one already built over the same tools. Compile it yourself with any
    checkpointer; consider ``durability="sync"`` when invoking (see :func:`create_governed_agent`).
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")
    policies: dict[str, Policy] = dict(DEFAULT_POLICIES)
    policies.update(_validate_policies(on_denial, "on_denial"))
    if index is None:
        from algenta_graph.retrieval import ToolIndex

        index = ToolIndex()
        index.add(connection.tools)
    nodes = _GovernedNodes(
        connection,
        resolve_model(model),
        index,
        top_k=top_k,
        policies=policies,
        system_prompt=system_prompt,
    )
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(GovernedState, input_schema=GovernedInput)
    graph.add_node(_NODE_RETRIEVE, nodes.retrieve_tools)
    graph.add_node(_NODE_MODEL, nodes.call_model)
    graph.add_node(_NODE_TOOLS, nodes.governed_tool)
    for gate in KNOWN_GATES:
        graph.add_node(
            handler_node_name(gate),
            nodes.make_handler(gate),
            destinations={_NODE_MODEL: "resolved", END: "halt"},
        )
    graph.add_edge(START, _NODE_RETRIEVE)
    graph.add_edge(_NODE_RETRIEVE, _NODE_MODEL)
    graph.add_conditional_edges(
        _NODE_MODEL, nodes.route_after_model, {"tool_calls": _NODE_TOOLS, "answer": END}
    )
    # one edge per (source, target) is drawn, labelled by the first key: "ok" shows for model
    path_map: dict[str, str] = {"ok": _NODE_MODEL, "failed": _NODE_MODEL}
    path_map.update({gate: handler_node_name(gate) for gate in KNOWN_GATES})
    path_map[_HALT] = END
    graph.add_conditional_edges(_NODE_TOOLS, nodes.route_after_tools, path_map)  # type: ignore[arg-type]
    return graph


# ---------------------------------------------------------------------- compiled agents

_OWNED: weakref.WeakKeyDictionary[Any, EngineConnection] = weakref.WeakKeyDictionary()


async def create_governed_agent(
    model: BaseChatModel | str | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    profile: str | None = None,
    top_k: int = 5,
    on_denial: Mapping[str, str] | None = None,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    extra_servers: Mapping[str, dict[str, Any]] | None = None,
    connection: EngineConnection | None = None,
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    durability: Literal["sync", "async", "exit"] | None = "sync",
    name: str = "algenta_governed_agent",
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Connect to the engine, list its tools and return the compiled governed graph.

    - ``model``: a chat model, an ``init_chat_model`` string (``"openai:gpt-5"``) or ``None``
      for the offline :class:`~algenta_graph.models.DemoChatModel` stand-in.
    - ``profile``: the tool profile (default ``"observe"``). With ``connection=`` the
      connection's profile applies and ``profile`` may only narrow it.
    - ``on_denial``: ``{gate: "report" | "halt" | "escalate"}`` over :data:`DEFAULT_POLICIES`.
    - ``durability``: the default checkpoint durability of every run (``"sync"``: a step's
      checkpoint is written before the next step starts); a run's own ``durability=`` wins.

    Without ``connection=``, the graph opens one and keeps it open for its life: close it with
    ``await aclose_governed_agent(graph)``, or use ``async with governed_agent(...) as graph``.
    """
    owns = connection is None
    if connection is None:
        from algenta_graph.connection import EngineConnection

        connection = EngineConnection(
            base_url,
            api_key=api_key,
            profile=profile or "observe",
            extra_servers=extra_servers,
        )
        await connection.open()
    elif base_url is not None or api_key is not None or extra_servers is not None:
        raise ValueError("pass either connection= or base_url/api_key/extra_servers, not both")
    try:
        narrowed = dict(on_denial or {})
        graph = build_governed_graph(
            connection, model, top_k=top_k, on_denial=narrowed, system_prompt=system_prompt
        )
        compiled = graph.compile(checkpointer=checkpointer, name=name)
        conf: dict[str, Any] = {}
        if not owns and profile is not None:
            conf["profile"] = resolve_profile(profile).name
        if durability is not None and checkpointer is not None:
            # (without a checkpointer durability means nothing, and langgraph 1.2 fails on
            # "sync" there)
            from langgraph._internal._constants import CONFIG_KEY_DURABILITY

            conf[CONFIG_KEY_DURABILITY] = durability
        if conf:
            compiled = compiled.with_config({"configurable": conf})
    except BaseException:
        if owns:
            await connection.aclose()
        raise
    if owns:
        _OWNED[compiled] = connection
    return compiled


async def aclose_governed_agent(graph: Any) -> None:
    """Close the connection :func:`create_governed_agent` opened for ``graph`` (idempotent)."""
    connection = _OWNED.pop(graph, None)
    if connection is not None:
        await connection.aclose()


@contextlib.asynccontextmanager
async def governed_agent(
    model: BaseChatModel | str | None = None, **kwargs: Any
) -> AsyncIterator[CompiledStateGraph[Any, Any, Any, Any]]:
    """``async with governed_agent(...) as graph``: :func:`create_governed_agent`, then close."""
    graph = await create_governed_agent(model, **kwargs)
    try:
        yield graph
    finally:
        await aclose_governed_agent(graph)


# ---------------------------------------------------------------------- sync entry point

_T = TypeVar("_T")


class GovernedAgentSync:
    """The governed graph for synchronous scripts: one event loop, in a background thread.

    The MCP session and the SQLite checkpointer live on that one loop for the agent's life, so
    every call reuses them. Works inside Jupyter too (its own loop is left alone).

    Example::

        with create_governed_agent_sync(profile="execute", db="runs.sqlite") as agent:
            out = agent.invoke({"messages": [("user", "...")]}, thread_id="t1")
            agent.resume({"action": "override", "operator": "ana", "reason": "..."}, "t1")
    """

    def __init__(self, model: Any = None, *, db: str | None = None, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="algenta-graph-loop", daemon=True
        )
        self._thread.start()
        self._stack = contextlib.AsyncExitStack()
        try:
            self.graph: CompiledStateGraph[Any, Any, Any, Any] = self._run(
                self._open(model, db, kwargs)
            )
        except BaseException:
            self._stop()
            raise

    async def _open(
        self, model: Any, db: str | None, kwargs: dict[str, Any]
    ) -> CompiledStateGraph[Any, Any, Any, Any]:
        if db is not None:
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            kwargs["checkpointer"] = await self._stack.enter_async_context(
                AsyncSqliteSaver.from_conn_string(db)
            )
        graph = await create_governed_agent(model, **kwargs)
        self._stack.push_async_callback(aclose_governed_agent, graph)
        return graph

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @staticmethod
    def _config(thread_id: str | None, config: RunnableConfig | None) -> RunnableConfig:
        conf: dict[str, Any] = dict(config or {})
        if thread_id is not None:
            conf["configurable"] = {**(conf.get("configurable") or {}), "thread_id": thread_id}
        return cast(RunnableConfig, conf)

    def invoke(
        self,
        input: Any,
        thread_id: str | None = None,
        *,
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Run the graph to its end or its next interrupt; returns the final state values."""
        return self._run(self.graph.ainvoke(input, self._config(thread_id, config), **kwargs))

    def resume(
        self, answer: Mapping[str, Any], thread_id: str, *, config: RunnableConfig | None = None
    ) -> dict[str, Any]:
        """Answer a pending escalation: ``{"action", "operator", "reason"}``."""
        return self.invoke(Command(resume=dict(answer)), thread_id, config=config)

    def get_state(self, thread_id: str, *, config: RunnableConfig | None = None) -> Any:
        """The thread's current ``StateSnapshot`` (values, next nodes, interrupts)."""
        return self._run(self.graph.aget_state(self._config(thread_id, config)))

    def close(self) -> None:
        """Close the connection and the checkpointer, then stop the loop (idempotent)."""
        if self._loop.is_closed():
            return
        try:
            self._run(self._stack.aclose())
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> GovernedAgentSync:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def create_governed_agent_sync(model: Any = None, **kwargs: Any) -> GovernedAgentSync:
    """Synchronous :func:`create_governed_agent`; ``db="x.sqlite"`` adds a SQLite checkpointer."""
    return GovernedAgentSync(model, **kwargs)
