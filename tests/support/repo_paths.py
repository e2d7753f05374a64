"""Where things are: the repository's root and this directory of test helpers.

Tests name files of the repository (the README, ``langgraph.json``, the notebooks, ``bench/``)
and run the worker scripts here by path through these, wherever the test module sits.
"""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
"""``tests/support``: the helper modules and the worker scripts run by path."""
REPO = SUPPORT.parents[1]
"""The repository's root."""
