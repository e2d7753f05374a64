"""Printing a governed graph's stream in a terminal: one readable line or a few per event.

- :func:`print_update`: one ``stream_mode="updates"`` item (used by the demo, the notebooks
  and ``algenta-graph run``); a tool's result shortened to one line, or whole (``full=True``);
- :class:`StreamPrinter`: ``stream_mode=["updates", "messages"]`` items, printing the model's
  answer as it streams and everything else per update, each text once;
- :class:`JsonPrinter`: the same items as JSON Lines, one event a line, every tool result
  whole (``algenta-graph run --json``, for scripts).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Mapping
from typing import Any, TextIO

__all__ = [
    "MODEL_NODE",
    "JsonPrinter",
    "StreamPrinter",
    "describe_escalation",
    "print_update",
    "short",
    "update_events",
]

MODEL_NODE = "model"
"""The graph node whose messages are the model's answer."""


def short(value: Any, limit: int = 240) -> str:
    """``value`` as one line of at most ``limit`` characters (JSON for non-strings)."""
    body = value if isinstance(value, str) else json.dumps(value, default=str)
    body = " ".join(body.split())
    return body if len(body) <= limit else body[: limit - 3] + "..."


def content_text(message: Any) -> str:
    """The text of a message (or of a chunk), its content blocks joined."""
    content = getattr(message, "content", message)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p if isinstance(p, str) else str(p.get("text", ""))
            for p in content
            if isinstance(p, str) or (isinstance(p, Mapping) and p.get("type", "text") == "text")
        )
    return str(content)


def _held(item: Mapping[str, Any]) -> bool:
    """Whether a denial or an escalation is of a held tool call (a graph-side gate's)."""
    return item.get("decision_id") is None and bool(item.get("tool"))


def _subject(item: Mapping[str, Any]) -> str:
    """What a denial or an escalation is about: a decision, or a held tool call."""
    if _held(item):
        return f"the call of {item['tool']}({short(item.get('args') or {}, 160)})"
    return f"decision {item.get('decision_id')}"


def describe_escalation(value: Any) -> str:
    """One line saying what an escalation interrupt asks the operator to decide."""
    if isinstance(value, Mapping) and "gate" in value:
        items = value.get("escalations")
        held = _held(value)
        verb = "held" if held else "denied"
        if isinstance(items, list) and len(items) > 1:  # one request for several denials
            listed = "; ".join(
                f"{_subject(i)}: {i.get('message')}" for i in items if isinstance(i, Mapping)
            )
            what = "calls" if held else "decisions"
            text = f"the {value.get('gate')} gate {verb} {len(items)} {what} ({listed}); "
            text += (
                "an approval runs each once"
                if held
                else f"an override would set {value.get('override_flag')}=true on each"
            )
        else:
            text = (
                f"the {value.get('gate')} gate {verb} {_subject(value)}: {value.get('message')}; "
            )
            text += (
                "an approval runs it once"
                if held
                else f"an override would set {value.get('override_flag')}=true"
            )
        if value.get("error"):
            text += f" (previous answer rejected: {value['error']})"
        return text
    if isinstance(value, Mapping) and isinstance(value.get("action_requests"), list):
        parts = [
            short(r.get("description") or {"name": r.get("name"), "args": r.get("args")}, 300)
            for r in value["action_requests"]
            if isinstance(r, Mapping)
        ]
        return "; ".join(parts) or short(value, 400)
    return short(value, 400)


def tool_result(message: Any) -> Any:
    """A tool message's result: its structured content when it has one, else its text."""
    artifact = getattr(message, "artifact", None)
    if isinstance(artifact, Mapping) and artifact.get("structured_content") is not None:
        return artifact["structured_content"]
    return content_text(message)


def print_update(
    node: str,
    update: Any,
    out: TextIO | None = None,
    *,
    streamed: Collection[str] = (),
    full: bool = False,
) -> None:
    """Print one ``stream_mode="updates"`` item readably (one or a few lines per event).

    The text of an AI message whose id is in ``streamed`` is not printed again (its tool
    calls still are): :class:`StreamPrinter` printed it as it streamed. A tool's result is
    shortened to one line, or printed whole with ``full`` (its structured content as one line
    of JSON).
    """
    out = out or sys.stdout
    if node == "__interrupt__":
        for item in update or ():
            value = getattr(item, "value", item)
            print(
                f"  [escalation] {describe_escalation(value)}. Waiting for an operator.", file=out
            )
        return
    if not isinstance(update, Mapping):
        return
    if node == "retrieve_tools":
        print(
            f"  [retrieve_tools] selected: {', '.join(update.get('selected_tools', []))}", file=out
        )
    for message in update.get("messages", []) or []:
        kind = getattr(message, "type", "")
        if kind == "ai":
            for call in getattr(message, "tool_calls", []) or []:
                print(f"  [model] calls {call['name']}({short(call['args'], 300)})", file=out)
            text = content_text(message).strip()
            if text and getattr(message, "id", None) not in streamed:
                for line in text.splitlines():
                    print(f"  [model] {line}", file=out)
        elif kind == "tool":
            status = " ERROR" if getattr(message, "status", "") == "error" else ""
            if full:
                result = tool_result(message)
                text = result if isinstance(result, str) else json.dumps(result, default=str)
                print(f"  [{node}] {message.name}{status}: {text.strip()}", file=out)
                continue
            text = content_text(message).strip()
            if node.startswith("denial_handler"):
                text = text.splitlines()[0] if text else text  # the operator's outcome
            print(f"  [{node}] {message.name}{status}: {short(text)}", file=out)
    for receipt in update.get("receipts", []) or []:
        print(
            f"  [receipt] decision {receipt.get('decision_id')} {receipt.get('execution_status')}"
            f" (HTTP {receipt.get('response_code')}, safety_overridden="
            f"{receipt.get('safety_overridden')}, source={receipt.get('source')})",
            file=out,
        )
    for denial in update.get("denials", []) or []:
        verb = "held" if _held(denial) else "blocked"
        print(
            f"  [denial] {denial.get('gate')} gate {verb} {_subject(denial)}:"
            f" {short(denial.get('message'), 160)}",
            file=out,
        )
    for decision in update.get("operator_decisions", []) or []:
        why = f" ({decision['reason']})" if decision.get("reason") else ""
        print(
            f"  [operator] {decision.get('operator')} chose {decision.get('action')} on the "
            f"{decision.get('gate')} gate{why}: {decision.get('result')}",
            file=out,
        )


class StreamPrinter:
    """Print ``graph.astream(..., stream_mode=["updates", "messages"])`` items as they come.

    The model's text is written chunk by chunk as it streams (a model that does not stream
    arrives as one chunk); every other event is printed by :func:`print_update`, which skips
    the text already written::

        printer = StreamPrinter()
        async for mode, item in graph.astream(payload, cfg, stream_mode=["updates", "messages"]):
            printer.feed(mode, item)
        printer.close()
    """

    def __init__(self, out: TextIO | None = None, *, full: bool = False) -> None:
        self.out = out or sys.stdout
        self.full = full
        self.streamed: set[str] = set()
        self._open: str | None = None  # the id of the message whose line is being written

    def feed(self, mode: str, item: Any) -> None:
        """Print one ``(mode, item)`` pair of a multi-mode stream."""
        if mode == "messages":
            chunk, metadata = item
            if metadata.get("langgraph_node") != MODEL_NODE:
                return
            if getattr(chunk, "type", "") not in ("ai", "AIMessageChunk"):
                return
            text = content_text(chunk)
            if not text:
                return
            key = str(getattr(chunk, "id", None) or "")
            if self._open != key:
                self._end_line()
                self.out.write("  [model] ")
                self._open = key
            self.out.write(text.replace("\n", "\n  [model] "))
            self.out.flush()
            if key:
                self.streamed.add(key)
        elif mode == "updates" and isinstance(item, Mapping):
            self._end_line()
            for node, update in item.items():
                print_update(node, update, self.out, streamed=self.streamed, full=self.full)
            self.out.flush()

    def note(self, text: str) -> None:
        """Print a line of the command's own (not the graph's)."""
        self._end_line()
        print(text, file=self.out)

    def close(self) -> None:
        """End a line left open by a streamed message."""
        self._end_line()
        self.out.flush()

    def _end_line(self) -> None:
        if self._open is not None:
            self.out.write("\n")
            self._open = None


_RECORD_EVENTS = {
    "receipts": "receipt",
    "denials": "denial",
    "operator_decisions": "operator_decision",
    "tool_calls": "tool_call_record",
}
"""Each record field of the state and the event a new record of it is."""


def update_events(node: str, update: Any) -> list[dict[str, Any]]:
    """One ``stream_mode="updates"`` item as events: plain JSON-ready dicts, each whole.

    ``{"event": ...}`` is one of ``retrieved`` (``tools``), ``tool_call`` (``tool``, ``args``,
    ``id``), ``message`` (``text``), ``tool_result`` (``tool``, ``tool_call_id``, ``status``,
    ``result``: the structured content, else the text), ``escalation`` (``value``: the
    interrupt's), and one per new record: ``receipt``, ``denial``, ``operator_decision``,
    ``tool_call_record`` (``record``). Each names its ``node``.

    >>> update_events("retrieve_tools", {"selected_tools": ["get_contract"]})
    [{'event': 'retrieved', 'node': 'retrieve_tools', 'tools': ['get_contract']}]
    """
    if node == "__interrupt__":
        return [
            {"event": "escalation", "node": node, "value": getattr(item, "value", item)}
            for item in update or ()
        ]
    if not isinstance(update, Mapping):
        return []
    events: list[dict[str, Any]] = []
    if "selected_tools" in update:
        events.append(
            {"event": "retrieved", "node": node, "tools": list(update["selected_tools"] or [])}
        )
    for message in update.get("messages", []) or []:
        kind = getattr(message, "type", "")
        if kind == "ai":
            for call in getattr(message, "tool_calls", []) or []:
                events.append(
                    {
                        "event": "tool_call",
                        "node": node,
                        "tool": call["name"],
                        "args": call["args"],
                        "id": call.get("id"),
                    }
                )
            text = content_text(message).strip()
            if text:
                events.append({"event": "message", "node": node, "text": text})
        elif kind == "tool":
            events.append(
                {
                    "event": "tool_result",
                    "node": node,
                    "tool": message.name,
                    "tool_call_id": getattr(message, "tool_call_id", None),
                    "status": getattr(message, "status", None) or "success",
                    "result": tool_result(message),
                }
            )
    for field, event in _RECORD_EVENTS.items():
        for record in update.get(field, []) or []:
            events.append({"event": event, "node": node, "record": record})
    return events


class JsonPrinter:
    """Print ``graph.astream(..., stream_mode=["updates", "messages"])`` items as JSON Lines.

    One event a line (:func:`update_events`), every value whole, nothing else on ``out``: a
    script reads a tool's result (``plan_id``, ``decision_id``, ...) with ``jq`` or
    ``json.loads``. The model's streamed tokens are not events (its message is, once).
    """

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout

    def emit(self, event: Mapping[str, Any]) -> None:
        """Write one event as a line of JSON."""
        print(json.dumps(event, default=str, ensure_ascii=False), file=self.out)

    def feed(self, mode: str, item: Any) -> None:
        """Write the events of one ``(mode, item)`` pair of a multi-mode stream."""
        if mode != "updates" or not isinstance(item, Mapping):
            return
        for node, update in item.items():
            for event in update_events(node, update):
                self.emit(event)
        self.out.flush()

    def note(self, text: str) -> None:
        """Write a line of the command's own as a ``note`` event."""
        self.emit({"event": "note", "text": text})

    def close(self) -> None:
        """Flush what was written."""
        self.out.flush()
