"""The served graph's deadline watcher: escalations expire on their own, after one warning.

A LangGraph server serving the graph runs :class:`DeadlineWatcher` as a background task (started
by the custom app's lifespan, :func:`watch_deadlines`; ``langgraph.json``'s ``http.app``). Every
``check_every`` (``[escalation]``, default 30 seconds) it reads what waits for an operator in the
server's checkpoints, through the code path of ``algenta-graph escalations --expire``
(:mod:`algenta_graph.deadlines`), and:

1. warns of each escalation whose deadline is within its gate's ``warn_before``: one notice,
   marked in the shared ledger and sent once across every worker, through the hooks of every
   notice (Standard Webhooks signed), ``event = "escalation.deadline_warning"``;
2. expires each escalation past its deadline: its one answer, claimed in the ledger as a decline
   with the verdict ``expired`` (:data:`EXPIRY_OPERATOR` named): one worker's claim wins, and an
   operator's answer given after it is refused by name;
3. wakes each thread whose escalation expired (a run with no input, through the server's own
   in-process client, one worker's by a mark in the ledger): the denial handler completes the
   expiry, so the thread's records say ``expired`` (the operator decision record in its hash
   chain), the inbox shows it decided, and the thread no longer waits. Whether it did is read
   back from the checkpoints, never from the server's own thread registry: under ``langgraph
   dev`` each worker keeps its own (a thread's status, metadata and runs are the worker's that
   ran it), so a wake still waiting there is let go and retried at a later round, by any worker
   that knows the thread.

What it reads: under the server checkpointer
(:func:`~algenta_graph.serving.checkpointer.server_checkpointer`), its database
(``ALGENTA_CHECKPOINTER``); under ``langgraph dev``'s in-memory runtime, the runtime's own saver.
Under another checkpointer or runtime it does not start and says so (run
``algenta-graph escalations --expire`` from cron there). Nothing to do without an
``expires_after``. A failed round (the database or the ledger unreachable, a run refused) is
logged and retried at the next; it never stops the server. It stops with the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from algenta_graph.config.deployment import DEV_STATE_DIR
from algenta_graph.deadlines import Waiting, expire_overdue, list_waiting, warn_due
from algenta_graph.governance.escalations import EscalationSettings
from algenta_graph.ledger import Ledger, connect_ledger, escalation_key, release

__all__ = [
    "EXPIRY_OPERATOR",
    "DeadlineWatcher",
    "Round",
    "served_watcher",
    "thread_known_here",
    "wake_thread",
    "watch_deadlines",
]

logger = logging.getLogger(__name__)

EXPIRY_OPERATOR = "algenta-graph deadlines"
"""Who the served graph's expiry records name (the refusal of a later answer names it too)."""

Checkpoints = Callable[[], contextlib.AbstractAsyncContextManager[Any]]
"""Opens the saver the server's runs write (closed on exit)."""
Waker = Callable[[str], Awaitable[None]]
"""Runs a thread once with no input (its expired escalation is recorded); raises on failure."""


def wake_key(waiting: Waiting) -> str:
    """The ledger key of the mark that one worker wakes ``waiting``'s thread.

    >>> wake_key(Waiting("t", "confidence", ["d"], [None], ["e1"], None, None, None, None,
    ...     "expired"))
    'wake:escalations:e1'
    """
    return f"wake:{escalation_key(waiting.escalation_ids)}"


@dataclass
class Round:
    """What one round of the watcher did (this worker's share)."""

    warned: list[str] = field(default_factory=list)
    """The escalations this worker warned of."""
    expired: list[Waiting] = field(default_factory=list)
    """The escalations whose expiry this worker claimed."""
    woken: list[str] = field(default_factory=list)
    """The threads this worker woke, their expiry recorded."""


class DeadlineWatcher:
    """Warns, expires and wakes every ``settings.check_every`` (see the module docs).

    Args:
        settings: the served graph's escalation settings (deadlines, warnings, hooks).
        checkpoints: opens the saver the server's runs write.
        ledger: the served graph's ledger (a spec, opened here, or an open one).
        wake: runs a thread once with no input (default: :func:`wake_thread`).
        known_here: whether this server knows the thread (default: :func:`thread_known_here`);
            only such a worker wakes it.
        clock: the current time (UTC).
    """

    def __init__(
        self,
        settings: EscalationSettings,
        checkpoints: Checkpoints,
        ledger: str | Ledger,
        *,
        wake: Waker | None = None,
        known_here: Callable[[str], Awaitable[bool]] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.settings = settings
        self.checkpoints = checkpoints
        self.ledger_spec = ledger
        self.wake = wake or wake_thread
        self.known_here = known_here or thread_known_here
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self._opened = contextlib.AsyncExitStack()
        self._open: tuple[Any, Ledger] | None = None

    async def _store(self) -> tuple[Any, Ledger]:
        """The saver and the ledger, opened once (again after a failed round)."""
        if self._open is None:
            saver = await self._opened.enter_async_context(self.checkpoints())
            ledger = self.ledger_spec
            if not isinstance(ledger, Ledger):
                if ledger.startswith(DEV_STATE_DIR + os.sep):  # the runtime makes it, maybe later
                    await asyncio.to_thread(os.makedirs, DEV_STATE_DIR, exist_ok=True)
                ledger, opened = await connect_ledger(ledger)
                if opened:
                    self._opened.push_async_callback(ledger.aclose)
            self._open = (saver, ledger)
        return self._open

    async def aclose(self) -> None:
        """Close what a round opened."""
        self._open = None
        opened, self._opened = self._opened, contextlib.AsyncExitStack()
        await opened.aclose()

    async def check(self) -> Round:
        """One round: warn, expire, wake (see the module docs)."""
        saver, ledger = await self._store()
        done = Round()
        done.warned = await warn_due(saver, ledger, self.settings, self.clock())
        done.expired = await expire_overdue(saver, ledger, self.clock(), operator=EXPIRY_OPERATOR)
        for waiting in await list_waiting(saver, ledger, self.clock()):
            if waiting.state == "expired" and await self._wake(saver, ledger, waiting):
                done.woken.append(waiting.thread_id)
        return done

    async def _wake(self, saver: Any, ledger: Ledger, waiting: Waiting) -> bool:
        """Wake ``waiting``'s thread unless another worker does (or did); whether this one did.

        Done once the thread's checkpoints no longer hold the escalation (read back here, not
        from this server's thread registry); else let go, and woken again at a later round.
        """
        from algenta_graph.governance.notifications import mark_once

        if not await self.known_here(waiting.thread_id):
            return False  # a worker that knows the thread wakes it
        mine = await mark_once(ledger, wake_key(waiting), waiting.escalation_ids[0])
        if mine is None:
            return False
        try:
            await self.wake(waiting.thread_id)
            after = await list_waiting(saver, ledger, self.clock(), waiting.thread_id)
            if any(w.escalation_ids == waiting.escalation_ids for w in after):
                raise RuntimeError("its checkpoints still hold the escalation after the run")
            await ledger.finish(mine)
        except Exception as exc:  # let go: woken again at a later round (here or elsewhere)
            logger.warning(
                "algenta-graph deadlines: thread %s: its expiry is claimed, not yet recorded in "
                "the thread (retried): %s",
                waiting.thread_id,
                exc,
            )
            return False
        finally:
            release(mine)
        return True

    async def run(self) -> None:
        """Rounds until cancelled; a failed round is logged, its store reopened next round."""
        every = self.settings.check_every.total_seconds()
        while True:
            await asyncio.sleep(every)
            try:
                done = await self.check()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a database or engine hiccup never stops the server
                logger.warning("algenta-graph deadlines: round failed (retried): %r", exc)
                with contextlib.suppress(Exception):
                    await self.aclose()
                continue
            for waiting in done.expired:
                logger.info(
                    "algenta-graph deadlines: expired %s on thread %s (gate %s, deadline %s)",
                    ",".join(waiting.escalation_ids),
                    waiting.thread_id,
                    waiting.gate,
                    waiting.expires_at,
                )
            for thread in done.woken:
                logger.info("algenta-graph deadlines: thread %s recorded its expiry", thread)


async def wake_thread(thread_id: str) -> None:
    """Run ``thread_id`` once with no input through the server's in-process client.

    The run waits behind one in progress (``enqueue``); its graph is the thread's (its
    metadata's ``graph_id``), else the one graph the server serves.

    Raises:
        RuntimeError: the run did not succeed (its status named).
    """
    from langgraph_sdk import get_client

    async with get_client(api_key=None) as client:
        thread = await client.threads.get(thread_id)
        graph = (thread.get("metadata") or {}).get("graph_id")
        if not graph:
            graphs = {a["graph_id"] for a in await client.assistants.search(limit=100)}
            if len(graphs) != 1:
                raise RuntimeError(
                    f"thread {thread_id} names no graph, and this server serves {len(graphs)}"
                )
            graph = graphs.pop()
        run = await client.runs.create(thread_id, graph, input=None, multitask_strategy="enqueue")
        await client.runs.join(thread_id, run["run_id"])
        status = (await client.runs.get(thread_id, run["run_id"]))["status"]
        if status != "success":
            raise RuntimeError(f"the run {run['run_id']} ended {status!r}")


async def thread_known_here(thread_id: str) -> bool:
    """Whether this server knows ``thread_id`` (its thread registry holds it), in-process.

    A server runs only the threads it knows; one that does not leaves the thread to one that
    does (under ``langgraph dev`` every worker keeps a registry of its own).
    """
    from langgraph_sdk import get_client
    from langgraph_sdk.errors import NotFoundError

    async with get_client(api_key=None) as client:
        try:
            thread = await client.threads.get(thread_id)
        except NotFoundError:
            return False
    return bool(thread)


def _checkpoints(runtime: Any) -> Checkpoints:
    """What opens the saver the server's runs write (see the module docs).

    Raises:
        LookupError: this server's checkpoints cannot be read here (the message says why).
    """
    from algenta_graph._langgraph import runtime_checkpointer
    from algenta_graph.serving.checkpointer import open_checkpointer, server_checkpointer

    ours = f"{server_checkpointer.__module__}.{server_checkpointer.__qualname__}"
    if runtime.checkpointer_path == ours and runtime.algenta_checkpointer:
        database = runtime.algenta_checkpointer
        return lambda: open_checkpointer(database, setup=False)
    if runtime.checkpointer_path is None and runtime.edition == "inmem":
        saver = runtime_checkpointer()

        @contextlib.asynccontextmanager
        async def the_runtimes() -> AsyncIterator[Any]:
            yield saver

        return the_runtimes
    where = runtime.checkpointer_path or f"the {runtime.edition!r} runtime"
    raise LookupError(
        f"the server keeps its checkpoints in {where}, which the deadline watcher does not "
        "read: escalations expire when answered or when the thread runs again; run "
        "`algenta-graph escalations --db ... --expire` from cron to expire them meanwhile"
    )


def served_watcher(environ: Mapping[str, str] | None = None) -> DeadlineWatcher | None:
    """The served graph's watcher, or ``None`` (no deadline configured, or nothing to read).

    Raises:
        ConfigError, LedgerRequired: the configuration is wrong (the server refused to start
            for the same reason).
        LookupError: this server's checkpoints cannot be read here.
    """
    from algenta_graph.config import resolve_config
    from algenta_graph.config.deployment import served_runtime
    from algenta_graph.serving.server import ServerSettings, served_ledger

    env = os.environ if environ is None else environ
    settings = ServerSettings.from_env(env)
    resolved = resolve_config(settings.config, environ=env)
    if not resolved.escalation.expires_after:
        return None
    runtime = served_runtime(env)
    checkpoints = _checkpoints(runtime)
    ledger = served_ledger(settings, resolved.ledger, runtime)
    return DeadlineWatcher(resolved.escalation, checkpoints, ledger)


@contextlib.asynccontextmanager
async def watch_deadlines(
    environ: Mapping[str, str] | None = None,
) -> AsyncIterator[DeadlineWatcher | None]:
    """Run the served graph's watcher in the background until the block exits.

    Never raises for the watcher: one that cannot start is logged (the server serves on).
    """
    try:
        watcher = served_watcher(environ)
    except Exception as exc:
        logger.error("algenta-graph deadlines: not watched: %s", exc)
        watcher = None
    if watcher is None:
        yield None
        return
    logger.info(
        "algenta-graph deadlines: watching every %ss", watcher.settings.check_every.total_seconds()
    )
    task = asyncio.create_task(watcher.run(), name="algenta-graph deadlines")
    try:
        yield watcher
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await watcher.aclose()
