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

import math
import operator
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from langchain_core.embeddings import Embeddings
from langchain_core.tools import BaseTool
from mcp.types import Tool as McpTool

from algenta_graph import _native

__all__ = [
    "DEFAULT_B",
    "DEFAULT_K1",
    "DEFAULT_LENGTH_EXPONENT",
    "DEFAULT_WEIGHTS",
    "FUSION_DEPTH",
    "PROGRESS_BATCH",
    "RRF_K",
    "Hit",
    "Progress",
    "ToolIndex",
    "ToolLike",
]

ToolLike: TypeAlias = BaseTool | McpTool | Mapping[str, Any]
"""What `ToolIndex.add` accepts: a LangChain tool, an MCP tool, or a dict."""

DEFAULT_K1: float = _native.DEFAULT_K1
DEFAULT_B: Mapping[str, float] = dict(_native.DEFAULT_B)
"""Length normalisation per field, 0..1."""
DEFAULT_LENGTH_EXPONENT: Mapping[str, float] = dict(_native.DEFAULT_LENGTH_EXPONENT)
"""Exponent of each field's relative length in its normalisation, 0..1 (below 1: sublinear)."""
PerField: TypeAlias = float | Mapping[str, float]
"""One value for every field, or ``{field: value}`` (omitted fields keep their default)."""
DEFAULT_WEIGHTS: Mapping[str, float] = dict(_native.DEFAULT_WEIGHTS)
"""Field weights: ``name``, ``description``, ``param_names``, ``param_text``."""

RRF_K = 60
"""Reciprocal rank fusion constant (Cormack, Clarke & Buettcher 2009): ``1 / (60 + rank)``."""
FUSION_DEPTH = 50
"""Hits of each ranking (BM25, embeddings) that reciprocal rank fusion reads."""

Progress: TypeAlias = Callable[[str, int, int], object]
"""``progress(phase, done, total)``: ``phase`` is ``"project"``, ``"tokenize"``, ``"index"``."""
PROGRESS_BATCH = 50_000
"""Tools per progress report in ``ToolIndex.add(progress=...)``."""


def _print_progress(phase: str, done: int, total: int) -> None:
    print(f"tool index: {phase} {done:,} / {total:,}", file=sys.stderr, flush=True)


_SCHEMA_KEYS = ("input_schema", "inputSchema", "parameters", "args_schema")


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


def _describe(tool: object) -> str:
    text = repr(tool)
    return text if len(text) <= 80 else text[:77] + "..."


def _langchain_parts(tool: BaseTool) -> tuple[str, str, Any]:
    name = tool.name
    try:
        schema: Any = tool.tool_call_schema
        if schema is not None and not isinstance(schema, Mapping):
            schema = schema.model_json_schema()
    except Exception as exc:
        raise ValueError(f"tool {name!r}: cannot read its input schema: {exc}") from exc
    return name, tool.description or "", schema


def _mapping_parts(tool: Mapping[str, Any]) -> tuple[str, str, Any]:
    if "name" not in tool and isinstance(tool.get("function"), Mapping):
        tool = tool["function"]  # OpenAI style: {"type": "function", "function": {...}}
    name = tool.get("name")
    if not isinstance(name, str):
        raise ValueError(f"tool dict needs a string 'name', got {_describe(tool)}")
    schema: Any = None
    for key in _SCHEMA_KEYS:
        if key in tool:
            schema = tool[key]
            break
    if isinstance(schema, Mapping) and not isinstance(schema, dict):
        schema = dict(schema)
    return name, tool.get("description") or "", schema


def _parts(tool: object) -> tuple[str, str, Any]:
    """``(name, description, schema)`` of one tool, or a ValueError saying what is wrong."""
    if isinstance(tool, BaseTool):
        return _langchain_parts(tool)
    if isinstance(tool, McpTool):
        return tool.name, tool.description or "", tool.inputSchema
    if isinstance(tool, Mapping):
        return _mapping_parts(tool)
    raise ValueError(
        f"unsupported tool of type {type(tool).__name__}: expected a LangChain BaseTool, "
        f"an mcp.types.Tool or a dict with 'name', 'description', 'input_schema' "
        f"({_describe(tool)})"
    )


class ToolIndex:
    """A BM25F index of tools, keyed by tool name.

    Args:
        k1: term-frequency saturation (default ``DEFAULT_K1``).
        b: length normalisation, 0..1, one number or per field (default ``DEFAULT_B``).
        length_exponent: how a field's relative length enters its normalisation,
            ``(len / avglen) ** e``, 0..1, one number or per field (default
            ``DEFAULT_LENGTH_EXPONENT``: the description's length counts sublinearly).
        name_weight, description_weight, param_name_weight, param_text_weight: BM25F field
            weights (defaults in ``DEFAULT_WEIGHTS``): names and parameter names count more
            than prose.

        embeddings: any LangChain ``Embeddings``: the index then also ranks tools by cosine
            similarity to the query and fuses both rankings by reciprocal rank fusion
            (``RRF_K``); see ``search``. Each tool is embedded once, when added (again only if
            its text changes), from its name, description and parameter names. Nothing is
            downloaded or called without it: the default index is BM25 alone, offline.
        rrf_k: the RRF constant, ``score = sum 1 / (rrf_k + rank)`` (default ``RRF_K``).
        depth: how many hits of each ranking are fused (default ``FUSION_DEPTH``).

    Adding a tool whose name is already indexed replaces it; statistics stay exact, so an
    index built incrementally ranks exactly like one built from scratch. Searches release
    the GIL and may run from several threads at once.
    """

    __slots__ = ("_depth", "_embeddings", "_index", "_rrf_k", "_vectors")

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
        rrf_k: int = RRF_K,
        depth: int = FUSION_DEPTH,
    ) -> None:
        if rrf_k < 0 or depth < 1:
            raise ValueError(f"rrf_k must be >= 0 and depth >= 1, got {rrf_k}, {depth}")
        self._embeddings = embeddings
        self._rrf_k = rrf_k
        self._depth = depth
        self._vectors: dict[str, tuple[str, list[float]]] = {}  # name -> (text, unit vector)
        self._index = _native.Bm25Index(
            k1=k1,
            b=_per_field(b),
            length_exponent=_per_field(length_exponent),
            name_weight=name_weight,
            description_weight=description_weight,
            param_name_weight=param_name_weight,
            param_text_weight=param_text_weight,
        )

    def add(self, tools: Iterable[ToolLike], *, progress: Progress | bool | None = None) -> None:
        """Add or replace tools. All or nothing: if any tool is bad, none is added.

        ``progress`` reports large builds: a callable ``progress(phase, done, total)`` called
        every ``PROGRESS_BATCH`` tools and at the end of each phase: ``"project"``
        (validating and projecting: where a bad tool is found, and where an exception from
        the callback aborts the add), then ``"tokenize"`` and ``"index"`` (the index is
        locked: the callback must not use it, and an exception from it is raised once the add
        is complete). ``True`` prints a line on stderr instead.

        Raises:
            ValueError: naming the tool (or describing the object) that cannot be indexed.
        """
        if isinstance(tools, (str, bytes, Mapping, BaseTool, McpTool)):
            raise ValueError(
                f"add() takes an iterable of tools, got a single {type(tools).__name__}; "
                "wrap it in a list"
            )
        # Plain dicts go to the native side as they are (it reads the same keys); anything else
        # is reduced to a (name, description, schema) tuple here.
        items = [t if type(t) is dict and "name" in t else _parts(t) for t in tools]
        vectors = self._embed(items) if self._embeddings is not None else {}
        if not progress:
            self._index.add(items)
        else:
            report = _print_progress if progress is True else progress
            self._index.add(items, report, PROGRESS_BATCH)
        self._vectors.update(vectors)

    def _embed(self, items: list[Any]) -> dict[str, tuple[str, list[float]]]:
        """Unit vectors of the tools whose embedding text is new or changed."""
        assert self._embeddings is not None
        texts: dict[str, str] = {}
        for item in items:
            name, description, schema = item if isinstance(item, tuple) else _parts(item)
            texts[name] = _embedding_text(name, description, schema)
        todo = [n for n, text in texts.items() if self._vectors.get(n, ("",))[0] != text]
        if not todo:
            return {}
        raw = self._embeddings.embed_documents([texts[n] for n in todo])
        if len(raw) != len(todo):
            raise ValueError(f"embeddings returned {len(raw)} vectors for {len(todo)} texts")
        return {n: (texts[n], _unit(v)) for n, v in zip(todo, raw, strict=True)}

    def remove(self, name: str) -> bool:
        """Remove the tool called ``name``; returns whether it was indexed."""
        self._vectors.pop(name, None)
        return self._index.remove(name)

    def search(self, query: str, k: int = 5, allow: Collection[str] | None = None) -> list[Hit]:
        """The ``k`` best tools for ``query``, best first; equal scores are ordered by name.

        ``allow`` restricts the hits to those tool names (unknown names are ignored). A query
        with no indexed word gives ``[]``. With ``embeddings``, the BM25 ranking and the
        cosine ranking (each cut to ``depth``) are fused by reciprocal rank fusion: a tool's
        score is ``sum 1 / (rrf_k + rank)`` over the rankings it appears in (rank from 1).
        """
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, got {type(query).__name__}")
        k = _check_k(k)
        if self._embeddings is None:
            return _hits(self._index.search(query, k, allow))
        return self._fused(query, self._index.search(query, max(k, self._depth), allow), k, allow)

    def search_many(
        self, queries: Iterable[str], k: int = 5, allow: Collection[str] | None = None
    ) -> list[list[Hit]]:
        """``search`` for every query, in one native call."""
        queries = list(queries)
        for query in queries:
            _check_query(query)
        k = _check_k(k)
        if self._embeddings is None:
            return [_hits(hits) for hits in self._index.search_many(queries, k, allow)]
        depth = max(k, self._depth)
        bm25 = self._index.search_many(queries, depth, allow)
        return [self._fused(q, hits, k, allow) for q, hits in zip(queries, bm25, strict=True)]

    def _fused(
        self,
        query: str,
        bm25: list[tuple[str, float]],
        k: int,
        allow: Collection[str] | None,
    ) -> list[Hit]:
        assert self._embeddings is not None
        depth = max(k, self._depth)
        q = _unit(self._embeddings.embed_query(query))
        allowed = None if allow is None else set(allow)
        cosine = sorted(
            (
                (-_dot(q, vector), name)
                for name, (_, vector) in self._vectors.items()
                if allowed is None or name in allowed
            ),
        )[:depth]
        fused: dict[str, float] = {}
        for ranking in ([name for name, _ in bm25], [name for _, name in cosine]):
            for rank, name in enumerate(ranking, 1):
                fused[name] = fused.get(name, 0.0) + 1.0 / (self._rrf_k + rank)
        best = sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:k]
        return [Hit(name, score) for name, score in best]

    @property
    def tool_names(self) -> list[str]:
        """The indexed tool names (unordered)."""
        return self._index.names()

    def stats(self) -> dict[str, int]:
        """Sizes: ``tools``, ``terms``, ``postings``, ``heap_bytes`` (estimate)."""
        return self._index.stats()

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._index

    def __repr__(self) -> str:
        return f"ToolIndex({len(self)} tools)"


def _embedding_text(name: str, description: str, schema: Any) -> str:
    """What a tool's embedding is computed from: its name, description, parameter names."""
    params = _native.project_tool(name, "", schema)["param_names"] if schema else []
    text = f"{name}: {description}"
    return f"{text} (parameters: {', '.join(params)})" if params else text


def _unit(vector: Sequence[float]) -> list[float]:
    values = [float(x) for x in vector]
    norm = math.sqrt(math.fsum(x * x for x in values))
    return [x / norm for x in values] if norm > 0 else values


def _dot(a: list[float], b: list[float]) -> float:
    return sum(map(operator.mul, a, b)) if len(a) == len(b) else 0.0


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
