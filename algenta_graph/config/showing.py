"""Showing a configuration: plain data with every secret masked, and where each key came from."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
)

from algenta_graph.config.agent import AgentConfig
from algenta_graph.config.names import _MASK, DEMO_MODEL
from algenta_graph.config.tables import EnvSecret

if TYPE_CHECKING:
    pass


def masked(config: AgentConfig, *, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The configuration as plain data with every secret masked, and where each key came from.

    A secret shows as ``{"env": NAME, "value": "****"}`` (``"<not set>"`` when missing), the
    default model as ``"demo"``; the result has a ``"sources"`` table (``{key: the file or the
    environment variable}``) of the keys not left at their default.
    """
    env = os.environ if environ is None else environ
    data = config.model_dump(mode="python")

    def mask(value: Any, original: Any) -> Any:
        if isinstance(original, EnvSecret):
            shown: dict[str, Any] = {"env": original.env}
            if original.prefix:
                shown["prefix"] = original.prefix
            shown["value"] = _MASK if original.value(env) is not None else "<not set>"
            return shown
        if isinstance(original, BaseModel):
            return {k: mask(value[k], getattr(original, k)) for k in type(original).model_fields}
        if isinstance(original, Mapping):
            return {k: mask(value[k], original[k]) for k in original}
        return value

    out: dict[str, Any] = mask(data, config)
    if out.get("model") is None:
        out["model"] = DEMO_MODEL  # the default, shown by name
    out["sources"] = {key: config.source_of(key) for key in sorted(config.model_fields_set)}
    return out
