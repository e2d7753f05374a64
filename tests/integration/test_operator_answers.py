"""The ecosystem's review clients answer as they are (``docs/ARCHITECTURE.md``, invariant 15).

Every answer below is built the way its client builds it, from the interrupt the graph raised,
and replayed against the governed graph on the reference engine over HTTP (SQLite checkpoints):

- Agent Chat UI (langchain-ai/agent-chat-ui): ``src/components/thread/agent-inbox/utils.ts``
  (``buildDecisionFromState``: approve is ``{"type": "approve"}``, reject needs a trimmed
  message, an edit without changes is an approve, an edit sends ``edited_action`` with the
  edited fields as the text of their boxes) and ``hooks/use-interrupted-actions.tsx``
  (``resumeRun``: ``thread.submit({}, {command: {resume: {decisions: [decision]}}})``, one
  decision whatever the number of action requests; ``handleResolve``: ``command: {goto: END}``);
- Agent Inbox (langchain-ai/agent-inbox): ``src/components/agent-inbox/contexts/utils.ts``
  (``normalizeInterrupt``: a HITLRequest's first action request, its ``arguments``, the first
  review config's decisions), ``utils.ts`` (``createDefaultHumanResponse``: accept carries the
  action request, or ``null``), ``hooks/use-interrupted-actions.tsx`` (``handleSubmit`` sends
  ``[{type, args}]``, ``handleIgnore`` ``[{"type": "ignore", "args": null}]``) and
  ``contexts/ThreadContext.tsx`` (``sendHumanResponse``: ``command: {resume: response}``;
  ``ignoreThread``, "mark as resolved": ``updateState(thread, {values: null, asNode: END})``);
- LangChain's own decisions (``langchain.agents.middleware.human_in_the_loop``), batched and
  ``per_call``, and the library's short form.

Each answer either takes effect (its record, and the engine's executions, say which) or is
refused by name before anything is saved; none is silently asked again. The figure counts them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from graph_support import agent, config, log_decision, open_connection
from guarantee_support import figure
from langchain.agents.middleware.human_in_the_loop import (
    ActionRequest,
    Decision,
    HITLRequest,
    ReviewConfig,
    ToolApprovalRequest,
)
from langgraph.graph import END
from langgraph.types import Command
from pydantic import TypeAdapter, ValidationError

from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.governance.escalations import EscalationSettings

OPERATOR = {"identity": "ana", "is_authenticated": True, "permissions": ["operator"]}
"""The served graph's authenticated operator (its auth stamps every answer with it)."""


def as_text(value: Any) -> str:
    """What Agent Chat UI and Agent Inbox put in an edit box: strings as they are, numbers as
    their text, anything else as JSON (``utils.ts``)."""
    import json

    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return json.dumps(value)


# --------------------------------------------------------------------------- the clients


def chat_ui(decision: dict[str, Any]) -> dict[str, Any]:
    """``resumeRun([decision])``: one decision, whatever the number of action requests."""
    return {"decisions": [decision]}


def chat_ui_edit(request: Mapping[str, Any], **edits: Any) -> dict[str, Any]:
    """Agent Chat UI's edit: ``{...actionRequest.args}``, each edited field as its box's text;
    no change and approve allowed: an approve (``buildDecisionFromState``)."""
    action = request["action_requests"][0]
    allowed = request["review_configs"][0]["allowed_decisions"]
    if not edits and "approve" in allowed:
        return chat_ui({"type": "approve"})
    args = dict(action["args"])
    args.update({key: as_text(value) for key, value in edits.items()})
    return chat_ui({"type": "edit", "edited_action": {"name": action["name"], "args": args}})


def inbox_action(request: Mapping[str, Any]) -> dict[str, Any]:
    """Agent Inbox's ``normalizeInterrupt`` of a HITLRequest: its action request."""
    first = request["action_requests"][0]
    return {"action": first["name"], "args": first.get("arguments") or {}}


def inbox_accept(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    allowed = request["review_configs"][0]["allowed_decisions"]
    # edit allowed: the accept carries the action request; else it is ``args: null``
    return [{"type": "accept", "args": inbox_action(request) if "edit" in allowed else None}]


def inbox_edit(request: Mapping[str, Any], **edits: Any) -> list[dict[str, Any]]:
    action = inbox_action(request)
    action["args"] = {**action["args"], **{k: as_text(v) for k, v in edits.items()}}
    return [{"type": "edit", "args": action}]


# --------------------------------------------------------------------------- the shapes


@dataclass
class Shape:
    """One answer a client sends, and what it must do."""

    client: str
    name: str
    answer: Callable[[Mapping[str, Any], str], Any]
    """``(interrupt value, webhook url) -> answer``, built as the client builds it."""
    effect: str
    """The record's verdict, or ``refused``."""
    needle: str = ""
    """For ``refused``: what the error names."""
    settings: EscalationSettings = field(default_factory=EscalationSettings)
    calls: int = 1
    """How many escalated calls the step makes."""
    executes: bool = False
    """Whether the engine executes the decision."""
    per_call_answers: int = 1


BATCHED = EscalationSettings()
REASONS = EscalationSettings(require_reason=True)
PER_CALL = EscalationSettings(interrupt_mode="per_call")
NO_EDIT = EscalationSettings(allowed_decisions={"confidence": ["approve", "reject", "respond"]})

SHAPES: list[Shape] = [
    # Agent Chat UI
    Shape(
        "chat-ui", "approve", lambda r, u: chat_ui({"type": "approve"}), "approved", executes=True
    ),
    Shape(
        "chat-ui",
        "reject with its required message",
        lambda r, u: chat_ui({"type": "reject", "message": "too risky"}),
        "declined",
    ),
    Shape(
        "chat-ui",
        "edit: the webhook changed",
        lambda r, u: chat_ui_edit(r, webhook_url=u + "/edited"),
        "modified",
        executes=True,
    ),
    Shape(
        "chat-ui",
        "edit: the timeout's box changed (text)",
        lambda r, u: chat_ui_edit(r, timeout_seconds=12),
        "modified",
        executes=True,
    ),
    Shape(
        "chat-ui",
        "edit without changes: sent as an approve",
        lambda r, u: chat_ui_edit(r),
        "approved",
        executes=True,
    ),
    Shape(
        "chat-ui",
        "edit without changes, approve not offered",
        lambda r, u: chat_ui(
            {
                "type": "edit",
                "edited_action": {
                    "name": "execute_decision",
                    "args": dict(r["action_requests"][0]["args"]),
                },
            }
        ),
        "approved",
        executes=True,
        settings=EscalationSettings(allowed_decisions={"confidence": ["edit", "reject"]}),
    ),
    Shape(
        "chat-ui",
        "edit of the decision itself",
        lambda r, u: chat_ui_edit(r, decision_id="dec_someone_else"),
        "refused",
        "is not the decision reviewed",
    ),
    Shape(
        "chat-ui",
        "approve, one decision for two action requests",
        lambda r, u: chat_ui({"type": "approve"}),
        "refused",
        "List should have at least 2 items",
        calls=2,
    ),
    Shape(
        "chat-ui",
        "approve when reasons are required",
        lambda r, u: chat_ui({"type": "approve"}),
        "refused",
        "decisions.0.approve.message",
        settings=REASONS,
    ),
    Shape(
        "chat-ui",
        "edit when edits are not accepted",
        lambda r, u: chat_ui(
            {"type": "edit", "edited_action": {"name": "execute_decision", "args": {}}}
        ),
        "refused",
        "does not match any of the expected tags: 'approve', 'reject', 'respond'",
        settings=NO_EDIT,
    ),
    # Agent Inbox
    Shape(
        "inbox", "accept (edit offered)", lambda r, u: inbox_accept(r), "approved", executes=True
    ),
    Shape(
        "inbox",
        "accept (no edit offered)",
        lambda r, u: inbox_accept(r),
        "approved",
        executes=True,
        settings=NO_EDIT,
    ),
    Shape("inbox", "ignore", lambda r, u: [{"type": "ignore", "args": None}], "declined"),
    Shape(
        "inbox",
        "response",
        lambda r, u: [{"type": "response", "args": "Ask the pricing committee first."}],
        "responded",
    ),
    Shape(
        "inbox",
        "edit: the webhook changed",
        lambda r, u: inbox_edit(r, webhook_url=u + "/inbox"),
        "modified",
        executes=True,
    ),
    Shape(
        "inbox",
        "edit of another tool",
        lambda r, u: [{"type": "edit", "args": {"action": "log_decision", "args": {}}}],
        "refused",
        "an edit cannot call another tool",
    ),
    Shape(
        "inbox",
        "accept when reasons are required",
        lambda r, u: inbox_accept(r),
        "refused",
        "requires a reason for every answer",
        settings=REASONS,
    ),
    # LangChain's decisions, batched
    Shape(
        "langchain",
        "reject without a message",
        lambda r, u: {"decisions": [{"type": "reject"}]},
        "declined",
    ),
    Shape(
        "langchain",
        "approve with a message",
        lambda r, u: {"decisions": [{"type": "approve", "message": "checked with finance"}]},
        "approved",
        executes=True,
        settings=REASONS,
    ),
    Shape(
        "langchain",
        "respond",
        lambda r, u: {"decisions": [{"type": "respond", "message": "Use the cheaper supplier."}]},
        "responded",
    ),
    Shape(
        "langchain",
        "respond without text",
        lambda r, u: {"decisions": [{"type": "respond"}]},
        "refused",
        "decisions.0.respond.message",
    ),
    Shape(
        "langchain",
        "two decisions for two action requests",
        lambda r, u: {"decisions": [{"type": "reject"}, {"type": "approve"}]},
        "declined+approved",
        calls=2,
        executes=True,
    ),
    Shape(
        "langchain",
        "a decision carrying a stale digest",
        lambda r, u: {"decisions": [{"type": "approve", "digest": "sha256:" + "0" * 64}]},
        "refused",
        "stale answer",
    ),
    Shape(
        "langchain",
        "a decision carrying the digest it reviewed",
        lambda r, u: {"decisions": [{"type": "approve", "digest": r["escalations"][0]["digest"]}]},
        "approved",
        executes=True,
    ),
    # LangChain's decisions, per call (ToolApprovalRequest)
    Shape(
        "langchain per_call",
        "approve",
        lambda r, u: {"type": "approve"},
        "approved",
        executes=True,
        settings=PER_CALL,
    ),
    Shape(
        "langchain per_call",
        "reject",
        lambda r, u: {"type": "reject", "message": "no"},
        "declined",
        settings=PER_CALL,
    ),
    Shape(
        "langchain per_call",
        "edit: the webhook changed",
        lambda r, u: {
            "type": "edit",
            "edited_action": {
                "name": "execute_decision",
                "args": {**r["args"], "webhook_url": u + "/pc"},
            },
        },
        "modified",
        executes=True,
        settings=PER_CALL,
    ),
    Shape(
        "langchain per_call",
        "a HITL response where one decision is expected",
        lambda r, u: {"decisions": [{"type": "approve"}]},
        "refused",
        "not an answer to this escalation: answer one decision",
        settings=PER_CALL,
    ),
    # the library's short form
    Shape(
        "short form",
        "override",
        lambda r, u: {"action": "override", "reason": "signed off"},
        "overrode",
        executes=True,
    ),
    Shape("short form", "decline", lambda r, u: {"action": "decline"}, "declined"),
    Shape(
        "short form",
        "override with a stale request digest",
        lambda r, u: {"action": "override", "digest": "sha256:" + "1" * 64},
        "refused",
        "stale answer",
    ),
]


@contextlib.asynccontextmanager
async def governed(
    conn: EngineConnection,
    db: Path,
    replies: list[Any],
    settings: EscalationSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Any]:
    """The real factory's graph, its denial handlers built with ``settings``."""
    del monkeypatch  # (kept in the signature: the callers pass it)
    async with agent(conn, db, replies, escalation=settings) as (graph, _):
        yield graph


def step(*calls: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "content": "",
        "tool_calls": [
            {
                "name": "execute_decision",
                "args": {"decision_id": d, "webhook_url": u, "timeout_seconds": 5},
                "id": c,
            }
            for d, u, c in calls
        ],
    }


def served(thread: str) -> Any:
    return config(thread, langgraph_auth_user=OPERATOR)


async def test_every_client_answer_takes_effect_or_is_refused_by_name_never_asked_again(
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    results: list[tuple[str, str, str]] = []
    silent = 0
    async with open_connection(engine) as conn:
        for n, shape in enumerate(SHAPES):
            thread = f"t{n}"
            decisions = [await log_decision(conn, confidence=0.3) for _ in range(shape.calls)]
            calls = [(d, webhook.url, f"c{i}") for i, d in enumerate(decisions)]
            replies = [step(*calls), "done", "done"]
            async with governed(
                conn, tmp_path / "cp.sqlite", replies, shape.settings, monkeypatch
            ) as graph:
                await graph.ainvoke({"messages": [("user", "go")]}, served(thread))
                before = await graph.aget_state(served(thread))
                [asked] = before.interrupts
                value = asked.value
                # the request validates against LangChain's own TypedDicts, one review config
                # per action request
                if shape.settings.interrupt_mode == "per_call":
                    TypeAdapter(ToolApprovalRequest).validate_python(value)
                    assert value["type"] == "tool_approval" and asked.response_schema
                else:
                    TypeAdapter(HITLRequest).validate_python(value)
                    assert len(value["review_configs"]) == len(value["action_requests"])
                    assert len(value["action_requests"]) == shape.calls
                    for action, review in zip(
                        value["action_requests"], value["review_configs"], strict=True
                    ):
                        TypeAdapter(ActionRequest).validate_python(action)
                        TypeAdapter(ReviewConfig).validate_python(review)
                answer = shape.answer(value, webhook.url)
                executed_before = sum(len(engine.executions(d)) for d in decisions)
                try:
                    out = await graph.ainvoke(Command(resume=answer), served(thread))
                except ValidationError as exc:
                    after = await graph.aget_state(served(thread))
                    assert shape.effect == "refused", f"{shape.name}: {exc}"
                    assert shape.needle in str(exc), f"{shape.name}: {exc}"
                    # refused before it was saved: the same interrupt waits, unchanged, and
                    # nothing was executed or recorded
                    assert [i.id for i in after.interrupts] == [asked.id]
                    assert after.interrupts[0].value == value
                    assert after.values["operator_decisions"] == []
                    assert sum(len(engine.executions(d)) for d in decisions) == executed_before
                    results.append((shape.client, shape.name, f"refused: {shape.needle}"))
                    continue
                after = await graph.aget_state(served(thread))
                verdicts = "+".join(d["verdict"] for d in after.values["operator_decisions"])
                if not verdicts and after.interrupts:
                    silent += 1  # asked again with nothing said: the bug this guards against
                assert verdicts == shape.effect, (
                    f"{shape.name}: {verdicts} (expected {shape.effect})"
                )
                assert not after.interrupts, shape.name
                executed = sum(len(engine.executions(d)) for d in decisions)
                assert executed == (1 if shape.executes else 0), (shape.name, executed)
                for record in after.values["operator_decisions"]:
                    assert record["operator"] == "ana" and record["roles"] == ["operator"]
                    assert record["digest"].startswith("sha256:")
                    assert record["asked_at"] and record["decided_at"]
                    if record["verdict"] == "modified":
                        assert record["original_args"]["webhook_url"] == webhook.url
                        assert record["edited_args"] != {
                            k: v
                            for k, v in record["original_args"].items()
                            if k != "override_safety"
                        }
                        [execution] = engine.executions(record["decision_id"])
                        assert execution["override_safety"] is True  # the gate's flag only
                        assert execution["force"] is False
                        assert execution["webhook_url"] == record["edited_args"]["webhook_url"]
                    if record["verdict"] == "responded":
                        told = [
                            m
                            for m in out["messages"]
                            if getattr(m, "tool_call_id", None) == record["tool_call_id"]
                        ]
                        assert told and str(told[-1].content).startswith(record["reason"])
                results.append((shape.client, shape.name, verdicts))
    for client, name, effect in results:
        print(f"  {client:20} {name:70} -> {effect}")
    refused = sum(1 for *_, e in results if e.startswith("refused"))
    figure(
        "operator_client_answers",
        shapes=len(results),
        took_effect=len(results) - refused,
        refused_by_name=refused,
        silent_reasks=silent,
    )
    assert len(results) == len(SHAPES) >= 20 and silent == 0
    # LangChain's shapes are LangChain's own decisions (its TypedDicts)
    for shape in SHAPES:
        if shape.client == "langchain" and shape.effect != "refused":
            given = shape.answer({"escalations": [{"digest": "d"}], "args": {}}, "u")
            for decision in given["decisions"]:
                TypeAdapter(Decision).validate_python(decision)


async def test_mark_as_resolved_never_disposes_of_an_escalation(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """Agent Chat UI's "mark as resolved" (``command: {goto: END}``) and Agent Inbox's
    (``updateState(values=None, as_node=END)``) on the library graph: the escalation is still
    pending, asked again on the next turn, and answered once."""
    async with open_connection(engine) as conn:
        decision = await log_decision(conn, confidence=0.3)
        replies = [step((decision, webhook.url, "c1")), "done", "done"]
        async with agent(conn, tmp_path / "cp.sqlite", replies) as (graph, _):
            await graph.ainvoke({"messages": [("user", "go")]}, served("t"))
            [asked] = (await graph.aget_state(served("t"))).interrupts
            await graph.ainvoke(Command(goto=END), served("t"))  # Chat UI's handleResolve
            state = await graph.aget_state(served("t"))
            assert [i.id for i in state.interrupts] == [asked.id]
            assert state.values["operator_decisions"] == []
            await graph.aupdate_state(served("t"), None, as_node=END)  # Agent Inbox's
            state = await graph.aget_state(served("t"))
            assert state.values["operator_decisions"] == []
            # the next turn meets the escalation again (invariant 12) ...
            await graph.ainvoke({"messages": [("user", "and now?")]}, served("t"))
            state = await graph.aget_state(served("t"))
            [again] = state.interrupts
            assert again.value["escalation_id"] == asked.value["escalation_id"]
            assert again.value["digest"] == asked.value["digest"]
            # ... and only an answer disposes of it
            out = await graph.ainvoke(
                Command(resume={"decisions": [{"type": "reject"}]}), served("t")
            )
    assert [d["verdict"] for d in out["operator_decisions"]] == ["declined"]
    assert engine.executions(decision) == []
