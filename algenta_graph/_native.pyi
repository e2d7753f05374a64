"""Type stub for the Rust extension ``algenta_graph._native`` (see ``native/README.md``)."""

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeAlias

from typing_extensions import Buffer, Self, final

__all__ = [
    "DEFAULT_ANN_FROM",
    "DEFAULT_APPROX_FROM",
    "DEFAULT_B",
    "DEFAULT_BM25_WEIGHT",
    "DEFAULT_COSINE_FLOOR",
    "DEFAULT_EXPANSION",
    "DEFAULT_FUSION_DEPTH",
    "DEFAULT_K1",
    "DEFAULT_LENGTH_EXPONENT",
    "DEFAULT_RESCORE",
    "DEFAULT_WEIGHTS",
    "FIELDS",
    "INTENT_MIN_TERMS",
    "INTENT_PART_WEIGHT",
    "Bm25Index",
    "project_tool",
    "split_intents",
    "tokenize",
]

DEFAULT_K1: Final[float]
DEFAULT_BM25_WEIGHT: Final[float]
"""Fusion: weight of the BM25 side (the cosine side has ``1 - w``)."""
DEFAULT_COSINE_FLOOR: Final[float]
"""Fusion: cosines at or below this contribute nothing."""
DEFAULT_FUSION_DEPTH: Final[int]
"""Fusion: hits read from each ranking."""
INTENT_PART_WEIGHT: Final[float]
"""A message's requests: each one's scores count this much of the whole message's."""
INTENT_MIN_TERMS: Final[int]
"""A message's requests: ranked on their own from this many distinct terms on."""
DEFAULT_APPROX_FROM: Final[int]
"""Vector search: from this many vectors on, approximate (sign-bit codes, then rescoring)."""
DEFAULT_RESCORE: Final[int]
"""Vector search: candidates by Hamming distance that are rescored for 50 hits at 10,000
vectors (``rescore * (k + 10) / 60 * (n / 10000) ** 0.3`` for ``k`` hits among ``n``)."""
DEFAULT_ANN_FROM: Final[int]
"""Vector search: from this many vectors on, an HNSW graph proposes the candidates (0: never)."""
DEFAULT_EXPANSION: Final[int]
"""Vector search: candidates the HNSW graph keeps while searching (``ef``), all rescored."""
DEFAULT_B: Final[dict[str, float]]
DEFAULT_LENGTH_EXPONENT: Final[dict[str, float]]
DEFAULT_WEIGHTS: Final[dict[str, float]]
FIELDS: Final[tuple[str, ...]]

_Vector: TypeAlias = Sequence[float] | Buffer
"""A vector: numbers, ``bytes`` of native-endian float32, or a float32 buffer (a numpy
``float32`` array, ``array("f")``, a memoryview of one)."""

def tokenize(text: str) -> list[str]:
    """The index's tokens for ``text``."""

def split_intents(text: str) -> list[str]:
    """The requests of a message that a search ranks on their own (none for one request)."""

def project_tool(name: str, description: str | None, schema: Any = None) -> dict[str, list[str]]:
    """The text the index takes from a tool, per field, before tokenization."""

@final
class Bm25Index:
    """A BM25F index over tools keyed by name; searches release the GIL."""

    def __new__(
        cls,
        *,
        k1: float = ...,
        b: float | dict[str, float] | None = None,
        length_exponent: float | dict[str, float] | None = None,
        name_weight: float = ...,
        description_weight: float = ...,
        param_name_weight: float = ...,
        param_text_weight: float = ...,
        vector_precision: str = "int8",
        bm25_weight: float = ...,
        cosine_floor: float = ...,
        fusion_depth: int = ...,
        approx_from: int = ...,
        rescore: int = ...,
        ann_from: int = ...,
        expansion: int = ...,
        multi_intent: bool = True,
    ) -> Self:
        """``vector_precision``: ``"int8"`` or ``"f32"``; ``bm25_weight``, ``cosine_floor``,
        ``fusion_depth``: the fusion of BM25 and cosine rankings (``src/index/fusion.rs``);
        from ``approx_from`` vectors on, vector searches rescore the ``rescore`` tools
        (for 50 hits at 10,000 vectors; ``rescore * (k + 10) / 60 * (n / 10000) ** 0.3``
        for ``k`` hits among ``n``) nearest by Hamming
        distance of their sign bits, and from ``ann_from`` vectors on (0: never) an HNSW
        graph proposes ``expansion`` candidates instead (``src/index/vectors/``).
        ``multi_intent``: a message's requests are ranked too (``src/index/intents.rs``)."""
    def add(
        self,
        tools: Iterable[tuple[str, str | None, Any] | dict[str, Any]],
        progress: Callable[[str, int, int], object] | None = None,
        every: int = 50000,
        vectors: Sequence[_Vector | None] | Buffer | None = None,
        vector_keys: Sequence[int | None] | None = None,
        convert: Callable[[Any], tuple[str, str | None, Any]] | None = None,
    ) -> None:
        """Add or replace tools, all or nothing: ``(name, description, schema)`` tuples or
        dicts with ``name``, ``description`` and ``input_schema`` / ``inputSchema`` /
        ``parameters`` / ``args_schema``; ``progress(phase, done, total)`` every ``every``
        tools and at the end of each phase (``project``, ``tokenize``, ``index``).
        ``convert(item)``: the ``(name, description, schema)`` of every item that is not a
        dict holding a ``name`` (it may raise to abort the add).

        ``vectors``: one per tool (stored at unit length; ``None`` keeps the vector the tool
        already has if its key is unchanged, else the tool has none), or ``bytes`` or a float32
        buffer holding one row per tool. ``vector_keys``: per tool, the key of the text its vector
        came from (see ``vector_keys``)."""
    def remove(self, name: str) -> bool: ...
    def __len__(self) -> int: ...
    def __contains__(self, name: object, /) -> bool: ...
    def names(self) -> list[str]: ...
    def search(
        self,
        query: str,
        k: int = 5,
        allow: Iterable[str] | None = None,
        vector: _Vector | None = None,
        intent_vectors: Sequence[_Vector | None] | None = None,
    ) -> list[tuple[str, float]]:
        """BM25F top ``k``; with the query's ``vector``, BM25 and cosine fused. With
        ``multi_intent``, each request of ``split_intents(query)`` is ranked too
        (``intent_vectors``: one vector or ``None`` per request; needs ``vector``)."""
    def search_exhaustive(
        self, query: str, k: int = 5, allow: Iterable[str] | None = None
    ) -> list[tuple[str, float]]:
        """``search`` without a vector, every posting of every query term scored (no
        pruning): for tests and benchmarks of the pruning."""
    def search_many(
        self,
        queries: Iterable[str],
        k: int = 5,
        allow: Iterable[str] | None = None,
        vectors: Sequence[_Vector] | Buffer | None = None,
        intent_vectors: Sequence[Sequence[_Vector | None] | None] | None = None,
    ) -> list[list[tuple[str, float]]]:
        """``search`` for every query (``vectors``: one per query, or float32 rows;
        ``intent_vectors``: per query, its requests' vectors or ``None``)."""
    def search_vector(
        self,
        vector: _Vector,
        k: int = 5,
        allow: Iterable[str] | None = None,
        exact: bool = False,
    ) -> list[tuple[str, float]]:
        """The ``k`` tools nearest ``vector`` by cosine, best first; ties by name
        (``exact``: the full scan, whatever the index's size)."""
    def vector_keys(self, names: Sequence[str]) -> list[int | None]:
        """Per name, the key stored with its vector (``None``: no vector)."""
    def stats(self) -> dict[str, int]: ...
    @property
    def fusion(self) -> dict[str, float]:
        """``bm25_weight``, ``cosine_floor``, ``depth``, ``approx_from``, ``rescore``,
        ``ann_from``, ``expansion``."""
    @property
    def vector_precision(self) -> str: ...
    @property
    def multi_intent(self) -> bool:
        """Whether a message's requests are ranked on their own too."""
    @property
    def k1(self) -> float: ...
    @property
    def b(self) -> dict[str, float]: ...
    @property
    def length_exponent(self) -> dict[str, float]: ...
    @property
    def weights(self) -> dict[str, float]: ...
