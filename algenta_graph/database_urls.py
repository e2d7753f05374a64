"""A database named by a path or a URL: a PostgreSQL URL recognised, checked and shown safely.

What every store that opens a database by name shares (the checkpointer,
:mod:`algenta_graph.serving.checkpointer`, and the ledger, :mod:`algenta_graph.ledger`): whether a
name is a ``postgresql://`` URL or a SQLite file, whether the URL is well formed (libpq's own
parser: nothing connects), and the URL as it may be shown (without its password).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from algenta_graph.errors import CheckpointerURLError

__all__ = ["check_postgres_url", "is_postgres_url", "redact_url"]

_PG_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(spec: object) -> bool:
    """Whether ``spec`` names a PostgreSQL database rather than a SQLite file.

    >>> is_postgres_url("postgresql://u@localhost/db"), is_postgres_url("runs.sqlite")
    (True, False)
    """
    return isinstance(spec, str) and spec.strip().lower().startswith(_PG_SCHEMES)


def redact_url(url: str) -> str:
    """``postgresql://user:secret@host/db`` -> ``postgresql://user:***@host/db``.

    The query (which may hold a ``password=``) is dropped. A URL too malformed to parse is
    redacted as text, never raised on.

    >>> redact_url("postgresql://u:pw@h:5432/db?sslmode=require")
    'postgresql://u:***@h:5432/db'
    >>> redact_url("postgresql://u:pw@[::1")
    'postgresql://u:***@[::1'
    """
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed IPv6 bracket: redact the text itself
        head, sep, rest = url.partition("://")
        rest = re.split(r"[?#]", rest, maxsplit=1)[0]
        if "@" in rest:
            user, host = rest.rsplit("@", 1)
            if ":" in user:
                user = user.split(":", 1)[0] + ":***"
            rest = f"{user}@{host}"
        return f"{head}{sep}{rest}"
    netloc = parts.netloc
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        if ":" in user:
            user = user.split(":", 1)[0] + ":***"
        netloc = f"{user}@{host}"
    return f"{parts.scheme}://{netloc}{parts.path}"


def check_postgres_url(url: str) -> None:
    """Raise :class:`CheckpointerURLError` unless ``url`` is a well-formed PostgreSQL URL.

    Parsed as libpq parses it (``psycopg.conninfo``, when the PostgreSQL extra is installed;
    else only the URL syntax is checked), and every port must be a number from 1 to 65535.
    Nothing connects. The error shows the URL without its password.

    >>> check_postgres_url("postgresql://u@h1:5432,h2:5433/db")
    >>> try:
    ...     check_postgres_url("postgresql://[::1")
    ... except CheckpointerURLError as exc:
    ...     print(exc)  # doctest: +ELLIPSIS
    postgresql://[::1 is not a valid PostgreSQL URL: end of string reached when looking for ...
    """
    shown = redact_url(url)

    def bad(why: str) -> CheckpointerURLError:
        why = " ".join(why.replace(url, shown).split())
        why = re.sub(r'\s*in URI: "[^"]*"$', "", why)  # libpq repeats the URL: once is enough
        return CheckpointerURLError(f"{shown} is not a valid PostgreSQL URL: {why}")

    try:
        from psycopg import conninfo
    except ImportError:  # pragma: no cover - depends on the install
        try:
            urlsplit(url)
        except ValueError as exc:
            raise bad(str(exc)) from None
        return
    try:
        params = conninfo.conninfo_to_dict(url)
    except Exception as exc:  # psycopg.ProgrammingError: libpq could not parse it
        raise bad(str(exc)) from None
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise bad(f"the port {port!r} is not a number from 1 to 65535")
