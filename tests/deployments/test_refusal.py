"""A deployment without a shared ledger refuses to start, naming what to set; with one, it runs.

The matrix's shapes (``test_matrix.py``) run with the ledger their configuration names: the
in-memory runtime's own process (its state cannot outlive or leave it), the server
checkpointer's database (``ALGENTA_CHECKPOINTER``), or ``ledger=`` in the library. Here the
same deployments are started on a saver of a class the project does not know, **without**
naming a ledger (``docs/ARCHITECTURE.md``, invariant 17: never inferred from a saver's class,
never an in-memory fallback without saying so):

- ``langgraph dev`` whose ``langgraph.json`` names the user's own checkpointer factory
  (``deployment_savers``): a subclass of ``AsyncSqliteSaver`` on SQLite, a wrapper over
  ``AsyncPostgresSaver`` on PostgreSQL;
- ``create_governed_agent(checkpointer=...)`` with the subclass, and with the wrapper.

Each must refuse before it serves anything (the server exits at start-up, or the graph is not
built), with one error that names ``ALGENTA_LEDGER`` (served) or ``ledger=`` (library). The
served ones then start with ``ALGENTA_LEDGER`` set and run a turn, so the refusal is the
missing ledger's and nothing else's; and a deployment that declares itself one process
(``ALGENTA_SINGLE_PROCESS=1``, ``single_process=True``) starts on the same saver.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from deployment_savers import ENV_DATABASE
from deployment_shapes import ASSISTANT, Parts, library_saver, served_files
from guarantee_support import figure
from postgres_support import postgres_server  # noqa: F401
from served_support import bearer, langgraph_dev, user_turn

from algenta_graph.errors import AlgentaGraphError

pytestmark = pytest.mark.timeout(600)

ENV_LEDGER = "ALGENTA_LEDGER"
ENV_SINGLE_PROCESS = "ALGENTA_SINGLE_PROCESS"
SERVED_SAVERS = {
    "served-sqlite-subclass": "deployment_savers.unknown_sqlite_checkpointer",
    "served-postgres-wrapper": "deployment_savers.delegating_postgres_checkpointer",
}


@dataclass(frozen=True)
class Served:
    """How a start of ``langgraph dev`` ended: refused (at start-up or at its first run), or
    served a turn; with what it said."""

    refused: bool
    at_startup: bool
    said: str


def _start(name: str, parts: Parts, database: str, **env: str) -> Served:
    """Start the served deployment ``name`` on ``database`` and send alice's turn."""
    config, environment = served_files(
        name, parts, SERVED_SAVERS[name], **{ENV_DATABASE: database, **env}
    )
    workdir = config.parent / f"server-{len(list(config.parent.glob('server-*')))}"
    try:
        with langgraph_dev(config, workdir=workdir, env=environment) as server:
            with httpx.Client(
                base_url=server.url, headers=bearer("tok-alice"), timeout=300
            ) as http:
                thread = http.post("/threads", json={}).json()["thread_id"]
                response = http.post(
                    f"/threads/{thread}/runs/wait",
                    json={"assistant_id": ASSISTANT, "input": user_turn("hello")},
                )
            refused = response.is_error or "__error__" in response.json()
            return Served(refused, False, response.text + "\n" + server.log())
    except AssertionError as exc:
        if "before it was ready" not in str(exc):
            raise
        return Served(True, True, str(exc))


@pytest.fixture(params=sorted(SERVED_SAVERS))
def served(request: pytest.FixtureRequest, parts: Parts) -> Iterator[tuple[str, str]]:
    """(deployment, its database): a SQLite file, or a fresh PostgreSQL database."""
    name: str = request.param
    if "postgres" in name:
        yield name, request.getfixturevalue("postgres_server").create_database()
    else:
        yield name, str(parts.root / f"{name}.sqlite")


def test_a_served_graph_on_an_unknown_saver_refuses_to_start_without_a_ledger(
    served: tuple[str, str], parts: Parts
) -> None:
    name, database = served
    without = _start(name, parts, database)
    ledger = _start(name, parts, database, **{ENV_LEDGER: database})
    one = _start(name, parts, database, **{ENV_SINGLE_PROCESS: "1"}) if "sqlite" in name else None
    figure(
        "deployment_refusal",
        shape=name,
        refused_without_ledger=int(without.refused),
        at_startup=int(without.at_startup),
        names_the_setting=int(ENV_LEDGER in without.said),
        serves_with_ledger=int(not ledger.refused),
        serves_declared_one_process="-" if one is None else int(not one.refused),
    )
    assert without.refused, f"{name} served a run without a shared ledger:\n{without.said[-3000:]}"
    assert ENV_LEDGER in without.said, without.said[-3000:]
    assert not ledger.refused, f"{name} with {ENV_LEDGER} set:\n{ledger.said[-3000:]}"
    assert one is None or not one.refused, f"{name} declared one process:\n{one.said[-3000:]}"


@pytest.mark.parametrize("shape", ["library-subclass", "library-wrapper"])
async def test_the_library_on_an_unknown_saver_refuses_to_build_without_a_ledger(
    shape: str, parts: Parts, tmp_path: Path
) -> None:
    import aiosqlite

    from algenta_graph.connection.engine import EngineConnection
    from algenta_graph.graph import aclose_governed_agent, create_governed_agent
    from algenta_graph.models import DemoChatModel

    async with (
        aiosqlite.connect(tmp_path / "checkpoints.sqlite") as conn,
        EngineConnection(parts.engine.url, profile="execute") as engine,
    ):
        saver = library_saver(shape, conn)
        with pytest.raises(AlgentaGraphError) as refused:
            await create_governed_agent(DemoChatModel(), connection=engine, checkpointer=saver)
        assert "ledger=" in str(refused.value), refused.value
        # declared one process, the same saver builds (its ledger: this process's memory)
        declared = await create_governed_agent(
            DemoChatModel(), connection=engine, checkpointer=saver, single_process=True
        )
        await aclose_governed_agent(declared)
    figure("deployment_refusal", shape=shape, refused_without_ledger=1, builds_declared=1)
