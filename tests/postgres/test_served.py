"""The served graph on PostgreSQL: ``langgraph dev`` with the server's own checkpointer
configuration (``langgraph.json`` ``"checkpointer": {"path": ...}``) pointed at
``algenta_graph.serving.checkpointer.server_checkpointer``, and ``ALGENTA_CHECKPOINTER`` set to a
real PostgreSQL database. A run through ``langgraph_sdk`` leaves its receipt in that database,
where a reader outside the server finds it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from guarantee_support import log_decision
from mcp import ClientSession
from postgres_support import postgres_server, postgres_url  # noqa: F401
from served_support import CONFIG, langgraph_dev, values_of

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.serving.checkpoint_reader import read_thread_records
from algenta_graph.serving.checkpointer import open_checkpointer

SERVER_CHECKPOINTER = "algenta_graph.serving.checkpointer.server_checkpointer"


async def test_langgraph_dev_keeps_the_served_graphs_checkpoints_in_postgres(
    postgres_url: str,  # noqa: F811
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
    tmp_path: Path,
) -> None:
    from langgraph_sdk import get_client

    async with mcp_session(engine.url) as session:
        decision_id = await log_decision(session, action="served-on-postgres")
    config = json.loads(CONFIG.read_text())
    config["checkpointer"] = {"path": SERVER_CHECKPOINTER}
    config.pop("env", None)
    config_path = tmp_path / "langgraph.json"
    config_path.write_text(json.dumps(config))
    env = {
        "ALGENTA_BASE_URL": engine.url,
        "ALGENTA_OPERATOR_KEY_IS_AGENT_KEY": "1",  # the reference engine here has no keys
        "ALGENTA_PROFILE": "execute",
        "ALGENTA_MODEL": "demo",
        "ALGENTA_CHECKPOINTER": postgres_url,
    }
    with langgraph_dev(config_path, workdir=tmp_path / "server", env=env) as server:
        client = get_client(url=server.url)
        [assistant] = await client.assistants.search(graph_id="governed_agent")
        thread = (await client.threads.create())["thread_id"]
        text = f"execute decision_id={decision_id} webhook_url={webhook.url}"
        turn: dict[str, Any] = {"messages": [{"type": "human", "content": text}]}
        await client.runs.wait(thread, assistant["assistant_id"], input=turn)
        state = await client.threads.get_state(thread)
        receipts = values_of(state["values"])["receipts"]
        assert [r["decision_id"] for r in receipts] == [decision_id]
        assert "Using custom checkpointer: AsyncPostgresSaver" in server.log()

    # the server is gone; its checkpoints are in PostgreSQL
    async with open_checkpointer(postgres_url, setup=False) as saver:
        records = await read_thread_records(saver, thread)
    assert [r["decision_id"] for r in records[thread]["receipts"]] == [decision_id]
    assert [b["decision_id"] for b in webhook.received] == [decision_id]
