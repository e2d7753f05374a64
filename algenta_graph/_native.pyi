"""Type stub for the Rust extension ``algenta_graph._native`` (see ``native/README.md``)."""

from collections.abc import Callable, Iterable
from typing import Any, Final

from typing_extensions import Self, final

__all__ = [
    "DEFAULT_B",
    "DEFAULT_K1",
    "DEFAULT_LENGTH_EXPONENT",
    "DEFAULT_WEIGHTS",
    "FIELDS",
    "Bm25Index",
    "project_tool",
    "tokenize",
]

DEFAULT_K1: Final[float]
DEFAULT_B: Final[dict[str, float]]
DEFAULT_LENGTH_EXPONENT: Final[dict[str, float]]
DEFAULT_WEIGHTS: Final[dict[str, float]]
FIELDS: Final[tuple[str, ...]]

def tokenize(text: str) -> list[str]:
    """The index's tokens for ``text``."""

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
    ) -> Self: ...
    def add(
        self,
        tools: Iterable[tuple[str, str | None, Any] | dict[str, Any]],
        progress: Callable[[str, int, int], object] | None = None,
        every: int = 50000,
    ) -> None:
        """Add or replace tools, all or nothing: ``(name, description, schema)`` tuples or
        dicts with ``name``, ``description`` and ``input_schema`` / ``inputSchema`` /
        ``parameters`` / ``args_schema``; ``progress(phase, done, total)`` every ``every``
        tools and at the end of each phase (``project``, ``tokenize``, ``index``)."""
    def remove(self, name: str) -> bool: ...
    def __len__(self) -> int: ...
    def __contains__(self, name: object, /) -> bool: ...
    def names(self) -> list[str]: ...
    def search(
        self, query: str, k: int = 5, allow: Iterable[str] | None = None
    ) -> list[tuple[str, float]]: ...
    def search_many(
        self, queries: Iterable[str], k: int = 5, allow: Iterable[str] | None = None
    ) -> list[list[tuple[str, float]]]: ...
    def stats(self) -> dict[str, int]: ...
    @property
    def k1(self) -> float: ...
    @property
    def b(self) -> dict[str, float]: ...
    @property
    def length_exponent(self) -> dict[str, float]: ...
    @property
    def weights(self) -> dict[str, float]: ...
