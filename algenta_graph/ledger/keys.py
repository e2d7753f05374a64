"""The ledger's keys: whose identity each kind of entry is written under.

Every key names something that has **an identity of its own**, the same wherever it is met (the
original thread, a copy of it, a new task after a cancel, another worker) and another thing's
nowhere else:

- an escalation's answer: its escalations' ids (:func:`escalation_key`), given when the denial
  is raised and copied with the thread; its approvals toward a quorum, one slot each, under
  the digest they approve (:func:`approval_key`);
- a governed call's write-ahead and result: the call's identity (:func:`call_start_key`,
  :func:`call_result_key`): for a call a rule let through, the id of the model message that made
  it and its tool call id (:func:`step_call_id`); for an approved held call, its escalation's id
  (:func:`held_call_id`).

Why the model message's id and not the tool call id alone: a provider (or a scripted model)
may reuse tool call ids across threads (``call_1``), while the message id is LangGraph's
(``add_messages`` gives each message a fresh id when it enters a thread) and a thread's copy keeps
its messages with their ids. Not the thread id: a copy must meet the same entry.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "approval_key",
    "call_result_key",
    "call_start_key",
    "escalation_key",
    "held_call_id",
    "step_call_id",
]


def escalation_key(escalation_ids: Iterable[str]) -> str:
    """The key of one answer to these escalations (one interrupt may list several).

    >>> escalation_key(["esc_b", "esc_a"])
    'escalations:esc_a,esc_b'
    """
    return "escalations:" + ",".join(sorted(escalation_ids))


def approval_key(answer_key: str, digest: str, slot: int) -> str:
    """The key of the ``slot``-th approval (from 1) of the answer ``answer_key``, of ``digest``.

    Slots fill in order, each insert-if-absent: an operator takes the first free one unless an
    earlier one is already theirs, so no one counts twice, in any worker. The digest is in the
    key: an approval counts only toward what it approved (the rules changed, a new count).

    >>> approval_key("escalations:esc_a", "sha256:ab", 1)
    'approval:1:sha256:ab:escalations:esc_a'
    """
    return f"approval:{slot}:{digest}:{answer_key}"


def step_call_id(message_id: str, tool_call_id: str) -> str:
    """The identity of a call a model message made.

    >>> step_call_id("run-1", "call_1")
    'call:run-1:call_1'
    """
    return f"call:{message_id}:{tool_call_id}"


def held_call_id(escalation_id: str) -> str:
    """The identity of a held call, run once its escalation is approved.

    >>> held_call_id("esc_1")
    'held:esc_1'
    """
    return f"held:{escalation_id}"


def call_start_key(identity: str) -> str:
    """The write-ahead key of a call's start.

    >>> call_start_key("held:esc_1")
    'call-start:held:esc_1'
    """
    return f"call-start:{identity}"


def call_result_key(identity: str) -> str:
    """The key of a call's recorded outcome.

    >>> call_result_key("held:esc_1")
    'call-result:held:esc_1'
    """
    return f"call-result:{identity}"
