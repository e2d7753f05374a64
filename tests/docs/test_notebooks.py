"""Every walkthrough in ``notebooks/`` runs top to bottom without a cell error.

Each notebook is executed with nbclient in a fresh ``python3`` kernel, with ``notebooks/`` as its
working directory, exactly as a reader would run it; the executed copy is discarded (the
committed notebooks keep their own recorded outputs).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from repo_paths import REPO

NOTEBOOKS = REPO / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
# what each walkthrough must show, not only run: retrieval's selection, the records, the gates
KEY_OUTPUTS = {
    "01_": [
        "[retrieve_tools] selected: plan_decision",
        "[receipt] decision",
        "denials: []",
        # the picture's text: the handlers as one box, the routes they share drawn once
        "denial_handler_<gate> --(then <gate>)--> denial_handler_<gate>",
        "governed_tool         --(risk_floor)--> denial_handler_risk_floor",
    ],
    "02_": [
        "'confidence': 'override_safety'",
        "blocked by the confidence gate",
        "OVERRODE the confidence gate",
    ],
    "03_": ["pending: ('denial_handler_confidence',)", "receipt recovered", "thread  record"],
    "04_": ["bound: ['billing_reject_invoices'", "top-5 + search_tools", "search_tools: {"],
    "05_": ["SKIPPED", "-> weather_get_forecast_", "pip install langchain-mistralai"],
}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_runs_without_errors(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ALGENTA_NOTEBOOK_MODEL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(key, raising=False)  # 05_real_models runs in its skipped mode
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    try:
        client.execute()
    except CellExecutionError as exc:  # the message names the cell and the traceback
        pytest.fail(f"{path.name}: a cell failed\n{exc}")
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    assert errors == []
    ran = [c for c in notebook.cells if c.cell_type == "code" and c.get("execution_count")]
    assert len(ran) == sum(c.cell_type == "code" for c in notebook.cells)
    shown = "\n".join(
        "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )
    expected = next(v for k, v in KEY_OUTPUTS.items() if path.name.startswith(k))
    missing = [text for text in expected if text not in shown]
    assert missing == [], f"{path.name} did not show {missing}"
