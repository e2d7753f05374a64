"""A notification fires once per escalation raised, across two worker processes on one
PostgreSQL store, however often each meets it, and while the receiver fails on purpose
(``docs/ARCHITECTURE.md``, "Escalation and the operator").

Two worker processes (``tests/support/notify_worker.py``) run the governed graph on one
PostgreSQL database and the reference engine; each raises the escalations of half the threads,
then both meet every thread's escalation three times at once (the handler runs again, as after a
restart or a retry, in either process). The notification URL is a real HTTP receiver that
answers 500 to the first attempt of every escalation's notice, and to the second of every third:
a failing hook never blocks the escalation, and its notice is sent again by the next handler
that meets it. Counted at the receiver: exactly one delivered notice per escalation.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from guarantee_support import figure, log_decision, wait_until
from mcp import ClientSession
from postgres_support import postgres_server, postgres_url  # noqa: F401
from repo_paths import SUPPORT
from standardwebhooks import Webhook, WebhookVerificationError

from algenta_graph._net import free_port
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.governance.notice_signing import WEBHOOK_ID_HEADER, new_secret

pytestmark = pytest.mark.timeout(900)

THREADS = 12
ROUNDS = 3
SECRET = new_secret()


class FailingReceiver:
    """A real HTTP receiver failing on purpose: per escalation, its first attempt gets HTTP
    500, and so does the second of every third escalation; the rest get 200."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.attempts: Counter[str] = Counter()
        self.delivered: Counter[str] = Counter()
        self.failed = 0
        self.forged = 0
        self.order: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                escalation = str(self.headers.get(WEBHOOK_ID_HEADER))
                with outer.lock:
                    try:  # Standard Webhooks' own check: the signature, and a fresh timestamp
                        Webhook(SECRET).verify(body, dict(self.headers))
                    except WebhookVerificationError:
                        outer.forged += 1
                    outer.attempts[escalation] += 1
                    n = outer.attempts[escalation]
                    if escalation not in outer.order:
                        outer.order.append(escalation)
                    fail = n == 1 or (n == 2 and outer.order.index(escalation) % 3 == 0)
                    if fail:
                        outer.failed += 1
                    else:
                        outer.delivered[escalation] += 1
                self.send_response(500 if fail else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.port}/notify"

    def __enter__(self) -> FailingReceiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_a_notice_is_delivered_once_per_escalation_across_two_workers_and_failures(
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    postgres_url: str,  # noqa: F811
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
    tmp_path: Path,
) -> None:
    threads = [f"notify-{i}" for i in range(THREADS)]
    async with mcp_session(engine.url) as session:
        decisions = [
            await log_decision(session, action=f"restock_{i}", confidence=0.3) for i in threads
        ]
    prompts = {
        t: f"execute_decision decision_id={d} webhook_url={webhook.url}"
        for t, d in zip(threads, decisions, strict=True)
    }
    go = tmp_path / "go"
    with FailingReceiver() as receiver:
        procs: list[tuple[subprocess.Popen[bytes], dict[str, Any]]] = []
        for w, half in enumerate((threads[: THREADS // 2], threads[THREADS // 2 :])):
            job: dict[str, Any] = {
                "db": postgres_url,
                "engine_url": engine.url,
                "notify_url": receiver.url,
                "secret": SECRET,
                "raise": [{"thread_id": t, "prompt": prompts[t]} for t in half],
                "meet": threads,
                "rounds": ROUNDS,
                "raised": str(tmp_path / f"w{w}.raised"),
                "go": str(go),
                "done": str(tmp_path / f"w{w}.done"),
            }
            path = tmp_path / f"w{w}.json"
            path.write_text(json.dumps(job))
            log = (tmp_path / f"w{w}.log").open("wb")
            proc = subprocess.Popen(
                [sys.executable, str(SUPPORT / "notify_worker.py"), str(path)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            log.close()
            procs.append((proc, job))

        def raised() -> bool:
            for proc, job in procs:
                if proc.poll() is not None:
                    log = Path(job["done"]).with_suffix(".log")
                    raise AssertionError(f"worker exited: {log.read_text()[-3000:]}")
            return all(Path(job["raised"]).exists() for _, job in procs)

        wait_until(raised, timeout=300, interval=0.05, what="both workers raised their half")
        go.write_text("go")
        seen = []
        for proc, job in procs:
            assert proc.wait(timeout=600) == 0, Path(job["done"]).with_suffix(".log").read_text()
            seen.append(json.loads(Path(job["done"]).read_text()))
        escalations = {e for s in seen for ids in s["interrupts"].values() for e in ids}
        assert len(escalations) == THREADS  # every thread still waits, on its own escalation
        assert all(s["errors"] == [] for s in seen), seen
        assert len({s["pid"] for s in seen}) == 2
        duplicates = sum(n - 1 for n in receiver.delivered.values() if n > 1)
        figure(
            "operator_notifications",
            workers=2,
            escalations=len(escalations),
            delivered=sum(receiver.delivered.values()),
            injected_failures=receiver.failed,
            duplicates=duplicates,
        )
        assert set(receiver.delivered) == escalations
        assert all(n == 1 for n in receiver.delivered.values()), receiver.delivered
        assert receiver.failed >= THREADS and receiver.forged == 0
    assert engine.executions() == []  # nothing was executed: every escalation still waits
