"""The fenced code blocks of ``README.md`` and ``docs/*.md``, read from the files themselves.

A block is run by the tests as printed. An HTML comment on the line before its fence says how,
when the block's language alone does not:

- ``<!-- docs-test: name NAME -->``: a test asks for the block by name (it needs what an earlier
  step started: a server, an engine);
- ``<!-- docs-test: not run: WHY -->``: it cannot run here (a paid model, a real PostgreSQL or
  identity provider); the tests keep the list of these short and named.

A block without a language tag is a picture in text (a diagram), not code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from repo_paths import REPO

DOCS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
_MARK = re.compile(r"<!-- docs-test: (name (?P<name>[\w-]+)|not run: (?P<why>.+?)) -->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text and its marker."""

    path: Path
    line: int
    lang: str
    code: str
    name: str | None = None
    not_run: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(paths: tuple[Path, ...] = DOCS) -> list[Block]:
    """Every fenced block of ``paths``, in order."""
    out: list[Block] = []
    for path in paths:
        text = path.read_text()
        for found in _FENCE.finditer(text):
            line = text.count("\n", 0, found.start()) + 1
            before = text[: found.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = _MARK.search(before)
            out.append(
                Block(
                    path,
                    line,
                    found.group(1),
                    found.group(2),
                    name=mark.group("name") if mark else None,
                    not_run=mark.group("why") if mark else None,
                )
            )
    return out


def named(name: str) -> Block:
    """The block marked ``<!-- docs-test: name NAME -->`` (exactly one)."""
    [block] = [b for b in blocks() if b.name == name]
    return block
