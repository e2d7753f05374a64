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
then operator decisions, each list in order). Verifying
(:func:`~algenta_graph.audit.verification.verify_chain`, and over a store
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
checkpoint it was found in, and a record that appears must be one the step between them wrote
(its list's channel version, and the step's writes where the store keeps them). It does not
check the pending writes of a step that has not finished (they are sealed into the next
checkpoint, and checked there once it is written), nor checkpoints of subgraphs (a non-empty
``checkpoint_ns``).

What the chain does not prove: with plain SHA-256 anyone who can write a thread's state can
append records with valid links (the served graph refuses such writes; see
:mod:`algenta_graph.serving.auth`); with ``ALGENTA_AUDIT_KEY`` they cannot without the key. A
truncated tail is only visible against a head kept elsewhere (or in the writes of the step
that wrote it, while the store keeps them). Whoever holds the key (the server process) can
forge anything.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import rfc8785

from algenta_graph.state import RECORD_FIELDS

__all__ = [
    "CHAIN_FIELDS",
    "ENV_AUDIT_KEY",
    "GENESIS",
    "ChainHead",
    "a_type",
    "audit_key",
    "chain_head",
    "link_bytes",
    "link_hash",
    "record_items",
    "records_in_order",
    "seal",
    "seq_of",
    "sort_seq",
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

    A value that is not a list at all is skipped here (``verify_chain`` reports it).
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

    Does not verify anything (see :func:`~algenta_graph.audit.verification.verify_chain`).
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


def records_in_order(values: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(field, record)`` for every record of ``values``, in ``seq`` order (unsealed last)."""
    rows = sorted(record_items(values), key=lambda r: (sort_seq(r[2]), r[1]))
    return [(name, record) for name, _, record in rows]


def sort_seq(record: Any) -> int:
    """A record's ``seq`` as a sort key (an unsealed record sorts after every sealed one)."""
    seq = seq_of(record)
    return seq if seq is not None else 1 << 62
