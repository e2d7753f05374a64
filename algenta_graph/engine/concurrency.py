"""The engine's async code and blocking work: worker threads, and one lock per key."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio

T = TypeVar("T")


async def off_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run blocking work (SQLite, a large simulation) in a worker thread, off the event loop."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


class KeyedLocks:
    """One asyncio lock per key, dropped when nobody holds or waits for it (event-loop local)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Hold the lock of ``key`` for the ``async with`` block (waiting for it first)."""
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        """How many keys have a lock now (held, or waited for)."""
        return len(self._locks)
