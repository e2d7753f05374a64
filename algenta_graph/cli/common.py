"""What every ``algenta-graph`` subcommand shares: its errors, exit codes and argument checks.

Every bad input is a :class:`~algenta_graph.errors.CommandError`: :func:`algenta_graph.cli.main`
prints its one-line message and exits with its code (:data:`EXIT_USAGE` for a bad value,
:data:`EXIT_FAILED` when the engine or the store fails, :data:`EXIT_PENDING` when an escalation
is left waiting, 130 on Ctrl-C). A malformed ``postgresql://`` ``--db`` is refused by
:func:`db_arg` before anything connects; a PostgreSQL store lost in the middle of a command is
one line naming it and how to resume (:func:`store_lost`).
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from algenta_graph.errors import CommandError

__all__ = [
    "DEFAULT_DB",
    "EXIT_FAILED",
    "EXIT_PENDING",
    "EXIT_USAGE",
    "db_arg",
    "model_arg",
    "new_store",
    "on_denial_arg",
    "one_line",
    "positive_int",
    "prepare_db",
    "store_lost",
    "utf8_arg",
]

DEFAULT_DB = "algenta-graph.sqlite"
"""The checkpoint file ``run`` writes and ``receipts`` reads when ``--db`` is not given."""


EXIT_FAILED = 1


EXIT_USAGE = 2


EXIT_PENDING = 3


def one_line(exc: BaseException, limit: int = 1000) -> str:
    """An exception's message on one line (its type when it has none)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def on_denial_arg(text: str | None) -> dict[str, str]:
    """``--on-denial``, through the one validator the library and the server use too."""
    from algenta_graph.governance.gates import parse_on_denial

    try:
        return dict(parse_on_denial(text, "--on-denial"))
    except ValueError as exc:
        message = str(exc)  # name the value when the message names none (a wrong type)
        raise CommandError(message if "'" in message else f"{message}: {text!r}") from None


def positive_int(text: str) -> int:
    """An argparse type: a whole number, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def utf8_arg(text: str, what: str) -> str:
    """``text`` unchanged if it is valid UTF-8 (argv decodes bad bytes to surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape")[:60]
        raise CommandError(f"{what} is not valid UTF-8: {shown!r}") from None
    return text


def prepare_db(spec: str, option: str = "--db") -> str:
    """A ``--db`` value ready for ``open_checkpointer``: a SQLite file's directory is created.

    (The engine creates its ``--db`` directory too.) A PostgreSQL URL is returned unchanged.
    Also used for the other files the CLI writes (``option`` names the option in errors).
    """
    from algenta_graph.serving.checkpointer import is_postgres_url

    if is_postgres_url(spec):
        return spec
    path = Path(spec)
    if path.is_dir():
        raise CommandError(f"{option} {spec}: is a directory, not a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(
            f"{option} {spec}: cannot create the directory {path.parent} ({exc.strerror})"
        ) from None
    return spec


@contextlib.contextmanager
def new_store(spec: str) -> Iterator[str]:
    """A ``--db`` prepared (:func:`prepare_db`), and removed again if the command fails first.

    When the block raises before any thread is in a SQLite file this command created (the
    engine could not be reached, the configuration was refused, Ctrl-C while connecting), the
    file, its journal files and the directories made for it are removed: a failed command
    leaves nothing behind. A file that held a thread, or existed before, is never touched; a
    PostgreSQL URL is yielded as it is.
    """
    from algenta_graph.serving.checkpointer import is_postgres_url

    if is_postgres_url(spec):
        yield spec
        return
    path = Path(spec)
    existed = path.exists()
    made = [d for d in path.absolute().parents if not d.exists()]  # deepest first
    prepared = prepare_db(spec)
    try:
        yield prepared
    except BaseException:
        if not existed and _holds_no_thread(path):
            for leftover in (path, *(path.with_name(path.name + s) for s in _JOURNALS)):
                leftover.unlink(missing_ok=True)
            for directory in made:
                with contextlib.suppress(OSError):  # not empty: something else is in it
                    directory.rmdir()
        raise


_JOURNALS = ("-wal", "-shm", "-journal")


def _holds_no_thread(path: Path) -> bool:
    """Whether a store this command created holds no thread (nothing in it, or no checkpoint)."""
    from algenta_graph.errors import RecordsFileError
    from algenta_graph.serving.checkpoint_reader import open_sqlite_read_only, read_latest

    try:
        if not path.exists() or path.stat().st_size == 0:
            return True
        try:
            return not read_latest(path, fields=())
        except RecordsFileError:  # no checkpoint table yet: the saver never set it up
            with open_sqlite_read_only(path) as conn:
                return conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is None
    except (OSError, sqlite3.Error):  # cannot tell: keep it
        return False


def db_error(spec: str, exc: BaseException) -> CommandError:
    """The error for a ``--db`` that is not a usable SQLite checkpoint file."""
    return CommandError(f"--db {spec} is not a usable SQLite checkpoint file ({one_line(exc)})")


def db_arg(text: str) -> str:
    """An argparse type: a ``--db`` value, a PostgreSQL URL or a path (kept as it is).

    A PostgreSQL URL must be well formed (checked before anything connects, so a malformed one
    is a usage error naming ``--db``).
    """
    from algenta_graph.errors import CheckpointerURLError
    from algenta_graph.serving.checkpointer import check_postgres_url, is_postgres_url

    if is_postgres_url(text):
        try:
            check_postgres_url(text.strip())
        except CheckpointerURLError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def store_name(spec: str) -> str:
    """``spec`` as it may be shown: a PostgreSQL URL without its password."""
    from algenta_graph.serving.checkpointer import is_postgres_url, redact_url

    return redact_url(spec.strip()) if is_postgres_url(spec) else spec


def postgres_failure(exc: BaseException) -> BaseException | None:
    """The psycopg error that ``exc`` is, was raised from, or groups; ``None`` when there is none.

    Such an error is a lost, refused or timed-out PostgreSQL connection.
    """
    try:
        import psycopg
    except ImportError:  # pragma: no cover - no PostgreSQL extra: no PostgreSQL store either
        return None
    stack, seen = [exc], set()
    while stack:
        error = stack.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, psycopg.Error):
            return error
        stack += list(getattr(error, "exceptions", None) or ())  # an exception group
        if error.__cause__ is not None:
            stack.append(error.__cause__)
    return None


def pg_reason(error: BaseException) -> str:
    """A psycopg error in a few words: its type and libpq's first line (the rest is hints)."""
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {one_line(Exception(first), 200)}"


def store_failure(db: str | None, exc: BaseException) -> CommandError | None:
    """The one line for a failed PostgreSQL store under ``exc`` (exit 1), else ``None``."""
    lost = postgres_failure(exc) if db is not None else None
    if lost is None:
        return None
    return CommandError(
        f"--db {store_name(db or '')}: the PostgreSQL checkpoint store failed ({pg_reason(lost)})",
        EXIT_FAILED,
    )


def store_lost(db: str, thread: str, error: BaseException) -> CommandError:
    """The error for a PostgreSQL store lost during a run: what is kept, how to finish."""
    where = store_name(db)
    return CommandError(
        f"--db {where}: the PostgreSQL checkpoint store was lost during the run "
        f"({pg_reason(error)}); every step checkpointed "
        f"before that is kept: once the server is back, `algenta-graph run --thread {thread} "
        f"--db {where}` finishes the thread (a decision the engine executed meanwhile is "
        "recovered from it, not sent again)",
        EXIT_FAILED,
    )


def model_arg(spec: str | None) -> Any:
    """The chat model ``--model`` names (``resolve_model``); a :class:`CommandError` if none."""
    from algenta_graph.models import resolve_model

    try:
        return resolve_model(spec)
    except Exception as exc:  # unknown provider, missing package or API key, ...
        raise CommandError(f"--model {spec!r}: {one_line(exc)}") from None
