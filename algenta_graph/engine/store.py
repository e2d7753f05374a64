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

import hmac
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


def _audit(
    conn: sqlite3.Connection,
    action: str,
    actor: str | None,
    subject_type: str,
    subject_id: str,
    details: dict[str, Any],
) -> None:
    """Append one audit row, in the transaction of the change it records."""
    conn.execute(
        "INSERT INTO audit_log(at, actor, action, subject_type, subject_id, details)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (utc_now(), actor, action, subject_type, subject_id, json.dumps(details, sort_keys=True)),
    )


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
    "plan_id",
)


def utc_now() -> str:
    """The current UTC time as ISO 8601 with a ``Z`` suffix (millisecond precision)."""
    now = datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


# Columns added after the first release: (table, column, declaration), added when missing.
_ADDED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("executions", "idempotency_key", "TEXT"),
    ("executions", "plan_id", "TEXT"),
    ("executions", "identity", "TEXT"),
    # a decision is bound to one plan proposal by its id (issue 19, case 5), and the proposal
    # names the decision it is bound to (at most one)
    ("decisions", "plan_id", "TEXT"),
    ("plan_proposals", "decision_id", "TEXT"),
    # the analysis run a plan was proposed from (plans proposed over the HTTP API)
    ("plan_proposals", "run_id", "TEXT"),
)

EXECUTED_STATUSES: tuple[str, ...] = ("delivered", "unknown", "recorded")
"""Execution statuses that count as executed for the idempotency gate: a delivery that may have
reached its target (``unknown``) counts as much as a confirmed one, and so does an execution
recorded without a webhook (``recorded``, a plan executed over HTTP)."""


class PlanNotApproved(Exception):
    """The compare-and-set ``approved -> executed`` on a plan proposal found it not approved."""


class IdempotencyKeyTaken(Exception):
    """Another execution already carries this idempotency key."""


class BindingRefused(Exception):
    """A decision cannot be bound to a plan proposal; ``code`` names why (nothing was written).

    - ``plan_not_found``: no proposal with that ``plan_id``;
    - ``plan_already_bound``: the proposal (every proposal of the ``plan_hash``) is bound to a
      decision already (``bound`` maps plan_id -> decision_id);
    - ``plan_ambiguous``: several unbound proposals have the ``plan_hash`` (``candidates``);
    - ``decision_not_found``, ``plan_hash_mismatch``: for a plan proposed for a decision;
    - ``plan_not_spent``: that decision's plan is not executed yet (``bound``).
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


class Store:
    """The engine's SQLite file. Creates (or completes) the schema on first use."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._tx() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
            for table, column, declaration in _ADDED_COLUMNS:
                have = {r["name"] for r in conn.execute(f"PRAGMA table_info({table})")}
                if column not in have:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
            conn.execute(
                "CREATE UNIQUE INDEX IF NOT EXISTS executions_by_idempotency_key"
                " ON executions(idempotency_key) WHERE idempotency_key IS NOT NULL"
            )

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30)
        conn.row_factory = sqlite3.Row
        try:
            with conn:
                yield conn
        finally:
            conn.close()

    def _one(self, query: str, params: tuple[Any, ...]) -> sqlite3.Row | None:
        """The first row ``query`` selects (``None`` if none), in a transaction of its own."""
        with self._tx() as conn:
            row: sqlite3.Row | None = conn.execute(query, params).fetchone()
        return row

    def _rows_with_json(self, query: str, column: str) -> list[dict[str, Any]]:
        """The rows ``query`` selects, as dicts, with ``column`` read back from its JSON."""
        with self._tx() as conn:
            rows = conn.execute(query).fetchall()
        return [{**dict(r), column: json.loads(r[column])} for r in rows]

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
        return self._rows_with_json(
            "SELECT name, arguments, received_at FROM call_log ORDER BY seq", "arguments"
        )

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
        return self._rows_with_json(
            "SELECT policy_snapshot_id, policy, created_at FROM policy_snapshots"
            " ORDER BY rowid DESC",
            "policy",
        )

    # -- plans -----------------------------------------------------------------------------

    def save_plan(self, plan_hash: str, plan: dict[str, Any]) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO plans(plan_hash, plan, created_at) VALUES (?, ?, ?)",
                (plan_hash, json.dumps(plan, sort_keys=True), utc_now()),
            )

    def get_plan(self, plan_hash: str) -> dict[str, Any] | None:
        row = self._one("SELECT plan FROM plans WHERE plan_hash = ?", (plan_hash,))
        return None if row is None else dict(json.loads(row["plan"]))

    # -- decisions -------------------------------------------------------------------------

    @staticmethod
    def _insert_decision_row(
        conn: sqlite3.Connection, decision: dict[str, Any], actor: str | None
    ) -> None:
        values = [decision.get(c) for c in _DECISION_COLUMNS]
        values[_DECISION_COLUMNS.index("scenario")] = (
            None if decision.get("scenario") is None else json.dumps(decision["scenario"])
        )
        conn.execute(
            f"INSERT INTO decisions({', '.join(_DECISION_COLUMNS)})"
            f" VALUES ({', '.join('?' for _ in _DECISION_COLUMNS)})",
            values,
        )
        _audit(
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

    def insert_decision(self, decision: dict[str, Any], *, actor: str | None = None) -> str | None:
        """Insert a decision and bind it to a plan proposal, in one transaction.

        - ``decision["plan_id"]`` set: bound to that proposal;
        - else ``decision["plan_hash"]`` set: bound to the one proposal of that hash that is
          neither bound to a decision nor executed (none at all, a database from before plans
          were bound by id: bound to none);
        - neither: bound to none.

        Returns the bound ``plan_id`` (also written into ``decision``). Raises
        :class:`BindingRefused` (``plan_not_found``, ``plan_already_bound``, ``plan_ambiguous``)
        with nothing written.
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
            self._insert_decision_row(conn, decision, actor)
            if plan_id is not None:
                conn.execute(
                    "UPDATE plan_proposals SET decision_id = ? WHERE plan_id = ?",
                    (decision["decision_id"], plan_id),
                )
        return plan_id

    @staticmethod
    def _decision(row: sqlite3.Row) -> dict[str, Any]:
        out = {c: row[c] for c in _DECISION_COLUMNS}
        if out["scenario"] is not None:
            out["scenario"] = json.loads(out["scenario"])
        return out

    def get_decision(self, decision_id: str) -> dict[str, Any] | None:
        row = self._one("SELECT * FROM decisions WHERE decision_id = ?", (decision_id,))
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
        """Record an execution before its webhook POST goes out (write-ahead), in one
        transaction with the plan's compare-and-set ``approved -> executed`` when ``plan_id``
        is given (the plan must be bound to the receipt's decision). ``receipt`` is the
        provisional one (status ``unknown``): if the engine stops during the delivery, the
        execution stays on record as possibly delivered.

        Raises :class:`PlanNotApproved` (nothing written) when the plan is not ``approved``,
        :class:`IdempotencyKeyTaken` when another execution carries ``idempotency_key``.
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
            _audit(
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
        """Store the final receipt of an execution; ``release_plan`` puts its plan back to
        ``approved`` (the delivery certainly did not happen, so the approval is not spent)."""
        with self._tx() as conn:
            conn.execute(
                "UPDATE executions SET execution_status = ?, receipt = ? WHERE execution_id = ?",
                (receipt["execution_status"], json.dumps(receipt), execution_id),
            )
            _audit(
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

    # -- plan proposals and their approval --------------------------------------------------

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
        """Record a proposed plan (state ``proposed``); returns its ``created_at``.

        ``decision_id``: the plan is proposed for that logged decision (a re-execution after its
        plan was executed) and the decision is bound to it, in the same transaction. Raises
        :class:`BindingRefused` (``decision_not_found``, ``plan_hash_mismatch`` when the
        decision was logged with another plan_hash or none, ``plan_not_spent`` while its
        current plan is not executed) with nothing written. ``new_decision``: a decision logged
        with the plan and bound to it (an action plan of the HTTP API). ``run_id``: the analysis
        run it comes from. ``plan``: the plan's content, kept by its hash (as :meth:`save_plan`)
        in the same transaction.
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
            _audit(
                conn,
                "plan.proposed",
                actor,
                "plan",
                plan_id,
                {"plan_hash": plan_hash, "decision_id": decision_id, "run_id": run_id},
            )
            if new_decision is not None:
                self._insert_decision_row(conn, {**new_decision, "plan_id": plan_id}, actor)
            elif decision_id is not None:
                conn.execute(
                    "UPDATE decisions SET plan_id = ? WHERE decision_id = ?", (plan_id, decision_id)
                )
        return created

    def proposal(self, plan_id: str) -> dict[str, Any] | None:
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

        Returns ``"approved"`` or the error code: ``plan_not_found``, ``plan_hash_mismatch``,
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
            _audit(conn, "plan.approved", identity, "plan", plan_id, {"plan_hash": plan_hash})
            return "approved"

    # -- decision cases and analysis runs (the HTTP API) ---------------------------------------

    def create_case(self, case: dict[str, Any], *, actor: str | None) -> None:
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
            _audit(
                conn, "case.created", actor, "case", case["case_id"], {"pack_id": case["pack_id"]}
            )

    def case(self, case_id: str) -> dict[str, Any] | None:
        row = self._one(
            "SELECT case_id, pack_id, title, pack_input, created_at, created_by"
            " FROM decision_cases WHERE case_id = ?",
            (case_id,),
        )
        return None if row is None else {**dict(row), "pack_input": json.loads(row["pack_input"])}

    def create_run(self, run: dict[str, Any], *, actor: str | None) -> None:
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
            _audit(
                conn,
                "analysis_run.completed",
                actor,
                "analysis_run",
                run["run_id"],
                {"case_id": run["case_id"], "seed": run["seed"], "n_samples": run["n_samples"]},
            )

    def run(self, run_id: str) -> dict[str, Any] | None:
        row = self._one(
            "SELECT run_id, case_id, seed, n_samples, result, created_at, created_by"
            " FROM analysis_runs WHERE run_id = ?",
            (run_id,),
        )
        return None if row is None else {**dict(row), "result": json.loads(row["result"])}

    def runs_of_case(self, case_id: str) -> list[dict[str, Any]]:
        with self._tx() as conn:
            rows = conn.execute(
                "SELECT run_id, created_at FROM analysis_runs WHERE case_id = ? ORDER BY seq",
                (case_id,),
            ).fetchall()
        return [dict(r) for r in rows]

    def plans_of_case(self, case_id: str) -> list[dict[str, Any]]:
        with self._tx() as conn:
            rows = conn.execute(
                "SELECT p.plan_id, p.run_id, p.plan_hash, p.state, p.decision_id, p.created_at"
                " FROM plan_proposals p JOIN analysis_runs r ON r.run_id = p.run_id"
                " WHERE r.case_id = ? ORDER BY p.rowid",
                (case_id,),
            ).fetchall()
        return [dict(r) for r in rows]

    # -- executions by id and the audit log ---------------------------------------------------

    def execution(self, execution_id: str) -> dict[str, Any] | None:
        """One execution (as :meth:`executions` lists them), or None."""
        row = self._one("SELECT * FROM executions WHERE execution_id = ?", (execution_id,))
        if row is None:
            return None
        return {
            **json.loads(row["receipt"]),
            "execution_id": row["execution_id"],
            "force": bool(row["force"]),
            "override_safety": bool(row["override_safety"]),
            "metadata": None if row["metadata"] is None else json.loads(row["metadata"]),
        }

    def audit_rows(self) -> list[dict[str, Any]]:
        """Every audit row, oldest first (:data:`AUDIT_COLUMNS`; ``details`` as an object)."""
        return self._rows_with_json(
            f"SELECT {', '.join(AUDIT_COLUMNS)} FROM audit_log ORDER BY seq", "details"
        )
