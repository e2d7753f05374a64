"""Printing a governed graph's stream in a terminal: one readable line or a few per event.

- :func:`print_update`: one ``stream_mode="updates"`` item (used by the demo, the notebooks
  and ``algenta-graph run``);
- :class:`StreamPrinter`: ``stream_mode=["updates", "messages"]`` items, printing the model's
  answer as it streams and everything else per update, each text once.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Mapping
from typing import Any, TextIO

__all__ = ["MODEL_NODE", "StreamPrinter", "describe_escalation", "print_update", "short"]

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


def describe_escalation(value: Any) -> str:
    """One line saying what an escalation interrupt asks the operator to decide."""
    if isinstance(value, Mapping) and "gate" in value:
        items = value.get("escalations")
        if isinstance(items, list) and len(items) > 1:  # one request for several denials
            listed = "; ".join(
                f"decision {i.get('decision_id')}: {i.get('message')}"
                for i in items
                if isinstance(i, Mapping)
            )
            text = (
                f"the {value.get('gate')} gate denied {len(items)} decisions ({listed}); an "
                f"override would set {value.get('override_flag')}=true on each"
            )
        else:
            text = (
                f"the {value.get('gate')} gate denied decision {value.get('decision_id')}: "
                f"{value.get('message')}; an override would set {value.get('override_flag')}=true"
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


def print_update(
    node: str, update: Any, out: TextIO | None = None, *, streamed: Collection[str] = ()
) -> None:
    """Print one ``stream_mode="updates"`` item readably (one or a few lines per event).

    The text of an AI message whose id is in ``streamed`` is not printed again (its tool
    calls still are): :class:`StreamPrinter` printed it as it streamed.
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
        print(
            f"  [denial] {denial.get('gate')} gate blocked decision {denial.get('decision_id')}:"
            f" {short(denial.get('message'), 160)}",
            file=out,
        )
    for decision in update.get("operator_decisions", []) or []:
        print(
            f"  [operator] {decision.get('operator')} chose {decision.get('action')} on the "
            f"{decision.get('gate')} gate ({decision.get('reason')}): {decision.get('result')}",
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

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
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
                print_update(node, update, self.out, streamed=self.streamed)
            self.out.flush()

    def close(self) -> None:
        """End a line left open by a streamed message."""
        self._end_line()
        self.out.flush()

    def _end_line(self) -> None:
        if self._open is not None:
            self.out.write("\n")
            self._open = None
