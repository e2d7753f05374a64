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
:func:`read_heads`), a truncated tail.

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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import rfc8785

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
    "verify_jsonl",
]

ENV_AUDIT_KEY = "ALGENTA_AUDIT_KEY"
RECORD_FIELDS: tuple[str, ...] = ("receipts", "denials", "operator_decisions")
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


def _records(values: Mapping[str, Any]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    for name in RECORD_FIELDS:
        for index, record in enumerate(values.get(name) or ()):
            yield name, index, record


def chain_head(values: Mapping[str, Any]) -> ChainHead:
    """The head of the chain in ``values`` (a state): the sealed record with the highest ``seq``.

    Does not verify anything (see :func:`verify_chain`).
    """
    best = ChainHead(0, GENESIS)
    for _, _, record in _records(values):
        seq = record.get("seq") if isinstance(record, Mapping) else None
        if isinstance(seq, int) and not isinstance(seq, bool) and seq > best.seq:
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
    """Where a chain breaks: the record (list and index, its ``seq``) and why."""

    field: str | None
    index: int | None
    seq: int | None
    reason: str

    def __str__(self) -> str:
        where = f"{self.field}[{self.index}]" if self.field is not None else "chain"
        return f"{where} (seq {self.seq}): {self.reason}"


@dataclass(frozen=True)
class ChainReport:
    """The result of verifying one thread's chain.

    ``ok``: every link holds (and matches ``expected``, when a head exported before was given);
    ``count``: records seen; ``head``: the last intact link; ``broken``: the first break, if
    any; ``problems``: every break found, in ``seq`` order.
    """

    ok: bool
    count: int
    head: ChainHead
    broken: Broken | None = None
    problems: tuple[Broken, ...] = field(default_factory=tuple)

    def __str__(self) -> str:
        if self.ok:
            return f"ok: {self.count} record(s), head seq {self.head.seq} {self.head.hash[:16]}"
        return f"BROKEN: {self.broken} ({len(self.problems)} problem(s), {self.count} record(s))"


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
    problems: list[Broken] = []
    entries: list[tuple[int, str, int, Mapping[str, Any]]] = []
    count = 0
    for name, index, record in _records(values):
        count += 1
        if not isinstance(record, Mapping):
            problems.append(Broken(name, index, None, "not a record (a JSON object)"))
            continue
        seq = record.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
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
        digest = link_hash(name, record, secret)
        if not hmac.compare_digest(str(record.get("hash")), digest):
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
# checkpoints


def _latest_values(items: Iterable[Any], into: dict[str, dict[str, Any]]) -> None:
    for item in items:
        conf = item.config["configurable"]
        tid = str(conf["thread_id"])
        if conf.get("checkpoint_ns") or tid in into:
            continue  # newest first: the first one seen per thread is its latest
        values = item.checkpoint.get("channel_values") or {}
        into[tid] = {k: list(values.get(k) or []) for k in RECORD_FIELDS}


def _read_sqlite(path: Path, thread: str | None) -> dict[str, dict[str, Any]]:
    from algenta_graph.audit import read_thread_values  # the one read-only reader

    return {
        tid: {k: list(values.get(k) or []) for k in RECORD_FIELDS}
        for tid, values in read_thread_values(path, thread).items()
    }


def verify_audit(
    source: Any,
    thread: str | None = None,
    *,
    key: str | bytes | None = None,
    expected: Mapping[str, ChainHead] | None = None,
) -> dict[str, ChainReport]:
    """Verify every thread's chain (or ``thread``'s) from its latest checkpoint.

    ``source``: a SQLite checkpoint file path (opened read-only) or a checkpoint saver with a
    synchronous ``list`` (for an async saver use :func:`averify_audit`). ``expected``: heads
    exported before, per thread (:func:`read_heads`); a thread that has vanished is reported.
    """
    if isinstance(source, str | os.PathLike):
        latest = _read_sqlite(Path(source), thread)
    else:
        latest = {}
        config: Any = {"configurable": {"thread_id": thread}} if thread else None
        _latest_values(source.list(config), latest)
    return _reports(latest, key, expected, thread)


async def averify_audit(
    saver: Any,
    thread: str | None = None,
    *,
    key: str | bytes | None = None,
    expected: Mapping[str, ChainHead] | None = None,
) -> dict[str, ChainReport]:
    """:func:`verify_audit` for an async checkpoint saver (``alist``)."""
    latest: dict[str, dict[str, Any]] = {}
    config: Any = {"configurable": {"thread_id": thread}} if thread else None
    _latest_values([item async for item in saver.alist(config)], latest)
    return _reports(latest, key, expected, thread)


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
    for tid, head in (expected or {}).items():
        if tid not in reports and (thread is None or tid == thread) and head.seq > 0:
            gone = Broken(None, None, head.seq, "the thread is gone (the exported head had it)")
            reports[tid] = ChainReport(False, 0, ChainHead(0, GENESIS), gone, (gone,))
    return reports


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
            key=lambda r: (
                r[2].get("seq") if isinstance(r[2].get("seq"), int) else 1 << 62,
                RECORD_FIELDS.index(r[0]),
                r[1],
            ),
        )
        for name, _, record in rows:
            line: dict[str, Any] = {
                "type": "record",
                "thread_id": tid,
                "field": name,
                "record": dict(record),
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


def format_reports(reports: Mapping[str, ChainReport]) -> str:
    """One line per thread (``ok`` or ``BROKEN`` with the first broken record and why), then a
    summary line; for ``algenta-graph receipts --verify``.

    >>> print(format_reports({"t1": verify_chain({})}))
    t1: ok: 0 record(s), head seq 0 0000000000000000
    1 thread(s), 0 record(s): all chains intact
    """
    lines = [f"{tid}: {report}" for tid, report in reports.items()]
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
    rows = sorted(
        _records(values),
        key=lambda r: (r[2].get("seq") if isinstance(r[2].get("seq"), int) else 1 << 62, r[1]),
    )
    return [(name, record) for name, _, record in rows]
