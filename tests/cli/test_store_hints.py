"""``receipts`` and ``escalations`` pointed at what they cannot read say which flag or variable
to give, and change nothing.

``langgraph dev`` keeps its threads in ``.langgraph_api/`` as pickles only the running server
reads: pointed at that directory, at a file in it, or run beside it without ``--db``, both
commands refuse in one line naming ``--db`` and ``ALGENTA_CHECKPOINTER`` (the server
checkpointer's store, which they read with the same ``--db``); ``escalations`` no longer answers
"nothing waits" for such a file (it used to open it as SQLite and write its tables into it).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from cli_support import assert_one_line_error, cli

COMMANDS = ["receipts", "escalations"]


def _served_dir(tmp_path: Path) -> Path:
    state = tmp_path / ".langgraph_api"
    state.mkdir()
    (state / ".langgraph_checkpoint.1.pckl").write_bytes(pickle.dumps({"threads": {}}))
    (state / "store.pckl").write_bytes(b"x")  # a file of one byte is not SQLite either
    return state


@pytest.mark.parametrize("command", COMMANDS)
def test_the_served_state_directory_gets_the_flag_and_variable_to_give(
    command: str, tmp_path: Path
) -> None:
    state = _served_dir(tmp_path)
    before = {p.name: p.read_bytes() for p in state.iterdir()}
    for db in (
        [],
        ["--db", ".langgraph_api"],
        ["--db", ".langgraph_api/.langgraph_checkpoint.1.pckl"],
        ["--db", ".langgraph_api/store.pckl"],
    ):
        line = assert_one_line_error(cli(command, *db, cwd=tmp_path, timeout=60), "--db ")
        assert "ALGENTA_CHECKPOINTER" in line and ".langgraph_api/" in line, line
        assert "--db runs.sqlite" in line and "server_checkpointer" in line, line
    assert {p.name: p.read_bytes() for p in state.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".langgraph_api"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_store_names_the_variable_of_a_served_graph(command: str, tmp_path: Path) -> None:
    line = assert_one_line_error(
        cli(command, "--db", "runs.sqlite", cwd=tmp_path, timeout=60), "no checkpoint file"
    )
    assert "ALGENTA_CHECKPOINTER" in line
    assert list(tmp_path.iterdir()) == []
