"""The served graph: ``langgraph dev`` with the repository's ``langgraph.json``, driven by
``langgraph_sdk`` against a real reference engine and a real webhook receiver.

The harness (``served_support.langgraph_dev``) runs the dev server as a subprocess in its own
process group and reads its real URL from its log; it is tested here too, on a trivial graph.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from served_support import CONFIG, langgraph_dev, user_turn, values_of

from algenta_graph._net import free_port
from algenta_graph.engine import ReferenceEngine, WebhookReceiver

# ---------------------------------------------------------------------------------------------
# the harness itself, on a trivial graph


_TRIVIAL_GRAPH = """
from typing import TypedDict

from langgraph.graph import END, START, StateGraph


class S(TypedDict):
    n: int


async def bump(state: S) -> S:
    return {"n": state["n"] + 1}


def make_graph():
    builder = StateGraph(S)
    builder.add_node("bump", bump)
    builder.add_edge(START, "bump")
    builder.add_edge("bump", END)
    return builder.compile()
"""


def test_harness_reads_the_real_url_when_the_port_is_taken(tmp_path: Path) -> None:
    """``langgraph dev`` moves off a taken port without failing; the harness follows it."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "trivial.py").write_text(_TRIVIAL_GRAPH)
    (project / "langgraph.json").write_text(
        '{"dependencies": ["."], "graphs": {"trivial": "./trivial.py:make_graph"}}'
    )
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with langgraph_dev(
            project / "langgraph.json", workdir=project, env={}, port=port
        ) as server:
            assert not server.url.endswith(f":{port}")
            assert "already in use" in server.log()
            run = httpx.post(
                f"{server.url}/runs/wait",
                json={"assistant_id": "trivial", "input": {"n": 41}},
                timeout=60,
            )
            assert run.status_code == 200, run.text
            assert run.json() == {"n": 42}
            pid = server.pid
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    assert not (project / ".langgraph_api").exists()


# ---------------------------------------------------------------------------------------------
# the served graph, end to end


def _last_tool_json(values: Mapping[str, Any], tool: str) -> dict[str, Any]:
    """The structured result of the latest ``tool`` call in a thread's (JSON) state."""
    for message in reversed(values["messages"]):
        if message.get("type") == "tool" and message.get("name") == tool:
            assert message.get("status") != "error", message
            return dict(message["artifact"]["structured_content"])
    raise AssertionError(f"no {tool} result in the thread")


async def test_langgraph_dev_serves_the_governed_graph(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    from langgraph_sdk import get_client

    env = {
        "ALGENTA_BASE_URL": engine.url,
        "ALGENTA_OPERATOR_KEY_IS_AGENT_KEY": "1",  # the reference engine here has no keys
        "ALGENTA_PROFILE": "execute",
        "ALGENTA_MODEL": "demo",
        "ALGENTA_TOP_K": "5",
        "ALGENTA_ON_DENIAL": '{"confidence": "escalate"}',
    }
    with langgraph_dev(CONFIG, workdir=tmp_path / "server", env=env) as server:
        # no ALGENTA_AUTH_FILE: open, as before, and the log says so loudly
        assert "ALGENTA_AUTH_FILE is not set: the server runs OPEN" in server.log()
        client = get_client(url=server.url)
        [assistant] = await client.assistants.search(graph_id="governed_agent")
        aid = assistant["assistant_id"]
        schemas = await client.assistants.get_schemas(aid)
        context_schema = schemas["context_schema"]
        assert context_schema is not None
        context = context_schema["properties"]
        assert set(context) == {"profile", "top_k", "on_denial"}
        assert context["profile"]["enum"] == ["observe", "govern", "execute", "full"]
        thread = (await client.threads.create())["thread_id"]

        # a confident decision: logged, then executed to a receipt, streamed node by node
        await client.runs.wait(
            thread,
            aid,
            input=user_turn(
                "log_decision chosen_action=restock expected_value=120 confidence=0.9 "
                "risk_p5=-0.1 risk_p95=0.4"
            ),
        )
        state = await client.threads.get_state(thread)
        confident = str(_last_tool_json(values_of(state["values"]), "log_decision")["decision_id"])
        nodes = [
            node
            async for chunk in client.runs.stream(
                thread,
                aid,
                input=user_turn(
                    f"execute_decision decision_id={confident} webhook_url={webhook.url}"
                ),
                stream_mode="updates",
            )
            if chunk.event == "updates"
            for node in chunk.data
        ]
        assert nodes == ["retrieve_tools", "model", "governed_tool", "model"]
        state = await client.threads.get_state(thread)
        [receipt] = values_of(state["values"])["receipts"]
        assert receipt["decision_id"] == confident
        assert receipt["execution_status"] == "delivered"
        assert [body["decision_id"] for body in webhook.received] == [confident]

        # a low-confidence decision: the confidence gate, an escalation, an operator override
        await client.runs.wait(
            thread,
            aid,
            input=user_turn(
                "log_decision chosen_action=raise_price expected_value=40 confidence=0.3 "
                "risk_p5=-0.1 risk_p95=0.5"
            ),
        )
        state = await client.threads.get_state(thread)
        shaky = str(_last_tool_json(values_of(state["values"]), "log_decision")["decision_id"])
        chunks = [
            chunk
            async for chunk in client.runs.stream(
                thread,
                aid,
                input=user_turn(f"execute_decision decision_id={shaky} webhook_url={webhook.url}"),
                stream_mode="updates",
            )
            if chunk.event == "updates"
        ]
        [escalation] = chunks[-1].data["__interrupt__"]
        assert escalation["value"]["gate"] == "confidence"
        assert escalation["value"]["decision_id"] == shaky
        state = await client.threads.get_state(thread)
        assert state["next"] == ["denial_handler_confidence"]
        assert engine.executions(shaky) == []

        operator = {"action": "override", "operator": "ana.ops", "reason": "approved in writing"}
        await client.runs.wait(thread, aid, command={"resume": operator})
        state = await client.threads.get_state(thread)
        assert state["next"] == []
        receipts = values_of(state["values"])["receipts"]
        assert [r["decision_id"] for r in receipts] == [confident, shaky]
        assert receipts[-1]["safety_overridden"] is True
        [decision] = values_of(state["values"])["operator_decisions"]
        assert (decision["operator"], decision["action"], decision["result"]) == (
            "ana.ops",
            "override",
            "receipt",
        )
        [execution] = engine.executions(shaky)
        assert execution["override_safety"] is True
        assert [d["gate"] for d in values_of(state["values"])["denials"]] == ["confidence"]
        # open or not, governed records are written only by the graph's nodes
        forged = httpx.post(
            f"{server.url}/threads/{thread}/state",
            json={"values": {"receipts": [{"decision_id": shaky, "source": "operator"}]}},
            timeout=30,
        )
        assert forged.status_code == 403, forged.text
        assert "governed records" in forged.json()["detail"]
        assert len(values_of((await client.threads.get_state(thread))["values"])["receipts"]) == 2

        # per-run context may only tighten: halting the same gate ends the run, reporting it
        # (looser than the server's escalate) is refused with the gate named, nothing executed
        other = (await client.threads.create())["thread_id"]
        await client.runs.wait(
            other,
            aid,
            input=user_turn(
                "log_decision chosen_action=raise_price expected_value=40 confidence=0.2 "
                "risk_p5=-0.1 risk_p95=0.5"
            ),
            context={"top_k": 2},
        )
        state = await client.threads.get_state(other)
        assert len(values_of(state["values"])["selected_tools"]) == 2
        reported = str(_last_tool_json(values_of(state["values"]), "log_decision")["decision_id"])
        execute = user_turn(f"execute_decision decision_id={reported} webhook_url={webhook.url}")
        looser = values_of(
            await client.runs.wait(
                other,
                aid,
                input=execute,
                context={"on_denial": {"confidence": "report"}},
                raise_error=False,
            )
        )
        assert "'confidence'" in looser["__error__"]["message"]
        assert "looser" in looser["__error__"]["message"]
        await client.runs.wait(
            other, aid, input=execute, context={"on_denial": {"confidence": "halt"}}
        )
        state = await client.threads.get_state(other)
        assert state["next"] == []
        assert [(d["gate"], d["policy"]) for d in values_of(state["values"])["denials"]] == [
            ("confidence", "halt")
        ]
        assert values_of(state["values"])["receipts"] == []
        assert engine.executions(reported) == []


async def test_served_graph_fails_runs_clearly_until_the_engine_is_up(
    start_engine: Callable[..., ReferenceEngine], tmp_path: Path
) -> None:
    from langgraph_sdk import get_client

    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with langgraph_dev(
        CONFIG, workdir=tmp_path / "server", env={"ALGENTA_BASE_URL": url}
    ) as server:
        client = get_client(url=server.url)
        ask = user_turn("recommend scenario=restock_inventory")
        failed = values_of(
            await client.runs.wait(None, "governed_agent", input=ask, raise_error=False)
        )
        assert failed["__error__"]["error"] == "EngineConnectionError"
        # the server's log has the full message, naming the URL it could not reach
        assert re.search(rf"EngineConnectionError: .*{re.escape(url)}", server.log())
        assert httpx.get(f"{server.url}/ok", timeout=5).status_code == 200

        # nothing was cached from the failed attempt: once the engine is up, runs work
        start_engine(port=port)
        done = values_of(await client.runs.wait(None, "governed_agent", input=ask))
        assert "__error__" not in done
        assert done["selected_tools"][0] == "recommend"
        assert done["messages"][-1]["type"] == "ai"


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not JSON"),
        ('{"tokens": {"s3cret": {}}}', "SHA-256"),
        (None, "cannot be read"),
    ],
)
def test_langgraph_dev_refuses_to_start_on_a_bad_auth_file(
    tmp_path: Path, content: str | None, needle: str
) -> None:
    auth_file = tmp_path / "auth.json"
    if content is not None:
        auth_file.write_text(content)
    with (
        pytest.raises(AssertionError, match="exited") as caught,
        langgraph_dev(
            CONFIG,
            workdir=tmp_path / "server",
            env={"ALGENTA_AUTH_FILE": str(auth_file)},
            startup_timeout=90,
        ),
    ):
        pass
    assert f"ALGENTA_AUTH_FILE file {auth_file}" in str(caught.value)
    assert needle in str(caught.value)
