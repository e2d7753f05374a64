"""What the engine served: the call log (every tools/call as received) and the policy snapshots."""

from __future__ import annotations

import json
from typing import Any

from algenta_graph.engine.store.base import StoreFile, Tables, utc_now

TABLES = Tables(
    """
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
)


class ServedLogs(StoreFile):
    """The call log and the policy snapshots."""

    def log_call(self, name: str, arguments: Any) -> None:
        """Record one tools/call exactly as received (arguments as JSON)."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO call_log(name, arguments, received_at) VALUES (?, ?, ?)",
                (name, json.dumps(arguments), utc_now()),
            )

    def call_log(self) -> list[dict[str, Any]]:
        """Every recorded tools/call, oldest first: ``{"name", "arguments", "received_at"}``."""
        return self._rows_with_json(
            "SELECT name, arguments, received_at FROM call_log ORDER BY seq", "arguments"
        )

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
        return self._rows_with_json(
            "SELECT policy_snapshot_id, policy, created_at FROM policy_snapshots"
            " ORDER BY rowid DESC",
            "policy",
        )
