"""A small static embedding model that runs offline: WordLlama (``pip install
algenta-graph[embeddings]``; MIT licence; its 256-dimension weights, 16 MB, and its tokenizer
ship inside the wheel, so nothing is downloaded).

It is the model the hybrid figures of ``bench/RESULTS.md`` were measured with; any LangChain
``Embeddings`` works the same way with ``ToolIndex(embeddings=...)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

__all__ = ["WordLlamaEmbeddings"]


class WordLlamaEmbeddings(Embeddings):
    """LangChain ``Embeddings`` over WordLlama's packaged ``l2_supercat`` model, offline.

    Raises:
        ImportError: when the ``embeddings`` extra (``wordllama``) is not installed.
    """

    def __init__(self, dim: int = 256) -> None:
        try:
            import wordllama
            from wordllama import WordLlama
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "WordLlamaEmbeddings needs the 'embeddings' extra: "
                "pip install 'algenta-graph[embeddings]'"
            ) from exc
        # The package's own folder holds weights/ and tokenizers/ as its cache layout expects;
        # downloads are disabled, so a missing file is an error, never a network call.
        here = Path(wordllama.__file__).parent
        self._model: Any = WordLlama.load(
            cache_dir=here, dim=256, trunc_dim=None if dim == 256 else dim, disable_download=True
        )
        self.dim = dim

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return [list(map(float, v)) for v in self._model.embed(texts)]

    def embed_query(self, text: str) -> list[float]:
        return [float(x) for x in self._model.embed([text])[0]]

    def embed_documents_array(self, texts: list[str]) -> Any:
        """``embed_documents`` as one float32 numpy array (rows in order): the fast path."""
        import numpy as np

        return np.asarray(self._model.embed(texts), dtype=np.float32)
