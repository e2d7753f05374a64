"""What the inbox's tests share about its session cookie."""

from __future__ import annotations

import base64
import binascii
import zlib
from contextlib import suppress

COOKIE = "algenta_inbox"
"""The inbox's session cookie."""


def cookie_decodings(cookie: str) -> list[bytes]:
    """``cookie`` and every part of it decoded as a signed cookie's payload decodes (base64url,
    then zlib when compressed): what anyone holding the cookie reads without a key."""
    found = [cookie.encode()]
    for part in cookie.lstrip(".").split("."):
        try:
            raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        except (binascii.Error, ValueError):
            continue
        found.append(raw)
        with suppress(zlib.error):
            found.append(zlib.decompress(raw))
    return found
