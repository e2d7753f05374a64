"""What a run may change, and how far (``docs/ARCHITECTURE.md``, invariant 9)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel

from algenta_graph.governance.contract import Profile, resolve_profile
from algenta_graph.governance.gates import DEFAULT_POLICIES
from algenta_graph.governance.run_settings import resolve_run_settings


def resolve(config: Any = None, context: Any = None, **kw: Any) -> Any:
    kw.setdefault("top_k", 5)
    kw.setdefault("policies", dict(DEFAULT_POLICIES))
    return resolve_run_settings(config, context, **kw)


def test_nothing_requested_keeps_the_graphs_settings() -> None:
    configs: tuple[Any, ...] = (None, {}, {"configurable": None}, {"configurable": {}})
    for config in configs:
        run = resolve(config)
        assert run.profile is None and run.top_k == 5 and run.thread_id is None
        assert dict(run.policies) == dict(DEFAULT_POLICIES)


def test_the_thread_id_is_read_as_a_string() -> None:
    assert resolve({"configurable": {"thread_id": 7}}).thread_id == "7"
    assert resolve({"configurable": {"thread_id": ""}}).thread_id is None


@pytest.mark.parametrize("where", ["configurable", "context"])
def test_a_profile_top_k_and_stricter_policy_from_either_source(where: str) -> None:
    request = {"profile": "observe", "top_k": 2, "on_denial": {"confidence": "halt"}}
    config = {"configurable": request} if where == "configurable" else None
    context = request if where == "context" else None
    run = resolve(config, context)
    assert run.profile is not None and run.profile.name == "observe"
    assert run.top_k == 2
    assert run.policies["confidence"] == "halt"
    assert run.policies["risk_floor"] == "escalate"


@pytest.mark.parametrize("where", ["configurable", "context"])
def test_a_looser_policy_is_refused_naming_where_and_the_gate(where: str) -> None:
    request = {"on_denial": {"confidence": "report"}}
    config = {"configurable": request} if where == "configurable" else None
    context = request if where == "context" else None
    with pytest.raises(ValueError, match=rf"^{where}\['on_denial'\]\['confidence'\]"):
        resolve(config, context)


@pytest.mark.parametrize("where", ["configurable", "context"])
def test_a_bad_policy_is_named_with_where_it_came_from(where: str) -> None:
    request = {"on_denial": {"confidence": "stop"}}
    config = {"configurable": request} if where == "configurable" else None
    context = request if where == "context" else None
    with pytest.raises(ValueError, match=rf"^{where}\['on_denial'\]\['confidence'\]: unknown"):
        resolve(config, context)


def test_the_context_tightens_on_top_of_the_configurable() -> None:
    run = resolve(
        {"configurable": {"on_denial": {"confidence": "escalate"}}},
        {"on_denial": {"confidence": "halt"}},
    )
    assert run.policies["confidence"] == "halt"
    with pytest.raises(ValueError, match=r"^context\['on_denial'\]\['confidence'\]"):
        resolve({"configurable": {"on_denial": "halt"}}, {"on_denial": {"confidence": "escalate"}})


@pytest.mark.parametrize("bad", [0, -1, True, False, "3", 2.0])
def test_top_k_must_be_an_int_of_at_least_one(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"^configurable\['top_k'\] must be an int >= 1, got"):
        resolve({"configurable": {"top_k": bad}})
    with pytest.raises(ValueError, match=r"^context\['top_k'\]"):
        resolve(None, {"top_k": bad})


def test_top_k_one_is_allowed_and_none_means_unset() -> None:
    assert resolve({"configurable": {"top_k": 1}}).top_k == 1
    assert resolve({"configurable": {"top_k": None}}).top_k == 5


def test_two_profiles_narrow_together_and_never_widen() -> None:
    narrow = resolve({"configurable": {"profile": "execute"}}, {"profile": "observe"})
    assert narrow.profile is not None and narrow.profile.name == "observe"
    # the wider second request keeps the narrower first one
    kept = resolve({"configurable": {"profile": "observe"}}, {"profile": "execute"})
    assert kept.profile is not None and kept.profile.name == "observe"
    full = resolve({"configurable": {"profile": "full"}}, {"profile": "govern"})
    assert full.profile is not None and full.profile.name == "govern"
    kept_full = resolve({"configurable": {"profile": "govern"}}, {"profile": "full"})
    assert kept_full.profile is not None and kept_full.profile.name == "govern"


def test_conflicting_profiles_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The contract's profiles are nested; two that are not (an app's own) cannot both hold."""
    import algenta_graph.governance.run_settings as run_settings

    own = {
        "a": Profile("a", frozenset({"query_data", "simulate"})),
        "b": Profile("b", frozenset({"query_data", "recommend"})),
    }
    own["a2"] = Profile("a2", own["a"].tools)
    monkeypatch.setattr(run_settings, "resolve_profile", own.__getitem__)
    # the same tools under another name: the later request's name is the run's
    same = resolve({"configurable": {"profile": "a"}}, {"profile": "a2"})
    assert same.profile is not None and same.profile.name == "a2"
    with pytest.raises(ValueError, match=r"^context\['profile'\] 'b' conflicts with .* 'a'$"):
        resolve({"configurable": {"profile": "a"}}, {"profile": "b"})


def test_a_profile_must_be_a_name() -> None:
    with pytest.raises(ValueError, match=r"^configurable\['profile'\] must be a profile name"):
        resolve({"configurable": {"profile": ["observe"]}})
    with pytest.raises(ValueError, match="unknown Algenta tool profile"):
        resolve({"configurable": {"profile": "nope"}})
    assert resolve({"configurable": {"profile": ""}}).profile is None


class PydanticContext(BaseModel):
    profile: str | None = None
    top_k: int | None = None
    on_denial: Any = None


@dataclass
class DataclassContext:
    profile: str | None = None
    top_k: int | None = None
    on_denial: Any = None


@pytest.mark.parametrize("kind", [PydanticContext, DataclassContext])
def test_a_typed_context_is_read_and_its_unset_fields_ignored(kind: Any) -> None:
    run = resolve(None, kind(top_k=3))
    assert run.top_k == 3 and run.profile is None
    run = resolve(None, kind(profile="govern", on_denial="halt"))
    assert run.profile == resolve_profile("govern")
    assert set(run.policies.values()) == {"halt"}


def test_a_context_of_another_type_is_ignored() -> None:
    assert resolve(None, 42).top_k == 5
    assert resolve(None, "profile").profile is None
    assert resolve(None, {}).top_k == 5
