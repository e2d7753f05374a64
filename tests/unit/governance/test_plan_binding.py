"""Which plan's nonce a decision is executed under (``docs/ARCHITECTURE.md``, invariant 11):
this thread's ``plan_decision`` results, bound by plan id, or the nonce ``get_decision``
reports for the decision's own plan, never a plan the engine does not bind it to."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from algenta_graph.errors import AlgentaGraphError
from algenta_graph.nodes import arguments as executor
from algenta_graph.nodes.arguments import plan_nonce


def planned(name: str | None = "plan_decision", **body: Any) -> ToolMessage:
    return ToolMessage(json.dumps(body), tool_call_id="p", name=name)


@pytest.mark.parametrize(
    ("plan", "plan_ids", "expected"),
    [
        ({"plan_id": "p1", "nonce": "n1"}, frozenset({"p1"}), "n1"),
        ({"plan_id": "p2", "nonce": "n2"}, frozenset({"p1"}), None),  # not bound to it
        ({"plan_id": "p1", "nonce": "n1"}, frozenset(), None),  # no bound plan at all
        ({"plan_id": "p1", "nonce": "n1"}, None, None),
        ({"plan_id": "p1"}, frozenset({"p1"}), None),  # spent: no nonce reported
        ({"plan_id": "p1", "nonce": ""}, frozenset({"p1"}), None),
        ({"plan_id": "p1", "nonce": 7}, frozenset({"p1"}), None),
        (["p1", "n1"], frozenset({"p1"}), None),  # not a plan record
        ({"id": "p1", "nonce": "n1"}, frozenset({"p1"}), None),
    ],
)
def test_the_engines_nonce_counts_only_for_a_plan_the_decision_is_bound_to(
    plan: Any, plan_ids: frozenset[str] | None, expected: str | None
) -> None:
    assert executor._engine_nonce(plan, plan_ids) == expected


def test_a_threads_plan_results_give_the_nonce_of_the_bound_plan_only() -> None:
    messages = [
        AIMessage("thinking"),
        planned(plan_hash="h", plan_id="p1", nonce="n1"),
        planned(plan_hash="h", plan_id="p2", nonce="n2"),
        planned(plan_hash="other", plan_id="p3", nonce="n3"),
        planned("query_data", plan_hash="h", plan_id="p4", nonce="n4"),  # not a plan result
        planned(None, plan_hash="h", plan_id="p5", nonce="n5"),
        planned("algenta_plan_decision", plan_hash="h2", plan_id="p6", nonce="n6"),
    ]
    assert plan_nonce(messages, "h", plan_ids={"p2"}) == "n2"
    assert plan_nonce(messages, "h", plan_ids={"p1"}) == "n1"
    assert plan_nonce(messages, "other") == "n3"
    assert plan_nonce(messages, "h2") == "n6"  # a provider-prefixed name still counts
    assert plan_nonce(messages, "none") is None
    with pytest.raises(AlgentaGraphError, match=r"d7 .*p1, p2"):
        plan_nonce(messages, "h", decision_id="d7")
    with pytest.raises(AlgentaGraphError, match="the decision"):
        plan_nonce(messages, "h")


def test_results_without_a_plan_id_are_told_apart_by_their_nonce() -> None:
    two = [planned(plan_hash="h", nonce="n1"), planned(plan_hash="h", nonce="n2")]
    with pytest.raises(AlgentaGraphError, match="2 plans"):
        plan_nonce(two, "h")
    same = [planned(plan_hash="h", nonce="n1"), planned(plan_hash="h", plan_id="", nonce="n1")]
    assert plan_nonce(same, "h") == "n1"
    assert plan_nonce([planned(plan_hash="h", plan_id="p1", nonce=5)], "h") is None


class _Engine:
    """Only what ``graph_supplied`` reads of a connection."""

    def __init__(self, record: Any, supplied: frozenset[str] = frozenset({"nonce"})) -> None:
        self.record = record
        self.execute_supplied = supplied

    async def get_decision(self, decision_id: str) -> Any:
        return self.record


def supplied(record: Any, messages: list[Any] | None = None) -> dict[str, str]:
    import asyncio

    from algenta_graph.nodes.arguments import graph_supplied

    return asyncio.run(graph_supplied(_Engine(record), "d7", "t:c1", messages or []))  # type: ignore[arg-type]


def test_a_plan_proposed_over_http_is_executed_under_the_nonce_the_engine_reports() -> None:
    record = {
        "decision": {"plan_hash": "h", "plan_id": "p1"},
        "plan": {"plan_id": "p1", "nonce": "n-engine"},
    }
    assert supplied(record) == {"nonce": "n-engine"}
    # this thread's own plan result wins over the engine's report
    ours = [planned(plan_hash="h", plan_id="p1", nonce="n-thread")]
    assert supplied(record, ours) == {"nonce": "n-thread"}
    # the engine's report of another plan is never used
    other = {**record, "plan": {"plan_id": "p2", "nonce": "n-other"}}
    with pytest.raises(AlgentaGraphError, match=r"this thread of plan p1 h; call plan_decision"):
        supplied(other)


def test_without_any_nonce_the_refusal_names_the_plan_or_the_hash() -> None:
    with pytest.raises(AlgentaGraphError) as bound:
        supplied({"decision": {"plan_hash": "h", "plan_id": "p1"}})
    assert str(bound.value) == (
        "no plan_decision result in this thread of plan p1 h; call plan_decision (and have an "
        "operator approve the plan) before executing"
    )
    with pytest.raises(AlgentaGraphError) as unbound:
        supplied({"decision": {"plan_hash": "h"}})
    assert "in this thread has plan_hash h;" in str(unbound.value)
    with pytest.raises(AlgentaGraphError, match=r"\bd7\b"):
        two = [planned(plan_hash="h", nonce="n1"), planned(plan_hash="h", nonce="n2")]
        supplied({"decision": {"plan_hash": "h"}}, two)
