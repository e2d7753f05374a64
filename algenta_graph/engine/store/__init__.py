"""SQLite persistence of the reference engine, one module per record kind.

Decisions, plans and their proposals, executions, decision cases and analysis runs, the policy
snapshots, the call log and the audit log: everything survives a restart on the same file.
:class:`Store` is all of them over one file; each operation opens its own short connection (WAL
mode), so the store is safe to use from the server thread and from a test thread reading it at
the same time.

>>> import tempfile, os
>>> store = Store(os.path.join(tempfile.mkdtemp(), "engine.db"))
>>> store.log_call("get_contract", {})
>>> [c["name"] for c in store.call_log()]
['get_contract']
"""

from __future__ import annotations

from typing import ClassVar

from algenta_graph.engine.store import audit, cases, decisions, executions, logs, plans
from algenta_graph.engine.store.base import Tables


class Store(
    decisions.DecisionRecords,
    plans.PlanRecords,
    executions.ExecutionRecords,
    cases.CaseRecords,
    logs.ServedLogs,
    audit.AuditLog,
):
    """The engine's SQLite file: every record kind. Creates (or completes) the schema on first use.

    Args:
        path: the database file (its directory is created when missing).
    """

    TABLES: ClassVar[tuple[Tables, ...]] = (
        decisions.TABLES,
        plans.TABLES,
        executions.TABLES,
        logs.TABLES,
        cases.TABLES,
        audit.TABLES,
    )
