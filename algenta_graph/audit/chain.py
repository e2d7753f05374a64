r"""The tamper-evident chain of a thread's governed records.

Every governed record (a receipt, a denial, an operator decision) carries three fields:

- ``seq``: its position in the thread's chain, from 1, one chain across the three lists;
- ``prev``: the ``hash`` of the record with ``seq - 1`` (:data:`GENESIS` for the first);
- ``hash``: the lowercase hex SHA-256 of :func:`link_bytes` (the record without ``hash``,
  which includes ``seq`` and ``prev``, and the list it is in), or, with ``ALGENTA_AUDIT_KEY``
  set, its HMAC-SHA-256 under that key.

The encoding is RFC 8785 (JSON Canonicalization Scheme, the ``rfc8785`` package)::

    link_bytes = b"algenta-graph/chain/v1\n" + JCS({"field": <list name>, "record": <record
                 without "hash">})

so a verifier in any language can recompute a link: sort keys by UTF-16 code units, no
whitespace, ECMAScript number formatting (``30.0`` and ``30`` encode the same). Values JCS
cannot encode (integers beyond 2**53 - 1, NaN/infinite floats, lone surrogates) are hashed in a
tagged form instead of failing (see ``_plain``).

Sealing (:func:`seal`) happens in the graph's nodes: a node's update is linked to the chain head
found in the node's input state, its new records taken in a fixed order (receipts, then denials,
then operator decisions, each list in order). Verifying (:func:`verify_chain`, and over a store
:func:`~algenta_graph.audit.history.verify_audit`) recomputes every link and names the first
broken record: an edited field
(hash mismatch), a deleted record (a gap in ``seq``), two records reordered (a list out of
``seq`` order, or a ``prev`` that is not its predecessor's hash), an injected record (a duplicate
``seq`` or a bad link) and, against a chain head exported before
(:mod:`~algenta_graph.audit.export`), a truncated tail.
:func:`~algenta_graph.audit.history.verify_history` (what ``algenta-graph receipts --verify``
runs) does this for **every checkpoint** of a thread, not
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
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import rfc8785

from algenta_graph.state import RECORD_FIELDS

__all__ = [
    "CHAIN_FIELDS",
    "ENV_AUDIT_KEY",
    "GENESIS",
    "RECORD_FIELDS",
    "Broken",
    "ChainHead",
    "ChainReport",
    "audit_key",
    "chain_head",
    "format_reports",
    "gone_threads",
    "link_bytes",
    "link_hash",
    "record_items",
    "records_in_order",
    "report_dict",
    "seal",
    "seq_of",
    "sort_seq",
    "verify_chain",
    "verify_threads_values",
    "verify_values",
]

ENV_AUDIT_KEY = "ALGENTA_AUDIT_KEY"
"""The environment variable holding the chain's HMAC key (plain SHA-256 without it)."""
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
    """The JSON value JCS encodes for ``value``, with what JCS cannot encode made encodable.

    Mappings become dicts with string keys and tuples lists; what JCS cannot encode is made
    encodable, so sealing never fails a node:

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


def record_items(values: Mapping[str, Any]) -> Iterator[tuple[str, int, Any]]:
    """``(list name, index, record)`` of every entry of the three lists.

    A value that is not a list at all is skipped here (:func:`verify_chain` reports it).
    """
    for name in RECORD_FIELDS:
        entries = values.get(name)
        if isinstance(entries, list | tuple):
            for index, record in enumerate(entries):
                yield name, index, record


def a_type(value: Any) -> str:
    """``value``'s type with its article, for messages: ``a str``, ``an int``."""
    name = type(value).__name__
    return ("an " if name[:1].lower() in "aeiou" else "a ") + name


def seq_of(record: Any) -> int | None:
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
    for _, _, record in record_items(values):
        seq = seq_of(record)
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


# ---------------------------------------------------------------------------------------------
# checkpoints: every checkpoint of a thread's history


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


# ---------------------------------------------------------------------------------------------
# JSONL export, verified offline


SHOWN_PROBLEMS = 20
"""How many problems of one thread :func:`format_reports` lists (the rest are counted)."""


def format_reports(reports: Mapping[str, ChainReport]) -> str:
    """The reports as text, for ``algenta-graph receipts --verify``.

    One line per thread (``ok`` or ``BROKEN`` with the first broken record and why), each
    further problem of a broken thread indented under it (up to :data:`SHOWN_PROBLEMS`), then
    a summary line.

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
    rows = sorted(record_items(values), key=lambda r: (sort_seq(r[2]), r[1]))
    return [(name, record) for name, _, record in rows]


def sort_seq(record: Any) -> int:
    """A record's ``seq`` as a sort key (an unsealed record sorts after every sealed one)."""
    seq = seq_of(record)
    return seq if seq is not None else 1 << 62
