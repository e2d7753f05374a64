"""The walkthroughs are in ``notebooks/`` (what ``tests/docs/test_notebooks.py`` runs, one test
per notebook: none may go missing unnoticed).
"""

from __future__ import annotations

from repo_paths import REPO

NOTEBOOKS = REPO / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))


def test_the_walkthroughs_are_there() -> None:
    names = [p.name for p in PATHS]
    for prefix in ("01_", "02_", "03_", "04_", "05_"):
        assert any(n.startswith(prefix) for n in names), f"no {prefix}* notebook in {names}"
