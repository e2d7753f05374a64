"""Plans and plan proposals: a plan's content by its hash, each proposal's state and approval.

A proposal goes ``proposed -> approved -> executed`` (compare-and-set at each step; a delivery
that certainly did not happen puts it back to ``approved``), and is bound to at most one decision.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from algenta_graph.engine.store.audit import write_audit
from algenta_graph.engine.store.base import StoreFile, Tables, utc_now
from algenta_graph.engine.store.decisions import BindingRefused, insert_decision_row

TABLES = Tables(
    """
CREATE TABLE IF NOT EXISTS plans (
    plan_hash TEXT PRIMARY KEY,
    plan TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS plan_proposals (
    plan_id TEXT PRIMARY KEY,
    plan_hash TEXT NOT NULL,
    nonce TEXT NOT NULL UNIQUE,
    state TEXT NOT NULL,
    created_at TEXT NOT NULL,
    approved_by TEXT,
    approved_at TEXT,
    execution_id TEXT
);
CREATE INDEX IF NOT EXISTS plan_proposals_by_hash ON plan_proposals(plan_hash);
""",
    added_columns=(
        # the proposal names the decision it is bound to (at most one)
        ("plan_proposals", "decision_id", "TEXT"),
        # the analysis run a plan was proposed from (plans proposed over the HTTP API)
        ("plan_proposals", "run_id", "TEXT"),
    ),
)


class PlanRecords(StoreFile):
    """The plans and plan_proposals tables: proposing, binding and approving a plan."""

    def save_plan(self, plan_hash: str, plan: dict[str, Any]) -> None:
        """Keep a plan's content by its hash (idempotent: the same hash, the same content)."""
        with self._tx() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO plans(plan_hash, plan, created_at) VALUES (?, ?, ?)",
                (plan_hash, json.dumps(plan, sort_keys=True), utc_now()),
            )

    def get_plan(self, plan_hash: str) -> dict[str, Any] | None:
        """The content of the plan with ``plan_hash``, or None."""
        row = self._one("SELECT plan FROM plans WHERE plan_hash = ?", (plan_hash,))
        return None if row is None else dict(json.loads(row["plan"]))

    def propose_plan(
        self,
        *,
        plan_id: str,
        plan_hash: str,
        nonce: str,
        decision_id: str | None = None,
        new_decision: dict[str, Any] | None = None,
        run_id: str | None = None,
        actor: str | None = None,
        plan: dict[str, Any] | None = None,
    ) -> str:
        """Record a proposed plan (state ``proposed``), in one transaction.

        Args:
            plan_id: the new proposal's id.
            plan_hash: the hash of its content.
            nonce: its single-use nonce.
            decision_id: the plan is proposed for that logged decision (a re-execution after
                its plan was executed) and the decision is bound to it, in the same
                transaction.
            new_decision: a decision logged with the plan and bound to it (an action plan of
                the HTTP API).
            run_id: the analysis run it comes from.
            actor: the identity of the key that proposes it.
            plan: the plan's content, kept by its hash (as :meth:`save_plan`) in the same
                transaction.

        Returns:
            The proposal's ``created_at``.

        Raises:
            BindingRefused: for ``decision_id``: ``decision_not_found``,
                ``plan_hash_mismatch`` when the decision was logged with another plan_hash
                or none, ``plan_not_spent`` while its current plan is not executed; nothing
                is written.
        """
        created = utc_now()
        with self._tx() as conn:
            conn.execute("BEGIN IMMEDIATE")
            if decision_id is not None:
                row = conn.execute(
                    "SELECT plan_hash, plan_id FROM decisions WHERE decision_id = ?",
                    (decision_id,),
                ).fetchone()
                if row is None:
                    raise BindingRefused("decision_not_found")
                if row["plan_hash"] != plan_hash:
                    raise BindingRefused("plan_hash_mismatch")
                if row["plan_id"] is not None:
                    current = conn.execute(
                        "SELECT state FROM plan_proposals WHERE plan_id = ?", (row["plan_id"],)
                    ).fetchone()
                    if current is not None and current["state"] != "executed":
                        raise BindingRefused(
                            "plan_not_spent",
                            bound={row["plan_id"]: decision_id},
                            state=current["state"],
                        )
            if new_decision is not None:
                decision_id = new_decision["decision_id"]
            if plan is not None:
                conn.execute(
                    "INSERT OR IGNORE INTO plans(plan_hash, plan, created_at) VALUES (?, ?, ?)",
                    (plan_hash, json.dumps(plan, sort_keys=True), created),
                )
            conn.execute(
                "INSERT INTO plan_proposals(plan_id, plan_hash, nonce, state, created_at,"
                " decision_id, run_id) VALUES (?, ?, ?, 'proposed', ?, ?, ?)",
                (plan_id, plan_hash, nonce, created, decision_id, run_id),
            )
            write_audit(
                conn,
                "plan.proposed",
                actor,
                "plan",
                plan_id,
                {"plan_hash": plan_hash, "decision_id": decision_id, "run_id": run_id},
            )
            if new_decision is not None:
                insert_decision_row(conn, {**new_decision, "plan_id": plan_id}, actor)
            elif decision_id is not None:
                conn.execute(
                    "UPDATE decisions SET plan_id = ? WHERE decision_id = ?", (plan_id, decision_id)
                )
        return created

    def proposal(self, plan_id: str) -> dict[str, Any] | None:
        """The proposal ``plan_id`` (every column of its row), or None."""
        row = self._one("SELECT * FROM plan_proposals WHERE plan_id = ?", (plan_id,))
        return None if row is None else dict(row)

    def proposals_for(self, plan_hash: str) -> list[dict[str, Any]]:
        """Every proposal of ``plan_hash``, oldest first."""
        with self._tx() as conn:
            rows = conn.execute(
                "SELECT * FROM plan_proposals WHERE plan_hash = ? ORDER BY rowid", (plan_hash,)
            ).fetchall()
        return [dict(r) for r in rows]

    def approve_plan(self, *, plan_id: str, plan_hash: str, nonce: str, identity: str) -> str:
        """Approve a proposed plan (compare-and-set ``proposed -> approved``).

        Args:
            plan_id: the proposal to approve.
            plan_hash: must be its hash.
            nonce: must be its nonce.
            identity: the operator key's identity, recorded as ``approved_by``.

        Returns:
            ``"approved"`` or the error code: ``plan_not_found``, ``plan_hash_mismatch``,
            ``invalid_nonce``, ``plan_not_approvable`` (not in state ``proposed``).
        """
        with self._tx() as conn:
            row = conn.execute(
                "SELECT plan_hash, nonce, state FROM plan_proposals WHERE plan_id = ?", (plan_id,)
            ).fetchone()
            if row is None:
                return "plan_not_found"
            if not hmac.compare_digest(row["plan_hash"].encode(), plan_hash.encode()):
                return "plan_hash_mismatch"
            if not hmac.compare_digest(row["nonce"].encode(), nonce.encode()):
                return "invalid_nonce"
            cur = conn.execute(
                "UPDATE plan_proposals SET state = 'approved', approved_by = ?, approved_at = ?"
                " WHERE plan_id = ? AND state = 'proposed'",
                (identity, utc_now(), plan_id),
            )
            if cur.rowcount != 1:
                return "plan_not_approvable"
            write_audit(conn, "plan.approved", identity, "plan", plan_id, {"plan_hash": plan_hash})
            return "approved"
