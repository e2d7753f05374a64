"""Decision cases and their analysis runs (the HTTP API's records before a plan)."""

from __future__ import annotations

import json
from typing import Any

from algenta_graph.engine.store.audit import write_audit
from algenta_graph.engine.store.base import StoreFile, Tables

TABLES = Tables(
    """
CREATE TABLE IF NOT EXISTS decision_cases (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    case_id TEXT NOT NULL UNIQUE,
    pack_id TEXT NOT NULL,
    title TEXT,
    pack_input TEXT NOT NULL,
    created_at TEXT NOT NULL,
    created_by TEXT
);
CREATE TABLE IF NOT EXISTS analysis_runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    case_id TEXT NOT NULL REFERENCES decision_cases(case_id),
    seed INTEGER NOT NULL,
    n_samples INTEGER NOT NULL,
    result TEXT NOT NULL,
    created_at TEXT NOT NULL,
    created_by TEXT
);
"""
)


class CaseRecords(StoreFile):
    """The decision_cases and analysis_runs tables."""

    def create_case(self, case: dict[str, Any], *, actor: str | None) -> None:
        """Record a decision case and its ``case.created`` audit row.

        Args:
            case: ``case_id``, ``pack_id``, ``title``, ``pack_input`` (validated),
                ``created_at``.
            actor: the identity of the key that created it.
        """
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO decision_cases(case_id, pack_id, title, pack_input, created_at,"
                " created_by) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    case["case_id"],
                    case["pack_id"],
                    case["title"],
                    json.dumps(case["pack_input"], sort_keys=True),
                    case["created_at"],
                    actor,
                ),
            )
            write_audit(
                conn, "case.created", actor, "case", case["case_id"], {"pack_id": case["pack_id"]}
            )

    def case(self, case_id: str) -> dict[str, Any] | None:
        """The case ``case_id`` (its ``pack_input`` read back from JSON), or None."""
        row = self._one(
            "SELECT case_id, pack_id, title, pack_input, created_at, created_by"
            " FROM decision_cases WHERE case_id = ?",
            (case_id,),
        )
        return None if row is None else {**dict(row), "pack_input": json.loads(row["pack_input"])}

    def create_run(self, run: dict[str, Any], *, actor: str | None) -> None:
        """Record a completed analysis run and its ``analysis_run.completed`` audit row.

        Args:
            run: ``run_id``, ``case_id``, ``seed``, ``n_samples``, ``result``, ``created_at``.
            actor: the identity of the key that ran it.
        """
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO analysis_runs(run_id, case_id, seed, n_samples, result, created_at,"
                " created_by) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    run["run_id"],
                    run["case_id"],
                    run["seed"],
                    run["n_samples"],
                    json.dumps(run["result"], sort_keys=True),
                    run["created_at"],
                    actor,
                ),
            )
            write_audit(
                conn,
                "analysis_run.completed",
                actor,
                "analysis_run",
                run["run_id"],
                {"case_id": run["case_id"], "seed": run["seed"], "n_samples": run["n_samples"]},
            )

    def run(self, run_id: str) -> dict[str, Any] | None:
        """The analysis run ``run_id`` (its ``result`` read back from JSON), or None."""
        row = self._one(
            "SELECT run_id, case_id, seed, n_samples, result, created_at, created_by"
            " FROM analysis_runs WHERE run_id = ?",
            (run_id,),
        )
        return None if row is None else {**dict(row), "result": json.loads(row["result"])}

    def runs_of_case(self, case_id: str) -> list[dict[str, Any]]:
        """The analysis runs of a case, oldest first: ``run_id`` and ``created_at``."""
        with self._tx() as conn:
            rows = conn.execute(
                "SELECT run_id, created_at FROM analysis_runs WHERE case_id = ? ORDER BY seq",
                (case_id,),
            ).fetchall()
        return [dict(r) for r in rows]

    def plans_of_case(self, case_id: str) -> list[dict[str, Any]]:
        """The plans proposed from a case's runs, oldest first, with their state."""
        with self._tx() as conn:
            rows = conn.execute(
                "SELECT p.plan_id, p.run_id, p.plan_hash, p.state, p.decision_id, p.created_at"
                " FROM plan_proposals p JOIN analysis_runs r ON r.run_id = p.run_id"
                " WHERE r.case_id = ? ORDER BY p.rowid",
                (case_id,),
            ).fetchall()
        return [dict(r) for r in rows]
