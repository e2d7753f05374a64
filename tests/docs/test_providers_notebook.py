"""``notebooks/05_real_models.ipynb`` in both of its modes.

Without an API key it explains that it is skipped (what ``tests/docs/test_notebooks.py`` runs too).
With one, its real-model path runs: here with the real ``ChatOpenAI`` client pointed, through
``OPENAI_BASE_URL``, at the OpenAI stand-in (``tests/support/provider_standins.py``), so the code a
reader runs against the real API is exercised on every test run without a paid call.
"""

from __future__ import annotations

import re
from typing import Any

import nbformat
import pytest
from ci_support import require_module
from nbclient import NotebookClient
from provider_standins import ProviderStandIn, Reply, Request
from repo_paths import REPO

NOTEBOOKS = REPO / "notebooks"
NOTEBOOK = NOTEBOOKS / "05_real_models.ipynb"
KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ALGENTA_NOTEBOOK_MODEL", "OPENAI_BASE_URL")

pytestmark = pytest.mark.timeout(600)


def run_notebook() -> str:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    ).execute()
    texts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            assert output.get("output_type") != "error", output
            texts.append(
                output.get("text", "") or str(output.get("data", {}).get("text/plain", ""))
            )
    return "".join(texts)


def test_without_a_key_it_explains_that_it_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    out = run_notebook()
    assert "SKIPPED: neither OPENAI_API_KEY nor ANTHROPIC_API_KEY is set" in out
    assert "weather_get_forecast_" in out  # what a provider is shown, even without a key
    assert "pip install langchain-mistralai" in out
    assert "operator decision" not in out


def test_with_a_key_it_runs_the_real_client_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    require_module("langchain_openai")

    def execute_both(req: Request) -> Reply:
        user = next(m for m in req.body["messages"] if m["role"] == "user")
        found = re.search(
            r"decision (\S+) and decision (\S+), delivering each to (\S+)\.", str(user["content"])
        )
        assert found, user
        safe, shaky, url = found.groups()
        name = req.tool("execute_decision")  # bound as a base tool (always_include)
        return Reply(
            "Executing both.",
            calls=[
                (name, {"decision_id": safe, "webhook_url": url}),
                (name, {"decision_id": shaky, "webhook_url": url}),
            ],
        )

    script: list[Any] = [
        execute_both,
        Reply("One delivered; the other overridden by ana and delivered."),
    ]
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    with ProviderStandIn("openai", script) as standin:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-standin")
        monkeypatch.setenv("OPENAI_BASE_URL", standin.base_url)
        out = run_notebook()
    assert "model: openai:gpt-5-mini" in out and "resolved: ChatOpenAI" in out
    assert "waiting at: ('denial_handler_confidence',)" in out
    assert re.search(r"operator decision: ana override confidence \S+ -> receipt", out)
    assert "webhook deliveries: 2" in out
    assert "overridden by ana" in out.replace("\n", " ").replace("  ", " ")
    assert standin.streamed == [True, True]  # the notebook streamed both model calls
    assert all(r == [] for r in standin.rejections), standin.rejections
