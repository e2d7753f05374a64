"""The README hands off to ``docs/``: it stays short, keeps the line CI runs, and every relative
link of the README, ``docs/*.md`` and ``bench/README.md`` reaches a file that exists and, when it
names an anchor, a heading of that file (GitHub's anchors)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from repo_paths import REPO

README = REPO / "README.md"
PAGES = (README, *sorted((REPO / "docs").glob("*.md")), REPO / "bench" / "README.md")
README_MAX_LINES = 300

_FENCE = re.compile(r"^```.*?^```$", re.S | re.M)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)


def _prose(path: Path) -> str:
    """The file without its fenced blocks (a ``#`` comment in a block is not a heading)."""
    return _FENCE.sub("", path.read_text("utf-8"))


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    found: set[str] = set()
    for heading in _HEADING.findall(_prose(path)):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n, unique = 0, slug
        while unique in found:
            n += 1
            unique = f"{slug}-{n}"
        found.add(unique)
    return found


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    """Every relative link of ``path`` that reaches no file under ``root``, or no heading of it."""
    broken: list[str] = []
    for target in _LINK.findall(_prose(path)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        reached = (path.parent / file).resolve() if file else path
        where = f"{path.relative_to(root)}: ({target})"
        if not reached.exists() or root not in (reached, *reached.parents):
            broken.append(f"{where} reaches no file")
        elif anchor and (reached.suffix != ".md" or anchor not in anchors(reached)):
            broken.append(f"{where} names no heading of {reached.relative_to(root)}")
    return broken


def test_the_readme_is_short() -> None:
    lines = README.read_text("utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move reference to docs/"


def test_ci_finds_the_readmes_test_command() -> None:
    """``.ci/run`` runs the line after "Run the tests:" that starts with ``pip install``."""
    ci = (REPO / ".ci" / "run").read_text("utf-8")
    [program] = re.findall(r"awk '([^']+)' README.md", ci)
    found = subprocess.run(
        ["awk", program, "README.md"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert found.startswith('pip install -e ".[dev]" && pytest '), found


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    """The check itself: a missing file, a missing heading, a heading only inside a code block."""
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("# Title\n\n## Set up\n\n## Set up\n")
    (root / "docs" / "OTHER.md").write_text("# Other\n")
    (tmp_path / "outside.md").write_text("# Outside\n")
    page = root / "docs" / "PAGE.md"
    page.write_text(
        "# Page\n\n## Two words: `code`\n\n```bash\n# not a heading\n```\n\n"
        "[ok](#two-words-code) [ok](OTHER.md) ![ok](OTHER.md) [ok](../README.md#set-up-1)\n"
        "[a](NOPE.md) [b](#not-a-heading) [c](../README.md#set-up-2) [d](../../outside.md)\n"
    )
    found = broken_links(page, root=root)
    assert [f.split("(")[1].split(")")[0] for f in found] == [
        "NOPE.md",
        "#not-a-heading",
        "../README.md#set-up-2",
        "../../outside.md",
    ]
