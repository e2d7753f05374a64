"""Notifications fire once per escalation, and a failing hook never blocks it (fast tier,
mutation-tested; ``docs/ARCHITECTURE.md``, "Escalation and the operator"):
``algenta_graph.governance.notifications`` against a real HTTP receiver on a free port."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from algenta_graph._net import free_port
from algenta_graph.governance.escalations import EscalationSettings, WebhookNotify
from algenta_graph.governance.notifications import (
    ESCALATION_ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    notice_key,
    notify_once,
    post_notice,
    signature,
    verify_signature,
)
from algenta_graph.ledger import MemoryLedger, NoticeMark, new_entry, release

NOTICE = {"escalation_id": "esc_1", "gate": "confidence", "decision_id": "d1"}


class Receiver:
    """A real HTTP receiver: answers each POST with the next scripted status (then 200)."""

    def __init__(self, statuses: list[int] | None = None, hang: bool = False) -> None:
        self.statuses = list(statuses or [])
        self.hang = hang
        self.received: list[tuple[dict[str, str], bytes, int]] = []
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status = outer.statuses.pop(0) if outer.statuses else 200
                outer.received.append((dict(self.headers), body, status))
                if outer.hang:
                    outer.release.wait(10)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.port}/hook"

    def __enter__(self) -> Receiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    @property
    def delivered(self) -> int:
        return sum(1 for _, _, status in self.received if 200 <= status < 300)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def webhook(*, url: str, secret: str, **options: Any) -> WebhookNotify:
    """A notification URL from the text a configuration holds: pydantic coerces the URL and
    the secret, and its constructor is typed with the coerced types, so validate a mapping."""
    return WebhookNotify.model_validate({"url": url, "secret": secret, **options})


def settings_for(url: str, **options: Any) -> EscalationSettings:
    return EscalationSettings(notify_url=webhook(url=url, secret="s3cret", **options))


def test_the_signature_is_the_bodys_hmac_and_is_checked_in_constant_time() -> None:
    body = json.dumps(NOTICE).encode()
    sig = signature("s3cret", body)
    assert sig.startswith("sha256=") and len(sig) == 7 + 64
    assert verify_signature("s3cret", body, sig)
    assert not verify_signature("other", body, sig)
    assert not verify_signature("s3cret", body + b" ", sig)
    assert not verify_signature("s3cret", body, None)
    assert not verify_signature("s3cret", body, sig.upper())
    assert notice_key("esc_9") == "notice:esc_9"


async def test_a_url_notice_is_signed_json_naming_its_escalation(receiver: Receiver) -> None:
    await post_notice(webhook(url=receiver.url, secret="s3cret"), NOTICE)
    [(headers, body, status)] = receiver.received
    assert status == 200 and json.loads(body) == NOTICE
    lowered = {k.lower(): v for k, v in headers.items()}
    assert lowered["content-type"] == "application/json"
    assert verify_signature("s3cret", body, lowered[SIGNATURE_HEADER.lower()])
    assert lowered[ESCALATION_ID_HEADER.lower()] == "esc_1"
    assert lowered[TIMESTAMP_HEADER.lower()].isdigit()


async def test_the_body_is_canonical_json_and_any_value_is_sent_as_text(
    receiver: Receiver,
) -> None:
    """The signed bytes are the sorted JSON of the notice (what a receiver recomputes), and a
    value JSON has no form for (a datetime) is sent as its text, never a failure."""
    from datetime import datetime, timezone

    when = datetime(2026, 12, 2, tzinfo=timezone.utc)
    notice = {"gate": "confidence", "escalation_id": "esc_1", "asked_at": when}
    await post_notice(webhook(url=receiver.url, secret="s3cret"), notice)
    [(_, body, _)] = receiver.received
    assert body == json.dumps({**notice, "asked_at": str(when)}, sort_keys=True).encode()


async def test_a_timed_out_post_is_named_and_not_repeated() -> None:
    from algenta_graph.governance.notifications import _Timeout

    with Receiver(hang=True) as slow:
        target = webhook(url=slow.url, secret="k", timeout_seconds=0.2, attempts=3)
        with pytest.raises(
            _Timeout, match=r"^http://127\.0\.0\.1:\d+/hook: timed out after 0\.2s$"
        ):
            await post_notice(target, NOTICE)
        assert len(slow.received) == 1  # it may have arrived: never sent again


async def test_a_failing_receiver_is_tried_again_then_named() -> None:
    with Receiver([500, 503]) as flaky:
        await post_notice(webhook(url=flaky.url, secret="k", attempts=3), NOTICE)
        assert [s for _, _, s in flaky.received] == [500, 503, 200]
    with Receiver([500, 500, 500]) as down:
        with pytest.raises(RuntimeError, match=r"HTTP 500 after 3 attempt\(s\)$"):
            await post_notice(webhook(url=down.url, secret="k", attempts=3), NOTICE)
        assert len(down.received) == 3
    nobody = f"http://127.0.0.1:{free_port()}/hook"
    with pytest.raises(RuntimeError, match=r"ConnectError: .* after 2 attempt\(s\)$"):
        await post_notice(webhook(url=nobody, secret="k", attempts=2), NOTICE)


async def test_a_notice_is_sent_once_however_often_the_handler_meets_the_escalation(
    receiver: Receiver,
) -> None:
    store = MemoryLedger()
    settings = settings_for(receiver.url)
    sent = [await notify_once(store, settings, NOTICE) for _ in range(4)]
    assert sent == [True, False, False, False] and receiver.delivered == 1
    claim = await store.get(notice_key("esc_1"), NoticeMark)
    assert claim is not None and claim.done
    assert claim.value == NoticeMark(escalation_id="esc_1")  # it says which escalation it is
    assert await notify_once(store, settings, {**NOTICE, "escalation_id": "esc_2"}) is True
    assert receiver.delivered == 2


async def test_without_a_hook_nothing_is_claimed_or_sent() -> None:
    store = MemoryLedger()
    assert await notify_once(store, EscalationSettings(), NOTICE) is False
    assert await store.get(notice_key("esc_1"), NoticeMark) is None


async def test_a_python_hook_sync_or_async_is_called_once_with_the_notice() -> None:
    calls: list[Any] = []

    def sync_hook(notice: Any) -> None:
        calls.append(("sync", notice))

    async def async_hook(notice: Any) -> None:
        await asyncio.sleep(0)
        calls.append(("async", notice))

    store = MemoryLedger()
    for hook in (sync_hook, async_hook):
        settings = EscalationSettings(hook=hook)
        key = f"esc_{hook.__name__}"
        assert await notify_once(store, settings, {**NOTICE, "escalation_id": key})
        assert not await notify_once(store, settings, {**NOTICE, "escalation_id": key})
    assert [(kind, n["escalation_id"]) for kind, n in calls] == [
        ("sync", "esc_sync_hook"),
        ("async", "esc_async_hook"),
    ]
    assert calls[0][1] is not NOTICE  # a copy: the hook cannot change what the graph keeps


async def test_a_failing_hook_is_logged_never_raised_and_sent_once_when_it_works_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    attempts: list[int] = []

    def hook(notice: Any) -> None:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("pager down")

    store = MemoryLedger()
    settings = EscalationSettings(hook=hook)
    with caplog.at_level(logging.WARNING, logger="algenta_graph.governance.notifications"):
        assert await notify_once(store, settings, NOTICE) is False
        assert [r.getMessage() for r in caplog.records] == [
            "escalation esc_1: notification hook failed (sent again by the next handler that "
            "meets it): pager down"
        ]
        claim = await store.get(notice_key("esc_1"), NoticeMark)
        assert claim is not None and not claim.done and claim.abandoned()  # let go, unsent
        assert await notify_once(store, settings, NOTICE) is False
        assert await notify_once(store, settings, NOTICE) is True  # the hook works again
        assert await notify_once(store, settings, NOTICE) is False  # and never twice
    assert len(attempts) == 3


async def test_a_hook_that_times_out_may_have_been_reached_and_is_not_repeated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryLedger()
    with Receiver(hang=True) as slow:
        settings = settings_for(slow.url, timeout_seconds=0.2)
        with caplog.at_level(logging.WARNING, logger="algenta_graph.governance.notifications"):
            assert await notify_once(store, settings, NOTICE) is True
        assert [r.getMessage() for r in caplog.records] == [
            f"escalation esc_1: notice {slow.url}: timed out after 0.2s "
            "(counted as sent: it may have arrived)"
        ]
        assert await notify_once(store, settings, NOTICE) is False
        assert len(slow.received) == 1


async def test_a_notice_being_sent_elsewhere_is_left_to_its_sender() -> None:
    store = MemoryLedger()
    sender = new_entry(notice_key("esc_1"), NoticeMark(escalation_id="esc_1"))
    await store.insert(sender)  # live (not released): another task of this process sends it
    calls: list[Any] = []
    settings = EscalationSettings(hook=calls.append)
    try:
        assert await notify_once(store, settings, NOTICE) is False
        assert calls == []
    finally:
        release(sender)
    # its sender let go without sending: the next handler sends it
    assert await notify_once(store, settings, NOTICE) is True and len(calls) == 1


async def test_a_claim_store_that_fails_never_blocks_the_escalation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(MemoryLedger):
        async def _get(self, key: str) -> Any:
            raise OSError("database is gone")

    calls: list[Any] = []
    with caplog.at_level(logging.WARNING, logger="algenta_graph.governance.notifications"):
        sent = await notify_once(Broken(), EscalationSettings(hook=calls.append), NOTICE)
    assert sent is False and calls == []
    assert [r.getMessage() for r in caplog.records] == [
        "escalation esc_1: notice not sent: database is gone"
    ]
