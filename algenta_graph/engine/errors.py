"""The errors a reference-engine tool answers with (server side).

A tool raises one of these; the server turns it into the configured wire form
(``--denials``). They never escape the engine: a client sees an MCP result, not an exception.
"""

from __future__ import annotations

from typing import Any


class EngineToolError(Exception):
    """A tool call that could not be served: ``code`` names why, ``status_code`` the HTTP analogue.

    ``protocol`` errors (bad arguments, unknown tool, oversized payload) are always answered
    as an MCP error result; the others follow the engine's ``--denials`` wire form.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status_code: int = 400,
        protocol: bool = False,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status_code = status_code
        self.protocol = protocol
        self.details = details or {}

    def body(self) -> dict[str, Any]:
        """The upstream error body: ``{"error": {"code", "message", ...details}}``."""
        return {"error": {"code": self.code, "message": self.message, **self.details}}


class InvalidArguments(EngineToolError):
    """Wrong types, missing or out-of-range arguments, oversized payloads."""

    def __init__(self, tool: str, problem: str) -> None:
        super().__init__(
            "invalid_arguments",
            f"invalid arguments for {tool}: {problem}",
            status_code=422,
            protocol=True,
        )
        self.tool = tool


class GateDenied(EngineToolError):
    """``execute_decision`` blocked by a named policy gate (HTTP 409 upstream)."""

    def __init__(self, gate: str, message: str, override_hint: str) -> None:
        super().__init__(
            f"execution_blocked_{gate}",
            message,
            status_code=409,
            details={"gate": gate, "override_hint": override_hint},
        )
        self.gate = gate
        self.override_hint = override_hint

    def body(self) -> dict[str, Any]:
        """The upstream error body: ``{"error": {"code", "gate", "message", "override_hint"}}``."""
        return {
            "error": {
                "code": self.code,
                "gate": self.gate,
                "message": self.message,
                "override_hint": self.override_hint,
            }
        }
