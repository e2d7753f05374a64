"""What an operator is shown, and the digest that binds an answer to it.

An approval is bound to what the operator saw (``docs/ARCHITECTURE.md``, "Escalation and the
operator"): the digest of an escalation item covers every field shown about the call, so an
answer given for one call (or for the same call shown differently) is refused as stale for any
other. Each test changes one shown field and checks that the digest changes; an attacker who could
change an unbound field between the question and the answer would get an approval for what the
operator never saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from governed_stub import escalated_denial, held_denial, items_of

from algenta_graph.governance.escalations import EscalationSettings
from algenta_graph.nodes.questions import (
    EscalationItem,
    escalation_request,
    request_digest,
    tool_approval,
)

SETTINGS = EscalationSettings()


def item_of(gate: str, denial: Mapping[str, Any], **kw: Any) -> EscalationItem:
    [item] = items_of(gate, [dict(denial)], kw.pop("settings", SETTINGS), **kw)
    return item


@pytest.mark.parametrize(
    "field, value",
    [
        ("decision_id", "d2"),
        ("webhook_url", "http://127.0.0.1:9/other"),
        ("timeout_seconds", 9),
        ("code", "execution_blocked_other"),
        ("message", "blocked for another reason"),
        ("override_hint", "ask someone else"),
        ("status_code", 409),
        ("tool_call_id", "c9"),
        ("escalation_id", "esc_other"),
    ],
)
def test_every_shown_field_of_an_engine_denial_is_bound_by_the_digest(
    field: str, value: Any
) -> None:
    base = escalated_denial()
    assert (
        item_of("confidence", {**base, field: value})["digest"]
        != (item_of("confidence", base)["digest"])
    )


@pytest.mark.parametrize(
    "field, value",
    [
        ("tool", "delete_account"),
        ("server", "billing"),
        ("args", {"account_id": "a2"}),
        ("args_digest", "sha256:" + "1" * 64),
        ("rule", "require_approval:crm.*"),
        ("message", "another rule held it"),
        ("tool_call_id", "h9"),
    ],
)
def test_every_shown_field_of_a_held_call_is_bound_by_the_digest(field: str, value: Any) -> None:
    base = held_denial()
    assert (
        item_of("approval", {**base, field: value})["digest"]
        != (item_of("approval", base)["digest"])
    )


def test_the_engines_policy_snapshot_binds_an_engine_denial_and_never_a_held_call() -> None:
    engine = escalated_denial()
    one = item_of("confidence", engine)
    other = items_of(
        "confidence",
        [engine],
        SETTINGS,
        policy_snapshot_id="pol_2",
    )[0]
    assert one["policy_snapshot_id"] == "pol_1" and other["digest"] != one["digest"]
    held = item_of("approval", held_denial())
    # no engine policy decides a held call: no snapshot, no engine fields, whatever is given
    assert (held["policy_snapshot_id"], held["decision_id"], held["override_hint"]) == (
        None,
        None,
        None,
    )
    assert held["webhook_url"] is None and held["override_flag"] is None
    assert (held["tool"], held["action_name"], held["args"]) == (
        "crm.delete_customer",
        "delete_customer",
        {"account_id": "a1"},
    )
    # the action is the tool's own name; without a catalog name, the tool's
    bare = item_of("approval", {**held_denial(), "catalog_name": None})
    assert bare["action_name"] == "delete_customer"
    renamed = item_of("approval", {**held_denial(), "catalog_name": "crm_delete_customer"})
    assert renamed["action_name"] == "crm_delete_customer"


def test_a_denial_naming_no_decision_can_only_be_declined() -> None:
    approve_only = EscalationSettings(allowed_decisions={"confidence": ["approve"]})
    nothing = {**escalated_denial(), "decision_id": None}
    assert item_of("confidence", nothing, settings=approve_only)["allowed_decisions"] == ["reject"]
    assert item_of("confidence", nothing)["allowed_decisions"] == ["reject", "respond"]
    assert item_of("confidence", escalated_denial())["allowed_decisions"] == [
        "approve",
        "edit",
        "reject",
        "respond",
    ]


def test_the_description_says_what_an_approval_does_and_the_deadline_only_when_there_is_one() -> (
    None
):
    engine = item_of("confidence", escalated_denial())
    [request] = escalation_request("confidence", [engine])["action_requests"]
    assert request["description"] == (
        "The confidence gate denied decision d1 (execution_blocked_confidence): blocked by "
        "confidence. Approve to execute it anyway with override_safety=true; reject to keep it "
        "blocked."
    )
    late = items_of(
        "confidence", [escalated_denial()], SETTINGS, expires=lambda d: "2030-01-01T04:00:00Z"
    )[0]
    assert tool_approval(late)["description"].endswith(
        "reject to keep it blocked. It expires at 2030-01-01T04:00:00Z."
    )
    held = tool_approval(item_of("approval", held_denial()))
    assert held["description"] == (
        "The approval gate held the call of crm.delete_customer (approval_required): an operator "
        "must approve crm.delete_customer. Approve to run it once as shown; edit to run it with "
        "other arguments; reject to keep it from running."
    )
    assert (held["name"], held["tool_call_id"]) == ("delete_customer", "h1")


def test_the_batched_request_repeats_its_first_item_but_binds_the_whole_request() -> None:
    two = items_of("confidence", [escalated_denial("c1"), escalated_denial("c2", "d2")], SETTINGS)
    request = escalation_request("confidence", two)
    shared = set(two[0]) - {"digest"}
    # TypedDicts, read here by computed keys
    fields: Mapping[str, object] = request
    first: Mapping[str, object] = two[0]
    assert {k: fields[k] for k in shared} == {k: first[k] for k in shared}
    assert request["digest"] == request_digest(two) != two[0]["digest"]
    assert request["escalations"] == two and len(request["action_requests"]) == 2
    held = item_of("approval", held_denial())
    asked = escalation_request("approval", [held])
    assert (asked["tool"], asked["action_name"], asked["args_digest"]) == (
        "crm.delete_customer",
        "delete_customer",
        held["args_digest"],
    )
    assert asked["digest"] == held["digest"]  # a request of one is bound by its one item
    asked["args"]["account_id"] = "changed"  # the request's copy, not the item's
    assert held["args"] == {"account_id": "a1"}
