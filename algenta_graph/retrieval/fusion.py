"""How the BM25F ranking and the cosine ranking become one (computed in Rust,
``native/src/index/fusion.rs``).

A convex combination of the two scores, each normalised by its best score among the
candidates::

    fused = w * bm25 / bm25_max + (1 - w) * max(cos - floor, 0) / (cos_max - floor)

over the union of each ranking's best ``depth`` tools, every candidate with both of its scores
computed exactly (the BM25 score of a tool only its vector found, the cosine of a tool only
its words found). Tools whose BM25 scores are equal (look-alikes whose texts match the query
alike) keep BM25's order, decided by the query's words in their names: each takes the best
fused score of its group, so the cosine never reorders them. BM25 keeps the larger weight: it
decides wherever the query shares words with the tools, and the embedding side lifts what
lexical matching cannot reach ("100 euro in USD" for ``currency_conversion``). One default
for every catalog, chosen on BFCL v3 (both loadings), APIBench and the multi-intent set at
once, where it is at or above BM25 alone on every figure of every set and slice
(``bench/RESULTS.md``, ``bench/bench_hybrid.py``). A message of several requests fuses each
request's own ranking (with its own query vector) too: :mod:`algenta_graph.retrieval.intents`.
"""

from __future__ import annotations

import algenta_graph._native as _native

__all__ = ["FUSION_BM25_WEIGHT", "FUSION_COSINE_FLOOR", "FUSION_DEPTH"]

FUSION_BM25_WEIGHT: float = _native.DEFAULT_BM25_WEIGHT
"""``w``: the weight of the BM25 side (0.9); the cosine side has ``1 - w``."""
FUSION_COSINE_FLOOR: float = _native.DEFAULT_COSINE_FLOOR
"""Cosines at or below this (0.0) contribute nothing."""
FUSION_DEPTH: int = _native.DEFAULT_FUSION_DEPTH
"""Hits of each ranking that the fusion reads (20; at least the ``k`` asked for)."""
