"""The scaffold serves as written: ``init``, ``tokens add``, then ``langgraph dev``.

In a temporary directory outside the repository: ``algenta-graph init`` writes the files,
``algenta-graph tokens add`` makes an agent's and an operator's token, and ``langgraph dev``
serves the graph from that directory with nothing but the scaffold's files (its ``.env``
names ``agent.toml`` and ``tokens.json``; only the engine's URL is given, pointing at the
reference engine the test starts). A ``langgraph_sdk`` client with the agent's new token runs a
turn (the offline demo model) that the confidence gate escalates; the operator's new token
approves it; the webhook gets one POST and the record names the operator. A request without a
token is refused, and the inbox serves (it found the tokens file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_support import cli
from served_support import (
    bearer,
    interrupt_value,
    langgraph_dev,
    log_shaky_decision,
    user_turn,
    values_of,
)

from algenta_graph.engine import ReferenceEngine, WebhookReceiver

pytestmark = pytest.mark.timeout(600)


def _token(app: Path, name: str, role: str) -> str:
    added = cli("tokens", "add", name, "--role", role, cwd=app)
    assert added.returncode == 0, added.stderr
    return added.stdout.strip()


async def test_the_scaffold_serves_a_turn_with_a_new_token(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    from langgraph_sdk import get_client

    app = tmp_path / "my-agent"
    made = cli("init", str(app))
    assert made.returncode == 0, made.stderr
    alice, ana = _token(app, "alice", "agent"), _token(app, "ana", "operator")

    with langgraph_dev(
        app / "langgraph.json", workdir=app, env={"ALGENTA_BASE_URL": engine.url}
    ) as server:
        assert "runs OPEN" not in server.log()
        refused = httpx.post(f"{server.url}/threads/search", json={}, timeout=30)
        assert refused.status_code in (401, 403), refused.status_code
        inbox = httpx.get(f"{server.url}/inbox/", timeout=30)
        assert inbox.status_code in (200, 303), (inbox.status_code, inbox.text[:500])

        agent: Any = get_client(url=server.url, headers=bearer(alice))
        operator: Any = get_client(url=server.url, headers=bearer(ana))
        thread = (await agent.threads.create())["thread_id"]
        decision = await log_shaky_decision(agent, thread)
        await agent.runs.wait(
            thread,
            "governed_agent",
            input=user_turn(f"execute_decision decision_id={decision} webhook_url={webhook.url}"),
        )
        state = await agent.threads.get_state(thread)
        assert interrupt_value(state)["gate"] == "confidence"
        assert webhook.received == []

        done = await operator.runs.wait(
            thread,
            "governed_agent",
            command={"resume": {"decisions": [{"type": "approve", "message": "checked"}]}},
        )
        values = values_of(done)
        [record] = values["operator_decisions"]
        assert (record["operator"], record["result"]) == ("ana", "receipt")
        assert [b["decision_id"] for b in webhook.received] == [decision]
