"""The ``run``, ``receipts`` and ``demo`` subcommands of ``algenta-graph``.

- ``algenta-graph run "PROMPT" --profile execute --thread t1 --db runs.sqlite``: one turn
  against an engine. On an escalation it asks the operator in the terminal (override or
  decline, name, reason), or takes ``--resume '{"action": ..., "operator": ..., "reason": ...}'``.
  Without a prompt it resumes the thread: a pending escalation, or a step a killed run left
  unfinished.
- ``algenta-graph receipts --db runs.sqlite [--thread t1] [--jsonl | --verify]``: every
  receipt, denial and operator decision in a checkpoint file or a ``postgresql://`` store
  (read-only; no engine needed); ``--verify`` checks every checkpoint of each thread's history.
- ``algenta-graph demo``: the offline walkthrough (:mod:`algenta_graph.demo`).

A malformed ``postgresql://`` ``--db`` is refused by :func:`db_arg` before anything connects;
a PostgreSQL store lost in the middle of a command is one line naming it and how to resume.
Every bad input is a :class:`CommandError`: ``cli.main`` prints its one-line message and exits
with its code (:data:`EXIT_USAGE` for a bad value, :data:`EXIT_FAILED` when the engine fails,
:data:`EXIT_PENDING` when an escalation is left waiting, 130 on Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sqlite3
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "DEFAULT_DB",
    "EXIT_FAILED",
    "EXIT_PENDING",
    "EXIT_USAGE",
    "CommandError",
    "add_demo_parser",
    "add_receipts_parser",
    "add_run_parser",
    "db_arg",
    "prepare_db",
]

DEFAULT_DB = "algenta-graph.sqlite"
"""The checkpoint file ``run`` writes and ``receipts`` reads when ``--db`` is not given."""

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PENDING = 3


class CommandError(Exception):
    """A bad input or a failed command: one line for the user, and the exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def one_line(exc: BaseException, limit: int = 1000) -> str:
    """An exception's message on one line (its type when it has none)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------- argument values


def _on_denial(text: str | None) -> dict[str, str]:
    """``--on-denial``, through the one validator the library and the server use too."""
    from algenta_graph.governance.gates import parse_on_denial

    try:
        return dict(parse_on_denial(text, "--on-denial"))
    except ValueError as exc:
        message = str(exc)  # name the value when the message names none (a wrong type)
        raise CommandError(message if "'" in message else f"{message}: {text!r}") from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _utf8(text: str, what: str) -> str:
    """``text`` unchanged if it is valid UTF-8 (argv decodes bad bytes to surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape")[:60]
        raise CommandError(f"{what} is not valid UTF-8: {shown!r}") from None
    return text


def _resume_arg(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not valid JSON ({exc.msg} at character {exc.pos})"
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"{text!r} must be a JSON object: {{action, operator, reason}}"
        )
    return value


def prepare_db(spec: str, option: str = "--db") -> str:
    """A ``--db`` value ready for ``open_checkpointer``: a SQLite file's directory is created.

    (The engine creates its ``--db`` directory too.) A PostgreSQL URL is returned unchanged.
    Also used for the other files the CLI writes (``option`` names the option in errors).
    """
    from algenta_graph.checkpointer import is_postgres_url

    if is_postgres_url(spec):
        return spec
    path = Path(spec)
    if path.is_dir():
        raise CommandError(f"{option} {spec}: is a directory, not a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(
            f"{option} {spec}: cannot create the directory {path.parent} ({exc.strerror})"
        ) from None
    return spec


def _db_error(spec: str, exc: BaseException) -> CommandError:
    return CommandError(f"--db {spec} is not a usable SQLite checkpoint file ({one_line(exc)})")


def db_arg(text: str) -> str:
    """A ``--db`` value: a PostgreSQL URL must be well formed (checked before anything
    connects, so a malformed one is a usage error naming ``--db``); a path is kept as it is."""
    from algenta_graph.checkpointer import (
        CheckpointerURLError,
        check_postgres_url,
        is_postgres_url,
    )

    if is_postgres_url(text):
        try:
            check_postgres_url(text.strip())
        except CheckpointerURLError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _store_name(spec: str) -> str:
    """``spec`` as it may be shown: a PostgreSQL URL without its password."""
    from algenta_graph.checkpointer import is_postgres_url, redact_url

    return redact_url(spec.strip()) if is_postgres_url(spec) else spec


def _postgres_failure(exc: BaseException) -> BaseException | None:
    """The psycopg error (a lost, refused or timed-out PostgreSQL connection) that ``exc`` is,
    was raised from, or groups; ``None`` when there is none."""
    try:
        import psycopg
    except ImportError:  # pragma: no cover - no PostgreSQL extra: no PostgreSQL store either
        return None
    stack, seen = [exc], set()
    while stack:
        error = stack.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, psycopg.Error):
            return error
        stack += list(getattr(error, "exceptions", None) or ())  # an exception group
        if error.__cause__ is not None:
            stack.append(error.__cause__)
    return None


def _pg_reason(error: BaseException) -> str:
    """A psycopg error in a few words: its type and libpq's first line (the rest is hints)."""
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {one_line(Exception(first), 200)}"


def _store_lost(db: str, thread: str, error: BaseException) -> CommandError:
    where = _store_name(db)
    return CommandError(
        f"--db {where}: the PostgreSQL checkpoint store was lost during the run "
        f"({_pg_reason(error)}); every step checkpointed "
        f"before that is kept: once the server is back, `algenta-graph run --thread {thread} "
        f"--db {where}` finishes the thread (a decision the engine executed meanwhile is "
        "recovered from it, not sent again)",
        EXIT_FAILED,
    )


def _resolve_model(spec: str | None) -> Any:
    from algenta_graph.models import resolve_model

    try:
        return resolve_model(spec)
    except Exception as exc:  # unknown provider, missing package or API key, ...
        raise CommandError(f"--model {spec!r}: {one_line(exc)}") from None


# ---------------------------------------------------------------------- the operator prompt


def _read_line(prompt: str, out: TextIO) -> str:
    """One line from stdin. Ctrl-C raises ``KeyboardInterrupt`` at once; EOF and bad UTF-8
    are :class:`CommandError`. Must run in the main thread (it owns SIGINT meanwhile)."""
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
    """Show one escalation and read the operator's answer: action, name, reason. An empty
    name records the OS user running the command (the one identity a terminal knows)."""
    from algenta_graph.console import describe_escalation

    out = out or sys.stdout
    print(f"\nESCALATION: {describe_escalation(payload)}", file=out)
    action = read("override or decline? ").strip().lower()
    me = _os_user()
    operator = read(f"operator name [{me}]: " if me else "operator name: ").strip() or me
    reason = read("reason: ").strip()
    return {"action": action, "operator": operator, "reason": reason}


def _os_user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (e.g. a bare container)
        return ""


# ---------------------------------------------------------------------- run


def _counts(values: Mapping[str, Any]) -> dict[str, int]:
    from algenta_graph.audit import RECORD_KINDS

    return {kind: len(values.get(kind) or []) for kind in RECORD_KINDS}


async def run_thread(
    graph: Any,
    thread: str,
    *,
    prompt: str | None,
    resume: Mapping[str, Any] | None,
    interactive: bool,
    out: TextIO | None = None,
    read: Callable[[str], str] | None = None,
) -> int:
    """Drive one thread of a compiled governed graph until it ends or waits for an operator.

    In order: a pending escalation is answered (``resume``, else the operator at the
    terminal), a step a killed run left unfinished is completed (``ainvoke(None)``), and then
    ``prompt`` is sent. Returns an exit code.
    """
    from langgraph.types import Command

    from algenta_graph.console import StreamPrinter

    out = out or sys.stdout
    config: Any = {"configurable": {"thread_id": thread}}
    snapshot = await graph.aget_state(config)
    if resume is not None and not snapshot.interrupts:
        raise CommandError(f"--resume: thread {thread!r} has no pending escalation to answer")
    if prompt is None and not snapshot.created_at:
        raise CommandError(f"no thread {thread!r} to resume: give a PROMPT to start it")
    if prompt is None and not snapshot.next:
        print(f"thread {thread}: nothing pending (no escalation, no unfinished step)", file=out)
    start = _counts(snapshot.values)
    printer = StreamPrinter(out)
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
                answers = [dict(resume) for _ in snapshot.interrupts]
                resume = None
            elif interactive:
                answers = [
                    ask_operator(i.value, read or (lambda p: _read_line(p, out)), out)
                    for i in snapshot.interrupts
                ]
            else:
                for item in snapshot.interrupts:
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
                print("  (the thread waits for an operator: answering that first)", file=out)
        elif snapshot.next:
            print(
                f"  [resume] thread {thread} stopped before {', '.join(snapshot.next)} "
                "(a run was interrupted): finishing that step first",
                file=out,
            )
            payload, resumed_from_option = None, False
        elif prompt is not None:
            payload = {"messages": [("user", prompt)]}
            prompt, resumed_from_option = None, False
        else:
            break
        before = snapshot.config
        async for mode, item in graph.astream(payload, config, stream_mode=["updates", "messages"]):
            printer.feed(mode, item)
        printer.close()
        snapshot = await graph.aget_state(config)
        if payload is None and snapshot.config == before:  # never loop on a stuck step
            raise CommandError(
                f"thread {thread!r} did not advance past {', '.join(snapshot.next)}", EXIT_FAILED
            )
    end = _counts(snapshot.values)
    new = ", ".join(f"{end[k] - start[k]} new {k.replace('_', ' ')}" for k in end)
    recovered = [
        r
        for r in list(snapshot.values.get("receipts") or [])[start["receipts"] :]
        if r.get("source") == "recovered"
    ]
    if recovered:
        ids = ", ".join(str(r.get("decision_id")) for r in recovered)
        new += f"; recovered from the engine: the receipt of {ids}"
    print(
        f"\nthread {thread}: {end['receipts']} receipts, {end['denials']} denials, "
        f"{end['operator_decisions']} operator decisions ({new})",
        file=out,
    )
    return 0


async def _run(args: argparse.Namespace) -> int:
    from algenta_graph.checkpointer import open_checkpointer
    from algenta_graph.errors import AlgentaGraphError
    from algenta_graph.graph import governed_agent

    prompt = _utf8(args.prompt, "the PROMPT") if args.prompt is not None else None
    thread = _utf8(args.thread, "--thread")
    if not thread.strip():
        raise CommandError("--thread must not be blank")
    on_denial = _on_denial(args.on_denial)
    model = _resolve_model(args.model)  # before anything connects
    db = prepare_db(args.db)
    try:
        async with (
            open_checkpointer(db) as saver,
            governed_agent(
                model,
                base_url=args.base_url,
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
            )
            print(f"(checkpoints in {db})")
            return code
    except sqlite3.DatabaseError as exc:
        raise _db_error(db, exc) from None
    except AlgentaGraphError as exc:
        raise CommandError(one_line(exc), EXIT_FAILED) from None
    except Exception as exc:
        lost = _postgres_failure(exc)
        if lost is None:
            raise
        raise _store_lost(db, thread, lost) from None


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
    from algenta_graph.governance.contract import DEFAULT_PROFILE, PROFILE_NAMES
    from algenta_graph.governance.gates import DEFAULT_POLICIES, GATE_NAMES, POLICIES

    p = sub.add_parser(
        "run",
        help="run one turn of the governed agent against an engine, or resume a thread",
        description=(
            "Run one turn against an engine; an escalation asks the operator. Without PROMPT, "
            "resume the thread: answer its pending escalation or finish the step a killed run "
            "left unfinished. With PROMPT on such a thread, that comes first."
        ),
    )
    p.add_argument(
        "prompt", nargs="?", default=None, help="the user message (omit to resume the thread)"
    )
    p.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        choices=PROFILE_NAMES,
        help=f"tool profile: {', '.join(PROFILE_NAMES)} (default: {DEFAULT_PROFILE})",
    )
    p.add_argument("--thread", default="cli", help="thread id (default: cli)")
    p.add_argument(
        "--db",
        default=DEFAULT_DB,
        type=db_arg,
        help=f"SQLite checkpoint file, its directory created if missing (default: {DEFAULT_DB}"
        " in the working directory), or a postgresql:// URL",
    )
    p.add_argument(
        "--base-url",
        default=None,
        help="engine MCP URL (default: $ALGENTA_BASE_URL, else http://localhost:8000/mcp)",
    )
    p.add_argument("--api-key", default=None, help="engine token (default: $ALGENTA_API_KEY)")
    p.add_argument(
        "--model",
        default=None,
        help="init_chat_model string, e.g. openai:gpt-5 (default: the offline demo model)",
    )
    p.add_argument(
        "--top-k", type=_positive_int, default=5, help="tools retrieved per turn, >= 1 (default: 5)"
    )
    p.add_argument(
        "--on-denial",
        default=None,
        metavar="POLICY|JSON",
        help=(
            f"a policy ({'|'.join(POLICIES)}) for every gate, or JSON {{gate: policy}}, e.g. "
            f'\'{{"confidence": "report"}}\'; gates: {", ".join(GATE_NAMES)} '
            f"(default: {', '.join(f'{g} {p}' for g, p in DEFAULT_POLICIES.items())})"
        ),
    )
    p.add_argument(
        "--resume",
        type=_resume_arg,
        default=None,
        metavar="JSON",
        help='answer the pending escalation: {"action": "override"|"decline", '
        '"operator": NAME, "reason": TEXT}',
    )
    p.add_argument(
        "--interactive",
        action="store_true",
        help="ask the operator on stdin even when it is not a terminal",
    )
    p.set_defaults(handler=_run_handler)


# ---------------------------------------------------------------------- receipts


def _receipts_handler(args: argparse.Namespace) -> int:
    from algenta_graph.audit import RecordsFileError, format_records, thread_records
    from algenta_graph.chain import export_jsonl

    where = _store_name(args.db)
    try:
        if args.verify:
            return _verify(args, _read_store(args.db, args.thread, history=True), where)
        latest = _read_store(args.db, args.thread, history=False)
        records, foreign = thread_records(latest, where)
    except FileNotFoundError:
        raise CommandError(f"--db {args.db}: no checkpoint file there") from None
    except RecordsFileError as exc:
        raise CommandError(f"--db {exc}") from None
    if args.thread is not None and args.thread not in records:
        raise CommandError(f"no thread {args.thread!r} in {where}")
    if args.jsonl:
        export_jsonl(records, sys.stdout)  # records with their chain links, then each head
    else:
        print(format_records(records))
    if foreign:
        print(f"algenta-graph receipts: note: {_not_ours(foreign)}", file=sys.stderr)
    return 0


def _not_ours(foreign: Mapping[str, str]) -> str:
    names = ", ".join(repr(t) for t in list(foreign)[:5]) + (", ..." if len(foreign) > 5 else "")
    return f"{len(foreign)} thread(s) of another graph left out ({names})"


def _read_store(db: str, thread: str | None, *, history: bool) -> Any:
    """Each thread's latest checkpoint, or its whole history, from a SQLite file or a
    PostgreSQL URL: the record lists only, read-only (nothing is created in either)."""
    from algenta_graph.checkpointer import (
        RECORD_KINDS,
        CheckpointerError,
        aread_history,
        aread_latest,
        is_postgres_url,
        read_history,
        read_latest,
    )

    if not is_postgres_url(db):
        reader = read_history if history else read_latest
        return reader(db, thread, fields=RECORD_KINDS)
    areader = aread_history if history else aread_latest
    try:
        return asyncio.run(areader(db.strip(), thread, fields=RECORD_KINDS))
    except CheckpointerError as exc:
        raise CommandError(f"--db {_store_name(db)}: {one_line(exc)}", EXIT_FAILED) from None
    except Exception as exc:
        lost = _postgres_failure(exc)
        if lost is None:
            raise
        raise CommandError(
            f"--db {_store_name(db)}: reading the PostgreSQL checkpoint store failed "
            f"({_pg_reason(lost)})",
            EXIT_FAILED,
        ) from None


def _verify(args: argparse.Namespace, history: Any, where: str) -> int:
    """``receipts --verify``: every checkpoint of each thread's history; exit 1 naming a break."""
    from algenta_graph.audit import no_thread_of_ours, split_threads
    from algenta_graph.chain import ChainHead, format_reports, read_heads, verify_threads

    expected: dict[str, ChainHead] = {}
    if args.head is not None:
        try:
            expected = read_heads(args.head)
        except (OSError, ValueError) as exc:
            raise CommandError(f"--head {args.head}: {one_line(exc)}") from None
    ours, foreign = split_threads(history)
    if foreign and not ours:
        raise CommandError(f"--db {no_thread_of_ours(where, foreign)}")
    if args.thread is not None and args.thread not in history:
        raise CommandError(f"no thread {args.thread!r} in {where}")
    for tid, head in expected.items():
        if tid not in ours and (args.thread is None or tid == args.thread) and head.seq > 0:
            other = ""
            if tid in foreign:
                other = f" (a thread of another graph has its id: {foreign[tid]})"
            raise CommandError(
                f"thread {tid!r} of the exported heads is gone from {where}{other}", EXIT_FAILED
            )
    reports = verify_threads(
        {tid: history[tid] for tid in ours}, where, expected=expected, thread=args.thread
    )
    print(format_reports(reports))
    for tid, reason in foreign.items():
        print(f"{tid}: left out: not an algenta-graph thread ({reason})")
    return 0 if all(r.ok for r in reports.values()) else EXIT_FAILED


def add_receipts_parser(sub: Any) -> None:
    """``algenta-graph receipts``."""
    p = sub.add_parser(
        "receipts",
        help="list receipts, denials and operator decisions in a checkpoint store",
        description=(
            "Every receipt, denial and operator decision in a checkpoint store (a SQLite "
            "checkpoint file or a postgresql:// URL), from each thread's latest checkpoint. "
            "Threads of another graph sharing the store are left out (and named on stderr); a "
            "store with none of ours is an error. Read-only: the file is never written or "
            "created, and nothing is created in a database."
        ),
    )
    p.add_argument(
        "--db",
        default=DEFAULT_DB,
        type=db_arg,
        help=f"SQLite checkpoint file or postgresql:// URL (default: {DEFAULT_DB}, the one "
        "`run` writes)",
    )
    p.add_argument("--thread", default=None, help="only this thread (default: every thread)")
    p.add_argument(
        "--jsonl",
        action="store_true",
        help="export: one JSON object per record (with its chain links), then each thread's "
        "chain head (keep the heads elsewhere to detect a truncated tail later)",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="recompute every thread's hash chain (ALGENTA_AUDIT_KEY if set) in every "
        "checkpoint of its history, not only the latest, and compare each checkpoint with the "
        "one it follows: a record edited, deleted, reordered or injected, or gone or changed "
        "between two checkpoints, is named with the checkpoint it was found in; exit 1 on a "
        "break. Not checked: the pending writes of a step that has not finished (checked once "
        "its checkpoint is written) and subgraph checkpoints; a record deleted from every "
        "checkpoint that holds it shows as a gap in the chain, unless it was the chain's last "
        "record: only --head shows a truncated tail",
    )
    p.add_argument(
        "--head",
        default=None,
        metavar="EXPORT.jsonl",
        help="with --verify: an earlier --jsonl export whose chain heads must still be there",
    )
    p.set_defaults(handler=_receipts_handler)


# ---------------------------------------------------------------------- demo


def _demo_handler(args: argparse.Namespace) -> int:
    from algenta_graph.demo import run_demo
    from algenta_graph.errors import AlgentaGraphError

    model = _resolve_model(args.model)
    db = prepare_db(args.db) if args.db is not None else None
    if args.webhook_log is not None:
        prepare_db(args.webhook_log, "--webhook-log")
    try:
        return asyncio.run(
            run_demo(model=model, db=db, keep=args.keep, webhook_log=args.webhook_log)
        )
    except sqlite3.DatabaseError as exc:
        raise _db_error(str(db), exc) from None
    except AlgentaGraphError as exc:
        raise CommandError(one_line(exc), EXIT_FAILED) from None
    except Exception as exc:
        lost = _postgres_failure(exc) if db is not None else None
        if lost is None:
            raise
        raise CommandError(
            f"--db {_store_name(db or '')}: the PostgreSQL checkpoint store failed "
            f"({_pg_reason(lost)})",
            EXIT_FAILED,
        ) from None


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
    p.add_argument(
        "--db",
        default=None,
        type=db_arg,
        help="checkpoint file, its directory created if missing (default: a temporary file)",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary checkpoint file")
    p.add_argument(
        "--webhook-log", default=None, help="append every webhook POST to this JSONL file"
    )
    p.set_defaults(handler=_demo_handler)
