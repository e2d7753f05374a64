"""Which gates a served thread waits on, in its thread metadata (fast tier, mutation-tested):
``algenta_graph.governance.visibility``. Served, over the real server:
``tests/served/test_operator_served.py``."""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest

from algenta_graph.governance import visibility
from algenta_graph.governance.visibility import (
    DECIDED_KEY,
    GRAPH_METADATA_KEYS,
    GRAPH_WRITE_KEY,
    WAITING_KEY,
    graph_write,
    is_graph_write,
    server_metadata_writer,
    set_waiting,
)


class Writes:
    def __init__(self, fail: bool = False) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail

    async def __call__(self, thread_id: str, patch: dict[str, Any]) -> None:
        if self.fail:
            raise ConnectionError("server went away")
        self.patches.append((thread_id, patch))


def test_the_keys_only_the_graph_writes() -> None:
    assert (WAITING_KEY, DECIDED_KEY) == ("algenta_waiting", "algenta_decided_by")
    assert GRAPH_METADATA_KEYS == (WAITING_KEY, DECIDED_KEY)
    assert GRAPH_WRITE_KEY not in GRAPH_METADATA_KEYS


def test_the_graphs_secret_is_this_processs_and_nothing_else() -> None:
    secret = graph_write()
    assert len(secret) == 64 and graph_write() == secret
    assert is_graph_write(secret)
    assert not is_graph_write(secret[:-1] + ("0" if secret[-1] != "0" else "1"))
    assert not is_graph_write("")
    assert not is_graph_write(None)
    assert not is_graph_write(secret.encode())


async def test_waiting_gates_and_who_decided_are_patched_into_the_thread() -> None:
    writes = Writes()
    await set_waiting("t1", ["confidence", "confidence"], write=writes)
    await set_waiting("t1", [], decided_by=["bo", "ana", "bo"], write=writes)
    assert writes.patches == [
        ("t1", {WAITING_KEY: ["confidence"]}),
        ("t1", {WAITING_KEY: [], DECIDED_KEY: ["ana", "bo"]}),
    ]


async def test_nothing_is_written_without_a_thread_or_outside_a_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "langgraph_api.server", raising=False)
    writes = Writes()
    await set_waiting(None, ["confidence"], write=writes)
    await set_waiting("", ["confidence"], write=writes)
    assert writes.patches == []
    assert server_metadata_writer() is None
    await set_waiting("t1", ["confidence"])  # no server: nothing to write to, no error


async def test_a_failed_write_is_logged_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=visibility.__name__):
        await set_waiting("t1", ["risk_floor"], write=Writes(fail=True))
    assert "thread t1: could not record waiting gates ['risk_floor']: server went away" in (
        caplog.text
    )


async def test_inside_a_server_the_patch_carries_the_graphs_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[tuple[str, dict[str, Any]]] = []

    class Threads:
        async def update(self, thread_id: str, *, metadata: dict[str, Any]) -> None:
            sent.append((thread_id, metadata))

    class Client:
        threads = Threads()

        async def __aenter__(self) -> Client:
            return self

        async def __aexit__(self, *exc: object) -> None:
            return None

    import langgraph_sdk

    made: list[Any] = []

    def get_client(**kwargs: Any) -> Client:
        made.append(kwargs)
        return Client()

    monkeypatch.setattr(langgraph_sdk, "get_client", get_client)
    monkeypatch.setitem(sys.modules, "langgraph_api.server", object())
    write = server_metadata_writer()
    assert write is not None
    await write("t1", {WAITING_KEY: ["confidence"]})
    assert made == [{"api_key": None}]  # no URL: the server itself, in process
    assert sent == [("t1", {WAITING_KEY: ["confidence"], GRAPH_WRITE_KEY: graph_write()})]
