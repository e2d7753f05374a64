"""The served graph with no Algenta engine: ``langgraph dev``, a CRM, the inbox in Chromium.

The configuration file says ``base_url = false`` and names a CRM (a FastMCP server over HTTP)
with ``require_approval`` on its delete. The served graph has no engine-gate node; an agent's
delete is held until an operator answers, through the SDK on one thread and in the inbox (headless
Chromium) on another, and each approval runs the delete exactly once (the CRM's own log). A
configuration with neither an engine nor an extra server refuses to start, naming what to set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from browser_support import chromium, sign_in, text_of, unstale, wait_for
from crm_support import TOKEN, running_crm
from served_support import (
    CONFIG,
    bearer,
    interrupt_value,
    langgraph_dev,
    user_turn,
    write_auth_file,
)

from algenta_graph.errors import NoToolServers
from algenta_graph.governance.gates import ENGINE_GATE_NAMES
from algenta_graph.serving.server import startup_check

pytestmark = pytest.mark.timeout(600)

TOKENS: dict[str, tuple[str, list[str]]] = {
    "tok-alice": ("alice", ["agent"]),
    "tok-ana": ("ana", ["operator"]),
}


def _agent_toml(path: Path, crm_url: str) -> Path:
    path.write_text(
        "base_url = false   # no Algenta engine: gates on your own tools\n"
        "[extra_servers.crm]\n"
        'transport = "streamable_http"\n'
        f'url = "{crm_url}"\n'
        'headers = { Authorization = { env = "CRM_TOKEN", prefix = "Bearer " } }\n'
        "[tool_gates]\n"
        'require_approval = ["crm.delete_customer"]\n'
    )
    return path


async def test_a_held_call_is_answered_through_the_sdk_and_in_the_inbox_with_no_engine(
    tmp_path: Path,
) -> None:
    from langgraph_sdk import get_client
    from selenium.webdriver.common.by import By

    config = json.loads(CONFIG.read_text())
    config.pop("env", None)
    graph_json = tmp_path / "langgraph.json"
    graph_json.write_text(json.dumps(config))
    with running_crm() as crm:
        env = {
            "ALGENTA_CONFIG": str(_agent_toml(tmp_path / "agent.toml", crm.url)),
            "ALGENTA_BASE_URL": "",  # (a set one would win over the file)
            "ALGENTA_MODEL": "demo",
            "ALGENTA_AUTH_FILE": str(write_auth_file(tmp_path / "auth.json", TOKENS)),
            "ALGENTA_INBOX_SECRET": "engineless-test-secret",
            "CRM_TOKEN": TOKEN,
        }
        with langgraph_dev(graph_json, workdir=tmp_path / "server", env=env) as server:
            assert "no engine: the engine's gates are off" in server.log()
            alice: Any = get_client(url=server.url, headers=bearer("tok-alice"))
            ana: Any = get_client(url=server.url, headers=bearer("tok-ana"))
            drawn = await alice.assistants.get_graph("governed_agent")
            nodes = {n["id"] for n in drawn["nodes"]}
            assert "denial_handler_approval" in nodes
            assert not {f"denial_handler_{g}" for g in ENGINE_GATE_NAMES} & nodes

            # through the SDK: held, then approved by the operator, run once
            first = (await alice.threads.create())["thread_id"]
            await alice.runs.wait(
                first, "governed_agent", input=user_turn("delete_customer account_id=b2")
            )
            state = await alice.threads.get_state(first)
            assert state["next"] == ["denial_handler_approval"], state["next"]
            [item] = interrupt_value(state)["escalations"]
            assert item["tool"] == "crm.delete_customer" and crm.count("delete_customer") == 0
            await ana.runs.wait(
                first,
                "governed_agent",
                command={"resume": {"decisions": [{"type": "approve", "message": "asked"}]}},
            )
            assert crm.calls[-1] == ("delete_customer", {"account_id": "b2", "reason": ""})
            assert crm.count("delete_customer") == 1
            values = (await ana.threads.get_state(first))["values"]
            [decided] = values["operator_decisions"]
            assert (decided["operator"], decided["verdict"], decided["tool"]) == (
                "ana",
                "approved",
                "crm.delete_customer",
            )

            # in the inbox: the queue shows the held call by its tool; approving runs it once
            second = (await alice.threads.create())["thread_id"]
            await alice.runs.wait(
                second, "governed_agent", input=user_turn("delete_customer account_id=c3")
            )
            [held] = interrupt_value(await alice.threads.get_state(second))["escalations"]
            with chromium(tmp_path / "chrome") as browser:
                sign_in(browser, server.url, "tok-ana")
                row = f"#queue tr.entry[data-escalation='{held['escalation_id']}']"
                wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, row))
                text = unstale(browser, lambda d: d.find_element(By.CSS_SELECTOR, row).text)
                assert "crm.delete_customer" in text, text
                unstale(browser, lambda d: d.find_element(By.CSS_SELECTOR, f"{row} a.open").click())
                wait_for(browser, lambda d: d.find_elements(By.ID, "answer"))
                browser.find_element(By.ID, "decision-0-approve").click()
                browser.find_element(By.ID, "reason-0").send_keys("customer asked")
                browser.find_element(By.ID, "submit").click()
                wait_for(browser, lambda d: d.find_elements(By.ID, "notice"))
                assert "approved" in text_of(browser, "notice")
            assert crm.count("delete_customer") == 2
            assert crm.calls[-1] == ("delete_customer", {"account_id": "c3", "reason": ""})


def test_a_served_graph_with_neither_an_engine_nor_an_extra_server_does_not_start(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "agent.toml"
    empty.write_text("base_url = false\n")
    with pytest.raises(NoToolServers) as refused:
        startup_check({"ALGENTA_CONFIG": str(empty), "ALGENTA_SINGLE_PROCESS": "1"})
    message = str(refused.value)
    assert f"base_url = false ({empty})" in message and "[extra_servers.NAME]" in message
