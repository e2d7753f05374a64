"""What one run may change, and how far: a narrower profile, stricter policies, a smaller top-K.

A graph is built (or served) with a profile, a ``top_k`` and a denial policy per gate. A run may
ask for different values through ``config["configurable"]`` (what ``langgraph_sdk``'s
``config=`` and Studio's assistant configuration set) or through the run's ``context`` (what
``context=`` sets; the server also mirrors it into ``configurable``). Both are read, and each may
only **tighten** what the graph was built with (``docs/ARCHITECTURE.md``, invariant 9):

- ``profile``: narrows the catalog the run sees and calls, never widens it;
- ``on_denial``: a policy per gate (or one policy for every gate), each at least as strict as
  the graph's (``report`` < ``escalate`` < ``halt``); a looser one raises ``ValueError`` naming
  the gate, never silently ignored;
- ``top_k``: an int >= 1.

Example::

    await graph.ainvoke(inputs, {"configurable": {"thread_id": "t1",
                                                 "on_denial": {"confidence": "halt"}}})
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig

from algenta_graph.contract import Profile, resolve_profile
from algenta_graph.gates import Policy, parse_on_denial, tighten

__all__ = ["RunSettings", "resolve_run_settings"]


@dataclass(frozen=True)
class RunSettings:
    """The settings in force for one run (the graph's, tightened by the run's requests)."""

    profile: Profile | None
    top_k: int
    policies: Mapping[str, Policy]
    thread_id: str | None


def _check_top_k(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where} must be an int >= 1, got {value!r}")
    return value


def resolve_run_settings(
    config: RunnableConfig | None,
    context: Any,
    *,
    top_k: int,
    policies: Mapping[str, Policy],
) -> RunSettings:
    """The run's settings: the graph's ``top_k``/``policies`` tightened by ``config`` and
    ``context`` (a mapping, a pydantic model or a dataclass; anything else is ignored)."""
    conf: Mapping[str, Any] = (config or {}).get("configurable") or {}
    sources: list[tuple[str, Mapping[str, Any]]] = [("configurable", conf)]
    ctx = _as_mapping(context)
    if ctx:
        sources.append(("context", ctx))
    profile: Profile | None = None
    resolved = dict(policies)
    for where, source in sources:
        name = source.get("profile")
        if name:
            if not isinstance(name, str):
                raise ValueError(f"{where}['profile'] must be a profile name, got {name!r}")
            candidate = resolve_profile(name)
            # two requests narrow together: the run sees what both allow
            if profile is None or _within(candidate, profile):
                profile = candidate
            elif not _within(profile, candidate):
                raise ValueError(
                    f"{where}['profile'] {name!r} conflicts with the run's profile {profile.name!r}"
                )
        if source.get("top_k") is not None:
            top_k = _check_top_k(source["top_k"], f"{where}['top_k']")
        requested = parse_on_denial(source.get("on_denial"), f"{where}['on_denial']")
        resolved = tighten(resolved, requested, f"{where}['on_denial']")
    thread = conf.get("thread_id")
    return RunSettings(profile, top_k, resolved, str(thread) if thread else None)


def _within(inner: Profile, outer: Profile) -> bool:
    return outer.tools is None or (inner.tools is not None and inner.tools <= outer.tools)


def _as_mapping(context: Any) -> Mapping[str, Any]:
    if context is None:
        return {}
    if isinstance(context, Mapping):
        return context
    dump = getattr(context, "model_dump", None)
    if callable(dump):
        return dict(dump(exclude_none=True))
    fields = getattr(context, "__dataclass_fields__", None)
    if fields:
        return {k: getattr(context, k) for k in fields if getattr(context, k) is not None}
    return {}
