"""What the graph needs of an engine connection: the ``EngineClient`` protocol, the tool names.

:class:`EngineClient` is the ``Protocol`` the nodes are written against (the catalog, the
model's calls, the operator path, the read of a decision);
:class:`~algenta_graph.connection.engine.EngineConnection` is the real one and tests give the
nodes a scripted one. The operator path's options are one typed record,
:class:`OperatorFlags`, shared by the protocol and every implementation. The engine's tool
names the graph relies on are here too. Nothing here opens a session
(:mod:`algenta_graph.connection.engine`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, runtime_checkable

from typing_extensions import Unpack

from algenta_graph.governance.contract import Profile

if TYPE_CHECKING:
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import BaseTool

    from algenta_graph.connection.outcomes import ExecutionOutcome

__all__ = [
    "EXECUTE_TOOL",
    "GET_DECISION_TOOL",
    "PLAN_TOOL",
    "SEARCH_TOOL",
    "EngineClient",
    "OperatorFlags",
    "check_operator_flags",
]

EXECUTE_TOOL = "execute_decision"
"""The governed tool: its results are receipts or named-gate denials."""
GET_DECISION_TOOL = "get_decision"
"""The engine's read of a decision and its executions (the graph's recovery reads it)."""
PLAN_TOOL = "plan_decision"
"""The engine's tool that proposes a plan (its result carries the plan's ``nonce``)."""
SEARCH_TOOL = "search_tools"
"""The graph's own gateway tool (answered by the graph from its index; reserved here)."""


class OperatorFlags(TypedDict, total=False):
    """The options of an operator-path ``execute_decision`` (each may be left out)."""

    force: bool
    """Send ``force=true`` (the operator overrode a gate that takes it); default false."""
    override_safety: bool
    """Send ``override_safety=true``; default false."""
    timeout_seconds: float | None
    """The execution's ``timeout_seconds`` (``None``: the engine's default)."""
    metadata: Mapping[str, Any] | None
    """The execution's ``metadata`` (``None``: none)."""
    extra: Mapping[str, Any] | None
    """The graph-supplied arguments (idempotency key, nonce), sent as they are."""


def check_operator_flags(flags: Mapping[str, Any]) -> None:
    """Refuse an option :class:`OperatorFlags` does not name.

    >>> check_operator_flags({"force": True})
    >>> check_operator_flags({"forse": True})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: execute_as_operator() got unexpected keyword argument(s): 'forse' (it takes ...)

    Raises:
        TypeError: naming every unknown option and the known ones.
    """
    unknown = [name for name in flags if name not in OperatorFlags.__annotations__]
    if unknown:
        raise TypeError(
            "execute_as_operator() got unexpected keyword argument(s): "
            f"{', '.join(repr(n) for n in unknown)} "
            f"(it takes {', '.join(OperatorFlags.__annotations__)})"
        )


@runtime_checkable
class EngineClient(Protocol):
    """What the graph's nodes need of an engine connection (``EngineConnection`` is one).

    The nodes call the catalog's tools as the model would, execute on the operator path, and
    read a decision's record back; they send ``idempotency_key`` / ``nonce`` themselves exactly
    when the engine's ``execute_decision`` declares them (:attr:`execute_supplied`).
    """

    profile: Profile
    """The connection's tool profile (the ceiling of every run's)."""
    has_engine: bool
    """Whether there is an Algenta engine behind it: without one, the catalog is the extra
    servers' tools alone and the graph has no engine gate, operator path or ``get_decision``."""
    execute_supplied: frozenset[str]
    """The graph-supplied fields the engine's ``execute_decision`` declares."""

    @property
    def tools(self) -> list[BaseTool]:
        """The model-facing catalog (the profile's engine tools, scrubbed, and extra servers')."""
        ...

    def is_algenta_tool(self, name: str) -> bool:
        """True only for the Algenta engine's own catalog tools."""
        ...

    def tool_origin(self, name: str) -> tuple[str, str] | None:
        """``(server, MCP tool name)`` of the catalog tool called ``name``, or ``None``.

        What the graph-side gates match rules against (a catalog name may be renamed for a
        clash between servers).
        """
        ...

    async def call_tool(
        self, name: str, args: Mapping[str, Any], *, tool_call_id: str
    ) -> ToolMessage:
        """Call a catalog tool as the model would (profile guard, argument scrub)."""
        ...

    async def execute_as_operator(
        self, decision_id: str, webhook_url: str, **flags: Unpack[OperatorFlags]
    ) -> ExecutionOutcome:
        """``execute_decision`` with the flags an operator approved; the parsed outcome."""
        ...

    async def get_decision(self, decision_id: str) -> dict[str, Any]:
        """The engine's record of a decision and its executions (read-only)."""
        ...
