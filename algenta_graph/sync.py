"""The governed graph for synchronous scripts and notebooks: one event loop in a thread.

Example::

    from algenta_graph import create_governed_agent_sync

    with create_governed_agent_sync(profile="execute", db="runs.sqlite") as agent:
        out = agent.invoke({"messages": [("user", "...")]}, thread_id="t1")
        agent.resume({"action": "override", "operator": "ana", "reason": "..."}, "t1")

    # or from the one configuration (algenta_graph.config), as the served graph is built
    with create_governed_agent_sync(config="agent.toml", db="runs.sqlite") as agent:
        ...
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from algenta_graph.graph import aclose_governed_agent, create_governed_agent

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

__all__ = ["GovernedAgentSync", "create_governed_agent_sync"]

_T = TypeVar("_T")


class GovernedAgentSync:
    """The governed graph for synchronous scripts: one event loop, in a background thread.

    The MCP session and the SQLite checkpointer live on that one loop for the agent's life, so
    every call reuses them. Works inside Jupyter too (its own loop is left alone).

    Args:
        model: as for :func:`~algenta_graph.graph.create_governed_agent`.
        db: the checkpointer: a SQLite path or a ``postgresql://`` URL (the graph's ledger lives
            in the same database unless ``ledger=`` names another).
        **kwargs: every other argument of :func:`~algenta_graph.graph.create_governed_agent`
            (``config=``, ``ledger=`` and ``single_process=`` included).

    Example::

        with create_governed_agent_sync(profile="execute", db="runs.sqlite") as agent:
            out = agent.invoke({"messages": [("user", "...")]}, thread_id="t1")
            agent.resume({"action": "override", "operator": "ana", "reason": "..."}, "t1")
    """

    def __init__(self, model: Any = None, *, db: str | None = None, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="algenta-graph-loop", daemon=True
        )
        self._thread.start()
        self._stack = contextlib.AsyncExitStack()
        try:
            self.graph: CompiledStateGraph[Any, Any, Any, Any] = self._run(
                self._open(model, db, kwargs)
            )
        except BaseException:
            self._stop()
            raise

    async def _open(
        self, model: Any, db: str | None, kwargs: dict[str, Any]
    ) -> CompiledStateGraph[Any, Any, Any, Any]:
        if db is not None:
            kwargs["checkpointer"] = db  # a SQLite path or a postgresql:// URL
        graph = await create_governed_agent(model, **kwargs)
        self._stack.push_async_callback(aclose_governed_agent, graph)
        return graph

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @staticmethod
    def _config(thread_id: str | None, config: RunnableConfig | None) -> RunnableConfig:
        conf: dict[str, Any] = dict(config or {})
        if thread_id is not None:
            conf["configurable"] = {**(conf.get("configurable") or {}), "thread_id": thread_id}
        return cast(RunnableConfig, conf)

    def invoke(
        self,
        input: Any,
        thread_id: str | None = None,
        *,
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Run the graph to its end or its next interrupt; returns the final state values."""
        return self._run(self.graph.ainvoke(input, self._config(thread_id, config), **kwargs))

    def resume(
        self, answer: Mapping[str, Any], thread_id: str, *, config: RunnableConfig | None = None
    ) -> dict[str, Any]:
        """Answer a pending escalation: ``{"action", "operator", "reason"}``."""
        return self.invoke(Command(resume=dict(answer)), thread_id, config=config)

    def get_state(self, thread_id: str, *, config: RunnableConfig | None = None) -> Any:
        """The thread's current ``StateSnapshot`` (values, next nodes, interrupts)."""
        return self._run(self.graph.aget_state(self._config(thread_id, config)))

    def close(self) -> None:
        """Close the connection and the checkpointer, then stop the loop (idempotent)."""
        if self._loop.is_closed():
            return
        try:
            self._run(self._stack.aclose())
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> GovernedAgentSync:
        """The agent itself (already open)."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the agent (:meth:`close`)."""
        self.close()


def create_governed_agent_sync(model: Any = None, **kwargs: Any) -> GovernedAgentSync:
    """Synchronous :func:`create_governed_agent`: a :class:`GovernedAgentSync`.

    Args:
        model: as for :func:`~algenta_graph.graph.create_governed_agent`.
        **kwargs: ``db=`` (a SQLite path or a database URL) and every other argument of
            :func:`~algenta_graph.graph.create_governed_agent`.
    """
    return GovernedAgentSync(model, **kwargs)
