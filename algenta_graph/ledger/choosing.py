"""Which ledger a deployment uses, chosen from its configuration, and opening it.

:func:`choose_ledger` applies one rule, in this order:

1. the ledger configured explicitly (``create_governed_agent(ledger=...)``, ``ledger = "..."``
   in the configuration, ``ALGENTA_LEDGER``): ``"memory"``, a SQLite file's path, a
   ``postgresql://`` URL, or a :class:`~algenta_graph.ledger.store.Ledger`;
2. else the one the deployment's state implies, as its caller knows it from the configuration
   (never from a saver's class): the checkpointer's own database when it was given as a path
   or URL (``ALGENTA_CHECKPOINTER`` when served), this process's memory where the state cannot
   outlive or leave the process (an ``InMemorySaver``, no checkpointer), a file beside
   ``langgraph dev``'s own state;
3. else this process's memory, when the deployment declares itself one process
   (``single_process``);
4. else :class:`~algenta_graph.errors.LedgerRequired`, naming what to set: a graph that cannot
   find a shared ledger does not start (fail closed).

:func:`connect_ledger` opens the chosen one (:func:`open_ledger`: as a context, closed on exit
when opened there).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Union

from algenta_graph.database_urls import is_postgres_url
from algenta_graph.errors import LedgerRequired
from algenta_graph.ledger.memory import process_ledger
from algenta_graph.ledger.store import Ledger

__all__ = [
    "MEMORY",
    "LedgerSpec",
    "choose_ledger",
    "connect_ledger",
    "describe_ledger",
    "open_ledger",
]

MEMORY = "memory"
"""The spec of this process's own ledger (:func:`~algenta_graph.ledger.memory.process_ledger`)."""

LedgerSpec = Union[Ledger, str, "os.PathLike[str]"]
"""A ledger, ``"memory"``, a SQLite file's path or a ``postgresql://`` URL."""


def _spec(value: LedgerSpec) -> LedgerSpec:
    if isinstance(value, Ledger):
        return value
    text = os.fspath(value)
    if not text.strip():
        raise ValueError('ledger must be "memory", a SQLite file path or a postgresql:// URL')
    return text.strip()


def choose_ledger(
    configured: LedgerSpec | None,
    *,
    implied: LedgerSpec | None,
    deployment: str,
    single_process: bool = False,
) -> LedgerSpec:
    """The ledger to open (see the module docs for the rule).

    Args:
        configured: the ledger configured explicitly, if any.
        implied: the one the deployment's state implies, if any.
        deployment: what the deployment is, as the refusal names it.
        single_process: the deployment declares itself one process.

    Raises:
        LedgerRequired: no ledger is configured or implied, and no single process declared.
        ValueError: an empty ledger spec.

    >>> choose_ledger("runs.sqlite", implied=MEMORY, deployment="the library")
    'runs.sqlite'
    >>> choose_ledger(None, implied=None, deployment="x", single_process=True)
    'memory'
    """
    if configured is not None:
        return _spec(configured)
    if implied is not None:
        return _spec(implied)
    if single_process:
        return MEMORY
    raise LedgerRequired(deployment)


def run_ledger(checkpointer: object) -> Ledger:
    """The ledger of a run whose graph was built without one (``build_governed_graph``).

    Only a run that keeps its state in this process (no checkpointer, or exactly an
    ``InMemorySaver``) may use this process's ledger; any other saver may be shared by other
    processes, so the run is refused (fails closed) rather than guarded by a ledger they do not
    see.

    Raises:
        LedgerRequired: the run's checkpointer is of any other class (named).

    >>> run_ledger(None) is process_ledger()
    True
    """
    from langgraph.checkpoint.memory import InMemorySaver

    if checkpointer is None or type(checkpointer) is InMemorySaver:
        return process_ledger()
    raise LedgerRequired(
        f"the checkpointer {type(checkpointer).__name__} (compiled into a graph built by "
        "build_governed_graph without ledger=)"
    )


def describe_ledger(spec: LedgerSpec) -> str:
    """How a chosen ledger is shown (a URL without its password).

    >>> describe_ledger("postgresql://u:pw@h/db")
    'postgresql://u:***@h/db'
    """
    from algenta_graph.database_urls import redact_url

    if isinstance(spec, Ledger):
        return spec.where
    text = os.fspath(spec)
    return redact_url(text) if is_postgres_url(text) else text


async def connect_ledger(spec: LedgerSpec) -> tuple[Ledger, bool]:
    """The ledger ``spec`` names, open, and whether it was opened here.

    One opened here is the caller's to close (:meth:`~algenta_graph.ledger.store.Ledger.aclose`).
    A :class:`~algenta_graph.ledger.store.Ledger` is used as it is (its owner closes it);
    ``"memory"`` is this process's own; a ``postgresql://`` URL a pool of its own; anything
    else a SQLite file's path, on a connection of its own.

    Raises:
        LedgerError: the database could not be opened (named, without its password).
        CheckpointerURLError: a malformed ``postgresql://`` URL.
    """
    spec = _spec(spec)
    if isinstance(spec, Ledger):
        return spec, False
    text = os.fspath(spec)
    if text == MEMORY:
        return process_ledger(), False
    if is_postgres_url(text):
        from algenta_graph.ledger.postgres import PostgresLedger

        return await PostgresLedger.connect(text), True
    from algenta_graph.ledger.sqlite import SqliteLedger

    return await SqliteLedger.connect(text), True


@contextlib.asynccontextmanager
async def open_ledger(spec: LedgerSpec) -> AsyncIterator[Ledger]:
    """:func:`connect_ledger` as a context: closed on exit when opened here."""
    ledger, opened = await connect_ledger(spec)
    try:
        yield ledger
    finally:
        if opened:
            await ledger.aclose()
