"""SQLite persistence of the reference engine: decisions, plans, executions, policy snapshots and
the call log. Everything survives a restart on the same file.

Each operation opens its own short connection (WAL mode), so the store is safe to use from the
server thread and from a test thread reading it at the same time.

>>> import tempfile, os
>>> store = Store(os.path.join(tempfile.mkdtemp(), "engine.db"))
>>> store.log_call("get_contract", {})
>>> [c["name"] for c in store.call_log()]
['get_contract']
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    decision_id TEXT NOT NULL UNIQUE,
    chosen_action TEXT NOT NULL,
    expected_value REAL NOT NULL,
    confidence REAL NOT NULL,
    risk_p5 REAL NOT NULL,
    risk_p95 REAL NOT NULL,
    rationale TEXT,
    scenario TEXT,
    plan_hash TEXT,
    logged_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS plans (
    plan_hash TEXT PRIMARY KEY,
    plan TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS executions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id TEXT NOT NULL UNIQUE,
    decision_id TEXT NOT NULL REFERENCES decisions(decision_id),
    execution_status TEXT NOT NULL,
    receipt TEXT NOT NULL,
    force INTEGER NOT NULL,
    override_safety INTEGER NOT NULL,
    metadata TEXT,
    executed_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS executions_by_decision ON executions(decision_id, seq);
CREATE TABLE IF NOT EXISTS policy_snapshots (
    policy_snapshot_id TEXT PRIMARY KEY,
    policy TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS call_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    arguments TEXT NOT NULL,
    received_at TEXT NOT NULL
);
"""

_DECISION_COLUMNS = (
    "decision_id",
    "chosen_action",
    "expected_value",
    "confidence",
    "risk_p5",
    "risk_p95",
    "rationale",
    "scenario",
    "plan_hash",
    "logged_at",
)


def utc_now() -> str:
    """The current UTC time as ISO 8601 with a ``Z`` suffix (millisecond precision)."""
    now = datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


class Store:
    """The engine's SQLite file. Creates the schema on first use."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._tx() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30)
        conn.row_factory = sqlite3.Row
        try:
            with conn:
                yield conn
        finally:
            conn.close()

    # -- call log --------------------------------------------------------------------------

    def log_call(self, name: str, arguments: Any) -> None:
        """Record one tools/call exactly as received (arguments as JSON)."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO call_log(name, arguments, received_at) VALUES (?, ?, ?)",
                (name, json.dumps(arguments), utc_now()),
            )

    def call_log(self) -> list[dict[str, Any]]:
        """Every recorded tools/call, oldest first: ``{"name", "arguments", "received_at"}``."""
        with self._tx() as conn:
            rows = conn.execute(
                "SELECT name, arguments, received_at FROM call_log ORDER BY seq"
            ).fetchall()
        return [
            {
                "name": r["name"],
                "arguments": json.loads(r["arguments"]),
                "received_at": r["received_at"],
            }
            for r in rows
        ]

    # -- policy snapshots ------------------------------------------------------------------

    def record_policy(self, snapshot_id: str, policy: dict[str, Any]) -> None:
        """Keep a policy snapshot (idempotent: the id is a hash of the policy)."""
        with self._tx() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO policy_snapshots(policy_snapshot_id, policy, created_at)"
                " VALUES (?, ?, ?)",
                (snapshot_id, json.dumps(policy, sort_keys=True), utc_now()),
            )

    def policy_snapshots(self) -> list[dict[str, Any]]:
        """Every policy this database has served under, newest first."""
        with self._tx() as conn:
            rows = conn.execute(
                "SELECT policy_snapshot_id, policy, created_at FROM policy_snapshots"
                " ORDER BY rowid DESC"
            ).fetchall()
        return [
            {
                "policy_snapshot_id": r["policy_snapshot_id"],
                "policy": json.loads(r["policy"]),
                "created_at": r["created_at"],
            }
            for r in rows
        ]

    # -- plans -----------------------------------------------------------------------------

    def save_plan(self, plan_hash: str, plan: dict[str, Any]) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO plans(plan_hash, plan, created_at) VALUES (?, ?, ?)",
                (plan_hash, json.dumps(plan, sort_keys=True), utc_now()),
            )

    def get_plan(self, plan_hash: str) -> dict[str, Any] | None:
        with self._tx() as conn:
            row = conn.execute(
                "SELECT plan FROM plans WHERE plan_hash = ?", (plan_hash,)
            ).fetchone()
        return None if row is None else dict(json.loads(row["plan"]))

    # -- decisions -------------------------------------------------------------------------

    def insert_decision(self, decision: dict[str, Any]) -> None:
        values = [decision.get(c) for c in _DECISION_COLUMNS]
        values[_DECISION_COLUMNS.index("scenario")] = (
            None if decision.get("scenario") is None else json.dumps(decision["scenario"])
        )
        with self._tx() as conn:
            conn.execute(
                f"INSERT INTO decisions({', '.join(_DECISION_COLUMNS)})"
                f" VALUES ({', '.join('?' for _ in _DECISION_COLUMNS)})",
                values,
            )

    @staticmethod
    def _decision(row: sqlite3.Row) -> dict[str, Any]:
        out = {c: row[c] for c in _DECISION_COLUMNS}
        if out["scenario"] is not None:
            out["scenario"] = json.loads(out["scenario"])
        return out

    def get_decision(self, decision_id: str) -> dict[str, Any] | None:
        with self._tx() as conn:
            row = conn.execute(
                "SELECT * FROM decisions WHERE decision_id = ?", (decision_id,)
            ).fetchone()
        return None if row is None else self._decision(row)

    def list_decisions(self, *, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """Newest first, each with its execution count and latest execution status."""
        with self._tx() as conn:
            total = conn.execute("SELECT COUNT(*) FROM decisions").fetchone()[0]
            rows = conn.execute(
                "SELECT d.*, (SELECT COUNT(*) FROM executions e"
                " WHERE e.decision_id = d.decision_id) AS execution_count,"
                " (SELECT e.execution_status FROM executions e"
                " WHERE e.decision_id = d.decision_id ORDER BY e.seq DESC LIMIT 1)"
                " AS last_execution_status FROM decisions d ORDER BY d.seq DESC LIMIT ? OFFSET ?",
                (limit, offset),
            ).fetchall()
        out = []
        for r in rows:
            d = self._decision(r)
            d["execution_count"] = r["execution_count"]
            d["last_execution_status"] = r["last_execution_status"]
            out.append(d)
        return out, int(total)

    # -- executions ------------------------------------------------------------------------

    def insert_execution(
        self,
        *,
        execution_id: str,
        receipt: dict[str, Any],
        force: bool,
        override_safety: bool,
        metadata: dict[str, Any] | None,
    ) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO executions(execution_id, decision_id, execution_status, receipt,"
                " force, override_safety, metadata, executed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    execution_id,
                    receipt["decision_id"],
                    receipt["execution_status"],
                    json.dumps(receipt),
                    int(force),
                    int(override_safety),
                    None if metadata is None else json.dumps(metadata),
                    receipt["executed_at"],
                ),
            )

    def executions(self, decision_id: str | None = None) -> list[dict[str, Any]]:
        """Executions oldest first: the receipt's fields plus ``execution_id``, ``force``,
        ``override_safety`` and the caller's ``metadata``."""
        query = "SELECT * FROM executions"
        params: tuple[str, ...] = ()
        if decision_id is not None:
            query += " WHERE decision_id = ?"
            params = (decision_id,)
        with self._tx() as conn:
            rows = conn.execute(query + " ORDER BY seq", params).fetchall()
        return [
            {
                **json.loads(r["receipt"]),
                "execution_id": r["execution_id"],
                "force": bool(r["force"]),
                "override_safety": bool(r["override_safety"]),
                "metadata": None if r["metadata"] is None else json.loads(r["metadata"]),
            }
            for r in rows
        ]

    def delivered_count(self, decision_id: str) -> int:
        with self._tx() as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM executions WHERE decision_id = ? AND execution_status = ?",
                (decision_id, "delivered"),
            ).fetchone()
        return int(row[0])
