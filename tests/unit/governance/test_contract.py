"""The contract loader agrees with the JSON file it reads (parity), and rejects bad input."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from repo_paths import REPO

import algenta_graph
from algenta_graph.governance import contract
from algenta_graph.governance.contract import (
    DEFAULT_PROFILE,
    NEVER_MODEL_FACING_FIELDS,
    PROFILE_NAMES,
    SAFETY_CRITICAL_TOOLS,
    Profile,
    parse_contract,
    resolve_profile,
)

PACKAGE_FILE = Path(algenta_graph.__file__).parent / "contracts" / "integration-tool-contract.json"
REPO_ROOT = REPO


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(PACKAGE_FILE.read_text("utf-8"))
    return data


def _expected_tools(doc: dict[str, Any], name: str) -> set[str] | None:
    """An independent, naive resolution of the file, to compare the loader against."""
    spec = doc["profiles"][name]
    if spec.get("tools") == "*":
        return None
    tools: set[str] = set()
    if "extends" in spec:
        parent = _expected_tools(doc, spec["extends"])
        if parent is None:
            return None
        tools |= parent
    tools |= set(spec.get("tools", []))
    tools |= set(spec.get("adds_tools", []))
    return tools


def test_every_profile_matches_the_file(document: dict[str, Any]) -> None:
    assert set(PROFILE_NAMES) == set(document["profiles"])
    for name in document["profiles"]:
        expected = _expected_tools(document, name)
        profile = resolve_profile(name)
        assert profile.name == name
        assert (None if profile.tools is None else set(profile.tools)) == expected, name


def test_the_documented_profiles_resolve_as_the_readmes_describe() -> None:
    observe, govern, execute = (resolve_profile(n) for n in ("observe", "govern", "execute"))
    assert observe.tools == frozenset({"get_contract", "query_data", "simulate", "recommend"})
    assert govern.tools == observe.tools | {"plan_decision", "log_decision"}
    assert execute.tools == govern.tools | {"execute_decision"}
    assert resolve_profile("full").tools is None


def test_default_profile_is_the_one_marked_default(document: dict[str, Any]) -> None:
    marked = [n for n, s in document["profiles"].items() if s.get("default") is True]
    assert marked == [DEFAULT_PROFILE] == ["observe"]


def test_full_is_opt_in_and_admits_anything() -> None:
    full = resolve_profile("full")
    assert full.is_full and full.opt_in_only
    assert full.allows("delete_connector") and full.allows("execute_decision")
    assert not resolve_profile(DEFAULT_PROFILE).opt_in_only


def test_never_model_facing_fields_and_safety_critical_tools_come_from_the_file(
    document: dict[str, Any],
) -> None:
    fields = {
        f
        for spec in document["profiles"].values()
        for f in spec.get("never_model_facing_fields", [])
    }
    assert fields == NEVER_MODEL_FACING_FIELDS == {"force", "override_safety"}
    critical = {t for t, i in document["mcp_tool_reference"].items() if i.get("safety_critical")}
    assert critical == SAFETY_CRITICAL_TOOLS == {"execute_decision"}


def test_allows_is_exact() -> None:
    observe = resolve_profile("observe")
    assert observe.allows("query_data")
    assert not observe.allows("execute_decision")
    assert not observe.allows("Query_Data")
    assert not observe.allows("query_batch")  # an alias is not a profile member


def test_unknown_profile_names_the_valid_ones() -> None:
    with pytest.raises(ValueError) as info:
        resolve_profile("admin")
    text = str(info.value)
    assert "'admin'" in text
    for name in PROFILE_NAMES:
        assert name in text
    with pytest.raises(ValueError):
        resolve_profile("")
    with pytest.raises(ValueError):
        resolve_profile(None)  # type: ignore[arg-type]


def test_a_profile_object_passes_through() -> None:
    custom = Profile(name="custom", tools=frozenset({"get_contract"}))
    assert resolve_profile(custom) is custom


def test_the_loader_reads_the_packaged_file_and_the_root_symlink_is_the_same_file() -> None:
    assert contract.load_contract() == json.loads(PACKAGE_FILE.read_text("utf-8"))
    root_copy = REPO_ROOT / "contracts" / "integration-tool-contract.json"
    if root_copy.exists():
        assert root_copy.resolve() == PACKAGE_FILE.resolve()


def test_no_tool_name_is_hard_coded_in_the_loader(document: dict[str, Any]) -> None:
    tree = ast.parse(Path(contract.__file__).read_text("utf-8"))
    docstrings = {
        id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
    }  # bare string statements: docstrings and attribute docs, not code
    literals = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    }
    names = set(document["mcp_tool_reference"]) | NEVER_MODEL_FACING_FIELDS | set(PROFILE_NAMES)
    assert not names & literals


@pytest.mark.parametrize(
    ("profiles", "problem"),
    [
        ({"a": {"default": True, "extends": "b"}, "b": {"extends": "a"}}, "cycle"),
        ({"a": {"default": True, "extends": "missing"}}, "unknown profile 'missing'"),
        ({"a": {"tools": ["x"]}}, "exactly one profile must be the default"),
        ({"a": {"default": True}, "b": {"default": True}}, "exactly one"),
        ({"a": {"default": True, "tools": "x"}}, "list of non-empty strings"),
        ({"a": {"default": True, "adds_tools": [1]}}, "list of non-empty strings"),
        ({"a": {"default": True, "tools": "*", "opt_in_only": True}}, "opt_in_only"),
        ({}, "non-empty object"),
    ],
)
def test_a_malformed_contract_is_rejected_with_the_reason(
    profiles: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_contract({"profiles": profiles})


def test_extends_a_full_profile_stays_full() -> None:
    parsed = parse_contract(
        {"profiles": {"all": {"tools": "*"}, "more": {"default": True, "extends": "all"}}}
    )
    assert parsed.profiles["more"].tools is None


def test_parsing_the_file_gives_every_field_as_the_file_says(document: dict[str, Any]) -> None:
    """``parse_contract`` itself, not the constants computed from it at import (mutmut maps a
    mutant only to the tests that call its function)."""
    parsed = parse_contract(document)
    assert set(parsed.profiles) == set(document["profiles"])
    for name, spec in document["profiles"].items():
        profile = parsed.profiles[name]
        expected = _expected_tools(document, name)
        assert profile.name == name
        assert (None if profile.tools is None else set(profile.tools)) == expected, name
        assert profile.description == spec.get("description", "")
        assert profile.opt_in_only is (spec.get("opt_in_only") is True)
    assert parsed.default_profile == "observe"
    assert parsed.version == document["contract_version"] != ""
    assert parsed.never_model_facing_fields == {"force", "override_safety"}
    assert parsed.safety_critical_tools == {"execute_decision"}
    expected_aliases = {
        tool: tuple(info["aliases"])
        for tool, info in document["mcp_tool_reference"].items()
        if "aliases" in info
    }
    assert dict(parsed.aliases) == expected_aliases and expected_aliases


def test_a_parsed_profile_merges_its_chain_and_keeps_what_is_not_a_string_out() -> None:
    parsed = parse_contract(
        {
            "contract_version": 3,
            "profiles": {
                "base": {"tools": ["a"], "description": 7},
                "mid": {"extends": "base", "tools": ["b"], "adds_tools": ["c"]},
                "top": {
                    "default": True,
                    "extends": "mid",
                    "adds_tools": ["d"],
                    "description": "the top",
                    "never_model_facing_fields": ["secret"],
                },
                "opt": {"tools": "*", "opt_in_only": True, "adds_tools": ["ignored"]},
                "flag": {"tools": ["x"], "opt_in_only": "yes"},
            },
            "mcp_tool_reference": {
                "a": {"safety_critical": True, "aliases": ["a2", "a3"]},
                "b": {"safety_critical": "yes"},
            },
        }
    )
    profiles = parsed.profiles
    assert profiles["base"].tools == frozenset({"a"}) and profiles["base"].description == ""
    assert profiles["mid"].tools == frozenset({"a", "b", "c"})
    assert profiles["top"].tools == frozenset({"a", "b", "c", "d"})
    assert profiles["top"].description == "the top" and not profiles["top"].opt_in_only
    assert profiles["opt"].tools is None and profiles["opt"].opt_in_only
    assert profiles["flag"].opt_in_only is False  # only a JSON true opts in
    assert parsed.default_profile == "top"
    assert parsed.version == ""  # not a string: no version
    assert parsed.never_model_facing_fields == {"secret"}
    assert parsed.safety_critical_tools == {"a"}
    assert dict(parsed.aliases) == {"a": ("a2", "a3")}


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"profiles": {"a": []}}, "profile 'a' must be an object"),
        ({"profiles": []}, "'profiles' must be a non-empty object"),
        ({"profiles": {"a": {"default": True, "extends": 1}}}, "'a' 'extends' must be a string"),
        (
            {"profiles": {"a": {"default": True, "extends": "b"}, "b": {"extends": "a"}}},
            "profile cycle a -> b -> a",
        ),
        (
            {"profiles": {"a": {"default": True, "extends": "gone"}}},
            "profile 'a' extends unknown profile 'gone'",
        ),
        (
            {"profiles": {"a": {"default": True}, "b": {"default": True}}},
            r"exactly one profile must be the default, found \['a', 'b'\]",
        ),
        (
            {"profiles": {"a": {"default": True, "tools": ["x", ""]}}},
            r"profiles.a.tools must be a list of non-empty strings, got \['x', ''\]",
        ),
        (
            {"profiles": {"a": {"default": True, "adds_tools": "x"}}},
            "profiles.a.adds_tools must be a list",
        ),
        (
            {"profiles": {"a": {"default": True, "never_model_facing_fields": [1]}}},
            "profiles.a.never_model_facing_fields must be a list",
        ),
        (
            {"profiles": {"a": {"default": True, "opt_in_only": True}}},
            "default profile 'a' is marked opt_in_only",
        ),
        (
            {"profiles": {"a": {"default": True}}, "mcp_tool_reference": []},
            "'mcp_tool_reference' must be an object",
        ),
        (
            {"profiles": {"a": {"default": True}}, "mcp_tool_reference": {"t": 1}},
            "mcp_tool_reference.t must be an object",
        ),
        (
            {"profiles": {"a": {"default": True}}, "mcp_tool_reference": {"t": {"aliases": "u"}}},
            "mcp_tool_reference.t.aliases must be a list",
        ),
    ],
)
def test_each_malformed_part_is_named(document: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_contract(document)
