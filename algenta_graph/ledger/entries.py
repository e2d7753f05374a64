"""What the ledger holds: one typed shape per kind of entry, and the lease every entry carries.

Every entry is written once under a key (insert-if-absent) by a claimant, and says whether what
it stands for finished. Its **value** is one of five typed shapes, told apart by ``kind`` and
validated whenever an entry is read back (:data:`ENTRY_VALUE`):

- :class:`ClaimAnswer` (``answer``): the one answer an escalation takes, under
  :func:`~algenta_graph.ledger.keys.escalation_key`;
- :class:`ApprovalMark` (``approval``): one operator's approval toward an escalation's quorum,
  in its slot (:func:`~algenta_graph.ledger.keys.approval_key`);
- :class:`NoticeMark` (``notice``): that an escalation's notice is being (or was) sent;
- :class:`CallStart` (``call-start``): a governed call is about to be sent (its write-ahead);
- :class:`CallOutcome` (``call-result``): what that call answered, recorded before its answer
  is returned.

The **lease** (:class:`Entry`): its claimant (a random token, the host and the process id), when
it was last known alive (``at``, refreshed while its side effects run) and whether they
finished (``done``). An unfinished entry whose claimant is gone is **abandoned**
(:meth:`Entry.abandoned`): its process is gone (same host), this process let it go without
finishing (:func:`release`: its run was cancelled), or it was not refreshed for
:data:`LEASE_SECONDS` (any host).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from algenta_graph.governance.escalations import DecisionType
from algenta_graph.records import CallResult, OperatorAction, OperatorVerdict

__all__ = [
    "ENTRY_VALUE",
    "HEARTBEAT_SECONDS",
    "LEASE_SECONDS",
    "AnswerDecision",
    "ApprovalMark",
    "CallOutcome",
    "CallResult",
    "CallStart",
    "ClaimAnswer",
    "Entry",
    "EntryValue",
    "NoticeMark",
    "new_entry",
    "release",
]

LEASE_SECONDS = 30.0
"""An unfinished entry not refreshed for this long is treated as abandoned (any host)."""
HEARTBEAT_SECONDS = 5.0
"""How often a claimant refreshes its entry while the side effects it stands for run."""


class _Value(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AnswerDecision(_Value):
    """An operator's decision on one escalated call, as its answer's claim keeps it."""

    action: OperatorAction
    """``override`` (approve, edit: it is executed) or ``decline`` (reject, respond, expired)."""
    type: DecisionType
    """LangChain's decision type."""
    verdict: OperatorVerdict
    """The verdict recorded (``approved``, ``modified``, ``expired``, ...)."""
    reason: str | None = None
    """Why; for ``respond``, the text for the model."""
    edited_args: dict[str, Any] | None = None
    """For an edit: the arguments to send."""
    digest: str | None = None
    """The digest of what the operator was shown."""
    interrupt_id: str | None = None
    """The interrupt that asked."""
    asked_at: str | None = None
    """When the escalation was asked (ISO 8601)."""
    expires_at: str | None = None
    """Its deadline (ISO 8601), if it has one."""


class ClaimAnswer(_Value):
    """The one answer an escalation takes: who gave it, where, when, and each decision."""

    kind: Literal["answer"] = "answer"
    operator: str
    """Who answered (the authenticated identity when served)."""
    roles: list[str] = Field(default_factory=list)
    """The roles they answered with."""
    decided_at: str | None = None
    """When they answered (ISO 8601)."""
    decisions: list[AnswerDecision]
    """One per escalated call, in the order they were asked."""
    thread_id: str | None = None
    """The thread the answer was given in (a copy's claim names its original)."""
    run_id: str | None = None
    """The served run that gave it (a retry of that run, the server's own after a worker died,
    completes its own answer: it is not another answer)."""
    approvers: list[str] = Field(default_factory=list)
    """Under a quorum: who had approved when this answer took effect, in the order counted
    (the last approval's answer lists every approver; a reject, those it overruled)."""

    @property
    def summary(self) -> str:
        """How: the decisions' actions, comma-separated (``"?"`` when it lists none)."""
        return ", ".join(d.action for d in self.decisions) or "?"


class ApprovalMark(_Value):
    """One operator's approval toward an escalation's quorum, bound to the digest approved."""

    kind: Literal["approval"] = "approval"
    operator: str
    """Who approved (the authenticated identity when served): counted once, whatever token."""
    digest: str
    """The digest of what they approved (the whole request's)."""
    roles: list[str] = Field(default_factory=list)
    """The roles they approved with."""
    decided_at: str | None = None
    """When they approved (ISO 8601)."""
    thread_id: str | None = None
    """The thread the approval was given in."""
    reason: str | None = None
    """Why, in their words."""


class NoticeMark(_Value):
    """An escalation's notice: being sent (unfinished) or sent (finished)."""

    kind: Literal["notice"] = "notice"
    escalation_id: str


class CallStart(_Value):
    """A governed call's write-ahead: it is about to be sent (no result recorded yet)."""

    kind: Literal["call-start"] = "call-start"
    tool: str
    """The tool, by its catalog name."""
    started_at: str
    """When it was started (ISO 8601)."""
    operator: str | None = None
    """Who approved it, for a held call (``None``: a call let through by its rules)."""
    thread_id: str | None = None
    """The thread that started it."""


class CallOutcome(_Value):
    """What a governed call came to, recorded before its answer is returned."""

    kind: Literal["call-result"] = "call-result"
    result: CallResult
    content: str
    """The tool's answer (text), or why there is none."""
    status: Literal["success", "error"]
    """The answer's status, for the model's tool message."""
    started_at: str | None = None
    """When it was started (its write-ahead's time)."""
    refused: bool = False
    """It was not run because a gate blocked it when it was to run (nothing was sent)."""


EntryValue = Annotated[
    ClaimAnswer | ApprovalMark | NoticeMark | CallStart | CallOutcome,
    Field(discriminator="kind"),
]
"""Any entry's value."""
ENTRY_VALUE: TypeAdapter[EntryValue] = TypeAdapter(EntryValue)
"""Validates an entry's value read back (JSON from a database, or a mapping)."""

V = TypeVar("V", ClaimAnswer, ApprovalMark, NoticeMark, CallStart, CallOutcome)


_LIVE: set[str] = set()
"""Tokens of this process's entries whose side effects may still be running."""
_LIVE_LOCK = threading.Lock()


@dataclass(frozen=True)
class Entry(Generic[V]):
    """One entry of the ledger: its key, its typed value and its lease (see the module docs)."""

    key: str
    value: V
    token: str
    """The claimant's random token."""
    host: str
    pid: int
    at: float
    """When the claimant was last known alive (Unix seconds)."""
    done: bool = False
    """Whether what it stands for finished."""

    def abandoned(self, now: float | None = None) -> bool:
        """Whether the claimant is gone without finishing (what it stands for may be taken)."""
        if self.done:
            return False
        if self.host == socket.gethostname():
            if self.pid == os.getpid():
                # this process: abandoned once its run let go without finishing (cancelled)
                with _LIVE_LOCK:
                    if self.token not in _LIVE:
                        return True
            else:
                try:
                    os.kill(self.pid, 0)
                except ProcessLookupError:
                    return True
                except PermissionError:
                    pass
        return (now if now is not None else time.time()) - self.at > LEASE_SECONDS

    def adopted_by(self, mine: Entry[V]) -> Entry[V]:
        """This entry's key and value under ``mine``'s lease (a take-over keeps the value)."""
        return Entry(self.key, self.value, mine.token, mine.host, mine.pid, mine.at)

    def finished(self) -> Entry[V]:
        """This entry, done."""
        return Entry(self.key, self.value, self.token, self.host, self.pid, self.at, True)


def new_entry(key: str, value: V) -> Entry[V]:
    """An entry of ``key`` claimed by this process, live until :func:`release`."""
    entry = Entry(key, value, uuid.uuid4().hex, socket.gethostname(), os.getpid(), time.time())
    with _LIVE_LOCK:
        _LIVE.add(entry.token)
    return entry


def release(entry: Entry[Any]) -> None:
    """This process no longer works on ``entry``: unfinished, it may now be taken over."""
    with _LIVE_LOCK:
        _LIVE.discard(entry.token)
