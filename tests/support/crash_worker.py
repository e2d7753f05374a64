"""A fork server that runs the governed graph in child processes a test can SIGKILL.

Run as a script, it imports the graph's whole stack once and then serves jobs, one JSON object
per line on stdin. For each job it forks a **new process** that opens the SQLite checkpoint file,
connects to the engine, and runs (or resumes) one thread of the governed graph to its end,
writing its progress as JSON lines to the job's progress file. The fork server reports the
child's PID at once, and its exit status when it ends, on stdout. A test kills a child with
SIGKILL at the moment it chooses; the next job on the same thread is a fresh process that
resumes from whatever the checkpoint file holds. Forking from a warm process keeps each run
at a fraction of a second instead of a full interpreter start.

A job::

    {"job": "c01-1", "thread_id": "t01", "prompt": "execute decision_id=... webhook_url=...",
     "engine_url": "http://127.0.0.1:PORT/mcp", "db": "/tmp/x/checkpoints.sqlite",
     "progress": "/tmp/x/c01-1.jsonl", "durability": "async" | "sync" | null,
     "resume_command": {"action": "override", "operator": ..., "reason": ...} | absent,
     "configurable": {"on_denial": {...}} | absent, "hold_after": "governed_tool" | absent}

A job resumes its thread from whatever checkpoint the file holds; when the thread waits at an
escalation and the job carries ``resume_command``, it answers the escalation with it.
``configurable`` joins the run's config (a stricter ``on_denial``). ``hold_after`` names a node
(or ``"start"``): right after that node's update is written to the progress file, the child
writes a ``holding`` event and **blocks** (its event loop too, so nothing more happens in it),
waiting for the test's SIGKILL. That makes a kill at a node land every time, at that moment.

The checkpoint file is opened with a long SQLite busy timeout: two processes share it (and a
killed one may leave a WAL to recover), and under load the default 5 s wait was once exceeded
(``database is locked`` in a worker).

Progress events (one JSON line each, flushed at once): ``start`` (``mode``: ``fresh``,
``answer`` or ``resume``; ``next``), ``update`` (``node``), ``told`` (an answer given again
after a crash, refused: ``winner``, ``error``), ``done`` (``receipts``,
``denials``, ``operator_decisions``, ``interrupts``, ``next``) or ``error`` (``error``: the
traceback).

:class:`ForkServer` is the test-side client.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import IO, Any

# --------------------------------------------------------------------------- the child

BUSY_TIMEOUT_SECONDS = 120.0


async def run_job(job: dict[str, Any], progress: IO[str]) -> None:
    """Run or resume one thread of the governed graph, reporting progress."""
    import aiosqlite
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.types import Command

    from algenta_graph.connection.engine import EngineConnection
    from algenta_graph.errors import EscalationAlreadyDecided
    from algenta_graph.graph import governed_agent
    from algenta_graph.models import DemoChatModel

    def mark(event: str, **fields: Any) -> None:
        line = {"event": event, "pid": os.getpid(), "t": round(time.time(), 4), **fields}
        progress.write(json.dumps(line) + "\n")
        progress.flush()

    def hold(node: str) -> None:
        if job.get("hold_after") == node:
            mark("holding", node=node)
            time.sleep(300)  # blocking on purpose: the test SIGKILLs this process now
            raise RuntimeError(f"held after {node} and nobody killed this process")

    async with (
        aiosqlite.connect(job["db"], timeout=BUSY_TIMEOUT_SECONDS) as db,
        # the reference engine has no keys: its one (absent) key is the operator credential too
        EngineConnection(
            job["engine_url"], profile="execute", operator_key_is_agent_key=True
        ) as conn,
        governed_agent(
            DemoChatModel(),
            connection=conn,
            checkpointer=AsyncSqliteSaver(db),
            ledger=job["db"],  # the processes that crash and resume share it
        ) as graph,
    ):
        saver = graph.checkpointer
        assert isinstance(saver, AsyncSqliteSaver)
        configurable = {**job.get("configurable", {}), "thread_id": job["thread_id"]}
        config: Any = {"configurable": configurable}
        snapshot = await graph.aget_state(config)
        # Resume whenever the file holds any checkpoint of the thread. ``snapshot.next`` is not
        # enough: a thread killed right after its input was written (async durability) has
        # the input's writes pending and ``next == ()``, yet nothing has run.
        # A pending escalation is answered with the job's operator answer (the same answer
        # again after a crash: the handler runs again from its start).
        run_input: Any
        if await saver.aget_tuple(config) is None:
            mode, run_input = "fresh", {"messages": [HumanMessage(job["prompt"])]}
        elif snapshot.interrupts and job.get("resume_command"):
            mode, run_input = "answer", Command(resume=job["resume_command"])
        else:
            mode, run_input = "resume", None
        mark("start", mode=mode, next=list(snapshot.next))
        hold("start")
        kwargs = {"durability": job["durability"]} if job.get("durability") else {}
        try:
            async for update in graph.astream(run_input, config, stream_mode="updates", **kwargs):
                for node in update:
                    mark("update", node=node)
                    hold(node)
        except EscalationAlreadyDecided as exc:
            if mode != "answer":
                raise
            # the same answer again after a crash: the one given before it took effect, and the
            # thread's records hold it now; this one is told so
            mark("told", winner=exc.claim.value.operator, error=str(exc))
        final = await graph.aget_state(config)
        mark(
            "done",
            receipts=final.values.get("receipts", []),
            denials=final.values.get("denials", []),
            operator_decisions=final.values.get("operator_decisions", []),
            interrupts=len(final.interrupts),
            next=list(final.next),
        )


def _child(job: dict[str, Any]) -> int:
    import asyncio

    with open(job["progress"], "a", buffering=1, encoding="utf-8") as progress:
        try:
            asyncio.run(run_job(job, progress))
            return 0
        except BaseException:
            progress.write(
                json.dumps({"event": "error", "pid": os.getpid(), "error": traceback.format_exc()})
                + "\n"
            )
            progress.flush()
            return 1


def serve() -> None:
    """The fork server's loop: read a job, fork, report the PID, wait, report the exit."""
    # Import the whole stack once, before any fork, so every child starts warm.
    import langgraph.checkpoint.sqlite.aio  # noqa: F401

    import algenta_graph.connection.engine
    import algenta_graph.graph
    import algenta_graph.models
    import algenta_graph.retrieval  # noqa: F401

    out = sys.stdout
    out.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        out.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: a new process with its own event loop, session and SQLite
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, 0)
            os.dup2(2, 1)  # nothing the child prints may reach the protocol pipe
            os._exit(_child(job))
        out.write(json.dumps({"job": job["job"], "pid": pid}) + "\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        exit_info: dict[str, Any] = {"job": job["job"], "pid": pid}
        if os.WIFSIGNALED(status):
            exit_info["signal"] = os.WTERMSIG(status)
        else:
            exit_info["exit"] = os.WEXITSTATUS(status)
        out.write(json.dumps(exit_info) + "\n")
        out.flush()


# --------------------------------------------------------------------------- the test side


class ForkServer:
    """Start ``crash_worker.py`` as a subprocess and run jobs on it (test side).

    >>> with ForkServer(log_path) as server:                          # doctest: +SKIP
    ...     pid = server.submit(job)          # the child runs; kill it with os.kill(pid, 9)
    ...     server.wait_exit(job["job"])      # {"job", "pid", "exit" | "signal"}
    """

    def __init__(self, log_path: str | Path) -> None:
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen[str] | None = None
        self._buffer = ""

    def __enter__(self) -> ForkServer:
        log = open(self.log_path, "a", encoding="utf-8")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, __file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                bufsize=1,
            )
        finally:
            log.close()
        ready = self._read(timeout=120)
        if not ready.get("ready"):
            raise RuntimeError(f"fork server did not start: {ready}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while "\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer from the fork server in {timeout}s")
            ready, _, _ = select.select([self.proc.stdout], [], [], remaining)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536).decode()
                if not chunk:
                    raise RuntimeError(
                        "fork server exited: " + self.log_path.read_text(errors="replace")[-3000:]
                    )
                self._buffer += chunk
        line, self._buffer = self._buffer.split("\n", 1)
        return dict(json.loads(line))

    def submit(self, job: dict[str, Any]) -> int:
        """Start ``job`` in a new child process; return its PID at once."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        answer = self._read(timeout=30)
        if answer.get("job") != job["job"] or "pid" not in answer:
            raise RuntimeError(f"unexpected fork server answer {answer}")
        return int(answer["pid"])

    def wait_exit(self, job_id: str, timeout: float = 90) -> dict[str, Any]:
        """Wait for the child of ``job_id`` to end: ``{"exit": code}`` or ``{"signal": n}``."""
        answer = self._read(timeout=timeout)
        if answer.get("job") != job_id:
            raise RuntimeError(f"unexpected fork server answer {answer}")
        return answer


def read_progress(path: str | Path) -> list[dict[str, Any]]:
    """The progress events a child wrote so far (a torn last line is ignored)."""
    p = Path(path)
    if not p.exists():
        return []
    events = []
    for line in p.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


if __name__ == "__main__":
    serve()
