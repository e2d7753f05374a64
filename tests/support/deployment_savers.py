"""Checkpoint savers of classes the project does not know.

A user's deployment may keep its checkpoints in a saver the project never heard of: a subclass
(:class:`UnknownSqliteSaver`, an ``AsyncSqliteSaver`` under another name) or a thin wrapper
(:class:`DelegatingSaver`, delegating every call to a saver it holds, as an adapter, a cache or
a tracing layer does; ``langgraph dev`` itself hands a graph such a wrapper). Neither may be
recognised by its class: the ledger must come from the configuration, or the graph must refuse
to start.

Also here, :func:`unknown_sqlite_checkpointer` and :func:`delegating_postgres_checkpointer`: the
same savers as a ``langgraph.json`` ``"checkpointer": {"path": ...}`` names them (this directory
on the server's ``PYTHONPATH``), their database in :data:`ENV_DATABASE`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

ENV_DATABASE = "DEPLOYMENT_SAVER_DATABASE"
"""The database of the server-side factories here: a SQLite path or a ``postgresql://`` URL."""


class UnknownSqliteSaver(AsyncSqliteSaver):
    """An ``AsyncSqliteSaver`` under a class name of the user's (it changes nothing)."""


class DelegatingSaver(BaseCheckpointSaver[Any]):
    """A thin wrapper: every async call goes to ``inner`` unchanged (an async graph makes no
    other).

    Args:
        inner: the saver that really keeps the checkpoints.
    """

    def __init__(self, inner: BaseCheckpointSaver[Any]) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    @property
    def config_specs(self) -> list[Any]:
        """The inner saver's."""
        return list(self.inner.config_specs)

    def get_next_version(self, current: Any, channel: None) -> Any:
        """The inner saver's versions."""
        return self.inner.get_next_version(current, channel)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Delegated."""
        return await self.inner.aget_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Delegated."""
        async for found in self.inner.alist(config, filter=filter, before=before, limit=limit):
            yield found

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Delegated."""
        return await self.inner.aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Delegated."""
        await self.inner.aput_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Delegated."""
        await self.inner.adelete_thread(thread_id)


@contextlib.asynccontextmanager
async def unknown_sqlite_checkpointer() -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """A server's checkpointer: :class:`UnknownSqliteSaver` on the file :data:`ENV_DATABASE`."""
    async with UnknownSqliteSaver.from_conn_string(os.environ[ENV_DATABASE]) as saver:
        yield saver


@contextlib.asynccontextmanager
async def delegating_postgres_checkpointer() -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """A server's checkpointer: a :class:`DelegatingSaver` over the PostgreSQL database
    :data:`ENV_DATABASE` names."""
    from algenta_graph.serving.checkpointer import open_checkpointer

    async with open_checkpointer(os.environ[ENV_DATABASE]) as saver:
        yield DelegatingSaver(saver)
