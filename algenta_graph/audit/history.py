"""Verifying the chain over a checkpoint store: every checkpoint of a thread's history.

:func:`verify_history` (what :func:`verify_audit` and ``algenta-graph receipts --verify`` run)
checks the chain of **every checkpoint** of a thread, not only its latest, and compares each
checkpoint with the one it follows: the record lists only ever grow, so a record that vanished
or changed between two checkpoints is named with the checkpoint it was found in. A record that
appears between two checkpoints must be explained by the step between them: its list was
written then (its channel version changed), and, where the store keeps that step's writes
(:mod:`algenta_graph.audit.step_writes`), the step wrote that very record; so a record removed
from the checkpoints before the one holding it is named, in the middle of a history as well as
at its end, even when the next step wrote its list again. It does not check the pending writes
of a step that has not finished (they are sealed into the next checkpoint, and checked there
once it is written), nor checkpoints of subgraphs (a non-empty ``checkpoint_ns``). Read-only,
on SQLite and PostgreSQL.
"""

from __future__ import annotations

import os
import pickle
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from algenta_graph.audit.chain import ChainHead, audit_key, link_hash, seq_of
from algenta_graph.audit.step_writes import (
    StepWrites,
    ThreadWrites,
    aread_step_writes,
    read_step_writes,
)
from algenta_graph.audit.verification import Broken, ChainReport, gone_threads, verify_values
from algenta_graph.state import RECORD_FIELDS

if TYPE_CHECKING:
    from algenta_graph.serving.checkpoint_reader import StoredCheckpoint

__all__ = ["averify_audit", "verify_audit", "verify_history", "verify_threads"]


class _HashMemo:
    """``link_hash`` remembered by the record's exact content, so a record is hashed once.

    The content is the record's pickle (types and values, so ``1``, ``1.0`` and ``True`` never
    share an entry): a record that stays the same through many checkpoints is hashed once. A
    record that cannot be pickled is hashed each time.

    Args:
        secret: the audit key (None: plain SHA-256).
    """

    def __init__(self, secret: bytes | None) -> None:
        self.secret = secret
        self._known: dict[tuple[str, bytes], str] = {}

    def __call__(self, name: str, record: Mapping[str, Any]) -> str:
        try:
            memo_key = (name, pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception:
            return link_hash(name, record, self.secret)
        digest = self._known.get(memo_key)
        if digest is None:
            digest = self._known[memo_key] = link_hash(name, record, self.secret)
        return digest


def _same(a: Any, b: Any) -> bool:
    """Whether two stored values are the same JSON value, as the chain hashes them.

    ``True`` is not ``1``, ``1`` is not ``1.0``, keys compare as the strings they are hashed as,
    and a list and a tuple with the same items are the same array.
    """
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        left = {str(k): v for k, v in a.items()}
        right = {str(k): v for k, v in b.items()}
        return (
            len(left) == len(a)
            and len(right) == len(b)
            and left.keys() == right.keys()
            and all(_same(v, right[k]) for k, v in left.items())
        )
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and a != a:
        return bool(b != b)  # NaN
    return bool(a == b)


def _where(cp: StoredCheckpoint) -> str:
    return f"checkpoint {cp.checkpoint_id}" + (f" (step {cp.step})" if cp.step is not None else "")


def _unwritten(new: Sequence[tuple[int, Any]], written: Sequence[Any]) -> list[tuple[int, Any]]:
    """The records of ``new`` (index, record) that are not among ``written`` (each used once)."""
    pool = list(written)
    left: list[tuple[int, Any]] = []
    for index, record in new:
        match = next((i for i, w in enumerate(pool) if _same(record, w)), None)
        if match is None:
            left.append((index, record))
        else:
            del pool[match]
    return left


def _compare(
    parent: StoredCheckpoint,
    child: StoredCheckpoint,
    broken_in_parent: set[tuple[str | None, int | None]],
    broken_in_child: set[tuple[str | None, int | None]],
    step: StepWrites | None,
) -> list[Broken]:
    """What ``child`` lost or changed of ``parent``'s records, and what it holds unexplained.

    The lists only ever grow; a list whose channel version is the same in both (LangGraph did
    not write it in between) must be the same list; and with ``step`` (what the step from
    ``parent`` wrote, kept by the store, when ``child`` is the one checkpoint that follows
    ``parent``) every record new in ``child`` must be one the step wrote.
    """
    found: list[Broken] = []

    def problem(name: str, index: int, record: Any, why: str) -> None:
        found.append(Broken(name, index, seq_of(record), why, child.checkpoint_id, child.step))

    for name in RECORD_FIELDS:
        before = parent.values.get(name)
        after = child.values.get(name)
        now = after if isinstance(after, list | tuple) else ()
        was = before if isinstance(before, list | tuple) else ()
        for index, old in enumerate(was):
            if index >= len(now):
                problem(
                    name,
                    index,
                    old,
                    f"in {_where(parent)}, gone from this one, which follows it (deleted?)",
                )
            elif not _same(old, now[index]) and not (
                (name, index) in broken_in_parent or (name, index) in broken_in_child
            ):
                problem(
                    name,
                    index,
                    now[index],
                    f"differs from the same record in {_where(parent)}, which it follows "
                    "(changed after it was checkpointed, its links recomputed?)",
                )
        new = [
            (index, now[index])
            for index in range(len(was), len(now))
            if (name, index) not in broken_in_child
        ]
        version = parent.versions.get(name)
        if version is not None and child.versions.get(name) == version:
            for index, record in new:
                problem(
                    name,
                    index,
                    record,
                    f"not in {_where(parent)}, which it follows, though {name} was not written "
                    "in between (its channel version is the same): added outside the graph, "
                    "or deleted from that checkpoint?",
                )
        elif step is not None:
            written = step.records.get(name, ())
            for index, record in _unwritten(new, written):
                problem(
                    name,
                    index,
                    record,
                    f"not in {_where(parent)}, which it follows, nor written by the step "
                    "between them (the store keeps what that step wrote): deleted from that "
                    "checkpoint, or added outside the graph?",
                )
            if child.versions.get(name) is not None:  # written between them (else: a new turn)
                for _, record in _unwritten(list(enumerate(written)), [r for _, r in new]):
                    found.append(
                        Broken(
                            name,
                            None,
                            seq_of(record),
                            f"written by the step after {_where(parent)}, which this one "
                            "follows, but not in this one (deleted?)",
                            child.checkpoint_id,
                            child.step,
                        )
                    )
    return found


def verify_history(
    checkpoints: Sequence[StoredCheckpoint],
    *,
    key: str | bytes | None = None,
    expected: ChainHead | None = None,
    writes: Mapping[str, StepWrites] | None = None,
) -> ChainReport:
    """Verify **every checkpoint** of one thread, and each against the one it follows.

    :func:`~algenta_graph.audit.verification.verify_chain` on each checkpoint, and each checkpoint
    against the one it follows (``parent_id``): a record there must still be here, unchanged,
    and a record new here must have been written by the step between them (its list's channel
    version changed; and, with ``writes``, the step wrote that record, checked where the one it
    follows has no other checkpoint following it: a branch's steps share their writes).
    Each problem names the checkpoint it was found in; a problem carried unchanged into later
    checkpoints is named once, where it first appears. A checkpoint whose parent is missing
    from the history is a problem too (what it held cannot be compared). Reads only.

    Args:
        checkpoints: the thread's root checkpoints
            (:func:`algenta_graph.serving.checkpoint_reader.read_history`), in any order
            (LangGraph's ids sort in creation order; time travel branches the history, and
            each branch is checked along its own parents).
        key: the audit key (default ``ALGENTA_AUDIT_KEY``).
        expected: a head exported before, checked against the latest checkpoint.
        writes: what each step wrote, by the checkpoint it ran from
            (:func:`~algenta_graph.audit.step_writes.read_step_writes`); without it (or for a
            checkpoint it lacks) the channel versions alone say what a step wrote.

    Returns:
        The report; its ``count`` and ``head`` are those of the latest checkpoint.
    """
    secret = audit_key(key)
    hasher = _HashMemo(secret)
    ordered = sorted(checkpoints, key=lambda c: c.checkpoint_id)
    if not ordered:
        return verify_values({}, secret, expected, hasher)
    by_id = {cp.checkpoint_id: cp for cp in ordered}
    followers = Counter(cp.parent_id for cp in ordered)
    own: dict[str, set[tuple[Any, ...]]] = {}  # each checkpoint's problems (to skip inherited)
    bad: dict[str, set[tuple[str | None, int | None]]] = {}  # its records that fail on their own
    problems: list[Broken] = []
    last = ordered[-1]
    report = verify_values(last.values, secret, expected, hasher)
    for cp in ordered:
        mine = report if cp is last else verify_values(cp.values, secret, None, hasher)
        keys = {(b.field, b.index, b.seq, b.reason) for b in mine.problems}
        bad[cp.checkpoint_id] = {(b.field, b.index) for b in mine.problems}
        parent = by_id.get(cp.parent_id) if cp.parent_id is not None else None
        # (a parent read later than its child has a forged id: nothing to inherit from it)
        inherited = own.get(parent.checkpoint_id, set()) if parent is not None else set()
        problems += [
            replace(b, checkpoint=cp.checkpoint_id, step=cp.step)
            for b in mine.problems
            if (b.field, b.index, b.seq, b.reason) not in inherited
        ]
        own[cp.checkpoint_id] = keys
        if cp.parent_id is not None and parent is None:
            problems.append(
                Broken(
                    None,
                    None,
                    None,
                    f"the checkpoint it follows ({cp.parent_id}) is not in the store (deleted?): "
                    "what that one held cannot be compared",
                    cp.checkpoint_id,
                    cp.step,
                )
            )
        elif parent is not None:
            broken_before = bad.get(parent.checkpoint_id, set())
            step = (writes or {}).get(parent.checkpoint_id)
            if followers[parent.checkpoint_id] > 1:
                step = None  # a branch: the store kept one of its steps' writes
            problems += _compare(parent, cp, broken_before, bad[cp.checkpoint_id], step)
    return ChainReport(
        ok=not problems,
        count=report.count,
        head=report.head,
        broken=problems[0] if problems else None,
        problems=tuple(problems),
        checkpoints=len(ordered),
    )


def verify_audit(
    source: Any,
    thread: str | None = None,
    *,
    key: str | bytes | None = None,
    expected: Mapping[str, ChainHead] | None = None,
) -> dict[str, ChainReport]:
    """Verify every thread's chain (or ``thread``'s) through **every checkpoint** of its history.

    :func:`verify_history` for each thread. Threads of another graph sharing the store are left
    out (:func:`algenta_graph.audit.split_threads`).

    Args:
        source: a SQLite checkpoint file path (opened read-only) or a checkpoint saver with a
            synchronous ``list`` (for an async saver or a PostgreSQL URL use
            :func:`averify_audit`).
        thread: only this thread (None: every thread).
        key: the audit key (default ``ALGENTA_AUDIT_KEY``).
        expected: heads exported before, per thread
            (:func:`~algenta_graph.audit.export.read_heads`); a thread that has vanished is
            reported.

    Returns:
        One report per thread id.

    Raises:
        RecordsFileError: the store holds none of our threads
            (:class:`~algenta_graph.serving.checkpointer.RecordsFileError`).
    """
    from algenta_graph.serving.checkpoint_reader import read_history

    history = read_history(source, thread, fields=RECORD_FIELDS)
    writes = read_step_writes(source, thread)
    return verify_threads(
        history, _name(source), key=key, expected=expected, thread=thread, writes=writes
    )


async def averify_audit(
    saver: Any,
    thread: str | None = None,
    *,
    key: str | bytes | None = None,
    expected: Mapping[str, ChainHead] | None = None,
) -> dict[str, ChainReport]:
    """:func:`verify_audit` for an async checkpoint saver, a SQLite file, or a PostgreSQL URL.

    ``saver`` is an async checkpoint saver (``alist``), a SQLite file, or a ``postgresql://``
    URL (opened without creating anything).
    """
    from algenta_graph.serving.checkpoint_reader import aread_history

    history = await aread_history(saver, thread, fields=RECORD_FIELDS)
    writes = await aread_step_writes(saver, thread)
    return verify_threads(
        history, _name(saver), key=key, expected=expected, thread=thread, writes=writes
    )


def _name(source: Any) -> str:
    """How errors name a store: a PostgreSQL URL without its password, a path, a saver's type."""
    from algenta_graph.serving.checkpointer import is_postgres_url, redact_url

    if is_postgres_url(source):
        return redact_url(str(source).strip())
    if isinstance(source, str | os.PathLike):
        return str(source)
    return type(source).__name__


def verify_threads(
    history: Mapping[str, Sequence[StoredCheckpoint]],
    where: str,
    *,
    key: str | bytes | None = None,
    expected: Mapping[str, ChainHead] | None = None,
    thread: str | None = None,
    writes: ThreadWrites | None = None,
) -> dict[str, ChainReport]:
    """:func:`verify_history` for each algenta-graph thread of ``history``.

    Threads of another graph are left out; a thread an exported head names that is gone, or no
    longer looks like an algenta-graph thread, is reported.

    Args:
        history: ``{thread_id: checkpoints}``, as
            :func:`algenta_graph.serving.checkpoint_reader.read_history` returns it.
        where: names the store in errors.
        key: the audit key (default ``ALGENTA_AUDIT_KEY``).
        expected: heads exported before, per thread.
        thread: only this thread (None: every thread).
        writes: what each step wrote, per thread
            (:func:`~algenta_graph.audit.step_writes.read_step_writes`).

    Raises:
        RecordsFileError: the store holds none of our threads.
    """
    from algenta_graph.audit.records import no_thread_of_ours, split_threads

    ours, foreign = split_threads(history)
    if foreign and not ours:
        raise no_thread_of_ours(where, foreign)
    reports = {
        tid: verify_history(
            history[tid],
            key=key,
            expected=(expected or {}).get(tid),
            writes=(writes or {}).get(tid),
        )
        for tid in ours
    }
    return gone_threads(reports, expected, thread, foreign)
