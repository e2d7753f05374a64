"""Deadlines that act: what waits for an operator, its expiry and the warning before it.

An escalation's deadline is its gate's ``expires_after`` (``expires_at`` on what waits). Past
it, any answer declines it (``expired``). Two ways act on it, through one code path
(:mod:`.acting`): ``algenta-graph escalations --expire`` (from cron) and the served graph's own
watcher (:mod:`algenta_graph.serving.deadline_watcher`), which also warns a configurable lead
time before (``warn_before``). Each expiry is the escalation's one answer in the shared ledger
(:mod:`algenta_graph.ledger`), so an expiry and an operator's answer never both take effect, and
each warning is a notice marked there, sent once across every process.
"""

from __future__ import annotations

from algenta_graph.deadlines.acting import expire_overdue, warn_due, warning_notice
from algenta_graph.deadlines.waiting import Waiting, list_waiting

__all__ = ["Waiting", "expire_overdue", "list_waiting", "warn_due", "warning_notice"]
