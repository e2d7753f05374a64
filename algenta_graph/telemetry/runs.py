"""The LangChain runs of an instrumented graph and their spans: the parent of every engine call.

LangGraph runs every node as a child run with callbacks; the
:class:`~algenta_graph.telemetry.handler.TelemetryHandler` records each run here (its parent,
its span if it has one), without ever changing the caller's OpenTelemetry context (LangChain
calls a run's end in another ``contextvars`` context than its start, so a context attached at
the start could never be detached). Code that runs inside a node, an engine call in
:mod:`algenta_graph.connection`, finds its parent span through the current LangChain run
(:func:`current_parent`), nearest ancestor first. Entries live until their graph run ends.

>>> from uuid import uuid4
>>> root, child = uuid4(), uuid4()
>>> runs = RunRegistry()
>>> _ = runs.add(root, None, span=None, telemetry=None)
>>> runs.add(child, root, span=None, telemetry=None).root == root
True
>>> runs.drop_root(root); runs.get(child) is None
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.runnables.config import var_child_runnable_config
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from algenta_graph.telemetry.instruments import Telemetry

__all__ = [
    "MAX_GRAPH_RUNS",
    "REGISTRY",
    "RunEntry",
    "RunRegistry",
    "current_parent",
    "current_run_id",
]

MAX_GRAPH_RUNS = 10_000
"""How many graph runs the registry keeps at most (live ones: an ended run is dropped)."""


@dataclass
class RunEntry:
    """One LangChain run of an instrumented graph run."""

    run_id: UUID
    """The LangChain run id."""
    parent: UUID | None
    """Its parent run (``None`` for the graph run itself)."""
    root: UUID
    """The graph run it belongs to."""
    span: Span | None
    """Its span, for the graph run, a node run or a model call; ``None`` for the others."""
    telemetry: Telemetry | None
    """The instruments of the handler that recorded it."""
    started: float = 0.0
    """``time.perf_counter()`` at its start."""
    node: str | None = None
    """The graph node it runs, for a node run."""
    owned: bool = True
    """Whether its span is its own (a node run of an untraced graph run shares the graph run's
    no-op span)."""
    facts: dict[str, Any] = field(default_factory=dict)
    """What its start knew that its end needs (the node's input message ids, pending asks)."""


class RunRegistry:
    """Every live run of the instrumented graph runs in this process.

    Lock-free: each operation is a few dict reads and writes, atomic under the GIL (a lock
    contended in the event loop would be a blocking call, refused under ``langgraph dev``).
    At most :data:`MAX_GRAPH_RUNS` graph runs are kept: one whose end was never reported (its
    stream abandoned) is forgotten, oldest first, rather than kept forever.
    """

    def __init__(self) -> None:
        self._runs: dict[UUID, RunEntry] = {}
        self._members: dict[UUID, list[UUID]] = {}

    def add(
        self,
        run_id: UUID,
        parent: UUID | None,
        *,
        span: Span | None,
        telemetry: Telemetry | None,
        started: float = 0.0,
        node: str | None = None,
        owned: bool = True,
    ) -> RunEntry:
        """Record a run; it belongs to its parent's graph run (or is one, without a parent)."""
        above = self._runs.get(parent) if parent is not None else None
        entry = RunEntry(
            run_id,
            parent if above is not None else None,
            above.root if above is not None else run_id,
            span,
            telemetry,
            started,
            node,
            owned=owned,
        )
        self._runs[run_id] = entry
        if above is None:
            while len(self._members) >= MAX_GRAPH_RUNS:
                self.drop_root(next(iter(self._members)))
        self._members.setdefault(entry.root, []).append(run_id)
        return entry

    def get(self, run_id: UUID | None) -> RunEntry | None:
        """The run's entry, if it is a live run of an instrumented graph."""
        if run_id is None:
            return None
        return self._runs.get(run_id)

    def nearest(self, run_id: UUID | None) -> RunEntry | None:
        """The nearest run with a span: ``run_id``'s own, or its closest ancestor's."""
        entry = self._runs.get(run_id) if run_id is not None else None
        while entry is not None and entry.span is None:
            entry = self._runs.get(entry.parent) if entry.parent is not None else None
        return entry

    def drop_root(self, root: UUID) -> None:
        """Forget a graph run and every run of it (its end)."""
        for run_id in self._members.pop(root, ()):
            self._runs.pop(run_id, None)

    def __len__(self) -> int:
        """How many runs are live."""
        return len(self._runs)


REGISTRY = RunRegistry()
"""The process's one registry (every handler records its runs here)."""


def current_run_id() -> UUID | None:
    """The LangChain run the calling code runs in (a node, a tool), if any."""
    config = var_child_runnable_config.get()
    callbacks = config.get("callbacks") if config else None
    run_id = getattr(callbacks, "parent_run_id", None)
    return run_id if isinstance(run_id, UUID) else None


def current_parent() -> tuple[otel_context.Context, RunEntry | None]:
    """The context an engine call's span starts in, and the instrumented run it belongs to.

    Inside an instrumented graph run: the nearest span of the current LangChain run (the node's,
    the model call's, the graph run's). Elsewhere: the caller's current OpenTelemetry context.
    """
    entry = REGISTRY.nearest(current_run_id())
    if entry is None or entry.span is None:
        return otel_context.get_current(), None
    return trace.set_span_in_context(entry.span), entry
