"""``algenta-graph run``: one turn of the governed graph against an engine, in a terminal.

``algenta-graph run "PROMPT" --profile execute --thread t1 --db runs.sqlite`` sends one turn,
with the configuration ``--config`` (default ``$ALGENTA_CONFIG``) names, as the served graph
does; an option given here wins over the file. On an escalation it asks the operator in the
terminal (override or decline, name, reason), or takes ``--resume JSON``: any answer the graph
accepts (:mod:`algenta_graph.cli.answering`). Without a prompt it resumes the thread: a pending
escalation, or a step a killed run left unfinished (finished first). ``--json`` prints every
event as a line of JSON with each tool result whole (``--full``: the same, readable), so a
script can read a plan's ``plan_id`` and drive the strict flow from the command line alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sqlite3
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

from algenta_graph.cli.answering import answer_arg, named_operator, os_user, refusal
from algenta_graph.cli.common import (
    DEFAULT_DB,
    EXIT_FAILED,
    EXIT_PENDING,
    EXIT_USAGE,
    db_arg,
    db_error,
    model_arg,
    new_store,
    on_denial_arg,
    one_line,
    positive_int,
    postgres_failure,
    store_lost,
    utf8_arg,
)
from algenta_graph.errors import CommandError

if TYPE_CHECKING:
    from algenta_graph.console import JsonPrinter, StreamPrinter

__all__ = ["add_run_parser", "ask_operator", "run_thread"]


def _read_line(prompt: str, out: TextIO) -> str:
    """One line from stdin, after writing ``prompt`` to ``out``.

    Ctrl-C raises ``KeyboardInterrupt`` at once; EOF and bad UTF-8 are :class:`CommandError`.
    Must run in the main thread (it owns SIGINT meanwhile).
    """
    out.write(prompt)
    out.flush()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        raw = sys.stdin.buffer.readline()
    finally:
        signal.signal(signal.SIGINT, previous)
    if not raw:
        raise CommandError(
            "stdin ended at the operator prompt: nothing was decided, the escalation is still "
            "pending (answer it with --resume JSON)",
            EXIT_PENDING,
        )
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise CommandError(
            f"the operator's answer is not valid UTF-8: {raw[:60]!r}; nothing was decided, "
            "the escalation is still pending",
            EXIT_USAGE,
        ) from None


def ask_operator(
    payload: Any, read: Callable[[str], str], out: TextIO | None = None
) -> dict[str, Any]:
    """Show one escalation and read the operator's answer: action, name, reason.

    An empty name records the OS user running the command (the one identity a terminal knows).

    Args:
        payload: the escalation (the interrupt's value).
        read: reads one answer after showing its prompt.
        out: where the escalation is shown (default: stdout).

    Returns:
        The resume value: ``{"action", "operator", "reason"}``.
    """
    from algenta_graph.console import describe_escalation

    out = out or sys.stdout
    print(f"\nESCALATION: {describe_escalation(payload)}", file=out)
    action = read("override or decline? ").strip().lower()
    me = os_user()
    operator = read(f"operator name [{me}]: " if me else "operator name: ").strip() or me
    reason = read("reason: ").strip()
    return {"action": action, "operator": operator, "reason": reason}


def _counts(values: Mapping[str, Any]) -> dict[str, int]:
    from algenta_graph.state import RECORD_FIELDS

    return {kind: len(values.get(kind) or []) for kind in RECORD_FIELDS}


async def run_thread(
    graph: Any,
    thread: str,
    *,
    prompt: str | None,
    resume: Any | None,
    interactive: bool,
    out: TextIO | None = None,
    read: Callable[[str], str] | None = None,
    printer: StreamPrinter | JsonPrinter | None = None,
) -> int:
    """Drive one thread of a compiled governed graph until it ends or waits for an operator.

    In order: a pending escalation is answered (``resume``, any answer the graph accepts,
    named for the OS user when it names no operator; else the operator at the terminal), a
    step a killed run left unfinished is completed (``ainvoke(None)``), and then ``prompt`` is
    sent. ``printer`` shows the stream (default a :class:`~algenta_graph.console.StreamPrinter`
    on ``out``; a :class:`~algenta_graph.console.JsonPrinter` asks the operator on stderr).
    Returns an exit code.
    """
    from langgraph.types import Command
    from pydantic import ValidationError

    from algenta_graph.console import JsonPrinter, StreamPrinter

    out = out or sys.stdout
    printer = printer or StreamPrinter(out)
    ask_out = sys.stderr if isinstance(printer, JsonPrinter) else out
    config: Any = {"configurable": {"thread_id": thread}}
    snapshot = await graph.aget_state(config)
    if resume is not None and not snapshot.interrupts:
        raise CommandError(f"--resume: thread {thread!r} has no pending escalation to answer")
    if prompt is None and not snapshot.created_at:
        raise CommandError(f"no thread {thread!r} to resume: give a PROMPT to start it")
    if prompt is None and not snapshot.next:
        printer.note(f"thread {thread}: nothing pending (no escalation, no unfinished step)")
    start = _counts(snapshot.values)
    resumed_from_option = False
    while True:
        payload: Any
        if snapshot.interrupts and resumed_from_option:
            errors = [
                i.value["error"]
                for i in snapshot.interrupts
                if isinstance(i.value, Mapping) and i.value.get("error")
            ]
            if errors:
                raise CommandError(f"--resume: the answer was rejected: {one_line(errors[0])}")
        if snapshot.interrupts:
            resumed_from_option = resume is not None
            if resume is not None:
                user = os_user()
                answer, named = named_operator(resume, user)
                if named:
                    printer.note(
                        f"  (the answer names no operator: recorded as {user}, the OS user "
                        'running this command; add "operator": NAME to name another)'
                    )
                answers = [answer for _ in snapshot.interrupts]
                resume = None
            elif interactive:
                answers = [
                    ask_operator(i.value, read or (lambda p: _read_line(p, ask_out)), ask_out)
                    for i in snapshot.interrupts
                ]
            else:
                for item in snapshot.interrupts:
                    if isinstance(printer, JsonPrinter):
                        printer.emit({"event": "pending_escalation", "value": item.value})
                    else:
                        print(json.dumps({"pending_escalation": item.value}, default=str), file=out)
                raise CommandError(
                    f"thread {thread!r} waits for an operator and there is no terminal: answer "
                    "with --resume JSON or --interactive",
                    EXIT_PENDING,
                )
            if len(answers) == 1:
                payload = Command(resume=answers[0])
            else:
                payload = Command(
                    resume={i.id: a for i, a in zip(snapshot.interrupts, answers, strict=True)}
                )
            if prompt is not None:
                printer.note("  (the thread waits for an operator: answering that first)")
        elif snapshot.next:
            printer.note(
                f"  [resume] thread {thread} stopped before {', '.join(snapshot.next)} "
                "(a run was interrupted): finishing that step first"
            )
            payload, resumed_from_option = None, False
        elif prompt is not None:
            payload = {"messages": [("user", prompt)]}
            prompt, resumed_from_option = None, False
        else:
            break
        before = snapshot.config
        try:
            async for mode, item in graph.astream(
                payload, config, stream_mode=["updates", "messages"]
            ):
                printer.feed(mode, item)
        except ValidationError as exc:
            # the answer was refused before it was saved (the interrupt's response_schema):
            # nothing was done, the escalation still waits
            printer.close()
            why = refusal(exc)
            if not isinstance(payload, Command) or not interactive or resumed_from_option:
                raise CommandError(
                    f"--resume: the answer was refused: {why}; nothing was done"
                ) from None
            printer.note(f"  (answer refused: {why}; nothing was done)")
            snapshot = await graph.aget_state(config)
            continue
        printer.close()
        snapshot = await graph.aget_state(config)
        if payload is None and snapshot.config == before:  # never loop on a stuck step
            raise CommandError(
                f"thread {thread!r} did not advance past {', '.join(snapshot.next)}", EXIT_FAILED
            )
    end = _counts(snapshot.values)
    recovered = [
        r
        for r in list(snapshot.values.get("receipts") or [])[start["receipts"] :]
        if r.get("source") == "recovered"
    ]
    if isinstance(printer, JsonPrinter):
        printer.emit(
            {
                "event": "summary",
                "thread": thread,
                "records": end,
                "new": {k: end[k] - start[k] for k in end},
                "recovered": [r.get("decision_id") for r in recovered],
            }
        )
        return 0
    new = ", ".join(f"{end[k] - start[k]} new {k.replace('_', ' ')}" for k in end)
    if recovered:
        ids = ", ".join(str(r.get("decision_id")) for r in recovered)
        new += f"; recovered from the engine: the receipt of {ids}"
    printer.note(
        f"\nthread {thread}: {end['receipts']} receipts, {end['denials']} denials, "
        f"{end['operator_decisions']} operator decisions ({new})"
    )
    return 0


def _load_config(path: str | None) -> Any:
    """The configuration ``--config`` (default ``$ALGENTA_CONFIG``) names; a bad one is exit 2."""
    from algenta_graph.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        raise CommandError("; ".join(str(p) for p in exc.problems), EXIT_USAGE) from None


def _url_hint(exc: BaseException) -> str:
    """A hint for an engine URL without the ``/mcp`` path an MCP endpoint is served at."""
    url = str(getattr(exc, "url", "") or "")
    parts = urlsplit(url)
    if not parts.scheme.startswith("http") or parts.path.rstrip("/").endswith("/mcp"):
        return ""
    suggested = parts._replace(path=parts.path.rstrip("/") + "/mcp").geturl()
    if suggested in str(exc):
        return ""
    return (
        f" Hint: {url} has no /mcp path, where the reference engine and Algenta serve MCP: "
        f"try {suggested}"
    )


async def _run(args: argparse.Namespace) -> int:
    from algenta_graph.config.names import NO_ENGINE_WORDS
    from algenta_graph.console import JsonPrinter, StreamPrinter
    from algenta_graph.errors import (
        AlgentaGraphError,
        ConfigError,
        EngineConnectionError,
        NoToolServers,
    )
    from algenta_graph.graph import governed_agent
    from algenta_graph.serving.checkpointer import open_checkpointer

    prompt = utf8_arg(args.prompt, "the PROMPT") if args.prompt is not None else None
    thread = utf8_arg(args.thread, "--thread")
    if not thread.strip():
        raise CommandError("--thread must not be blank")
    on_denial = on_denial_arg(args.on_denial) if args.on_denial is not None else None
    model = model_arg(args.model) if args.model is not None else None  # before connecting
    config = _load_config(args.config)
    printer: StreamPrinter | JsonPrinter = (
        JsonPrinter() if args.json else StreamPrinter(full=args.full)
    )
    if config.file is not None:
        printer.note(f"(configuration: {config.file})")
    engine: dict[str, str | None] = {}  # --base-url not given: the configuration's engine
    if args.base_url is not None:
        no_url = args.base_url.strip().lower() in NO_ENGINE_WORDS
        engine["base_url"] = None if no_url else args.base_url
    if (engine["base_url"] is None) if engine else (config.base_url is False):
        printer.note("(no engine: the engine's gates are off; the graph's own gates apply)")
    try:
        with new_store(args.db) as db:
            async with (
                open_checkpointer(db) as saver,
                governed_agent(
                    model,
                    config=config,
                    **engine,
                    api_key=args.api_key,
                    profile=args.profile,
                    top_k=args.top_k,
                    on_denial=on_denial,
                    checkpointer=saver,
                ) as graph,
            ):
                code = await run_thread(
                    graph,
                    thread,
                    prompt=prompt,
                    resume=args.resume,
                    interactive=args.interactive or bool(sys.stdin and sys.stdin.isatty()),
                    printer=printer,
                )
                printer.note(f"(checkpoints in {db})")
                return code
    except sqlite3.DatabaseError as exc:
        raise db_error(args.db, exc) from None
    except CommandError:
        raise  # already one line with its own exit code
    except ConfigError as exc:  # a secret missing, an import path that does not import
        raise CommandError("; ".join(str(p) for p in exc.problems), EXIT_USAGE) from None
    except NoToolServers as exc:  # neither an engine nor an extra server: nothing was opened
        raise CommandError(one_line(exc), EXIT_USAGE) from None
    except EngineConnectionError as exc:
        raise CommandError(one_line(exc) + _url_hint(exc), EXIT_FAILED) from None
    except AlgentaGraphError as exc:
        raise CommandError(one_line(exc), EXIT_FAILED) from None
    except Exception as exc:
        lost = postgres_failure(exc)
        if lost is None:
            raise
        raise store_lost(args.db, thread, lost) from None


def _run_handler(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        raise CommandError(
            f"interrupted; `algenta-graph run --thread {args.thread} --db {args.db}` resumes "
            "the thread",
            130,
        ) from None


def add_run_parser(sub: Any) -> None:
    """``algenta-graph run [PROMPT]``."""
    from algenta_graph.config import DEFAULT_TOP_K, ENV_CONFIG
    from algenta_graph.governance.contract import DEFAULT_PROFILE, PROFILE_NAMES
    from algenta_graph.governance.gates import DEFAULT_POLICIES, GATE_NAMES, POLICIES

    configured = "the configuration's, else"
    p = sub.add_parser(
        "run",
        help="run one turn of the governed agent against an engine, or resume a thread",
        description=(
            "Run one turn against an engine; an escalation asks the operator. Without PROMPT, "
            "resume the thread: answer its pending escalation or finish the step a killed run "
            "left unfinished. With PROMPT on such a thread, that comes first. The options "
            f"below win over the configuration file (--config, default ${ENV_CONFIG})."
        ),
    )
    p.add_argument(
        "prompt", nargs="?", default=None, help="the user message (omit to resume the thread)"
    )
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help=f"the configuration file, .toml or .json, as the served graph reads it: extra "
        f"servers, gates on any tool, escalation settings, ... (default: ${ENV_CONFIG}, else "
        "none); the ALGENTA_* variables win over it",
    )
    p.add_argument(
        "--profile",
        default=None,
        choices=PROFILE_NAMES,
        help=f"tool profile: {', '.join(PROFILE_NAMES)} (default: {configured} {DEFAULT_PROFILE})",
    )
    p.add_argument("--thread", default="cli", help="thread id (default: cli)")
    p.add_argument(
        "--db",
        default=DEFAULT_DB,
        type=db_arg,
        help=f"SQLite checkpoint file, its directory created if missing (default: {DEFAULT_DB}"
        " in the working directory; removed again when the run fails before writing a "
        "thread), or a postgresql:// URL",
    )
    p.add_argument(
        "--base-url",
        default=None,
        help="engine MCP URL, ending in /mcp for the reference engine, or `none`: no engine, "
        "the configuration's extra servers with the graph's own gates (default: "
        f"$ALGENTA_BASE_URL, else {configured} http://localhost:8000/mcp)",
    )
    p.add_argument(
        "--api-key",
        default=None,
        help="engine token (default: $ALGENTA_API_KEY, else the configuration's)",
    )
    p.add_argument(
        "--model",
        default=None,
        help=f"init_chat_model string, e.g. openai:gpt-5 (default: {configured} the offline "
        "demo model)",
    )
    p.add_argument(
        "--top-k",
        type=positive_int,
        default=None,
        help=f"tools retrieved per turn, >= 1 (default: {configured} {DEFAULT_TOP_K})",
    )
    p.add_argument(
        "--on-denial",
        default=None,
        metavar="POLICY|JSON",
        help=(
            f"a policy ({'|'.join(POLICIES)}) for every gate, or JSON {{gate: policy}}, e.g. "
            f'\'{{"confidence": "report"}}\'; gates: {", ".join(GATE_NAMES)} '
            f"(default: {configured} {', '.join(f'{g} {p}' for g, p in DEFAULT_POLICIES.items())})"
        ),
    )
    p.add_argument(
        "--resume",
        type=answer_arg,
        default=None,
        metavar="JSON",
        help='answer the pending escalation with any answer the graph accepts: {"decisions": '
        '[{"type": "approve"|"edit"|"reject"|"respond", "message": TEXT}]}, one decision '
        '{"type": ...} (per_call), {"action": "override"|"decline", "reason": TEXT} or Agent '
        'Inbox\'s list; "operator": NAME (default: the OS user running the command)',
    )
    p.add_argument(
        "--interactive",
        action="store_true",
        help="ask the operator on stdin even when it is not a terminal",
    )
    shown = p.add_mutually_exclusive_group()
    shown.add_argument(
        "--json",
        action="store_true",
        help="print every event as one line of JSON (tool calls, each tool result whole, "
        "records, escalations, a summary); the operator prompt goes to stderr",
    )
    shown.add_argument(
        "--full",
        action="store_true",
        help="print each tool result whole (default: shortened to one line)",
    )
    p.set_defaults(handler=_run_handler)
