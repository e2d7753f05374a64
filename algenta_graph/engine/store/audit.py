"""The audit log: one row per change, written in the transaction of the change it records."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from algenta_graph.engine.store.base import StoreFile, Tables, utc_now

TABLES = Tables(
    """
CREATE TABLE IF NOT EXISTS audit_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    actor TEXT,
    action TEXT NOT NULL,
    subject_type TEXT NOT NULL,
    subject_id TEXT NOT NULL,
    details TEXT NOT NULL
);
"""
)

AUDIT_COLUMNS: tuple[str, ...] = (
    "seq",
    "at",
    "actor",
    "action",
    "subject_type",
    "subject_id",
    "details",
)
"""The columns of an audit export row, in order (``details`` is a JSON object)."""


def write_audit(
    conn: sqlite3.Connection,
    action: str,
    actor: str | None,
    subject_type: str,
    subject_id: str,
    details: dict[str, Any],
) -> None:
    """Append one audit row, in the transaction of the change it records.

    Args:
        conn: the connection of that transaction.
        action: what changed, e.g. ``plan.approved``.
        actor: the identity of the key that made the change (None without keys).
        subject_type: the kind of record changed (``decision``, ``plan``, ...).
        subject_id: its id.
        details: what the row adds (kept as canonical JSON).
    """
    conn.execute(
        "INSERT INTO audit_log(at, actor, action, subject_type, subject_id, details)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (utc_now(), actor, action, subject_type, subject_id, json.dumps(details, sort_keys=True)),
    )


class AuditLog(StoreFile):
    """Reading the audit log back."""

    def audit_rows(self) -> list[dict[str, Any]]:
        """Every audit row, oldest first (:data:`AUDIT_COLUMNS`; ``details`` as an object)."""
        return self._rows_with_json(
            f"SELECT {', '.join(AUDIT_COLUMNS)} FROM audit_log ORDER BY seq", "details"
        )
