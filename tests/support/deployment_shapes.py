"""The deployment shapes of the matrix, each driven through one interface by the same scenarios.

A **shape** is a way the governed graph is deployed (:data:`SHAPES`):

- ``served-inmem``: ``langgraph dev`` with its default in-memory runtime (state that cannot
  outlive or leave its one process: a process-local ledger is right there);
- ``served-sqlite``: ``langgraph dev`` with the project's server checkpointer on a SQLite file
  (``"checkpointer": {"path": "algenta_graph.serving.checkpointer.server_checkpointer"}``,
  ``ALGENTA_CHECKPOINTER=<file>``);
- ``served-postgres``: **two** ``langgraph dev`` processes on one PostgreSQL database through the
  server checkpointer; each thread is registered on both (same thread id), so an answer, a
  copy's answer or a new message can reach the second worker, which shares nothing with the
  first but the database (the runs, their cancellations and every in-process cache are each
  server's own);
- ``library-subclass`` / ``library-wrapper``: ``create_governed_agent`` on a saver of a class
  the project does not know (``deployment_savers``), two workers (each its own graph, saver,
  SQLite connection and engine connection, in the test's process) on one SQLite file.

Every shape has two **workers** (the served shapes on one server: the same one twice), a copy
of a thread (``POST /threads/{id}/copy``, or the saver-level copy the server makes), and the
same operations: a user turn (alice), an operator's answer (ana, olga), a run started and
cancelled while something it sent is in flight, a thread's values and what it waits on. An
answer or a turn ends in an :class:`Outcome`: its error as the client sees it, or none.

The real parts a module shares across shapes (one reference engine, one webhook receiver, one
CRM over MCP: every figure is counted per decision or per account) are :class:`Parts`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
from deployment_savers import DelegatingSaver, UnknownSqliteSaver
from guarantee_support import figure
from inflight_crm import InflightCrm
from served_support import CONFIG, bearer, langgraph_dev, user_turn, write_auth_file

from algenta_graph.engine import ReferenceEngine, WebhookReceiver

SHAPES = (
    "served-inmem",
    "served-sqlite",
    "served-postgres",
    "library-subclass",
    "library-wrapper",
)
SERVER_CHECKPOINTER = "algenta_graph.serving.checkpointer.server_checkpointer"
ASSISTANT = "governed_agent"
SUPPORT = Path(__file__).resolve().parent

TOKENS: dict[str, tuple[str, list[str]]] = {
    "tok-alice": ("alice", ["agent"]),
    "tok-ana": ("ana", ["operator"]),
    "tok-olga": ("olga", ["operator"]),
    "tok-vera": ("vera", ["operator"]),  # an operator who never answers
    "tok-rita": ("rita", ["operator:risk_floor"]),  # an operator of another gate
    "tok-bob": ("bob", ["agent"]),  # an agent who does not own the thread
}
TOKEN_OF = {identity: token for token, (identity, _) in TOKENS.items()}
REFUND_LIMIT = 1
"""``Budget(tool="crm.refund", thread_limit=1)``: at most one refund per thread."""
TOOL_GATES = {
    "require_approval": ["crm.delete_customer"],
    "budgets": [{"tool": "crm.refund", "thread_limit": REFUND_LIMIT}],
}
"""The graph-side gates of every shape: a held delete, a budgeted refund."""


@dataclass(frozen=True)
class Parts:
    """The real servers every shape of a module talks to, and where its files go."""

    engine: ReferenceEngine
    webhook: WebhookReceiver
    crm: InflightCrm
    root: Path

    def config_file(self) -> Path:
        """The served graph's configuration (``ALGENTA_CONFIG``): engine, CRM, tool gates."""
        path = self.root / "agent.toml"
        budgets = "".join(
            f'\n[[tool_gates.budgets]]\ntool = "{b["tool"]}"\nthread_limit = {b["thread_limit"]}\n'
            for b in TOOL_GATES["budgets"]  # type: ignore[attr-defined]
        )
        path.write_text(
            f'base_url = "{self.engine.url}"\nprofile = "execute"\nmodel = "demo"\n'
            "operator_key_is_agent_key = true\n\n"
            f'[extra_servers.crm]\ntransport = "streamable_http"\nurl = "{self.crm.url}"\n'
            f"\n[tool_gates]\nrequire_approval = {json.dumps(TOOL_GATES['require_approval'])}\n"
            + budgets
        )
        return path


@dataclass(frozen=True)
class Outcome:
    """How one run ended, as its client sees it: ``error`` (type and message) or ``None``."""

    error: str | None = None
    said: str = ""
    """What the client received instead, when no error (the start of the body)."""
    hidden: str | None = None
    """The run's own error where its client could not read it (the thread's owner reads it)."""

    def names(self, identity: str) -> bool:
        """Whether this is an error that names ``identity`` (as who decided), not an
        unexplained failure."""
        if self.error is None or "internal error" in self.error.lower():
            return False
        return re.search(rf"\b{re.escape(identity)}\b", self.error) is not None


class Run(Protocol):
    """A run started and not awaited (to be cancelled)."""


class Worker(Protocol):
    """One process (or graph) serving the shape's threads."""

    async def new_thread(self) -> str:
        """A new thread, owned by alice."""
        ...

    async def turn(self, thread: str, text: str) -> Outcome:
        """Alice sends ``text`` on ``thread``; the run's end."""
        ...

    async def answer(self, thread: str, operator: str, resume: Mapping[str, Any]) -> Outcome:
        """``operator`` answers what ``thread`` waits on with ``resume``; the run's end."""
        ...

    async def start_turn(self, thread: str, text: str) -> Run:
        """:meth:`turn`, started and not awaited."""
        ...

    async def start_answer(self, thread: str, operator: str, resume: Mapping[str, Any]) -> Run:
        """:meth:`answer`, started and not awaited."""
        ...

    async def cancel(self, run: Run) -> None:
        """Cancel ``run`` (``action="interrupt"``, or the task's cancellation) and wait for it."""
        ...


class Deployment(Protocol):
    """A shape, open: its two workers and what reads the threads."""

    @property
    def shape(self) -> str:
        """The shape's name (:data:`SHAPES`)."""
        ...

    @property
    def workers(self) -> tuple[Worker, Worker]:
        """Its two workers (a served shape on one server: the same one twice)."""
        ...

    async def copy(self, thread: str) -> str:
        """A copy of ``thread`` (owned by alice), known to both workers."""
        ...

    async def values(self, thread: str) -> dict[str, Any]:
        """``thread``'s values; its messages as plain dicts."""
        ...

    async def waiting(self, thread: str) -> list[dict[str, Any]]:
        """The values of the interrupts ``thread`` waits on."""
        ...

    async def history(self, thread: str) -> list[dict[str, Any]]:
        """The values of every checkpoint of ``thread`` (forks included), newest first."""
        ...


# ---------------------------------------------------------------------------------- served


@dataclass(frozen=True)
class ServedSpec:
    """The running server(s) of a served shape."""

    shape: str
    urls: tuple[str, ...]

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[ServedDeployment]:
        """Clients for this test's event loop."""
        first = ServedWorker(self.urls[0])
        second = ServedWorker(self.urls[-1], home=self.urls[0] if len(self.urls) > 1 else None)
        try:
            yield ServedDeployment(self.shape, (first, second))
        finally:
            for worker in {id(first): first, id(second): second}.values():
                await worker.aclose()


def served_config(checkpointer: str | None) -> dict[str, Any]:
    """The repository's ``langgraph.json``, its checkpointer set (``None``: the runtime's)."""
    config: dict[str, Any] = json.loads(CONFIG.read_text())
    config.pop("env", None)  # every setting comes from the server's environment here
    if checkpointer is not None:
        config["checkpointer"] = {"path": checkpointer}
    return config


def served_env(parts: Parts, **extra: str) -> dict[str, str]:
    """A served shape's environment: its configuration file, the auth file, this directory on
    the server's path (for the savers a test names), and ``extra``."""
    path = os.pathsep.join(p for p in (str(SUPPORT), os.environ.get("PYTHONPATH", "")) if p)
    return {
        "ALGENTA_CONFIG": str(parts.config_file()),
        "ALGENTA_AUTH_FILE": str(write_auth_file(parts.root / "auth.json", TOKENS)),
        "PYTHONPATH": path,
        **extra,
    }


def served_files(
    name: str, parts: Parts, checkpointer: str | None, **env: str
) -> tuple[Path, dict[str, str]]:
    """A served deployment's ``langgraph.json`` (its ``checkpointer`` path, ``None``: the
    runtime's) under ``parts.root / name``, and its environment (:func:`served_env`)."""
    root = parts.root / name
    root.mkdir(parents=True, exist_ok=True)
    config_path = root / "langgraph.json"
    config_path.write_text(json.dumps(served_config(checkpointer)))
    return config_path, served_env(parts, **env)


@contextlib.contextmanager
def served_shape(shape: str, parts: Parts, database: str | None = None) -> Iterator[ServedSpec]:
    """Start ``shape``'s server(s) on ``database`` (the server checkpointer's; ``None`` for the
    in-memory runtime); stop them by their process group when the block exits."""
    checkpointer = None if database is None else SERVER_CHECKPOINTER
    config_path, env = served_files(
        shape, parts, checkpointer, **({"ALGENTA_CHECKPOINTER": database} if database else {})
    )
    count = 2 if shape == "served-postgres" else 1
    with contextlib.ExitStack() as stack:
        urls = tuple(
            stack.enter_context(
                langgraph_dev(
                    config_path,
                    workdir=config_path.parent / f"server-{n}",
                    env=env,
                    extra_args=("--n-jobs-per-worker", "4"),  # runs at once, so answers race
                )
            ).url
            for n in range(count)
        )
        yield ServedSpec(shape, urls)


@dataclass
class ServedRun:
    """A served run started and not awaited."""

    thread: str
    run_id: str


class ServedWorker:
    """One ``langgraph dev`` server, as each identity of :data:`TOKENS` (``langgraph_sdk``).

    Args:
        url: the server.
        home: the server the threads are created and copied on, when this is a second one. A
            second server knows a thread of the shared database only once told of it: it is
            registered here under the same id and graph (as a deployment sharing its thread
            store would know it), without the metadata the graph set on the first (what the
            thread waits on, who decided). Every caller is told only what its own requests
            here return: a loser must be told by name on this server too.
    """

    def __init__(self, url: str, *, home: str | None = None) -> None:
        from langgraph_sdk import get_client

        self.url = url
        self.home = home
        self.clients: dict[str, Any] = {
            who: get_client(url=url, headers=bearer(token)) for who, token in TOKEN_OF.items()
        }
        self.http = httpx.AsyncClient(base_url=url, timeout=600)
        self.known: set[str] = set()

    async def aclose(self) -> None:
        """Close the clients' connections."""
        for client in self.clients.values():
            await client.aclose()
        await self.http.aclose()

    async def register(self, thread: str) -> None:
        """Make ``thread`` known here (a no-op on the server that created it)."""
        if self.home is not None and thread not in self.known:
            await self.clients["alice"].threads.create(
                thread_id=thread, if_exists="do_nothing", graph_id=ASSISTANT
            )
        self.known.add(thread)

    async def new_thread(self) -> str:
        """See :class:`Worker`."""
        thread = str((await self.clients["alice"].threads.create())["thread_id"])
        self.known.add(thread)
        return thread

    async def turn(self, thread: str, text: str) -> Outcome:
        """See :class:`Worker`."""
        return await self._wait("alice", thread, input=user_turn(text))

    async def answer(self, thread: str, operator: str, resume: Mapping[str, Any]) -> Outcome:
        """See :class:`Worker` (queued behind a run in progress, as a second answer would be)."""
        return await self._wait(
            operator, thread, command={"resume": dict(resume)}, multitask_strategy="enqueue"
        )

    async def start_turn(self, thread: str, text: str) -> ServedRun:
        """See :class:`Worker`."""
        return await self._create("alice", thread, input=user_turn(text))

    async def start_answer(
        self, thread: str, operator: str, resume: Mapping[str, Any]
    ) -> ServedRun:
        """See :class:`Worker`."""
        return await self._create(operator, thread, command={"resume": dict(resume)})

    async def cancel(self, run: Run) -> None:
        """See :class:`Worker`: the thread's owner cancels with ``action="interrupt"``."""
        assert isinstance(run, ServedRun)
        await self.clients["alice"].runs.cancel(
            run.thread, run.run_id, wait=True, action="interrupt"
        )

    async def sdk_answer(
        self, who: str, thread: str, resume: Mapping[str, Any], call: str
    ) -> Outcome:
        """``who`` answers through the SDK ``call`` (:data:`SDK_CALLS`), queued behind a run in
        progress: what the SDK raises or the run's error as that call returns it."""
        await self.register(thread)
        client = self.clients[who]
        sent: dict[str, Any] = {
            "command": {"resume": dict(resume)},
            "multitask_strategy": "enqueue",
        }
        try:
            if call == "wait":
                return _sdk_end(await client.runs.wait(thread, ASSISTANT, **sent))
            if call == "create+join":
                run = await client.runs.create(thread, ASSISTANT, **sent)
                return _sdk_end(await client.runs.join(thread, run["run_id"]))
            assert call == "stream", call
            async for part in client.runs.stream(thread, ASSISTANT, stream_mode="values", **sent):
                if part.event == "error":
                    return _sdk_end({"__error__": part.data})
            return Outcome(said="a stream without an error")
        except Exception as exc:  # what the caller is told: the SDK's error and its message
            # (runs.wait raises httpx's error with the response body as its note, shown with it)
            told = " ".join([str(exc), *getattr(exc, "__notes__", ())])
            return Outcome(f"{type(exc).__name__}: {told}")

    async def reads(self, who: str, thread: str) -> bool:
        """Whether ``who`` may read ``thread`` here (``GET /threads/{id}``)."""
        found = await self.http.get(f"/threads/{thread}", headers=bearer(TOKEN_OF[who]))
        return found.status_code == 200

    async def _create(self, who: str, thread: str, **kwargs: Any) -> ServedRun:
        await self.register(thread)
        run = await self.clients[who].runs.create(thread, ASSISTANT, **kwargs)
        return ServedRun(thread, str(run["run_id"]))

    async def _wait(self, who: str, thread: str, **body: Any) -> Outcome:
        """``POST /threads/{id}/runs/wait`` as ``who``: what that client is told of the run
        (an HTTP error, the run's ``__error__``, or nothing: an empty body too)."""
        await self.register(thread)
        response = await self.http.post(
            f"/threads/{thread}/runs/wait",
            json={"assistant_id": ASSISTANT, **body},
            headers=bearer(TOKEN_OF[who]),
        )
        if response.is_error:
            return Outcome(f"HTTP {response.status_code}: {response.text}")
        error = _run_error(response)
        if error is not None:
            return Outcome(error)
        hidden = await self._owners_view(thread, response)
        return Outcome(said=response.text[:200], hidden=hidden)

    async def _owners_view(self, thread: str, response: httpx.Response) -> str | None:
        """The error of the run ``response`` answered for, as the thread's owner reads it."""
        where = response.headers.get("content-location", "")
        if f"/threads/{thread}/runs/" not in where:
            return None
        # a connection of its own: the server closes the one a streamed result came on
        async with httpx.AsyncClient(
            base_url=self.url, headers=bearer(TOKEN_OF["alice"]), timeout=120
        ) as owner:
            run = await owner.get(where)
            if run.is_error or run.json().get("status") != "error":
                return None
            return _run_error(await owner.get(f"{where}/join"))


SDK_CALLS = ("wait", "create+join", "stream")
"""The SDK calls an operator answers with: ``runs.wait``, ``runs.create`` + ``runs.join``,
``runs.stream``."""


def _sdk_end(result: Any) -> Outcome:
    error = result.get("__error__") if isinstance(result, dict) else None
    if isinstance(error, dict):
        return Outcome(f"{error.get('error')}: {error.get('message')}")
    return Outcome(said=str(result)[:200])


def _run_error(response: httpx.Response) -> str | None:
    """The ``__error__`` of a run's result, as ``"Type: message"``."""
    result = response.json() if response.content.strip() else None
    error = result.get("__error__") if isinstance(result, dict) else None
    if isinstance(error, dict):
        return f"{error.get('error')}: {error.get('message')}"
    return None


@dataclass
class ServedDeployment:
    """A served shape, open (see :class:`Deployment`)."""

    shape: str
    workers: tuple[ServedWorker, ServedWorker]

    async def copy(self, thread: str) -> str:
        """``POST /threads/{id}/copy`` as alice on the first server."""
        first = self.workers[0]
        async with httpx.AsyncClient(base_url=first.url, timeout=120) as http:
            response = await http.post(f"/threads/{thread}/copy", headers=bearer("tok-alice"))
        assert response.status_code == 200, response.text
        copied = str(response.json()["thread_id"])
        first.known.add(copied)
        return copied

    async def _state(self, thread: str) -> dict[str, Any]:
        state: dict[str, Any] = await self.workers[0].clients["alice"].threads.get_state(thread)
        return state

    async def values(self, thread: str) -> dict[str, Any]:
        """See :class:`Deployment`."""
        values = (await self._state(thread))["values"]
        assert isinstance(values, dict), values
        return values

    async def waiting(self, thread: str) -> list[dict[str, Any]]:
        """See :class:`Deployment`."""
        state = await self._state(thread)
        return [dict(i["value"]) for t in state["tasks"] for i in t.get("interrupts") or []]

    async def history(self, thread: str) -> list[dict[str, Any]]:
        """See :class:`Deployment`."""
        alice = self.workers[0].clients["alice"]
        return [dict(s["values"]) for s in await alice.threads.get_history(thread, limit=1000)]


# ---------------------------------------------------------------------------------- library


def library_saver(shape: str, conn: Any) -> Any:
    """The shape's saver of an unknown class on the SQLite connection ``conn``."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    if shape == "library-subclass":
        return UnknownSqliteSaver(conn)
    return DelegatingSaver(AsyncSqliteSaver(conn))


@dataclass(frozen=True)
class LibrarySpec:
    """A library shape: its saver class and the SQLite file both workers share."""

    shape: str
    database: Path
    parts: Parts
    graph_options: Mapping[str, Any] = field(default_factory=dict)
    """What a worker's ``create_governed_agent`` gets besides the model, connection, saver and
    tool gates (the ledger)."""

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[LibraryDeployment]:
        """Two workers on this test's event loop."""
        async with contextlib.AsyncExitStack() as stack:
            workers = [await stack.enter_async_context(self._worker()) for _ in range(2)]
            yield LibraryDeployment(self.shape, (workers[0], workers[1]))

    @contextlib.asynccontextmanager
    async def _worker(self) -> AsyncIterator[LibraryWorker]:
        import aiosqlite

        from algenta_graph.connection.engine import EngineConnection
        from algenta_graph.governance.tool_gates import ToolGates
        from algenta_graph.graph import aclose_governed_agent, create_governed_agent
        from algenta_graph.models import DemoChatModel

        conn = await aiosqlite.connect(self.database, timeout=120)
        try:
            await conn.execute("PRAGMA busy_timeout = 120000")
            saver = library_saver(self.shape, conn)
            async with EngineConnection(
                self.parts.engine.url,
                profile="execute",
                extra_servers={"crm": self.parts.crm.connection()},
                operator_key_is_agent_key=True,  # the reference engine here has no keys
            ) as engine:
                graph = await create_governed_agent(
                    DemoChatModel(),
                    connection=engine,
                    checkpointer=saver,
                    tool_gates=ToolGates.model_validate(TOOL_GATES),
                    **self.graph_options,
                )
                try:
                    yield LibraryWorker(graph, saver)
                finally:
                    await aclose_governed_agent(graph)  # what it opened: its ledger
        finally:
            await conn.close()


@dataclass
class LibraryRun:
    """A library run started and not awaited: its task."""

    task: asyncio.Task[Outcome]


class LibraryWorker:
    """One governed graph (``graph.ainvoke``) on its own saver object.

    Args:
        graph: the compiled graph.
        saver: its saver (the copy is made through it).
    """

    def __init__(self, graph: Any, saver: Any) -> None:
        self.graph = graph
        self.saver = saver

    async def new_thread(self) -> str:
        """See :class:`Worker`."""
        return f"lib-{uuid.uuid4().hex[:12]}"

    async def turn(self, thread: str, text: str) -> Outcome:
        """See :class:`Worker`."""
        return await self._run({"messages": [("user", text)]}, thread)

    async def answer(self, thread: str, operator: str, resume: Mapping[str, Any]) -> Outcome:
        """See :class:`Worker`."""
        from langgraph.types import Command

        return await self._run(Command(resume={**resume, "operator": operator}), thread)

    async def start_turn(self, thread: str, text: str) -> LibraryRun:
        """See :class:`Worker`."""
        return LibraryRun(asyncio.create_task(self.turn(thread, text)))

    async def start_answer(
        self, thread: str, operator: str, resume: Mapping[str, Any]
    ) -> LibraryRun:
        """See :class:`Worker`."""
        return LibraryRun(asyncio.create_task(self.answer(thread, operator, resume)))

    async def cancel(self, run: Run) -> None:
        """See :class:`Worker`: the run's task is cancelled (its caller went away)."""
        assert isinstance(run, LibraryRun)
        run.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run.task

    async def _run(self, value: Any, thread: str) -> Outcome:
        try:
            await self.graph.ainvoke(value, config_for(thread))
        except Exception as exc:  # the caller's view of a failed run: its type and message
            return Outcome(f"{type(exc).__name__}: {exc}")
        return Outcome()


def config_for(thread: str) -> dict[str, Any]:
    """A library run's config on ``thread``."""
    return {"configurable": {"thread_id": thread}}


@dataclass
class LibraryDeployment:
    """A library shape, open (see :class:`Deployment`)."""

    shape: str
    workers: tuple[LibraryWorker, LibraryWorker]

    async def copy(self, thread: str) -> str:
        """The saver-level copy the LangGraph server makes (``graph_support.copy_thread``: no
        ``update_state``, nothing the graph could notice), through worker 1."""
        from graph_support import copy_thread

        copied = await self.workers[0].new_thread()
        await copy_thread(self.workers[0].saver, thread, copied)
        return copied

    async def values(self, thread: str) -> dict[str, Any]:
        """See :class:`Deployment`."""
        state = await self.workers[0].graph.aget_state(config_for(thread))
        values = dict(state.values)
        values["messages"] = [m.model_dump() for m in values.get("messages", [])]
        return values

    async def waiting(self, thread: str) -> list[dict[str, Any]]:
        """See :class:`Deployment`."""
        state = await self.workers[0].graph.aget_state(config_for(thread))
        return [dict(i.value) for i in state.interrupts]

    async def history(self, thread: str) -> list[dict[str, Any]]:
        """See :class:`Deployment`."""
        graph = self.workers[0].graph
        return [dict(s.values) async for s in graph.aget_state_history(config_for(thread))]


# ---------------------------------------------------------------------------------- figures


@dataclass
class Tally:
    """One scenario's figures on one shape, and what went wrong, round by round."""

    scenario: str
    shape: str
    rounds: int = 0
    contradicting: int = 0
    duplicates: int = 0
    overruns: int = 0
    losers: int = 0
    told: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, what: str) -> None:
        """Keep ``what`` (the round it happened in is prefixed)."""
        self.problems.append(f"round {self.rounds}: {what}")

    def loser(self, outcome: Outcome, winner: str, who: str) -> None:
        """``who`` answered an escalation ``winner`` had decided: it must be told so."""
        self.losers += 1
        if outcome.names(winner):
            self.told += 1
        else:
            said = outcome.error or f"a silent success ({outcome.said!r})"
            if outcome.hidden is not None:
                said += f"; its run failed with {outcome.hidden!r}, which {who} could not read"
            self.problem(f"{who} was not told that {winner} decided: {said}")

    def report(self) -> str:
        """Print the scenario's ``FIGURE`` line on this shape."""
        return figure(
            f"deployment_{self.scenario}",
            shape=self.shape,
            rounds=self.rounds,
            contradicting_records=self.contradicting,
            duplicate_executions=self.duplicates,
            budget_overruns=self.overruns,
            losers=self.losers,
            losers_told=self.told,
        )

    def check(self) -> None:
        """Print the figures, then assert the zeros (and every loser told)."""
        line = self.report()
        assert self.rounds > 0, line
        assert not self.problems, line + "\n" + "\n".join(self.problems)
        assert (self.contradicting, self.duplicates, self.overruns) == (0, 0, 0), line
        assert self.told == self.losers, line
