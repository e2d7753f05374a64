"""Every bad argument of ``algenta-graph`` is one line on stderr naming the bad value and a
non-zero exit, never a traceback; ``--version`` and ``--help`` tell the truth.

Each case runs the real console command in a subprocess. None of them needs an engine: the
values are refused before anything connects (``--base-url`` points at a closed port anyway).
"""

from __future__ import annotations

import json
import socket
from importlib import metadata

import pytest
from cli_support import assert_one_line_error, cli

from algenta_graph.governance.contract import DEFAULT_PROFILE, PROFILE_NAMES
from algenta_graph.governance.gates import DEFAULT_POLICIES, GATE_NAMES, POLICIES, parse_on_denial

pytestmark = pytest.mark.timeout(300)


def _closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/mcp"


def test_version_prints_the_installed_version() -> None:
    proc = cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"algenta-graph {metadata.version('algenta-graph')}"


def test_help_shows_every_default_and_choice() -> None:
    run = " ".join(cli("run", "--help").stdout.split())  # unwrapped
    for profile in PROFILE_NAMES:
        assert profile in run
    # every option's default is the configuration's (--config, $ALGENTA_CONFIG), else the graph's
    assert f"(default: the configuration's, else {DEFAULT_PROFILE})" in run
    assert "default: algenta-graph.sqlite" in run
    for gate in GATE_NAMES:
        assert f"{gate} {DEFAULT_POLICIES[gate]}" in run  # each gate and its default policy
    for word in (
        "|".join(POLICIES),
        "default: the configuration's, else 5",
        "default: cli",
        "ALGENTA_BASE_URL",
        "default: $ALGENTA_CONFIG",
    ):
        assert word in run, word
    receipts = " ".join(cli("receipts", "--help").stdout.split())
    assert "default: algenta-graph.sqlite" in receipts and "never written" in receipts
    demo = " ".join(cli("demo", "--help").stdout.split())
    assert "default: a temporary file" in demo


def test_every_subcommand_is_registered() -> None:
    """The console script lists (and runs) every subcommand, ``config check`` included."""
    listed = cli("--help").stdout
    for name in ("demo", "run", "receipts", "escalations", "config", "engine", "init", "tokens"):
        assert f"    {name}" in listed, (name, listed)
    check = cli("config", "check", "--help")
    assert check.returncode == 0 and "secret masked" in " ".join(check.stdout.split())


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--on-denial", "{bad"], ["--on-denial is not valid JSON", "'{bad'"]),
        (["--on-denial", "[1]"], ["--on-denial must be a policy", "'[1]'"]),
        (["--on-denial", "sometimes"], ["'sometimes'"]),
        (
            ["--on-denial", '{"unknwon": "halt"}'],
            [
                "'unknwon'",
                "the gates are idempotency, confidence, risk_floor, approval, budget, arguments",
            ],
        ),
        (["--on-denial", '{"confidence": "nope"}'], ["--on-denial['confidence']", "'nope'"]),
        (["--profile", "bogus"], ["'bogus'", "observe"]),
        (["--top-k", "0"], ["--top-k", "got 0"]),
        (["--top-k", "-5"], ["--top-k", "got -5"]),
        (["--top-k", "many"], ["--top-k", "'many'"]),
        (["--model", "nosuch:model"], ["--model 'nosuch:model'"]),
        (["--resume", "{bad"], ["--resume", "'{bad'"]),
        (["--resume", '"override"'], ["--resume", "JSON object"]),
        (["--thread", " "], ["--thread"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) and v and v[0].startswith("--") else None,
)
def test_a_bad_run_argument_is_one_line_naming_it(args: list[str], words: list[str]) -> None:
    proc = cli("run", "hello", "--base-url", _closed_url(), "--db", "/nonexistent/x.sqlite", *args)
    line = assert_one_line_error(proc, *words)
    assert line.startswith("algenta-graph run: error:")
    assert "unknown'" not in line.replace("'unknwon'", "")  # never a pseudo-gate named unknown


def test_a_prompt_that_is_not_utf8_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "x.sqlite"
    proc = cli("run", b"execute \xff\xfe now", "--base-url", _closed_url(), "--db", str(db))
    assert_one_line_error(proc, "PROMPT is not valid UTF-8", "\\xff\\xfe")
    assert not db.exists()


def test_an_unreachable_engine_is_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = _closed_url()
    proc = cli("run", "hello", "--base-url", url, "--db", str(tmp_path / "x.sqlite"))
    assert_one_line_error(proc, url, code=1)


def test_a_bare_policy_applies_to_every_gate_and_json_to_the_named_ones() -> None:
    assert parse_on_denial("halt") == dict.fromkeys(GATE_NAMES, "halt")
    assert parse_on_denial(' "report" ') == dict.fromkeys(GATE_NAMES, "report")
    assert parse_on_denial(json.dumps({"risk_floor": "halt"})) == {"risk_floor": "halt"}
    with pytest.raises(
        ValueError,
        match="the gates are idempotency, confidence, risk_floor, approval, budget, arguments",
    ):
        parse_on_denial('{"unknown": "halt"}')


def test_a_missing_subcommand_or_option_value_is_one_line() -> None:
    assert_one_line_error(cli(), "COMMAND")
    assert_one_line_error(cli("run", "--profile"), "--profile")
