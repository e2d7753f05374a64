"""How a URL notice is signed: the Standard Webhooks scheme, so an old notice cannot be replayed.

A notice (:mod:`algenta_graph.governance.notifications`) is a JSON ``POST`` with three headers
(`Standard Webhooks <https://www.standardwebhooks.com/>`_, signed with its own ``standardwebhooks``
library):

- ``webhook-id``: the escalation's id (the same on every attempt of one notice: a receiver drops
  a duplicate by it);
- ``webhook-timestamp``: when this attempt was sent, in Unix seconds;
- ``webhook-signature``: ``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``.

The id and the timestamp are under the signature with the body, so a receiver that refuses a
timestamp outside its tolerance (the library's: 5 minutes) refuses an old notice replayed, and a
timestamp moved forward no longer matches the signature. The secret is Standard Webhooks'
format: ``whsec_`` and the base64 of 24 to 64 random bytes (:func:`new_secret` makes one), the
same text the receiver verifies with.

>>> secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the library's published example
>>> signed_headers(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", b'{"test": 2432232314}', 1614265330)
... # doctest: +NORMALIZE_WHITESPACE
{'webhook-id': 'msg_p5jXN8AQM9LWM0D4loKWxJek', 'webhook-timestamp': '1614265330',
 'webhook-signature': 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE='}
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
import time
from datetime import datetime, timezone

from standardwebhooks import Webhook

__all__ = [
    "MAX_KEY_BYTES",
    "MIN_KEY_BYTES",
    "SECRET_PREFIX",
    "WEBHOOK_ID_HEADER",
    "WEBHOOK_SIGNATURE_HEADER",
    "WEBHOOK_TIMESTAMP_HEADER",
    "new_secret",
    "signed_headers",
    "signing_key",
    "webhook_id",
]

WEBHOOK_ID_HEADER = "webhook-id"
"""The notice's id: its escalation's, the same on every attempt."""
WEBHOOK_TIMESTAMP_HEADER = "webhook-timestamp"
"""When this attempt was sent (Unix seconds), under the signature."""
WEBHOOK_SIGNATURE_HEADER = "webhook-signature"
"""``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``."""
SECRET_PREFIX = "whsec_"
MIN_KEY_BYTES = 24
"""The shortest key Standard Webhooks allows (192 bits)."""
MAX_KEY_BYTES = 64
"""The longest (512 bits)."""
_SAFE_ID = re.compile(r"^[A-Za-z0-9_-]{1,200}$")
_MAKE_ONE = (
    'make one with python -c "from algenta_graph.governance.notice_signing import new_secret; '
    'print(new_secret())"'
)


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` and the base64 of 32 random bytes.

    >>> len(signing_key(new_secret()))
    32
    """
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def signing_key(secret: str) -> bytes:
    """The HMAC key a ``whsec_`` secret stands for.

    Raises:
        ValueError: the secret is not ``whsec_`` + base64 of 24 to 64 bytes; the message says
            what is wrong and how to make one (the secret itself is never shown).

    >>> signing_key("s3cret")
    Traceback (most recent call last):
    ...
    ValueError: a notification secret is 'whsec_' + the base64 of 24 to 64 random bytes \
(Standard Webhooks), this one has no 'whsec_' prefix: make one with python -c "from \
algenta_graph.governance.notice_signing import new_secret; print(new_secret())"
    """

    def bad(why: str) -> ValueError:
        return ValueError(
            f"a notification secret is {SECRET_PREFIX!r} + the base64 of {MIN_KEY_BYTES} to "
            f"{MAX_KEY_BYTES} random bytes (Standard Webhooks), this one {why}: {_MAKE_ONE}"
        )

    if not secret.startswith(SECRET_PREFIX):
        raise bad(f"has no {SECRET_PREFIX!r} prefix")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise bad("is not base64 after its prefix") from None
    if not MIN_KEY_BYTES <= len(key) <= MAX_KEY_BYTES:
        raise bad(f"holds {len(key)} bytes")
    return key


def webhook_id(escalation_id: str) -> str:
    """The ``webhook-id`` of an escalation's notice (the same on every attempt).

    Its id, when it has no character the signed text could confuse (a ``.``), else a digest.

    >>> webhook_id("esc_1"), webhook_id("esc.1")[:8]
    ('esc_1', 'esc_70ab')
    """
    if _SAFE_ID.match(escalation_id):
        return escalation_id
    return "esc_" + hashlib.sha256(escalation_id.encode()).hexdigest()[:32]


def signed_headers(
    secret: str, message_id: str, body: bytes, timestamp: float | None = None
) -> dict[str, str]:
    """The Standard Webhooks headers of ``body`` sent now (or at ``timestamp``, Unix seconds).

    Raises:
        ValueError: the secret is not a ``whsec_`` secret (:func:`signing_key`).
    """
    when = int(time.time() if timestamp is None else timestamp)
    signature = Webhook(signing_key(secret)).sign(
        message_id, datetime.fromtimestamp(when, tz=timezone.utc), body
    )
    return {
        WEBHOOK_ID_HEADER: message_id,
        WEBHOOK_TIMESTAMP_HEADER: str(when),
        WEBHOOK_SIGNATURE_HEADER: signature,
    }
