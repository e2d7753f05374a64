"""The scrub, the profile guard, and the guarantee's own flag detector
(``docs/ARCHITECTURE.md``, invariants 1 and 2).

The detector (``guarantee_support.smuggled_flags``) is what the smuggling guarantee counts
flags with. It is tested here as a checker: it must find every flag planted directly (also in
double- and triple-encoded JSON), be written independently of the scrub, and be **no weaker**
than the scrub: whatever the scrub removes, the detector finds.
"""

from __future__ import annotations

import ast
import asyncio
import json
from typing import Any

import pytest
from guarantee_support import normalise_key, smuggled_flags
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_mcp_adapters.interceptors import MCPToolCallRequest
from repo_paths import SUPPORT

from algenta_graph.errors import ToolNotInProfileError
from algenta_graph.governance.contract import resolve_profile
from algenta_graph.governance.scrub import (
    GovernanceInterceptor,
    is_never_model_facing,
    scrub_arguments,
    scrub_schema,
    strip_graph_supplied,
)

SPELLINGS = (
    "force",
    "Force",
    "FORCE",
    "force_",
    "-force",
    "override_safety",
    "overrideSafety",
    "Override-Safety",
    "override safety",
    "OVERRIDE__SAFETY",
    "\uff46orce",  # fullwidth: NFKC folds it to "force"
    "force\u200b",  # a zero-width space
    "Override\u00adSafety",  # a soft hyphen
)
NOT_FLAGS = ("forced", "force_majeure", "f\u043erce", "override", "safety", "enforce", "", "_")
FLAGS = {"force": True, "override_safety": True}


def encode(value: Any, times: int) -> Any:
    for _ in range(times):
        value = json.dumps(value)
    return value


# --------------------------------------------------------------------------- the scrub


@pytest.mark.parametrize("key", SPELLINGS)
def test_every_spelling_is_a_flag_and_is_scrubbed(key: str) -> None:
    assert is_never_model_facing(key)
    assert scrub_arguments({"decision_id": "d", key: True}) == {"decision_id": "d"}


@pytest.mark.parametrize("key", NOT_FLAGS)
def test_other_names_are_not_flags_and_are_kept(key: str) -> None:
    assert not is_never_model_facing(key)
    assert scrub_arguments({key: 1}) == {key: 1}


@pytest.mark.parametrize("key", [1, None, ("force",), b"force"])
def test_a_key_that_is_not_a_string_is_not_a_flag(key: Any) -> None:
    assert not is_never_model_facing(key)


def test_nested_flags_go_and_everything_else_stays_unchanged() -> None:
    args = {
        "decision_id": "d1",
        "metadata": {"a": {"b": {"override_safety": True, "keep": 1}}, "force": 1},
        "items": [{"force": True, "x": 2}, "s", 3, None],
        "pair": ({"Force": 1}, 2),
        "clean": {"k": [1, {"v": "w"}]},
    }
    assert scrub_arguments(args) == {
        "decision_id": "d1",
        "metadata": {"a": {"b": {"keep": 1}}},
        "items": [{"x": 2}, "s", 3, None],
        "pair": [{}, 2],
        "clean": {"k": [1, {"v": "w"}]},
    }


def test_unchanged_values_are_returned_as_they_are() -> None:
    inner = {"k": [1, 2]}
    pair = (1, "x")
    args = {"inner": inner, "pair": pair, "note": '{"a": 1}', "list": '["x"]', "bad": "{nope"}
    out = scrub_arguments(args)
    assert out == args
    assert out["inner"] is inner and out["pair"] is pair
    assert out["note"] == '{"a": 1}'  # not re-serialised
    assert scrub_arguments({}) == {}


@pytest.mark.parametrize("times", [1, 2, 3])
@pytest.mark.parametrize("padding", ["", "  "])
def test_flags_inside_json_strings_go_however_often_encoded(times: int, padding: str) -> None:
    note = padding + encode({"override_safety": True, "keep": [1, {"force": 1}]}, times)
    out = scrub_arguments({"note": note, "list": encode([{"Force": True}, 2], times)})
    assert smuggled_flags(out) == []
    decoded = out["note"]
    for _ in range(times):
        decoded = json.loads(decoded)
    assert decoded == {"keep": [1, {}]}
    listed = out["list"]
    for _ in range(times):
        listed = json.loads(listed)
    assert listed == [{}, 2]


def test_json_nesting_beyond_the_scrubs_depth_is_left_as_text() -> None:
    shallow = encode({"force": True}, 8)
    assert smuggled_flags(scrub_arguments({"n": shallow})) == []
    deep = encode({"force": True}, 9)
    assert scrub_arguments({"n": deep}) == {"n": deep}  # the engine sees a string, not a flag


def test_a_json_string_without_flags_is_not_rewritten() -> None:
    texts: tuple[str, ...] = (
        '"plain"',
        '"{\\"a\\":1}"',
        "[1,2]",
        '{"x":"force"}',
        "{}",
        " [] ",
        '[{"a":"{}"}]',
    )
    texts += ('{"a":"{bad"}', '["[nope"]')
    for text in texts:  # compact or padded JSON would change if it were re-serialised
        assert scrub_arguments({"t": text}) == {"t": text}
        assert scrub_arguments({"t": [text, {"u": text}]}) == {"t": [text, {"u": text}]}


def test_scrub_schema_removes_the_flags_everywhere_and_copies() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "decision_id": {"type": "string"},
            "force": {"type": "boolean"},
            "metadata": {
                "type": "object",
                "properties": {"override_safety": {"type": "boolean"}, "x": {"type": "string"}},
                "required": ["override_safety", "x"],
            },
        },
        "patternProperties": {"Force": {"type": "boolean"}, "^x": {"type": "string"}},
        "required": ["decision_id", "force"],
        "dependentRequired": {"force": ["decision_id"], "decision_id": ["override_safety", "x"]},
        "dependencies": {"x": {"properties": {"Override-Safety": {}}}, "y": ["force", "z"]},
        "$defs": {"D": {"properties": {"force": {}}, "required": ["force"]}},
        "anyOf": [{"required": ["override_safety"]}, {"required": ["x"]}],
        "enum_like": ["force"],  # a value, not a property name: kept
    }
    out = scrub_schema(schema)
    assert out == {
        "type": "object",
        "properties": {
            "decision_id": {"type": "string"},
            "metadata": {
                "type": "object",
                "properties": {"x": {"type": "string"}},
                "required": ["x"],
            },
        },
        "patternProperties": {"^x": {"type": "string"}},
        "required": ["decision_id"],
        "dependentRequired": {"decision_id": ["x"]},
        "dependencies": {"x": {"properties": {}}, "y": ["z"]},
        "$defs": {"D": {"properties": {}, "required": []}},
        "anyOf": [{"required": []}, {"required": ["x"]}],
        "enum_like": ["force"],
    }
    assert schema["properties"]["force"] == {"type": "boolean"}  # the input is untouched
    out["properties"]["decision_id"]["type"] = "changed"
    assert schema["properties"]["decision_id"]["type"] == "string"


def test_scrub_schema_leaves_non_mapping_properties_and_non_list_required_alone() -> None:
    odd = {"properties": ["force"], "required": "force", "dependencies": ["force"]}
    assert scrub_schema(odd) == odd


def _request(name: str, args: dict[str, Any]) -> MCPToolCallRequest:
    return MCPToolCallRequest(name=name, args=args, server_name="algenta")


def test_the_interceptor_scrubs_and_passes_everything_else_through() -> None:
    seen: list[MCPToolCallRequest] = []

    async def handler(request: MCPToolCallRequest) -> Any:
        seen.append(request)
        return "answer"

    guard = GovernanceInterceptor(resolve_profile("execute"))
    request = _request("execute_decision", {"decision_id": "d", "Force": True, "m": {"k": 1}})
    # the handler's own value, passed through (a stand-in: a str, not a tool result)
    passed: object = asyncio.run(guard(request, handler))
    assert passed == "answer"
    assert [(r.name, r.args, r.server_name) for r in seen] == [
        ("execute_decision", {"decision_id": "d", "m": {"k": 1}}, "algenta")
    ]
    assert request.args["Force"] is True  # the model's request object itself is not edited


def test_the_interceptor_refuses_a_tool_outside_the_profile_without_calling() -> None:
    calls: list[Any] = []

    async def handler(request: MCPToolCallRequest) -> Any:
        calls.append(request)
        return "answer"

    guard = GovernanceInterceptor(resolve_profile("observe"))
    with pytest.raises(ToolNotInProfileError) as caught:
        asyncio.run(guard(_request("execute_decision", {"force": True}), handler))
    assert (caught.value.tool, caught.value.profile) == ("execute_decision", "observe")
    assert calls == []
    # no profile (an extra server) admits every tool, and still scrubs
    open_guard = GovernanceInterceptor(None)
    asyncio.run(open_guard(_request("anything", {"override_safety": 1, "a": 2}), handler))
    assert [r.args for r in calls] == [{"a": 2}]


# --------------------------------------------------------------------------- the detector


@pytest.mark.parametrize("key", SPELLINGS)
def test_the_detector_finds_every_spelling_the_scrub_removes(key: str) -> None:
    assert normalise_key(key) in ("force", "overridesafety")
    assert smuggled_flags({key: True}) == [f"$.{key}"]


@pytest.mark.parametrize("key", NOT_FLAGS)
def test_the_detector_does_not_cry_wolf(key: str) -> None:
    assert smuggled_flags({key: True, "note": json.dumps({key: 1})}) == []


@pytest.mark.parametrize("times", [1, 2, 3, 9])
def test_the_detector_finds_flags_planted_in_json_however_often_encoded(times: int) -> None:
    planted = {
        "metadata": {"note": encode(FLAGS, times)},
        "items": [encode([{"overrideSafety": 1}], times)],
        "padded": "  " + encode({"Force": True}, times),
    }
    found = smuggled_flags(planted)
    assert len(found) == 4, found
    assert all("<json>" in path for path in found)
    assert f"$.metadata.note{'<json>' * times}.force" in found


def test_the_detector_reads_double_encoded_json_that_starts_with_a_quote() -> None:
    double = json.dumps(json.dumps(FLAGS))
    assert double.startswith('"')
    assert smuggled_flags({"note": double}) == [
        "$.note<json><json>.force",
        "$.note<json><json>.override_safety",
    ]


def test_the_detector_walks_tuples_lists_and_ignores_junk() -> None:
    assert smuggled_flags(({"force": 1}, [[{"x": {"override_safety": 0}}]])) == [
        "$[0].force",
        "$[1][0][0].x.override_safety",
    ]
    for junk in (None, 1, 2.5, "", "{not json", "force", b"{}", {1: "force"}):
        assert smuggled_flags(junk) == []


def test_the_detector_is_written_independently_of_the_scrub() -> None:
    source = (SUPPORT / "guarantee_support.py").read_text()
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not any(name and name.startswith("algenta_graph.governance.scrub") for name in imported)
    assert "algenta_graph._net" in imported  # the walk did see its imports


KEYS = st.one_of(
    st.sampled_from(SPELLINGS + NOT_FLAGS + ("decision_id", "metadata", "note")),
    st.text(max_size=8),
)
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10))
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(KEYS, inner, max_size=3),
        # JSON inside a string, encoded once, twice or three times
        st.builds(encode, st.dictionaries(KEYS, inner, max_size=3), st.integers(1, 3)),
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.dictionaries(KEYS, VALUES, max_size=4))
def test_the_detector_is_no_weaker_than_the_scrub_and_the_scrub_leaves_it_nothing(
    args: dict[str, Any],
) -> None:
    scrubbed = scrub_arguments(args)
    if scrubbed != args:  # the scrub removed something: the detector sees it in the input
        assert smuggled_flags(args) != [], args
    assert smuggled_flags(scrubbed) == [], (args, scrubbed)


# --------------------------------------------------------------------------- no silent skips


def test_a_missing_dependency_skips_outside_ci_and_fails_in_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from guarantee_support import skip_or_fail_in_ci

    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no data here"):
        skip_or_fail_in_ci("no data here")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"no data here \(CI is set"):
        skip_or_fail_in_ci("no data here")


# --------------------------------------------------------------------------- invariant 11


def test_strip_graph_supplied_removes_the_declared_fields_from_a_copy() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"decision_id": {}, "nonce": {}, "idempotency_key": {}, "note": {}},
        "required": ["decision_id", "nonce", "idempotency_key"],
    }
    original = json.loads(json.dumps(schema))
    stripped, declared = strip_graph_supplied(schema)
    assert stripped == {
        "type": "object",
        "properties": {"decision_id": {}, "note": {}},
        "required": ["decision_id"],
    }
    assert declared == frozenset({"nonce", "idempotency_key"})
    assert schema == original  # the engine's schema is left as it was


def test_strip_graph_supplied_names_only_what_the_engine_declares() -> None:
    schema: dict[str, Any] = {
        "properties": {"decision_id": {}, "nonce": {}},
        "required": ["decision_id", "nonce", "idempotency_key"],
    }
    stripped, declared = strip_graph_supplied(schema)
    assert declared == frozenset({"nonce"})
    assert stripped == {
        "properties": {"decision_id": {}},
        "required": ["decision_id", "idempotency_key"],
    }
    plain = {"properties": {"decision_id": {}}, "required": ["decision_id"]}
    assert strip_graph_supplied(plain) == (plain, frozenset())


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object"},
        {"type": "object", "required": ("nonce",)},
        {"type": "object", "required": "nonce"},
        {"type": "object", "properties": None},
        {"type": "object", "properties": {}},
    ],
)
def test_strip_graph_supplied_of_a_schema_without_such_properties(schema: dict[str, Any]) -> None:
    stripped, declared = strip_graph_supplied(schema)
    assert declared == frozenset()
    expected = dict(schema)
    if "properties" in schema:
        expected["properties"] = {}
    assert stripped == expected
