"""The agent's own nodes, ``retrieve_tools`` and ``model``, and the route after the model.

``retrieve_tools`` (this turn's tools) ranks the run's catalog for the latest user message and
writes the top-K into ``selected_tools``; then the turn goes on to the model, unless the thread
still has unfinished governance
(:func:`~algenta_graph.nodes.denial_handler.route_pending_escalation`). ``model`` (the chat
model) is bound to exactly the selected tools plus ``search_tools`` (and ``always_include``);
when the run's ``remaining_steps`` cannot fit another tool round, a tool-calling reply is
replaced by :data:`STEP_LIMIT_MESSAGE`, so a looping model ends cleanly, never with
``GraphRecursionError``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from algenta_graph.governance.gates import GATE_NAMES
from algenta_graph.governance.run_settings import GraphSettings, RunContext, run_settings
from algenta_graph.nodes.steps import latest_user_text
from algenta_graph.retrieval.catalog import GovernedCatalog
from algenta_graph.state import RECORD_FIELDS, GovernedState

__all__ = ["STEP_LIMIT_MESSAGE", "AgentNodes"]

STEP_LIMIT_MESSAGE = (
    "Stopped: this run reached its step limit (recursion_limit={limit}) before the task was "
    "done; no further tool was called. Send a new message to continue."
)
"""The model's last word when a run reaches its ``recursion_limit``."""
_STEPS_PER_ROUND = 2 + len(GATE_NAMES)
"""A tool round: governed_tool, up to one handler per gate, then the model."""


class AgentNodes:
    """``retrieve_tools`` and ``model`` over one catalog.

    Args:
        catalog: the graph's catalog.
        built: what the graph was built with (the ceiling of every run's settings).
        system_prompt: the system message put before the conversation on every model call
            (none when empty or ``None``).
    """

    def __init__(
        self, catalog: GovernedCatalog, built: GraphSettings, system_prompt: str | None
    ) -> None:
        self.catalog = catalog
        self.built = built
        self.system_prompt = system_prompt

    async def retrieve_tools(
        self,
        state: GovernedState,
        config: RunnableConfig,
        runtime: Runtime[RunContext] | None = None,
    ) -> dict[str, Any]:
        """This turn's tools, ranked for the latest user message.

        The usage signal (if any) reranks them from the run's store (``runtime.store``).
        """
        run = run_settings(config, runtime, self.built)
        query = latest_user_text(state.get("messages", []))
        store = getattr(runtime, "store", None)  # the run's store (the server's, when served)
        update: dict[str, Any] = {
            "selected_tools": await self.catalog.retrieve(query, run, store=store)
        }
        # present (possibly empty) in every thread; the reducers only append
        update.update({field: [] for field in RECORD_FIELDS})
        return update

    async def call_model(
        self,
        state: GovernedState,
        config: RunnableConfig,
        runtime: Runtime[RunContext] | None = None,
    ) -> dict[str, Any]:
        """One model reply, bound to the selected tools the run may see."""
        run = run_settings(config, runtime, self.built)
        names = [n for n in state.get("selected_tools") or [] if self.catalog.allowed(n, run)]
        bound = self.catalog.bound_model(names, run)  # + always_include, found tools capped
        messages: list[BaseMessage] = list(state.get("messages", []))
        if self.system_prompt:
            messages = [SystemMessage(self.system_prompt), *messages]
        reply = await bound.ainvoke(messages, config)
        remaining = state.get("remaining_steps")
        if (
            isinstance(reply, AIMessage)
            and reply.tool_calls
            and isinstance(remaining, int)
            and remaining <= _STEPS_PER_ROUND
        ):
            limit = (config or {}).get("recursion_limit", "?")
            reply = AIMessage(id=reply.id, content=STEP_LIMIT_MESSAGE.format(limit=limit))
        return {"messages": [reply]}

    @staticmethod
    def route_after_model(state: GovernedState) -> str:
        """``"tool_calls"`` when the model called tools, else ``"answer"``."""
        messages = state.get("messages", [])
        last = messages[-1] if messages else None
        if isinstance(last, AIMessage) and last.tool_calls:
            return "tool_calls"
        return "answer"
