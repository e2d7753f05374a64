"""The tamper-evident chain of governed records (``algenta_graph.audit.chain``).

Clean chains are generated through :func:`seal` and the state's own append-only reducer, as the
graph's nodes will produce them; each kind of tampering is then applied to a copy and must be
detected and named: an edited field, a deleted record, two records reordered, a truncated tail
(against a head exported before), an injected record. A real graph checkpointed to SQLite
(with an interrupt and a resume) is verified from the file.
"""

from __future__ import annotations

import copy
import io
import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest

from algenta_graph.audit.chain import (
    ENV_AUDIT_KEY,
    GENESIS,
    ChainHead,
    chain_head,
    link_bytes,
    link_hash,
    seal,
)
from algenta_graph.audit.export import export_jsonl, read_heads, verify_jsonl
from algenta_graph.audit.history import averify_audit, verify_audit
from algenta_graph.audit.verification import verify_chain
from algenta_graph.state import RECORD_FIELDS, append_records


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_AUDIT_KEY, raising=False)


def _apply(state: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """The graph's reducer on the record lists (append-only)."""
    out = dict(state)
    for name in RECORD_FIELDS:
        if name in update:
            out[name] = append_records(state.get(name), update[name])
    return out


def _receipt(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "kind": "receipt",
        "decision_id": f"dec_{i:05d}",
        "webhook_url": "http://127.0.0.1:9/hook",
        "execution_status": rng.choice(["delivered", "failed"]),
        "response_code": rng.choice([200, 500, None]),
        "executed_at": f"2026-11-30T20:{i % 60:02d}:00+00:00",
        "payload_summary": {"amount": rng.random() * 1e6, "items": [1, 2.5, "x"], "ok": True},
        "safety_overridden": rng.random() < 0.5,
        "tool_call_id": f"call_{i}",
        "source": "model",
    }


def _denial(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "kind": "denial",
        "gate": rng.choice(["confidence", "risk_floor", "idempotency"]),
        "code": "E_GATE",
        "message": rng.choice(["blocked: confidence 0.3 < 0.6", '日本語 ✓ \u2028 "quoted"']),
        "override_hint": None,
        "status_code": 403,
        "decision_id": f"dec_{i:05d}",
        "tool_call_id": f"call_{i}",
        "source": "model",
        "policy": "escalate",
        "timeout_seconds": 30.0,
    }


def _tool_call(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "kind": "tool_call",
        "tool": rng.choice(["delete_customer", "refund"]),
        "server": "crm",
        "catalog_name": "delete_customer",
        "tool_call_id": f"call_{i}",
        "args_digest": "sha256:" + f"{i:064d}",
        "turn": "m1",
        "time": "2026-01-01T00:00:00+00:00",
    }


def _decision(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "operator": rng.choice(["ana", "gus"]),
        "reason": "approved in writing",
        "action": "override",
        "gate": "confidence",
        "decision_id": f"dec_{i:05d}",
        "override_flag": "override_safety",
        "result": "receipt",
        "outcome": {"execution_status": "delivered", "response_code": 200},
        "tool_call_id": f"call_{i}",
        "time": "2026-11-30T20:00:00+00:00",
    }


def _clean_thread(rng: random.Random, steps: int, key: str | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {name: [] for name in RECORD_FIELDS}
    n = 0
    for _ in range(steps):
        update: dict[str, Any] = {"messages": []}
        for name, make in zip(
            RECORD_FIELDS, (_receipt, _denial, _decision, _tool_call), strict=True
        ):
            k = rng.choice([0, 0, 1, 1, 2, 3])
            if k:
                update[name] = [make(rng, n + j) for j in range(k)]
                n += k
            elif rng.random() < 0.5:
                update[name] = []  # the graph writes empty lists every turn
        state = _apply(state, seal(state, update, key=key))
    return state


def _count(values: dict[str, Any]) -> int:
    return sum(len(values.get(name) or []) for name in RECORD_FIELDS)


# ---------------------------------------------------------------------------------------------
# sealing


def test_seal_links_an_update_in_a_fixed_order_to_the_head_in_state() -> None:
    state: dict[str, Any] = {"receipts": [], "denials": [], "operator_decisions": []}
    first = seal(state, {"denials": [{"gate": "confidence"}], "messages": ["kept"]})
    assert first["messages"] == ["kept"]
    [d1] = first["denials"]
    assert (d1["seq"], d1["prev"]) == (1, GENESIS)
    state = _apply(state, first)
    update: dict[str, Any] = {
        "operator_decisions": [{"operator": "ana"}],
        "denials": {"gate": "risk_floor"},  # a single record, as the reducer accepts
        "receipts": [{"decision_id": "a"}, {"decision_id": "b", "seq": 99, "hash": "forged"}],
    }
    second = seal(state, update)
    chain = [
        *second["receipts"],
        *second["denials"],
        *second["operator_decisions"],
    ]
    assert [r["seq"] for r in chain] == [2, 3, 4, 5]
    assert chain[0]["prev"] == d1["hash"]
    for before, after in itertools.pairwise(chain):
        assert after["prev"] == before["hash"]
    assert second["receipts"][1]["hash"] != "forged"
    assert update["receipts"][0] == {"decision_id": "a"}  # the input is not mutated
    state = _apply(state, second)
    assert chain_head(state) == ChainHead(5, chain[-1]["hash"])
    report = verify_chain(state)
    assert report.ok and report.count == 5 and report.head == chain_head(state), report
    assert seal(state, None) == {}
    assert seal(state, {"messages": []}) == {"messages": []}


def test_the_link_is_jcs_with_a_domain_and_the_list_name() -> None:
    record = {"b": 1, "a": [1.0, "é"], "seq": 1, "prev": GENESIS, "hash": "ignored"}
    data = link_bytes("receipts", record)
    assert data.startswith(b"algenta-graph/chain/v1\n")
    body = json.loads(data.split(b"\n", 1)[1])
    assert body == {"field": "receipts", "record": {k: v for k, v in record.items() if k != "hash"}}
    assert b'"a":[1,"\xc3\xa9"]' in data  # JCS: sorted keys, no spaces, 1.0 -> 1, UTF-8
    # the list is part of the link: a receipt moved into denials does not verify
    assert link_hash("receipts", record) != link_hash("denials", record)
    assert link_hash("receipts", record, b"k") != link_hash("receipts", record)


def test_values_jcs_cannot_encode_are_sealed_not_fatal() -> None:
    odd = {
        "big": 2**64,
        "small": -(2**60),
        "nan": float("nan"),
        "inf": float("inf"),
        "lone": "a\ud800",
        "\udfff": 1,
    }
    state = _apply({}, seal({}, {"receipts": [odd]}))
    assert verify_chain(state).ok
    # the tagged forms do not collide with the plain values
    changed = copy.deepcopy(state)
    changed["receipts"][0]["big"] = str(2**64)
    assert not verify_chain(changed).ok
    changed = copy.deepcopy(state)
    changed["receipts"][0]["big"] = 2**64 + 1
    assert not verify_chain(changed).ok


def test_zero_false_alarms_over_clean_chains() -> None:
    rng = random.Random(11)
    total = 0
    threads = {}
    for t in range(40):
        key = "s3cret" if t % 2 else None
        values = _clean_thread(rng, steps=rng.randint(5, 25), key=key)
        threads[f"t{t}"] = (values, key)
        total += _count(values)
    alarms = 0
    for values, key in threads.values():
        for candidate in (values, json.loads(json.dumps(values))):
            report = verify_chain(candidate, key=key)
            alarms += not report.ok
            assert report.count == _count(values)
            assert report.head == chain_head(values)
            assert verify_chain(candidate, key=key, expected=chain_head(values)).ok
    print(f"FIGURE chain: 0 false alarms over {total} clean records in {len(threads)} threads")
    assert total >= 1000
    assert alarms == 0


# ---------------------------------------------------------------------------------------------
# tampering


@pytest.fixture
def thread() -> dict[str, Any]:
    values = _clean_thread(random.Random(5), steps=12)
    assert all(len(values[name]) >= 3 for name in RECORD_FIELDS)
    assert verify_chain(values).ok
    return values


def test_an_edited_field_is_named(thread: dict[str, Any]) -> None:
    for name in RECORD_FIELDS:
        bad = copy.deepcopy(thread)
        record = bad[name][1]
        record["decision_id"] = "dec_forged"
        report = verify_chain(bad)
        assert not report.ok
        assert report.broken is not None
        assert (report.broken.field, report.broken.index) == (name, 1)
        assert report.broken.seq == record["seq"]
        assert "hash mismatch" in report.broken.reason
        assert report.head.seq == record["seq"] - 1  # the last intact link
        assert len(report.problems) == 1, report.problems


def test_an_edited_chain_field_is_named(thread: dict[str, Any]) -> None:
    bad = copy.deepcopy(thread)
    bad["receipts"][0]["operator"] = "mallory"  # an added field is an edit too
    assert "hash mismatch" in str(verify_chain(bad).broken)


def test_a_deleted_record_is_named(thread: dict[str, Any]) -> None:
    bad = copy.deepcopy(thread)
    gone = bad["denials"].pop(1)
    report = verify_chain(bad)
    assert not report.ok and report.broken is not None
    assert report.broken.seq == gone["seq"] + 1
    assert f"missing seq {gone['seq']}" in report.broken.reason
    assert "deleted" in report.broken.reason


def test_two_reordered_records_are_named(thread: dict[str, Any]) -> None:
    bad = copy.deepcopy(thread)
    ops = bad["operator_decisions"]
    ops[0], ops[1] = ops[1], ops[0]
    report = verify_chain(bad)
    assert not report.ok and report.broken is not None
    assert report.broken.field == "operator_decisions"
    assert "out of order" in report.broken.reason
    # and with their seq swapped to hide it, the links break
    bad = copy.deepcopy(thread)
    ops = bad["operator_decisions"]
    ops[0], ops[1] = ops[1], ops[0]
    ops[0]["seq"], ops[1]["seq"] = ops[1]["seq"], ops[0]["seq"]
    report = verify_chain(bad)
    assert not report.ok and report.broken is not None
    assert report.broken.field == "operator_decisions"
    assert "prev is not the hash" in report.broken.reason or "hash mismatch" in str(report.broken)


def test_a_truncated_tail_is_named_against_a_head_exported_before(
    thread: dict[str, Any],
) -> None:
    out = io.StringIO()
    heads = export_jsonl({"t": thread}, out)
    head = read_heads(out.getvalue().splitlines())["t"]
    assert head == heads["t"] == chain_head(thread)
    bad = copy.deepcopy(thread)
    last = max(RECORD_FIELDS, key=lambda n: bad[n][-1]["seq"])
    bad[last].pop()
    # without a head kept elsewhere a clean truncation is a valid, shorter chain
    assert verify_chain(bad).ok
    report = verify_chain(bad, expected=head)
    assert not report.ok and report.broken is not None
    assert "truncated" in report.broken.reason
    assert f"seq {head.seq}" in report.broken.reason


def test_an_injected_record_is_named(thread: dict[str, Any]) -> None:
    # a forged record in the middle: a duplicate seq, and a link that does not verify
    bad = copy.deepcopy(thread)
    real = bad["receipts"][1]
    forged = {**real, "decision_id": "dec_forged"}
    forged["hash"] = link_hash("receipts", forged)
    bad["receipts"].insert(2, forged)
    report = verify_chain(bad)
    assert not report.ok and report.broken is not None
    assert "duplicate seq" in " ".join(p.reason for p in report.problems)
    # a forged record appended with a fresh seq and a correct plain link verifies without a
    # key (that is what the key is for), and is named with one
    keyed = _clean_thread(random.Random(6), steps=8, key="s3cret")
    head = chain_head(keyed)
    forged = {"decision_id": "dec_forged", "seq": head.seq + 1, "prev": head.hash}
    forged["hash"] = link_hash("receipts", forged)
    keyed["receipts"].append(forged)
    report = verify_chain(keyed, key="s3cret")
    assert not report.ok and report.broken is not None
    assert report.broken.seq == head.seq + 1
    assert "forged without the key" in report.broken.reason
    unkeyed = _clean_thread(random.Random(6), steps=8)
    head = chain_head(unkeyed)
    forged = {"decision_id": "dec_forged", "seq": head.seq + 1, "prev": head.hash}
    forged["hash"] = link_hash("receipts", forged)
    unkeyed["receipts"].append(forged)
    assert verify_chain(unkeyed).ok  # the documented limit of an unkeyed chain


def test_a_keyed_chain_needs_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_AUDIT_KEY, "from-env")
    values = _clean_thread(random.Random(7), steps=6)  # sealed with the env key
    assert verify_chain(values).ok
    assert verify_chain(values, key="from-env").ok
    assert not verify_chain(values, key="other").ok
    monkeypatch.delenv(ENV_AUDIT_KEY)
    assert not verify_chain(values).ok


def test_unsealed_records_are_named() -> None:
    report = verify_chain({"receipts": [{"decision_id": "legacy"}]})
    assert not report.ok and report.broken is not None
    assert (report.broken.field, report.broken.index) == ("receipts", 0)
    assert "unsealed" in report.broken.reason


# ---------------------------------------------------------------------------------------------
# export, verified offline


def test_an_export_verifies_offline_and_shows_truncation(
    thread: dict[str, Any], tmp_path: Path
) -> None:
    other = _clean_thread(random.Random(8), steps=4)
    path = tmp_path / "audit.jsonl"
    with path.open("w") as f:
        heads = export_jsonl({"t": thread, "u": other}, f)
    assert all(r.ok for r in verify_jsonl(path).values())
    assert verify_jsonl(path, expected=read_heads(path))["t"].ok
    lines = path.read_text().splitlines()
    # drop the last record of "t" but keep its head line: the export contradicts itself
    t_records = [i for i, line in enumerate(lines) if '"thread_id": "t"' in line]
    cut = [line for i, line in enumerate(lines) if i != t_records[-2]]
    report = verify_jsonl(cut)["t"]
    assert not report.ok and report.broken is not None
    assert "head line" in report.broken.reason
    # drop the record and rewrite the head line: only the head kept from before shows it
    cut_head = chain_head(
        {
            n: [json.loads(line)["record"] for line in cut if f'"field": "{n}"' in line]
            for n in RECORD_FIELDS
        }
        | {}
    )
    rewritten = [
        line
        if not ('"type": "head"' in line and '"thread_id": "t"' in line)
        else json.dumps(
            {"type": "head", "thread_id": "t", "seq": cut_head.seq, "hash": cut_head.hash}
        )
        for line in cut
        if '"thread_id": "u"' not in line
    ]
    # (the other thread's lines are gone too: with the earlier heads, that is named)
    assert verify_jsonl(rewritten)["t"].ok
    reports = verify_jsonl(rewritten, expected=heads)
    assert not reports["t"].ok and "truncated" in str(reports["t"].broken)
    assert not reports["u"].ok and "gone" in str(reports["u"].broken)
    with pytest.raises(ValueError, match="line 1"):
        verify_jsonl(["{not json"])


def test_an_export_whose_head_line_keeps_its_seq_with_a_forged_hash_is_named(
    thread: dict[str, Any],
) -> None:
    out = io.StringIO()
    head = export_jsonl({"t": thread}, out)["t"]
    lines = out.getvalue().splitlines()
    forged = json.dumps(
        {"type": "head", "thread_id": "t", "seq": head.seq, "hash": "f" * 64, "count": 0}
    )
    report = verify_jsonl([*lines[:-1], forged])["t"]
    assert not report.ok and report.broken is not None
    assert f"head line (seq {head.seq}) is not its last intact link" in report.broken.reason
    assert report.head == head  # the records themselves are intact


def test_a_resealed_last_record_is_named_against_a_kept_head(thread: dict[str, Any]) -> None:
    out = io.StringIO()
    kept = export_jsonl({"t": thread}, out)
    bad = copy.deepcopy(thread)
    last = max(RECORD_FIELDS, key=lambda n: bad[n][-1]["seq"])
    record = bad[last][-1]
    record["decision_id"] = "dec_forged"
    record["hash"] = link_hash(last, record)  # re-sealed: its own link holds (no key)
    assert verify_chain(bad).ok  # alone, a valid chain
    report = verify_chain(bad, expected=kept["t"])
    assert not report.ok and report.broken is not None
    assert report.broken.seq == record["seq"] and "rewritten" in report.broken.reason
    # the same through an export of the re-sealed chain, checked against the kept head
    forged = io.StringIO()
    export_jsonl({"t": bad}, forged)
    reports = verify_jsonl(forged.getvalue().splitlines(), expected=kept)
    assert not reports["t"].ok and "rewritten" in str(reports["t"].broken)


# ---------------------------------------------------------------------------------------------
# a real graph, checkpointed, with an interrupt and a resume


def _sealing_graph(checkpointer: Any) -> Any:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    from algenta_graph.state import GovernedState

    def tool(state: GovernedState) -> dict[str, Any]:
        n = len(state.get("receipts") or []) + len(state.get("denials") or [])
        return seal(
            state,
            {
                "receipts": [{"decision_id": f"d{n}", "response_code": 200}],
                "denials": [
                    {"gate": "confidence", "decision_id": f"d{n + 1}", "policy": "escalate"}
                ],
                "operator_decisions": [],
            },
        )

    def handler(state: GovernedState) -> dict[str, Any]:
        answer = interrupt({"gate": "confidence"})
        return seal(
            state,
            {"operator_decisions": [{"operator": answer["operator"], "action": "override"}]},
        )

    builder = StateGraph(GovernedState)
    builder.add_node("tool", tool)
    builder.add_node("handler", handler)
    builder.add_edge(START, "tool")
    builder.add_edge("tool", "handler")
    builder.add_edge("handler", END)
    return builder.compile(checkpointer=checkpointer)


async def test_verify_audit_reads_every_thread_from_a_checkpoint_file(tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.types import Command

    db = tmp_path / "runs.sqlite"
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        graph = _sealing_graph(saver)
        for t in ("a", "b"):
            config: Any = {"configurable": {"thread_id": t}}
            for turn in range(3):
                await graph.ainvoke({"messages": [("user", f"go {turn}")]}, config)
                await graph.ainvoke(Command(resume={"operator": "ana"}), config)
        reports = await averify_audit(saver)
        assert {t: (r.ok, r.count) for t, r in reports.items()} == {"a": (True, 9), "b": (True, 9)}
        heads = {t: r.head for t, r in reports.items()}

        # a forged record written past the graph's nodes (state write access, no key)
        config = {"configurable": {"thread_id": "b"}}
        state = await graph.aget_state(config)
        forged = {"decision_id": "dec_forged", "seq": 4, "prev": "f" * 64, "hash": "0" * 64}
        await graph.aupdate_state(config, {"receipts": [forged]}, as_node="handler")
    reports = verify_audit(db)
    assert reports["a"].ok
    assert not reports["b"].ok and reports["b"].broken is not None
    assert reports["b"].broken.field == "receipts"
    assert "duplicate seq" in " ".join(p.reason for p in reports["b"].problems)
    assert verify_audit(db, "a", expected=heads)["a"].ok
    assert set(verify_audit(db, "a")) == {"a"}
    assert state.values["receipts"]  # (read before the forgery)
    with pytest.raises(FileNotFoundError):
        verify_audit(tmp_path / "nope.sqlite")
