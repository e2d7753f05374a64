"""The README's runnable snippet ("Use it" / "1. Import it") runs as written and prints what
its comments say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_block_after(heading: str) -> str:
    text = README.read_text()
    start = text.index(heading)
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, start)
    assert match, f"no python block after {heading!r}"
    return match.group(1)


@pytest.mark.slow
def test_import_snippet_runs(tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(_python_block_after("### 1. Import it"))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["confidence", "True", "ana"]
