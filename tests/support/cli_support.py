"""Helpers of the CLI tests: run the real ``algenta-graph`` console command in a subprocess.

``cli(*args)`` runs it (the installed console script when there is one, else ``python -m
algenta_graph.cli``) with this environment (minus API keys and the engine URL) and returns the
completed process; ``assert_one_line_error`` checks an error is one line on stderr, no
traceback, with the expected exit code and words.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

_DROP = (
    "ALGENTA_BASE_URL",
    "ALGENTA_API_KEY",
    "ALGENTA_OPERATOR_API_KEY",
    "ALGENTA_CONFIG",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
)


RELAXED_ENGINE_ENV = {"ALGENTA_OPERATOR_KEY_IS_AGENT_KEY": "1"}
"""For a run against the reference engine the tests start (no keys): its one (absent) key is
also the operator credential, so an override is sent."""


def command() -> list[str]:
    """The console command: the installed ``algenta-graph`` script, else ``python -m``."""
    script = shutil.which("algenta-graph")
    return [script] if script else [sys.executable, "-m", "algenta_graph.cli"]


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROP}
    env.pop("ALGENTA_GRAPH_DEBUG", None)
    env.update(extra)
    return env


def cli(
    *args: str | bytes,
    input: bytes | None = None,
    cwd: str | Path | None = None,
    timeout: float = 180,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``algenta-graph ARGS`` to its end; stdout and stderr decoded (invalid bytes kept).

    ``env``: variables set on top of :func:`cli_env`'s environment.
    """
    proc = subprocess.run(
        [*command(), *args],
        input=input if input is not None else b"",
        capture_output=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        env=cli_env(**(env or {})),
    )
    return subprocess.CompletedProcess(
        proc.args,
        proc.returncode,
        proc.stdout.decode("utf-8", "replace"),
        proc.stderr.decode("utf-8", "replace"),
    )


def assert_one_line_error(
    proc: subprocess.CompletedProcess[Any], *words: str, code: int = 2
) -> str:
    """``proc`` failed with ``code`` and one stderr line containing ``words``; return it."""
    err: str = proc.stderr.strip()
    assert proc.returncode == code, (proc.returncode, proc.stdout[-2000:], err[-2000:])
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]
