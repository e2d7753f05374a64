"""One escalation, one answer, one true record, on the served graph (copies, cancels, new messages).

A real ``langgraph dev`` with the repository's ``langgraph.json``, an auth file (two agents,
two operators, an auditor), a real reference engine and a real webhook receiver (slow on
purpose where an answer must be in flight), driven through ``langgraph_sdk`` and raw HTTP as
the adversarial pass did (``docs/ARCHITECTURE.md``, invariants 12 and 13):

1. a copy of a waiting thread (``POST /threads/{id}/copy``) answered the other way than its
   original: one answer takes effect in both, in both orders, and the second answer's run ends
   in ``EscalationAlreadyDecided`` naming the first (the default runtime: its ledger a file
   beside ``.langgraph_api/``);
2. an operator's override in flight, its run cancelled, then a new message: the override is
   completed in the operator's name, nobody is asked again, a later decline changes nothing
   and is refused naming the override's operator (HTTP 409 before any run: nothing waits);
3. a model's delivery in flight, its run cancelled, then a new message: the unfinished step is
   finished first and its receipt recorded; and an override in flight when a new message comes
   with ``multitask_strategy="interrupt"`` (the server cancels the run itself);
4. an answer to a copy while the original's answer is being applied: refused with a message
   naming who decides (not "An internal error occurred"); a later answer there completes that
   answer and is refused too.

Every round is checked against the engine's own execution log: 0 contradicting records, 0
deliveries without a receipt in each thread that answered.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from guarantee_support import async_wait_until, figure
from langgraph_sdk.errors import ConflictError
from served_support import (
    CONFIG,
    OPERATOR_TOKENS,
    bearer,
    interrupt_value,
    langgraph_dev,
    log_shaky_decision,
    user_turn,
    write_auth_file,
)

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.serving.auth import ENV_AUTH_FILE

pytestmark = pytest.mark.timeout(900)

TOKENS = OPERATOR_TOKENS
ROUNDS = 2
APPROVE = {"decisions": [{"type": "approve", "message": "signed off"}]}
REJECT = {"decisions": [{"type": "reject", "message": "not this one"}]}


@contextmanager
def served(engine: ReferenceEngine, tmp_path: Path) -> Iterator[Any]:
    env = {
        "ALGENTA_BASE_URL": engine.url,
        "ALGENTA_OPERATOR_KEY_IS_AGENT_KEY": "1",  # the reference engine here has no keys
        "ALGENTA_PROFILE": "execute",
        "ALGENTA_MODEL": "demo",
        ENV_AUTH_FILE: str(write_auth_file(tmp_path / "auth.json", TOKENS)),
    }
    # several runs at once (as a deployment serves them), so two answers can race
    with langgraph_dev(
        CONFIG, workdir=tmp_path / "server", env=env, extra_args=("--n-jobs-per-worker", "4")
    ) as server:
        yield server


class Ledger:
    """Every thread that answered an escalation, checked against the engine's own log."""

    def __init__(self, engine: ReferenceEngine, webhook: WebhookReceiver) -> None:
        self.engine, self.webhook = engine, webhook
        self.threads: dict[str, list[str]] = {}  # decision -> threads holding its escalation
        self.rounds = self.contradicting = self.unrecorded = 0

    async def check(self, client: Any, decision: str, threads: list[str]) -> list[Any]:
        """One round: every thread's records for ``decision`` agree with the engine."""
        self.rounds += 1
        executions = self.engine.executions(decision)
        delivered = [e for e in executions if e["execution_status"] == "delivered"]
        posts = sum(1 for b in self.webhook.received if b.get("decision_id") == decision)
        answers = set()
        states = []
        for thread in threads:
            values = (await client.threads.get_state(thread))["values"]
            states.append(values)
            decided = [d for d in values["operator_decisions"] if d["decision_id"] == decision]
            answers |= {(d["operator"], d["action"], d["escalation_id"]) for d in decided}
            receipts = [r for r in values["receipts"] if r["decision_id"] == decision]
            if delivered and not receipts:
                self.unrecorded += 1
            if any(d["action"] == "decline" for d in decided) and executions:
                self.contradicting += 1
        if len(answers) > 1 or len(delivered) > 1 or posts != len(delivered):
            self.contradicting += 1
        return states


async def _escalate(client: Any, thread: str, decision: str, url: str) -> None:
    await client.runs.wait(
        thread,
        "governed_agent",
        input=user_turn(f"execute_decision decision_id={decision} webhook_url={url}"),
    )
    state = await client.threads.get_state(thread)
    assert state["next"] == ["denial_handler_confidence"], state["next"]
    assert interrupt_value(state)["escalation_id"].startswith("esc_")


async def _answer(operator: Any, owner: Any, thread: str, resume: Any) -> Any:
    """``operator`` answers on ``thread``; its owner reads the run's end.

    (An operator reads a thread while it waits for an operator, and once it decided it: an
    answer that completes another operator's, given elsewhere, leaves the thread to its owner.)
    """
    run = await operator.runs.create(thread, "governed_agent", command={"resume": resume})
    return await owner.runs.join(thread, run["run_id"])


def _told(end: Any, winner: str) -> None:
    """The run of an answer that lost ended in error naming the answer that won."""
    assert isinstance(end, dict) and "__error__" in end, end
    error = end["__error__"]
    assert error["error"] == "EscalationAlreadyDecided", error
    assert f"already decided by {winner} (" in error["message"], error


def _copy(http: httpx.Client, thread: str, token: str = "tok-alice") -> str:
    response = http.post(f"/threads/{thread}/copy", headers=bearer(token))
    assert response.status_code == 200, response.text
    return str(response.json()["thread_id"])


def _wait_raw(http: httpx.Client, thread: str, token: str, **body: Any) -> Any:
    response = http.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": "governed_agent", **body},
        headers=bearer(token),
    )
    assert response.status_code == 200, response.text
    return response.json()


async def _in_flight(engine: ReferenceEngine, decision: str) -> None:
    await async_wait_until(
        lambda: engine.executions(decision), timeout=60, what=f"{decision} in flight"
    )


async def _cancel(client: Any, thread: str, run: Any) -> None:
    await client.runs.cancel(thread, run["run_id"], wait=True, action="interrupt")


def _one(values: Any, operator: str, action: str, result: str) -> Any:
    [decided] = values["operator_decisions"]
    assert (decided["operator"], decided["action"], decided["result"]) == (
        operator,
        action,
        result,
    )
    return decided


async def test_served_copies_cancels_and_new_messages_keep_one_answer_and_a_true_record(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    from langgraph_sdk import get_client

    ledger = Ledger(engine, webhook)
    with served(engine, tmp_path) as server, httpx.Client(base_url=server.url, timeout=120) as http:
        alice: Any = get_client(url=server.url, headers=bearer("tok-alice"))
        ana: Any = get_client(url=server.url, headers=bearer("tok-ana"))
        olga: Any = get_client(url=server.url, headers=bearer("tok-olga"))
        copies = cancels = told = interrupted = 0
        for _ in range(ROUNDS):
            # 1. a copy, answered the other way: decline first in the original
            original = (await alice.threads.create())["thread_id"]
            decision = await log_shaky_decision(alice, original)
            await _escalate(alice, original, decision, webhook.url)
            copy = _copy(http, original)
            await _answer(ana, alice, original, REJECT)
            _told(await _answer(olga, alice, copy, APPROVE), "ana")
            first, second = await ledger.check(alice, decision, [original, copy])
            _one(first, "ana", "decline", "declined")
            assert _one(second, "ana", "decline", "declined")["answered_in_thread"] == original
            assert engine.executions(decision) == []
            # ...and the other order: an override in the copy first
            original = (await alice.threads.create())["thread_id"]
            decision = await log_shaky_decision(alice, original)
            await _escalate(alice, original, decision, webhook.url)
            copy = _copy(http, original)
            await _answer(olga, alice, copy, APPROVE)
            _told(await _answer(ana, alice, original, REJECT), "olga")
            first, second = await ledger.check(alice, decision, [copy, original])
            _one(first, "olga", "override", "receipt")
            assert _one(second, "olga", "override", "receipt")["answered_in_thread"] == copy
            assert [r["operator"] for r in second["receipts"]] == ["olga"]
            copies += 2

            # 4. an answer to a copy while the original's is being applied: told who decides
            original = (await alice.threads.create())["thread_id"]
            decision = await log_shaky_decision(alice, original)
            await _escalate(alice, original, decision, webhook.url_for_delay(4))
            copy = _copy(http, original)
            run = await ana.runs.create(original, "governed_agent", command={"resume": APPROVE})
            await _in_flight(engine, decision)
            refused = _wait_raw(http, copy, "tok-olga", command={"resume": REJECT})
            assert "__error__" in refused, refused.get("operator_decisions")
            error = refused["__error__"]
            assert error["error"] == "EscalationAlreadyDecided", refused
            assert "already decided by ana (override" in error["message"], error
            assert "internal error" not in error["message"]
            await ana.runs.join(original, run["run_id"])
            # the copy, entered again, completes ana's answer
            _told(await _answer(olga, alice, copy, REJECT), "ana")
            first, second = await ledger.check(alice, decision, [original, copy])
            _one(first, "ana", "override", "receipt")
            assert _one(second, "ana", "override", "receipt")["answered_in_thread"] == original
            told += 1

            # 2. an override in flight, its run cancelled, then a new message
            thread = (await alice.threads.create())["thread_id"]
            decision = await log_shaky_decision(alice, thread)
            await _escalate(alice, thread, decision, webhook.url_for_delay(3))
            run = await ana.runs.create(thread, "governed_agent", command={"resume": APPROVE})
            await _in_flight(engine, decision)
            await _cancel(alice, thread, run)
            assert (await alice.threads.get_state(thread))["next"] == ["denial_handler_confidence"]
            await alice.runs.wait(thread, "governed_agent", input=user_turn("what happened?"))
            state = await alice.threads.get_state(thread)
            assert state["next"] == [] and not state["interrupts"]  # nobody asked again
            # nothing waits: refused before any run (HTTP 409), to olga herself, naming ana
            with pytest.raises(ConflictError) as late:
                await olga.runs.create(thread, "governed_agent", command={"resume": REJECT})
            assert str(late.value).startswith("EscalationAlreadyDecided: escalation already ")
            assert "decided by ana (override" in str(late.value), late.value
            [values] = await ledger.check(alice, decision, [thread])
            _one(values, "ana", "override", "receipt")
            assert [(r["operator"], r["execution_status"]) for r in values["receipts"]] == [
                ("ana", "delivered")
            ]

            # 3. a model's delivery in flight, its run cancelled, then a new message
            thread = (await alice.threads.create())["thread_id"]
            good = await _good_decision(alice, thread)
            run = await alice.runs.create(
                thread,
                "governed_agent",
                input=user_turn(
                    f"execute_decision decision_id={good} webhook_url={webhook.url_for_delay(3)}"
                ),
            )
            await _in_flight(engine, good)
            await _cancel(alice, thread, run)
            assert (await alice.threads.get_state(thread))["next"] == ["governed_tool"]
            await alice.runs.wait(thread, "governed_agent", input=user_turn("and now?"))
            [values] = await ledger.check(alice, good, [thread])
            assert [r["decision_id"] for r in values["receipts"]] == [good]
            messages = values["messages"]
            calls = [i for i, m in enumerate(messages) if m["type"] == "ai" and m["tool_calls"]]
            assert messages[calls[-1] + 1]["type"] == "tool"  # answered before the new message
            cancels += 2

            # 2b. an override in flight, then a new message sent with
            # multitask_strategy="interrupt" (the server cancels the running run itself)
            thread = (await alice.threads.create())["thread_id"]
            decision = await log_shaky_decision(alice, thread)
            await _escalate(alice, thread, decision, webhook.url_for_delay(3))
            await ana.runs.create(thread, "governed_agent", command={"resume": APPROVE})
            await _in_flight(engine, decision)
            await alice.runs.wait(
                thread,
                "governed_agent",
                input=user_turn("anything new?"),
                multitask_strategy="interrupt",
            )
            state = await alice.threads.get_state(thread)
            assert state["next"] == [] and not state["interrupts"]  # nobody asked again
            [values] = await ledger.check(alice, decision, [thread])
            _one(values, "ana", "override", "receipt")
            interrupted += 1

    line = figure(
        "escalation_integrity",
        rounds=ledger.rounds,
        copies=copies,
        cancels=cancels,
        multitask_interrupts=interrupted,
        losers_told=told,
        contradicting_records=ledger.contradicting,
        unrecorded_deliveries=ledger.unrecorded,
    )
    assert ledger.rounds == 6 * ROUNDS and told == interrupted == ROUNDS, line
    assert ledger.contradicting == 0 and ledger.unrecorded == 0, line


async def _good_decision(client: Any, thread: str) -> str:
    await client.runs.wait(
        thread,
        "governed_agent",
        input=user_turn(
            "log_decision chosen_action=restock expected_value=40 confidence=0.95 "
            "risk_p5=0.1 risk_p95=0.5"
        ),
    )
    state = await client.threads.get_state(thread)
    return str(
        next(
            m["artifact"]["structured_content"]["decision_id"]
            for m in reversed(state["values"]["messages"])
            if m.get("type") == "tool" and m.get("name") == "log_decision"
        )
    )
