"""Every touch of LangGraph's private API, in one place.

LangGraph gives a node no public handle on a few things the governed graph needs. Each touch
below says why it is needed and what happens if a LangGraph release changes it: the graph
**fails closed** (refuses to start, or refuses the operation), never silently weakens a
guarantee. Each is exercised by the tests of the feature that needs it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig

from algenta_graph.errors import AlgentaGraphError

try:
    # A run's checkpointer: a resume is checked against the thread's state before it runs (what
    # waits for an answer), and LangGraph puts the server's saver only in the run's
    # configurable, under this private key. The durability key sets a compiled graph's default
    # checkpoint durability ("sync": a step's checkpoint is written before the next step, which
    # crash recovery relies on); ``durability=`` on invoke has no "default for this graph" form.
    # The strict-resume key makes LangGraph refuse a resume map naming an interrupt that no
    # longer waits, before it is saved (it checks maps keyed by interrupt id only).
    # A node's answers saved before this run (the scratchpad's resume values, less the one the
    # run's resume map brought): an answer replayed is told from one given now.
    from langgraph._internal._constants import (
        CONFIG_KEY_CHECKPOINTER,
        CONFIG_KEY_DURABILITY,
        CONFIG_KEY_RESUME_MAP,
        CONFIG_KEY_SCRATCHPAD,
        CONFIG_KEY_STRICT_RESUME,
    )
except ImportError as exc:  # pragma: no cover - a LangGraph without them: do not start
    raise AlgentaGraphError(
        "this LangGraph version has no CONFIG_KEY_CHECKPOINTER / CONFIG_KEY_DURABILITY / "
        f"CONFIG_KEY_STRICT_RESUME ({exc}); algenta-graph needs them to check every resume and "
        "for its durability default: install a langgraph version algenta-graph supports"
    ) from None

__all__ = [
    "answers_saved",
    "checkpointer_of",
    "default_durability",
    "infer_as_node",
    "interrupt_id",
    "rebuild_as",
    "runtime_checkpointer",
    "server_store",
    "state_checkpointer",
    "strict_resume",
]

_Graph = TypeVar("_Graph")


def checkpointer_of(config: RunnableConfig | None) -> Any:
    """The checkpointer of the run ``config`` belongs to (``None`` without one)."""
    return ((config or {}).get("configurable") or {}).get(CONFIG_KEY_CHECKPOINTER)


def interrupt_id(config: RunnableConfig | None, answered: int) -> str | None:
    """The id LangGraph gives the interrupt a node raises after ``answered`` answered ones.

    An escalation records the id of the interrupt that asked about it (invariant 15), and
    LangGraph computes it from the task's checkpoint namespace with a private function. If a
    release drops it, ``None`` is recorded: the record says the id is unknown, and nothing else
    changes (the answer is bound by the escalation's digest, not by this id).
    """
    try:
        from langgraph.types import _interrupt_id
    except ImportError:  # pragma: no cover - a LangGraph without it: the id is unknown
        return None
    ns = ((config or {}).get("configurable") or {}).get("checkpoint_ns")
    return _interrupt_id(ns, answered) if isinstance(ns, str) else None


def answers_saved(config: RunnableConfig | None) -> int | None:
    """How many of a node's interrupts were answered before the run it runs in.

    LangGraph replays a resumed node from its start, returning each answer saved before (its
    task's resume values) from the interrupt that asked; the run's own answer, if it brings one
    (``Command(resume=...)``, plain or keyed by interrupt id), comes after them. Under a quorum
    an answer replayed must not count as another approval, while one given now must be refused
    when its operator's approval is already counted. ``None`` when a LangGraph release no longer
    says (every answer is then taken as replayed: never counted twice, only not refused by name).
    """
    configurable = (config or {}).get("configurable") or {}
    resume = getattr(configurable.get(CONFIG_KEY_SCRATCHPAD), "resume", None)
    if not isinstance(resume, list):
        return None
    saved = len(resume)
    keyed = configurable.get(CONFIG_KEY_RESUME_MAP)
    ns = configurable.get("checkpoint_ns")
    if saved and isinstance(keyed, Mapping) and isinstance(ns, str):
        try:
            from langgraph.types import _interrupt_id
        except ImportError:  # pragma: no cover - a LangGraph without it: unknown
            return None
        if _interrupt_id(ns, saved - 1) in keyed or _interrupt_id(ns, 0) in keyed:
            saved -= 1  # the run's own answer, by its interrupt's id (LangGraph appended it)
    return saved


def default_durability(durability: str) -> dict[str, Any]:
    """The ``configurable`` entry that makes ``durability`` a compiled graph's default."""
    return {CONFIG_KEY_DURABILITY: durability}


def strict_resume() -> dict[str, Any]:
    """The ``configurable`` entry that makes a run's resume strict (a stale resume map refused)."""
    return {CONFIG_KEY_STRICT_RESUME: True}


def infer_as_node(graph: Any, versions_seen: Mapping[str, Any]) -> str | None:
    """The node LangGraph attributes an ``update_state(as_node=None)`` to (its own rule).

    The record guard refuses such an update when that node is a governance node. If a LangGraph
    release drops this rule, :class:`LookupError` is raised and the guard refuses every update
    without ``as_node`` (fails closed).
    """
    infer = getattr(graph, "_infer_as_node", None)
    if infer is None:  # pragma: no cover - another LangGraph: the caller refuses
        raise LookupError("LangGraph no longer infers as_node")
    found = infer(versions_seen)
    return None if found is None else str(found)


def state_checkpointer(graph: Any, config: Any) -> Any:
    """The checkpointer ``graph.update_state(config, ...)`` writes to.

    The graph's, or the one the LangGraph server puts in ``config``; the graph's own when
    LangGraph has no resolver.
    """
    resolve = getattr(graph, "_state_checkpointer", None)
    if resolve is not None:
        return resolve(config)
    return graph.checkpointer  # pragma: no cover - an older or newer LangGraph


def rebuild_as(graph: Any, cls: type[_Graph]) -> _Graph:
    """``graph`` (a compiled graph) rebuilt as ``cls``, a subclass adding behaviour.

    A compiled graph has no public "copy as subclass"; its constructor takes its attributes. A
    LangGraph release that renames them raises ``TypeError`` here, when the served graph is
    built: the server does not start (fails closed), it never serves an unguarded graph.
    """
    attrs = {k: v for k, v in graph.__dict__.items() if k != "__orig_class__"}
    return cls(**attrs)


async def server_store() -> Any:
    """The store of the LangGraph server this process serves (its ``/store`` API's), or ``None``.

    The operator inbox keeps its sessions there: the one store every worker of a deployment
    shares (PostgreSQL under the LangGraph server; the dev server's in-memory store, persisted
    in ``.langgraph_api/``, under ``langgraph dev``). LangGraph gives a custom route no public
    handle on it. ``None`` outside a LangGraph server; a release that moves it raises
    :class:`LookupError`, and the inbox refuses to sign anyone in (fails closed).
    """
    if "langgraph_api.server" not in sys.modules:
        return None
    try:
        from langgraph_api.store import get_store
    except ImportError as exc:  # pragma: no cover - another langgraph-api: no sessions
        raise LookupError(f"langgraph-api has no langgraph_api.store.get_store ({exc})") from None
    return await get_store()


def runtime_checkpointer() -> Any:
    """The saver ``langgraph dev``'s in-memory runtime keeps every thread's checkpoints in.

    The served graph's deadline watcher reads what waits there (a served graph under the server
    checkpointer reads its database instead). LangGraph gives a custom app no public handle on
    it. A release that moves it raises :class:`LookupError`, and the watcher does not start
    (it says so; an answer after a deadline is still declined).
    """
    try:
        from langgraph_runtime_inmem.checkpoint import Checkpointer
    except ImportError as exc:
        raise LookupError(
            f"langgraph-api's in-memory runtime has no checkpoint.Checkpointer ({exc})"
        ) from None
    return Checkpointer()
