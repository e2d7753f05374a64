"""Print pip requirements pinning every dependency of ``pyproject.toml`` to its floor.

``python .ci/floors.py [EXTRA ...]`` reads ``[project] dependencies`` (and the named optional
extras) and prints one ``name[extras]==floor ; marker`` line for each: the release the lower
bound (``>=``) names. A dependency without a lower bound is an error (exit 2, naming it): its
floor would be whatever pip finds first. ``.ci/run`` installs these lines in a fresh venv and
runs the unit tier on them, so a floor that the code does not really run on fails CI.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def floors(extras: list[str]) -> list[str]:
    """The pinned requirement lines, or :class:`SystemExit` naming an unbounded dependency."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    lines = []
    for text in wanted:
        requirement = Requirement(text)
        lower = [s.version for s in requirement.specifier if s.operator == ">="]
        if len(lower) != 1:
            raise SystemExit(f"{PYPROJECT.name}: {text!r} has no single lower bound (>=)")
        name = requirement.name + (
            f"[{','.join(sorted(requirement.extras))}]" * bool(requirement.extras)
        )
        marker = f" ; {requirement.marker}" if requirement.marker else ""
        lines.append(f"{name}=={lower[0]}{marker}")
    return lines


if __name__ == "__main__":
    print("\n".join(floors(sys.argv[1:])))
