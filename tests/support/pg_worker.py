"""Worker processes for the scale-out tests: many governed threads per process, many processes.

Run as a script, it is a fork server: it imports the graph's whole stack once, then reads jobs
(one JSON object per line on stdin) and forks a **new worker process** for each, at once, so
several workers run side by side. Each worker opens its own checkpointer (``db``: a
``postgresql://`` URL or a SQLite path, through ``open_checkpointer``) and its own engine
connection, builds the governed graph, and runs all its threads concurrently (one asyncio task
each), writing progress as JSON lines to the job's progress file. The server reports each
worker's PID at once, and its exit status when it ends, on stdout. A test SIGKILLs a worker when
it chooses; another worker takes its threads over from whatever the database holds.

A job::

    {"job": "w1", "db": "postgresql://...", "engine_url": "http://127.0.0.1:PORT/mcp",
     "progress": "/tmp/x/w1.jsonl", "durability": "async" | "sync" | null,
     "threads": [{"thread_id": "t1", "prompt": "execute decision_id=... webhook_url=...",
                  "resume_command": {"action": "override", "operator": ..., "reason": ...}}],
     "go": "/tmp/x/go" (optional: wait for this file before running any thread),
     "takeover": "/tmp/x/takeover.json" (optional: after its own threads, wait for this file,
                 a JSON list of threads like ``threads``, and finish those too),
     "pool_size": 10}

Each thread runs fresh when the database holds no checkpoint of it, answers a pending
escalation with its ``resume_command`` when it has one, and otherwise resumes with ``None``
(what ``graph.ainvoke(None, config)`` does), until it ends (at most 3 passes). With
``"new_turn": true`` a thread's first pass sends its prompt as a new turn whatever it holds.

Progress events (one JSON line each, flushed at once; every one has ``pid``): ``ready``
(graph built), ``start`` (``thread``, ``mode``: ``fresh`` | ``turn`` | ``answer`` |
``resume``), ``update`` (``thread``, ``node``), ``done`` (``thread``, ``receipts``,
``denials``, ``operator_decisions``, ``interrupts``, ``next``), ``lost`` (``thread``,
``winner``: another worker's answer to the escalation took effect first), ``error``
(``thread`` or null, ``error``), ``takeover`` (``threads``), ``exit``.

:class:`WorkerServer` is the test-side client (thread-safe).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any

# --------------------------------------------------------------------------- the worker


async def _wait_for_file(path: str, timeout: float = 120) -> None:
    import asyncio

    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        await asyncio.sleep(0.005)


async def run_worker(job: dict[str, Any], progress: IO[str]) -> int:
    """Run one worker: its threads at once, then any threads it is told to take over."""
    import asyncio

    from langchain_core.messages import HumanMessage
    from langgraph.types import Command

    from algenta_graph.connection.engine import EngineConnection
    from algenta_graph.errors import EscalationAlreadyDecided
    from algenta_graph.graph import governed_agent
    from algenta_graph.models import DemoChatModel
    from algenta_graph.serving.checkpointer import open_checkpointer

    def mark(event: str, **fields: Any) -> None:
        line = {"event": event, "pid": os.getpid(), "t": round(time.time(), 4), **fields}
        progress.write(json.dumps(line, default=str) + "\n")
        progress.flush()

    failures = 0
    kwargs = {"durability": job["durability"]} if job.get("durability") else {}
    async with (
        open_checkpointer(job["db"], pool_size=int(job.get("pool_size", 10))) as saver,
        # the reference engine has no keys: its one (absent) key is the operator credential too
        EngineConnection(
            job["engine_url"], profile="execute", operator_key_is_agent_key=True
        ) as conn,
        governed_agent(DemoChatModel(), connection=conn, checkpointer=saver) as graph,
    ):
        mark("ready")

        async def run_thread(spec: dict[str, Any]) -> None:
            nonlocal failures
            name = spec["thread_id"]
            config: Any = {"configurable": {"thread_id": name}}
            try:
                answered = False
                for attempt in range(3):
                    snapshot = await graph.aget_state(config)
                    run_input: Any
                    if attempt == 0 and spec.get("new_turn"):
                        mode, run_input = "turn", {"messages": [HumanMessage(spec["prompt"])]}
                    elif await saver.aget_tuple(config) is None:
                        mode, run_input = "fresh", {"messages": [HumanMessage(spec["prompt"])]}
                    elif snapshot.interrupts and spec.get("resume_command") and not answered:
                        mode, run_input = "answer", Command(resume=spec["resume_command"])
                        answered = True
                    elif attempt == 0 or snapshot.next:
                        # ``snapshot.next`` alone is not enough on the first pass: a thread
                        # killed right after its input was written (async durability) has
                        # ``next == ()`` and its input's writes pending, yet nothing ran
                        mode, run_input = "resume", None
                    else:
                        break  # the thread has ended (or waits for an operator)
                    mark("start", thread=name, mode=mode)
                    async for update in graph.astream(
                        run_input, config, stream_mode="updates", **kwargs
                    ):
                        for node in update:
                            mark("update", thread=name, node=node)
                final = await graph.aget_state(config)
                mark(
                    "done",
                    thread=name,
                    receipts=final.values.get("receipts", []),
                    denials=final.values.get("denials", []),
                    operator_decisions=final.values.get("operator_decisions", []),
                    interrupts=len(final.interrupts),
                    next=list(final.next),
                )
            except EscalationAlreadyDecided as exc:
                # another worker's answer to this escalation took effect first: not a failure
                mark("lost", thread=name, winner=exc.claim.value.operator, error=str(exc))
            except Exception:
                failures += 1
                mark("error", thread=name, error=traceback.format_exc())

        if job.get("go"):
            await _wait_for_file(job["go"])
        await asyncio.gather(*(run_thread(spec) for spec in job.get("threads", [])))
        if job.get("takeover"):
            await _wait_for_file(job["takeover"])
            orphans = json.loads(Path(job["takeover"]).read_text(encoding="utf-8"))
            mark("takeover", threads=[spec["thread_id"] for spec in orphans])
            await asyncio.gather(*(run_thread(spec) for spec in orphans))
    mark("exit", failures=failures)
    return 1 if failures else 0


def _child(job: dict[str, Any]) -> int:
    import asyncio

    with open(job["progress"], "a", buffering=1, encoding="utf-8") as progress:
        try:
            return asyncio.run(run_worker(job, progress))
        except BaseException:
            progress.write(
                json.dumps(
                    {
                        "event": "error",
                        "pid": os.getpid(),
                        "thread": None,
                        "error": traceback.format_exc(),
                    }
                )
                + "\n"
            )
            progress.flush()
            return 1


def serve() -> None:
    """Read jobs, fork a worker for each at once, report PIDs and exits (no threads here)."""
    # Import the whole stack once, before any fork, so every worker starts warm.
    import langgraph.checkpoint.postgres.aio
    import langgraph.checkpoint.sqlite.aio  # noqa: F401
    import psycopg_pool  # noqa: F401

    out = sys.stdout

    def say(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    say({"ready": True, "pid": os.getpid()})
    stdin = sys.stdin.fileno()
    buffer = b""
    running: dict[int, str] = {}
    closed = False
    while not closed or running:
        if not closed:
            readable, _, _ = select.select([stdin], [], [], 0.002)
            if readable:
                chunk = os.read(stdin, 65536)
                closed = not chunk
                buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if not line.strip():
                continue
            job = json.loads(line)
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # the worker: a new process with its own loop, pool and session
                devnull = os.open(os.devnull, os.O_RDWR)
                os.dup2(devnull, 0)
                os.dup2(2, 1)  # nothing the worker prints may reach the protocol pipe
                os._exit(_child(job))
            running[pid] = job["job"]
            say({"job": job["job"], "pid": pid})
        while running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            exit_info: dict[str, Any] = {"job": running.pop(pid), "pid": pid}
            if os.WIFSIGNALED(status):
                exit_info["signal"] = os.WTERMSIG(status)
            else:
                exit_info["exit"] = os.WEXITSTATUS(status)
            say(exit_info)
        if closed and running:
            time.sleep(0.005)


# --------------------------------------------------------------------------- the test side


class WorkerServer:
    """Start ``pg_worker.py`` as a subprocess and run workers on it (test side, thread-safe).

    >>> with WorkerServer(log_path) as server:                        # doctest: +SKIP
    ...     pid = server.submit(job)        # the worker runs; kill it with os.kill(pid, 9)
    ...     server.wait_exit(job["job"])    # {"job", "pid", "exit" | "signal"}
    """

    def __init__(self, log_path: str | Path) -> None:
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._pids: dict[str, int] = {}
        self._exits: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> WorkerServer:
        log = open(self.log_path, "ab")  # handed to the child, closed below
        try:
            self.proc = subprocess.Popen(
                [sys.executable, __file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        finally:
            log.close()
        ready = self._read_line(timeout=120)
        if not ready or not ready.get("ready"):
            raise RuntimeError(f"worker server did not start: {ready}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        with self._lock:
            for job, pid in self._pids.items():  # a worker still running is killed by PID
                if job not in self._exits:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def _read_line(self, timeout: float) -> dict[str, Any] | None:
        """The next protocol line, or ``None`` when none came within ``timeout``."""
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self.proc.stdout], [], [], remaining)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    raise RuntimeError(
                        "worker server exited: " + self.log_path.read_text(errors="replace")[-3000:]
                    )
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return dict(json.loads(line))

    def _pump_until(self, done: Any, timeout: float) -> None:
        """Read protocol lines (never holding the lock for long) until ``done()``."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if done():
                    return
                answer = self._read_line(timeout=0.02)
                if answer is None:
                    pass
                elif "exit" in answer or "signal" in answer:
                    self._exits[answer["job"]] = answer
                elif "pid" in answer:
                    self._pids[answer["job"]] = int(answer["pid"])
            if time.monotonic() > deadline:
                raise TimeoutError(f"no answer from the worker server in {timeout}s")
            time.sleep(0)  # let another thread take the lock

    def submit(self, job: dict[str, Any]) -> int:
        """Start ``job`` in a new worker process; return its PID at once."""
        assert self.proc is not None and self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write((json.dumps(job) + "\n").encode())
            self.proc.stdin.flush()
        self._pump_until(lambda: job["job"] in self._pids, timeout=30)
        return self._pids[job["job"]]

    def wait_exit(self, job_id: str, timeout: float = 120) -> dict[str, Any]:
        """Wait for the worker of ``job_id`` to end: ``{"exit": code}`` or ``{"signal": n}``."""
        self._pump_until(lambda: job_id in self._exits, timeout=timeout)
        return self._exits[job_id]


def read_progress(path: str | Path) -> list[dict[str, Any]]:
    """The progress events a worker wrote so far (a torn last line is ignored)."""
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
