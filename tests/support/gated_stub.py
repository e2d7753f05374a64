"""A scripted engine connection with a CRM's tools beside the engine's, for the fast tests of
the whole governed graph (retrieval, the model, the tool node, the denial handlers) and of the
graph-side gates on any tool (``docs/ARCHITECTURE.md``, "Gates on any tool").

The CRM tools are answered here (every call is kept in ``crm_calls``); the engine's tools are
:class:`~governed_stub.StubConnection`'s scripted answers. Against a real CRM over MCP and the
reference engine: ``tests/integration/test_tool_gates.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from governed_stub import ALGENTA_TOOLS, StubConnection, answer
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field


class _Account(BaseModel):
    account_id: str = Field(description="the customer account id")


class _Delete(_Account):
    reason: str = Field(default="", description="why the account is deleted")


class _Refund(_Account):
    amount: float = Field(description="amount to refund in euro")


class _Decision(BaseModel):
    decision_id: str = Field(description="the decision to execute")
    webhook_url: str = Field(description="where the engine delivers the action")


CRM_TOOLS: dict[str, tuple[str, type[BaseModel]]] = {
    "delete_customer": ("Delete a customer account and its records from the CRM", _Delete),
    "refund": ("Refund an amount of money to a customer account", _Refund),
    "lookup_customer": ("Look up a customer account in the CRM by its id", _Account),
    # a second server's tool of the same name, which the catalog shows under another name
    "shadow_delete_customer": ("Delete a customer account in the shadow CRM", _Delete),
}
ORIGINS = {name: ("crm", name) for name in CRM_TOOLS} | {
    "shadow_delete_customer": ("shadow", "delete_customer")
}


def _tool(name: str, description: str, schema: type[BaseModel]) -> BaseTool:
    def never(**_: Any) -> str:  # the graph calls tools through the connection, never this
        raise AssertionError(f"{name} ran outside the connection")

    return StructuredTool.from_function(
        func=never, name=name, description=description, args_schema=schema
    )


class CrmStub(StubConnection):
    """:class:`~governed_stub.StubConnection` whose catalog also holds a CRM server's tools."""

    def __init__(self, profile: str = "execute") -> None:
        super().__init__(profile)
        self.crm_calls: list[tuple[str, dict[str, Any]]] = []
        self._tools = [_tool(n, d, s) for n, (d, s) in CRM_TOOLS.items()] + [
            _tool("execute_decision", "Execute a logged decision through its webhook", _Decision)
        ]

    @property
    def tools(self) -> list[BaseTool]:
        """The catalog the graph indexes."""
        return list(self._tools)

    def tool_origin(self, name: str) -> tuple[str, str] | None:
        """The server and real MCP name behind a catalog name, as the connection reports it."""
        if name in ORIGINS:
            return ORIGINS[name]
        return ("algenta", name) if name in ALGENTA_TOOLS else None

    async def call_tool(self, name: str, args: Mapping[str, Any], *, tool_call_id: str) -> Any:
        if name in CRM_TOOLS:
            self.crm_calls.append((name, dict(args)))
            return answer({"ok": True, "tool": name, "args": dict(args)})
        return await super().call_tool(name, args, tool_call_id=tool_call_id)
