"""Every escalation and gated-call guarantee, on every deployment shape (``deployment_shapes``).

One set of scenarios, written once against two workers, run on each shape: ``langgraph dev``
in memory, ``langgraph dev`` with the server checkpointer on SQLite, two ``langgraph dev``
workers on one PostgreSQL, and the library on a saver of a class the project does not know (a
subclass, a wrapper). Each attacks what a deployment shares between its workers, which is
where the guarantees failed open (``docs/ARCHITECTURE.md``, invariants 12, 17 and 18):

- **a copy answered both ways**: a thread waiting on an engine escalation is copied; one
  operator rejects in one, another approves in the other, in both orders;
- **a cancelled override**: an approved override in flight, its run cancelled, then a new
  message, then a late second answer;
- **a cancelled budgeted call**: ``crm.refund`` (one per thread) in flight at the CRM, its run
  cancelled, then the same request again on the second worker;
- **a held call approved twice**: a held ``crm.delete_customer`` approved on the original and on
  a copy (on the other worker), in both orders;
- **two operators racing**: an approval and a rejection of one escalation sent at once, one on
  each worker;
- **every served loser told, nobody else reading** (served shapes): a rejection sent through
  each SDK call (``runs.wait``, ``runs.create`` + ``runs.join``, ``runs.stream``) while an
  approval is applied, and again once it is decided, each told who decided; an operator of
  another gate, an agent and an operator who never answered cannot answer it nor read the
  thread, and nobody can forge the metadata that would let them.

The proof is what really happened outside the graph: the engine's execution log, the webhook's
POSTs and the CRM's own count of each call. Each scenario prints one ``FIGURE`` line per shape
(rounds, contradicting records, duplicate executions, budget overruns, losers and losers told)
and asserts the zeros, every loser told who decided, and every record where it belongs.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from deployment_shapes import (
    REFUND_LIMIT,
    SDK_CALLS,
    SHAPES,
    Deployment,
    LibrarySpec,
    Outcome,
    Parts,
    ServedSpec,
    ServedWorker,
    Tally,
    Worker,
    served_shape,
)
from guarantee_support import async_wait_until, figure
from postgres_support import postgres_server  # noqa: F401
from served_support import bearer, user_turn

from algenta_graph.governance.visibility import answered_key

pytestmark = pytest.mark.timeout(900)

APPROVE = {"decisions": [{"type": "approve", "message": "signed off"}]}
REJECT = {"decisions": [{"type": "reject", "message": "not this one"}]}
SHAKY = (
    "log_decision chosen_action=raise_price expected_value=40 confidence=0.3 "
    "risk_p5=-0.1 risk_p95=0.5"
)
"""A decision the engine's confidence gate denies: executing it waits for an operator."""
SETTLED = frozenset({"delivered", "failed", "recorded"})


def ledger_options(database: Path) -> dict[str, Any]:
    """What a library worker is given to share one ledger: the SQLite file of its checkpoints."""
    return {"ledger": str(database)}


@pytest.fixture(scope="module", params=SHAPES)
def shape(request: pytest.FixtureRequest, parts: Parts) -> Iterator[ServedSpec | LibrarySpec]:
    """One shape, started once for every scenario (one shape at a time)."""
    name: str = request.param
    if name.startswith("library-"):
        checkpoints = parts.root / f"{name}.sqlite"
        yield LibrarySpec(name, checkpoints, parts, ledger_options(checkpoints))
        return
    database: str | None = None  # the in-memory runtime's own
    if name == "served-sqlite":
        database = str(parts.root / "served.sqlite")
    elif name == "served-postgres":
        database = request.getfixturevalue("postgres_server").create_database()
    with served_shape(name, parts, database) as spec:
        yield spec


# ---------------------------------------------------------------------------------- steps


def _decision_of(values: dict[str, Any]) -> str:
    return str(
        next(
            m["artifact"]["structured_content"]["decision_id"]
            for m in reversed(values["messages"])
            if m.get("type") == "tool" and m.get("name") == "log_decision"
        )
    )


async def _escalate(dep: Deployment, worker: Worker, thread: str, webhook: str) -> tuple[str, str]:
    """Log a decision the confidence gate denies and execute it: (decision, escalation id)."""
    logged = await worker.turn(thread, SHAKY)
    assert logged.error is None, logged
    decision = _decision_of(await dep.values(thread))
    sent = await worker.turn(
        thread, f"execute_decision decision_id={decision} webhook_url={webhook}"
    )
    assert sent.error is None, sent
    [asked] = await dep.waiting(thread)
    assert asked["gate"] == "confidence", asked
    return decision, str(asked["escalation_id"])


async def _hold(dep: Deployment, worker: Worker, thread: str, account: str) -> str:
    """Ask to delete ``account``: the approval gate holds it; its escalation id."""
    held = await worker.turn(thread, f"delete_customer account_id={account} reason=asked")
    assert held.error is None, held
    [asked] = await dep.waiting(thread)
    assert asked["gate"] == "approval", asked
    return str(asked["escalation_id"])


def _account() -> str:
    """A new CRM account: each round's calls are counted by theirs."""
    return f"acct-{uuid.uuid4().hex[:10]}"


def _decided(values: dict[str, Any], escalation: str) -> list[dict[str, Any]]:
    return [
        d for d in values.get("operator_decisions") or [] if d.get("escalation_id") == escalation
    ]


async def _ever_decided(dep: Deployment, thread: str, escalation: str) -> list[dict[str, Any]]:
    """Every decision of ``escalation`` any checkpoint of ``thread`` holds (a fork's too)."""
    return [d for values in await dep.history(thread) for d in _decided(values, escalation)]


async def _settled(parts: Parts, decision: str) -> list[dict[str, Any]]:
    """The engine's executions of ``decision`` once none is still being delivered."""

    def done() -> bool:
        return all(e["execution_status"] in SETTLED for e in parts.engine.executions(decision))

    await async_wait_until(done, timeout=60, what=f"the executions of {decision} to settle")
    return parts.engine.executions(decision)


async def _judge_engine(
    tally: Tally,
    parts: Parts,
    dep: Deployment,
    decision: str,
    escalation: str,
    threads: list[str],
    winner: tuple[str, str, str],
) -> None:
    """One round of an engine escalation against the engine's log and the webhook's POSTs.

    ``winner``: (operator, action, thread) of the answer that must take effect. Every record of
    the escalation in ``threads`` must be that answer's; the engine must have executed the
    decision once if it was an override and never if a decline; one POST per delivery.
    """
    operator, action, where = winner
    executions = await _settled(parts, decision)
    delivered = [e for e in executions if e["execution_status"] == "delivered"]
    posts = sum(
        1
        for b in parts.webhook.received
        if isinstance(b, dict) and b.get("decision_id") == decision
    )
    tally.duplicates += max(0, len(delivered) - 1) + max(0, posts - 1)
    recorded: set[tuple[str, str]] = set()
    for thread in threads:
        values = await dep.values(thread)
        found = {(d["operator"], d["action"]) for d in _decided(values, escalation)}
        recorded |= {
            (d["operator"], d["action"]) for d in await _ever_decided(dep, thread, escalation)
        }
        if thread == where:
            if (operator, action) not in found:
                tally.problem(f"{where} does not record {operator}'s {action}: {found}")
            receipts = [r for r in values.get("receipts") or [] if r["decision_id"] == decision]
            if action == "override" and delivered and not receipts:
                tally.problem(f"a delivery without a receipt in {where}")
    expected = 1 if action == "override" else 0
    if (
        recorded - {(operator, action)}
        or len(delivered) != expected
        or len(executions) > expected
        or posts != len(delivered)
    ):
        tally.contradicting += 1
        tally.problem(
            f"records {sorted(recorded)} against {len(executions)} executions "
            f"({len(delivered)} delivered) and {posts} POSTs; {operator}'s {action} took effect?"
        )


# ---------------------------------------------------------------------------------- scenarios


async def test_a_copy_answered_both_ways_takes_one_answer_and_tells_the_other(
    shape: ServedSpec | LibrarySpec, parts: Parts
) -> None:
    tally = Tally("copy_answered_both_ways", shape.shape)
    async with shape.open() as dep:
        first, second = dep.workers
        for copy_first in (False, True):
            tally.rounds += 1
            thread = await first.new_thread()
            decision, escalation = await _escalate(dep, first, thread, parts.webhook.url)
            copy = await dep.copy(thread)
            if copy_first:
                won = await second.answer(copy, "olga", APPROVE)
                lost = await first.answer(thread, "ana", REJECT)
                winner, loser = ("olga", "override", copy), "ana"
            else:
                won = await first.answer(thread, "ana", REJECT)
                lost = await second.answer(copy, "olga", APPROVE)
                winner, loser = ("ana", "decline", thread), "olga"
            if won.error is not None:
                tally.problem(f"the first answer failed: {won.error}")
            tally.loser(lost, winner[0], loser)
            await _judge_engine(tally, parts, dep, decision, escalation, [thread, copy], winner)
    tally.check()


async def test_a_cancelled_override_then_a_new_message_completes_it_once(
    shape: ServedSpec | LibrarySpec, parts: Parts
) -> None:
    tally = Tally("cancelled_override", shape.shape)
    async with shape.open() as dep:
        first, second = dep.workers
        for _ in range(2):
            tally.rounds += 1
            thread = await first.new_thread()
            slow = parts.webhook.url_for_delay(3)
            decision, escalation = await _escalate(dep, first, thread, slow)
            run = await first.start_answer(thread, "ana", APPROVE)
            await async_wait_until(
                partial(parts.engine.executions, decision), timeout=120, what="the override"
            )
            await first.cancel(run)
            after = await first.turn(thread, "what happened?")
            if after.error is not None:
                tally.problem(f"the new message failed: {after.error}")
            if await dep.waiting(thread):
                tally.problem("an operator was asked again after the cancel")
            late = await second.answer(thread, "olga", REJECT)
            tally.loser(late, "ana", "olga")
            winner = ("ana", "override", thread)
            await _judge_engine(tally, parts, dep, decision, escalation, [thread], winner)
    tally.check()


async def test_a_cancelled_budgeted_call_is_never_sent_again_and_counts_against_its_budget(
    shape: ServedSpec | LibrarySpec, parts: Parts
) -> None:
    tally = Tally("cancelled_budgeted_call", shape.shape)
    crm = parts.crm
    async with shape.open() as dep:
        first, second = dep.workers
        for _ in range(2):
            tally.rounds += 1
            account = _account()
            ask = f"refund account_id={account} amount=5"
            thread = await first.new_thread()
            crm.hold("refund")
            run = await first.start_turn(thread, ask)
            await async_wait_until(
                lambda: crm.entered("refund"), timeout=120, what="the refund at the CRM"
            )
            await first.cancel(run)
            crm.release("refund")
            again = await second.turn(thread, ask)  # the same request, on the other worker
            if again.error is not None:
                tally.problem(f"the new message failed: {again.error}")
            refunds = crm.count("refund", account)
            tally.duplicates += max(0, refunds - 1)
            tally.overruns += max(0, refunds - REFUND_LIMIT)
            values = await dep.values(thread)
            cut = next(
                c["id"]
                for m in values["messages"]
                if m.get("type") == "ai"
                for c in m.get("tool_calls") or []
                if c["name"] == "refund"
            )  # the first refund the model asked for: the one cut off
            counted = [r for r in values.get("tool_calls") or [] if r.get("tool_call_id") == cut]
            if not counted:
                tally.problem(f"the cancelled refund {cut} is not recorded against the budget")
            elif refunds and counted[0].get("result") not in ("unknown", "executed"):
                # it reached the CRM: only "it may have run" or "it ran" is true of it
                tally.problem(f"the cancelled refund is recorded {counted[0].get('result')!r}")
            if not any(
                m.get("type") == "tool" and m.get("tool_call_id") == cut for m in values["messages"]
            ):
                tally.problem(f"the cancelled refund {cut} has no answer in the thread")
            budget = [d for d in values.get("denials") or [] if d.get("gate") == "budget"]
            if not budget:
                tally.problem("the second refund was not denied by the budget")
    tally.check()


async def test_a_held_call_approved_on_the_original_and_a_copy_runs_once(
    shape: ServedSpec | LibrarySpec, parts: Parts
) -> None:
    tally = Tally("held_call_original_and_copy", shape.shape)
    crm = parts.crm
    async with shape.open() as dep:
        first, second = dep.workers
        for copy_first in (False, True):
            tally.rounds += 1
            account = _account()
            thread = await first.new_thread()
            escalation = await _hold(dep, first, thread, account)
            copy = await dep.copy(thread)
            answers = [(first, thread, "ana"), (second, copy, "olga")]
            if copy_first:
                answers.reverse()
            outcomes: list[Outcome] = []
            for worker, where, operator in answers:
                outcomes.append(await worker.answer(where, operator, APPROVE))
            (_, where, winner), (_, _, loser) = answers
            if outcomes[0].error is not None:
                tally.problem(f"the first approval failed: {outcomes[0].error}")
            tally.loser(outcomes[1], winner, loser)
            runs = crm.count("delete_customer", account)
            tally.duplicates += max(0, runs - 1)
            if runs != 1:
                tally.problem(f"the approved delete ran {runs} times at the CRM")
            operators: set[str] = set()
            for one in (thread, copy):
                decided = _decided(await dep.values(one), escalation)
                operators |= {d["operator"] for d in await _ever_decided(dep, one, escalation)}
                if one == where and not any(d["result"] == "executed" for d in decided):
                    tally.problem(f"{where} does not record the delete {winner} approved")
            if operators - {winner}:
                tally.contradicting += 1
                tally.problem(f"the delete is recorded as approved by {sorted(operators)}")
    tally.check()


async def test_two_operators_racing_one_answer_takes_effect_and_the_other_is_told(
    shape: ServedSpec | LibrarySpec, parts: Parts
) -> None:
    tally = Tally("operators_racing", shape.shape)
    async with shape.open() as dep:
        first, second = dep.workers
        for approver, rejecter in (("ana", "olga"), ("olga", "ana")):
            tally.rounds += 1
            thread = await first.new_thread()
            slow = parts.webhook.url_for_delay(2)
            decision, escalation = await _escalate(dep, first, thread, slow)
            approved, rejected = await asyncio.gather(
                first.answer(thread, approver, APPROVE), second.answer(thread, rejecter, REJECT)
            )
            answers = {approver: approved, rejecter: rejected}
            if await _settled(parts, decision):  # executed: the approval won
                (operator, action), loser = (approver, "override"), rejecter
            else:
                (operator, action), loser = (rejecter, "decline"), approver
            if answers[operator].error is not None:
                tally.problem(f"the winning answer failed: {answers[operator].error}")
            tally.loser(answers[loser], operator, loser)
            winner = (operator, action, thread)
            await _judge_engine(tally, parts, dep, decision, escalation, [thread], winner)
    tally.check()


async def test_every_served_loser_is_told_by_every_sdk_call_and_nobody_else_reads_the_thread(
    shape: ServedSpec | LibrarySpec, parts: Parts
) -> None:
    if not isinstance(shape, ServedSpec):
        pytest.skip("the served API's callers (the library raises to its caller: above)")
    tally = Tally("served_losers_by_sdk_call", shape.shape)
    strangers = ("rita", "bob", "vera")  # another gate's operator, an agent, one who never tried
    leaks: list[str] = []
    forged = 0
    async with shape.open() as dep:
        first, second = dep.workers
        assert isinstance(first, ServedWorker) and isinstance(second, ServedWorker)
        tally.rounds += 1
        thread = await first.new_thread()
        slow = parts.webhook.url_for_delay(3)
        decision, escalation = await _escalate(dep, first, thread, slow)
        # an agent may not answer (403); an operator of another gate's answer is refused by the
        # graph (its run's error, which the owner reads): neither changes anything
        refused = await second.sdk_answer("bob", thread, APPROVE, "wait")
        if refused.error is None or "403" not in refused.error:
            tally.problem(f"bob's answer was not refused with 403: {refused}")
        await second.sdk_answer("rita", thread, APPROVE, "wait")
        if [a["escalation_id"] for a in await dep.waiting(thread)] != [escalation]:
            tally.problem("an answer by an agent or another gate's operator changed the thread")
        # olga rejects through every SDK call while ana's approval is being applied...
        run = await first.start_answer(thread, "ana", APPROVE)
        await async_wait_until(
            partial(parts.engine.executions, decision), timeout=120, what="ana's override"
        )
        racing = await asyncio.gather(
            *(second.sdk_answer("olga", thread, REJECT, call) for call in SDK_CALLS)
        )
        await first.clients["alice"].runs.join(thread, run.run_id)
        # ...and once more through each, after it is decided
        late = [await second.sdk_answer("olga", thread, REJECT, call) for call in SDK_CALLS]
        for call, outcome in zip(SDK_CALLS * 2, [*racing, *late], strict=True):
            tally.loser(outcome, "ana", f"olga ({call})")
        await _judge_engine(
            tally, parts, dep, decision, escalation, [thread], ("ana", "override", thread)
        )
        # nobody else reads the thread, and nobody forges the key that would let them (a patch,
        # a new thread's or a run's metadata). Read where the thread's metadata is the graph's:
        # a second worker's is a stand-in for a shared thread store, written only by the runs
        # it served (``ServedWorker``), so there it may still say what the thread waited on
        alice = first.clients["alice"]
        forge = {answered_key("vera"): "vera"}
        patched = await first.http.patch(
            f"/threads/{thread}", json={"metadata": forge}, headers=bearer("tok-alice")
        )
        forged += patched.status_code != 403
        created = str((await alice.threads.create(metadata=forge))["thread_id"])
        ran = str((await alice.threads.create())["thread_id"])
        await alice.runs.wait(ran, "governed_agent", input=user_turn("hello"), metadata=forge)
        for who in strangers:
            for one in (thread, created, ran):
                if await first.reads(who, one):
                    leaks.append(f"{who} reads {one}")
        if leaks or forged:
            tally.problem(f"strangers' reads {leaks}, {forged} forged metadata writes let in")
    figure(
        "deployment_served_loser_reads",
        shape=shape.shape,
        strangers=len(strangers),
        reads_gained=len(leaks),
        forged_writes_let_in=forged,
    )
    tally.check()
