"""``algenta-graph tokens add | list | revoke``: the served graph's tokens file, without one-liners.

The file is the one ``ALGENTA_AUTH_FILE`` names (``--file`` wins; default ``tokens.json``, the
one ``algenta-graph init`` writes), in the format :mod:`algenta_graph.serving.tokens` reads:
``{"tokens": {"<sha256 of the token>": {"identity": ..., "roles": [...]}}}``. Every change is
checked by that module's own parser before it is written, then written whole (a temporary file
renamed over it, owner-only), so a running server, which re-reads the file when it changes,
never sees half of it.

``add NAME --role ROLE`` makes a random token, keeps only its SHA-256 and prints the token once
on stdout (``TOKEN=$(algenta-graph tokens add ana --role operator)``; what was done goes to
stderr); ``list`` shows each identity, its roles and its digest's first characters; ``revoke
NAME`` removes every token of ``NAME``. An empty file (``{"tokens": {}}``, as ``init`` writes
it) is accepted here; the server refuses it until a token is added.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any

from algenta_graph.cli.common import EXIT_FAILED
from algenta_graph.errors import CommandError

__all__ = ["DEFAULT_TOKENS_FILE", "add_tokens_parser", "empty_tokens_file", "write_tokens_file"]

DEFAULT_TOKENS_FILE = "tokens.json"
"""The tokens file when neither ``--file`` nor ``ALGENTA_AUTH_FILE`` names one."""


def empty_tokens_file() -> str:
    """The text of a tokens file with no token yet (what ``init`` writes)."""
    return json.dumps({"tokens": {}}, indent=2) + "\n"


def _read(path: Path) -> dict[str, dict[str, Any]]:
    """The tokens of ``path`` (``{digest: entry}``), checked as the server checks them."""
    from algenta_graph.errors import AuthFileError
    from algenta_graph.serving.tokens import load_auth_file

    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CommandError(
            f"no tokens file at {path}: `algenta-graph init` writes one, `tokens add` creates "
            "it, or name another with --file (or ALGENTA_AUTH_FILE)"
        ) from None
    except (OSError, ValueError) as exc:
        raise CommandError(f"tokens file {path}: cannot be read as JSON ({exc})") from None
    if raw == {"tokens": {}}:
        return {}
    try:
        load_auth_file(path)
    except AuthFileError as exc:
        raise CommandError(f"{exc}; fix it by hand first, nothing was changed") from None
    return {str(k): dict(v) for k, v in raw["tokens"].items()}


def write_tokens_file(path: Path, tokens: dict[str, dict[str, Any]]) -> None:
    """Write ``tokens`` to ``path`` whole, owner-only, after the server's parser accepts them.

    Raises:
        CommandError: the server would refuse the result (named), or the file cannot be written.
    """
    from algenta_graph.errors import AuthFileError
    from algenta_graph.serving.tokens import parse_auth_file

    data = {"tokens": tokens}
    if tokens:
        try:
            parse_auth_file(data, str(path))
        except AuthFileError as exc:
            raise CommandError(f"{exc}; nothing was changed") from None
    text = json.dumps(data, indent=2) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(temp, 0o600)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise CommandError(f"tokens file {path}: cannot be written ({exc})", EXIT_FAILED) from None


def _file(args: argparse.Namespace) -> Path:
    from algenta_graph.serving.tokens import ENV_AUTH_FILE

    return Path(args.file or os.environ.get(ENV_AUTH_FILE) or DEFAULT_TOKENS_FILE)


def _role(text: str) -> str:
    from algenta_graph.serving.tokens import GATE_ROLES, ROLES

    if text not in ROLES and text not in GATE_ROLES:
        raise argparse.ArgumentTypeError(
            f"unknown role {text!r}; the roles are {', '.join((*ROLES, *GATE_ROLES))}"
        )
    return text


def _add(args: argparse.Namespace) -> int:
    from algenta_graph.serving.tokens import token_digest

    path = _file(args)
    tokens = _read(path) if path.exists() else {}
    name = args.name
    if any(entry.get("identity") == name for entry in tokens.values()):
        raise CommandError(
            f"{name!r} already has a token in {path}: `algenta-graph tokens revoke {name}` "
            "first to give it a new one"
        )
    token = secrets.token_urlsafe(32)
    roles = list(dict.fromkeys(args.roles))
    tokens[token_digest(token)] = {"identity": name, "roles": roles}
    created = not path.exists()
    write_tokens_file(path, tokens)
    print(token)
    print(
        f"{'created' if created else 'updated'} {path}: {name} ({', '.join(roles)}); the token "
        "above is shown once, only its SHA-256 is kept",
        file=sys.stderr,
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    path = _file(args)
    tokens = _read(path)
    if not tokens:
        print(f"{path}: no tokens (a server using it refuses every request)", file=sys.stderr)
        return 0
    rows = sorted(
        (str(e["identity"]), ",".join(e["roles"]), f"sha256:{d[:12]}...") for d, e in tokens.items()
    )
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    for identity, roles, digest in rows:
        print(f"{identity:<{widths[0]}}  {roles:<{widths[1]}}  {digest}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    path = _file(args)
    tokens = _read(path)
    kept = {d: e for d, e in tokens.items() if e.get("identity") != args.name}
    if len(kept) == len(tokens):
        known = ", ".join(sorted({str(e["identity"]) for e in tokens.values()})) or "none"
        raise CommandError(f"no token of {args.name!r} in {path} (identities: {known})")
    write_tokens_file(path, kept)
    left = "" if kept else "; no token is left: a server using it refuses every request"
    print(f"revoked {len(tokens) - len(kept)} token(s) of {args.name} in {path}{left}")
    return 0


def add_tokens_parser(sub: Any) -> None:
    """``algenta-graph tokens add | list | revoke``."""
    from algenta_graph.serving.tokens import ENV_AUTH_FILE, GATE_ROLES, ROLES

    p = sub.add_parser(
        "tokens",
        help="add, list or revoke the served graph's tokens (the ALGENTA_AUTH_FILE file)",
        description=(
            "Manage the tokens file the served graph and the inbox authenticate with: only each "
            "token's SHA-256 is kept, a new token is printed once."
        ),
    )
    actions = p.add_subparsers(dest="tokens_command", required=True, metavar="ACTION")
    file_help = (
        f"the tokens file (default: ${ENV_AUTH_FILE}, else {DEFAULT_TOKENS_FILE} in the working "
        "directory)"
    )
    add = actions.add_parser(
        "add",
        help="add a token for NAME and print it once",
        description=(
            "Make a random token for NAME with the given roles, keep its SHA-256 in the file "
            "and print the token once on stdout. The roles: agent (start runs, read its own "
            "threads), operator (answer every gate's escalations), operator:<gate> (that gate's "
            "only), auditor (read every thread)."
        ),
    )
    add.add_argument("name", metavar="NAME", help="the identity the token authenticates")
    add.add_argument(
        "--role",
        dest="roles",
        action="append",
        required=True,
        type=_role,
        metavar="ROLE",
        help=f"a role, repeatable: {', '.join((*ROLES, *GATE_ROLES))}",
    )
    add.add_argument("--file", default=None, help=file_help)
    add.set_defaults(handler=_add)
    listed = actions.add_parser("list", help="list the identities, their roles and digests")
    listed.add_argument("--file", default=None, help=file_help)
    listed.set_defaults(handler=_list)
    revoke = actions.add_parser("revoke", help="remove every token of NAME")
    revoke.add_argument("name", metavar="NAME", help="the identity whose tokens are removed")
    revoke.add_argument("--file", default=None, help=file_help)
    revoke.set_defaults(handler=_revoke)
