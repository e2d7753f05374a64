"""Tool retrieval: a BM25F index over tool names, descriptions and input schemas.

`ToolIndex` is a thin typed facade over the Rust index in `algenta_graph._native`. It accepts
LangChain tools, MCP tools and plain dicts, projects each tool's JSON schema (parameter names,
descriptions and enum values, recursively) and ranks tools for a query. Tokenizer, fields,
weights and defaults are the contract in ``native/README.md``.

Example:
    >>> from algenta_graph.retrieval import ToolIndex
    >>> index = ToolIndex()
    >>> index.add([
    ...     {"name": "get_weather", "description": "Current weather for a city",
    ...      "input_schema": {"type": "object", "properties": {
    ...          "city": {"type": "string"},
    ...          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}},
    ...     {"name": "send_email", "description": "Send an email",
    ...      "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}}},
    ... ])
    >>> [hit.tool_id for hit in index.search("weather in Paris, in celsius")]
    ['get_weather']
    >>> index.search("send an email", allow={"get_weather"})
    []
    >>> len(index), "send_email" in index
    (2, True)
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from langchain_core.embeddings import Embeddings
from langchain_core.tools import BaseTool
from mcp.types import Tool as McpTool
from typing_extensions import Buffer

import algenta_graph._native as _native
from algenta_graph.retrieval.fusion import FUSION_BM25_WEIGHT, FUSION_COSINE_FLOOR, FUSION_DEPTH
from algenta_graph.retrieval.intents import split_intents
from algenta_graph.retrieval.tools import ToolLike, tool_parts
from algenta_graph.retrieval.vectors import (
    VECTOR_ANN_FROM,
    VECTOR_APPROX_FROM,
    VECTOR_EXPANSION,
    VECTOR_RESCORE,
    QueryVectors,
    embedding_text,
    text_key,
    vector_rows,
)

__all__ = [
    "DEFAULT_B",
    "DEFAULT_K1",
    "DEFAULT_LENGTH_EXPONENT",
    "DEFAULT_WEIGHTS",
    "PROGRESS_BATCH",
    "Hit",
    "Progress",
    "ToolIndex",
]

DEFAULT_K1: float = _native.DEFAULT_K1
DEFAULT_B: Mapping[str, float] = dict(_native.DEFAULT_B)
"""Length normalisation per field, 0..1."""
DEFAULT_LENGTH_EXPONENT: Mapping[str, float] = dict(_native.DEFAULT_LENGTH_EXPONENT)
"""Exponent of each field's relative length in its normalisation, 0..1 (below 1: sublinear)."""
PerField: TypeAlias = float | Mapping[str, float]
"""One value for every field, or ``{field: value}`` (omitted fields keep their default)."""
DEFAULT_WEIGHTS: Mapping[str, float] = dict(_native.DEFAULT_WEIGHTS)
"""Field weights: ``name``, ``description``, ``param_names``, ``param_text``."""

Progress: TypeAlias = Callable[[str, int, int], object]
"""``progress(phase, done, total)``: ``phase`` is ``"project"``, ``"tokenize"``, ``"index"``."""
PROGRESS_BATCH = 50_000
"""Tools per progress report in ``ToolIndex.add(progress=...)``."""
Vector: TypeAlias = Sequence[float] | Buffer
"""A vector: numbers, or a float32 buffer (``bytes``, ``array("f")``, a numpy array)."""


def _print_progress(phase: str, done: int, total: int) -> None:
    print(f"tool index: {phase} {done:,} / {total:,}", file=sys.stderr, flush=True)


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: the tool's name and its BM25F score (higher is better)."""

    tool_id: str
    score: float


# Hits are built on every search: set the two slots directly (what the frozen dataclass's
# __init__ does through object.__setattr__, at about half the cost).
_new_hit = object.__new__
_set_tool_id = vars(Hit)["tool_id"].__set__
_set_score = vars(Hit)["score"].__set__


def _hits(raw: list[tuple[str, float]]) -> list[Hit]:
    hits = []
    for name, score in raw:
        hit = _new_hit(Hit)
        _set_tool_id(hit, name)
        _set_score(hit, score)
        hits.append(hit)
    return hits


class ToolIndex:
    """A BM25F index of tools, keyed by tool name, with an optional embedding side.

    Args:
        k1: term-frequency saturation (default ``DEFAULT_K1``).
        b: length normalisation, 0..1, one number or per field (default ``DEFAULT_B``).
        length_exponent: how a field's relative length enters its normalisation,
            ``(len / avglen) ** e``, 0..1, one number or per field (default
            ``DEFAULT_LENGTH_EXPONENT``: the description's length counts sublinearly).
        name_weight, description_weight, param_name_weight, param_text_weight: BM25F field
            weights (defaults in ``DEFAULT_WEIGHTS``): names and parameter names count more
            than prose.

        embeddings: any LangChain ``Embeddings``. Each tool is then embedded once when added
            (again only if its text changes), from its name, description and parameter names;
            the vectors live in the native index next to the postings, and every search fuses
            the BM25 ranking with the cosine ranking (:mod:`algenta_graph.retrieval.fusion`).
            Query vectors are computed once per query and cached. Without it (the default)
            the index is BM25 alone: offline, nothing embedded.
        vector_precision: ``"int8"`` (default) or ``"f32"`` (four times the vector memory, cosines
            within about 0.01).
        bm25_weight, cosine_floor, depth: the fusion's constants (defaults
            ``FUSION_BM25_WEIGHT``, ``FUSION_COSINE_FLOOR``, ``FUSION_DEPTH``).
        approx_from, rescore: from ``approx_from`` vectors on (default
            ``VECTOR_APPROX_FROM``), the cosine ranking is approximate: the tools nearest by
            Hamming distance of their vectors' sign bits are scored (int8, then the best
            exactly), ``rescore`` of them for 50 hits at 10,000 vectors (default
            ``VECTOR_RESCORE``) and ``rescore * (k + 10) / 60 * (n / 10000) ** 0.3`` for
            ``k`` hits among ``n``; below it, an exact scan.
        ann_from, expansion: from ``ann_from`` vectors on (default ``VECTOR_ANN_FROM``, 0:
            never) an HNSW graph of the vectors, kept up to date by adds and removes, proposes
            ``expansion`` candidates (default ``VECTOR_EXPANSION``), each scored exactly;
            removed and disallowed tools are never returned. Opt-in: building the graph takes
            minutes at a million tools.
        multi_intent: rank each request of a message of several (lines, clauses, ``and``
            before a request verb: :mod:`algenta_graph.retrieval.intents`) as well as the
            whole message, and fuse the rankings (on by default; a message of one request is
            ranked exactly as without).

    Adding a tool whose name is already indexed replaces it; statistics stay exact, so an
    index built incrementally ranks exactly like one built from scratch. Searches release
    the GIL and may run from several threads at once.
    """

    __slots__ = ("_index", "_multi_intent", "_queries")

    def __init__(
        self,
        *,
        k1: float = DEFAULT_K1,
        b: PerField | None = None,
        length_exponent: PerField | None = None,
        name_weight: float = DEFAULT_WEIGHTS["name"],
        description_weight: float = DEFAULT_WEIGHTS["description"],
        param_name_weight: float = DEFAULT_WEIGHTS["param_names"],
        param_text_weight: float = DEFAULT_WEIGHTS["param_text"],
        embeddings: Embeddings | None = None,
        vector_precision: str = "int8",
        bm25_weight: float = FUSION_BM25_WEIGHT,
        cosine_floor: float = FUSION_COSINE_FLOOR,
        depth: int = FUSION_DEPTH,
        approx_from: int = VECTOR_APPROX_FROM,
        rescore: int = VECTOR_RESCORE,
        ann_from: int = VECTOR_ANN_FROM,
        expansion: int = VECTOR_EXPANSION,
        multi_intent: bool = True,
    ) -> None:
        if embeddings is not None and not isinstance(embeddings, Embeddings):
            raise TypeError(
                f"embeddings must be a LangChain Embeddings, got {type(embeddings).__name__}"
            )
        if isinstance(depth, bool) or not isinstance(depth, int):
            raise TypeError(f"depth must be an integer, got {type(depth).__name__}")
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._queries = QueryVectors(embeddings) if embeddings is not None else None
        self._index = _native.Bm25Index(
            k1=k1,
            b=_per_field(b),
            length_exponent=_per_field(length_exponent),
            name_weight=name_weight,
            description_weight=description_weight,
            param_name_weight=param_name_weight,
            param_text_weight=param_text_weight,
            vector_precision=vector_precision,
            bm25_weight=bm25_weight,
            cosine_floor=cosine_floor,
            fusion_depth=depth,
            approx_from=approx_from,
            rescore=rescore,
            ann_from=ann_from,
            expansion=expansion,
            multi_intent=multi_intent,
        )
        self._multi_intent = multi_intent

    @property
    def embeddings(self) -> Embeddings | None:
        """The embedding model, or ``None`` (BM25 alone)."""
        return self._queries.embeddings if self._queries is not None else None

    def add(
        self,
        tools: Iterable[ToolLike],
        *,
        progress: Progress | bool | None = None,
        vectors: Sequence[Vector | None] | Buffer | None = None,
    ) -> None:
        """Add or replace tools. All or nothing: if any tool is bad, none is added.

        ``progress`` reports large builds: a callable ``progress(phase, done, total)`` called
        every ``PROGRESS_BATCH`` tools and at the end of each phase: ``"project"``
        (validating and projecting: where a bad tool is found) and ``"tokenize"`` (on a
        worker thread while the projection goes on, for adds of more than 16,384 tools: the
        two phases' reports interleave), where an exception from the callback aborts the
        add; then ``"index"`` (the index is locked: the callback must not use it, and an
        exception from it is raised once the add is complete). ``True`` prints a line on
        stderr instead.

        ``vectors``: precomputed embeddings, one per tool (or ``None``), or float32 rows in
        one buffer (``bytes``, a numpy ``float32`` array); instead of the ``embeddings`` model
        (which is then not called). With the model, its vectors reach the index as float32
        buffers (``embed_documents_array`` when the model has it), never as lists of floats.

        Raises:
            ValueError: naming the tool (or describing the object) that cannot be indexed, or
                what is wrong with a vector.
        """
        if isinstance(tools, (str, bytes, Mapping, BaseTool, McpTool)):
            raise ValueError(
                f"add() takes an iterable of tools, got a single {type(tools).__name__}; "
                "wrap it in a list"
            )
        # Plain dicts go to the native side as they are (it reads the same keys); anything else
        # is reduced to a (name, description, schema) tuple by ``tool_parts``: here when the
        # embedding model needs the texts first, else on the native side, in its one pass.
        items: Sequence[Any] = tools if isinstance(tools, (list, tuple)) else list(tools)
        keys: list[int] | None = None
        extra: dict[str, Any] = {"convert": tool_parts}
        if vectors is None and self._queries is not None:
            items = [t if type(t) is dict and "name" in t else tool_parts(t) for t in items]
            vectors, keys = self._embed(items)
            extra = {}
        if vectors is not None:
            extra |= {"vectors": vectors, "vector_keys": keys}
        if not progress:
            self._index.add(items, **extra)
        else:
            report = _print_progress if progress is True else progress
            self._index.add(items, report, PROGRESS_BATCH, **extra)

    def _embed(
        self, items: list[Any]
    ) -> tuple[memoryview[float] | list[memoryview[float] | None], list[int]]:
        """The vectors of the tools whose embedding text is new or changed, as float32 rows
        (``None``: keep the stored one; every tool new: one buffer of all rows), and every
        tool's text key."""
        assert self._queries is not None
        texts: list[str] = []
        names: list[str] = []
        for item in items:
            if isinstance(item, tuple):
                name, description, schema = item
            else:
                name, description, schema = tool_parts(item)
            names.append(name)
            texts.append(embedding_text(name, description, schema))
        keys = [text_key(t) for t in texts]
        stored = self._index.vector_keys(names) if len(self._index) else [None] * len(names)
        todo = [i for i, (key, old) in enumerate(zip(keys, stored, strict=True)) if key != old]
        if not todo:
            return [None] * len(items), keys
        flat, dim = vector_rows(self._queries.embeddings, [texts[i] for i in todo])
        if len(todo) == len(items):
            return flat, keys
        out: list[memoryview[float] | None] = [None] * len(items)
        for j, i in enumerate(todo):
            out[i] = flat[j * dim : (j + 1) * dim]
        return out, keys

    def remove(self, name: str) -> bool:
        """Remove the tool called ``name`` (and its vector); returns whether it was indexed."""
        return self._index.remove(name)

    def search(
        self,
        query: str,
        k: int = 5,
        allow: Collection[str] | None = None,
        *,
        vector: Vector | None = None,
    ) -> list[Hit]:
        """The ``k`` best tools for ``query``, best first; equal scores are ordered by name.

        ``allow`` restricts the hits to those tool names (unknown names are ignored). A query
        with no indexed word gives ``[]`` (BM25 alone). A message of several requests ("get
        the weather in Paris and convert 100 EUR to USD") has each request ranked too, and
        the rankings fused (``multi_intent``; :mod:`algenta_graph.retrieval.intents`). With
        ``embeddings``
        (or a precomputed query ``vector``) the BM25 and cosine rankings are fused
        (:mod:`algenta_graph.retrieval.fusion`); the vectors of the query and of its
        requests are computed once and cached (``embed_query``: in async code use
        :meth:`asearch`, or :meth:`aembed_query` first).
        """
        _check_query(query)
        k = _check_k(k)
        intents = None
        if self._queries is not None:
            if vector is None:
                vector = self._queries.get(query)
            parts = self._parts(query)
            if parts:
                intents = [self._queries.get(p) for p in parts]
        return _hits(self._index.search(query, k, allow, vector, intents))

    async def asearch(
        self, query: str, k: int = 5, allow: Collection[str] | None = None
    ) -> list[Hit]:
        """``search``, with the query and its requests embedded through ``aembed_query``
        (never blocking the event loop on the model); the search itself is in memory, with
        the GIL released."""
        _check_query(query)
        k = _check_k(k)
        if self._queries is None:
            return _hits(self._index.search(query, k, allow))
        vector, *intents = await self._aembed(query)
        return _hits(self._index.search(query, k, allow, vector, intents or None))

    async def aembed_query(self, query: str) -> list[float] | None:
        """Compute (through ``aembed_query``) and cache the vectors of ``query`` and of its
        requests, so a later ``search`` of it does not call the model; the query's vector,
        ``None`` without ``embeddings``."""
        _check_query(query)
        return (await self._aembed(query))[0] if self._queries is not None else None

    async def _aembed(self, query: str) -> list[list[float]]:
        """The vectors of ``query`` and of each of its requests (cached)."""
        assert self._queries is not None
        aget = self._queries.aget
        return list(await asyncio.gather(aget(query), *(aget(p) for p in self._parts(query))))

    def _parts(self, query: str) -> list[str]:
        """The requests of ``query`` ranked on their own (none for one request)."""
        return split_intents(query) if self._multi_intent else []

    def search_many(
        self,
        queries: Iterable[str],
        k: int = 5,
        allow: Collection[str] | None = None,
        *,
        vectors: Sequence[Vector] | Buffer | None = None,
    ) -> list[list[Hit]]:
        """``search`` for every query, in one native call (``vectors``: one per query, or
        float32 rows)."""
        queries = list(queries)
        for query in queries:
            _check_query(query)
        k = _check_k(k)
        intents = None
        if self._queries is not None:
            if vectors is None:
                vectors = [self._queries.get(q) for q in queries]
            intents = [[self._queries.get(p) for p in self._parts(q)] or None for q in queries]
        found = self._index.search_many(queries, k, allow, vectors, intents)
        return [_hits(hits) for hits in found]

    @property
    def tool_names(self) -> list[str]:
        """The indexed tool names (unordered)."""
        return self._index.names()

    def stats(self) -> dict[str, int]:
        """Sizes: ``tools``, ``terms``, ``postings``, ``heap_bytes`` (estimate), ``vectors``,
        ``vector_dim``."""
        return self._index.stats()

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._index

    def __repr__(self) -> str:
        return f"ToolIndex({len(self)} tools)"


def _per_field(value: PerField | None) -> float | dict[str, float] | None:
    return dict(value) if isinstance(value, Mapping) else value


def _check_query(query: object) -> None:
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, got {type(query).__name__}")


def _check_k(k: object) -> int:
    """``k`` checked, and capped at 2**32 (no index holds more tools)."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an integer, got {type(k).__name__}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    return min(k, 1 << 32)
