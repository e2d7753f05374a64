"""``verify_history`` on hand-made histories: what it reports, once, and what it never does
(raise on a history someone rewrote).

Each history is a list of
:class:`~algenta_graph.serving.checkpoint_reader.StoredCheckpoint`, as the one reader returns
them, built from records sealed by :func:`seal` and the state's own reducer.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from typing import Any

import pytest

from algenta_graph.audit.chain import ENV_AUDIT_KEY, seal
from algenta_graph.audit.history import verify_history
from algenta_graph.audit.step_writes import StepWrites
from algenta_graph.serving.checkpoint_reader import StoredCheckpoint
from algenta_graph.state import append_records


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_AUDIT_KEY, raising=False)


def _grow(state: dict[str, Any], n: int) -> dict[str, Any]:
    update = seal(state, {"receipts": [{"decision_id": f"dec_{n}", "response_code": 200}]})
    return {"receipts": append_records(state.get("receipts"), update["receipts"])}


def _history(steps: int, forge_at: int | None = None) -> list[StoredCheckpoint]:
    """A thread whose every step appends one receipt (a new channel version each time); with
    ``forge_at``, a record with made-up links is written into the state at that step (as
    state write access can), and the graph's later records link to it as the chain head."""
    out: list[StoredCheckpoint] = []
    state: dict[str, Any] = {"receipts": []}
    for step in range(steps):
        state = _grow(state, step)
        if step == forge_at:
            state["receipts"].append(dict(FORGED))
        out.append(
            StoredCheckpoint(
                thread_id="t",
                checkpoint_id=f"c{step:03d}",
                parent_id=f"c{step - 1:03d}" if step else None,
                step=step,
                values={"receipts": [dict(r) for r in state["receipts"]]},
                versions={"receipts": step + 1},
            )
        )
    return out


FORGED = {"decision_id": "dec_forged", "seq": 99, "prev": "0" * 64, "hash": "f" * 64}


def test_an_intact_history_is_ok_and_counted() -> None:
    report = verify_history(_history(6))
    assert report.ok and (report.count, report.checkpoints, report.head.seq) == (6, 6, 6)
    assert verify_history([]).ok


def test_a_forged_record_carried_into_every_later_checkpoint_is_named_once() -> None:
    report = verify_history(_history(6, forge_at=2))
    assert not report.ok and report.broken is not None
    assert report.broken.checkpoint == "c002"  # where it first appears
    about_it = [p for p in report.problems if p.seq == 99]
    assert about_it and {p.checkpoint for p in about_it} == {"c002"}, report.problems
    reasons = {p.reason.split(":")[0] for p in about_it}
    assert reasons == {
        "missing seq 4..98 before it (deleted?)",
        "prev is not the hash of the record before it (reordered, or inserted)",
        "hash mismatch",
    }


def test_a_history_with_forged_parents_is_reported_never_raised() -> None:
    history = _history(4)
    history[1] = StoredCheckpoint(**{**history[1].__dict__, "parent_id": "c003"})  # a later one
    history[2] = StoredCheckpoint(**{**history[2].__dict__, "parent_id": "nowhere"})
    report = verify_history(history)
    assert not report.ok
    assert any(
        p.checkpoint == "c002" and "(nowhere) is not in the store" in p.reason
        for p in report.problems
    )


def test_an_unchanged_channel_version_means_an_unchanged_list() -> None:
    history = _history(3)
    # the second checkpoint claims the first's version of the list, yet holds one more record
    history[1] = StoredCheckpoint(**{**history[1].__dict__, "versions": {"receipts": 1}})
    report = verify_history(history)
    assert not report.ok and report.broken is not None
    assert (report.broken.checkpoint, report.broken.index) == ("c001", 1)
    assert "was not written in between" in report.broken.reason


def _written(history: list[StoredCheckpoint]) -> dict[str, StepWrites]:
    """What each step of ``history`` wrote, as a store keeps it (by the checkpoint it ran from)."""
    return {
        parent.checkpoint_id: StepWrites(
            {"receipts": list(child.values["receipts"][len(parent.values["receipts"]) :])}
        )
        for parent, child in pairwise(history)
    }


def _without(history: list[StoredCheckpoint], at: int) -> list[StoredCheckpoint]:
    """``history`` with the receipt that checkpoint ``at`` added removed from it (only there)."""
    cp = history[at]
    kept = cp.values["receipts"][:-1]
    return [*history[:at], replace(cp, values={"receipts": kept}), *history[at + 1 :]]


def test_a_record_removed_where_it_first_appears_is_named_by_what_the_step_wrote() -> None:
    history = _history(4)  # every step writes the list: the versions cannot tell
    writes = _written(history)
    assert verify_history(history, writes=writes).ok
    tampered = _without(history, 1)
    assert verify_history(tampered).ok  # the limit of the channel versions alone
    report = verify_history(tampered, writes=writes)
    assert not report.ok
    named = {(p.checkpoint, p.seq, p.reason.split(" (")[0]) for p in report.problems}
    assert named == {
        ("c001", 2, "written by the step after checkpoint c000"),
        ("c002", 2, "not in checkpoint c001"),
    }, report.problems


def test_a_branch_and_a_step_cut_short_are_no_false_alarm() -> None:
    history = _history(3)
    writes = _written(history)
    # time travel: another child of c001 wrote another record (the store kept the first's)
    other = _grow({"receipts": [dict(r) for r in history[1].values["receipts"]]}, 9)
    branch = replace(history[2], checkpoint_id="c002b", values=other, versions={"receipts": 9})
    assert verify_history([*history, branch], writes=writes).ok
    # a step whose writes were saved, then a new turn (the list not written: its writes
    # discarded): the new turn's checkpoint holds none of them
    cut = replace(
        history[2],
        checkpoint_id="c003",
        parent_id="c002",
        values=history[2].values,
        versions=history[2].versions,
    )
    saved = {**writes, "c002": StepWrites({"receipts": [{"decision_id": "lost"}]})}
    assert verify_history([*history, cut], writes=saved).ok
