"""``algenta-graph receipts`` on the checkpoints of another LangGraph graph.

Real checkpoint files, written by real compiled LangGraph graphs that are not the governed one
(their state has no record fields, other fields, or record fields of other shapes), and the
same in a real PostgreSQL: ``receipts``, ``--jsonl``, ``--thread`` and ``--verify`` each print
one line naming the file (or the URL, without its password) and what is wrong, and exit 2 like
the CLI's other bad inputs; never an ``AttributeError`` or a traceback, and the file is left
as it was. A store shared by the governed graph and another one lists the governed threads and
names the others as left out; asking for one of those by ``--thread`` is the same one line.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any

import pytest
from cli_support import assert_one_line_error, cli
from langchain_core.messages import AIMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from postgres_support import postgres_server, postgres_url  # noqa: F401
from typing_extensions import TypedDict

from algenta_graph.audit.chain import seal
from algenta_graph.audit.history import verify_audit
from algenta_graph.audit.records import read_records
from algenta_graph.errors import RecordsFileError
from algenta_graph.state import RECORD_FIELDS, GovernedState

pytestmark = pytest.mark.timeout(300)

FIELDS = ", ".join(RECORD_FIELDS)
"""The governed record lists, as the refusal names them."""


def _graph(state: Any, update: Any) -> StateGraph[Any]:
    """A two-node graph of another application: ``first`` writes ``update``, ``second`` too."""
    builder: StateGraph[Any] = StateGraph(state)
    builder.add_node("first", lambda s: update)
    builder.add_node("second", lambda s: {})
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    return builder


class Counter(TypedDict, total=False):
    count: Annotated[int, operator.add]
    notes: list[str]


class ReceiptsText(TypedDict, total=False):
    receipts: str


class ReceiptsOfStrings(TypedDict, total=False):
    receipts: list[str]
    denials: int


class ReceiptsMapping(TypedDict, total=False):
    receipts: dict[str, int]


class DecisionsOfOthers(TypedDict, total=False):
    operator_decisions: list[Any]


def _chat(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage("hello from another graph")]}


def _chat_graph() -> StateGraph[Any]:
    builder: StateGraph[Any] = StateGraph(MessagesState)
    builder.add_node("chat", _chat)
    builder.add_edge(START, "chat")
    builder.add_edge("chat", END)
    return builder


OTHER_GRAPHS: dict[str, tuple[Any, Any, str]] = {
    # name: (builder, input, what the line must say is wrong)
    "other-fields": (
        _graph(Counter, {"count": 3, "notes": ["a"]}),
        {"count": 1},
        f"its state has no {FIELDS}, only count, notes",
    ),
    "chat": (
        _chat_graph(),
        {"messages": [("user", "hi")]},
        f"its state has no {FIELDS}, only messages",
    ),
    "receipts-text": (
        _graph(ReceiptsText, {"receipts": "paid in full"}),
        {},
        "its receipts is a str, not a list of records",
    ),
    "receipts-of-strings": (
        _graph(ReceiptsOfStrings, {"receipts": ["r1", "r2"], "denials": 4}),
        {},
        "its receipts[0] is a str, not a record",
    ),
    "receipts-mapping": (
        _graph(ReceiptsMapping, {"receipts": {"r1": 1}}),
        {},
        "its receipts is a dict, not a list of records",
    ),
    "decisions-of-others": (
        _graph(DecisionsOfOthers, {"operator_decisions": [None, 1.5]}),
        {},
        "its operator_decisions[0] is a NoneType, not a record",
    ),
}


def _write(path: Path, builder: StateGraph[Any], payload: Any, thread: str = "x") -> None:
    with SqliteSaver.from_conn_string(str(path)) as saver:
        builder.compile(checkpointer=saver).invoke(payload, {"configurable": {"thread_id": thread}})


def _snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


VARIANTS: tuple[list[str], ...] = (
    [],
    ["--jsonl"],
    ["--thread", "x"],
    ["--verify"],
    ["--verify", "--thread", "x"],
)


@pytest.mark.parametrize("name", list(OTHER_GRAPHS))
def test_another_graphs_checkpoint_file_is_one_line_naming_it(name: str, tmp_path: Path) -> None:
    builder, payload, why = OTHER_GRAPHS[name]
    path = tmp_path / f"{name}.sqlite"
    _write(path, builder, payload)
    before = _snapshot(path)
    for args in VARIANTS:
        proc = cli("receipts", "--db", str(path), *args, timeout=60)
        line = assert_one_line_error(
            proc, f"--db {path}", "thread 'x' is not an algenta-graph thread", why, code=2
        )
        assert line.startswith("algenta-graph receipts: error: --db "), (args, line)
        assert "Error:" not in line, line  # no exception type: what is wrong, in words
        assert _snapshot(path) == before, f"receipts {args} changed the file"
    # the library says the same
    with pytest.raises(RecordsFileError, match="is not an algenta-graph thread"):
        read_records(path)
    with pytest.raises(RecordsFileError, match="is not an algenta-graph thread"):
        verify_audit(path)


def _sealing(state: GovernedState) -> dict[str, Any]:
    receipt = {"decision_id": "dec_ours", "execution_status": "delivered", "response_code": 200}
    return seal(state, {"receipts": [receipt], "denials": [], "operator_decisions": []})


def test_a_file_shared_with_another_graph_lists_ours_and_names_the_others(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shared.sqlite"
    ours: StateGraph[Any] = StateGraph(GovernedState)
    ours.add_node("tool", _sealing)
    ours.add_edge(START, "tool")
    ours.add_edge("tool", END)
    _write(path, ours, {"messages": [("user", "go")]}, thread="governed")
    builder, payload, why = OTHER_GRAPHS["other-fields"]
    _write(path, builder, payload, thread="x")
    before = _snapshot(path)

    table = cli("receipts", "--db", str(path), timeout=60)
    assert table.returncode == 0, table.stderr
    assert "dec_ours" in table.stdout and "governed" in table.stdout
    note = table.stderr.strip()
    assert note == "algenta-graph receipts: note: 1 thread(s) of another graph left out ('x')"

    exported = cli("receipts", "--db", str(path), "--jsonl", timeout=60)
    assert exported.returncode == 0, exported.stderr
    assert '"thread_id": "x"' not in exported.stdout and '"dec_ours"' in exported.stdout
    assert exported.stderr.strip() == note

    verified = cli("receipts", "--db", str(path), "--verify", timeout=60)
    assert verified.returncode == 0, verified.stdout
    assert "governed: ok: 1 record(s)" in verified.stdout
    assert f"x: left out: not an algenta-graph thread ({why})" in verified.stdout

    for args in (["--thread", "x"], ["--verify", "--thread", "x"]):
        proc = cli("receipts", "--db", str(path), *args, timeout=60)
        assert_one_line_error(proc, str(path), "thread 'x' is not an algenta-graph thread", why)
    assert _snapshot(path) == before
    assert list(read_records(path)) == ["governed"]
    assert list(verify_audit(path)) == ["governed"]


async def test_another_graphs_threads_in_postgres_are_one_line_naming_the_store(
    postgres_url: str,  # noqa: F811
) -> None:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from algenta_graph.serving.checkpointer import open_checkpointer, redact_url

    builder, payload, why = OTHER_GRAPHS["receipts-text"]
    async with open_checkpointer(postgres_url) as saver:
        assert isinstance(saver, AsyncPostgresSaver)
        graph = builder.compile(checkpointer=saver)
        await graph.ainvoke(payload, {"configurable": {"thread_id": "x"}})
    for args in ([], ["--jsonl"], ["--verify"]):
        proc = cli("receipts", "--db", postgres_url, *args, timeout=120)
        line = assert_one_line_error(
            proc, f"--db {redact_url(postgres_url)}", "is not an algenta-graph thread", why
        )
        assert line.startswith("algenta-graph receipts: error: --db postgresql://"), line
