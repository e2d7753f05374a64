"""The offline static embedding model (the ``embeddings`` extra): loads from the wheel, no
network, and bridges BFCL's vocabulary gaps through ``ToolIndex(embeddings=...)``."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from repo_paths import REPO

from algenta_graph.retrieval import ToolIndex

pytest.importorskip("wordllama", reason="the 'embeddings' extra is not installed")

from algenta_graph.retrieval.static_embeddings import WordLlamaEmbeddings

BENCH = REPO / "bench"


def _bfcl() -> object:
    spec = importlib.util.spec_from_file_location("bfcl", BENCH / "bfcl.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bfcl", module)
    spec.loader.exec_module(module)
    return module


def test_wordllama_loads_offline_and_embeds_deterministically(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import requests

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model must not download anything")

    monkeypatch.setattr(requests, "get", no_network)
    model = WordLlamaEmbeddings()
    a = model.embed_query("convert 100 euro to dollars")
    assert len(a) == 256 and a == model.embed_query("convert 100 euro to dollars")
    docs = model.embed_documents(["currency exchange rates", "weather forecast"])
    assert len(docs) == 2 and all(len(d) == 256 for d in docs)
    assert model.embed_documents([]) == []


def test_hybrid_bridges_vocabulary_gaps_on_bfcl_and_never_loses_recall_at_5() -> None:
    bfcl = _bfcl()
    if not bfcl.bfcl_available():  # type: ignore[attr-defined]
        pytest.skip("BFCL v3 data not found")
    data = bfcl.load_bfcl()  # type: ignore[attr-defined]
    plain = ToolIndex()
    plain.add(data.tools)
    hybrid = ToolIndex(embeddings=WordLlamaEmbeddings())
    hybrid.add(data.tools)
    for gold in ("geodistance.find", "sports.match_results"):
        query = next(q for q, g in data.queries if g == gold)
        assert gold not in [h.tool_id for h in plain.search(query, 5)]
        assert gold in [h.tool_id for h in hybrid.search(query, 5)]

    def hits_at_5(index: ToolIndex) -> int:
        ranked = index.search_many([q for q, _ in data.queries], 5)
        return sum(
            g in [h.tool_id for h in hs] for hs, (_, g) in zip(ranked, data.queries, strict=True)
        )

    assert hits_at_5(hybrid) > hits_at_5(plain)
