"""ToolIndex(embeddings=...): tools embedded once, incrementally; BM25 and cosine fused by RRF."""

from __future__ import annotations

import re

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.tools import tool

from algenta_graph.retrieval import RRF_K, ToolIndex

# A tiny deterministic "semantic" embedding: one dimension per concept, a word counts for
# the concepts it belongs to. Enough to bridge vocabulary BM25 cannot.
CONCEPTS = {
    "money": {"currency", "euro", "usd", "dollars", "yen", "exchange", "convert"},
    "weather": {"weather", "rain", "forecast", "umbrella", "temperature"},
    "mail": {"email", "mail", "send", "inbox", "message"},
    "math": {"factorial", "sqrt", "number", "compute"},
}


class ConceptEmbeddings(Embeddings):
    def __init__(self) -> None:
        self.documents: list[str] = []
        self.queries: list[str] = []

    def _vector(self, text: str) -> list[float]:
        words = set(re.findall(r"[a-z]+", text.lower()))
        return [float(len(words & vocab)) for vocab in CONCEPTS.values()]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents += texts
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return self._vector(text)


TOOLS = [
    {"name": "currency_conversion", "description": "Convert a value to another currency."},
    {"name": "get_forecast", "description": "Weather forecast for a city."},
    {"name": "send_email", "description": "Send an email message."},
    {"name": "math.factorial", "description": "Compute the factorial of a number."},
]


def test_fusion_finds_what_bm25_alone_misses() -> None:
    query = "How much is 100 euro in USD?"
    plain = ToolIndex()
    plain.add(TOOLS)
    assert [h.tool_id for h in plain.search(query)] == []
    hybrid = ToolIndex(embeddings=ConceptEmbeddings())
    hybrid.add(TOOLS)
    hits = hybrid.search(query, 2)
    assert hits[0].tool_id == "currency_conversion"
    assert hits[0].score == pytest.approx(1 / (RRF_K + 1))  # first in the cosine ranking only


def test_rrf_sums_reciprocal_ranks_of_both_rankings() -> None:
    index = ToolIndex(embeddings=ConceptEmbeddings(), rrf_k=10)
    index.add(TOOLS)
    hits = index.search("send the weather forecast by email", 4)
    by_name = {h.tool_id: h.score for h in hits}
    bm25 = [h.tool_id for h in ToolIndex().search("send the weather forecast by email", 50)]
    for name, score in by_name.items():
        expected = 0.0
        if name in bm25:
            expected += 1 / (10 + bm25.index(name) + 1)
        assert score >= expected  # plus its cosine rank's share
    assert [h.tool_id for h in hits][:2] == sorted(
        ["get_forecast", "send_email"], key=lambda n: (-by_name[n], n)
    )


def test_each_tool_is_embedded_once_and_again_only_when_it_changes() -> None:
    emb = ConceptEmbeddings()
    index = ToolIndex(embeddings=emb)
    index.add(TOOLS)
    assert len(emb.documents) == 4
    index.add(TOOLS[:2])  # unchanged: nothing to embed
    assert len(emb.documents) == 4
    index.add([{"name": "send_email", "description": "Deliver mail to an inbox."}])
    assert len(emb.documents) == 5 and "inbox" in emb.documents[-1]
    assert index.remove("currency_conversion")
    assert all(h.tool_id != "currency_conversion" for h in index.search("euro to usd", 4))
    index.add([TOOLS[0]])
    assert len(emb.documents) == 6  # removed, so embedded again


def test_embedding_text_has_name_description_and_parameters() -> None:
    emb = ConceptEmbeddings()

    @tool
    def convert(amount: float, to_currency: str) -> str:
        """Convert money."""
        return ""

    ToolIndex(embeddings=emb).add([convert])
    assert emb.documents == ["convert: Convert money. (parameters: amount, to_currency)"]


def test_allow_restricts_both_rankings() -> None:
    index = ToolIndex(embeddings=ConceptEmbeddings())
    index.add(TOOLS)
    hits = index.search("euro usd", 4, allow={"send_email", "get_forecast"})
    assert {h.tool_id for h in hits} <= {"send_email", "get_forecast"}
    many = index.search_many(["euro usd", "rain tomorrow"], 1)
    assert [h[0].tool_id for h in many] == ["currency_conversion", "get_forecast"]


def test_a_failing_embedding_leaves_the_index_unchanged() -> None:
    class Broken(ConceptEmbeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            raise RuntimeError("model unavailable")

    index = ToolIndex(embeddings=Broken())
    with pytest.raises(RuntimeError, match="unavailable"):
        index.add(TOOLS)
    assert len(index) == 0


def test_bad_fusion_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="rrf_k"):
        ToolIndex(rrf_k=-1)
    with pytest.raises(ValueError, match="depth"):
        ToolIndex(depth=0)
