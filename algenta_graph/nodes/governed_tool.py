"""The governed tool node: runs a model's tool calls over MCP and names every outcome.

For each call of the latest AI message (``docs/ARCHITECTURE.md``, "The graph"):

- ``search_tools`` is answered here, from the BM25 index; the tools found become callable;
- a tool outside the run's profile is refused, never sent (invariant 2);
- ``execute_decision`` is sent with the graph's own ``metadata.algenta_graph`` tag (thread,
  tool call) and its result parsed into a receipt, a named-gate denial or a failure
  (invariant 3); a decision this thread already executed is never sent again, whatever its
  delivery status (invariant 8); a lost delivery of this thread is recovered from the engine
  (invariant 5);
- anything else is a plain MCP call;
- before any call runs, the graph-side gates (:mod:`algenta_graph.governance.tool_gates`) decide
  it by its real MCP name: a call that breaks an argument rule or a budget is denied, one that
  needs approval is held (a denial record with its tool, arguments and their digest, escalated
  by default); each call its own decision, counted from the thread's records;
- a call a rule names and lets through is **written ahead** in the graph's ledger
  (:mod:`algenta_graph.nodes.write_ahead`, invariant 18) under the identity of the model message
  that made it: an earlier attempt's outcome is reused, and a call an earlier attempt started
  (a run cancelled or killed while the tool ran, then a new message; a copy; another worker)
  is never sent again nor gated again: it is recorded ``unknown`` (its ``tool_calls`` record
  counts against every budget naming the tool) and the model is told it may have run.

Every receipt and denial is written to state; each denial carries the policy it was raised
under, so its handling never depends on a later run's settings. :meth:`GovernedToolNode.route`
then names the step's outcome for the conditional edge: the gate whose policy is strictest
(invariant 7), ``halt`` for a gate the graph does not know, ``failed`` or ``ok``.

``execute_decision`` itself is sent by the :class:`~algenta_graph.nodes.executor.DecisionExecutor`
the node holds (the denial handlers hold the same one).

Example (the node is built by :func:`~algenta_graph.graph.build_governed_graph`)::

    node = GovernedToolNode(catalog, DecisionExecutor(catalog.conn), built)
    update = await node(state, config)
    GovernedToolNode.route({**state, **update})  # "ok" | "failed" | "confidence" | ... | "halt"
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Any, Literal

from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore

from algenta_graph._langgraph import checkpointer_of
from algenta_graph.audit.chain import seal
from algenta_graph.connection.client import EXECUTE_TOOL, SEARCH_TOOL
from algenta_graph.errors import AlgentaGraphError, ToolNotInProfileError
from algenta_graph.governance.gates import GATES, policy_for
from algenta_graph.governance.run_settings import (
    GraphSettings,
    RunContext,
    RunSettings,
    run_settings,
)
from algenta_graph.governance.scrub import GRAPH_SUPPLIED_FIELDS, scrub_arguments
from algenta_graph.governance.tool_gates import (
    CompiledGates,
    GateDecision,
    ToolRef,
    args_digest,
    count_calls,
)
from algenta_graph.ledger import CallOutcome, Ledger, run_ledger, step_call_id
from algenta_graph.nodes.executor import DecisionExecutor
from algenta_graph.nodes.recovery import counts_as_executed
from algenta_graph.nodes.steps import (
    HALT,
    OUTCOME_KEY,
    gate_order,
    in_place,
    last_step,
    latest_user_text,
    plain_content,
    step_denials,
    tool_message,
)
from algenta_graph.nodes.write_ahead import Ran, earlier_outcome, run_once
from algenta_graph.records import (
    DenialRecord,
    GatedCall,
    ReceiptRecord,
    ToolCallRecord,
    gate_denial_record,
    tool_call_record,
)
from algenta_graph.retrieval.catalog import GovernedCatalog
from algenta_graph.state import GovernedState

__all__ = ["GovernedToolNode"]

logger = logging.getLogger(__name__)


class GovernedToolNode:
    """The ``governed_tool`` node (see the module docs).

    Args:
        catalog: the graph's catalog.
        executor: the graph's one :class:`~algenta_graph.nodes.executor.DecisionExecutor`
            (the denial handlers hold the same one).
        built: what the graph was built with (the ceiling of every run's settings).
        tool_gates: the graph-side gates' rules (none: no call is held, counted or checked).
        ledger: the graph's ledger, where every call a rule names is written ahead
            (:mod:`algenta_graph.ledger`; every process serving the graph must share it).
            Default: chosen at run time by :func:`~algenta_graph.ledger.run_ledger` (this
            process's own under no checkpointer or an ``InMemorySaver``, else the run is
            refused); :func:`~algenta_graph.graph.create_governed_agent` gives every node the
            one it chose.
    """

    def __init__(
        self,
        catalog: GovernedCatalog,
        executor: DecisionExecutor,
        built: GraphSettings,
        tool_gates: CompiledGates | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.ledger: Ledger | None = ledger
        self.catalog = catalog
        self.conn = catalog.conn
        self.executor = executor
        self.built = built
        self.tool_gates = tool_gates

    async def __call__(
        self,
        state: GovernedState,
        config: RunnableConfig,
        runtime: Runtime[RunContext] | None = None,
    ) -> dict[str, Any]:
        """Run the latest step's unanswered tool calls under governance (see the module docs).

        Returns:
            The state update: the calls' answers, their receipts and denials (each linked into
            the thread's hash chain), and the tools ``search_tools`` found.
        """
        run = run_settings(config, runtime, self.built)
        ai, answered = last_step(state.get("messages", []))
        if ai is None:
            return {}
        done = {m.tool_call_id for m in answered}
        executed = {
            r.get("decision_id") for r in state.get("receipts") or [] if counts_as_executed(r)
        }
        selected = list(state.get("selected_tools") or [])
        out_messages: list[ToolMessage] = []
        receipts: list[ReceiptRecord] = []
        denials: list[DenialRecord] = []
        used: list[tuple[str, ToolMessage]] = []  # (real name, answer) of each catalog call
        calls: list[ToolCallRecord] = []
        turn = latest_turn(state.get("messages", []))
        thread = (config.get("configurable") or {}).get("thread_id")
        # before anything is sent: a run no shared ledger guards is refused (fails closed)
        ledger = self.ledger
        if ledger is None and self.tool_gates is not None:
            ledger = run_ledger(checkpointer_of(config))
        for call in ai.tool_calls:
            call_id = call["id"] or ""
            if call_id in done:
                continue
            # the model calls a tool by its model-facing name (and argument keys); MCP, records
            # and receipts use the real ones (ToolMessages get the model's name back below)
            name, args = self.catalog.real_call(call["name"], call.get("args") or {})
            if name == SEARCH_TOOL:
                body, hits, ok = await self.catalog.search(args, run)
                selected.extend(h for h in hits if h not in selected)
                out_messages.append(
                    tool_message(
                        body,
                        name=SEARCH_TOOL,
                        tool_call_id=call_id,
                        outcome="ok" if ok else "failed",
                        status="success" if ok else "error",
                    )
                )
                continue
            if not self.catalog.allowed(name, run):
                profile = run.profile.name if run.profile else self.conn.profile.name
                out_messages.append(
                    tool_message(
                        f"Error: {ToolNotInProfileError(name, profile)}",
                        name=name,
                        tool_call_id=call_id,
                        outcome="failed",
                        status="error",
                    )
                )
                continue
            engine_execute = name == EXECUTE_TOOL and self.conn.is_algenta_tool(name)
            gated = self._gated(name, args, call_id, turn)
            identity = step_call_id(str(ai.id), call_id) if ai.id else None
            if gated is not None and not engine_execute:
                if identity is None:  # never in a thread (add_messages ids every message)
                    out_messages.append(_unsendable(name, call_id))
                    continue
                # written ahead: an earlier attempt's call is never sent (nor gated) again
                assert ledger is not None  # a gated call: the graph has tool gates
                earlier = await earlier_outcome(ledger, identity, name)
                if earlier is not None:
                    calls.append(tool_call_record(gated, result=earlier.result))
                    out_messages.append(_answer(name, call_id, Ran(earlier)))
                    continue
            if gated is not None:
                held = self._gate(name, args, gated, run, turn, state, denials, calls)
                if held is not None:
                    out_messages.append(held)
                    continue
            if engine_execute:
                message, receipt, denial = await self.executor.execute(
                    args, call_id, run, executed, state.get("messages", [])
                )
                if receipt is not None:
                    receipts.append(receipt)
                    if counts_as_executed(receipt):
                        executed.add(receipt.get("decision_id"))
                if denial is not None:
                    denials.append(denial)
                out_messages.append(message)
                used.append((name, message))
                continue
            if gated is not None and identity is not None:
                assert ledger is not None
                ran = await run_once(
                    ledger,
                    identity,
                    name,
                    partial(self.conn.call_tool, name, args, tool_call_id=call_id),
                    thread_id=str(thread) if thread else None,
                )
                calls[-1]["result"] = ran.outcome.result  # its record, written by the gate
                out_messages.append(_answer(name, call_id, ran))
            else:
                out_messages.append(await self._plain_call(name, args, call_id))
            used.append((name, out_messages[-1]))
        await self._learn(state, run, used, getattr(runtime, "store", None))
        called = {c["id"]: c["name"] for c in ai.tool_calls}
        for message in out_messages:  # each answer carries the name the model used
            message.name = called.get(message.tool_call_id, message.name)
        update: dict[str, Any] = {"messages": in_place(state.get("messages", []), ai, out_messages)}
        if receipts:
            update["receipts"] = receipts
        if denials:
            update["denials"] = denials
        if calls:
            update["tool_calls"] = calls
        if selected != list(state.get("selected_tools") or []):
            update["selected_tools"] = selected
        return seal(state, update)  # each new record linked into the thread's hash chain

    def tool_ref(self, name: str) -> ToolRef:
        """The tool a catalog name stands for, as gate rules name it (server, real MCP name)."""
        found = self.conn.tool_origin(name)
        if found is not None:
            return ToolRef(*found)
        return ToolRef("algenta" if self.conn.is_algenta_tool(name) else "?", name)

    def _gated(
        self, name: str, args: dict[str, Any], call_id: str, turn: str | None
    ) -> GatedCall | None:
        """The call as its gate records name it, when a graph-side rule names its tool."""
        if self.tool_gates is None:
            return None
        tool = self.tool_ref(name)
        if not self.tool_gates.governs(tool):
            return None
        return GatedCall(
            tool=tool.name,
            server=tool.server,
            catalog_name=name,
            tool_call_id=call_id,
            args_digest=args_digest(tool.qualified, _sent(args)),
            turn=turn,
        )

    def _gate(
        self,
        name: str,
        args: dict[str, Any],
        call: GatedCall,
        run: RunSettings,
        turn: str | None,
        state: GovernedState,
        denials: list[DenialRecord],
        calls: list[ToolCallRecord],
    ) -> ToolMessage | None:
        """The graph-side gates' decision on one call a rule names, before it runs.

        ``None``: it may run (recorded in ``calls``). Else its denial is added to ``denials``
        and its answer returned: nothing ran.
        """
        gates = self.tool_gates
        assert gates is not None
        tool = ToolRef(call["server"], call["tool"])
        sent = _sent(args)
        counts = count_calls(
            gates,
            tool,
            [*(state.get("tool_calls") or []), *calls],
            [*(state.get("denials") or []), *denials],
            turn,
        )
        engine_execute = name == EXECUTE_TOOL and self.conn.is_algenta_tool(name)
        if engine_execute:
            # the engine's own gates (and plan approvals) govern execute_decision: a graph-side
            # approval is not asked, and an operator path for it is the engine gates' override
            decision = gates.check(tool, sent, counts, approval=False)
        else:
            decision = gates.check(tool, sent, counts)
        if decision is None:
            calls.append(tool_call_record(call))
            return None
        policy = policy_for(decision.gate, run.policies)
        if engine_execute and policy == "escalate":
            policy = "halt"  # never run on a graph-side approval: stricter, never looser
        denials.append(gate_denial_record(decision, call, args=sent, policy=policy))
        return tool_message(
            gate_text(decision, tool, policy),
            name=name,
            tool_call_id=call["tool_call_id"] or "",
            outcome=f"gate:{decision.gate}",
            status="error",
        )

    async def _learn(
        self,
        state: GovernedState,
        run: RunSettings,
        used: Sequence[tuple[str, ToolMessage]],
        store: BaseStore | None = None,
    ) -> None:
        """Feed the usage signal with this step's catalog calls.

        It learns from each tool of the run's profile that served this turn's query
        successfully (never a denial, a failure or ``search_tools``), into the run's store
        (``store``: the server's, when served) or the signal's own.
        """
        usage = self.catalog.usage
        if usage is None or not used or not self.catalog.usage_store(store):
            return
        query = latest_user_text(state.get("messages", []))
        allowed = self.catalog.allow_list(run) or list(self.catalog.tools)
        profile = self.catalog.profile_name(run)
        for name, message in used:
            ok = message.response_metadata.get(OUTCOME_KEY) == "ok"
            try:
                await usage.arecord(
                    query, name, profile=profile, ok=ok, allowed=allowed, store=store
                )
            except Exception as exc:  # learning must never cost a governed step its records
                logger.warning("usage signal: could not record %s: %s", name, exc)

    @staticmethod
    def route(state: GovernedState) -> str:
        """The latest step's outcome: the strictest-policy gate, ``halt``, ``failed`` or ``ok``."""
        denials = step_denials(state)
        if denials:
            first = gate_order(denials)[0]
            if first not in GATES:
                return HALT
            # a graph-side gate is the graph's own: one an engine (or any tool) names halts
            foreign = GATES[first].side == "graph" and any(
                d.get("gate") == first and d.get("source") != "graph" for d in denials
            )
            return HALT if foreign else first
        _, answered = last_step(state.get("messages", []))
        outcomes = [m.response_metadata.get(OUTCOME_KEY, "ok") for m in answered]
        if any(o.startswith("gate:") for o in outcomes):
            return HALT  # a gate outcome without its denial record: never silently continue
        return "failed" if "failed" in outcomes else "ok"

    # ------------------------------------------------------------------ tool calls

    async def _plain_call(self, name: str, args: dict[str, Any], call_id: str) -> ToolMessage:
        try:
            result = await self.conn.call_tool(name, args, tool_call_id=call_id)
        except AlgentaGraphError as exc:
            return tool_message(
                f"Error: {exc}", name=name, tool_call_id=call_id, outcome="failed", status="error"
            )
        status: Literal["success", "error"] = (
            "error" if getattr(result, "status", "success") == "error" else "success"
        )
        return tool_message(
            plain_content(result.content),
            name=name,
            tool_call_id=call_id,
            outcome="failed" if status == "error" else "ok",
            status=status,
            artifact=result.artifact,
        )


def _sent(args: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments as gate rules see them: scrubbed, without the graph-supplied fields."""
    return {k: v for k, v in scrub_arguments(args).items() if k not in GRAPH_SUPPLIED_FIELDS}


def _answer(name: str, call_id: str, ran: Ran) -> ToolMessage:
    """The model's answer to a call written ahead: the tool's own, or its recorded outcome."""
    answer, outcome = ran.answer, ran.outcome
    ok = outcome.status == "success"
    if answer is not None:
        return tool_message(
            plain_content(answer.content),
            name=name,
            tool_call_id=call_id,
            outcome="ok" if ok else "failed",
            status=outcome.status,
            artifact=answer.artifact,
        )
    return tool_message(
        _told(outcome),
        name=name,
        tool_call_id=call_id,
        outcome="ok" if ok else "failed",
        status=outcome.status,
    )


def _unsendable(name: str, call_id: str) -> ToolMessage:
    return tool_message(
        f"Error: the call of {name} was not sent: its model message has no id to write it ahead "
        "under (a governed call is sent only once it is written ahead)",
        name=name,
        tool_call_id=call_id,
        outcome="failed",
        status="error",
    )


def _told(outcome: CallOutcome) -> str:
    """What the model is told of a recorded outcome it did not see sent."""
    if outcome.result == "unknown":
        return (
            f"UNKNOWN OUTCOME: {outcome.content}. Do not call it again for this request; tell "
            "the user it may have run and an operator must check."
        )
    return outcome.content


def latest_turn(messages: Sequence[Any]) -> str | None:
    """The run a call is made in: the id of the latest user message (``None`` without one)."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return str(message.id) if message.id else None
    return None


def gate_text(decision: GateDecision, tool: ToolRef, policy: str) -> str:
    """What the model is told about a graph-side gate's decision: nothing ran, and why."""
    if decision.gate == "approval" and policy == "escalate":
        return (
            f"HELD: the call of {tool.qualified} was not run: {decision.message}. It waits for "
            "an operator's decision, outside this conversation; calling it again will be held "
            "again. Tell the user the call waits for approval."
        )
    return (
        f"DENIED: the call of {tool.qualified} was blocked by the {decision.gate} gate "
        f"({decision.code}, rule {decision.rule}): {decision.message}. Nothing was run. You "
        "(the model) cannot override this gate; only a human operator can. Tell the user."
    )
