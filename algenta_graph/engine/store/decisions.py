"""Logged decisions, and binding a decision to its plan proposal (one plan runs one decision)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from algenta_graph.engine.store.audit import write_audit
from algenta_graph.engine.store.base import StoreFile, Tables

TABLES = Tables(
    """
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
""",
    # a decision is bound to one plan proposal by its id
    added_columns=(("decisions", "plan_id", "TEXT"),),
)

DECISION_COLUMNS: tuple[str, ...] = (
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
    "plan_id",
)
"""The fields of a decision record, as :meth:`DecisionRecords.get_decision` answers them."""


class BindingRefused(Exception):
    """A decision cannot be bound to a plan proposal; ``code`` names why (nothing was written).

    - ``plan_not_found``: no proposal with that ``plan_id``;
    - ``plan_already_bound``: the proposal (every proposal of the ``plan_hash``) is bound to a
      decision already (``bound`` maps plan_id -> decision_id);
    - ``plan_ambiguous``: several unbound proposals have the ``plan_hash`` (``candidates``);
    - ``decision_not_found``, ``plan_hash_mismatch``: for a plan proposed for a decision;
    - ``plan_not_spent``: that decision's plan is not executed yet (``bound``).

    Args:
        code: the refusal, one of the above.
        candidates: the unbound proposals of the hash (``plan_ambiguous``).
        bound: plan_id -> the decision it is bound to (``plan_already_bound``,
            ``plan_not_spent``).
        state: the state of the decision's current plan (``plan_not_spent``).
    """

    def __init__(
        self,
        code: str,
        *,
        candidates: list[str] | None = None,
        bound: dict[str, str] | None = None,
        state: str | None = None,
    ) -> None:
        super().__init__(code)
        self.code = code
        self.candidates = candidates or []
        self.bound = bound or {}
        self.state = state


def insert_decision_row(
    conn: sqlite3.Connection, decision: dict[str, Any], actor: str | None
) -> None:
    """Write one decision and its ``decision.logged`` audit row, in the transaction of ``conn``.

    Args:
        conn: the connection of the transaction.
        decision: the record (:data:`DECISION_COLUMNS`; ``scenario`` is kept as JSON).
        actor: the identity of the key that logged it.
    """
    values = [decision.get(c) for c in DECISION_COLUMNS]
    values[DECISION_COLUMNS.index("scenario")] = (
        None if decision.get("scenario") is None else json.dumps(decision["scenario"])
    )
    conn.execute(
        f"INSERT INTO decisions({', '.join(DECISION_COLUMNS)})"
        f" VALUES ({', '.join('?' for _ in DECISION_COLUMNS)})",
        values,
    )
    write_audit(
        conn,
        "decision.logged",
        actor,
        "decision",
        decision["decision_id"],
        {
            "chosen_action": decision["chosen_action"],
            "plan_hash": decision.get("plan_hash"),
            "plan_id": decision.get("plan_id"),
        },
    )


def _decision(row: sqlite3.Row) -> dict[str, Any]:
    """A decision row as its record (``scenario`` read back from its JSON)."""
    out = {c: row[c] for c in DECISION_COLUMNS}
    if out["scenario"] is not None:
        out["scenario"] = json.loads(out["scenario"])
    return out


class DecisionRecords(StoreFile):
    """The decisions table: logging a decision bound to its plan, reading decisions back."""

    def insert_decision(self, decision: dict[str, Any], *, actor: str | None = None) -> str | None:
        """Insert a decision and bind it to a plan proposal, in one transaction.

        - ``decision["plan_id"]`` set: bound to that proposal;
        - else ``decision["plan_hash"]`` set: bound to the one proposal of that hash that is
          neither bound to a decision nor executed (none at all, a database from before plans
          were bound by id: bound to none);
        - neither: bound to none.

        Args:
            decision: the record to log (:data:`DECISION_COLUMNS`); its ``plan_id`` is set to
                the plan it is bound to.
            actor: the identity of the key that logs it.

        Returns:
            The bound ``plan_id`` (also written into ``decision``), or None.

        Raises:
            BindingRefused: ``plan_not_found``, ``plan_already_bound``, ``plan_ambiguous``, with
                nothing written.
        """
        with self._tx() as conn:
            conn.execute("BEGIN IMMEDIATE")  # the binding is decided and written atomically
            plan_id = decision.get("plan_id")
            if plan_id is not None:
                row = conn.execute(
                    "SELECT decision_id FROM plan_proposals WHERE plan_id = ?", (plan_id,)
                ).fetchone()
                if row is None:
                    raise BindingRefused("plan_not_found")
                if row["decision_id"] is not None:
                    raise BindingRefused("plan_already_bound", bound={plan_id: row["decision_id"]})
            elif decision.get("plan_hash") is not None:
                rows = conn.execute(
                    "SELECT plan_id, decision_id, state FROM plan_proposals WHERE plan_hash = ?"
                    " ORDER BY rowid",
                    (decision["plan_hash"],),
                ).fetchall()
                free = [
                    r["plan_id"]
                    for r in rows
                    if r["decision_id"] is None and r["state"] != "executed"
                ]
                if len(free) > 1:
                    raise BindingRefused("plan_ambiguous", candidates=free)
                if not free and rows:
                    raise BindingRefused(
                        "plan_already_bound",
                        bound={r["plan_id"]: r["decision_id"] or "?" for r in rows},
                    )
                plan_id = free[0] if free else None
            decision["plan_id"] = plan_id
            insert_decision_row(conn, decision, actor)
            if plan_id is not None:
                conn.execute(
                    "UPDATE plan_proposals SET decision_id = ? WHERE plan_id = ?",
                    (decision["decision_id"], plan_id),
                )
        return plan_id

    def get_decision(self, decision_id: str) -> dict[str, Any] | None:
        """The decision ``decision_id`` (:data:`DECISION_COLUMNS`), or None."""
        row = self._one("SELECT * FROM decisions WHERE decision_id = ?", (decision_id,))
        return None if row is None else _decision(row)

    def list_decisions(self, *, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """A page of decisions, newest first, and how many there are.

        Args:
            limit: at most this many decisions.
            offset: skip this many of the newest first.

        Returns:
            The page (each decision with its ``execution_count`` and
            ``last_execution_status``) and the total number of decisions.
        """
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
            d = _decision(r)
            d["execution_count"] = r["execution_count"]
            d["last_execution_status"] = r["last_execution_status"]
            out.append(d)
        return out, int(total)
