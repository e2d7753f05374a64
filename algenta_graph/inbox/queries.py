"""What the inbox reads and sends, through the graph's own API, as the signed-in operator.

Every call goes to the LangGraph server's API with the operator's own token (``Authorization:
Bearer``), so the server's custom auth (:mod:`algenta_graph.serving.auth`) decides what the
operator sees and may do, exactly as for any other client: the inbox never reads a checkpoint
store itself and never writes a record; an answer is a resume of the thread, as Agent Inbox or
``langgraph_sdk`` sends it. Inside a LangGraph server the calls go to the server's app in
process (:class:`httpx.ASGITransport`, **through** its auth middleware: not the SDK's
``get_client()`` loopback, which skips authentication); ``ALGENTA_INBOX_API_URL`` points the
inbox at a server elsewhere.

The decision as the engine reports it (``get_decision``) is read over the served graph's own
engine connection settings (``ALGENTA_BASE_URL`` and the rest of the configuration), read-only.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
from langgraph_sdk.client import LangGraphClient

from algenta_graph.audit.chain import ChainReport, records_in_order
from algenta_graph.audit.export import export_jsonl
from algenta_graph.audit.history import verify_history
from algenta_graph.governance.escalations import is_overdue, parse_time
from algenta_graph.nodes.answers import edited_arguments
from algenta_graph.serving.checkpoint_reader import StoredCheckpoint
from algenta_graph.serving.tokens import OWNER_KEY, operator_gates

__all__ = [
    "ENV_API_URL",
    "AnswerOutcome",
    "DecidedRow",
    "EscalationView",
    "FormDecision",
    "InboxAPIError",
    "QueueEntry",
    "Timeline",
    "api_client",
    "build_resume",
    "decided",
    "escalation",
    "get_decision",
    "queue",
    "readable_threads",
    "submit_answer",
    "timeline",
]

ENV_API_URL = "ALGENTA_INBOX_API_URL"
"""The LangGraph API the inbox calls (default: the server it is served by, in process)."""
DEFAULT_ASSISTANT = "governed_agent"
_PAGE = 100
_MAX_THREADS = 2000


class InboxAPIError(RuntimeError):
    """The API refused or failed a call; the message is the server's."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def api_client(token: str) -> LangGraphClient:
    """A LangGraph client that calls the API as the bearer of ``token`` (``""``: no token).

    Raises:
        InboxAPIError: no API to call (outside a LangGraph server, without
            ``ALGENTA_INBOX_API_URL``).
    """
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = os.environ.get(ENV_API_URL, "").strip()
    timeout = httpx.Timeout(connect=5, read=300, write=300, pool=5)
    if url:
        http = httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout)
    else:
        server = sys.modules.get("langgraph_api.server")
        app = getattr(server, "app", None)
        if app is None:
            raise InboxAPIError(
                503,
                f"the inbox is not inside a LangGraph server: set {ENV_API_URL} to the API's URL",
            )
        # the server's own app, through its middleware (the custom auth applies to this token)
        transport = httpx.ASGITransport(app=app)
        http = httpx.AsyncClient(
            base_url="http://inbox.local", transport=transport, headers=headers, timeout=timeout
        )
    return LangGraphClient(http)


def _api_error(exc: Exception) -> InboxAPIError:
    if isinstance(exc, httpx.HTTPStatusError):
        try:
            detail = exc.response.json().get("detail") or exc.response.text
        except ValueError:
            detail = exc.response.text
        return InboxAPIError(exc.response.status_code, str(detail))
    return InboxAPIError(502, f"the API could not be reached: {exc}")


async def readable_threads(
    client: LangGraphClient, select: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Every thread the caller may read (the first 2,000), most recently updated first.

    Args:
        client: the API, as the caller.
        select: only these fields of each thread (``None``: all, its values included).
    """
    out: list[dict[str, Any]] = []
    fields: Any = list(select) if select is not None else None
    try:
        while len(out) < _MAX_THREADS:
            page = await client.threads.search(
                limit=_PAGE,
                offset=len(out),
                sort_by="updated_at",
                sort_order="desc",
                select=fields,
            )
            out += [dict(t) for t in page]
            if len(page) < _PAGE:
                break
    except httpx.HTTPError as exc:
        raise _api_error(exc) from None
    return out


# --------------------------------------------------------------------------- the queue


def _age(asked_at: str | None, now: datetime) -> str:
    if not asked_at:
        return "?"
    try:
        seconds = max(0, int((now - parse_time(asked_at)).total_seconds()))
    except ValueError:
        return "?"
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"


@dataclass(frozen=True)
class QueueEntry:
    """One escalation waiting for the signed-in operator."""

    thread_id: str
    owner: str | None
    gate: str
    escalation_id: str
    decision_id: str | None
    code: str | None
    message: str | None
    args: dict[str, Any]
    asked_at: str | None
    expires_at: str | None
    age: str
    overdue: bool

    @property
    def args_text(self) -> str:
        """The call's arguments as JSON text (escaped by the template)."""
        return json.dumps(self.args, sort_keys=True, default=str)


def _interrupts(thread: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = thread.get("interrupts") or {}
    return [dict(i) for group in found.values() for i in group or () if isinstance(i, Mapping)]


def _items(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, Mapping):
        return []
    return [dict(i) for i in value.get("escalations") or () if isinstance(i, Mapping)]


async def queue(
    client: LangGraphClient, roles: Sequence[str], now: datetime
) -> tuple[list[QueueEntry], dict[str, int]]:
    """The escalations ``roles`` may answer, newest first, and their count per gate."""
    gates = operator_gates(roles)
    entries: list[QueueEntry] = []
    # not the values (the messages): the queue is polled every few seconds
    shown = ("thread_id", "metadata", "interrupts")
    for thread in await readable_threads(client, shown):
        owner = (thread.get("metadata") or {}).get(OWNER_KEY)
        for interrupt in _interrupts(thread):
            for item in _items(interrupt.get("value")):
                if item.get("gate") not in gates:
                    continue
                entries.append(
                    QueueEntry(
                        thread_id=str(thread["thread_id"]),
                        owner=str(owner) if owner else None,
                        gate=str(item["gate"]),
                        escalation_id=str(item.get("escalation_id")),
                        decision_id=item.get("decision_id"),
                        code=item.get("code"),
                        message=item.get("message"),
                        args=dict(item.get("args") or {}),
                        asked_at=item.get("asked_at"),
                        expires_at=item.get("expires_at"),
                        age=_age(item.get("asked_at"), now),
                        overdue=is_overdue(item.get("expires_at"), now),
                    )
                )
    entries.sort(key=lambda e: e.asked_at or "", reverse=True)
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry.gate] = counts.get(entry.gate, 0) + 1
    return entries, counts


# --------------------------------------------------------------------------- one escalation


def _requires_reason(schema: Any) -> bool:
    """Whether an interrupt's ``response_schema`` requires a ``message`` on an approval."""
    if not isinstance(schema, Mapping):
        return False
    defs = schema.get("$defs") or {}
    return any(
        "message" in (d.get("required") or ())
        for name, d in defs.items()
        if isinstance(d, Mapping) and name in ("ApproveDecision", "RejectDecision", "EditDecision")
    )


@dataclass
class EscalationView:
    """An interrupt that asks about an escalation, as the signed-in operator may read it."""

    thread_id: str
    owner: str | None
    assistant_id: str
    interrupt_id: str | None
    value: dict[str, Any]
    items: list[dict[str, Any]]
    per_call: bool
    require_reason: bool
    pending_interrupts: int
    denials: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The denial record of each item, by escalation id."""
    records: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    """The thread's records, in chain order."""

    @property
    def digest(self) -> str:
        """The digest that binds the whole request."""
        return str(self.value.get("digest") or "")


async def _state(client: LangGraphClient, thread_id: str) -> dict[str, Any]:
    try:
        return dict(await client.threads.get_state(thread_id))
    except httpx.HTTPError as exc:
        raise _api_error(exc) from None


async def _thread(client: LangGraphClient, thread_id: str) -> dict[str, Any]:
    try:
        return dict(await client.threads.get(thread_id))
    except httpx.HTTPError as exc:
        raise _api_error(exc) from None


async def escalation(
    client: LangGraphClient, thread_id: str, escalation_id: str
) -> tuple[EscalationView | None, dict[str, Any]]:
    """The pending interrupt of ``thread_id`` that asks about ``escalation_id`` (or ``None``).

    Also returns the thread's state (its records), so a page can say what became of an
    escalation that no longer waits.
    """
    thread = await _thread(client, thread_id)
    state = await _state(client, thread_id)
    values = state.get("values") or {}
    metadata = thread.get("metadata") or {}
    pending = [i for t in state.get("tasks") or () for i in t.get("interrupts") or ()]
    for interrupt in pending:
        value = interrupt.get("value")
        items = _items(value)
        if not any(i.get("escalation_id") == escalation_id for i in items):
            continue
        denials = {
            str(d.get("escalation_id")): dict(d)
            for d in values.get("denials") or ()
            if isinstance(d, Mapping)
        }
        return (
            EscalationView(
                thread_id=thread_id,
                owner=metadata.get(OWNER_KEY),
                assistant_id=str(
                    metadata.get("assistant_id") or metadata.get("graph_id") or DEFAULT_ASSISTANT
                ),
                interrupt_id=interrupt.get("id"),
                value=dict(value),
                items=items,
                per_call=(value or {}).get("type") == "tool_approval",
                require_reason=_requires_reason(interrupt.get("response_schema")),
                pending_interrupts=len(pending),
                denials={i["escalation_id"]: denials.get(i["escalation_id"], {}) for i in items},
                records=records_in_order(values),
            ),
            state,
        )
    return None, state


def decision_of(values: Mapping[str, Any], escalation_id: str) -> dict[str, Any] | None:
    """The operator decision recorded for ``escalation_id``, if any."""
    for record in values.get("operator_decisions") or ():
        if isinstance(record, Mapping) and record.get("escalation_id") == escalation_id:
            return dict(record)
    return None


_ENGINES: dict[int, tuple[asyncio.AbstractEventLoop, Any]] = {}


async def get_decision(decision_id: str) -> dict[str, Any]:
    """The engine's record of ``decision_id`` (``get_decision``), over the served settings.

    Raises:
        Exception: the engine could not be reached or refused (the page shows the message).
    """
    loop = asyncio.get_running_loop()
    held = _ENGINES.get(id(loop))
    if held is None or held[0] is not loop:
        from algenta_graph.config import resolve_config
        from algenta_graph.graph.connecting import open_engine_connection
        from algenta_graph.serving.server import ServerSettings

        settings = await asyncio.to_thread(ServerSettings.from_env)
        resolved = await asyncio.to_thread(resolve_config, settings.config)
        conn = await open_engine_connection(
            settings.config,
            base_url=settings.config.base_url,
            api_key=resolved.api_key or "",
            operator_api_key="",  # read-only: never the operator credential
            profile=settings.config.profile,
            extra_servers=None,
        )
        held = _ENGINES[id(loop)] = (loop, conn)
    return dict(await held[1].get_decision(decision_id))


async def close_engines() -> None:
    """Close the engine connections this process opened for ``get_decision``."""
    loop = asyncio.get_running_loop()
    held = _ENGINES.pop(id(loop), None)
    if held is not None and held[0] is loop:
        await held[1].aclose()


# --------------------------------------------------------------------------- answering


@dataclass(frozen=True)
class FormDecision:
    """What the form says about one escalated call."""

    type: str
    """``approve``, ``edit``, ``reject`` or ``respond``."""
    reason: str
    """Why (for ``respond``: the text the model is given)."""
    edit: dict[str, str] = field(default_factory=dict)
    """For ``edit``: the edited fields, as text (``decision_id``, ``webhook_url``, ...)."""


def _edited(item: Mapping[str, Any], fields: Mapping[str, str]) -> dict[str, Any]:
    """The edit's arguments, read from the form and checked as the graph checks them.

    Raises:
        ValueError: naming what is wrong (the graph would refuse it the same way).
    """
    args: dict[str, Any] = {}
    for name in ("decision_id", "webhook_url"):
        text = (fields.get(name) or "").strip()
        if text:
            args[name] = text
    timeout = (fields.get("timeout_seconds") or "").strip()
    if timeout:
        try:
            args["timeout_seconds"] = int(timeout)
        except ValueError:
            raise ValueError(
                f"edit: timeout_seconds must be a whole number of seconds, got {timeout!r}"
            ) from None
    metadata = (fields.get("metadata") or "").strip()
    if metadata:
        try:
            args["metadata"] = json.loads(metadata)
        except ValueError as exc:
            raise ValueError(f"edit: metadata is not JSON: {exc}") from None
    edited_arguments(item.get("args") or {}, args)  # the graph's own check: refuses by name
    return args


def build_resume(view: EscalationView, decisions: Sequence[FormDecision]) -> Any:
    """The resume value of an answer (LangChain's decisions, each bound by its digest).

    Raises:
        ValueError: the form is wrong (a decision per call, the reason, the edit); the message
            names it and nothing is sent.
    """
    if len(decisions) != len(view.items):
        raise ValueError(
            f"the form answers {len(decisions)} call(s), but this escalation asks about "
            f"{len(view.items)}: reload the page"
        )
    out: list[dict[str, Any]] = []
    for index, (item, form) in enumerate(zip(view.items, decisions, strict=True)):
        where = f"call {index + 1}" if len(view.items) > 1 else "the decision"
        allowed = list(item.get("allowed_decisions") or ())
        if form.type not in ("approve", "edit", "reject", "respond"):
            raise ValueError(f"{where}: choose approve, edit, reject or respond")
        if form.type not in allowed:
            raise ValueError(
                f"{where}: {form.type!r} is not accepted for this {item.get('gate')} escalation "
                f"(allowed: {', '.join(allowed)})"
            )
        reason = form.reason.strip()
        if not reason:
            # the inbox's own rule, stricter than the graph's default: every answer says why
            raise ValueError(f"{where}: a reason is required (the record keeps why it was given)")
        decision: dict[str, Any] = {"type": form.type, "digest": item.get("digest")}
        if reason:
            decision["message"] = reason
        if form.type == "edit":
            decision["edited_action"] = {
                "name": "execute_decision",
                "args": _edited(item, form.edit),
            }
        out.append(decision)
    if view.per_call:
        answer: Any = out[0]
    else:
        answer = {"decisions": out, "digest": view.digest}
    if view.pending_interrupts > 1 and view.interrupt_id:
        return {view.interrupt_id: answer}
    return answer


@dataclass(frozen=True)
class AnswerOutcome:
    """What came of an answer the inbox sent."""

    ok: bool
    message: str
    record: dict[str, Any] | None = None


def _run_error(output: Any) -> str | None:
    if isinstance(output, Mapping) and isinstance(output.get("__error__"), Mapping):
        error = output["__error__"]
        return f"{error.get('error', 'error')}: {error.get('message', '')}".strip()
    return None


async def submit_answer(
    client: LangGraphClient, view: EscalationView, resume: Any, escalation_id: str
) -> AnswerOutcome:
    """Resume the thread with ``resume`` and say what the graph recorded (or why it refused)."""
    try:
        run = await client.runs.create(
            view.thread_id,
            view.assistant_id,
            command={"resume": resume},
            multitask_strategy="reject",
        )
        output = await client.runs.join(view.thread_id, run["run_id"])
        status = (await client.runs.get(view.thread_id, run["run_id"]))["status"]
    except httpx.HTTPError as exc:
        error = _api_error(exc)
        if error.status == 409:
            return AnswerOutcome(
                False,
                "refused: the thread is busy (another answer or run is being applied); nothing "
                "was sent: reload the page",
            )
        return AnswerOutcome(False, f"refused by the server ({error.status}): {error}")
    problem = _run_error(output)
    if status != "success" or problem:
        return AnswerOutcome(
            False, f"refused by the graph: {problem or status}; nothing was recorded"
        )
    values = (await _state(client, view.thread_id)).get("values") or {}
    record = decision_of(values, escalation_id)
    if record is None:
        return AnswerOutcome(False, "the run ended but no operator decision was recorded")
    return AnswerOutcome(True, f"recorded: {record.get('verdict')}", record)


# --------------------------------------------------------------------------- the audit timeline


@dataclass(frozen=True)
class Timeline:
    """A thread's records in chain order and the verification of its every checkpoint."""

    thread_id: str
    records: list[tuple[str, Mapping[str, Any]]]
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
            page = await client.threads.get_history(thread_id, limit=_PAGE, before=before)
            history += [dict(h) for h in page]
            if len(page) < _PAGE:
                break
            before = page[-1]["checkpoint"]
    except httpx.HTTPError as exc:
        raise _api_error(exc) from None
    checkpoints = [_stored(thread_id, h) for h in history if h.get("checkpoint")]
    report = verify_history(checkpoints)
    latest = dict(history[0].get("values") or {}) if history else {}
    return Timeline(thread_id, records_in_order(latest), report, latest)


# --------------------------------------------------------------------------- decided


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
    rows: list[DecidedRow] = []
    for thread in await readable_threads(client):
        values = thread.get("values") or {}
        if not isinstance(values, Mapping):
            continue
        for r in values.get("operator_decisions") or ():
            if not isinstance(r, Mapping):
                continue
            rows.append(
                DecidedRow(
                    thread_id=str(thread["thread_id"]),
                    escalation_id=r.get("escalation_id"),
                    gate=r.get("gate"),
                    decision_id=r.get("decision_id"),
                    operator=r.get("operator"),
                    verdict=r.get("verdict") or r.get("action"),
                    reason=r.get("reason"),
                    decided_at=r.get("decided_at") or r.get("time"),
                    digest=r.get("digest"),
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
