"""One engine per database file: a second ``algenta-graph engine`` on the same ``--db`` is
refused (real processes), and the lock goes away with its holder, however it stops."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from algenta_graph._net import free_port
from algenta_graph.engine import ReferenceEngine
from algenta_graph.engine.dblock import DatabaseInUse, DatabaseLock

ENGINE = [sys.executable, "-m", "algenta_graph.cli", "engine"]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _start(db: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``algenta-graph engine --db DB`` on a free port, once it listens."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "algenta_graph.cli",
        "engine",
        "--port",
        str(port),
        "--db",
        str(db),
    ]
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not _listening(port):
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "engine did not start"
        time.sleep(0.05)
    return proc, port


def _refused(db: Path) -> subprocess.CompletedProcess[str]:
    """A second engine on ``db``: it must exit by itself, non-zero."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "algenta_graph.cli",
        "engine",
        "--port",
        str(port),
        "--db",
        str(db),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert not _listening(port)
    return proc


def _stop(proc: subprocess.Popen[bytes], sig: int) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, sig)
        proc.wait(timeout=20)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_second_engine_on_the_same_db_is_refused_until_the_first_is_gone(
    tmp_path: Path, how: str
) -> None:
    db = tmp_path / "state" / "engine.sqlite"
    first, _ = _start(db, tmp_path / "first.log")
    try:
        second = _refused(db)
        # the same file by another spelling of its path is the same lock
        third = _refused(tmp_path / "state" / ".." / "state" / "engine.sqlite")
    finally:
        _stop(first, getattr(signal, how))
    assert second.returncode == 1, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in second.stderr, second.stderr
    assert str(db) in lines[0] and f"PID {first.pid}" in lines[0]
    assert lines[0].startswith("algenta-graph engine: error: database")
    assert third.returncode == 1 and f"PID {first.pid}" in third.stderr
    # the first engine is gone (cleanly or SIGKILLed): the lock went with it
    after, _ = _start(db, tmp_path / "after.log")
    _stop(after, signal.SIGTERM)
    assert after.returncode == 0


def test_an_in_process_engine_is_refused_while_a_process_holds_the_db(tmp_path: Path) -> None:
    db = tmp_path / "engine.sqlite"
    proc, _ = _start(db, tmp_path / "engine.log")
    try:
        engine = ReferenceEngine(db=db)  # reading the file needs no lock
        assert engine.executions() == []
        with pytest.raises(DatabaseInUse) as info:
            engine.start()
        assert not engine.running
    finally:
        _stop(proc, signal.SIGTERM)
    assert info.value.pid == proc.pid and str(db) in str(info.value)
    with engine:  # free now
        assert engine.running
        refused = _refused(db)  # and the in-process engine holds it against a process
    assert refused.returncode == 1 and f"PID {os.getpid()}" in refused.stderr


def test_two_engine_objects_on_one_db_in_one_process(tmp_path: Path) -> None:
    db = tmp_path / "engine.sqlite"
    with ReferenceEngine(db=db) as first:
        with pytest.raises(DatabaseInUse):
            ReferenceEngine(db=db).start()
        assert first.running
    with ReferenceEngine(db=db) as again:  # released by stop()
        assert again.running


def test_the_lock_file_names_its_holder_and_is_emptied_on_release(tmp_path: Path) -> None:
    lock = DatabaseLock(tmp_path / "x.sqlite").acquire()
    assert lock.path == tmp_path / "x.sqlite.lock"
    assert lock.path.read_text().strip() == str(os.getpid())
    lock.release()
    lock.release()  # idempotent
    assert lock.path.read_text() == ""
    assert DatabaseLock(tmp_path / "x.sqlite").acquire().held
