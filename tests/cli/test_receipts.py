"""``algenta-graph receipts`` reads a checkpoint file and never writes to it.

A file that is not a readable LangGraph SQLite checkpoint file (not SQLite, corrupted,
truncated, another schema, an undecodable checkpoint) is one line on stderr naming it and
exit 2; in every case, and for a good file too, the file's bytes and mtime are unchanged, and a
missing file is not created. The checkpoint files are real ones, written by langgraph's own
``SqliteSaver``.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from cli_support import assert_one_line_error, cli
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

from algenta_graph.audit.records import read_records
from algenta_graph.errors import RecordsFileError

pytestmark = pytest.mark.timeout(300)

RECEIPT = {
    "decision_id": "dec_1",
    "execution_status": "delivered",
    "response_code": 200,
    "safety_overridden": False,
    "source": "model",
}
DENIAL = {"decision_id": "dec_2", "gate": "confidence", "message": "confidence 0.3 < 0.6"}


def write_checkpoints(path: Path, threads: dict[str, int], padding: int = 0) -> None:
    """A real checkpoint file: ``n`` checkpoints per thread, the last one holding records."""
    with SqliteSaver.from_conn_string(str(path)) as saver:
        for thread, n in threads.items():
            config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            for i in range(n):
                checkpoint = empty_checkpoint()
                checkpoint["channel_values"] = {
                    "receipts": [RECEIPT] * (i + 1),
                    "denials": [DENIAL],
                    "operator_decisions": [],
                    "padding": "x" * padding,
                }
                config = saver.put(config, checkpoint, {"step": i}, {})


def _snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


def _not_sqlite(path: Path) -> None:
    path.write_text("thread,receipt\nt1,dec_1\n" * 50)


def _empty_sqlite(path: Path) -> None:
    path.write_bytes(b"")


def _wrong_schema(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE checkpoints (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO checkpoints (body) VALUES ('{}')")
    conn.commit()
    conn.close()


def _truncated(path: Path) -> None:
    write_checkpoints(path, {"t1": 30}, padding=3000)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _corrupted(path: Path) -> None:
    write_checkpoints(path, {"t1": 30}, padding=3000)
    data = bytearray(path.read_bytes())
    page = 4096
    for start in range(page, len(data), page):  # every page but the header's
        data[start : start + 64] = b"\xde\xad\xbe\xef" * 16
    path.write_bytes(bytes(data))


def _undecodable(path: Path) -> None:
    write_checkpoints(path, {"t1": 2})
    conn = sqlite3.connect(path)
    conn.execute("UPDATE checkpoints SET checkpoint = X'c1ffee00' WHERE thread_id = 't1'")
    conn.commit()
    conn.close()


BAD_FILES = {
    "not-sqlite": (_not_sqlite, "is not a readable SQLite database"),
    "empty": (_empty_sqlite, "no checkpoints table"),
    "wrong-schema": (_wrong_schema, "not a readable LangGraph SQLite checkpoint file"),
    "truncated": (_truncated, ""),
    "corrupted": (_corrupted, ""),
    "undecodable": (_undecodable, "cannot be decoded"),
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_a_bad_file_is_one_line_and_left_untouched(tmp_path: Path, kind: str) -> None:
    make, words = BAD_FILES[kind]
    path = tmp_path / f"{kind}.sqlite"
    make(path)
    before = _snapshot(path)
    variants = ([], ["--jsonl"], ["--thread", "t1"]) if kind == "undecodable" else ([],)
    for args in variants:
        proc = cli("receipts", "--db", str(path), *args, timeout=60)
        line = assert_one_line_error(proc, str(path), words)
        assert line.startswith("algenta-graph receipts: error: --db ")
        assert _snapshot(path) == before, f"receipts changed the {kind} file"


def test_a_missing_file_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "nope.sqlite"
    assert_one_line_error(
        cli("receipts", "--db", str(path), timeout=60), str(path), "no checkpoint"
    )
    assert not path.exists() and list(tmp_path.iterdir()) == []
    # the default --db, in a working directory without one
    assert_one_line_error(cli("receipts", cwd=tmp_path, timeout=60), "algenta-graph.sqlite")
    assert list(tmp_path.iterdir()) == []


def test_a_good_file_is_listed_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    write_checkpoints(path, {"t1": 3, "t2": 1})
    before = _snapshot(path)
    listing = cli("receipts", "--db", str(path), "--jsonl", timeout=60)
    assert listing.returncode == 0, listing.stderr
    lines = [json.loads(line) for line in listing.stdout.splitlines()]
    records = [r for r in lines if r["type"] == "record"]
    assert [(h["thread_id"], h["count"]) for h in lines if h["type"] == "head"] == [
        ("t1", 4),
        ("t2", 2),
    ]
    # each thread's latest checkpoint: t1 has 3 receipts, t2 one; one denial each
    assert [(r["thread_id"], r["field"][:-1]) for r in records] == [
        ("t1", "receipt"), ("t1", "receipt"), ("t1", "receipt"), ("t1", "denial"),
        ("t2", "receipt"), ("t2", "denial"),
    ]  # fmt: skip
    table = cli("receipts", "--db", str(path), "--thread", "t2", timeout=60)
    assert table.returncode == 0 and "gate=confidence" in table.stdout
    assert "t1" not in table.stdout
    assert _snapshot(path) == before
    assert_one_line_error(cli("receipts", "--db", str(path), "--thread", "t9"), "'t9'")
    assert _snapshot(path) == before


def test_read_records_raises_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_records(tmp_path / "missing.sqlite")
    bad = tmp_path / "bad.sqlite"
    _undecodable(bad)
    with pytest.raises(RecordsFileError, match="thread 't1' cannot be decoded"):
        read_records(bad)
    assert isinstance(RecordsFileError("x"), ValueError)
    assert os.path.exists(bad)
