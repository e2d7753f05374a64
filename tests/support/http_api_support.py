"""The Algenta HTTP API of the reference engine as the public conformance runner calls it: its
key, a decision case, a client with the runner's headers, a fresh action plan, an approval,
an error's code, and the rows of the engine's SQLite file.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from algenta_graph.engine import ReferenceEngine

RUNNER = "tok-conformance-runner"
"""The runner's one key: like ``--api-key``, both roles and execute enabled."""
ACCOUNTS = [
    {
        "account_id": "A1",
        "name": "BigCo",
        "arr": 500000,
        "renewal_date": "2026-08-01",
        "health_score": 40,
        "segment": "standard",
    },
    {
        "account_id": "A5",
        "name": "KeyStrategic",
        "arr": 90000,
        "renewal_date": "2026-08-01",
        "health_score": 50,
        "segment": "strategic",
    },
]
PACK_INPUT = {
    "accounts": ACCOUNTS,
    "capacity": {"total_hours": 40},
    "constraints": {"strategic_min_hours": 4, "allocation_step_hours": 1},
    "horizon_days": 90,
}


def case_body(title: str, pack_input: Any = None) -> dict[str, Any]:
    return {
        "pack_id": "renewal_capacity_allocation",
        "title": title,
        "pack_input": PACK_INPUT if pack_input is None else pack_input,
    }


def base_url(engine: ReferenceEngine) -> str:
    return engine.url.removesuffix("/mcp")


@contextlib.asynccontextmanager
async def client(
    engine: ReferenceEngine, token: str | None = RUNNER, scheme: str = "x-api-key"
) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers.update(
            {"X-API-Key": token} if scheme == "x-api-key" else {"Authorization": f"Bearer {token}"}
        )
    async with httpx.AsyncClient(base_url=base_url(engine), headers=headers, timeout=60) as c:
        yield c


async def fresh_plan(c: httpx.AsyncClient, title: str = "case") -> dict[str, Any]:
    """case -> analysis run -> action plan, as the runner does it."""
    case = await c.post("/v1/decision-cases", json=case_body(title))
    assert case.status_code in (200, 201), case.text
    run = await c.post(f"/v1/decision-cases/{case.json()['case_id']}/analysis-runs", json={})
    assert run.status_code in (200, 201, 202), run.text
    plan = await c.post(f"/v1/analysis-runs/{run.json()['run_id']}/action-plans")
    assert plan.status_code in (200, 201), plan.text
    return dict(plan.json())


async def approve(c: httpx.AsyncClient, plan: dict[str, Any], **override: Any) -> httpx.Response:
    payload = {"plan_hash": plan["plan_hash"], "nonce": plan["nonce"], **override}
    return await c.post(f"/v1/decision-plans/{plan['plan_id']}/approve", json=payload)


def code(response: httpx.Response) -> str:
    return str(response.json().get("error", {}).get("code", ""))


def counts(db: Path) -> dict[str, int]:
    """Rows per table of the engine's SQLite file, read directly (the call log aside)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {
            t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in tables
            if t not in ("call_log", "sqlite_sequence")
        }
