"""Executions: each delivery's write-ahead record, its final receipt, each attempt's key.

Each attempt is kept with its idempotency key.

An execution is on record (outcome ``unknown``) before its webhook POST can go out, so an engine
that stops during a delivery keeps it as possibly delivered.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from algenta_graph.engine.store.audit import write_audit
from algenta_graph.engine.store.base import StoreFile, Tables

TABLES = Tables(
    """
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
""",
    added_columns=(
        ("executions", "idempotency_key", "TEXT"),
        ("executions", "plan_id", "TEXT"),
        ("executions", "identity", "TEXT"),
    ),
    after=(
        "CREATE UNIQUE INDEX IF NOT EXISTS executions_by_idempotency_key"
        " ON executions(idempotency_key) WHERE idempotency_key IS NOT NULL",
    ),
)

EXECUTED_STATUSES: tuple[str, ...] = ("delivered", "unknown", "recorded")
"""Execution statuses that count as executed for the idempotency gate: a delivery that may have
reached its target (``unknown``) counts as much as a confirmed one, and so does an execution
recorded without a webhook (``recorded``, a plan executed over HTTP)."""


class PlanNotApproved(Exception):
    """The compare-and-set ``approved -> executed`` on a plan proposal found it not approved."""


class IdempotencyKeyTaken(Exception):
    """Another execution already carries this idempotency key."""


def _execution(row: sqlite3.Row) -> dict[str, Any]:
    """An executions row as the store answers it: the receipt's fields plus the call's flags."""
    return {
        **json.loads(row["receipt"]),
        "execution_id": row["execution_id"],
        "force": bool(row["force"]),
        "override_safety": bool(row["override_safety"]),
        "metadata": None if row["metadata"] is None else json.loads(row["metadata"]),
    }


class ExecutionRecords(StoreFile):
    """The executions table: write-ahead, the final receipt, reading executions back."""

    def begin_execution(
        self,
        *,
        execution_id: str,
        receipt: dict[str, Any],
        force: bool,
        override_safety: bool,
        metadata: dict[str, Any] | None,
        idempotency_key: str | None = None,
        plan_id: str | None = None,
        identity: str | None = None,
    ) -> None:
        """Record an execution before its webhook POST goes out (write-ahead).

        In one transaction with the plan's compare-and-set ``approved -> executed`` when
        ``plan_id`` is given (the plan must be bound to the receipt's decision). If the engine
        stops during the delivery, the execution stays on record as possibly delivered.

        Args:
            execution_id: the new execution's id.
            receipt: the provisional receipt (status ``unknown``).
            force: the call's ``force`` flag.
            override_safety: the call's ``override_safety`` flag.
            metadata: the caller's metadata.
            idempotency_key: the caller's key for this attempt, if any.
            plan_id: the plan it runs under (None: no plan needed, relaxed mode).
            identity: the identity of the key that sent the call.

        Raises:
            PlanNotApproved: the plan is not ``approved`` (nothing written).
            IdempotencyKeyTaken: another execution carries ``idempotency_key``.
        """
        with self._tx() as conn:
            if plan_id is not None:
                cur = conn.execute(
                    "UPDATE plan_proposals SET state = 'executed', execution_id = ?"
                    " WHERE plan_id = ? AND state = 'approved' AND decision_id = ?",
                    (execution_id, plan_id, receipt["decision_id"]),
                )
                if cur.rowcount != 1:
                    raise PlanNotApproved(plan_id)
            try:
                conn.execute(
                    "INSERT INTO executions(execution_id, decision_id, execution_status, receipt,"
                    " force, override_safety, metadata, executed_at, idempotency_key, plan_id,"
                    " identity) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        execution_id,
                        receipt["decision_id"],
                        receipt["execution_status"],
                        json.dumps(receipt),
                        int(force),
                        int(override_safety),
                        None if metadata is None else json.dumps(metadata),
                        receipt["executed_at"],
                        idempotency_key,
                        plan_id,
                        identity,
                    ),
                )
            except sqlite3.IntegrityError as exc:
                if idempotency_key is not None and "idempotency_key" in str(exc):
                    raise IdempotencyKeyTaken(idempotency_key) from None
                raise
            write_audit(
                conn,
                "execution.started",
                identity,
                "execution",
                execution_id,
                {
                    "decision_id": receipt["decision_id"],
                    "plan_id": plan_id,
                    "webhook_url": receipt.get("webhook_url"),
                    "force": force,
                    "override_safety": override_safety,
                    "idempotency_key": idempotency_key,
                },
            )

    def finish_execution(
        self, execution_id: str, receipt: dict[str, Any], *, release_plan: bool = False
    ) -> None:
        """Store the final receipt of an execution.

        Args:
            execution_id: the execution.
            receipt: its final receipt.
            release_plan: put its plan back to ``approved`` (the delivery certainly did not
                happen, so the approval is not spent).
        """
        with self._tx() as conn:
            conn.execute(
                "UPDATE executions SET execution_status = ?, receipt = ? WHERE execution_id = ?",
                (receipt["execution_status"], json.dumps(receipt), execution_id),
            )
            write_audit(
                conn,
                "execution.finished",
                receipt.get("executed_by"),
                "execution",
                execution_id,
                {
                    "decision_id": receipt["decision_id"],
                    "plan_id": receipt.get("plan_id"),
                    "execution_status": receipt["execution_status"],
                    "response_code": receipt.get("response_code"),
                    "failure_code": receipt.get("failure_code"),
                },
            )
            if release_plan:
                conn.execute(
                    "UPDATE plan_proposals SET state = 'approved', execution_id = NULL"
                    " WHERE execution_id = ? AND state = 'executed'",
                    (execution_id,),
                )

    def insert_execution(
        self,
        *,
        execution_id: str,
        receipt: dict[str, Any],
        force: bool,
        override_safety: bool,
        metadata: dict[str, Any] | None,
    ) -> None:
        """Record a finished execution in one step (no plan, no idempotency key)."""
        self.begin_execution(
            execution_id=execution_id,
            receipt=receipt,
            force=force,
            override_safety=override_safety,
            metadata=metadata,
        )

    def executions(self, decision_id: str | None = None) -> list[dict[str, Any]]:
        """Executions oldest first (of ``decision_id``, or all).

        Each is the receipt's fields plus ``execution_id``, ``force``, ``override_safety`` and
        the caller's ``metadata``.
        """
        query = "SELECT * FROM executions"
        params: tuple[str, ...] = ()
        if decision_id is not None:
            query += " WHERE decision_id = ?"
            params = (decision_id,)
        with self._tx() as conn:
            rows = conn.execute(query + " ORDER BY seq", params).fetchall()
        return [_execution(r) for r in rows]

    def execution(self, execution_id: str) -> dict[str, Any] | None:
        """One execution (as :meth:`executions` lists them), or None."""
        row = self._one("SELECT * FROM executions WHERE execution_id = ?", (execution_id,))
        return None if row is None else _execution(row)

    def executed_count(self, decision_id: str) -> int:
        """Executions of ``decision_id`` that count as executed (:data:`EXECUTED_STATUSES`)."""
        marks = ", ".join("?" for _ in EXECUTED_STATUSES)
        row = self._one(
            f"SELECT COUNT(*) FROM executions WHERE decision_id = ?"
            f" AND execution_status IN ({marks})",
            (decision_id, *EXECUTED_STATUSES),
        )
        return 0 if row is None else int(row[0])

    def execution_by_idempotency_key(self, key: str) -> dict[str, Any] | None:
        """The stored receipt (and decision) of the execution that carries ``key``."""
        row = self._one(
            "SELECT decision_id, receipt FROM executions WHERE idempotency_key = ?", (key,)
        )
        if row is None:
            return None
        return {"decision_id": row["decision_id"], "receipt": json.loads(row["receipt"])}
