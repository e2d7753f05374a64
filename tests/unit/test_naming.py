"""Provider-safe tool names and parameter schemas (algenta_graph.retrieval.naming)."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from algenta_graph.errors import UnsupportedToolSchemaError
from algenta_graph.retrieval.naming import (
    ToolNames,
    is_provider_safe,
    model_facing_name,
    provider_parameters,
    safe_property_keys,
)

PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
UNSAFE = ["weather.get_forecast", "files/read weather", "x" * 70, "données.météo", "", "a\n"]


def test_valid_names_are_kept_as_they_are() -> None:
    names = ToolNames(["execute_decision", "search_tools", "get-thing", "A" * 64])
    assert names.renamed() == {}
    assert names.model("get-thing") == "get-thing" and names.real("get-thing") == "get-thing"


@pytest.mark.parametrize("real", UNSAFE)
def test_unsafe_names_become_provider_safe_and_map_back(real: str) -> None:
    names = ToolNames([real, "other"])
    model = names.model(real)
    assert PATTERN.match(model) and model.count("\n") == 0 and model != real
    assert names.real(model) == real


def test_trailing_newline_is_not_safe() -> None:
    # ``$`` matches before a trailing newline: the check must be a full match
    assert not is_provider_safe("tool\n") and not is_provider_safe("x" * 65)


def test_names_are_stable_across_processes() -> None:
    code = (
        "from algenta_graph.retrieval.naming import model_facing_name as m;"
        "print(m('weather.get_forecast'), m('files/read weather'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [
        model_facing_name("weather.get_forecast"),
        model_facing_name("files/read weather"),
    ]
    # the name depends on the real name only, not on the rest of the catalog
    alone = ToolNames(["weather.get_forecast"]).model("weather.get_forecast")
    crowded = ToolNames(["a.b", "weather.get_forecast", "z z"]).model("weather.get_forecast")
    assert alone == crowded == out[0]


def test_sanitized_names_that_collide_stay_unique() -> None:
    # "a.b" and "a/b" sanitize alike; a real tool is literally named like a.b's model name
    taken = model_facing_name("a.b")
    names = ToolNames(["a.b", "a/b", "a b", taken])
    models = [names.model(n) for n in ("a.b", "a/b", "a b", taken)]
    assert len(set(models)) == 4 and all(PATTERN.match(m) for m in models)
    assert names.model(taken) == taken  # the valid name keeps itself
    for real in ("a.b", "a/b", "a b", taken):
        assert names.real(names.model(real)) == real


def test_algenta_tools_follow_the_contract_convention_when_renamed() -> None:
    contract = re.compile(r"^algenta_[a-z0-9_]+$")
    names = ToolNames(
        ["Get.Contract", "query data", "log_decision"],
        algenta={"Get.Contract", "query data", "log_decision"},
    )
    assert contract.match(names.model("Get.Contract"))
    assert contract.match(names.model("query data"))
    assert names.model("log_decision") == "log_decision"  # valid: not flattened
    # an extra server's tool never borrows the prefix
    assert not ToolNames(["weather.x"]).model("weather.x").startswith("algenta_")


@given(st.lists(st.text(min_size=0, max_size=90), min_size=1, max_size=12, unique=True))
def test_any_catalog_gets_unique_valid_names_that_map_back(reals: list[str]) -> None:
    names = ToolNames(reals)
    models = [names.model(r) for r in reals]
    assert len(set(models)) == len(reals)
    assert all(PATTERN.match(m) and "\n" not in m for m in models)
    assert [names.real(m) for m in models] == reals


def test_provider_parameters_fixes_what_it_can() -> None:
    assert provider_parameters(None) == {"type": "object", "properties": {}}
    assert provider_parameters({}) == {"type": "object", "properties": {}}
    fixed = provider_parameters({"properties": {"a": {"type": "string"}}, "required": ["a"]})
    assert fixed["type"] == "object" and fixed["required"] == ["a"]


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "string"}, "top-level type 'string'"),
        ({"type": "array", "items": {}}, "top-level type 'array'"),
        ({"anyOf": [{"type": "object"}, {"type": "null"}]}, "anyOf at the top level"),
        ({"type": "object", "oneOf": [{}]}, "oneOf at the top level"),
        ({"type": "object", "properties": []}, "'properties' is not an object"),
        (["not", "a", "schema"], "is a list, not a JSON object"),
    ],
)
def test_provider_parameters_refuses_what_providers_reject(schema: object, problem: str) -> None:
    with pytest.raises(UnsupportedToolSchemaError, match=re.escape(problem)) as info:
        provider_parameters(schema, tool="t1")
    assert "'t1'" in str(info.value)


def test_property_keys_providers_reject_are_renamed_with_a_way_back() -> None:
    schema = {
        "type": "object",
        "properties": {"filter[name]": {"type": "string"}, "page size": {}, "ok.key": {}},
        "required": ["filter[name]", "ok.key"],
    }
    fixed, keys = safe_property_keys(schema)
    assert all(re.fullmatch(r"[a-zA-Z0-9_.-]{1,64}", k) for k in fixed["properties"])
    assert set(keys.values()) == {"filter[name]", "page size"}  # valid keys (dots too) stay
    assert "ok.key" in fixed["properties"]
    assert fixed["required"] == [*(k for k, v in keys.items() if v == "filter[name]"), "ok.key"]
    assert safe_property_keys(schema) == (fixed, keys)  # stable
    assert safe_property_keys({"type": "object", "properties": {"a": {}}})[1] == {}


def test_array_schemas_get_items_wherever_they_are() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "tags": {"type": "array"},
            "maybe": {"anyOf": [{"type": ["array", "null"]}, {"type": "string"}]},
            "nested": {"type": "object", "properties": {"ids": {"type": "array"}}},
            "typed": {"type": "array", "items": {"type": "integer"}},
        },
        "$defs": {"List": {"type": "array"}},
    }
    fixed = provider_parameters(schema)
    props = fixed["properties"]
    assert props["tags"]["items"] == {} and props["maybe"]["anyOf"][0]["items"] == {}
    assert props["nested"]["properties"]["ids"]["items"] == {}
    assert props["typed"]["items"] == {"type": "integer"}  # kept
    assert fixed["$defs"]["List"]["items"] == {}
    assert "items" not in schema["properties"]["tags"]  # the tool's own schema is not changed
