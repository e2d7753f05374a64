"""Every code block of ``README.md`` and ``docs/*.md`` runs as printed.

Read from the files (``doc_blocks``), so a doc edit that breaks a block fails here. By language:
a Python block runs as a script in a new directory and must exit 0 with no traceback, not even
at interpreter exit; a TOML or JSON block is checked by the real reader (``load_config``, every
``{ env = "NAME" }`` it names set; a ``langgraph.json`` fragment's paths imported); a shell
block runs under ``bash -e``, with ``pip`` standing in as a check that what it installs is
installed here and every extra it names exists. A block a test needs with something running
first is marked with a name and run there (``test_readme.py``, ``test_library_snippets.py``); a
block that cannot run here is marked ``not run`` with why, and the list of those is kept here,
named.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import REPO

from algenta_graph.config import load_config
from tests.docs.doc_blocks import Block, blocks

pytestmark = pytest.mark.timeout(600)

NOT_RUN = [
    ("README.md", "the whole test suite (this test is part of it)"),
    (
        "README.md",
        "servers on the fixed ports 8000 and 2024, in the foreground "
        "(tests/served/test_scaffold.py runs these steps on free ports)",
    ),
    (
        "docs/CLI.md",
        "a synopsis: PROMPT, t1 and [options] stand for your own (tests/cli runs each)",
    ),
    ("docs/ENGINE.md", "your own engine at its own URL"),
    (
        "docs/TRACING.md",
        "an OTLP collector and a paid model (tests/unit/test_telemetry.py runs it)",
    ),
    ("docs/ENGINE.md", "clones a public repository over the network"),
    ("docs/GUARANTEES.md", "the slow tier itself"),
    ("docs/DEPLOYING.md", "a saver of your own and a PostgreSQL server"),
    ("docs/DEPLOYING.md", "a PostgreSQL server (tests/postgres run it)"),
    ("docs/DEPLOYING.md", "a PostgreSQL server (tests/postgres run it)"),
    (
        "docs/DEPLOYING.md",
        "a PostgreSQL server and a langgraph dev (tests/postgres/test_served.py)",
    ),
]
"""Every block that does not run, by file and why: adding one means adding it here."""

NAMED = {
    "import-it",
    "stream-sdk",
    "receiver",
    "crm",
    "gates",
    "config-python",
    "operator-sdk",
    "own-tools-crm",
    "own-tools-agent",
    "own-tools-output",
}
"""The blocks the other tests run by name (with what they need started first)."""

_PIP = r"""
pip() {
  [ "$1" = install ] || { echo "pip $1: only 'pip install' is checked here" >&2; return 2; }
  shift
  python - "$@" <<'CHECK'
import importlib.metadata, os, re, sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

pyproject = Path(os.environ["DOCS_REPO"]) / "pyproject.toml"
project = tomllib.loads(pyproject.read_text())
extras = project["project"]["optional-dependencies"]
for arg in sys.argv[1:]:
    if arg.startswith("-"):
        continue
    ours = re.fullmatch(r"(\.|algenta-graph)(?:\[([\w,-]+)\])?", arg)
    if ours:
        missing = [e for e in (ours.group(2) or "").split(",") if e and e not in extras]
        assert not missing, f"pip install {arg}: no extra {missing} in pyproject.toml"
    else:
        importlib.metadata.version(arg)  # installed in the test's venv, or this raises
CHECK
}
"""


def _env(tmp: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ALGENTA_", "OPENAI_", "ANTHROPIC_"))
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["DOCS_REPO"] = str(REPO)
    env["HOME"] = str(tmp)
    return env


def run_python(code: str, cwd: Path, env: dict[str, str], timeout: int = 300) -> str:
    """Run a Python block as a script; its stdout (a failure or any traceback fails)."""
    script = cwd / "snippet.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for sign in ("Traceback", "Exception ignored", "Task was destroyed"):
        assert sign not in done.stderr, done.stderr[-4000:]
    return done.stdout


def _check_toml(block: Block, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in set(re.findall(r'env = "(\w+)"', block.code)):
        monkeypatch.setenv(name, "x")
    path = tmp / "agent.toml"
    path.write_text(block.code)
    load_config(path, environ={})


def _check_json(block: Block) -> None:
    data = json.loads(block.code)

    def paths(value: object) -> list[str]:
        if isinstance(value, dict):
            own = [value["path"]] if isinstance(value.get("path"), str) else []
            return own + [p for v in value.values() for p in paths(v)]
        return []

    for path in paths(data):
        module, _, attr = path.rpartition(":") if ":" in path else path.rpartition(".")
        assert hasattr(importlib.import_module(module), attr), path


def _run_bash(block: Block, tmp: Path) -> None:
    done = subprocess.run(
        ["bash", "-e", "-c", _PIP + block.code],
        cwd=tmp,
        env=_env(tmp),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Traceback" not in done.stderr, done.stderr[-4000:]


RUN = [b for b in blocks() if b.lang and b.name is None and b.not_run is None]


@pytest.mark.parametrize("block", RUN, ids=[f"{b.where}-{b.lang}" for b in RUN])
def test_the_block_runs_as_printed(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if block.lang == "python":
        run_python(block.code, tmp_path, _env(tmp_path))
    elif block.lang == "toml":
        _check_toml(block, tmp_path, monkeypatch)
    elif block.lang == "json":
        _check_json(block)
    elif block.lang == "bash":
        _run_bash(block, tmp_path)
    else:
        pytest.fail(f"{block.where}: no way to run a {block.lang!r} block")


def test_the_blocks_not_run_are_few_and_named() -> None:
    found = [(str(b.path.relative_to(REPO)), b.not_run) for b in blocks() if b.not_run]
    assert sorted(found) == sorted(NOT_RUN)


def test_every_named_block_is_run_by_a_test() -> None:
    names = [b.name for b in blocks() if b.name]
    assert sorted(names) == sorted(NAMED)  # each once, each one a test asks for


def test_a_block_without_a_language_is_a_picture() -> None:
    """An untagged block is not run: it must be a diagram, never code in disguise."""
    for block in blocks():
        if not block.lang:
            assert not re.search(r"^(import |from |\$ |async |await )", block.code, re.M), (
                block.where
            )
