"""ToolIndex(embeddings=...): tools embedded once, incrementally, their vectors kept in the native
index; BM25 and cosine fused by a convex combination of normalised scores."""

from __future__ import annotations

import math
import re
from array import array

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.tools import tool

from algenta_graph.retrieval import FUSION_BM25_WEIGHT, ToolIndex

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
    # Only the cosine side matched: its whole weight, the best cosine normalised to 1.
    assert hits[0].score == pytest.approx(1 - FUSION_BM25_WEIGHT)


def test_fused_score_is_the_convex_combination_of_both_normalised_scores() -> None:
    query = "send the weather forecast by email"
    emb = ConceptEmbeddings()
    index = ToolIndex(embeddings=emb)
    index.add(TOOLS)
    plain = ToolIndex()
    plain.add(TOOLS)
    bm25 = {h.tool_id: h.score for h in plain.search(query, 50)}
    q = emb._vector(query)
    cos = {}
    for spec in TOOLS:
        v = emb._vector(f"{spec['name']}: {spec['description']}")
        nq, nv = math.sqrt(sum(x * x for x in q)), math.sqrt(sum(x * x for x in v))
        cos[spec["name"]] = sum(a * b for a, b in zip(q, v, strict=True)) / (nq * nv or 1)
    top_b, top_c = max(bm25.values()), max(cos.values())
    for hit in index.search(query, 4):
        want = FUSION_BM25_WEIGHT * bm25.get(hit.tool_id, 0.0) / top_b
        want += (1 - FUSION_BM25_WEIGHT) * max(cos[hit.tool_id], 0.0) / top_c
        assert hit.score == pytest.approx(want, rel=1e-5), hit
    names = [h.tool_id for h in index.search(query, 4)]
    assert names[:2] == ["send_email", "get_forecast"] or names[:2] == [
        "get_forecast",
        "send_email",
    ]
    # BM25 alone (weight 1) is exactly the BM25 order, whatever the vectors say.
    only_bm25 = ToolIndex(embeddings=ConceptEmbeddings(), bm25_weight=1.0)
    only_bm25.add(TOOLS)
    assert [h.tool_id for h in only_bm25.search(query, 4)] == [
        h.tool_id for h in plain.search(query, 4)
    ]


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
    with pytest.raises(ValueError, match="bm25_weight"):
        ToolIndex(bm25_weight=1.5)
    with pytest.raises(ValueError, match="cosine_floor"):
        ToolIndex(cosine_floor=2.0)
    with pytest.raises(ValueError, match="depth"):
        ToolIndex(depth=0)
    with pytest.raises(ValueError, match="vector_precision"):
        ToolIndex(vector_precision="f16")
    with pytest.raises(TypeError, match="Embeddings"):
        ToolIndex(embeddings="model")  # type: ignore[arg-type]


class ArrayEmbeddings(ConceptEmbeddings):
    """A model with ``embed_documents_array`` (float32 rows in one buffer): the path taken."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("embed_documents must not be called when the array path exists")

    def embed_documents_array(self, texts: list[str]) -> memoryview[float]:
        flat = array("f", [x for t in texts for x in self._vector(t)])
        return memoryview(flat).cast("B").cast("f", shape=[len(texts), len(CONCEPTS)])


@pytest.mark.parametrize("model", [ConceptEmbeddings(), ArrayEmbeddings()])
def test_vectors_reach_the_index_as_float32_buffers(model: ConceptEmbeddings) -> None:
    index = ToolIndex(embeddings=model)
    rows, keys = index._embed(list(TOOLS))
    assert isinstance(rows, memoryview) and rows.format == "f"
    assert len(rows) == len(TOOLS) * len(CONCEPTS) and len(keys) == len(TOOLS)
    index.add(TOOLS)
    # One tool changed: its row alone, as a float32 buffer; the others keep theirs.
    changed = [dict(TOOLS[0], description="Convert euro to dollars"), *TOOLS[1:]]
    rows, _ = index._embed(changed)
    assert isinstance(rows, list) and rows[1:] == [None] * (len(TOOLS) - 1)
    assert isinstance(rows[0], memoryview) and rows[0].format == "f"
    index.add(changed)
    assert index.search("100 euro in USD", 1)[0].tool_id == "currency_conversion"


def test_a_model_returning_rows_of_different_lengths_is_refused() -> None:
    class Ragged(ConceptEmbeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 0.0], [1.0]][: len(texts)]

    index = ToolIndex(embeddings=Ragged())
    with pytest.raises(ValueError, match="vector 1 of 1 numbers"):
        index.add(TOOLS[:2])
    assert len(index) == 0
