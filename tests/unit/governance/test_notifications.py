"""Notifications fire once per escalation, a failing hook never blocks it, and a notice is
signed the Standard Webhooks way so an old one cannot be replayed (fast tier, mutation-tested;
``docs/ARCHITECTURE.md``, "Escalation and the operator"): ``governance.notifications`` against
a real HTTP receiver on a free port, verified with the ``standardwebhooks`` library."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from pydantic import ValidationError
from standardwebhooks import Webhook, WebhookVerificationError

from algenta_graph._net import free_port
from algenta_graph.governance.escalations import EscalationSettings, WebhookNotify
from algenta_graph.governance.notice_signing import (
    WEBHOOK_ID_HEADER,
    WEBHOOK_SIGNATURE_HEADER,
    WEBHOOK_TIMESTAMP_HEADER,
    new_secret,
    signed_headers,
    signing_key,
)
from algenta_graph.governance.notifications import notice_key, notify_once, post_notice
from algenta_graph.ledger import MemoryLedger, NoticeMark, new_entry, release

NOTICE = {"escalation_id": "esc_1", "gate": "confidence", "decision_id": "d1"}
SECRET = new_secret()
# Standard Webhooks' published example (its libraries' tests, and Svix's documentation)
EXAMPLE_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
EXAMPLE_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
EXAMPLE_TIMESTAMP = 1614265330
EXAMPLE_BODY = b'{"test": 2432232314}'
EXAMPLE_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


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
    return EscalationSettings(notify_url=webhook(url=url, secret=SECRET, **options))


def test_the_signature_is_standard_webhooks_on_its_published_example() -> None:
    headers = signed_headers(EXAMPLE_SECRET, EXAMPLE_ID, EXAMPLE_BODY, EXAMPLE_TIMESTAMP)
    assert headers == {
        WEBHOOK_ID_HEADER: EXAMPLE_ID,
        WEBHOOK_TIMESTAMP_HEADER: str(EXAMPLE_TIMESTAMP),
        WEBHOOK_SIGNATURE_HEADER: EXAMPLE_SIGNATURE,
    }
    # the spec's own recipe, with the standard library: HMAC-SHA256 of "{id}.{timestamp}.{body}"
    signed = f"{EXAMPLE_ID}.{EXAMPLE_TIMESTAMP}.".encode() + EXAMPLE_BODY
    key = base64.b64decode(EXAMPLE_SECRET.removeprefix("whsec_"))
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    assert headers[WEBHOOK_SIGNATURE_HEADER] == "v1," + base64.b64encode(digest).decode()
    assert notice_key("esc_9") == "notice:esc_9"


@pytest.mark.parametrize(
    ("secret", "why"),
    [
        ("s3cret", "no 'whsec_' prefix"),
        ("whsec_not base64!", "is not base64"),
        ("whsec_" + base64.b64encode(b"x" * 23).decode(), "holds 23 bytes"),
        ("whsec_" + base64.b64encode(b"x" * 65).decode(), "holds 65 bytes"),
    ],
)
def test_a_secret_not_in_standard_webhooks_form_is_refused_by_name_never_shown(
    secret: str, why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        signing_key(secret)
    with pytest.raises(ValidationError) as refused:
        webhook(url="https://ops.example/hook", secret=secret)
    assert "whsec_" in str(refused.value) and "new_secret()" in str(refused.value)
    assert secret not in str(refused.value).replace("'whsec_'", "")
    assert len(signing_key(new_secret())) == 32


async def test_a_url_notice_is_signed_json_naming_its_escalation(receiver: Receiver) -> None:
    await post_notice(webhook(url=receiver.url, secret=SECRET), NOTICE)
    [(headers, body, status)] = receiver.received
    assert status == 200 and json.loads(body) == NOTICE
    lowered = {k.lower(): v for k, v in headers.items()}
    assert lowered["content-type"] == "application/json"
    assert lowered[WEBHOOK_ID_HEADER] == "esc_1"
    assert Webhook(SECRET).verify(body, lowered) == NOTICE  # the library's own check


async def test_an_old_notice_replayed_and_a_timestamp_moved_forward_are_refused(
    receiver: Receiver,
) -> None:
    """The timestamp is under the signature: a receiver with a tolerance window refuses a
    notice captured 10 minutes ago and sent again, and the same notice with its timestamp moved
    to now no longer matches its signature."""
    await post_notice(webhook(url=receiver.url, secret=SECRET), NOTICE)
    [(headers, body, _)] = receiver.received
    lowered = {k.lower(): v for k, v in headers.items()}
    receiver_side = Webhook(SECRET)
    sent_at = int(lowered[WEBHOOK_TIMESTAMP_HEADER])
    old = signed_headers(SECRET, lowered[WEBHOOK_ID_HEADER], body, sent_at - 600)
    with pytest.raises(WebhookVerificationError, match="too old"):
        receiver_side.verify(body, old)
    moved = {**old, WEBHOOK_TIMESTAMP_HEADER: str(sent_at)}
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        receiver_side.verify(body, moved)
    # and a body changed under a fresh signature's headers
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        receiver_side.verify(body.replace(b"d1", b"d2"), lowered)


async def test_every_attempt_is_signed_when_it_is_sent_under_one_id() -> None:
    with Receiver([500, 200]) as flaky:
        await post_notice(webhook(url=flaky.url, secret=SECRET, attempts=2), NOTICE)
    first, second = ({k.lower(): v for k, v in h.items()} for h, _, _ in flaky.received)
    assert first[WEBHOOK_ID_HEADER] == second[WEBHOOK_ID_HEADER] == "esc_1"
    for headers, (_, body, _) in zip((first, second), flaky.received, strict=True):
        Webhook(SECRET).verify(body, headers)


async def test_the_body_is_canonical_json_and_any_value_is_sent_as_text(
    receiver: Receiver,
) -> None:
    """The signed bytes are the sorted JSON of the notice (what a receiver recomputes), and a
    value JSON has no form for (a datetime) is sent as its text, never a failure."""
    from datetime import datetime, timezone

    when = datetime(2026, 12, 2, tzinfo=timezone.utc)
    notice = {"gate": "confidence", "escalation_id": "esc_1", "asked_at": when}
    await post_notice(webhook(url=receiver.url, secret=SECRET), notice)
    [(_, body, _)] = receiver.received
    assert body == json.dumps({**notice, "asked_at": str(when)}, sort_keys=True).encode()


async def test_a_timed_out_post_is_named_and_not_repeated() -> None:
    from algenta_graph.governance.notifications import _Timeout

    with Receiver(hang=True) as slow:
        target = webhook(url=slow.url, secret=SECRET, timeout_seconds=0.2, attempts=3)
        with pytest.raises(
            _Timeout, match=r"^http://127\.0\.0\.1:\d+/hook: timed out after 0\.2s$"
        ):
            await post_notice(target, NOTICE)
        assert len(slow.received) == 1  # it may have arrived: never sent again


async def test_a_failing_receiver_is_tried_again_then_named() -> None:
    with Receiver([500, 503]) as flaky:
        await post_notice(webhook(url=flaky.url, secret=SECRET, attempts=3), NOTICE)
        assert [s for _, _, s in flaky.received] == [500, 503, 200]
    with Receiver([500, 500, 500]) as down:
        with pytest.raises(RuntimeError, match=r"HTTP 500 after 3 attempt\(s\)$"):
            await post_notice(webhook(url=down.url, secret=SECRET, attempts=3), NOTICE)
        assert len(down.received) == 3
    nobody = f"http://127.0.0.1:{free_port()}/hook"
    with pytest.raises(RuntimeError, match=r"ConnectError: .* after 2 attempt\(s\)$"):
        await post_notice(webhook(url=nobody, secret=SECRET, attempts=2), NOTICE)


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
