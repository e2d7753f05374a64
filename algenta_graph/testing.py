"""Fakes for the tests of an app built on the governed graph (never used by the graph itself).

- :class:`ScriptedChatModel` plays back a fixed list of replies, and records the tool schemas it
  was shown on each call (tests, notebooks, benchmarks);
- :class:`OfflineConnection` is an engine connection with a fixed catalog and no engine behind
  it: enough to build (and draw) the graph offline; any call raises.

>>> m = ScriptedChatModel(replies=["hi", "bye"])
>>> m.invoke("x").content, m.invoke("y").content
('hi', 'bye')
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool
from pydantic import Field

from algenta_graph.connection.outcomes import ExecutionOutcome
from algenta_graph.errors import EngineConnectionError
from algenta_graph.governance.contract import Profile, resolve_profile
from algenta_graph.models import ToolCallingModel, tool_call_id

__all__ = ["OfflineConnection", "ScriptedChatModel"]


class ScriptedChatModel(ToolCallingModel):
    """Plays back ``replies`` in order; every reply handed out is a deep copy.

    A reply is an ``AIMessage``, a string (a plain answer), or a dict of ``AIMessage`` fields
    (e.g. ``{"content": "", "tool_calls": [...]}``). Running out of replies raises
    ``IndexError`` naming how many were given. ``bound_tools`` records, per call, the tool
    schemas the model was shown (OpenAI format), and ``seen`` the conversation it was sent, so
    tests can assert what a model could see.

    >>> m = ScriptedChatModel(replies=["hi", "bye"])
    >>> m.invoke("x").content, m.invoke("y").content
    ('hi', 'bye')
    """

    replies: list[Any] = Field(default_factory=list)
    """The replies to hand out, in order."""
    cycle: bool = False
    """Start again from the first reply instead of raising when they run out (benchmarks)."""
    bound_tools: list[list[dict[str, Any]]] = Field(default_factory=list)
    """The tool schemas shown on each call, in call order."""
    seen: list[list[BaseMessage]] = Field(default_factory=list)
    """The conversation sent on each call (system message included), in call order."""
    position: int = 0
    """Index of the next reply."""

    @property
    def _llm_type(self) -> str:
        return "algenta-scripted"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.bound_tools.append(copy.deepcopy(list(kwargs.get("tools", []))))
        self.seen.append(list(messages))
        if self.position >= len(self.replies):
            if not self.cycle or not self.replies:
                raise IndexError(
                    f"ScriptedChatModel ran out of replies ({len(self.replies)} given)"
                )
            self.position = 0
        reply = self.replies[self.position]
        self.position += 1
        return ChatResult(generations=[ChatGeneration(message=_as_message(reply))])


def _as_message(reply: Any) -> AIMessage:
    if isinstance(reply, AIMessage):
        return reply.model_copy(deep=True)
    if isinstance(reply, str):
        return AIMessage(reply)
    if isinstance(reply, Mapping):
        data = copy.deepcopy(dict(reply))
        calls = [
            {**c, "type": "tool_call", "id": c.get("id") or tool_call_id(json.dumps(c))}
            for c in data.pop("tool_calls", [])
        ]
        return AIMessage(content=data.pop("content", ""), tool_calls=calls, **data)
    raise TypeError(f"ScriptedChatModel reply must be AIMessage, str or dict, not {reply!r}")


class OfflineConnection:
    """An :class:`~algenta_graph.connection.client.EngineClient` with a fixed catalog and no engine.

    The graph builds over it (to draw it, or test its wiring); every call raises
    :class:`~algenta_graph.errors.EngineConnectionError`.

    Args:
        tools: the fixed catalog (every tool counts as the engine's).
        profile: the name of the connection's tool profile.

    >>> from algenta_graph.graph import build_governed_graph
    >>> graph = build_governed_graph(OfflineConnection()).compile()
    >>> "governed_tool" in graph.get_graph().nodes
    True
    """

    def __init__(self, tools: Sequence[BaseTool] = (), profile: str = "execute") -> None:
        self._tools = list(tools)
        self.profile: Profile = resolve_profile(profile)
        self.has_engine = True  # its tools stand for an engine's (drawn with the engine's gates)
        self.execute_supplied: frozenset[str] = frozenset()

    @property
    def tools(self) -> list[BaseTool]:
        """The fixed catalog."""
        return list(self._tools)

    def is_algenta_tool(self, name: str) -> bool:
        """Every tool of the fixed catalog counts as the engine's."""
        return any(t.name == name for t in self._tools)

    def tool_origin(self, name: str) -> tuple[str, str] | None:
        """Every tool of the fixed catalog is the engine's own (``("algenta", name)``)."""
        return ("algenta", name) if self.is_algenta_tool(name) else None

    def _offline(self) -> EngineConnectionError:
        return EngineConnectionError("an OfflineConnection has no engine to call")

    async def call_tool(self, name: str, args: Mapping[str, Any], *, tool_call_id: str) -> Any:
        """Always raises :class:`~algenta_graph.errors.EngineConnectionError` (no engine)."""
        raise self._offline()

    async def execute_as_operator(
        self, decision_id: str, webhook_url: str, **kwargs: Any
    ) -> ExecutionOutcome:
        """Always raises :class:`~algenta_graph.errors.EngineConnectionError` (no engine)."""
        raise self._offline()

    async def get_decision(self, decision_id: str) -> dict[str, Any]:
        """Always raises :class:`~algenta_graph.errors.EngineConnectionError` (no engine)."""
        raise self._offline()
