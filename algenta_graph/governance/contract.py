"""The Algenta integration tool-profile contract, read from the JSON file shipped in the wheel.

Nothing about profiles is hard-coded here: profile membership, the default profile, the fields a
model must never see and the safety-critical tools all come from
``algenta_graph/contracts/integration-tool-contract.json`` (``contracts/`` at the repository root
is a symlink to it), loaded at import time through :mod:`importlib.resources`.

>>> from algenta_graph.governance.contract import resolve_profile
>>> govern = resolve_profile("govern")
>>> govern.allows("log_decision"), govern.allows("execute_decision")
(True, False)
>>> resolve_profile("full").allows("anything_the_engine_advertises")
True
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any

__all__ = [
    "CONTRACT_FILE",
    "CONTRACT_VERSION",
    "DEFAULT_PROFILE",
    "NEVER_MODEL_FACING_FIELDS",
    "PROFILES",
    "PROFILE_NAMES",
    "SAFETY_CRITICAL_TOOLS",
    "TOOL_ALIASES",
    "Profile",
    "load_contract",
    "parse_contract",
    "resolve_profile",
]

CONTRACT_FILE = "integration-tool-contract.json"
"""File name of the contract inside the ``algenta_graph/contracts`` package directory."""


@dataclass(frozen=True)
class Profile:
    """A resolved tool profile: which engine tools a model may see and call.

    ``tools is None`` means ``"*"``: everything the connected engine advertises (the opt-in
    ``full`` profile).
    """

    name: str
    tools: frozenset[str] | None
    description: str = ""
    opt_in_only: bool = False

    @property
    def is_full(self) -> bool:
        """True when the profile admits every tool the engine advertises."""
        return self.tools is None

    def allows(self, tool_name: str) -> bool:
        """Whether ``tool_name`` (an engine MCP tool name) belongs to this profile."""
        return self.tools is None or tool_name in self.tools


@dataclass(frozen=True)
class _Contract:
    version: str
    profiles: Mapping[str, Profile]
    default_profile: str
    never_model_facing_fields: frozenset[str]
    safety_critical_tools: frozenset[str]
    aliases: Mapping[str, tuple[str, ...]]


def _str_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"contract: {where} must be a list of non-empty strings, got {value!r}")
    return list(value)


def parse_contract(data: Mapping[str, Any]) -> _Contract:
    """Resolve a contract document (the parsed JSON) into profiles and field sets.

    Profiles are resolved through ``extends`` / ``tools`` / ``adds_tools``; ``"*"`` anywhere in
    the chain makes the profile full. Raises ``ValueError`` naming the problem for a malformed
    document (unknown ``extends`` target, a cycle, no default or two defaults, bad lists).
    """
    raw_profiles = data.get("profiles")
    if not isinstance(raw_profiles, Mapping) or not raw_profiles:
        raise ValueError("contract: 'profiles' must be a non-empty object")
    for name, spec in raw_profiles.items():
        if not isinstance(spec, Mapping):
            raise ValueError(f"contract: profile {name!r} must be an object")

    resolved: dict[str, frozenset[str] | None] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> frozenset[str] | None:
        if name in resolved:
            return resolved[name]
        if name in chain:
            raise ValueError(f"contract: profile cycle {' -> '.join((*chain, name))}")
        spec = raw_profiles.get(name)
        if spec is None:
            raise ValueError(
                f"contract: profile {chain[-1]!r} extends unknown profile {name!r}"
                if chain
                else f"contract: unknown profile {name!r}"
            )
        tools: set[str] | None = set()
        if "extends" in spec:
            parent = spec["extends"]
            if not isinstance(parent, str):
                raise ValueError(f"contract: profile {name!r} 'extends' must be a string")
            base = resolve(parent, (*chain, name))
            tools = None if base is None else set(base)
        own = spec.get("tools", [])
        if own == "*":
            tools = None
        elif tools is not None:
            tools.update(_str_list(own, f"profiles.{name}.tools"))
        adds = _str_list(spec.get("adds_tools", []), f"profiles.{name}.adds_tools")
        if tools is not None:
            tools.update(adds)
        result = None if tools is None else frozenset(tools)
        resolved[name] = result
        return result

    profiles: dict[str, Profile] = {}
    for name, spec in raw_profiles.items():
        description = spec.get("description", "")
        profiles[name] = Profile(
            name=name,
            tools=resolve(name, ()),
            description=description if isinstance(description, str) else "",
            opt_in_only=spec.get("opt_in_only") is True,
        )

    defaults = [name for name, spec in raw_profiles.items() if spec.get("default") is True]
    if len(defaults) != 1:
        raise ValueError(f"contract: exactly one profile must be the default, found {defaults}")
    if profiles[defaults[0]].opt_in_only:
        raise ValueError(f"contract: default profile {defaults[0]!r} is marked opt_in_only")

    never: set[str] = set()
    for name, spec in raw_profiles.items():
        never.update(
            _str_list(
                spec.get("never_model_facing_fields", []),
                f"profiles.{name}.never_model_facing_fields",
            )
        )

    reference = data.get("mcp_tool_reference", {})
    if not isinstance(reference, Mapping):
        raise ValueError("contract: 'mcp_tool_reference' must be an object")
    safety: set[str] = set()
    aliases: dict[str, tuple[str, ...]] = {}
    for tool, info in reference.items():
        if not isinstance(info, Mapping):
            raise ValueError(f"contract: mcp_tool_reference.{tool} must be an object")
        if info.get("safety_critical") is True:
            safety.add(tool)
        if "aliases" in info:
            aliases[tool] = tuple(_str_list(info["aliases"], f"mcp_tool_reference.{tool}.aliases"))

    version = data.get("contract_version", "")
    return _Contract(
        version=version if isinstance(version, str) else "",
        profiles=MappingProxyType(profiles),
        default_profile=defaults[0],
        never_model_facing_fields=frozenset(never),
        safety_critical_tools=frozenset(safety),
        aliases=MappingProxyType(aliases),
    )


@cache
def load_contract() -> dict[str, Any]:
    """Return the raw contract document, read from the file shipped inside the package."""
    text = (resources.files("algenta_graph") / "contracts" / CONTRACT_FILE).read_text("utf-8")
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"contract: {CONTRACT_FILE} must hold a JSON object")
    return data


_CONTRACT = parse_contract(load_contract())

CONTRACT_VERSION: str = _CONTRACT.version
"""``contract_version`` of the shipped file."""
PROFILES: Mapping[str, Profile] = _CONTRACT.profiles
"""Every profile in the contract, resolved, in file order."""
PROFILE_NAMES: tuple[str, ...] = tuple(PROFILES)
"""The valid profile names, in file order."""
DEFAULT_PROFILE: str = _CONTRACT.default_profile
"""The profile marked ``"default": true`` (``"observe"``)."""
NEVER_MODEL_FACING_FIELDS: frozenset[str] = _CONTRACT.never_model_facing_fields
"""Fields no model may ever see or set (``force``, ``override_safety``)."""
SAFETY_CRITICAL_TOOLS: frozenset[str] = _CONTRACT.safety_critical_tools
"""Tools marked ``safety_critical`` (``execute_decision``)."""
TOOL_ALIASES: Mapping[str, tuple[str, ...]] = _CONTRACT.aliases
"""Documented aliases of a tool (informational; profiles admit only the names they list)."""


def resolve_profile(name: str | Profile) -> Profile:
    """Return the named profile; a :class:`Profile` is returned unchanged.

    Raises ``ValueError`` listing the valid names when ``name`` is not a profile.
    """
    if isinstance(name, Profile):
        return name
    profile = PROFILES.get(name) if isinstance(name, str) else None
    if profile is None:
        raise ValueError(
            f"unknown Algenta tool profile {name!r}; valid profiles: {', '.join(PROFILE_NAMES)}"
        )
    return profile
