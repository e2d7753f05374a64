"""Provider-safe tool names and parameter schemas: what a chat model is shown for an MCP tool.

MCP allows any tool name (``weather.get_forecast``, ``files/read weather``, 70 characters...);
OpenAI and Anthropic reject the whole request unless every tool name matches
``^[a-zA-Z0-9_-]{1,64}$`` (:data:`PROVIDER_TOOL_NAME`). :class:`ToolNames` gives every tool of a
catalog a **model-facing name** that matches it:

- a name that already matches is kept as it is (every Algenta engine tool, ``search_tools``);
- any other name is sanitized (runs of other characters become ``_``), cut to fit and given a
  ``_`` + 8-hex suffix of the SHA-256 of the real name: it depends on the real name only, so the
  same tool keeps its model-facing name across turns, threads and restarts;
- an **Algenta** tool that needs changing follows the contract's
  ``external_tool_name_convention``: ``algenta_`` + lower-case ``[a-z0-9_]`` (pattern
  ``^algenta_[a-z0-9_]+$``). Algenta names that are already valid are not flattened, so they are
  not renamed (the convention is for flattening; renaming ``execute_decision`` would gain nothing
  and break every prompt and record that names it). An extra server's tool never gets the
  ``algenta_`` prefix (it would borrow Algenta's name);
- if a changed name would still collide (a real tool literally called like another's
  model-facing name, or a suffix collision), its suffix grows until it is unique; names that
  were valid as they are always win.

The real name (the catalog name, what MCP is called with) stays in state, records, receipts
and ``search_tools`` results; :meth:`ToolNames.real` maps a model's call back exactly.

:func:`provider_parameters` checks a tool's parameter schema for what the providers reject (a
top level that is not a plain ``"type": "object"`` schema) and fixes what can be fixed without
changing meaning (a missing ``type`` / ``properties``).

>>> names = ToolNames(["execute_decision", "weather.get_forecast"], algenta=["execute_decision"])
>>> names.model("execute_decision"), names.model("weather.get_forecast")
('execute_decision', 'weather_get_forecast_b6c03fce')
>>> names.real("weather_get_forecast_b6c03fce")
'weather.get_forecast'
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from algenta_graph.errors import UnsupportedToolSchemaError

__all__ = [
    "ALGENTA_PREFIX",
    "MAX_NAME_LENGTH",
    "PROVIDER_TOOL_NAME",
    "ToolNames",
    "UnsupportedToolSchemaError",
    "is_provider_safe",
    "model_facing_name",
    "provider_parameters",
    "safe_property_keys",
]

PROVIDER_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""The tool-name pattern of OpenAI and Anthropic (``^[a-zA-Z0-9_-]{1,64}$``; use ``fullmatch``)."""
PROVIDER_PROPERTY_KEY = re.compile(r"[a-zA-Z0-9_.-]{1,64}")
"""Anthropic's pattern for the top-level property keys of a tool's ``input_schema``
(``^[a-zA-Z0-9_.-]{1,64}$``; it rejects the whole request otherwise)."""
MAX_NAME_LENGTH = 64
ALGENTA_PREFIX = "algenta_"
_DIGEST = 8
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_UNSAFE_KEY = re.compile(r"[^A-Za-z0-9_.-]+")
_UNSAFE_ALGENTA = re.compile(r"[^a-z0-9]+")
# top-level keywords OpenAI refuses in function parameters ("must have type 'object' and not
# have 'oneOf'/'anyOf'/'allOf'/'enum'/'not' at the top level")
_TOP_LEVEL_REFUSED = ("oneOf", "anyOf", "allOf", "enum", "not")


def is_provider_safe(name: str) -> bool:
    """Whether OpenAI and Anthropic accept ``name`` as a tool name as it is."""
    return PROVIDER_TOOL_NAME.fullmatch(name) is not None


def model_facing_name(real: str, *, algenta: bool = False, digest: int = _DIGEST) -> str:
    """The provider-safe name of the tool called ``real`` (no uniqueness check; see ToolNames).

    >>> model_facing_name("files/read weather")
    'files_read_weather_d47eadd7'
    >>> model_facing_name("Get.Contract", algenta=True)
    'algenta_get_contract_2ca10ab7'
    """
    if is_provider_safe(real):
        return real
    suffix = hashlib.sha256(real.encode("utf-8")).hexdigest()[:digest]
    if algenta:
        body = _UNSAFE_ALGENTA.sub("_", real.lower()).strip("_")
        body = body.removeprefix(ALGENTA_PREFIX)
        prefix = ALGENTA_PREFIX
    else:
        body = _UNSAFE.sub("_", real).strip("_-")
        prefix = ""
    room = MAX_NAME_LENGTH - len(prefix) - len(suffix) - 1
    body = body[:room].rstrip("_-")
    if not body:
        return f"{prefix or 'tool_'}{suffix}"
    return f"{prefix}{body}_{suffix}"


class ToolNames:
    """The two-way map between a catalog's real tool names and their model-facing names.

    The mapping is a function of the set of real names only (see the module docs).

    Args:
        names: the catalog's real tool names.
        algenta: the Algenta engine's own tools among them (the ``algenta_`` convention applies
            to them).

    Raises:
        ValueError: no unique provider-safe name can be found for a tool.
    """

    def __init__(self, names: Iterable[str], *, algenta: Collection[str] = ()) -> None:
        reals = list(dict.fromkeys(names))
        self._to_model: dict[str, str] = {}
        self._to_real: dict[str, str] = {}
        for real in reals:  # valid names first: they always keep themselves
            if is_provider_safe(real):
                self._assign(real, real)
        for real in sorted(r for r in reals if not is_provider_safe(r)):
            digest = _DIGEST
            name = model_facing_name(real, algenta=real in algenta, digest=digest)
            while name in self._to_real:
                digest += 4
                if digest > 40:  # pragma: no cover - 160-bit SHA-256 prefix collision
                    raise ValueError(f"no unique provider-safe name for tool {real!r}")
                name = model_facing_name(real, algenta=real in algenta, digest=digest)
            self._assign(real, name)

    def _assign(self, real: str, model: str) -> None:
        self._to_model[real] = model
        self._to_real[model] = real

    def model(self, real: str) -> str:
        """The model-facing name of the real tool name ``real`` (``KeyError`` if unknown)."""
        return self._to_model[real]

    def real(self, name: str) -> str:
        """The real tool name a model's call ``name`` stands for (unknown names unchanged)."""
        return self._to_real.get(name, name)

    def renamed(self) -> dict[str, str]:
        """``{real: model-facing}`` for every tool whose name had to change."""
        return {r: m for r, m in self._to_model.items() if r != m}

    def __contains__(self, real: object) -> bool:
        """Whether ``real`` is one of the real tool names."""
        return real in self._to_model

    def __len__(self) -> int:
        """How many tools there are."""
        return len(self._to_model)


def provider_parameters(schema: Any, *, tool: str = "?") -> dict[str, Any]:
    """``schema`` as function parameters OpenAI and Anthropic accept, or raise.

    Both require a JSON Schema whose top level is ``"type": "object"`` (OpenAI's function
    ``parameters``, Anthropic's ``input_schema``); OpenAI also refuses ``oneOf`` / ``anyOf`` /
    ``allOf`` / ``enum`` / ``not`` at the top level, and an array schema without ``items``
    anywhere. A missing ``type`` (on a schema that has ``properties`` or is empty), missing
    ``properties`` and missing array ``items`` (``{}``, any item, what a missing one means) are
    added; anything else that breaks those rules raises :class:`UnsupportedToolSchemaError`
    naming the tool and the problem.
    """
    if schema is None:
        return {"type": "object", "properties": {}}
    if not isinstance(schema, Mapping):
        raise UnsupportedToolSchemaError(
            f"tool {tool!r}: its parameter schema is a {type(schema).__name__}, not a JSON object"
        )
    fixed = dict(schema)
    kind = fixed.get("type")
    refused = [k for k in _TOP_LEVEL_REFUSED if k in fixed]
    if refused:
        raise UnsupportedToolSchemaError(
            f"tool {tool!r}: its parameter schema has {', '.join(refused)} at the top level, "
            "which OpenAI and Anthropic reject (the top level must be one plain object schema)"
        )
    if kind is None:
        fixed["type"] = "object"
    elif kind != "object":
        raise UnsupportedToolSchemaError(
            f"tool {tool!r}: its parameter schema has top-level type {kind!r}; OpenAI and "
            "Anthropic accept only type 'object' (MCP requires it too)"
        )
    props = fixed.get("properties")
    if props is None:
        fixed["properties"] = {}
    elif not isinstance(props, Mapping):
        raise UnsupportedToolSchemaError(
            f"tool {tool!r}: its parameter schema's 'properties' is not an object"
        )
    parameters = copy.deepcopy(fixed)
    _with_array_items(parameters)
    return parameters


_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_ONE = ("items", "additionalProperties", "not", "contains")


def _with_array_items(schema: Any) -> Any:
    """Add ``"items": {}`` (any item) to every array schema without ``items``, in place.

    OpenAI rejects ``{"type": "array"}`` without ``items`` anywhere in a function's parameters
    ("Invalid schema for function ...: In context=('properties', 'tags'), array schema missing
    items"); JSON Schema reads a missing ``items`` as "any item", which ``{}`` says explicitly.
    """
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "array" in kinds and "items" not in schema and "prefixItems" not in schema:
        schema["items"] = {}
    for key in _SUBSCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            for sub in schema[key].values():
                _with_array_items(sub)
    for key in _SUBSCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            for sub in schema[key]:
                _with_array_items(sub)
    for key in _SUBSCHEMA_ONE:
        _with_array_items(schema.get(key))
    return schema


def safe_property_keys(schema: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``schema`` with every top-level property key providers reject renamed.

    Anthropic rejects a request whose tool has a top-level property key outside
    ``^[a-zA-Z0-9_.-]{1,64}$`` (``filter[name]``, ``page size``, common in OpenAPI-generated
    MCP servers). A renamed key is sanitized and given a short hash of the real key (stable,
    unique among the schema's keys); ``required`` follows. Map a model's arguments back with
    the returned map before calling the tool.

    Returns:
        The schema, and the map ``{model-facing key: real key}`` of the renamed ones (empty
        when none was).

    >>> schema, keys = safe_property_keys({"type": "object", "properties": {"filter[id]": {}}})
    >>> list(schema["properties"]), keys
    (['filter_id_665d00'], {'filter_id_665d00': 'filter[id]'})
    """
    props = schema.get("properties")
    if not isinstance(props, Mapping) or all(
        isinstance(k, str) and PROVIDER_PROPERTY_KEY.fullmatch(k) for k in props
    ):
        return dict(schema), {}
    taken = {k for k in props if PROVIDER_PROPERTY_KEY.fullmatch(k)}
    renamed: dict[str, str] = {}
    new_props: dict[str, Any] = {}
    for key, value in props.items():
        safe = key
        if not PROVIDER_PROPERTY_KEY.fullmatch(key):
            digits = 6
            while True:
                suffix = hashlib.sha256(key.encode("utf-8")).hexdigest()[:digits]
                body = _UNSAFE_KEY.sub("_", key).strip("_")[: MAX_NAME_LENGTH - digits - 1]
                safe = f"{body}_{suffix}" if body else f"arg_{suffix}"
                if safe not in taken:
                    break
                digits += 4
            taken.add(safe)
            renamed[safe] = key
        new_props[safe] = value
    back = {real: safe for safe, real in renamed.items()}
    fixed = {**schema, "properties": new_props}
    if isinstance(schema.get("required"), list):
        fixed["required"] = [back.get(k, k) for k in schema["required"]]
    return fixed, renamed
