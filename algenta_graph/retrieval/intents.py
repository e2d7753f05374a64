"""A message of several requests: where it is split, and how its rankings are fused.

"Get the weather in Paris and convert 100 EUR to USD" holds two requests. Both steps run in
Rust (``native/src/intents.rs``, ``native/src/index/intents.rs``; the contract is
``native/README.md``).

The split is deterministic and needs no model: line breaks and ``;`` (any language), then the
English markers ``then``, a sentence's first ``also`` / ``additionally`` / ``and``, ``and
also``, ``as well as``, and ``and`` before a word a request opens with (``find``, ``get``,
``calculate``, ``what``, ...). A request of fewer than :data:`INTENT_MIN_TERMS` distinct terms
is a fragment, not ranked on its own. The whole message and each request are ranked (BM25, or
fused with their own query vectors), and a tool's score is the best of the whole message's
score and :data:`INTENT_PART_WEIGHT` times its score in a request, each request's scores
scaled to the whole message's best: the whole message's best tool stays first, and each
request's best follows every tool the whole message scores within 20% of its best. A message
of one request is ranked exactly as without the split.

Example:
    >>> split_intents("Get the weather in Paris and convert 100 EUR to USD")
    ['Get the weather in Paris ', ' convert 100 EUR to USD']
    >>> split_intents("Calculate the area of a triangle with base 10 and height 5")
    []
"""

from __future__ import annotations

import algenta_graph._native as _native

__all__ = ["INTENT_MIN_TERMS", "INTENT_PART_WEIGHT", "split_intents"]

INTENT_PART_WEIGHT: float = _native.INTENT_PART_WEIGHT
"""A request's scores count this much of the whole message's (0.8)."""
INTENT_MIN_TERMS: int = _native.INTENT_MIN_TERMS
"""A request is ranked on its own from this many distinct terms on (2)."""


def split_intents(message: str) -> list[str]:
    """The requests of ``message`` that a search ranks on their own, in order.

    Each is a substring of ``message``; ``[]`` when it holds fewer than two.
    """
    if not isinstance(message, str):
        raise TypeError(f"message must be a string, got {type(message).__name__}")
    return _native.split_intents(message)
