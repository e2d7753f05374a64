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
from typing import Annotated, Any

from langchain_core.runnables import RunnableConfig
from pydantic import Field
from typing_extensions import TypedDict

from algenta_graph.governance.contract import PROFILE_NAMES, Profile, resolve_profile
from algenta_graph.governance.gates import GateName, Policy, parse_on_denial, tighten

__all__ = ["GraphSettings", "RunContext", "RunSettings", "resolve_run_settings", "run_settings"]


class RunContext(TypedDict, total=False):
    """Per-run settings of the governed agent (the graph's ``context_schema``).

    Every one is optional, and each may only tighten what the graph was built or served with.

    Studio shows a form for it, and ``langgraph_sdk`` clients pass it as ``context={...}``;
    nodes read it from their ``Runtime``. The same keys in ``config["configurable"]`` are read
    too (the LangGraph server mirrors a run's context there).
    """

    profile: Annotated[
        str,
        Field(
            description="Narrow the tool profile for this run (never wider than the graph's).",
            json_schema_extra={"enum": list(PROFILE_NAMES)},
        ),
    ]
    """A narrower tool profile for this run."""
    top_k: Annotated[int, Field(ge=1, description="How many tools retrieval binds this run.")]
    """How many tools retrieval binds this run."""
    on_denial: Annotated[
        dict[GateName, Policy] | Policy,
        Field(
            description=(
                "Denial policy per gate for this run (or one policy for every gate); each may "
                "only be stricter than the graph's (report < escalate < halt)."
            )
        ),
    ]
    """A stricter denial policy per gate (or one for every gate)."""


@dataclass(frozen=True)
class GraphSettings:
    """What the graph was built (or served) with: the ceiling of every run's settings."""

    top_k: int
    """How many tools retrieval binds by default."""
    policies: Mapping[str, Policy]
    """The denial policy per gate."""


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
    """The run's settings: the graph's ``top_k`` and ``policies``, tightened by the run's.

    Args:
        config: the run's config; its ``configurable`` is read.
        context: the run's context: a mapping, a pydantic model or a dataclass (anything else
            is ignored).
        top_k: the graph's ``top_k``.
        policies: the graph's denial policy per gate.

    Raises:
        ValueError: a malformed request, a looser ``on_denial`` policy, or two conflicting
            profiles; the message names where it came from.
    """
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


def run_settings(config: RunnableConfig | None, runtime: Any, built: GraphSettings) -> RunSettings:
    """The settings in force for this run: ``built``, tightened by the run's, never loosened.

    The run's requests are read from its ``config`` and its ``runtime.context``
    (:class:`RunContext`); see :func:`resolve_run_settings`.
    """
    context = getattr(runtime, "context", None) if runtime is not None else None
    return resolve_run_settings(config, context, top_k=built.top_k, policies=built.policies)


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
