"""Objects a served configuration names by import path in the served-configuration tests.

The ``langgraph dev`` subprocess imports this module (its directory is on the server's
``PYTHONPATH``): ``model = {path = "served_config_models:RecordingDemoModel"}``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from algenta_graph.models import DemoChatModel


class RecordingDemoModel(DemoChatModel):
    """The offline demo model, which writes the tools it was bound to into each reply
    (``response_metadata["bound_tools"]``), so a test reads over HTTP what every step saw."""

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        tools = [t["function"] for t in kwargs.get("tools", []) if t.get("type") == "function"]
        reply = self._reply(messages, tools)
        bound = [t["name"] for t in tools]
        message = AIMessage(
            content=reply.content,
            tool_calls=reply.tool_calls,
            response_metadata={"bound_tools": bound},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


def refuse_everyone(identity: str, gate: str, config: Any) -> bool:
    """An operator rule that refuses every answer (a configured ``authorize_operator``)."""
    return False
