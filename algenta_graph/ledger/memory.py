"""The ledger of one process: right only where the state cannot outlive or leave the process.

An ``InMemorySaver`` (or no checkpointer), or a deployment declared one process
(``single_process``): :func:`process_ledger` is this process's one ledger, shared by every graph
it builds (keys are identities, so graphs never meet each other's entries).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from typing import Any

from algenta_graph.ledger.entries import Entry
from algenta_graph.ledger.store import Ledger

__all__ = ["MemoryLedger", "process_ledger"]


class MemoryLedger(Ledger):
    """A ledger in this process's memory (thread-safe; never held across an ``await``)."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry[Any]] = {}
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        """``memory of process <pid>``."""
        return f"memory of process {os.getpid()}"

    async def _get(self, key: str) -> Entry[Any] | None:
        with self._lock:
            return self._entries.get(key)

    async def _insert(self, mine: Entry[Any]) -> Entry[Any] | None:
        with self._lock:
            return self._entries.setdefault(mine.key, mine)

    async def _refresh(self, entry: Entry[Any]) -> None:
        with self._lock:
            current = self._entries.get(entry.key)
            if current is not None and current.token == entry.token and not current.done:
                self._entries[entry.key] = dataclasses.replace(current, at=time.time())

    async def _take_over(self, old: Entry[Any], mine: Entry[Any]) -> bool:
        with self._lock:
            current = self._entries.get(old.key)
            if current is None or current.token != old.token or current.done:
                return False
            self._entries[old.key] = old.adopted_by(mine)
            return True

    async def _finish(self, entry: Entry[Any]) -> None:
        with self._lock:
            current = self._entries.get(entry.key)
            if current is not None and current.token == entry.token:
                self._entries[entry.key] = current.finished()


_PROCESS = MemoryLedger()


def process_ledger() -> MemoryLedger:
    """This process's one in-memory ledger."""
    return _PROCESS
