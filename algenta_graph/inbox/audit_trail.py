"""The inbox's audit pages' data: a thread's timeline, verified, and the decided escalations.

:func:`timeline` reads every checkpoint of a thread the caller may read (the API's history)
and verifies the chain over all of them (:func:`~algenta_graph.audit.history.verify_history`),
with its JSONL export; :func:`decided` lists every operator decision on the readable threads,
filtered by operator, gate and outcome. Each record is put in words
(:mod:`algenta_graph.inbox.wording`, an engine decision named with the action it decides:
:func:`~algenta_graph.inbox.engine_reads.decision_actions`). Reading only, through the API as
the caller: never a checkpoint store.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from langgraph_sdk.client import LangGraphClient

from algenta_graph.audit.chain import records_in_order
from algenta_graph.audit.export import export_jsonl
from algenta_graph.audit.history import verify_history
from algenta_graph.audit.verification import ChainReport
from algenta_graph.inbox.engine_reads import decision_actions
from algenta_graph.inbox.queries import PAGE, api_error, readable_threads
from algenta_graph.inbox.wording import RecordLine, decision_ids, record_line, thread_facts
from algenta_graph.serving.checkpoint_reader import StoredCheckpoint

__all__ = ["DecidedRow", "Timeline", "decided", "timeline"]


@dataclass(frozen=True)
class Timeline:
    """A thread's records in chain order and the verification of its every checkpoint."""

    thread_id: str
    lines: list[RecordLine]
    """The records, in chain order and in words."""
    report: ChainReport
    values: dict[str, Any]

    def jsonl(self) -> str:
        """The ``algenta-graph receipts --jsonl`` export of this thread."""
        out = io.StringIO()
        export_jsonl({self.thread_id: self.values}, out)
        return out.getvalue()


def _stored(thread_id: str, entry: Mapping[str, Any]) -> StoredCheckpoint:
    checkpoint = entry.get("checkpoint") or {}
    parent = entry.get("parent_checkpoint") or {}
    step = (entry.get("metadata") or {}).get("step")
    return StoredCheckpoint(
        thread_id=thread_id,
        checkpoint_id=str(checkpoint.get("checkpoint_id")),
        parent_id=parent.get("checkpoint_id") if parent else None,
        step=step if isinstance(step, int) else None,
        values=dict(entry.get("values") or {}),
    )


async def timeline(client: LangGraphClient, thread_id: str) -> Timeline:
    """Every checkpoint of ``thread_id`` (the API history the caller may read), verified."""
    history: list[dict[str, Any]] = []
    try:
        before: Any = None
        while True:
            page = await client.threads.get_history(thread_id, limit=PAGE, before=before)
            history += [dict(h) for h in page]
            if len(page) < PAGE:
                break
            before = page[-1]["checkpoint"]
    except httpx.HTTPError as exc:
        raise api_error(exc) from None
    checkpoints = [_stored(thread_id, h) for h in history if h.get("checkpoint")]
    report = verify_history(checkpoints)
    latest = dict(history[0].get("values") or {}) if history else {}
    facts = thread_facts(latest, await decision_actions(decision_ids(latest)))
    lines = [record_line(name, r, facts) for name, r in records_in_order(latest)]
    return Timeline(thread_id, lines, report, latest)


@dataclass(frozen=True)
class DecidedRow:
    """One operator decision, as the decided page lists it."""

    thread_id: str
    escalation_id: str | None
    gate: str | None
    decision_id: str | None
    operator: str | None
    verdict: str | None
    reason: str | None
    decided_at: str | None
    digest: str | None
    about: str
    """What it was about, in words: the held call, or the decision and its action."""
    happened: str
    """Who answered how, and what came of it, in words."""


async def decided(
    client: LangGraphClient,
    *,
    operator: str | None = None,
    gate: str | None = None,
    outcome: str | None = None,
) -> tuple[list[DecidedRow], dict[str, list[str]]]:
    """Every operator decision on the threads the caller may read, newest first, filtered.

    Also returns the choices of each filter (the operators, gates and outcomes seen).
    """
    found: list[tuple[str, Mapping[str, Any], Mapping[str, Any]]] = []
    for thread in await readable_threads(client):
        values = thread.get("values") or {}
        if not isinstance(values, Mapping):
            continue
        found += [
            (str(thread["thread_id"]), values, r)
            for r in values.get("operator_decisions") or ()
            if isinstance(r, Mapping)
        ]
    actions = await decision_actions(
        r["decision_id"] for _, _, r in found if isinstance(r.get("decision_id"), str)
    )
    rows: list[DecidedRow] = []
    for thread_id, values, r in found:
        line = record_line("operator_decisions", r, thread_facts(values, actions))
        rows.append(
            DecidedRow(
                thread_id=thread_id,
                escalation_id=r.get("escalation_id"),
                gate=r.get("gate"),
                decision_id=r.get("decision_id"),
                operator=r.get("operator"),
                verdict=r.get("verdict") or r.get("action"),
                reason=r.get("reason"),
                decided_at=r.get("decided_at") or r.get("time"),
                digest=r.get("digest"),
                about=line.about,
                happened=line.happened,
            )
        )
    choices = {
        "operator": sorted({r.operator for r in rows if r.operator}),
        "gate": sorted({r.gate for r in rows if r.gate}),
        "outcome": sorted({r.verdict for r in rows if r.verdict}),
    }
    rows = [
        r
        for r in rows
        if (not operator or r.operator == operator)
        and (not gate or r.gate == gate)
        and (not outcome or r.verdict == outcome)
    ]
    rows.sort(key=lambda r: r.decided_at or "", reverse=True)
    return rows, choices
