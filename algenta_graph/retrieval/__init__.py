"""Tool retrieval: a BM25F index over tool names, descriptions and input schemas, with an
optional embedding side fused into the same ranking.

``ToolIndex`` (``index.py``) is the typed facade over the Rust index in
``algenta_graph._native``; tokenizer, fields, weights and defaults are the contract in
``native/README.md``. ``fusion.py`` documents how BM25 and cosine rankings are fused,
``intents.py`` how a message of several requests is split and its rankings fused,
``vectors.py`` what a tool is embedded from and the cached query vectors, ``tools.py`` which
tool objects are accepted, ``static_embeddings.py`` an offline embedding model (optional extra).
"""

from algenta_graph.retrieval.fusion import FUSION_BM25_WEIGHT, FUSION_COSINE_FLOOR, FUSION_DEPTH
from algenta_graph.retrieval.index import (
    DEFAULT_B,
    DEFAULT_K1,
    DEFAULT_LENGTH_EXPONENT,
    DEFAULT_WEIGHTS,
    PROGRESS_BATCH,
    Hit,
    Progress,
    ToolIndex,
)
from algenta_graph.retrieval.intents import INTENT_MIN_TERMS, INTENT_PART_WEIGHT, split_intents
from algenta_graph.retrieval.tools import ToolLike

__all__ = [
    "DEFAULT_B",
    "DEFAULT_K1",
    "DEFAULT_LENGTH_EXPONENT",
    "DEFAULT_WEIGHTS",
    "FUSION_BM25_WEIGHT",
    "FUSION_COSINE_FLOOR",
    "FUSION_DEPTH",
    "INTENT_MIN_TERMS",
    "INTENT_PART_WEIGHT",
    "PROGRESS_BATCH",
    "Hit",
    "Progress",
    "ToolIndex",
    "ToolLike",
    "split_intents",
]
