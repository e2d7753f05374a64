"""Verifying a thread's chain: every link recomputed, every break named (pure: no store).

:func:`verify_chain` checks the chain in one thread's values (its state, or its three record
lists) and returns a :class:`ChainReport`: an edited field (hash mismatch), a deleted record (a
gap in ``seq``), two records reordered, an injected one (a duplicate ``seq`` or a bad link)
and, against a head exported before, a truncated or rewritten tail, each a :class:`Broken`
naming the record. The link format and the sealing are :mod:`algenta_graph.audit.chain`;
every checkpoint of a store is :mod:`algenta_graph.audit.history`; a report as text is
:mod:`algenta_graph.audit.reports`.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from algenta_graph.audit.chain import (
    GENESIS,
    ChainHead,
    a_type,
    audit_key,
    link_hash,
    record_items,
    seq_of,
)
from algenta_graph.state import RECORD_FIELDS

__all__ = [
    "Broken",
    "ChainReport",
    "Hasher",
    "gone_threads",
    "verify_chain",
    "verify_threads_values",
    "verify_values",
]


@dataclass(frozen=True)
class Broken:
    """Where a chain breaks: the record (list and index, its ``seq``) and why.

    With :func:`~algenta_graph.audit.history.verify_history`, also the checkpoint it was found
    in (its id and step).
    """

    field: str | None
    index: int | None
    seq: int | None
    reason: str
    checkpoint: str | None = None
    step: int | None = None

    def __str__(self) -> str:
        """Where (the record, or the chain; the checkpoint if any) and why, in one line."""
        if self.field is None:
            where = "chain"
        elif self.index is None:
            where = self.field
        else:
            where = f"{self.field}[{self.index}]"
        if self.checkpoint is not None:
            step = f", step {self.step}" if self.step is not None else ""
            where += f" in checkpoint {self.checkpoint}{step}"
        return f"{where} (seq {self.seq}): {self.reason}"


@dataclass(frozen=True)
class ChainReport:
    """The result of verifying one thread's chain.

    ``ok``: every link holds (and matches ``expected``, when a head exported before was given);
    ``count``: records seen (in the latest checkpoint); ``head``: the last intact link;
    ``broken``: the first break, if any; ``problems``: every break found, in ``seq`` order (with
    :func:`verify_history`: checkpoint by checkpoint, oldest first); ``checkpoints``: how many
    checkpoints were verified (0: a state or an export, not a checkpoint history).
    """

    ok: bool
    count: int
    head: ChainHead
    broken: Broken | None = None
    problems: tuple[Broken, ...] = field(default_factory=tuple)
    checkpoints: int = 0

    def __str__(self) -> str:
        """``ok: ...`` with the head, or ``BROKEN: ...`` with the first problem, in one line."""
        seen = f", {self.checkpoints} checkpoint(s)" if self.checkpoints else ""
        if self.ok:
            return (
                f"ok: {self.count} record(s), head seq {self.head.seq} {self.head.hash[:16]}" + seen
            )
        return (
            f"BROKEN: {self.broken} ({len(self.problems)} problem(s), {self.count} record(s){seen})"
        )


def verify_chain(
    values: Mapping[str, Any],
    *,
    key: str | bytes | None = None,
    expected: ChainHead | None = None,
) -> ChainReport:
    """Recompute every link of the chain in ``values`` (a thread's state, or its three lists).

    ``key`` defaults to ``ALGENTA_AUDIT_KEY``: a chain sealed with a key only verifies with it.
    ``expected``: a head exported before; the chain must still contain it (else: truncated, or
    rewritten from that point).
    """
    secret = audit_key(key)
    return verify_values(
        values, secret, expected, lambda name, record: link_hash(name, record, secret)
    )


Hasher = Callable[[str, Mapping[str, Any]], str]


def verify_values(
    values: Mapping[str, Any],
    secret: bytes | None,
    expected: ChainHead | None,
    hasher: Hasher,
) -> ChainReport:
    """Verify the chain in ``values`` with ``hasher`` (:func:`verify_chain` with its key resolved).

    Args:
        values: a thread's state, or its three lists.
        secret: the audit key the records were sealed with (None: plain SHA-256); it only
            shapes the message of a hash mismatch.
        expected: a head exported before, which the chain must still contain.
        hasher: ``(list name, record) -> hash`` (a verifier may cache it across checkpoints).

    Returns:
        The report: every problem, the first one, and the intact head.
    """
    problems: list[Broken] = []
    entries: list[tuple[int, str, int, Mapping[str, Any]]] = []
    count = 0
    for name in RECORD_FIELDS:
        listed = values.get(name)
        if listed is not None and not isinstance(listed, list | tuple):
            problems.append(Broken(name, None, None, f"not a list of records ({a_type(listed)})"))
    for name, index, record in record_items(values):
        count += 1
        if not isinstance(record, Mapping):
            problems.append(
                Broken(name, index, None, f"not a record (a JSON object): {a_type(record)}")
            )
            continue
        seq = seq_of(record)
        if seq is None:
            problems.append(Broken(name, index, None, "unsealed: no valid seq/prev/hash"))
            continue
        entries.append((seq, name, index, record))
    # each list must be in seq order (a reordering within a list shows here)
    last_in: dict[str, tuple[int, int]] = {}
    for seq, name, index, _ in entries:
        before = last_in.get(name)
        if before is not None and seq < before[1]:
            problems.append(
                Broken(
                    name,
                    index,
                    seq,
                    f"out of order: it comes after {name}[{before[0]}] (seq {before[1]})",
                )
            )
        last_in[name] = (index, seq)
    entries.sort(key=lambda e: e[0])
    expected_seq, prev = 1, GENESIS
    head = ChainHead(0, GENESIS)
    intact = True
    seen: dict[int, tuple[str, int]] = {}
    for seq, name, index, record in entries:
        if seq in seen:
            first = seen[seq]
            problems.append(
                Broken(
                    name,
                    index,
                    seq,
                    f"duplicate seq: {first[0]}[{first[1]}] has seq {seq} too (injected?)",
                )
            )
            intact = False
            continue
        seen[seq] = (name, index)
        if seq != expected_seq:
            missing = (
                f"seq {expected_seq}"
                if seq == expected_seq + 1
                else f"seq {expected_seq}..{seq - 1}"
            )
            problems.append(Broken(name, index, seq, f"missing {missing} before it (deleted?)"))
            intact = False
        if record.get("prev") != prev:
            problems.append(
                Broken(
                    name,
                    index,
                    seq,
                    "prev is not the hash of the record before it (reordered, or inserted)",
                )
            )
            intact = False
        try:
            digest = hasher(name, record)
        except Exception as exc:  # a value JCS cannot encode (only a changed record holds one)
            problems.append(
                Broken(name, index, seq, f"cannot be hashed ({type(exc).__name__}): changed?")
            )
            intact = False
            prev = str(record.get("hash"))
            expected_seq = seq + 1
            continue
        stored = str(record.get("hash")).encode("utf-8", "backslashreplace")
        if not hmac.compare_digest(stored, digest.encode("ascii")):
            problems.append(
                Broken(
                    name,
                    index,
                    seq,
                    "hash mismatch: the record was changed after it was sealed"
                    + (", or forged without the key" if secret else ""),
                )
            )
            intact = False
        prev = str(record.get("hash"))
        expected_seq = seq + 1
        if intact:
            head = ChainHead(seq, prev)
    if expected is not None and expected.seq > 0:
        found = next((r for s, _, _, r in entries if s == expected.seq), None)
        if found is None:
            last = entries[-1][0] if entries else 0
            problems.append(
                Broken(
                    None,
                    None,
                    expected.seq,
                    f"truncated: the chain ends at seq {last}; the head exported before is "
                    f"seq {expected.seq}",
                )
            )
        elif found.get("hash") != expected.hash:
            problems.append(
                Broken(
                    None,
                    None,
                    expected.seq,
                    "rewritten: the record at the exported head's seq has another hash",
                )
            )
    problems.sort(key=lambda b: (b.seq is None, b.seq or 0))
    return ChainReport(
        ok=not problems,
        count=count,
        head=head,
        broken=problems[0] if problems else None,
        problems=tuple(problems),
    )


def gone_threads(
    reports: dict[str, ChainReport],
    expected: Mapping[str, ChainHead] | None,
    thread: str | None,
    foreign: Mapping[str, str] | None = None,
) -> dict[str, ChainReport]:
    """Add a broken report for every thread an exported head has and ``reports`` lacks.

    Args:
        reports: the reports by thread id (completed in place, and returned).
        expected: the heads exported before, by thread id.
        thread: only this thread (None: every thread).
        foreign: thread id -> why a thread of the store is not an algenta-graph thread (its
            report then says so).
    """
    for tid, head in (expected or {}).items():
        if tid not in reports and (thread is None or tid == thread) and head.seq > 0:
            why = "the thread is gone (the exported head had it)"
            if tid in (foreign or {}):
                why = (
                    "the thread no longer looks like an algenta-graph thread "
                    f"({(foreign or {})[tid]}); the exported head had it"
                )
            gone = Broken(None, None, head.seq, why)
            reports[tid] = ChainReport(False, 0, ChainHead(0, GENESIS), gone, (gone,))
    return reports


def verify_threads_values(
    latest: Mapping[str, Mapping[str, Any]],
    key: str | bytes | None,
    expected: Mapping[str, ChainHead] | None,
    thread: str | None,
) -> dict[str, ChainReport]:
    """Verify each thread's latest values, then report the exported threads that are gone.

    Args:
        latest: thread id -> its latest values.
        key: the audit key (None: ``ALGENTA_AUDIT_KEY``).
        expected: the heads exported before, by thread id.
        thread: only this thread (None: every thread).
    """
    reports = {
        tid: verify_chain(values, key=key, expected=(expected or {}).get(tid))
        for tid, values in sorted(latest.items())
    }
    return gone_threads(reports, expected, thread)
