"""``algenta-graph receipts --verify`` checks every checkpoint of a thread's history.

A real governed thread (reference engine over HTTP; a receipt, then a reported denial) is
checkpointed to SQLite and to a real PostgreSQL. Each of its stored checkpoints holds the
record lists as they were at that step; the latest one alone is what ``--verify`` used to
check. Here the history is changed behind the graph's back, on a copy each time, in ways the
latest checkpoint does not show, and each change must be named with the checkpoint it was
found in (exit 1):

- a record edited in an earlier checkpoint only;
- the chain's last record deleted from the latest checkpoint (its chain still verifies: it
  only looks shorter), and a record deleted from a checkpoint in the middle;
- a record rewritten in the latest checkpoint with its links recomputed (no audit key), so
  that the latest chain verifies on its own;
- a checkpoint deleted from the middle of the history;
- a record deleted from the checkpoint where it first appears, when the next step wrote its
  list again (an escalation declined: checkpoints holding 0, 0, 0, 0, 1, 2, 2 records, the
  denial gone from the one holding 1): its channel version changed in between, so only what
  the store keeps of that step's writes shows it.

A history that LangGraph's time travel branched verifies intact, checkpoint by checkpoint,
and the file or the database is never written.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_support import assert_one_line_error, cli
from graph_support import config, execute, log_decision, open_connection
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Command
from postgres_support import postgres_server, postgres_url  # noqa: F401

from algenta_graph.audit.chain import ENV_AUDIT_KEY, link_hash
from algenta_graph.audit.history import averify_audit, verify_audit
from algenta_graph.audit.records import GOVERNED_NODES
from algenta_graph.audit.verification import verify_chain
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.graph import create_governed_agent
from algenta_graph.serving.checkpoint_reader import read_latest
from algenta_graph.serving.checkpointer import open_checkpointer
from algenta_graph.testing import ScriptedChatModel

pytestmark = pytest.mark.timeout(300)

SERDE = JsonPlusSerializer()
Values = dict[str, Any]


@pytest.fixture(autouse=True)
def _no_audit_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_AUDIT_KEY, raising=False)


async def _governed_thread(engine: ReferenceEngine, webhook: WebhookReceiver, saver: Any) -> None:
    """Thread ``t1``: a delivered receipt (turn one), then a reported denial (turn two)."""
    async with open_connection(engine) as conn:
        ok, low = await log_decision(conn), await log_decision(conn, confidence=0.3)
        model = ScriptedChatModel(
            replies=[execute(ok, webhook.url, "c1"), "sent", execute(low, webhook.url, "c2"), "no"]
        )
        graph = await create_governed_agent(  # one process: its ledger may be in memory
            model,
            connection=conn,
            checkpointer=saver,
            on_denial={"confidence": "report"},
            single_process=True,
        )
        await graph.ainvoke({"messages": [("user", "one")]}, config("t1"))
        await graph.ainvoke({"messages": [("user", "two")]}, config("t1"))


async def _declined_thread(engine: ReferenceEngine, webhook: WebhookReceiver, saver: Any) -> None:
    """Thread ``t1``: a confidence escalation (a denial), declined (an operator decision)."""
    async with open_connection(engine) as conn:
        low = await log_decision(conn, confidence=0.3)
        model = ScriptedChatModel(replies=[execute(low, webhook.url, "c1"), "declined"])
        graph = await create_governed_agent(
            model, connection=conn, checkpointer=saver, single_process=True
        )
        await graph.ainvoke({"messages": [("user", "one")]}, config("t1"))
        decline = {"action": "decline", "operator": "ana", "reason": "too risky"}
        await graph.ainvoke(Command(resume=decline), config("t1"))


@pytest.fixture
async def history_file(engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path) -> Path:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    db = tmp_path / "history.sqlite"
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        await _governed_thread(engine, webhook, saver)
    return db


# --------------------------------------------------------------------- SQLite, by hand


def _rows(db: Path) -> list[tuple[str, str | None, Values]]:
    """``(checkpoint_id, parent_id, channel_values)`` of t1's root checkpoints, oldest first."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT checkpoint_id, parent_checkpoint_id, type, checkpoint FROM checkpoints "
            "WHERE thread_id = 't1' AND checkpoint_ns = '' ORDER BY checkpoint_id"
        ).fetchall()
    return [
        (cid, parent, SERDE.loads_typed((t, b))["channel_values"]) for cid, parent, t, b in rows
    ]


def _rewrite(db: Path, checkpoint_id: str, change: Callable[[Values], None]) -> None:
    """Change one stored checkpoint's state past the graph (as write access to the file can)."""
    with sqlite3.connect(db) as conn:
        kind, blob = conn.execute(
            "SELECT type, checkpoint FROM checkpoints WHERE checkpoint_id = ?", (checkpoint_id,)
        ).fetchone()
        checkpoint = SERDE.loads_typed((kind, blob))
        change(checkpoint["channel_values"])
        kind, blob = SERDE.dumps_typed(checkpoint)
        conn.execute(
            "UPDATE checkpoints SET type = ?, checkpoint = ? WHERE checkpoint_id = ?",
            (kind, blob, checkpoint_id),
        )


def _relink(values: Values) -> None:
    """Recompute every link after an edit, as anyone can without ALGENTA_AUDIT_KEY."""
    records = sorted(
        ((r["seq"], name, r) for name in ("receipts", "denials", "operator_decisions")
         for r in values.get(name) or []),
        key=lambda e: e[0],
    )  # fmt: skip
    prev = "0" * 64
    for _, name, record in records:
        record["prev"] = prev
        record["hash"] = prev = link_hash(name, record)


def _verify(db: Path | str, *args: str) -> tuple[int, str]:
    proc = cli("receipts", "--db", str(db), "--verify", *args, timeout=120)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc.returncode, proc.stdout


def _copy(db: Path, name: str) -> Path:
    copy = db.with_name(f"{name}.sqlite")
    shutil.copy(db, copy)
    return copy


def test_an_intact_history_verifies_checkpoint_by_checkpoint(history_file: Path) -> None:
    rows = _rows(history_file)
    before = history_file.read_bytes(), history_file.stat().st_mtime_ns
    code, out = _verify(history_file)
    assert code == 0, out
    assert "t1: ok: 2 record(s), head seq 2" in out and f"{len(rows)} checkpoint(s)" in out
    assert (history_file.read_bytes(), history_file.stat().st_mtime_ns) == before
    assert [r.checkpoints for r in verify_audit(history_file).values()] == [len(rows)]
    # what tells a governed thread from another graph's: the nodes only it has
    assert set(GOVERNED_NODES) <= read_latest(history_file)["t1"].nodes


def test_a_state_changed_into_other_shapes_is_refused_by_the_listing_and_named_by_verify(
    history_file: Path,
) -> None:
    db = _copy(history_file, "shapes")
    latest = _rows(db)[-1][0]
    _rewrite(db, latest, lambda v: v["receipts"].__setitem__(0, "paid"))
    listing = cli("receipts", "--db", str(db), timeout=60)
    assert_one_line_error(
        listing, f"--db {db}: thread 't1': its receipts[0] is a str, not a record",
        "changed outside the graph?", code=2,
    )  # fmt: skip
    code, out = _verify(db)
    assert code == 1, out
    assert f"receipts[0] in checkpoint {latest}" in out and "not a record (a JSON object)" in out

    _rewrite(db, latest, lambda v: v.__setitem__("denials", 7))
    code, out = _verify(db)
    assert code == 1, out
    assert "denials in checkpoint" in out and "not a list of records (an int)" in out
    assert "  also: " in out  # every problem is listed, not only the first


def test_a_record_edited_in_an_earlier_checkpoint_only_is_named_with_it(
    history_file: Path,
) -> None:
    db = _copy(history_file, "edited")
    rows = _rows(db)
    earlier = next(cid for cid, _, v in rows[:-1] if v.get("receipts"))
    _rewrite(db, earlier, lambda v: v["receipts"][0].update(response_code=201))
    assert verify_chain(_rows(db)[-1][2]).ok  # the latest checkpoint alone shows nothing

    before = db.read_bytes(), db.stat().st_mtime_ns
    for args in ([], ["--thread", "t1"]):
        code, out = _verify(db, *args)
        assert code == 1, out
        assert "t1: BROKEN" in out
        assert f"receipts[0] in checkpoint {earlier}" in out and "hash mismatch" in out
        assert "1 BROKEN chain(s): t1" in out
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before  # read-only
    [report] = verify_audit(db).values()
    assert not report.ok and report.broken is not None
    assert (report.broken.field, report.broken.index) == ("receipts", 0)
    assert report.broken.checkpoint == earlier


def test_the_tail_deleted_from_the_latest_checkpoint_is_named_as_gone(
    history_file: Path,
) -> None:
    db = _copy(history_file, "tail")
    rows = _rows(db)
    latest, parent = rows[-1][0], rows[-1][1]
    assert rows[-1][2]["denials"][0]["seq"] == 2  # the chain's last record
    _rewrite(db, latest, lambda v: v["denials"].pop())
    assert verify_chain(_rows(db)[-1][2]).ok  # a shorter chain, intact on its own

    code, out = _verify(db)
    assert code == 1, out
    assert f"denials[0] in checkpoint {latest}" in out
    assert f"in checkpoint {parent}" in out and "gone from this one" in out


def test_a_record_deleted_from_a_middle_checkpoint_is_named_with_it(history_file: Path) -> None:
    db = _copy(history_file, "middle")
    rows = _rows(db)
    holding = [cid for cid, _, v in rows[:-1] if v.get("receipts")]
    # where it was written first: the next checkpoint has it, unwritten in between
    first, later = holding[0], holding[len(holding) // 2]
    _rewrite(db, first, lambda v: v["receipts"].clear())
    following = next(cid for cid, parent, _ in rows if parent == first)
    code, out = _verify(db)
    assert code == 1, out
    assert f"receipts[0] in checkpoint {following}" in out
    assert f"not in checkpoint {first}" in out and "was not written in between" in out

    # further along: gone from that checkpoint, still in the one before it
    db = _copy(history_file, "middle-later")
    _rewrite(db, later, lambda v: v["receipts"].clear())
    code, out = _verify(db)
    assert code == 1, out
    assert f"receipts[0] in checkpoint {later}" in out and "gone from this one" in out


async def test_a_record_deleted_where_it_first_appears_is_named_though_its_list_was_rewritten(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    db = tmp_path / "declined.sqlite"
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        await _declined_thread(engine, webhook, saver)
    rows = _rows(db)
    counts = [sum(len(v.get(f) or []) for f in ("denials", "operator_decisions")) for *_, v in rows]
    assert counts == [0, 0, 0, 0, 1, 2, 2]
    code, out = _verify(db)
    assert code == 0 and "t1: ok: 2 record(s)" in out, out  # no false alarm

    first, parent = rows[4][0], rows[4][1]
    following = rows[5][0]
    _rewrite(db, first, lambda v: v["denials"].clear())
    assert all(verify_chain(v).ok for *_, v in _rows(db))  # every checkpoint alone is intact
    code, out = _verify(db)
    assert code == 1, out
    # gone from the checkpoint the step wrote it into...
    assert f"denials in checkpoint {first}" in out
    assert f"written by the step after checkpoint {parent}" in out
    # ...and in the next one, though no step since wrote it
    assert f"denials[0] in checkpoint {following}" in out
    assert f"not in checkpoint {first}" in out and "nor written by the step between them" in out
    [report] = verify_audit(db).values()
    assert not report.ok and report.broken is not None
    assert (report.broken.field, report.broken.seq, report.broken.checkpoint) == (
        "denials",
        1,
        first,
    )


def test_a_record_rewritten_with_its_links_recomputed_differs_from_the_checkpoint_before(
    history_file: Path,
) -> None:
    db = _copy(history_file, "relinked")
    rows = _rows(db)
    latest = rows[-1][0]

    def forge(values: Values) -> None:
        values["receipts"][0]["response_code"] = 500
        values["receipts"][0]["execution_status"] = "failed"
        _relink(values)

    _rewrite(db, latest, forge)
    assert verify_chain(_rows(db)[-1][2]).ok  # the forged latest chain verifies on its own
    code, out = _verify(db)
    assert code == 1, out
    assert f"receipts[0] in checkpoint {latest}" in out
    assert "differs from the same record in checkpoint" in out


def test_a_checkpoint_deleted_from_the_history_is_named(history_file: Path) -> None:
    db = _copy(history_file, "pruned")
    rows = _rows(db)
    gone, follower = rows[3][0], rows[4][0]
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM checkpoints WHERE checkpoint_id = ?", (gone,))
    code, out = _verify(db)
    assert code == 1, out
    assert (
        f"chain in checkpoint {follower}" in out and f"follows ({gone}) is not in the store" in out
    )


async def test_a_branched_history_verifies_along_each_branch(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """Time travel: a new turn from the checkpoint that ended turn one. The new branch seals
    its own records from that point (seq 2 again, unlike the other branch's): each branch's
    checkpoints extend their own parents, so nothing is reported."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    db = tmp_path / "branched.sqlite"
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        await _governed_thread(engine, webhook, saver)
        async with open_connection(engine) as conn:
            other = await log_decision(conn)
            model = ScriptedChatModel(replies=[execute(other, webhook.url, "c3"), "again"])
            graph = await create_governed_agent(
                model, connection=conn, checkpointer=saver, ledger=str(db)
            )
            history = [s async for s in graph.aget_state_history(config("t1"))]
            end_of_turn_one = next(
                s
                for s in history
                if len(s.values.get("receipts") or []) == 1
                and not s.values.get("denials")
                and not s.next
            )
            await graph.ainvoke({"messages": [("user", "three")]}, end_of_turn_one.config)
            state = await graph.aget_state(config("t1"))
        assert [r["seq"] for r in state.values["receipts"]] == [1, 2]  # the new branch
        assert state.values["denials"] == []
        reports = await averify_audit(saver)
    assert reports["t1"].ok, reports["t1"]
    code, out = _verify(db)
    assert code == 0, out
    assert f"{len(_rows(db))} checkpoint(s)" in out


# --------------------------------------------------------------------- PostgreSQL


def _one(cursor: psycopg.Cursor[tuple[Any, ...]]) -> tuple[Any, ...]:
    """The one row a query returns (``fetchone`` is typed for none, too)."""
    row = cursor.fetchone()
    assert row is not None
    return row


def _pg_snapshot(url: str) -> tuple[Any, ...]:
    with psycopg.connect(url) as conn:
        return tuple(
            _one(conn.execute(
                f"SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) "
                f"FROM {table} AS t"))[0]
            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
        )  # fmt: skip


def _pg_versions(url: str, channel: str) -> list[tuple[str, str | None]]:
    """``(checkpoint_id, version of channel)`` of t1's root checkpoints, oldest first."""
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT checkpoint_id, checkpoint->'channel_versions'->>%s FROM checkpoints "
            "WHERE thread_id = 't1' AND checkpoint_ns = '' ORDER BY checkpoint_id",
            (channel,),
        ).fetchall()


def _pg_rewrite_blob(url: str, channel: str, version: str, change: Callable[[Any], None]) -> None:
    with psycopg.connect(url) as conn:
        kind, blob = _one(
            conn.execute(
                "SELECT type, blob FROM checkpoint_blobs WHERE thread_id = 't1' AND "
                "checkpoint_ns = '' AND channel = %s AND version = %s",
                (channel, version),
            )
        )
        value = SERDE.loads_typed((kind, bytes(blob)))
        change(value)
        kind, blob = SERDE.dumps_typed(value)
        conn.execute(
            "UPDATE checkpoint_blobs SET type = %s, blob = %s WHERE thread_id = 't1' AND "
            "checkpoint_ns = '' AND channel = %s AND version = %s",
            (kind, blob, channel, version),
        )


async def _pg_thread(
    postgres_server: Any,  # noqa: F811
    thread: Callable[[ReferenceEngine, WebhookReceiver, Any], Awaitable[None]],
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
) -> str:
    """A new database holding ``thread``'s checkpoints; its URL."""
    url = postgres_server.create_database()
    async with open_checkpointer(url) as saver:
        await thread(engine, webhook, saver)
    return str(url)


async def test_every_checkpoint_is_verified_in_postgres_too(
    postgres_server: Any,  # noqa: F811
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
) -> None:
    url = await _pg_thread(postgres_server, _governed_thread, engine, webhook)
    versions = _pg_versions(url, "receipts")
    before = _pg_snapshot(url)
    code, out = _verify(url)
    assert code == 0, out
    assert f"{len(versions)} checkpoint(s)" in out and "t1: ok: 2 record(s)" in out
    assert _pg_snapshot(url) == before  # read-only

    # a receipts blob only earlier checkpoints use: edited there
    latest_version = versions[-1][1]
    blob_version = next(
        v for _, v in versions if v not in (None, latest_version) and _has_receipt(url, v)
    )
    first_user = next(cid for cid, v in versions if v == blob_version)
    _pg_rewrite_blob(url, "receipts", blob_version, lambda rs: rs[0].update(response_code=201))
    code, out = _verify(url, "--thread", "t1")
    assert code == 1, out
    assert f"receipts[0] in checkpoint {first_user}" in out and "hash mismatch" in out

    # the receipt deleted from the latest version of the list (the one before still has it)
    other = await _pg_thread(postgres_server, _governed_thread, engine, webhook)
    receipts = _pg_versions(other, "receipts")
    last = receipts[-1][1]
    assert last is not None and _has_receipt(other, last)
    first_user = next(cid for cid, v in receipts if v == last)
    _pg_rewrite_blob(other, "receipts", last, lambda rs: rs.clear())
    code, out = _verify(other)
    assert code == 1, out
    assert f"receipts[0] in checkpoint {first_user}" in out and "gone from this one" in out


async def test_a_record_deleted_where_it_first_appears_is_named_in_postgres_too(
    postgres_server: Any,  # noqa: F811
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
) -> None:
    url = await _pg_thread(postgres_server, _declined_thread, engine, webhook)
    code, out = _verify(url)
    assert code == 0 and "t1: ok: 2 record(s)" in out, out
    denials = _pg_versions(url, "denials")
    # the value governed_tool wrote: one checkpoint uses it, the handler wrote the next one
    written = [v for _, v in denials if v is not None]
    first_value = next(v for v in written if written.count(v) == 1)
    first = next(cid for cid, v in denials if v == first_value)
    _pg_rewrite_blob(url, "denials", first_value, lambda ds: ds.clear())
    code, out = _verify(url)
    assert code == 1, out
    assert f"denials in checkpoint {first}" in out and "written by the step after" in out
    assert [r.ok for r in (await averify_audit(url)).values()] == [False]


async def test_what_the_history_cannot_show_a_kept_head_does(
    postgres_server: Any,  # noqa: F811
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    tmp_path: Path,
) -> None:
    """The chain's last record deleted from the stored value of the list where it was first
    written (PostgreSQL keeps one value per version of a list, so every later checkpoint loses
    it too): the step's writes, which the store keeps, still show it. The documented limit:
    with those writes deleted too, the history is one in which it was never written; only a
    head exported before shows it (a truncated tail)."""
    url = await _pg_thread(postgres_server, _governed_thread, engine, webhook)
    exported = cli("receipts", "--db", url, "--jsonl", timeout=120)
    assert exported.returncode == 0, exported.stderr
    heads = tmp_path / "heads.jsonl"
    heads.write_text(exported.stdout)
    denials = _pg_versions(url, "denials")
    origin = denials[-1][1]  # the version governed_tool wrote, used to the end
    assert origin is not None
    _pg_rewrite_blob(url, "denials", origin, lambda ds: ds.clear())
    code, out = _verify(url)
    assert code == 1 and "written by the step after" in out, out
    with psycopg.connect(url) as conn:
        conn.execute("DELETE FROM checkpoint_writes WHERE channel = 'denials'")
    code, out = _verify(url)
    assert code == 0 and "t1: ok: 1 record(s)" in out, out  # not visible in the history
    code, out = _verify(url, "--head", str(heads))
    assert code == 1 and "truncated: the chain ends at seq 1" in out, out


def _has_receipt(url: str, version: str) -> bool:
    with psycopg.connect(url) as conn:
        kind, blob = _one(
            conn.execute(
                "SELECT type, blob FROM checkpoint_blobs WHERE thread_id = 't1' AND "
                "checkpoint_ns = '' AND channel = 'receipts' AND version = %s",
                (version,),
            )
        )
    return bool(SERDE.loads_typed((kind, bytes(blob))))
