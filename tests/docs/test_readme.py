"""The documented snippets that print what their comments say, run as written: the README's
"1. Import it" and its served graph's SDK snippet (streaming a turn), ``docs/SECURITY.md``'s
agent asking and operator answering (the decision and the webhook receiver made by the snippet
itself), and ``docs/ESCALATIONS.md``'s notice receiver."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.docs.doc_blocks import named
from tests.docs.test_doc_blocks import run_python


def test_import_snippet_runs(tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(named("import-it").code)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["confidence", "True", "ana"]


def test_security_model_snippet_runs_against_the_served_graph(tmp_path: Path) -> None:
    """The SDK examples (the README's streamed turn; ``docs/SECURITY.md``'s agent asking and
    operator answering) against a real ``langgraph dev`` with an auth file and the reference
    engine: nothing but the server's URL and the two tokens is given; the decision and the
    webhook receiver come from the snippet itself."""
    import os

    from served_support import CONFIG, langgraph_dev, write_auth_file

    from algenta_graph.engine import ReferenceEngine

    tokens = {"t-agent": ("alice", ["agent"]), "t-op": ("ana", ["operator"])}
    with ReferenceEngine(db=tmp_path / "engine.sqlite", relaxed=True) as engine:
        env = {
            "ALGENTA_BASE_URL": engine.url,
            "ALGENTA_OPERATOR_KEY_IS_AGENT_KEY": "1",  # the reference engine here has no keys
            "ALGENTA_PROFILE": "execute",
            "ALGENTA_AUTH_FILE": str(write_auth_file(tmp_path / "auth.json", tokens)),
        }
        with langgraph_dev(CONFIG, workdir=tmp_path / "server", env=env) as server:
            given = {**os.environ, "ALGENTA_SERVER_URL": server.url}
            streamed = run_python(
                named("stream-sdk").code, tmp_path, {**given, "ALGENTA_TOKEN": "t-agent"}
            )
            out = run_python(
                named("operator-sdk").code,
                tmp_path,
                {**given, "AGENT_TOKEN": "t-agent", "OPERATOR_TOKEN": "t-op"},
            )
    assert "recommend" in streamed
    assert out.split() == ["confidence", "ana", "override", "receipt", "1", "delivery"]


def test_the_notice_receiver_refuses_an_old_notice_replayed_and_a_moved_timestamp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The documented receiver, served over HTTP: a notice the graph posts is accepted and acted
    on once (a retry of it too); one signed 10 minutes ago and sent again is refused, and so is
    the same with its timestamp moved to now (the signature covers it)."""
    import asyncio
    import time

    import httpx

    from algenta_graph._serve import BackgroundServer
    from algenta_graph.governance.escalations import WebhookNotify
    from algenta_graph.governance.notice_signing import new_secret, signed_headers
    from algenta_graph.governance.notifications import post_notice

    secret = new_secret()
    monkeypatch.setenv("ALGENTA_NOTIFY_SECRET", secret)
    paged: list[Any] = []
    receiver: dict[str, Any] = {}
    block = named("receiver")
    exec(compile(block.code, block.where, "exec"), receiver)
    receiver["page_the_on_call"] = paged.append  # the snippet's pager, watched
    server = BackgroundServer(receiver["app"], name="readme-receiver")
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/hooks/algenta"
        notice = {"escalation_id": "esc_1", "gate": "confidence", "decision_id": "d1"}
        target = WebhookNotify.model_validate({"url": url, "secret": secret, "attempts": 1})
        asyncio.run(post_notice(target, notice))  # a refusal (non-2xx) would raise
        assert paged == [notice]
        body = json.dumps(notice, sort_keys=True).encode()
        again = httpx.post(url, content=body, headers=signed_headers(secret, "esc_1", body))
        assert again.status_code == 200 and paged == [notice]  # a retry: acted on once

        other = json.dumps({**notice, "escalation_id": "esc_2"}, sort_keys=True).encode()
        old = signed_headers(secret, "esc_2", other, time.time() - 600)
        replayed = httpx.post(url, content=other, headers=old)
        assert replayed.status_code == 400 and "too old" in replayed.text
        moved = {**old, "webhook-timestamp": str(int(time.time()))}
        changed = httpx.post(url, content=other, headers=moved)
        assert changed.status_code == 400 and "No matching signature" in changed.text
        assert paged == [notice]
    finally:
        server.stop()
