"""The tokenizer and schema projection of the native index (the recipe in native/README.md)."""

from __future__ import annotations

import pytest

from algenta_graph._native import FIELDS, project_tool, tokenize


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("get_weather", ["getweather", "get", "weather"]),
        ("getWeather", ["getweather", "get", "weather"]),
        ("get-weather", ["getweather", "get", "weather"]),
        ("math.factorial", ["mathfactorial", "math", "factori"]),
        ("getHTTPResponseCode", ["gethttpresponsecode", "get", "http", "respons", "code"]),
        ("XMLHttpRequest", ["xmlhttprequest", "xml", "http", "request"]),
        ("side1", ["side1", "side"]),
        ("ipv4 and 2024", ["ipv4", "ipv"]),
        ("s3_upload", ["s3upload", "s3", "upload"]),
        ("getV2Users", ["getv2users", "get", "v2", "user"]),
        ("HTTP2Server", ["http2server", "http2", "http", "server"]),
        ("x = 3.14, y = 2", []),
        ("Search the files", ["search", "file"]),
        ("Café Straße naïve", ["cafe", "strass", "naiv"]),
        ("Привет МИР", ["привет", "мир"]),
        ("end of a sentence.", ["end", "sentenc"]),
        ("_private_", ["privat"]),
        ("", []),
        ("... --- ___ !!!", []),
    ],
)
def test_tokenize(text: str, tokens: list[str]) -> None:
    assert tokenize(text) == tokens


@pytest.mark.parametrize(
    "word", ["not", "no", "off", "on", "up", "down", "out", "all", "before", "after"]
)
def test_words_tools_depend_on_are_kept(word: str) -> None:
    (token,) = tokenize(f"the {word} of")
    assert word.startswith(token)  # kept (and stemmed: "before" -> "befor")


def test_stopwords_dropped_inside_identifiers_but_whole_kept() -> None:
    assert tokenize("is_of_type") == ["isoftype", "type"]


def test_huge_token_dropped_and_huge_text_tokenized() -> None:
    assert tokenize("x" * 10_000 + " weather") == ["weather"]
    assert len(tokenize("weather " * 100_000)) == 100_000


def test_fields() -> None:
    assert FIELDS == ("name", "description", "param_names", "param_text")


def test_projection_nested_parameters() -> None:
    schema = {
        "type": "object",
        "description": "root text repeats the tool description and is skipped",
        "properties": {
            "filters": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "field_name": {"type": "string", "description": "Column to filter"},
                        "op": {"type": "string", "enum": ["eq", "gt", "lt"]},
                    },
                },
            },
            "limit": {"type": "integer", "enum": [10, 100], "description": "Max rows"},
        },
    }
    p = project_tool("query_data", "Query rows", schema)
    assert p["name"] == ["query_data"]
    assert p["description"] == ["Query rows"]
    assert sorted(p["param_names"]) == ["field_name", "filters", "limit", "op"]
    assert sorted(p["param_text"]) == [
        "10",
        "100",
        "Column to filter",
        "Max rows",
        "eq",
        "gt",
        "lt",
    ]


def test_projection_refs_with_cycles() -> None:
    schema = {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}, "alt": {"$ref": "#/definitions/Leaf"}},
        "$defs": {
            "Node": {
                "type": "object",
                "description": "A tree node",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
            },
            "Orphan": {"properties": {"never_seen": {"type": "string"}}},
        },
        "definitions": {"Leaf": {"properties": {"leaf_value": {"type": "string"}}}},
    }
    p = project_tool("tree", "", schema)
    assert sorted(p["param_names"]) == ["alt", "children", "leaf_value", "root"]
    assert p["param_text"] == ["A tree node"]


def test_projection_anyof_oneof_allof_enums() -> None:
    schema = {
        "type": "object",
        "properties": {
            "unit": {"anyOf": [{"enum": ["celsius", "fahrenheit"]}, {"type": "null"}]},
            "mode": {"oneOf": [{"const": "fast"}, {"const": "safe"}]},
            "extra": {"allOf": [{"properties": {"nested_flag": {"type": "boolean"}}}]},
        },
    }
    p = project_tool("t", None, schema)
    assert sorted(p["param_text"]) == ["celsius", "fahrenheit", "fast", "safe"]
    assert sorted(p["param_names"]) == ["extra", "mode", "nested_flag", "unit"]
    assert p["description"] == []


def test_projection_accepts_json_text_and_none() -> None:
    assert project_tool("t", "d", '{"properties": {"a": {}}}')["param_names"] == ["a"]
    assert project_tool("t", "d", None)["param_names"] == []
    assert project_tool("t", "d", True)["param_names"] == []


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ([1, 2], "must be a JSON object, got an array"),
        (42, "unsupported type int|must be a JSON object"),
        ("{not json", "not valid JSON"),
        ('"just a string"', "must be a JSON object, got a string"),
        ({"properties": {"a": {1, 2}}}, "unsupported type set"),
        ({1: "x"}, "keys must be strings"),
    ],
)
def test_projection_bad_schema_names_tool(schema: object, message: str) -> None:
    with pytest.raises(ValueError, match=r"'broken_tool'|\"broken_tool\"") as info:
        project_tool("broken_tool", "", schema)
    assert any(part in str(info.value) for part in message.split("|")), str(info.value)


def test_projection_too_deep() -> None:
    schema: dict[str, object] = {"type": "string"}
    for _ in range(300):
        schema = {"items": schema}
    with pytest.raises(ValueError, match="deeper than"):
        project_tool("deep", "", schema)


def test_projection_self_referential_python_object() -> None:
    schema: dict[str, object] = {"properties": {}}
    schema["properties"] = {"loop": schema}
    with pytest.raises(ValueError, match="deeper than"):
        project_tool("loop_tool", "", schema)


def test_projection_lists_a_repeated_text_each_time() -> None:
    # The second "The user id" is staged as the number of the first (a short parameter text is
    # tokenized once an add); the projection still shows it where it is.
    schema = {
        "properties": {
            "owner": {"type": "string", "description": "The user id"},
            "author": {"type": "string", "description": "The user id"},
            "ns": {"type": "string", "description": "hub"},
        }
    }
    p = project_tool("hub.get_user", "", schema)
    assert p["param_text"] == ["hub", "The user id", "The user id", "hub"]


def test_projection_reads_dict_and_str_subclasses_like_their_bases() -> None:
    # Exact dicts and strs are recognised by their type alone (`native/src/py/json.rs`); their
    # subclasses (an OrderedDict schema, a str enum's members) take the general path.
    from collections import OrderedDict
    from enum import Enum

    class Unit(str, Enum):
        CELSIUS = "celsius"

    class Text(str):
        pass

    schema = OrderedDict(
        properties=OrderedDict(
            unit={"enum": [Unit.CELSIUS], "description": Text("Temperature unit")},
            city={"type": "string"},
        )
    )
    p = project_tool("t", "", schema)
    assert p["param_names"] == ["unit", "city"]
    assert p["param_text"] == ["celsius", "Temperature unit"]
    with pytest.raises(ValueError, match="int"):
        project_tool("t", "", {"properties": {1: {}}})
