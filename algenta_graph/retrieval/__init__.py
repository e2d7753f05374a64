"""Tool retrieval: a BM25F index over tool names, descriptions and input schemas, with an
optional embedding side fused into the same ranking.

``ToolIndex`` (``index.py``) is the typed facade over the Rust index in
``algenta_graph._native``; tokenizer, fields, weights and defaults are the contract in
``native/README.md``.
"""

from algenta_graph.retrieval.index import (
    DEFAULT_B,
    DEFAULT_K1,
    DEFAULT_LENGTH_EXPONENT,
    DEFAULT_WEIGHTS,
    FUSION_DEPTH,
    PROGRESS_BATCH,
    RRF_K,
    Hit,
    Progress,
    ToolIndex,
    ToolLike,
)

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
