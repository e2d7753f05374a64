"""``algenta-graph init`` and ``algenta-graph tokens``: the real command, in a temporary directory.

- ``init`` writes ``langgraph.json``, ``agent.toml``, ``.env`` and an empty tokens file;
  ``config check`` accepts the ``agent.toml`` as written; the ``langgraph.json`` names the
  installed package (never the repository's ``"."`` alone) and the same entry points as the
  repository's own; the ``.env`` and the repository's ``.env.example`` are one text; an existing
  file is refused by name and nothing is written, unless ``--force``.
- ``tokens add`` prints a token once, keeps only its SHA-256 in the format the server reads
  (the server's own loader finds the identity and roles by the token), refuses an unknown role,
  a second token for a name and a name the server would refuse, each without changing the file;
  ``list`` shows no token; ``revoke`` removes the name's token; ``ALGENTA_AUTH_FILE`` and
  ``--file`` choose the file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from cli_support import assert_one_line_error, cli
from repo_paths import REPO

from algenta_graph.cli.scaffold import SCAFFOLD_FILES, env_file
from algenta_graph.serving.tokens import load_auth_file

pytestmark = pytest.mark.timeout(300)


def test_init_writes_files_that_check_and_refuses_to_overwrite(tmp_path: Path) -> None:
    app = tmp_path / "app"
    done = cli("init", str(app))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in app.iterdir()) == sorted(SCAFFOLD_FILES)
    assert "algenta-graph tokens add" in done.stdout and "langgraph dev" in done.stdout

    checked = cli("config", "check", "agent.toml", cwd=app)
    assert checked.returncode == 0, checked.stderr
    shown = json.loads(checked.stdout)
    assert (shown["profile"], shown["model"], shown["base_url"]) == (
        "execute",
        "demo",
        "http://localhost:8000/mcp",
    )

    scaffold = json.loads((app / "langgraph.json").read_text())
    repository = json.loads((REPO / "langgraph.json").read_text())
    assert "algenta-graph" in scaffold["dependencies"]
    for key in ("graphs", "env", "auth", "http"):
        assert scaffold[key] == repository[key], key
    env = (app / ".env").read_text()
    assert "\nALGENTA_CONFIG=agent.toml\n" in env and "\nALGENTA_AUTH_FILE=tokens.json\n" in env
    assert (REPO / ".env.example").read_text() == env_file()
    assert (app / "tokens.json").read_text().strip() == '{\n  "tokens": {}\n}'
    for private in (".env", "tokens.json"):
        assert stat.S_IMODE((app / private).stat().st_mode) == 0o600, private

    (app / "agent.toml").write_text("top_k = 3\n")
    again = cli("init", str(app))
    line = assert_one_line_error(again, "already has", "nothing was written", "--force")
    for name in SCAFFOLD_FILES:
        assert name in line
    assert (app / "agent.toml").read_text() == "top_k = 3\n"
    forced = cli("init", str(app), "--force")
    assert forced.returncode == 0, forced.stderr
    assert (app / "agent.toml").read_text().startswith("# agent.toml")

    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / ".env").write_text("MINE=1\n")
    assert_one_line_error(cli("init", str(partial)), "already has .env")
    assert sorted(p.name for p in partial.iterdir()) == [".env"]  # nothing else written


def test_tokens_add_list_revoke(tmp_path: Path) -> None:
    assert cli("init", str(tmp_path)).returncode == 0
    added = cli("tokens", "add", "ana", "--role", "operator", cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert len(token) >= 40 and "\n" not in token
    assert "shown once" in added.stderr and "tokens.json" in added.stderr
    assert token not in (tmp_path / "tokens.json").read_text()  # only its digest is kept
    principal = load_auth_file(tmp_path / "tokens.json").lookup(token)
    assert principal is not None
    assert (principal.identity, principal.roles) == ("ana", ("operator",))

    gated = cli(
        "tokens", "add", "bo", "--role", "agent", "--role", "operator:confidence", cwd=tmp_path
    )
    assert gated.returncode == 0, gated.stderr
    listed = cli("tokens", "list", cwd=tmp_path)
    assert listed.returncode == 0 and token not in listed.stdout
    assert [line.split()[:2] for line in listed.stdout.splitlines()] == [
        ["ana", "operator"],
        ["bo", "agent,operator:confidence"],
    ]

    before = (tmp_path / "tokens.json").read_text()
    assert_one_line_error(
        cli("tokens", "add", "ana", "--role", "agent", cwd=tmp_path), "'ana' already has a token"
    )
    admin = cli("tokens", "add", "x", "--role", "admin", cwd=tmp_path)
    assert_one_line_error(admin, "unknown role 'admin'", "auditor")
    reserved = cli("tokens", "add", "anonymous", "--role", "agent", cwd=tmp_path)
    assert_one_line_error(reserved, "'anonymous'", "reserved")
    assert (tmp_path / "tokens.json").read_text() == before

    revoked = cli("tokens", "revoke", "ana", cwd=tmp_path)
    assert revoked.returncode == 0 and "revoked 1 token(s) of ana" in revoked.stdout
    assert load_auth_file(tmp_path / "tokens.json").lookup(token) is None
    assert_one_line_error(cli("tokens", "revoke", "ana", cwd=tmp_path), "no token of 'ana'", "bo")
    last = cli("tokens", "revoke", "bo", cwd=tmp_path)
    assert last.returncode == 0 and "no token is left" in last.stdout


def test_tokens_use_the_file_named_by_file_or_algenta_auth_file(tmp_path: Path) -> None:
    named = tmp_path / "auth" / "named.json"
    added = cli("tokens", "add", "ana", "--role", "auditor", "--file", str(named), cwd=tmp_path)
    assert added.returncode == 0 and "created" in added.stderr, added.stderr
    assert load_auth_file(named).lookup(added.stdout.strip()) is not None

    by_env = cli("tokens", "list", cwd=tmp_path, env={"ALGENTA_AUTH_FILE": str(named)})
    assert by_env.returncode == 0 and by_env.stdout.startswith("ana"), by_env.stderr
    assert_one_line_error(cli("tokens", "list", cwd=tmp_path), "no tokens file at tokens.json")

    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"tokens": {"not-a-digest": {"identity": "x", "roles": []}}}))
    refused = cli("tokens", "add", "ana", "--role", "agent", "--file", str(broken))
    assert_one_line_error(refused, str(broken), "nothing was changed")
    assert json.loads(broken.read_text())["tokens"] == {
        "not-a-digest": {"identity": "x", "roles": []}
    }
    assert not any(p.name.startswith(".broken.json") for p in os.scandir(tmp_path))
