"""API keys with roles, and who is calling.

A key ring maps ``sha256(token)`` to an :class:`ApiKey` (identity, roles, execute enabled or
not). Only hashes are stored: a keys file never holds a token. ``--keys-file`` is JSON::

    {
      "<sha256 hex of the token>": {"identity": "graph-worker", "roles": ["agent"],
                                    "execute": true},
      "<sha256 hex of another token>": {"identity": "alice", "roles": ["operator"]}
    }

(``printf %s "$TOKEN" | sha256sum`` gives the hash.) Roles:

- ``agent``: calls MCP tools; ``execute_decision`` only when the key also has ``"execute": true``
  (the operator's explicit, per-key enablement of the execute tier; default false);
- ``operator``: calls MCP tools, and approves plans over HTTP
  (``POST /v1/decision-plans/{plan_id}/approve``).

``--api-key TOKEN`` is one key with identity ``api-key``, both roles and execute enabled.

>>> ring = KeyRing.from_tokens({"t0k": ApiKey("bob", frozenset({"agent"}), execute=True)})
>>> ring.lookup("t0k").identity, ring.lookup("nope")
('bob', None)
>>> bearer_token({b"authorization": b"bEaReR t0k"})
't0k'

Every request presents its key as ``Authorization: Bearer <token>`` or ``X-API-Key: <token>``
(:func:`request_token`): the same keys and roles either way.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROLES: tuple[str, ...] = ("agent", "operator")
API_KEY_IDENTITY = "api-key"
_SHA256_HEX = re.compile(r"^[0-9a-fA-F]{64}$")
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")
_KEY_FIELDS = {"identity", "roles", "execute"}


class KeyFileError(ValueError):
    """A keys file that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class ApiKey:
    """One API key: who it is, its roles, and whether it may execute decisions."""

    identity: str
    roles: frozenset[str]
    execute: bool = False

    def has(self, role: str) -> bool:
        """Whether this key has ``role``."""
        return role in self.roles


def token_hash(token: str) -> str:
    """``sha256(token)`` as lowercase hex (what a keys file stores)."""
    return hashlib.sha256(token.encode()).hexdigest()


class KeyRing:
    """The engine's API keys, by the SHA-256 of their token."""

    def __init__(self, by_hash: Mapping[str, ApiKey] | None = None) -> None:
        self._by_hash: dict[str, ApiKey] = {k.lower(): v for k, v in (by_hash or {}).items()}

    @classmethod
    def from_tokens(cls, tokens: Mapping[str, ApiKey]) -> KeyRing:
        """A key ring of plaintext tokens (hashed in memory)."""
        return cls({token_hash(t): k for t, k in tokens.items()})

    @classmethod
    def from_file(cls, path: str | Path) -> KeyRing:
        """Read a keys file (format in the module docstring); :class:`KeyFileError` if bad."""
        where = str(path)
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise KeyFileError(f"keys file {where}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise KeyFileError(f"keys file {where}: cannot read it ({exc})") from None
        except (ValueError, RecursionError) as exc:
            raise KeyFileError(f"keys file {where}: not valid JSON ({exc})") from None
        return cls.from_mapping(data, source=f"keys file {where}")

    @classmethod
    def from_mapping(cls, data: Any, *, source: str = "keys") -> KeyRing:
        """A key ring of a keys file's parsed JSON (format in the module docstring).

        Args:
            data: ``{sha256(token): {"identity", "roles", "execute"?}}``.
            source: what ``data`` was read from, for the messages.

        Raises:
            KeyFileError: ``data`` is not a usable keys mapping (the message says why).
        """
        if not isinstance(data, dict) or not data:
            raise KeyFileError(
                f"{source}: must be a non-empty JSON object of sha256(token) -> "
                '{"identity": ..., "roles": [...], "execute": true|false}'
            )
        out: dict[str, ApiKey] = {}
        for digest, entry in data.items():
            if not _SHA256_HEX.match(digest):
                raise KeyFileError(
                    f"{source}: {digest[:80]!r} is not a SHA-256 hex digest (64 hex characters);"
                    " store sha256(token), never the token"
                )
            what = f"{source}: key {digest[:12]}..."
            if not isinstance(entry, dict):
                raise KeyFileError(f"{what} must map to an object")
            unknown = sorted(set(entry) - _KEY_FIELDS)
            if unknown:
                raise KeyFileError(
                    f"{what} has unknown field(s) {', '.join(unknown)}; accepted:"
                    f" {', '.join(sorted(_KEY_FIELDS))}"
                )
            identity = entry.get("identity")
            if not isinstance(identity, str) or not identity.strip():
                raise KeyFileError(f"{what}: identity must be a non-empty string")
            roles = entry.get("roles")
            if (
                not isinstance(roles, list)
                or not roles
                or not all(isinstance(r, str) and r in ROLES for r in roles)
            ):
                raise KeyFileError(
                    f"{what}: roles must be a non-empty list of {', '.join(ROLES)}, got {roles!r}"
                )
            execute = entry.get("execute", False)
            if not isinstance(execute, bool):
                raise KeyFileError(f"{what}: execute must be true or false, got {execute!r}")
            out[digest.lower()] = ApiKey(identity.strip(), frozenset(roles), execute)
        return cls(out)

    def copy(self) -> KeyRing:
        """A key ring of the same keys (adding to it leaves this one as it is)."""
        return KeyRing(self._by_hash)

    def merged(self, other: KeyRing) -> KeyRing:
        """These keys and ``other``'s (``other`` wins on the same hash)."""
        return KeyRing({**self._by_hash, **other._by_hash})

    def add_token(self, token: str, key: ApiKey) -> None:
        """Add ``key`` for the plaintext ``token`` (kept by its hash)."""
        self._by_hash[token_hash(token)] = key

    def lookup(self, token: str | None) -> ApiKey | None:
        """The key of ``token``, or None (a dict lookup of its hash: no timing on the token)."""
        if not token:
            return None
        return self._by_hash.get(token_hash(token))

    def api_keys(self) -> list[ApiKey]:
        """Every key (without its hash)."""
        return list(self._by_hash.values())

    def __len__(self) -> int:
        """How many keys the ring holds."""
        return len(self._by_hash)

    def __bool__(self) -> bool:
        """Whether the ring holds a key (an engine without keys is open)."""
        return bool(self._by_hash)


def bearer_token(headers: Mapping[bytes, bytes]) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None.

    The scheme is matched in any case (RFC 7235).
    """
    raw = headers.get(b"authorization")
    if not raw:
        return None
    try:
        scheme, _, token = raw.decode("latin-1").strip().partition(" ")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        return None
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


def request_token(headers: Mapping[bytes, bytes]) -> str | None:
    """The API key a request presents, or None.

    Either ``Authorization: Bearer <token>`` or ``X-API-Key: <token>`` (what the public
    conformance runner sends). Both headers with different tokens are refused (None): a request
    presents one key.

    >>> request_token({b"x-api-key": b" k1 "}), request_token({b"authorization": b"Bearer k1"})
    ('k1', 'k1')
    >>> request_token({b"authorization": b"Bearer k1", b"x-api-key": b"k2"}) is None
    True
    """
    bearer = bearer_token(headers)
    raw = headers.get(b"x-api-key")
    header = raw.decode("latin-1").strip() if raw else ""
    if bearer and header and bearer != header:
        return None
    return bearer or header or None


def trace_id(headers: Mapping[bytes, bytes]) -> str | None:
    """The trace id of a W3C ``traceparent`` header, or None when absent or malformed."""
    raw = headers.get(b"traceparent")
    if not raw:
        return None
    match = _TRACEPARENT.match(raw.decode("latin-1").strip().lower())
    if match is None or set(match.group(1)) == {"0"}:
        return None
    return match.group(1)


@dataclass(frozen=True)
class Caller:
    """Who sent the current MCP request.

    Attributes:
        key: their key (None when the engine has no keys).
        trace_id: the trace id of the request's ``traceparent``.
    """

    key: ApiKey | None = None
    trace_id: str | None = None

    @property
    def identity(self) -> str | None:
        """The identity of the caller's key (None without one)."""
        return None if self.key is None else self.key.identity


CALLER: ContextVar[Caller | None] = ContextVar("algenta_engine_caller", default=None)
"""Set by the server for the duration of each tools/call."""


def current_caller() -> Caller:
    """The caller of the tools/call being served (anonymous outside of one)."""
    return CALLER.get() or Caller()
