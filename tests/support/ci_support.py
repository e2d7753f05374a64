"""No silent skips in CI: what a test needs is there, or the test says why it cannot run.

Outside CI a missing optional part skips the test with the reason; with ``CI`` set (as
``.ci/run`` runs) it fails, so a green CI never hides a missing install step.
"""

from __future__ import annotations

import os
from types import ModuleType

import pytest


def in_ci() -> bool:
    return bool(os.environ.get("CI"))


def require_module(name: str, install: str = 'pip install -e ".[dev]"') -> ModuleType:
    """``pytest.importorskip(name)``, except that in CI a missing module fails the test."""
    try:
        module: ModuleType = pytest.importorskip(name)
        return module
    except pytest.skip.Exception:
        if in_ci():
            pytest.fail(f"{name} is not installed in CI ({install})", pytrace=False)
        raise
