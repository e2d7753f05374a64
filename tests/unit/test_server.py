"""The served graph's factory in-process (``algenta_graph.serving.server``): ``langgraph.json``
names it, and its settings from the environment name the bad variable. Served by a real
``langgraph dev``: ``tests/served/test_server.py``.
"""

from __future__ import annotations

import importlib

import pytest
from served_support import CONFIG

from algenta_graph.governance.gates import GATE_NAMES
from algenta_graph.serving.server import ServerSettings, make_graph

# ---------------------------------------------------------------------------------------------
# the factory in-process


def test_langgraph_json_names_the_factory() -> None:
    import langgraph_cli.config

    config = langgraph_cli.config.validate_config_file(CONFIG)
    spec = config["graphs"]["governed_agent"]
    assert isinstance(spec, dict)  # a path and a description, not a bare path
    module, _, name = spec["path"].partition(":")
    assert importlib.import_module(module).__dict__[name] is make_graph


def test_settings_from_env_name_the_bad_variable() -> None:
    assert ServerSettings.from_env({}) == ServerSettings()
    s = ServerSettings.from_env(
        {
            "ALGENTA_PROFILE": "execute",
            "ALGENTA_TOP_K": "3",
            "ALGENTA_MODEL": "demo",
            "ALGENTA_ON_DENIAL": "report",
        }
    )
    assert (s.profile, s.top_k, s.model) == ("execute", 3, None)
    assert s.on_denial_policy == dict.fromkeys(GATE_NAMES, "report")
    per_gate = ServerSettings.from_env({"ALGENTA_ON_DENIAL": '{"confidence": "halt"}'})
    assert per_gate.on_denial_policy == {"confidence": "halt"}
    for env, needle in [
        ({"ALGENTA_TOP_K": "0"}, "ALGENTA_TOP_K"),
        ({"ALGENTA_TOP_K": "many"}, "ALGENTA_TOP_K"),
        ({"ALGENTA_PROFILE": "root"}, "ALGENTA_PROFILE"),
        ({"ALGENTA_ON_DENIAL": "ignore"}, "ALGENTA_ON_DENIAL"),
        ({"ALGENTA_ON_DENIAL": '{"gate9": "report"}'}, "gate9"),
        ({"ALGENTA_ON_DENIAL": "{not json"}, "ALGENTA_ON_DENIAL"),
    ]:
        with pytest.raises(ValueError, match=needle):
            ServerSettings.from_env(env)
