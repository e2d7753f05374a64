"""Two-person approval on the served graph: ``langgraph dev`` with ``[escalation] quorum =
{confidence = 2}``, a tokens file (an agent, two operators, and a second token of one of them),
a real reference engine and webhook receiver, driven through ``langgraph_sdk`` and the inbox in
headless Chromium (``docs/ARCHITECTURE.md``, "Two-person approval").

One approval runs nothing and the thread asks again ("1 of 2 approvals: ana", also on the
inbox's escalation page); ana's second token is refused naming ana (the identity counts, not the
token); bo's approval runs the decision once; a reject after one approval runs nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from browser_support import chromium, sign_in, text_of, wait_for
from guarantee_support import figure
from inbox_support import served
from served_support import bearer, escalate, interrupt_value, write_auth_file

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.serving.auth import ENV_AUTH_FILE

pytestmark = pytest.mark.timeout(900)

TOKENS: dict[str, tuple[str, list[str]]] = {
    "tok-alice": ("alice", ["agent"]),
    "tok-ana": ("ana", ["operator"]),
    "tok-ana-laptop": ("ana", ["operator"]),  # a second token of the same identity
    "tok-bo": ("bo", ["operator"]),
}
QUORUM = "[escalation]\nquorum = {confidence = 2}\n"
APPROVE = {"decisions": [{"type": "approve", "message": "signed off"}]}
REJECT = {"decisions": [{"type": "reject", "message": "not this one"}]}


async def _answer(operator: Any, owner: Any, thread: str, resume: Any) -> Any:
    """``operator`` answers on ``thread``; its owner reads the run's end."""
    run = await operator.runs.create(thread, "governed_agent", command={"resume": resume})
    return await owner.runs.join(thread, run["run_id"])


def _description(asked: dict[str, Any]) -> str:
    return str(asked["action_requests"][0]["description"])


async def test_served_two_person_approval_counts_identities_and_runs_once(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    from langgraph_sdk import get_client

    auth = write_auth_file(tmp_path / "quorum-auth.json", TOKENS)
    assert ENV_AUTH_FILE == "ALGENTA_AUTH_FILE"  # this test's tokens file replaces the inbox's
    with served(engine, tmp_path, QUORUM, ALGENTA_AUTH_FILE=str(auth)) as (server, _):
        base = server.url
        alice: Any = get_client(url=base, headers=bearer("tok-alice"))
        ana: Any = get_client(url=base, headers=bearer("tok-ana"))
        ana_laptop: Any = get_client(url=base, headers=bearer("tok-ana-laptop"))
        bo: Any = get_client(url=base, headers=bearer("tok-bo"))

        thread, decision, asked = await escalate(alice, webhook.url)
        assert (asked["quorum"], asked["approvals"]) == (2, [])
        assert "edit" not in asked["allowed_decisions"]

        # ana approves: nothing runs, the thread asks again saying who approved
        await _answer(ana, alice, thread, APPROVE)
        state = await alice.threads.get_state(thread)
        assert state["next"] == ["denial_handler_confidence"], state["next"]
        again = interrupt_value(state)
        assert again["approvals"] == ["ana"] and again["digest"] == asked["digest"]
        assert "1 of 2 approvals: ana" in _description(again)
        single_ran = len(engine.executions(decision))
        assert single_ran == 0 and webhook.received == []

        # the inbox's escalation page says how far the approvals came
        with chromium(tmp_path / "chrome-bo") as page:
            sign_in(page, base, "tok-bo")
            wait_for(page, lambda d: "/inbox/queue" in d.current_url)
            page.get(f"{base}/inbox/escalations/{thread}/{asked['escalation_id']}")
            wait_for(page, lambda d: d.find_elements("id", "does-0-approve"))
            shown = text_of(page, "does-0-approve")
            assert "1 of 2 approvals: ana" in shown, shown

        # ana's second token: refused naming ana (the identity counts, not the token)
        end = await _answer(ana_laptop, alice, thread, APPROVE)
        assert isinstance(end, dict) and "__error__" in end, end
        assert "operator 'ana' already approved" in end["__error__"]["message"], end
        waiting = interrupt_value(await alice.threads.get_state(thread))
        second_token_counted = len(waiting["approvals"]) - 1
        assert waiting["approvals"] == ["ana"] and engine.executions(decision) == []

        # bo completes the quorum: the decision runs once, recorded with both approvers
        done = await _answer(bo, alice, thread, APPROVE)
        assert "__error__" not in done, done
        values = (await alice.threads.get_state(thread))["values"]
        [record] = values["operator_decisions"]
        assert (record["operator"], record["result"], record["approvers"]) == (
            "bo",
            "receipt",
            ["ana", "bo"],
        )
        executions = len(engine.executions(decision))
        assert executions == 1 and len(webhook.received) == 1

        # a reject after one approval ends it: nothing runs
        other, refused_decision, _ = await escalate(alice, webhook.url)
        await _answer(ana, alice, other, APPROVE)
        await _answer(bo, alice, other, REJECT)
        [declined] = (await alice.threads.get_state(other))["values"]["operator_decisions"]
        assert (declined["operator"], declined["action"], declined["approvers"]) == (
            "bo",
            "decline",
            ["ana"],
        )
        rejected_ran = len(engine.executions(refused_decision))
        assert rejected_ran == 0 and len(webhook.received) == 1

    figure(
        "quorum_served",
        approvals_needed=2,
        single_approval_ran=single_ran,
        second_token_counted=second_token_counted,
        rejected_after_one_ran=rejected_ran,
        executions_after_two=executions,
    )
