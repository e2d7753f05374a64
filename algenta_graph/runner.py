"""The ``demo``, ``run`` and ``receipts`` subcommands of ``algenta-graph``.

- ``algenta-graph demo``: the offline walkthrough (reference engine, webhook receiver, SQLite
  checkpoints, the offline demo model); see :mod:`algenta_graph.demo`.
- ``algenta-graph run "PROMPT" --profile execute --thread t1 --db runs.sqlite``: one turn
  against a real engine; on an escalation it asks the operator in the terminal (override or
  decline, name, reason), or takes ``--resume '{"action": ..., "operator": ..., "reason": ...}'``.
- ``algenta-graph receipts --db runs.sqlite [--thread t1] [--jsonl]``: every receipt, denial
  and operator decision recorded in a checkpoint file (read-only; no engine needed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "add_demo_parser",
    "add_receipts_parser",
    "add_run_parser",
    "format_records",
    "print_update",
    "read_records",
]

_RECORD_KINDS = ("receipts", "denials", "operator_decisions")
_WIDTH = 100


# ---------------------------------------------------------------------- printing


def _short(text: Any, limit: int = 240) -> str:
    body = text if isinstance(text, str) else json.dumps(text, default=str)
    body = " ".join(body.split())
    return body if len(body) <= limit else body[: limit - 3] + "..."


def _content(message: Any) -> str:
    content = getattr(message, "content", message)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content)
    return str(content)


def print_update(node: str, update: Any, out: TextIO = sys.stdout) -> None:
    """Print one ``stream_mode="updates"`` item readably (one or a few lines per event)."""
    if node == "__interrupt__":
        for item in update or ():
            value = getattr(item, "value", item)
            if isinstance(value, Mapping) and "gate" in value:
                print(
                    f"  [escalation] the {value.get('gate')} gate denied decision "
                    f"{value.get('decision_id')}: {value.get('message')}; an override would set "
                    f"{value.get('override_flag')}=true. Waiting for an operator"
                    + (
                        f" (previous answer rejected: {value['error']})"
                        if value.get("error")
                        else ""
                    )
                    + ".",
                    file=out,
                )
            else:
                print(f"  [escalation] {_short(value, 400)}", file=out)
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
                print(f"  [model] calls {call['name']}({_short(call['args'], 300)})", file=out)
            if _content(message).strip():
                for line in _content(message).strip().splitlines():
                    print(f"  [model] {line}", file=out)
        elif kind == "tool":
            status = " ERROR" if getattr(message, "status", "") == "error" else ""
            text = _content(message).strip()
            if node.startswith("denial_handler"):
                text = text.splitlines()[0] if text else text  # the operator's outcome
            print(f"  [{node}] {message.name}{status}: {_short(text)}", file=out)
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
            f" {_short(denial.get('message'), 160)}",
            file=out,
        )
    for decision in update.get("operator_decisions", []) or []:
        print(
            f"  [operator] {decision.get('operator')} chose {decision.get('action')} on the "
            f"{decision.get('gate')} gate ({decision.get('reason')}): {decision.get('result')}",
            file=out,
        )


# ---------------------------------------------------------------------- reading checkpoints


def read_records(db: str | Path, thread: str | None = None) -> dict[str, dict[str, list[Any]]]:
    """Every thread's receipts, denials and operator decisions, read from a SQLite checkpoint file.

    Returns ``{thread_id: {"receipts": [...], "denials": [...], "operator_decisions": [...]}}``
    from each thread's latest checkpoint. Raises ``FileNotFoundError`` when ``db`` does not
    exist (it is never created here) and ``ValueError`` when it is not a checkpoint file.
    """
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = Path(db)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    try:
        tables = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
        if "checkpoints" not in tables:
            raise ValueError(f"{path} is not a LangGraph SQLite checkpoint file")
        saver = SqliteSaver(conn)
        config = {"configurable": {"thread_id": thread}} if thread else None
        latest: dict[str, dict[str, list[Any]]] = {}
        for item in saver.list(config):  # type: ignore[arg-type]
            conf = item.config["configurable"]
            tid = str(conf["thread_id"])
            if conf.get("checkpoint_ns") or tid in latest:
                continue  # newest first: the first one seen per thread is its latest
            values = item.checkpoint["channel_values"]
            latest[tid] = {k: list(values.get(k) or []) for k in _RECORD_KINDS}
        return dict(sorted(latest.items()))
    finally:
        conn.close()


def format_records(records: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]]) -> str:
    """A plain-text table of receipts, then denials, then operator decisions, per thread."""
    rows: list[tuple[str, ...]] = []
    for tid, kinds in records.items():
        for r in kinds.get("receipts", []):
            rows.append(
                (
                    tid,
                    "receipt",
                    str(r.get("decision_id")),
                    f"{r.get('execution_status')} HTTP {r.get('response_code')}",
                    f"overridden={r.get('safety_overridden')} source={r.get('source')}",
                )
            )
        for d in kinds.get("denials", []):
            rows.append(
                (
                    tid,
                    "denial",
                    str(d.get("decision_id")),
                    f"gate={d.get('gate')}",
                    _short(d.get("message"), 60),
                )
            )
        for o in kinds.get("operator_decisions", []):
            rows.append(
                (
                    tid,
                    "operator",
                    str(o.get("decision_id")),
                    f"{o.get('action')} {o.get('gate')} -> {o.get('result')}",
                    f"by {o.get('operator')}: {_short(o.get('reason'), 40)}",
                )
            )
    header = ("thread", "record", "decision_id", "outcome", "detail")
    if not rows:
        return "(no receipts, denials or operator decisions)"
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(out)


# ---------------------------------------------------------------------- run


def _parse_resume(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--resume is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SystemExit("--resume must be a JSON object: {action, operator, reason}")
    return value


def _ask_operator(payload: Mapping[str, Any], read: Callable[[str], str]) -> dict[str, Any]:
    print(
        f"\nESCALATION: the {payload.get('gate')} gate denied decision {payload.get('decision_id')}"
        f"\n  {payload.get('message')}\n  an override would set {payload.get('override_flag')}=true"
    )
    if payload.get("error"):
        print(f"  (previous answer rejected: {payload['error']})")
    action = read("override or decline? ").strip().lower()
    operator = read("operator name: ").strip()
    reason = read("reason: ").strip()
    return {"action": action, "operator": operator, "reason": reason}


async def _run(args: argparse.Namespace) -> int:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.types import Command

    from algenta_graph.graph import governed_agent

    on_denial = json.loads(args.on_denial) if args.on_denial else None
    resume = _parse_resume(args.resume) if args.resume else None
    config: RunnableConfig = {"configurable": {"thread_id": args.thread}}
    async with (
        AsyncSqliteSaver.from_conn_string(args.db) as saver,
        governed_agent(
            args.model,
            base_url=args.base_url,
            api_key=args.api_key,
            profile=args.profile,
            top_k=args.top_k,
            on_denial=on_denial,
            checkpointer=saver,
        ) as graph,
    ):
        payload: Any = {"messages": [("user", args.prompt)]} if args.prompt else None
        snapshot = await graph.aget_state(config)
        if snapshot.interrupts and args.prompt:
            print("this thread is waiting for an operator decision; answering it first")
            payload = None
        while True:
            if payload is None and snapshot.interrupts:
                value = snapshot.interrupts[0].value
                if resume is not None:
                    answer, resume = resume, None
                elif sys.stdin.isatty() or args.interactive:
                    answer = await asyncio.to_thread(_ask_operator, value, input)
                else:
                    print(json.dumps({"pending_escalation": value}, default=str))
                    print("no terminal: answer with --resume JSON", file=sys.stderr)
                    return 3
                payload = Command(resume=answer)
            elif payload is None:
                break
            async for chunk in graph.astream(payload, config, stream_mode="updates"):
                for node, update in chunk.items():
                    print_update(node, update)
            payload = None
            snapshot = await graph.aget_state(config)
            if not snapshot.interrupts:
                break
        values = snapshot.values
        print(
            f"\nthread {args.thread}: {len(values.get('receipts', []))} receipts, "
            f"{len(values.get('denials', []))} denials, "
            f"{len(values.get('operator_decisions', []))} operator decisions (in {args.db})"
        )
    return 0


def _run_handler(args: argparse.Namespace) -> int:
    from algenta_graph.errors import AlgentaGraphError

    try:
        return asyncio.run(_run(args))
    except AlgentaGraphError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def add_run_parser(sub: Any) -> None:
    """``algenta-graph run PROMPT``."""
    p = sub.add_parser(
        "run",
        help="run one turn of the governed agent against an engine",
        description="Run one turn against an engine; escalations ask the operator.",
    )
    p.add_argument("prompt", nargs="?", default=None, help="the user message (omit to resume)")
    p.add_argument("--profile", default="observe", help="tool profile (default: observe)")
    p.add_argument("--thread", default="cli", help="thread id (default: cli)")
    p.add_argument("--db", default="algenta-graph.sqlite", help="SQLite checkpoint file")
    p.add_argument("--base-url", default=None, help="engine MCP URL (default: ALGENTA_BASE_URL)")
    p.add_argument("--api-key", default=None, help="engine token (default: ALGENTA_API_KEY)")
    p.add_argument("--model", default=None, help="init_chat_model string (default: demo model)")
    p.add_argument("--top-k", type=int, default=5, help="tools retrieved per turn (default: 5)")
    p.add_argument("--on-denial", default=None, help='JSON, e.g. {"confidence": "report"}')
    p.add_argument("--resume", default=None, help="answer a pending escalation with this JSON")
    p.add_argument(
        "--interactive", action="store_true", help="ask the operator even without a terminal"
    )
    p.set_defaults(handler=_run_handler)


# ---------------------------------------------------------------------- receipts


def _receipts_handler(args: argparse.Namespace) -> int:
    try:
        records = read_records(args.db, args.thread)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.thread and args.thread not in records:
        print(f"error: no thread {args.thread!r} in {args.db}", file=sys.stderr)
        return 2
    if args.jsonl:
        for tid, kinds in records.items():
            for kind in _RECORD_KINDS:
                for record in kinds[kind]:
                    print(json.dumps({"thread_id": tid, "record": kind[:-1], **record}))
    else:
        print(format_records(records))
    return 0


def add_receipts_parser(sub: Any) -> None:
    """``algenta-graph receipts --db PATH``."""
    p = sub.add_parser(
        "receipts",
        help="list receipts, denials and operator decisions in a checkpoint file",
        description="Every receipt, denial and operator decision in a SQLite checkpoint file.",
    )
    p.add_argument("--db", required=True, help="SQLite checkpoint file")
    p.add_argument("--thread", default=None, help="only this thread")
    p.add_argument("--jsonl", action="store_true", help="one JSON object per line")
    p.set_defaults(handler=_receipts_handler)


# ---------------------------------------------------------------------- demo


def _demo_handler(args: argparse.Namespace) -> int:
    from algenta_graph.demo import run_demo
    from algenta_graph.errors import AlgentaGraphError

    try:
        return asyncio.run(
            run_demo(model=args.model, db=args.db, keep=args.keep, webhook_log=args.webhook_log)
        )
    except (AlgentaGraphError, ImportError, ValueError) as exc:  # e.g. an unusable --model
        print(f"error: {exc}", file=sys.stderr)
        return 2


def add_demo_parser(sub: Any) -> None:
    """``algenta-graph demo``."""
    p = sub.add_parser(
        "demo",
        help="offline walkthrough: reference engine, webhook receiver, the governed graph",
        description=(
            "Start a reference engine and a webhook receiver in-process and walk through "
            "observe, plan, log, execute, a repeated execution, a low-confidence decision "
            "(escalation, operator override) and a risky one (declined). Offline, no API key."
        ),
    )
    p.add_argument(
        "--model", default=None, help="init_chat_model string (default: the offline demo model)"
    )
    p.add_argument("--db", default=None, help="checkpoint file (default: a temporary file)")
    p.add_argument("--keep", action="store_true", help="keep the temporary checkpoint file")
    p.add_argument("--webhook-log", default=None, help="append every webhook POST to this JSONL")
    p.set_defaults(handler=_demo_handler)
