"""The one ledger every process serving a graph shares (``docs/ARCHITECTURE.md``, invariant 17).

Escalation claims (one answer per escalation), notices (one per escalation) and the write-ahead
of every governed call (never sent twice) live here: atomic insert-if-absent entries keyed by an
identity (:mod:`~algenta_graph.ledger.keys`), each with a typed value
(:mod:`~algenta_graph.ledger.entries`), a lease, compare-and-set take-over, refresh and finish
(:class:`~algenta_graph.ledger.store.Ledger`). Backends: this process's memory
(:mod:`~algenta_graph.ledger.memory`), a SQLite file on a connection of its own
(:mod:`~algenta_graph.ledger.sqlite`), PostgreSQL on a pool of its own
(:mod:`~algenta_graph.ledger.postgres`). Which one a deployment uses is chosen from its
configuration, or it does not start (:mod:`~algenta_graph.ledger.choosing`).

Nothing here imports a node, the factory, the server, the CLI or the inbox.
"""

from __future__ import annotations

from algenta_graph.ledger.choosing import (
    MEMORY,
    LedgerSpec,
    choose_ledger,
    connect_ledger,
    describe_ledger,
    open_ledger,
    run_ledger,
)
from algenta_graph.ledger.entries import (
    HEARTBEAT_SECONDS,
    LEASE_SECONDS,
    AnswerDecision,
    ApprovalMark,
    CallOutcome,
    CallResult,
    CallStart,
    ClaimAnswer,
    Entry,
    NoticeMark,
    new_entry,
    release,
)
from algenta_graph.ledger.keys import (
    approval_key,
    call_result_key,
    call_start_key,
    escalation_key,
    held_call_id,
    step_call_id,
)
from algenta_graph.ledger.memory import MemoryLedger, process_ledger
from algenta_graph.ledger.store import Ledger

__all__ = [
    "HEARTBEAT_SECONDS",
    "LEASE_SECONDS",
    "MEMORY",
    "AnswerDecision",
    "ApprovalMark",
    "CallOutcome",
    "CallResult",
    "CallStart",
    "ClaimAnswer",
    "Entry",
    "Ledger",
    "LedgerSpec",
    "MemoryLedger",
    "NoticeMark",
    "approval_key",
    "call_result_key",
    "call_start_key",
    "choose_ledger",
    "connect_ledger",
    "describe_ledger",
    "escalation_key",
    "held_call_id",
    "new_entry",
    "open_ledger",
    "process_ledger",
    "release",
    "run_ledger",
    "step_call_id",
]
