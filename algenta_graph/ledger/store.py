"""``Ledger``: the one store of entries every process serving a graph shares, typed.

Five operations, each atomic across every process that opens the same ledger:

- :meth:`Ledger.insert`: insert an entry unless its key has one (insert-if-absent); returns the
  entry in force, so the caller knows whether it won;
- :meth:`Ledger.get` / :meth:`Ledger.peek`: the entry of a key, its value validated as the kind
  the caller expects (a key holding another kind is :class:`~algenta_graph.errors.LedgerError`);
  ``peek`` creates nothing (a reader such as ``algenta-graph escalations``);
- :meth:`Ledger.take_over`: compare-and-set, an abandoned entry's lease replaced by the caller's
  (its value kept);
- :meth:`Ledger.refresh`: the claimant is alive (``at`` moved to now);
- :meth:`Ledger.finish`: what the entry stands for finished.

The backends (:mod:`~algenta_graph.ledger.memory`, :mod:`~algenta_graph.ledger.sqlite`,
:mod:`~algenta_graph.ledger.postgres`) implement the raw operations; this class types them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, cast

from algenta_graph.errors import LedgerError
from algenta_graph.ledger.entries import Entry, V

__all__ = ["Ledger"]


def _as(kind: type[V], key: str, entry: Entry[Any] | None) -> Entry[V] | None:
    if entry is None:
        return None
    if not isinstance(entry.value, kind):
        raise LedgerError(
            f"the ledger's entry {key!r} holds a {entry.value.kind!r} entry, not the "
            f"{kind.__name__} asked for: nothing was done with it"
        )
    return cast("Entry[V]", entry)


class Ledger(ABC):
    """The ledger (see the module docs); a backend implements the ``_raw`` operations."""

    @property
    @abstractmethod
    def where(self) -> str:
        """Where it lives, as it may be shown (a URL without its password)."""

    async def get(self, key: str, kind: type[V]) -> Entry[V] | None:
        """The entry in force for ``key`` (nothing is written but the table, once)."""
        return _as(kind, key, await self._get(key))

    async def peek(self, key: str, kind: type[V]) -> Entry[V] | None:
        """:meth:`get`, creating nothing: a database without the ledger's table has no entry."""
        return _as(kind, key, await self._peek(key))

    async def insert(self, mine: Entry[V]) -> Entry[V]:
        """Insert ``mine`` unless its key has an entry; the entry in force."""
        found = _as(type(mine.value), mine.key, await self._insert(mine))
        assert found is not None, f"the ledger lost {mine.key!r}"
        return found

    async def take_over(self, old: Entry[V], mine: Entry[V]) -> bool:
        """Compare-and-set: ``old`` (abandoned, unfinished) taken under ``mine``'s lease.

        ``old``'s value is kept. False when ``old`` is no longer the entry in force (taken
        over already) or finished: what it stands for is never completed twice here.
        """
        return await self._take_over(old, mine)

    async def refresh(self, entry: Entry[Any]) -> None:
        """The claimant is alive: its unfinished entry's ``at`` moves to now."""
        await self._refresh(entry)

    async def finish(self, entry: Entry[Any]) -> None:
        """What ``entry`` stands for finished: done (if it is still the entry in force)."""
        await self._finish(entry)

    async def aclose(self) -> None:  # noqa: B027 - a backend without resources closes nothing
        """Close what the ledger holds open (its connection or pool)."""

    # ------------------------------------------------------------------ the backend's part

    @abstractmethod
    async def _get(self, key: str) -> Entry[Any] | None: ...

    async def _peek(self, key: str) -> Entry[Any] | None:
        return await self._get(key)

    @abstractmethod
    async def _insert(self, mine: Entry[Any]) -> Entry[Any] | None: ...

    @abstractmethod
    async def _take_over(self, old: Entry[Any], mine: Entry[Any]) -> bool: ...

    @abstractmethod
    async def _refresh(self, entry: Entry[Any]) -> None: ...

    @abstractmethod
    async def _finish(self, entry: Entry[Any]) -> None: ...
