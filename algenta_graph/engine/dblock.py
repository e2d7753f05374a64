"""One engine per database file: an exclusive ``flock`` on a sidecar lock file.

Two engines on one SQLite file would each serialise executions of a decision only among their
own calls, and both could deliver it. The engine therefore holds ``<db>.lock`` exclusively while
it serves (the kernel drops the lock when the process ends, however it ends, SIGKILL included)
and writes its PID into it, so a second engine is refused with a message naming the file and the
holder. Reading the database (``ReferenceEngine(db=...).executions()``) needs no lock.

>>> import os, tempfile
>>> db = os.path.join(tempfile.mkdtemp(), "engine.sqlite")
>>> first = DatabaseLock(db).acquire()
>>> DatabaseLock(db).acquire()                                 # doctest: +ELLIPSIS
Traceback (most recent call last):
...
algenta_graph.engine.dblock.DatabaseInUse: database ... is in use by another reference engine ...
>>> first.release()
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from typing_extensions import Self


class DatabaseInUse(RuntimeError):
    """Another engine holds the database's lock file."""

    def __init__(self, db: Path, lock_path: Path, pid: int | None) -> None:
        holder = f"PID {pid}" if pid is not None else "PID unknown"
        super().__init__(
            f"database {db} is in use by another reference engine ({holder}, lock file"
            f" {lock_path}); stop that engine or use another --db"
        )
        self.db = db
        self.lock_path = lock_path
        self.pid = pid


class DatabaseLock:
    """The exclusive lock of one engine database (``<db>.lock`` next to it)."""

    def __init__(self, db: str | Path) -> None:
        self.db = Path(db)
        self.path = self.db.with_name(self.db.name + ".lock")
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._file is not None

    def acquire(self) -> Self:
        """Take the lock or raise :class:`DatabaseInUse` (never waits); idempotent."""
        if self._file is not None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            text = handle.read().strip()
            handle.close()
            raise DatabaseInUse(self.db, self.path, int(text) if text.isdigit() else None) from None
        except BaseException:
            handle.close()
            raise
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._file = handle
        return self

    def release(self) -> None:
        """Drop the lock (idempotent). The file stays: deleting it would race a new holder."""
        handle, self._file = self._file, None
        if handle is None:
            return
        try:
            handle.seek(0)
            handle.truncate()
            handle.flush()
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        finally:
            handle.close()
