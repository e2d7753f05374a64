"""Authentication and roles of the served graph (``algenta_graph.serving.auth``), in-process:
the token file loader (digests, a malformed or missing file, re-read when it changes, fail
closed), ``Authorization`` and ``x-api-key``, the role rules. On a real ``langgraph dev``:
``tests/served/test_auth.py``; the record guard: ``tests/unit/governance/test_record_guard.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from served_support import write_auth_file

from algenta_graph.errors import AuthFileError
from algenta_graph.serving.auth import (
    ENV_AUTH_FILE,
    _mentions_records,
    is_operator,
    load_auth_file,
    served_authorize_operator,
    token_digest,
)

# ---------------------------------------------------------------------------------------------
# the token file


def test_auth_file_loads_digests_and_looks_tokens_up(tmp_path: Path) -> None:
    path = write_auth_file(
        tmp_path / "auth.json",
        {"t-ana": ("ana", ["operator", "agent"]), "t-gus": ("gus", ["operator:confidence"])},
    )
    table = load_auth_file(path)
    assert len(table) == 2
    ana = table.lookup("t-ana")
    assert ana is not None and (ana.identity, ana.roles) == ("ana", ("operator", "agent"))
    assert table.lookup("t-gus") is not None
    assert table.lookup("t-nobody") is None
    # the stored digest is not itself a token
    assert table.lookup(token_digest("t-ana")) is None
    assert "t-ana" not in path.read_text()


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not JSON"),
        ("[]", "top level"),
        ('{"tokens": {}, "extra": 1}', "unknown key"),
        ('{"users": {}}', "unknown key"),
        ('{"tokens": []}', "tokens: expected an object"),
        ('{"tokens": {}}', "no tokens"),
        ('{"tokens": {"s3cret": {"identity": "ana", "roles": ["agent"]}}}', "SHA-256"),
        ('{"tokens": {"' + "A" * 64 + '": {"identity": "ana", "roles": ["agent"]}}}', "SHA-256"),
        ('{"tokens": {"' + "a" * 64 + '": {"identity": "", "roles": ["agent"]}}}', "identity"),
        ('{"tokens": {"' + "a" * 64 + '": {"identity": "ana"}}}', "roles"),
        ('{"tokens": {"' + "a" * 64 + '": {"identity": "ana", "roles": []}}}', "roles"),
        (
            '{"tokens": {"' + "a" * 64 + '": {"identity": "ana", "roles": ["admin"]}}}',
            "unknown role 'admin'",
        ),
        (
            '{"tokens": {"' + "a" * 64 + '": {"identity": "ana", "roles": ["operator:gate9"]}}}',
            "unknown role 'operator:gate9'",
        ),
        (
            '{"tokens": {"' + "a" * 64 + '": {"identity": "ana", "roles": ["agent"], "x": 1}}}',
            "unknown key",
        ),
        (
            '{"tokens": {"' + "a" * 64 + '": {"identity": "anonymous", "roles": ["agent"]}}}',
            "reserved",
        ),
    ],
)
def test_a_malformed_auth_file_is_named_with_its_problem(
    tmp_path: Path, content: str, needle: str
) -> None:
    path = tmp_path / "auth.json"
    path.write_text(content)
    with pytest.raises(AuthFileError, match=re.escape(needle)) as caught:
        load_auth_file(path)
    assert str(path) in str(caught.value) and ENV_AUTH_FILE in str(caught.value)


def test_a_missing_auth_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(AuthFileError, match="cannot be read") as caught:
        load_auth_file(tmp_path / "nope.json")
    assert "nope.json" in str(caught.value)


async def test_the_token_file_is_reread_when_it_changes_and_fails_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from langgraph_sdk import Auth

    from algenta_graph.serving.auth import authenticate
    from algenta_graph.serving.tokens import TokenSource

    path = write_auth_file(tmp_path / "auth.json", {"tok-a": ("alice", ["agent"])})
    monkeypatch.setenv(ENV_AUTH_FILE, str(path))
    tokens = TokenSource()
    monkeypatch.setattr("algenta_graph.serving.tokens.TOKENS", tokens)
    user = await authenticate("Bearer tok-a")
    assert (user["identity"], user["permissions"]) == ("alice", ["agent"])
    # revoked: the file changes, the next request sees it, without a restart
    write_auth_file(path, {"tok-b": ("bob", ["auditor"])})
    os.utime(path, ns=(1, 1))
    with pytest.raises(Auth.exceptions.HTTPException) as caught:
        await authenticate("Bearer tok-a")
    assert caught.value.status_code == 401
    assert (await authenticate("bearer tok-b"))["identity"] == "bob"
    # broken or removed: every request is refused until it is fixed
    path.write_text("{broken")
    for header in ("Bearer tok-b", None, "Basic x"):
        with pytest.raises(Auth.exceptions.HTTPException) as caught:
            await authenticate(header)
        assert caught.value.status_code == 401
    path.unlink()
    with pytest.raises(Auth.exceptions.HTTPException):
        await authenticate("Bearer tok-b")
    # unset: the server runs open, every request an unauthenticated "anonymous"
    monkeypatch.delenv(ENV_AUTH_FILE)
    assert (await authenticate(None))["is_authenticated"] is False


async def test_a_token_in_x_api_key_authenticates_and_the_mcp_endpoint_refuses_auditors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langgraph_sdk import Auth

    from algenta_graph.serving.auth import authenticate
    from algenta_graph.serving.tokens import TokenSource

    path = write_auth_file(
        tmp_path / "auth.json", {"tok-a": ("alice", ["agent"]), "tok-au": ("au", ["auditor"])}
    )
    monkeypatch.setenv(ENV_AUTH_FILE, str(path))
    monkeypatch.setattr("algenta_graph.serving.tokens.TOKENS", TokenSource())
    # what langgraph_sdk.get_client(api_key=...) sends; the header name in any case
    for name in (b"x-api-key", b"X-Api-Key"):
        user = await authenticate(None, {name: b" tok-a "})
        assert (user["identity"], user["permissions"]) == ("alice", ["agent"])
    # Authorization wins when both are there
    user = await authenticate("Bearer tok-au", {b"x-api-key": b"tok-a"})
    assert user["identity"] == "au"
    for headers in ({b"x-api-key": b""}, {b"x-api-key": b"nope"}, {b"other": b"tok-a"}, None):
        with pytest.raises(Auth.exceptions.HTTPException) as caught:
            await authenticate(None, headers)
        assert caught.value.status_code == 401
    # the server's own /mcp endpoint runs the graph: an auditor gets 403 there (not a 500)
    for mcp in ("/mcp", "/mcp/"):
        with pytest.raises(Auth.exceptions.HTTPException) as caught:
            await authenticate("Bearer tok-au", None, mcp)
        assert caught.value.status_code == 403 and "auditor" in str(caught.value.detail)
    assert (await authenticate("Bearer tok-a", None, "/mcp"))["identity"] == "alice"
    assert (await authenticate("Bearer tok-au", None, "/threads/search"))["identity"] == "au"
    assert (await authenticate("Bearer tok-au", None, "/mcpx"))["identity"] == "au"


# ---------------------------------------------------------------------------------------------
# the rules


def _config(identity: str | None, roles: list[str], authenticated: bool = True) -> Any:
    user = (
        None
        if identity is None
        else {"identity": identity, "permissions": roles, "is_authenticated": authenticated}
    )
    return {"configurable": {"langgraph_auth_user": user, "langgraph_auth_permissions": roles}}


def test_served_authorize_operator_reads_the_authenticated_roles(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENV_AUTH_FILE, str(tmp_path / "auth.json"))
    allow = served_authorize_operator
    assert allow("ana", "confidence", _config("ana", ["operator"]))
    assert allow("gus", "confidence", _config("gus", ["operator:confidence"]))
    assert not allow("gus", "risk_floor", _config("gus", ["operator:confidence"]))
    assert not allow("alice", "confidence", _config("alice", ["agent"]))
    assert not allow("audrey", "confidence", _config("audrey", ["auditor"]))
    # the identity must be the authenticated one; an unauthenticated or missing user: no one
    assert not allow("ana", "confidence", _config("bob", ["operator"]))
    assert not allow("ana", "confidence", _config("ana", ["operator"], authenticated=False))
    assert not allow("ana", "confidence", _config(None, []))
    assert not allow("ana", "confidence", {})
    # served open (no auth file): anyone, as without auth
    monkeypatch.delenv(ENV_AUTH_FILE)
    assert allow("ana", "confidence", _config("anonymous", [], authenticated=False))
    assert allow("ana", "confidence", {})


def test_operator_roles_and_record_mentions() -> None:
    assert is_operator(["operator"]) and is_operator(["operator:risk_floor"])
    assert not is_operator(["agent", "auditor"])
    assert is_operator(["operator:risk_floor"], "risk_floor")
    assert not is_operator(["operator:risk_floor"], "confidence")
    assert _mentions_records({"receipts": []})
    assert _mentions_records([("operator_decisions", [{}])])
    assert _mentions_records([{"denials": []}])
    assert not _mentions_records({"messages": []})
    assert not _mentions_records(None)
