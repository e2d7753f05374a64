"""The documented library snippets that need something running first, run as printed.

``docs/TOOL_GATES.md``: the CRM's MCP server (``crm.py``) started as a reader starts it, the
reference engine beside it, then the graph's snippet: the held ``delete_customer`` is answered
with a plain ``{"type": "approve"}`` (the operator named in the resume's config) and runs once,
and the process ends without a traceback (a graph left open used to end in
``aclose(): asynchronous generator is already running``). ``docs/CONFIGURATION.md``: the snippet
builds the graph from the ``agent.toml`` that ``algenta-graph init`` writes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from cli_support import cli

from algenta_graph._net import free_port
from algenta_graph.engine import ReferenceEngine
from tests.docs.doc_blocks import named
from tests.docs.test_doc_blocks import _env, run_python

pytestmark = pytest.mark.timeout(600)


def _wait_for(url: str, process: subprocess.Popen[bytes]) -> None:
    for _ in range(300):
        assert process.poll() is None, "the CRM's server exited"
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    pytest.fail(f"nothing answered at {url}")


def test_the_gates_snippet_holds_the_delete_until_approved_and_runs_it_once(
    tmp_path: Path,
) -> None:
    (tmp_path / "crm.py").write_text(named("crm").code)
    port = free_port()
    env = {**_env(tmp_path), "CRM_PORT": str(port)}
    server = subprocess.Popen([sys.executable, "crm.py"], cwd=tmp_path, env=env)
    try:
        _wait_for(f"http://127.0.0.1:{port}/", server)
        with ReferenceEngine(db=tmp_path / "engine.sqlite", relaxed=True) as engine:
            env = {
                **_env(tmp_path),
                "ALGENTA_BASE_URL": engine.url,
                "CRM_URL": f"http://127.0.0.1:{port}/mcp",
            }
            out = run_python(named("gates").code, tmp_path, env)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert out.splitlines() == [
        "approval",
        "Operator ana APPROVED the call of crm.delete_customer; it ran once and answered:",
        "deleted Ada",
    ]


def test_the_configuration_snippet_builds_the_graph_from_the_scaffolds_file(
    tmp_path: Path,
) -> None:
    made = cli("init", "app", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    app = tmp_path / "app"
    with ReferenceEngine(db=tmp_path / "engine.sqlite", relaxed=True) as engine:
        env = {**_env(app), "ALGENTA_BASE_URL": engine.url}
        env.pop("ALGENTA_CONFIG", None)
        out = run_python(named("config-python").code, app, env)
    assert "restock_inventory" in out or out.strip(), out
    assert (app / "runs.sqlite").exists() and (app / "store.sqlite").exists()
    assert os.path.getsize(app / "runs.sqlite") > 0
