"""The tamper-evident chain of a thread's governed records.

Every governed record (a receipt, a denial, an operator decision) carries three fields:

- ``seq``: its position in the thread's chain, from 1, one chain across the three lists;
- ``prev``: the ``hash`` of the record with ``seq - 1`` (:data:`GENESIS` for the first);
- ``hash``: the lowercase hex SHA-256 of :func:`link_bytes` (the record without ``hash``,
  which includes ``seq`` and ``prev``, and the list it is in), or, with ``ALGENTA_AUDIT_KEY``
  set, its HMAC-SHA-256 under that key.

The encoding is RFC 8785 (JSON Canonicalization Scheme, the ``rfc8785`` package)::

    link_bytes = b"algenta-graph/chain/v1\\n" + JCS({"field": <list name>, "record": <record
                 without "hash">})

so a verifier in any language can recompute a link: sort keys by UTF-16 code units, no
whitespace, ECMAScript number formatting (``30.0`` and ``30`` encode the same). Values JCS
cannot encode (integers beyond 2**53 - 1, NaN/infinite floats, lone surrogates) are hashed in a
tagged form instead of failing (see ``_plain``).

Sealing (:func:`seal`) happens in the graph's nodes: a node's update is linked to the chain head
found in the node's input state, its new records taken in a fixed order (receipts, then denials,
then operator decisions, each list in order). Verifying (:func:`verify_chain`,
:func:`verify_audit`) recomputes every link and names the first broken record: an edited field
(hash mismatch), a deleted record (a gap in ``seq``), two records reordered (a list out of
``seq`` order, or a ``prev`` that is not its predecessor's hash), an injected record (a duplicate
``seq`` or a bad link) and, against a chain head exported before (:func:`export_jsonl`,
:func:`read_heads`), a truncated tail. :func:`verify_history` (what :func:`verify_audit` and
``algenta-graph receipts --verify`` run) does this for **every checkpoint** of a thread, not
only its latest, and compares each checkpoint with the one it follows: the record lists only
ever grow, so a record that vanished or changed between two checkpoints is named with the
checkpoint it was found in. It does not check the pending writes of a step that has not
finished (they are sealed into the next checkpoint, and checked there once it is written), nor
checkpoints of subgraphs (a non-empty ``checkpoint_ns``).

What the chain does not prove: with plain SHA-256 anyone who can write a thread's state can
append records with valid links (the served graph refuses such writes; see
:mod:`algenta_graph.serving.auth`); with ``ALGENTA_AUDIT_KEY`` they cannot without the key. A
truncated tail is only visible against a head kept elsewhere. Whoever holds the key (the server
process) can forge anything.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import IO, TYPE_CHECKING, Any

import rfc8785

from algenta_graph.state import RECORD_FIELDS

if TYPE_CHECKING:
    from algenta_graph.serving.checkpointer import StoredCheckpoint

__all__ = [
    "CHAIN_FIELDS",
    "ENV_AUDIT_KEY",
    "GENESIS",
    "RECORD_FIELDS",
    "Broken",
    "ChainHead",
    "ChainReport",
    "audit_key",
    "averify_audit",
    "chain_head",
    "export_jsonl",
    "format_reports",
    "link_bytes",
    "link_hash",
    "read_heads",
    "read_jsonl",
    "records_in_order",
    "report_dict",
    "seal",
    "verify_audit",
    "verify_chain",
    "verify_history",
    "verify_jsonl",
]

ENV_AUDIT_KEY = "ALGENTA_AUDIT_KEY"
"""The governed record lists, in the order a node's new records are sealed."""
CHAIN_FIELDS: tuple[str, ...] = ("seq", "prev", "hash")
GENESIS = "0" * 64
"""The ``prev`` of a thread's first record."""
_DOMAIN = b"algenta-graph/chain/v1\n"


def audit_key(key: str | bytes | None = None) -> bytes | None:
    """The HMAC key: ``key`` if given, else ``ALGENTA_AUDIT_KEY`` (UTF-8), else ``None``."""
    if key is None:
        key = os.environ.get(ENV_AUDIT_KEY) or None
    if key is None:
        return None
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


_SAFE_INT = 2**53 - 1


def _plain(value: Any) -> Any:
    """The JSON value JCS encodes for ``value`` (mappings to dicts with string keys, tuples to
    lists), with what JCS cannot encode made encodable, so sealing never fails a node:

    - an integer beyond +/-(2**53 - 1) becomes ``{"$int": "<decimal>"}``;
    - a NaN or infinite float becomes ``{"$float": "NaN" | "Infinity" | "-Infinity"}``;
    - a string that is not valid Unicode (a lone surrogate) becomes
      ``{"$str": <its backslash-escaped form>}``.

    (Only the hashed bytes change; the stored record keeps its value.)
    """
    if isinstance(value, Mapping):
        return {_plain_str(str(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if -_SAFE_INT <= value <= _SAFE_INT else {"$int": str(value)}
    if isinstance(value, float):
        if value != value:
            return {"$float": "NaN"}
        if value in (float("inf"), float("-inf")):
            return {"$float": "Infinity" if value > 0 else "-Infinity"}
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return {"$str": value.encode("utf-8", "backslashreplace").decode("utf-8")}
        return value
    return value


def _plain_str(key: str) -> str:
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return key.encode("utf-8", "backslashreplace").decode("utf-8")
    return key


def link_bytes(field_name: str, record: Mapping[str, Any]) -> bytes:
    """The bytes a record's ``hash`` is computed over (see the module docs)."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return _DOMAIN + rfc8785.dumps({"field": field_name, "record": _plain(body)})


def link_hash(field_name: str, record: Mapping[str, Any], key: bytes | None = None) -> str:
    """The ``hash`` of ``record`` in list ``field_name``: SHA-256, or HMAC-SHA-256 with ``key``."""
    data = link_bytes(field_name, record)
    if key is not None:
        return hmac.new(key, data, hashlib.sha256).hexdigest()
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class ChainHead:
    """The last link of a thread's chain: its ``seq`` (0 when empty) and ``hash``."""

    seq: int
    hash: str


def _records(values: Mapping[str, Any]) -> Iterator[tuple[str, int, Any]]:
    """``(list name, index, record)`` of every entry of the three lists; a value that is not a
    list at all is skipped here (:func:`verify_chain` reports it)."""
    for name in RECORD_FIELDS:
        entries = values.get(name)
        if isinstance(entries, list | tuple):
            for index, record in enumerate(entries):
                yield name, index, record


def a_type(value: Any) -> str:
    """``value``'s type with its article, for messages: ``a str``, ``an int``."""
    name = type(value).__name__
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name


def _seq_of(record: Any) -> int | None:
    """A record's ``seq`` when it is a valid one (an int >= 1), else ``None``."""
    seq = record.get("seq") if isinstance(record, Mapping) else None
    if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 1:
        return seq
    return None


def chain_head(values: Mapping[str, Any]) -> ChainHead:
    """The head of the chain in ``values`` (a state): the sealed record with the highest ``seq``.

    Does not verify anything (see :func:`verify_chain`).
    """
    best = ChainHead(0, GENESIS)
    for _, _, record in _records(values):
        seq = _seq_of(record)
        if seq is not None and seq > best.seq:
            digest = record.get("hash")
            if isinstance(digest, str):
                best = ChainHead(seq, digest)
    return best


def seal(
    state: Mapping[str, Any],
    update: Mapping[str, Any] | None,
    *,
    key: str | bytes | None = None,
) -> dict[str, Any]:
    """``update`` with its new governed records linked to the chain head found in ``state``.

    Call it on a node's update just before returning it (for a ``Command``, on its ``update``).
    New records are taken receipts first, then denials, then operator decisions, each list in
    order; each gets ``seq``, ``prev`` and ``hash`` (any such fields it had are replaced).
    Other keys of ``update`` are returned unchanged. ``key`` defaults to ``ALGENTA_AUDIT_KEY``.

    >>> sealed = seal({"receipts": []}, {"receipts": [{"decision_id": "d1"}], "messages": []})
    >>> r = sealed["receipts"][0]; (r["seq"], r["prev"] == GENESIS, len(r["hash"]))
    (1, True, 64)
    """
    if update is None:
        return {}
    secret = audit_key(key)
    head = chain_head(state)
    seq, prev = head.seq, head.hash
    out = dict(update)
    for name in RECORD_FIELDS:
        if name not in update or update[name] is None:
            continue
        new = update[name]
        records = [new] if isinstance(new, Mapping) else list(new)
        sealed: list[dict[str, Any]] = []
        for record in records:
            if not isinstance(record, Mapping):
                raise TypeError(f"a {name} record must be a dict, not {type(record).__name__}")
            seq += 1
            linked = {k: v for k, v in record.items() if k not in CHAIN_FIELDS}
            linked["seq"] = seq
            linked["prev"] = prev
            linked["hash"] = prev = link_hash(name, linked, secret)
            sealed.append(linked)
        out[name] = sealed
    return out


# ---------------------------------------------------------------------------------------------
# verifying


@dataclass(frozen=True)
class Broken:
    """Where a chain breaks: the record (list and index, its ``seq``) and why; with
    :func:`verify_history`, also the checkpoint it was found in (its id and step)."""

    field: str | None
    index: int | None
    seq: int | None
    reason: str
    checkpoint: str | None = None
    step: int | None = None

    def __str__(self) -> str:
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
    return _verify(values, secret, expected, lambda name, record: link_hash(name, record, secret))


Hasher = Callable[[str, Mapping[str, Any]], str]


def _verify(
    values: Mapping[str, Any],
    secret: bytes | None,
    expected: ChainHead | None,
    hasher: Hasher,
) -> ChainReport:
    problems: list[Broken] = []
    entries: list[tuple[int, str, int, Mapping[str, Any]]] = []
    count = 0
    for name in RECORD_FIELDS:
        listed = values.get(name)
        if listed is not None and not isinstance(listed, list | tuple):
            problems.append(Broken(name, None, None, f"not a list of records ({a_type(listed)})"))
    for name, index, record in _records(values):
        count += 1
        if not isinstance(record, Mapping):
            problems.append(
                Broken(name, index, None, f"not a record (a JSON object): {a_type(record)}")
            )
            continue
        seq = _seq_of(record)
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


# ---------------------------------------------------------------------------------------------
# checkpoints: every checkpoint of a thread's history


class _HashMemo:
    """``link_hash`` remembered by the record's exact content (its pickle: types and values,
    so ``1``, ``1.0`` and ``True`` never share an entry), so that a record that stays the same
    through many checkpoints is hashed once. A record that cannot be pickled is hashed each
    time."""

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
    """Whether two stored values are the same JSON value, as the chain hashes them: ``True``
    is not ``1``, ``1`` is not ``1.0``, keys compare as the strings they are hashed as, and a
    list and a tuple with the same items are the same array."""
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
        return b != b  # NaN
    return bool(a == b)


def _where(cp: StoredCheckpoint) -> str:
    return f"checkpoint {cp.checkpoint_id}" + (f" (step {cp.step})" if cp.step is not None else "")


def _compare(
    parent: StoredCheckpoint,
    child: StoredCheckpoint,
    broken_in_parent: set[tuple[str | None, int | None]],
    broken_in_child: set[tuple[str | None, int | None]],
) -> list[Broken]:
    """What ``child`` lost or changed of ``parent``'s records: the lists only ever grow, and a
    list whose channel version is the same in both (LangGraph did not write it in between)
    must be the same list."""
    found: list[Broken] = []

    def problem(name: str, index: int, record: Any, why: str) -> None:
        found.append(Broken(name, index, _seq_of(record), why, child.checkpoint_id, child.step))

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
        version = parent.versions.get(name)
        if version is not None and child.versions.get(name) == version:
            for index in range(len(was), len(now)):
                problem(
                    name,
                    index,
                    now[index],
                    f"not in {_where(parent)}, which it follows, though {name} was not written "
                    "in between (its channel version is the same): added outside the graph, "
                    "or deleted from that checkpoint?",
                )
    return found


def verify_history(
    checkpoints: Sequence[StoredCheckpoint],
    *,
    key: str | bytes | None = None,
    expected: ChainHead | None = None,
) -> ChainReport:
    """Verify **every checkpoint** of one thread (:func:`verify_chain` on each), and each
    checkpoint against the one it follows (``parent_id``): a record there must still be here,
    unchanged. Each problem names the checkpoint it was found in; a problem carried unchanged
    into later checkpoints is named once, where it first appears. A checkpoint whose parent is
    missing from the history is a problem too (what it held cannot be compared).

    ``checkpoints``: the thread's root checkpoints
    (:func:`algenta_graph.serving.checkpointer.read_history`), in any order (LangGraph's ids sort in
    creation order; time travel branches the history, and each branch is checked along its
    own parents). ``count`` and ``head`` are those of the latest checkpoint, and ``expected``
    (a head exported before) is checked against it. Reads only.
    """
    secret = audit_key(key)
    hasher = _HashMemo(secret)
    ordered = sorted(checkpoints, key=lambda c: c.checkpoint_id)
    if not ordered:
        return _verify({}, secret, expected, hasher)
    by_id = {cp.checkpoint_id: cp for cp in ordered}
    own: dict[str, set[tuple[Any, ...]]] = {}  # each checkpoint's problems (to skip inherited)
    bad: dict[str, set[tuple[str | None, int | None]]] = {}  # its records that fail on their own
    problems: list[Broken] = []
    last = ordered[-1]
    report = _verify(last.values, secret, expected, hasher)
    for cp in ordered:
        mine = report if cp is last else _verify(cp.values, secret, None, hasher)
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
            problems += _compare(parent, cp, broken_before, bad[cp.checkpoint_id])
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
    """Verify every thread's chain (or ``thread``'s) through **every checkpoint** of its
    history (:func:`verify_history`).

    ``source``: a SQLite checkpoint file path (opened read-only) or a checkpoint saver with a
    synchronous ``list`` (for an async saver or a PostgreSQL URL use :func:`averify_audit`).
    ``expected``: heads exported before, per thread (:func:`read_heads`); a thread that has
    vanished is reported. Threads of another graph sharing the store are left out
    (:func:`algenta_graph.audit.split_threads`); a store holding none of ours raises
    :class:`~algenta_graph.serving.checkpointer.RecordsFileError`.
    """
    from algenta_graph.serving.checkpointer import read_history

    history = read_history(source, thread, fields=RECORD_FIELDS)
    return verify_threads(history, _name(source), key=key, expected=expected, thread=thread)


async def averify_audit(
    saver: Any,
    thread: str | None = None,
    *,
    key: str | bytes | None = None,
    expected: Mapping[str, ChainHead] | None = None,
) -> dict[str, ChainReport]:
    """:func:`verify_audit` for an async checkpoint saver (``alist``), a SQLite file, or a
    ``postgresql://`` URL (opened without creating anything)."""
    from algenta_graph.serving.checkpointer import aread_history

    history = await aread_history(saver, thread, fields=RECORD_FIELDS)
    return verify_threads(history, _name(saver), key=key, expected=expected, thread=thread)


def _name(source: Any) -> str:
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
) -> dict[str, ChainReport]:
    """:func:`verify_history` for each algenta-graph thread of ``history`` (``{thread_id:
    checkpoints}``, as :func:`algenta_graph.serving.checkpointer.read_history` returns it; ``where``
    names the store in errors). Threads of another graph are left out; a thread an exported
    head names that is gone, or no longer looks like an algenta-graph thread, is reported."""
    from algenta_graph.audit.records import no_thread_of_ours, split_threads

    ours, foreign = split_threads(history)
    if foreign and not ours:
        raise no_thread_of_ours(where, foreign)
    reports = {
        tid: verify_history(history[tid], key=key, expected=(expected or {}).get(tid))
        for tid in ours
    }
    return _gone(reports, expected, thread, foreign)


def _gone(
    reports: dict[str, ChainReport],
    expected: Mapping[str, ChainHead] | None,
    thread: str | None,
    foreign: Mapping[str, str] | None = None,
) -> dict[str, ChainReport]:
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


def _reports(
    latest: Mapping[str, Mapping[str, Any]],
    key: str | bytes | None,
    expected: Mapping[str, ChainHead] | None,
    thread: str | None,
) -> dict[str, ChainReport]:
    reports = {
        tid: verify_chain(values, key=key, expected=(expected or {}).get(tid))
        for tid, values in sorted(latest.items())
    }
    return _gone(reports, expected, thread)


# ---------------------------------------------------------------------------------------------
# JSONL export, verified offline


def export_jsonl(
    threads: Mapping[str, Mapping[str, Any]],
    out: IO[str],
) -> dict[str, ChainHead]:
    """Write every thread's records, in ``seq`` order, then its chain head, one JSON per line.

    ``threads``: ``{thread_id: values}``. Lines::

        {"type": "record", "thread_id": ..., "field": "receipts", "record": {..., "hash": ...}}
        {"type": "head", "thread_id": ..., "seq": N, "hash": "...", "count": N}

    Returns the heads written (the last *record's* ``seq``/``hash``, as stored; verify first
    if the export should only contain intact chains). Keep a copy of the head lines elsewhere:
    :func:`verify_jsonl` against them detects a truncated tail.
    """
    heads: dict[str, ChainHead] = {}
    for tid, values in threads.items():
        rows = sorted(
            _records(values),
            key=lambda r: (_sort_seq(r[2]), RECORD_FIELDS.index(r[0]), r[1]),
        )
        for name, _, record in rows:
            line: dict[str, Any] = {
                "type": "record",
                "thread_id": tid,
                "field": name,
                "record": dict(record) if isinstance(record, Mapping) else record,
            }
            # ASCII only: a raw U+2028 in a record would split the line for some readers
            out.write(json.dumps(line, sort_keys=True) + "\n")
        head = chain_head(values)
        heads[tid] = head
        line = {
            "type": "head",
            "thread_id": tid,
            "seq": head.seq,
            "hash": head.hash,
            "count": len(rows),
        }
        out.write(json.dumps(line, sort_keys=True) + "\n")
    return heads


def read_jsonl(
    lines: Iterable[str],
) -> tuple[dict[str, dict[str, list[dict[str, Any]]]], dict[str, ChainHead]]:
    """An export's records per thread (as state values) and its head lines."""
    threads: dict[str, dict[str, list[dict[str, Any]]]] = {}
    heads: dict[str, ChainHead] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            tid = str(row["thread_id"])
            if row["type"] == "record":
                if row["field"] not in RECORD_FIELDS:
                    raise ValueError(f"unknown field {row['field']!r}")
                values = threads.setdefault(tid, {f: [] for f in RECORD_FIELDS})
                values[row["field"]].append(row["record"])
            elif row["type"] == "head":
                heads[tid] = ChainHead(int(row["seq"]), str(row["hash"]))
                threads.setdefault(tid, {f: [] for f in RECORD_FIELDS})
            else:
                raise ValueError(f"unknown type {row['type']!r}")
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"line {number}: not an algenta-graph audit export: {exc}") from None
    return threads, heads


def read_heads(path_or_lines: str | os.PathLike[str] | Iterable[str]) -> dict[str, ChainHead]:
    """The head lines of an export (a file path, or its lines)."""
    if isinstance(path_or_lines, str | os.PathLike):
        with open(path_or_lines, encoding="utf-8") as f:
            return read_jsonl(f)[1]
    return read_jsonl(path_or_lines)[1]


def verify_jsonl(
    path_or_lines: str | os.PathLike[str] | Iterable[str],
    *,
    key: str | bytes | None = None,
    expected: Mapping[str, ChainHead] | None = None,
) -> dict[str, ChainReport]:
    """Verify an export offline: every link, the export's own head lines, and ``expected``
    (heads exported before, :func:`read_heads`), which exposes a truncated tail."""
    if isinstance(path_or_lines, str | os.PathLike):
        with open(path_or_lines, encoding="utf-8") as f:
            threads, heads = read_jsonl(f)
    else:
        threads, heads = read_jsonl(path_or_lines)
    reports = _reports(threads, key, expected, None)
    for tid, report in list(reports.items()):
        own = heads.get(tid)
        problem: Broken | None = None
        if own is None and report.count:
            problem = Broken(None, None, None, "the export has no head line for this thread")
        elif own is not None and own != report.head:
            problem = Broken(
                None,
                None,
                own.seq,
                f"the export's head line (seq {own.seq}) is not its last intact link "
                f"(seq {report.head.seq})",
            )
        if problem is not None:
            problems = (*report.problems, problem)
            reports[tid] = ChainReport(False, report.count, report.head, problems[0], problems)
    return reports


SHOWN_PROBLEMS = 20
"""How many problems of one thread :func:`format_reports` lists (the rest are counted)."""


def format_reports(reports: Mapping[str, ChainReport]) -> str:
    """One line per thread (``ok`` or ``BROKEN`` with the first broken record and why), each
    further problem of a broken thread indented under it (up to :data:`SHOWN_PROBLEMS`), then
    a summary line; for ``algenta-graph receipts --verify``.

    >>> print(format_reports({"t1": verify_chain({})}))
    t1: ok: 0 record(s), head seq 0 0000000000000000
    1 thread(s), 0 record(s): all chains intact
    """
    lines: list[str] = []
    for tid, report in reports.items():
        lines.append(f"{tid}: {report}")
        more = report.problems[1:]
        lines += [f"  also: {problem}" for problem in more[: SHOWN_PROBLEMS - 1]]
        if len(more) > SHOWN_PROBLEMS - 1:
            lines.append(f"  ... and {len(more) - SHOWN_PROBLEMS + 1} more problem(s)")
    broken = [tid for tid, report in reports.items() if not report.ok]
    count = sum(report.count for report in reports.values())
    lines.append(
        f"{len(reports)} thread(s), {count} record(s): "
        + (f"{len(broken)} BROKEN chain(s): {', '.join(broken)}" if broken else "all chains intact")
    )
    return "\n".join(lines)


def report_dict(report: ChainReport) -> dict[str, Any]:
    """A report as JSON-ready data (for ``--verify --jsonl`` output)."""
    return asdict(report)


def records_in_order(values: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(field, record)`` for every record of ``values``, in ``seq`` order (unsealed last)."""
    rows = sorted(_records(values), key=lambda r: (_sort_seq(r[2]), r[1]))
    return [(name, record) for name, _, record in rows]


def _sort_seq(record: Any) -> int:
    seq = _seq_of(record)
    return seq if seq is not None else 1 << 62
