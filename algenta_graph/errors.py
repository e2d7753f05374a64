"""The error types algenta-graph raises.

Every error a user can meet derives from :class:`AlgentaGraphError`, so one ``except`` catches
them all; the subclasses say what went wrong. Messages never contain an API key.
"""

from __future__ import annotations


class AlgentaGraphError(Exception):
    """Base class of every error raised by algenta-graph."""


class EngineConnectionError(AlgentaGraphError):
    """The Algenta engine could not be reached, or the connection broke.

    The message names the URL and what to check (the URL, that the engine runs, the token).
    """

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


class EngineAuthError(EngineConnectionError):
    """The engine rejected the API token (HTTP 401)."""


class EngineTimeoutError(EngineConnectionError):
    """A call to the engine did not answer within its timeout; the message names the call."""


class ToolNotInProfileError(AlgentaGraphError):
    """A tool outside the active profile was called; the engine was not contacted."""

    def __init__(self, tool: str, profile: str) -> None:
        super().__init__(
            f"tool {tool!r} is not in the active profile {profile!r}; it was not called"
        )
        self.tool = tool
        self.profile = profile
