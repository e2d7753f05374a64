"""Learning from use: a usage signal that reranks retrieved tools by what served similar queries.

`UsageSignal` keeps, per profile and per tool, the query terms of the successful calls that tool
served, in a LangGraph ``BaseStore`` (``InMemoryStore``, ``SqliteStore``, ``PostgresStore``: it
survives restarts and is shared by every worker on the same store). ``rerank`` then lifts the
BM25 hits whose history matches the query. The signal is built to stay a signal:

* **Only what counts is recorded**: a failed call (``ok=False``) or a tool outside the active
  profile (``allowed``) records nothing; each profile has its own history.
* **Bounded influence**: a hit's score becomes ``score * (1 + weight * u)`` with ``u`` in
  ``[0, 1)``, so usage can lift a tool by less than ``1 + weight`` times its own BM25 score
  and never brings in a tool the index did not retrieve for the query.
* **Capped and decaying**: a tool's history is worth at most ``per_tool_cap`` calls (older
  weight is scaled down beyond it) and keeps its ``max_terms`` heaviest terms; every weight
  halves each ``half_life`` seconds.
* **Deterministic**: for a given store content and ``now`` the ranking is always the same
  (ties by tool name); nothing is random or learned elsewhere.

A record is a read-modify-write of one store item. Within one process, records of the same tool
take turns (a lock per tool and profile; ``arecord`` an ``asyncio`` one per event loop), so
concurrent threads and runs are all counted. Across processes the store has no compare-and-set:
two workers recording the same tool at the same instant can still lose one call (last write
wins), which only ever under-counts.

**The store can be the run's**: a signal made without one (``UsageSignal()``) keeps its history
in whatever store each call passes (``store=``): the graph passes the run's store
(``runtime.store``), which on a LangGraph server is the server's own (``langgraph.json``
``store``), so the served graph learns across restarts and workers. Its items live under
:data:`DEFAULT_NAMESPACE`, which the served graph's store auth refuses to every API caller
(:mod:`algenta_graph.serving.store_auth`): only the graph writes there.

Example:
    >>> from langgraph.store.memory import InMemoryStore
    >>> from algenta_graph.retrieval import ToolIndex
    >>> index = ToolIndex()
    >>> index.add([{"name": "text_embed", "description": "Embed a sentence into a vector"},
    ...            {"name": "image_embed", "description": "Embed an image into a vector"}])
    >>> usage = UsageSignal(InMemoryStore())
    >>> usage.record("vectors for my product reviews", "text_embed", now=0.0)
    True
    >>> [h.tool_id for h in usage.search(index, "embed the product reviews", now=0.0)]
    ['text_embed', 'image_embed']
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import weakref
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.store.base import BaseStore, GetOp, Item

import algenta_graph._native as _native
from algenta_graph.errors import UsageStoreMissing
from algenta_graph.retrieval.index import Hit, ToolIndex

__all__ = ["DEFAULT_NAMESPACE", "UsageSignal", "UsageStoreMissing"]

DEFAULT_NAMESPACE: tuple[str, ...] = ("algenta_graph", "usage")
"""Where the signal's items live by default: ``(*DEFAULT_NAMESPACE, profile)``, key the tool."""
_DAY = 86_400.0


@dataclass(frozen=True)
class _History:
    """One tool's decayed history: ``calls`` and per-term weights, as of ``now``."""

    calls: float
    terms: Mapping[str, float]


class UsageSignal:
    """Usage history of tools in a LangGraph store, and a bounded reranking from it.

    Args:
        store: any LangGraph ``BaseStore``; ``None`` for a signal that uses the store each call
            passes (``store=``: the run's store, in the graph).
        namespace: the store namespace prefix; a profile's items live under
            ``(*namespace, profile)``, one item per tool (key: the tool name).
        weight: the largest relative lift, ``score * (1 + weight * u)`` with ``0 <= u < 1``.
        half_life: seconds after which a recorded call counts half (default 30 days).
        per_tool_cap: the most calls a tool's history is worth; beyond it every weight of the
            tool is scaled down so the total stays at the cap.
        max_terms: distinct terms kept per tool (the heaviest; ties by term).
        depth: how many BM25 hits ``search`` reranks.
    """

    def __init__(
        self,
        store: BaseStore | None = None,
        namespace: Sequence[str] = DEFAULT_NAMESPACE,
        *,
        weight: float = 0.5,
        half_life: float = 30 * _DAY,
        per_tool_cap: float = 200.0,
        max_terms: int = 256,
        depth: int = 50,
    ) -> None:
        if not (weight >= 0 and math.isfinite(weight)):
            raise ValueError(f"weight must be a finite number >= 0, got {weight}")
        if not half_life > 0:
            raise ValueError(f"half_life must be > 0 seconds, got {half_life}")
        if not per_tool_cap >= 1:
            raise ValueError(f"per_tool_cap must be >= 1, got {per_tool_cap}")
        if max_terms < 1 or depth < 1:
            raise ValueError("max_terms and depth must be >= 1")
        self.store = store
        self.namespace = tuple(namespace)
        self.weight = weight
        self.half_life = half_life
        self.per_tool_cap = per_tool_cap
        self.max_terms = max_terms
        self.depth = depth
        self._locks = _KeyLocks()

    # --- recording -------------------------------------------------------------------------

    def record(
        self,
        query: str,
        tool_id: str,
        *,
        profile: str = "default",
        ok: bool = True,
        allowed: Collection[str] | None = None,
        now: float | None = None,
        store: BaseStore | None = None,
    ) -> bool:
        """Record that ``tool_id`` served ``query``; returns whether anything was recorded
        (nothing for a failed call, a tool outside ``allowed``, or a query without terms).

        ``store``: where (default the signal's own; :class:`UsageStoreMissing` if neither)."""
        target = self._store(store)
        if not self._counts(query, tool_id, ok, allowed):
            return False
        ns = self._ns(profile)
        with self._locks.thread_lock((id(target), ns, tool_id)):
            value = self._updated(target.get(ns, tool_id), query, _now(now))
            if value is None:
                return False
            target.put(ns, tool_id, value, index=False)
        return True

    async def arecord(
        self,
        query: str,
        tool_id: str,
        *,
        profile: str = "default",
        ok: bool = True,
        allowed: Collection[str] | None = None,
        now: float | None = None,
        store: BaseStore | None = None,
    ) -> bool:
        """``record`` through the store's async API."""
        target = self._store(store)
        if not self._counts(query, tool_id, ok, allowed):
            return False
        ns = self._ns(profile)
        async with self._locks.task_lock((id(target), ns, tool_id)):
            value = self._updated(await target.aget(ns, tool_id), query, _now(now))
            if value is None:
                return False
            await target.aput(ns, tool_id, value, index=False)
        return True

    def has_store(self, store: BaseStore | None = None) -> bool:
        """Whether a call with ``store=store`` has a store to use (its own, or ``store``)."""
        return store is not None or self.store is not None

    def _store(self, store: BaseStore | None) -> BaseStore:
        target = store if store is not None else self.store
        if target is None:
            raise UsageStoreMissing(
                "this UsageSignal has no store of its own: pass store= (a LangGraph BaseStore; "
                "in the graph, the run's store)"
            )
        return target

    @staticmethod
    def _counts(query: str, tool_id: str, ok: bool, allowed: Collection[str] | None) -> bool:
        if not isinstance(query, str) or not isinstance(tool_id, str) or not tool_id:
            raise TypeError("query and tool_id must be strings")
        return ok and (allowed is None or tool_id in allowed)

    def _updated(self, item: Item | None, query: str, now: float) -> dict[str, Any] | None:
        terms_now = set(_native.tokenize(query))
        if not terms_now:
            return None
        history = self._decayed(item, now)
        terms = dict(history.terms)
        for term in terms_now:
            terms[term] = terms.get(term, 0.0) + 1.0
        calls = history.calls + 1.0
        if calls > self.per_tool_cap:
            scale = self.per_tool_cap / calls
            calls = self.per_tool_cap
            terms = {t: w * scale for t, w in terms.items()}
        if len(terms) > self.max_terms:
            kept = sorted(terms.items(), key=lambda tw: (-tw[1], tw[0]))[: self.max_terms]
            terms = dict(kept)
        return {
            "v": 1,
            "at": now,
            "calls": round(calls, 9),
            "terms": {t: round(w, 9) for t, w in sorted(terms.items())},
        }

    def _decayed(self, item: Item | None, now: float) -> _History:
        if item is None or not isinstance(item.value, Mapping) or item.value.get("v") != 1:
            return _History(0.0, {})
        value = item.value
        age = max(0.0, now - float(value.get("at", now)))
        factor = 0.5 ** (age / self.half_life)
        terms = value.get("terms") or {}
        return _History(
            float(value.get("calls", 0.0)) * factor,
            {str(t): float(w) * factor for t, w in terms.items()},
        )

    # --- reranking -------------------------------------------------------------------------

    def rerank(
        self,
        query: str,
        hits: Sequence[Hit],
        *,
        k: int | None = None,
        profile: str = "default",
        now: float | None = None,
        store: BaseStore | None = None,
    ) -> list[Hit]:
        """``hits`` (BM25 hits for ``query``) reordered by usage, best first, cut to ``k``."""
        target = self._store(store)
        ns = self._ns(profile)
        items = target.batch([GetOp(ns, h.tool_id) for h in hits]) if hits else []
        return self._reranked(query, hits, items, k, _now(now))

    async def arerank(
        self,
        query: str,
        hits: Sequence[Hit],
        *,
        k: int | None = None,
        profile: str = "default",
        now: float | None = None,
        store: BaseStore | None = None,
    ) -> list[Hit]:
        """``rerank`` through the store's async API."""
        target = self._store(store)
        ns = self._ns(profile)
        items = await target.abatch([GetOp(ns, h.tool_id) for h in hits]) if hits else []
        return self._reranked(query, hits, items, k, _now(now))

    def search(
        self,
        index: ToolIndex,
        query: str,
        k: int = 5,
        allow: Collection[str] | None = None,
        *,
        profile: str = "default",
        now: float | None = None,
        store: BaseStore | None = None,
    ) -> list[Hit]:
        """``index.search`` to ``depth`` hits, reranked by usage, cut to ``k``."""
        hits = index.search(query, max(k, self.depth), allow)
        return self.rerank(query, hits, k=k, profile=profile, now=now, store=store)

    async def asearch(
        self,
        index: ToolIndex,
        query: str,
        k: int = 5,
        allow: Collection[str] | None = None,
        *,
        profile: str = "default",
        now: float | None = None,
        store: BaseStore | None = None,
    ) -> list[Hit]:
        """``search`` with the store's async API and the query embedded off the event loop.

        With embeddings, the query's vector is computed through ``aembed_query`` (never on the
        event loop) and cached, then the in-memory index search uses it.
        """
        await index.aembed_query(query)
        hits = index.search(query, max(k, self.depth), allow)
        return await self.arerank(query, hits, k=k, profile=profile, now=now, store=store)

    def _reranked(
        self,
        query: str,
        hits: Sequence[Hit],
        items: Sequence[Any],
        k: int | None,
        now: float,
    ) -> list[Hit]:
        histories = {
            h.tool_id: self._decayed(item if isinstance(item, Item) else None, now)
            for h, item in zip(hits, items, strict=True)
        }
        u = _lifts(query, histories)
        scored = [
            Hit(h.tool_id, h.score * (1.0 + self.weight * u.get(h.tool_id, 0.0))) for h in hits
        ]
        scored.sort(key=lambda h: (-h.score, h.tool_id))
        return scored if k is None else scored[:k]

    def _ns(self, profile: str) -> tuple[str, ...]:
        if not isinstance(profile, str) or not profile:
            raise ValueError("profile must be a non-empty string")
        return (*self.namespace, profile)


class _KeyLocks:
    """One lock per key, kept only while in use: threading locks for ``record``, and per event
    loop ``asyncio`` locks for ``arecord``."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._threads: weakref.WeakValueDictionary[Any, Any] = weakref.WeakValueDictionary()
        self._tasks: weakref.WeakValueDictionary[Any, asyncio.Lock] = weakref.WeakValueDictionary()

    def thread_lock(self, key: Any) -> Any:
        with self._guard:
            lock = self._threads.get(key)
            if lock is None:
                lock = self._threads[key] = _WeakLock()
            return lock

    def task_lock(self, key: Any) -> asyncio.Lock:
        loop_key = (id(asyncio.get_running_loop()), key)
        with self._guard:
            lock = self._tasks.get(loop_key)
            if lock is None:
                lock = self._tasks[loop_key] = asyncio.Lock()
            return lock


class _WeakLock:
    """A weak-referenceable lock (``threading.Lock`` objects are not)."""

    __slots__ = ("__weakref__", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def _lifts(query: str, histories: Mapping[str, _History]) -> dict[str, float]:
    """Per tool, how much of the query its history covers, in ``[0, 1)``.

    A query term weighs ``ln(1 + n / df)`` where ``n`` is the number of candidates with a
    history and ``df`` those whose history has the term: a term every candidate has served
    says little. A tool's coverage of a term is ``c / (c + 1)`` for its decayed count ``c``.
    """
    terms = sorted(set(_native.tokenize(query)))
    with_history = [h for h in histories.values() if h.calls > 0]
    if not terms or not with_history:
        return {}
    n = len(with_history)
    weights = {}
    for t in terms:
        df = sum(1 for h in with_history if h.terms.get(t, 0.0) > 0)
        if df:
            weights[t] = math.log(1.0 + n / df)
    total = sum(weights.values())
    if total <= 0:
        return {}
    out = {}
    for tool_id, h in histories.items():
        if h.calls <= 0:
            continue
        covered = sum(w * _saturate(h.terms.get(t, 0.0)) for t, w in weights.items())
        out[tool_id] = covered / total
    return out


def _saturate(c: float) -> float:
    return c / (c + 1.0) if c > 0 else 0.0


def _now(now: float | None) -> float:
    return time.time() if now is None else float(now)
