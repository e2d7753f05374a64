"""The embedding side of the index: what a tool's embedding is computed from, and the query
vectors, computed once per query (off the event loop in async code) and cached."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from langchain_core.embeddings import Embeddings

import algenta_graph._native as _native

__all__ = [
    "QUERY_CACHE_SIZE",
    "VECTOR_ANN_FROM",
    "VECTOR_APPROX_FROM",
    "VECTOR_EXPANSION",
    "VECTOR_RESCORE",
    "QueryVectors",
    "embedding_text",
    "text_key",
    "vector_rows",
]

QUERY_CACHE_SIZE = 1024
"""Query vectors kept per index (least recently used first out)."""
VECTOR_APPROX_FROM: int = _native.DEFAULT_APPROX_FROM
"""From this many vectors on, the cosine ranking goes through the binary codes."""
VECTOR_RESCORE: int = _native.DEFAULT_RESCORE
"""Candidates (nearest by Hamming distance of the sign bits) scored for the cosine ranking."""
VECTOR_ANN_FROM: int = _native.DEFAULT_ANN_FROM
"""From this many vectors on, an HNSW graph proposes the cosine ranking's candidates (0, the
default: never)."""
VECTOR_EXPANSION: int = _native.DEFAULT_EXPANSION
"""Candidates the HNSW graph keeps while searching (its ``ef``); each is scored exactly."""


def embedding_text(name: str, description: str, schema: Any) -> str:
    """What a tool's embedding is computed from: its name, description, parameter names."""
    params = _native.project_tool(name, "", schema)["param_names"] if schema else []
    text = f"{name}: {description}"
    return f"{text} (parameters: {', '.join(params)})" if params else text


def text_key(text: str) -> int:
    """A stable 64-bit key of an embedding text (a tool is embedded again only when it
    changes)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def vector_rows(model: Embeddings, texts: list[str]) -> tuple[memoryview[float], int]:
    """The model's vectors of ``texts`` as one C-contiguous float32 buffer (rows in order) and
    their dimension, never a Python list of floats per vector: through
    ``embed_documents_array`` when the model has it (a float32 array), else the rows of
    ``embed_documents`` packed into an ``array("f")``. A ValueError names what is wrong."""
    fast = getattr(model, "embed_documents_array", None)
    if callable(fast):
        view = memoryview(fast(texts))
        if view.format == "f" and view.c_contiguous and view.ndim == 2:
            if view.shape is None or view.shape[0] != len(texts):
                raise ValueError(f"embeddings returned {view.shape} vectors for {len(texts)} texts")
            return view.cast("B").cast("f"), view.shape[1]
    raw = model.embed_documents(texts)
    if len(raw) != len(texts):
        raise ValueError(f"embeddings returned {len(raw)} vectors for {len(texts)} texts")
    flat = array("f")
    dim = len(raw[0]) if len(raw) else 0
    for i, row in enumerate(raw):
        if isinstance(row, (str, bytes)) or len(row) != dim:
            raise ValueError(
                f"embeddings returned vector {i} of {len(row)} numbers, vector 0 has {dim}"
            )
        flat.extend(row)
    return memoryview(flat), dim


class QueryVectors:
    """Query text -> its vector, from one ``Embeddings`` model, cached (LRU).

    ``get`` calls ``embed_query`` (blocking); ``aget`` calls ``aembed_query``, which LangChain
    runs in a thread unless the model has a native async API, so the event loop never waits on
    the model. Concurrent ``aget`` of one query share one call."""

    def __init__(self, embeddings: Embeddings, size: int = QUERY_CACHE_SIZE) -> None:
        self.embeddings = embeddings
        self._size = size
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, str], asyncio.Future[list[float]]] = {}

    def cached(self, query: str) -> list[float] | None:
        with self._lock:
            vector = self._cache.get(query)
            if vector is not None:
                self._cache.move_to_end(query)
            return vector

    def _keep(self, query: str, raw: Sequence[float]) -> list[float]:
        if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence):
            raise ValueError(f"embed_query returned {type(raw).__name__}, not a vector")
        vector = [float(x) for x in raw]
        with self._lock:
            self._cache[query] = vector
            self._cache.move_to_end(query)
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return vector

    def get(self, query: str) -> list[float]:
        vector = self.cached(query)
        if vector is None:
            vector = self._keep(query, self.embeddings.embed_query(query))
        return vector

    async def aget(self, query: str) -> list[float]:
        vector = self.cached(query)
        if vector is not None:
            return vector
        loop = asyncio.get_running_loop()
        key = (id(loop), query)
        pending = self._pending.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[list[float]] = loop.create_future()
        self._pending[key] = future
        try:
            vector = self._keep(query, await self.embeddings.aembed_query(query))
            future.set_result(vector)
            return vector
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody waits
            raise
        finally:
            del self._pending[key]
