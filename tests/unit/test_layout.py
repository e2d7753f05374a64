"""The one map of the package, checked: every module of ``algenta_graph/`` is a row of the
Modules table of ``docs/ARCHITECTURE.md``, and every module the table names exists.

The table's first column names modules by their path under ``algenta_graph/`` in backticks (a
cell may name two: `` `_serve.py`, `_net.py` ``). A bold package row (``**governance/**``) is
the heading of that package's modules and stands for its ``__init__.py``; a bold group without
a slash (``**retrieval**``) is a heading only. A row naming a directory (`` `engine/` ``) is a
separate program with its own map, its ``README.md``: its modules are not rows here.
"""

from __future__ import annotations

import re
from pathlib import Path

from repo_paths import REPO

ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"
PACKAGE = REPO / "algenta_graph"
TABLE = "## Modules"


def first_cells(text: str) -> list[str]:
    """The first cell of every row of the Modules table (its header and rule left out)."""
    start = text.index(TABLE)
    following = text.find("\n## ", start + len(TABLE))
    section = text[start : following if following != -1 else len(text)]
    rows = [line for line in section.splitlines() if line.lstrip().startswith("|")]
    cells = [row.strip().strip("|").split("|")[0].strip() for row in rows]
    return [cell for cell in cells[1:] if not re.fullmatch(r":?-+:?", cell)]


def problems(text: str, package: Path) -> list[str]:
    """What the table and the package disagree on, one line each (none: they agree)."""
    named: set[str] = set()
    directories: set[str] = set()
    found: list[str] = []
    for cell in first_cells(text):
        heading = re.fullmatch(r"\*\*([^*]+)\*\*", cell)
        if heading:
            if heading.group(1).endswith("/"):  # a package: its heading stands for __init__.py
                named.add(heading.group(1) + "__init__.py")
            continue
        names = re.findall(r"`([^`]+)`", cell)
        if not names:
            found.append(f"a row names no module: {cell!r}")
        for name in names:
            (directories if name.endswith("/") else named).add(name)
    for directory in sorted(directories):
        if not (package / directory / "README.md").is_file():
            found.append(f"the row {directory!r} has no map of its own ({directory}README.md)")
    modules = {path.relative_to(package).as_posix() for path in package.rglob("*.py")}
    modules = {m for m in modules if not any(m.startswith(d) for d in directories)}
    missing, stale = sorted(modules - named), sorted(named - modules)
    found += [f"{m} is in the package but not in the Modules table" for m in missing]
    found += [f"the Modules table names {m}, which is not in the package" for m in stale]
    return found


def test_every_module_is_a_row_of_the_table_and_every_row_a_module() -> None:
    assert problems(ARCHITECTURE.read_text("utf-8"), PACKAGE) == []


def _table(*cells: str) -> str:
    rows = "\n".join(f"| {cell} | what it is |" for cell in cells)
    after = "## Next\n\n| `x.py` | not the Modules table |\n"
    return f"# map\n\n{TABLE}\n\n| module | one concept |\n|---|---|\n{rows}\n\n{after}"


def test_a_module_missing_from_the_table_or_a_row_without_a_module_is_named(
    tmp_path: Path,
) -> None:
    package = tmp_path / "pkg"
    for name in ("__init__.py", "a.py", "b.py", "sub/__init__.py", "sub/c.py", "engine/x.py"):
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("")
    (package / "engine" / "README.md").write_text("its own map")
    rows = ["`__init__.py`", "`a.py`, `b.py`", "**group**", "**sub/**", "`sub/c.py`", "`engine/`"]
    assert problems(_table(*rows), package) == []

    assert problems(_table(*rows[:1], "`a.py`", *rows[2:]), package) == [
        "b.py is in the package but not in the Modules table"
    ]
    assert problems(_table(*rows[:3], *rows[4:]), package) == [
        "sub/__init__.py is in the package but not in the Modules table"
    ]
    assert problems(_table(*rows, "`sub/gone.py`", "**gone/**"), package) == [
        "the Modules table names gone/__init__.py, which is not in the package",
        "the Modules table names sub/gone.py, which is not in the package",
    ]
    assert problems(_table(*rows, "the graph"), package) == ["a row names no module: 'the graph'"]
    # a separate program's modules are not rows; without its own map, that is named
    (package / "engine" / "README.md").unlink()
    assert problems(_table(*rows), package) == [
        "the row 'engine/' has no map of its own (engine/README.md)"
    ]
    assert problems(_table(*rows[:-1]), package) == [
        "engine/x.py is in the package but not in the Modules table"
    ]
