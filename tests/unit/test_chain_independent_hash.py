"""The chain's links recomputed without ``algenta_graph.audit.chain``: from the rules its docstring
states, with RFC 8785 from the ``rfc8785`` package and again by hand, and SHA-256 (or
HMAC-SHA-256 with a key) from ``hashlib``.

Records with ``None`` values (``response_code: None`` on a receipt that was never answered,
``override_hint: None``, ``outcome: None``, a ``None`` nested in ``payload_summary``) are
sealed by :func:`seal`; every ``hash`` and ``prev`` must equal the independent computation,
and deleting a ``None`` field (at the top or nested) must be detected by :func:`verify_chain`
(a hash that skipped ``None`` values would let it go unseen).
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from typing import Any

import pytest
import rfc8785

from algenta_graph.audit.chain import ENV_AUDIT_KEY, GENESIS, seal
from algenta_graph.audit.verification import verify_chain

DOMAIN = b"algenta-graph/chain/v1\n"  # the docstring's link_bytes prefix
FIELDS = ("receipts", "denials", "operator_decisions")  # the docstring's sealing order


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_AUDIT_KEY, raising=False)


def _jcs_by_hand(value: Any) -> bytes:
    """RFC 8785 for the values used here (ASCII keys, strings, integers, booleans, null; no
    floats): keys sorted, no whitespace, UTF-8."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def _link(field: str, record: dict[str, Any], key: bytes | None = None) -> str:
    """The docstring's rule: JCS({"field": list name, "record": the record without "hash"})
    after the domain line; SHA-256, or HMAC-SHA-256 under the key."""
    body = {k: v for k, v in record.items() if k != "hash"}
    canonical = rfc8785.dumps({"field": field, "record": body})
    assert canonical == _jcs_by_hand({"field": field, "record": body})
    data = DOMAIN + canonical
    if key is not None:
        return hmac.new(key, data, hashlib.sha256).hexdigest()
    return hashlib.sha256(data).hexdigest()


RECEIPT = {
    "decision_id": "dec_1",
    "execution_status": "unknown",
    "response_code": None,  # the delivery timed out: no HTTP status
    "safety_overridden": False,
    "payload_summary": {"amount": 1200, "note": None},
    "tool_call_id": "call_1",
    "source": "model",
}
DENIAL = {
    "gate": "confidence",
    "code": "E_CONFIDENCE",
    "message": "confidence 0.3 < 0.6",
    "override_hint": None,
    "decision_id": "dec_2",
    "tool_call_id": "call_2",
    "source": "model",
    "policy": "escalate",
}
DECISION = {
    "operator": "ana",
    "reason": "declined",
    "action": "decline",
    "gate": "confidence",
    "decision_id": "dec_2",
    "override_flag": None,
    "result": "declined",
    "outcome": None,
    "tool_call_id": "call_2",
}


def _sealed(key: str | None = None) -> dict[str, list[dict[str, Any]]]:
    update = {"receipts": [RECEIPT], "denials": [DENIAL], "operator_decisions": [DECISION]}
    out = seal({"receipts": [], "denials": [], "operator_decisions": []}, update, key=key)
    return {name: out[name] for name in FIELDS}


@pytest.mark.parametrize("key", [None, "the audit key"], ids=["sha256", "hmac"])
def test_every_link_equals_the_independent_computation(key: str | None) -> None:
    sealed = _sealed(key)
    secret = key.encode() if key is not None else None
    prev = GENESIS
    for seq, name in enumerate(FIELDS, 1):  # one record each, sealed in the docstring's order
        [record] = sealed[name]
        assert (record["seq"], record["prev"]) == (seq, prev)
        assert record["hash"] == _link(name, record, secret), name
        prev = record["hash"]
    assert sealed["receipts"][0]["response_code"] is None  # kept in the record, and hashed
    assert verify_chain(sealed, key=key).ok


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("receipts", ("response_code",)),
        ("receipts", ("payload_summary", "note")),
        ("denials", ("override_hint",)),
        ("operator_decisions", ("outcome",)),
        ("operator_decisions", ("override_flag",)),
    ],
    ids=lambda v: ".".join(v) if isinstance(v, tuple) else v,
)
def test_deleting_a_null_field_is_detected(name: str, path: tuple[str, ...]) -> None:
    sealed = _sealed()
    tampered = copy.deepcopy(sealed)
    holder = tampered[name][0]
    for step in path[:-1]:
        holder = holder[step]
    assert holder[path[-1]] is None
    del holder[path[-1]]
    assert _link(name, tampered[name][0]) != sealed[name][0]["hash"]
    report = verify_chain(tampered)
    assert not report.ok and report.broken is not None
    assert (report.broken.field, report.broken.index) == (name, 0)
    assert "hash mismatch" in report.broken.reason


def test_a_null_field_and_a_missing_one_hash_apart() -> None:
    with_null = seal({}, {"receipts": [{"decision_id": "d", "response_code": None}]})
    without = seal({}, {"receipts": [{"decision_id": "d"}]})
    assert with_null["receipts"][0]["hash"] != without["receipts"][0]["hash"]
    assert with_null["receipts"][0]["hash"] == _link("receipts", with_null["receipts"][0])
    assert without["receipts"][0]["hash"] == _link("receipts", without["receipts"][0])
