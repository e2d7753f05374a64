"""The inbox on a server without an auth file (``langgraph dev`` with the repository's
``langgraph.json``): the server starts (it may run open on purpose), the inbox refuses to, says
so at start-up, and answers 503 with the way out; with ``ALGENTA_INBOX_ALLOW_OPEN=1`` it serves,
marked open on every page."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from served_support import CONFIG, langgraph_dev

from algenta_graph.engine import ReferenceEngine

pytestmark = pytest.mark.timeout(600)


def test_without_an_auth_file_the_inbox_refuses_and_says_so_unless_allowed(
    engine: ReferenceEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ALGENTA_AUTH_FILE", raising=False)
    monkeypatch.delenv("ALGENTA_INBOX_ALLOW_OPEN", raising=False)
    env = {
        "ALGENTA_BASE_URL": engine.url,
        "ALGENTA_OPERATOR_KEY_IS_AGENT_KEY": "1",  # the reference engine here has no keys
        "ALGENTA_MODEL": "demo",
    }
    with langgraph_dev(CONFIG, workdir=tmp_path / "closed", env=env) as server:
        page = httpx.get(f"{server.url}/inbox/login", timeout=30)
        assert page.status_code == 503, page.text
        assert "ALGENTA_AUTH_FILE" in page.text and "ALGENTA_INBOX_ALLOW_OPEN=1" in page.text
        assert "the inbox refuses to start" in server.log()
        assert httpx.get(f"{server.url}/ok", timeout=30).status_code == 200  # the API serves

    env["ALGENTA_INBOX_ALLOW_OPEN"] = "1"
    with langgraph_dev(CONFIG, workdir=tmp_path / "open", env=env) as server:
        page = httpx.get(f"{server.url}/inbox/login", timeout=30)
        assert page.status_code == 200 and "This server runs OPEN" in page.text
        assert "served OPEN" in server.log()
