"""The security policy on every model-originated tool call: the scrub and the profile guard.

Two rules of the Algenta contract are enforced here, before anything reaches an engine:

* ``force`` and ``override_safety`` (``never_model_facing_fields``) never reach the model nor
  the engine from a model's call: :func:`scrub_schema` removes them from every advertised schema
  and :func:`scrub_arguments` from every call's arguments, at any depth, in any spelling, also
  inside JSON strings (see ``docs/ARCHITECTURE.md``, invariant 1);
* a tool outside the active profile is refused without contacting the engine
  (:class:`GovernanceInterceptor`, invariant 2).

>>> scrub_arguments({"decision_id": "d1", "FORCE": True, "note": '{"override_safety": 1}'})
{'decision_id': 'd1', 'note': '{}'}
"""

from __future__ import annotations

import copy
import json
import unicodedata
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain_mcp_adapters.interceptors import MCPToolCallRequest, MCPToolCallResult

from algenta_graph.errors import ToolNotInProfileError
from algenta_graph.governance.contract import NEVER_MODEL_FACING_FIELDS, Profile

__all__ = [
    "GRAPH_SUPPLIED_FIELDS",
    "GovernanceInterceptor",
    "is_never_model_facing",
    "scrub_arguments",
    "scrub_schema",
    "strip_graph_supplied",
]

_MAX_JSON_DEPTH = 8

GRAPH_SUPPLIED_FIELDS: tuple[str, ...] = ("idempotency_key", "nonce")
"""``execute_decision`` arguments that only the graph supplies, when an engine declares them: a
key per attempt (derived from the thread and the tool call) and the approved plan's single-use
nonce. A model never sees them in a schema, and whatever a model sends under these names is
dropped before the graph adds its own."""


def _flag_key(key: str) -> str:
    """Spelling-blind form of an argument name: ``Override-Safety`` -> ``overridesafety``."""
    folded = unicodedata.normalize("NFKC", key).casefold()
    return "".join(ch for ch in folded if ch.isalnum())


_FLAG_KEYS = frozenset(_flag_key(name) for name in NEVER_MODEL_FACING_FIELDS)


def is_never_model_facing(key: Any) -> bool:
    """True when ``key`` spells ``force`` or ``override_safety`` (any case, ``_``/``-``/space)."""
    return isinstance(key, str) and _flag_key(key) in _FLAG_KEYS


def _scrub(value: Any, depth: int) -> tuple[Any, bool]:
    """(scrubbed value, whether anything was removed); unchanged values are returned as is."""
    if isinstance(value, Mapping):
        changed = False
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if is_never_model_facing(key):
                changed = True
                continue
            new, item_changed = _scrub(item, depth)
            changed = changed or item_changed
            out[key] = new
        return (out, True) if changed else (value, False)
    if isinstance(value, list | tuple):
        items = [_scrub(item, depth) for item in value]
        if any(c for _, c in items):
            return [v for v, _ in items], True
        return value, False
    if isinstance(value, str) and depth < _MAX_JSON_DEPTH and value.strip()[:1] in ("{", "[", '"'):
        try:
            decoded = json.loads(value)
        except (ValueError, RecursionError):
            return value, False
        new, changed = _scrub(decoded, depth + 1)
        return (json.dumps(new), True) if changed else (value, False)
    return value, False


def scrub_arguments(args: Mapping[str, Any]) -> dict[str, Any]:
    """Remove ``force`` / ``override_safety`` from tool arguments; the rest is unchanged.

    They are removed at any depth and in any spelling, also inside JSON strings.

    >>> scrub_arguments({"decision_id": "d1", "Force": True, "metadata": {"overrideSafety": 1}})
    {'decision_id': 'd1', 'metadata': {}}
    """
    scrubbed, _ = _scrub(dict(args), 0)
    return dict(scrubbed)


def scrub_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a JSON schema without ``force`` / ``override_safety`` anywhere.

    They are removed from ``properties`` and ``required`` of the root, of nested objects and of
    ``$defs``.
    """

    def walk(node: Any) -> Any:
        if isinstance(node, Mapping):
            out: dict[str, Any] = {}
            for key, item in node.items():
                if key in ("properties", "patternProperties") and isinstance(item, Mapping):
                    out[key] = {k: walk(v) for k, v in item.items() if not is_never_model_facing(k)}
                elif key == "required" and isinstance(item, list):
                    out[key] = [r for r in item if not is_never_model_facing(r)]
                elif key in ("dependentRequired", "dependencies") and isinstance(item, Mapping):
                    out[key] = {
                        k: [r for r in v if not is_never_model_facing(r)]
                        if isinstance(v, list)
                        else walk(v)
                        for k, v in item.items()
                        if not is_never_model_facing(k)
                    }
                else:
                    out[key] = walk(item)
            return out
        if isinstance(node, list):
            return [walk(item) for item in node]
        return copy.copy(node)

    return dict(walk(schema))


class GovernanceInterceptor:
    """The tool-call interceptor on every catalog tool (``langchain_mcp_adapters.interceptors``).

    1. refuses a tool the profile does not admit, without calling the engine
       (:class:`~algenta_graph.errors.ToolNotInProfileError`); ``profile=None`` admits all (extra
       servers, which are outside the Algenta contract);
    2. removes ``force`` / ``override_safety`` from the arguments (see :func:`scrub_arguments`);
    3. changes nothing else.

    Args:
        profile: the active profile; ``None`` admits every tool.
    """

    def __init__(self, profile: Profile | None) -> None:
        self.profile = profile

    async def __call__(
        self,
        request: MCPToolCallRequest,
        handler: Callable[[MCPToolCallRequest], Awaitable[MCPToolCallResult]],
    ) -> MCPToolCallResult:
        """Pass ``request`` on to ``handler`` with its arguments scrubbed, if the profile allows.

        Raises:
            ToolNotInProfileError: the profile does not admit the tool; nothing is called.
        """
        if self.profile is not None and not self.profile.allows(request.name):
            raise ToolNotInProfileError(request.name, self.profile.name)
        return await handler(request.override(args=scrub_arguments(request.args)))


def strip_graph_supplied(schema: Mapping[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    """``execute_decision``'s schema without :data:`GRAPH_SUPPLIED_FIELDS`.

    Returns:
        The schema without them, and which of them the engine declared (so the graph knows to
        supply them).

    >>> schema = {"type": "object", "properties": {"decision_id": {}, "nonce": {}},
    ...           "required": ["decision_id", "nonce"]}
    >>> stripped, declared = strip_graph_supplied(schema)
    >>> stripped["required"], sorted(declared)
    (['decision_id'], ['nonce'])
    """
    out = dict(schema)
    properties = dict(out.get("properties") or {})
    declared = frozenset(f for f in GRAPH_SUPPLIED_FIELDS if f in properties)
    for name in declared:
        properties.pop(name)
    if "properties" in out:
        out["properties"] = properties
    if isinstance(out.get("required"), list):
        out["required"] = [r for r in out["required"] if r not in declared]
    return out, declared
