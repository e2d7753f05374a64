"""The inbox's reading pages: the queue, the threads, a thread's timeline and export, the decided.

Each is a page of a signed-in reader (:mod:`algenta_graph.inbox.signin` checks the role: the
queue is an operator's, the rest an auditor's too) that asks the API as that reader
(:mod:`algenta_graph.inbox.queries`) and renders what it answered. None of them sends anything:
answering an escalation is :mod:`algenta_graph.inbox.answering`.
"""

from __future__ import annotations

from datetime import datetime, timezone

from starlette.requests import Request
from starlette.responses import Response

from algenta_graph.inbox import queries
from algenta_graph.inbox.audit_trail import decided, timeline
from algenta_graph.inbox.rendering import render
from algenta_graph.inbox.session import Session
from algenta_graph.inbox.signin import operator_client
from algenta_graph.inbox.waiting import QueueEntry, queue

__all__ = ["decided_page", "export", "queue_page", "queue_rows", "threads_page", "timeline_page"]


async def _queue(session: Session) -> tuple[list[QueueEntry], dict[str, int]]:
    """What the operator may answer now, and a count per gate."""
    async with operator_client(session) as client:
        return await queue(client, session.roles, datetime.now(timezone.utc))


async def queue_page(request: Request, session: Session) -> Response:
    """``/queue``: what the operator may answer, newest first."""
    entries, counts = await _queue(session)
    return render(request, "queue.html", session, entries=entries, counts=counts)


async def queue_rows(request: Request, session: Session) -> Response:
    """``/queue/rows``: the queue's rows alone (its refresh)."""
    entries, counts = await _queue(session)
    return render(request, "queue_rows.html", session, entries=entries, counts=counts)


async def threads_page(request: Request, session: Session) -> Response:
    """``/threads``: the threads the reader may read, with their record counts."""
    async with operator_client(session) as client:
        found = await queries.readable_threads(client)
    rows = [
        {
            "thread_id": t["thread_id"],
            "owner": (t.get("metadata") or {}).get("algenta_owner"),
            "status": t.get("status"),
            "updated_at": t.get("updated_at"),
            "records": sum(
                len((t.get("values") or {}).get(f) or ())
                for f in ("receipts", "denials", "operator_decisions", "tool_calls")
            )
            if isinstance(t.get("values"), dict)
            else 0,
        }
        for t in found
    ]
    return render(request, "threads.html", session, rows=rows)


async def timeline_page(request: Request, session: Session) -> Response:
    """``/threads/{thread}/timeline``: the audit timeline with the chain's verification."""
    async with operator_client(session) as client:
        found = await timeline(client, request.path_params["thread"])
    return render(request, "timeline.html", session, timeline=found)


async def export(request: Request, session: Session) -> Response:
    """``/threads/{thread}/export.jsonl``: the timeline's JSONL export, as a download."""
    thread_id = request.path_params["thread"]
    async with operator_client(session) as client:
        found = await timeline(client, thread_id)
    return Response(
        found.jsonl(),
        media_type="application/x-ndjson",
        headers={"content-disposition": f'attachment; filename="{thread_id}.jsonl"'},
    )


async def decided_page(request: Request, session: Session) -> Response:
    """``/decided``: the decided escalations, filtered by operator, gate and outcome."""
    chosen = {k: request.query_params.get(k) or None for k in ("operator", "gate", "outcome")}
    async with operator_client(session) as client:
        rows, choices = await decided(client, **chosen)
    return render(request, "decided.html", session, rows=rows, choices=choices, chosen=chosen)
