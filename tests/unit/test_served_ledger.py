"""The served graph's ledger, chosen from the server's configuration (``serving/server.py``,
``config/deployment.py``; ``docs/ARCHITECTURE.md``, invariant 17; ``docs/DEPLOYING.md``).

Per deployment shape: ``langgraph dev``'s in-memory runtime keeps a file beside its own state
(memory when it keeps none); the server checkpointer (``ALGENTA_CHECKPOINTER``) its database; a
custom checkpointer or another runtime nothing, so it refuses to start naming
``ALGENTA_LEDGER`` unless one is configured or the deployment is declared one process.
"""

from __future__ import annotations

import json

import pytest

from algenta_graph.config.deployment import ServedRuntime, served_runtime
from algenta_graph.errors import LedgerRequired
from algenta_graph.serving.server import ServerSettings, served_ledger

SERVER_CHECKPOINTER = json.dumps({"path": "algenta_graph.serving.checkpointer.server_checkpointer"})


def runtime(**env: str) -> ServedRuntime:
    return served_runtime(env)


def test_the_servers_environment_says_where_it_keeps_the_state() -> None:
    assert runtime() == ServedRuntime(None, None, True, None)
    dev = runtime(LANGGRAPH_RUNTIME_EDITION="inmem", LANGGRAPH_DISABLE_FILE_PERSISTENCE="true")
    assert (dev.edition, dev.file_persistence, dev.checkpointer_path) == ("inmem", False, None)
    ours = runtime(LANGGRAPH_CHECKPOINTER=SERVER_CHECKPOINTER, ALGENTA_CHECKPOINTER=" cp.sqlite ")
    assert ours.checkpointer_path == "algenta_graph.serving.checkpointer.server_checkpointer"
    assert ours.algenta_checkpointer == "cp.sqlite"
    # a checkpointer config without a path (a TTL, a backend) names no custom checkpointer;
    # one that is not JSON is kept as its text, never taken for none
    assert runtime(LANGGRAPH_CHECKPOINTER='{"ttl": {"default_ttl": 5}}').checkpointer_path is None
    assert runtime(LANGGRAPH_CHECKPOINTER="not json").checkpointer_path == "not json"


SETTINGS = ServerSettings()
SINGLE = ServerSettings.from_env({"ALGENTA_SINGLE_PROCESS": "1"})


def test_langgraph_devs_in_memory_runtime_keeps_a_ledger_file_beside_its_state() -> None:
    dev = runtime(LANGGRAPH_RUNTIME_EDITION="inmem")
    assert served_ledger(SETTINGS, None, dev) == ".langgraph_api/algenta-ledger.sqlite"
    volatile = runtime(LANGGRAPH_RUNTIME_EDITION="inmem", LANGGRAPH_DISABLE_FILE_PERSISTENCE="true")
    assert served_ledger(SETTINGS, None, volatile) == "memory"
    assert served_ledger(SETTINGS, "postgresql://db/x", dev) == "postgresql://db/x"  # configured


def test_the_server_checkpointer_keeps_the_ledger_in_its_database() -> None:
    ours = runtime(
        LANGGRAPH_RUNTIME_EDITION="inmem",
        LANGGRAPH_CHECKPOINTER=SERVER_CHECKPOINTER,
        ALGENTA_CHECKPOINTER="postgresql://u:pw@db/agents",
    )
    assert served_ledger(SETTINGS, None, ours) == "postgresql://u:pw@db/agents"
    # any other spelling of it (a file path) is taken for a custom checkpointer: refused
    path = "/srv/algenta_graph/serving/checkpointer.py:server_checkpointer"
    other = runtime(LANGGRAPH_CHECKPOINTER=json.dumps({"path": path}), ALGENTA_CHECKPOINTER="x")
    with pytest.raises(LedgerRequired, match="custom checkpointer"):
        served_ledger(SETTINGS, None, other)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        (
            {"LANGGRAPH_RUNTIME_EDITION": "inmem", "LANGGRAPH_CHECKPOINTER": '{"path": "x:make"}'},
            "a LangGraph server with the custom checkpointer 'x:make'",
        ),
        ({"LANGGRAPH_RUNTIME_EDITION": "postgres"}, "a LangGraph server on its 'postgres' runtime"),
        (
            {"LANGGRAPH_RUNTIME_EDITION": "inmem", "LANGGRAPH_CHECKPOINTER": SERVER_CHECKPOINTER},
            "the server checkpointer (ALGENTA_CHECKPOINTER)",  # its variable unset
        ),
    ],
)
def test_any_other_deployment_refuses_to_start_without_a_ledger(
    env: dict[str, str], named: str
) -> None:
    shape = runtime(**env)
    with pytest.raises(LedgerRequired) as refused:
        served_ledger(SETTINGS, None, shape)
    assert str(refused.value).startswith(named + ": no ledger")
    assert "ALGENTA_LEDGER" in str(refused.value)
    assert served_ledger(SETTINGS, "/srv/ledger.sqlite", shape) == "/srv/ledger.sqlite"
    assert served_ledger(SINGLE, None, shape) == "memory"  # declared one process
