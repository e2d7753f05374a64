"""Bad input to the reference engine: a clear error naming what is wrong, never a traceback,
a crash or a silent default. The CLI runs as a real process; requests go over real HTTP."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from engine_support import engine_process, text

from algenta_graph._net import free_port
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.engine.auth import token_hash

Session = Callable[..., Any]
ENGINE = [sys.executable, "-m", "algenta_graph.cli", "engine"]
HEADERS = {"Accept": "application/json, text/event-stream"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENGINE, *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )


# -- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--risk-floor", "nan", "finite"),
        ("--risk-floor", "inf", "finite"),
        ("--risk-floor", "-inf", "finite"),
        ("--risk-floor", "-0.5", ">= 0"),
        ("--risk-floor", "lots", "must be a number"),
        ("--min-confidence", "1.5", "between 0 and 1"),
        ("--min-confidence", "-0.1", "between 0 and 1"),
        ("--min-confidence", "nan", "finite"),
        ("--port", "70000", "between 1 and 65535"),
        ("--port", "0", "between 1 and 65535"),
        ("--port", "80.5", "whole number"),
    ],
)
def test_a_bad_option_value_is_one_clear_error_before_serving(
    option: str, value: str, says: str
) -> None:
    port = () if option == "--port" else ("--port", str(free_port()))
    proc = _run(f"{option}={value}", *port)  # = form: argparse takes -inf for an option
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert option in last and value in last and says in last, last


def test_a_port_in_use_is_one_clear_error_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _run("--port", str(port), "--db", str(tmp_path / "e.sqlite"))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"algenta-graph engine: error: port {port} on 127.0.0.1 is already in use; stop what"
        " holds it or pick another --port"
    ]


def test_unusable_db_and_keys_files_are_one_clear_error(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a database" * 100)
    bad_keys = tmp_path / "keys.json"
    bad_keys.write_text(json.dumps({"not-a-hash": {"identity": "x", "roles": ["agent"]}}))
    bad_role = tmp_path / "roles.json"
    bad_role.write_text(json.dumps({token_hash("t"): {"identity": "x", "roles": ["root"]}}))
    cases = [
        (("--db", str(tmp_path)), "is a directory"),
        (("--db", str(garbage)), str(garbage)),
        (("--keys-file", str(tmp_path / "missing.json")), "no such file"),
        (("--keys-file", str(garbage)), "not valid JSON"),
        (("--keys-file", str(bad_keys)), "SHA-256"),
        (("--keys-file", str(bad_role)), "roles must be"),
    ]
    for args, says in cases:
        db = () if "--db" in args else ("--db", str(tmp_path / "ok.sqlite"))
        proc = _run(*args, *db, "--port", str(free_port()))
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1, (args, proc.stderr)
        assert len(lines) == 1 and says in lines[0], (args, proc.stderr)
        assert lines[0].startswith("algenta-graph engine: error: ")
    assert garbage.read_bytes() == b"this is not a database" * 100  # never written to


def test_help_states_every_default_and_version_prints_it() -> None:
    helped = _run("--help")
    assert helped.returncode == 0
    out = " ".join(helped.stdout.split())
    assert "algenta-engine.sqlite in the working directory" in out
    for option in (
        "--host",
        "--port",
        "--db",
        "--api-key",
        "--keys-file",
        "--relaxed",
        "--strict",
        "--min-confidence",
        "--risk-floor",
        "--allow-webhook-host",
        "--denials",
    ):
        described = out.split(f" {option} ", 2)[-1].split(" --", 1)[0]
        assert "default" in described, (option, described)
    assert "between 1 and 60" in out  # timeout_seconds
    version = _run("--version")
    assert version.returncode == 0 and version.stdout.startswith("algenta-graph engine 0.")


def test_the_default_db_is_created_in_the_working_directory(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [*ENGINE, "--port", str(port)], cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not _listening(port):
            assert proc.poll() is None and time.monotonic() < deadline, "engine did not start"
            time.sleep(0.05)
        assert (tmp_path / "algenta-engine.sqlite").is_file()
        assert (tmp_path / "algenta-engine.sqlite.lock").read_text().strip() == str(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0 and "Traceback" not in err
    assert "db algenta-engine.sqlite" in err


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# -- requests -----------------------------------------------------------------------------------


@pytest.fixture
def cli_engine(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real engine process with an API key; yields (MCP URL, its log file)."""
    port, log = free_port(), tmp_path / "engine.log"
    with engine_process(port, log, "--db", str(tmp_path / "e.sqlite"), "--api-key", "k1"):
        yield f"http://127.0.0.1:{port}/mcp", log


async def test_a_deeply_nested_body_is_400_without_a_traceback(
    cli_engine: tuple[str, Path], mcp_session: Session
) -> None:
    url, log = cli_engine
    auth = {"Authorization": "Bearer k1", "Content-Type": "application/json"}
    deep = b"[" * 200_000
    also_deep = json.dumps({**INIT, "params": {"x": [[[[[]]]]] * 1}}).replace(
        "[[[[[]]]]]", "[" * 500 + "]" * 500
    )
    async with httpx.AsyncClient(headers=HEADERS, timeout=30) as http:
        answers = [
            await http.post(url, content=deep, headers=auth),
            await http.post(url, content=also_deep, headers=auth),
        ]
    for answer in answers:
        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == "invalid_json"
        assert "nested deeper than 100" in answer.json()["error"]["message"]
    async with mcp_session(url, api_key="k1") as s:  # and it keeps serving
        assert not (await s.call_tool("get_contract", {})).isError
    output = log.read_text()
    assert "Traceback" not in output and "Exception" not in output, output


async def test_a_deeply_nested_body_without_auth_is_400_too(engine: ReferenceEngine) -> None:
    async with httpx.AsyncClient(headers=HEADERS, timeout=30) as http:
        answer = await http.post(
            engine.url, content=b"[" * 200_000, headers={"Content-Type": "application/json"}
        )
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_json"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook\x00",
        "http://127.0.0.1:9/ho ok",
        "http://127.0.0.1:9/hook\r\nX-Injected: 1",
        "http://127.0.0.1:9/\x7fhook",
        "http://127.0.0.1:99999/hook",
        "http://[::1/hook",
    ],
)
async def test_a_malformed_webhook_url_is_invalid_input_not_internal_error(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session, url: str
) -> None:
    async with mcp_session(engine.url) as s:
        logged = await s.call_tool(
            "log_decision",
            {
                "chosen_action": "a",
                "expected_value": 1.0,
                "confidence": 0.9,
                "risk_p5": 0.1,
                "risk_p95": 0.2,
            },
        )
        decision_id = json.loads(text(logged))["decision_id"]
        result = await s.call_tool(
            "execute_decision", {"decision_id": decision_id, "webhook_url": url}
        )
    error = json.loads(text(result))["error"]
    assert result.isError and error["code"] == "invalid_webhook_url", error
    assert "webhook_url" in error["message"]
    assert engine.executions() == [] and webhook.received == []


async def test_a_wrong_key_fails_the_connection_itself_with_engine_auth_error(
    cli_engine: tuple[str, Path],
) -> None:
    from algenta_graph.connection.engine import EngineConnection
    from algenta_graph.errors import EngineAuthError

    url, _ = cli_engine
    for key in ("wrong", None):
        connection = EngineConnection(url, api_key=key, timeout=10)
        with pytest.raises(EngineAuthError) as info:
            await connection.open()  # initialize / tools/list: before any tool call
        await connection.aclose()
        assert "401" in str(info.value) and url in str(info.value)
    async with EngineConnection(url, api_key="k1", timeout=10) as ok:
        assert "execute_decision" in ok.advertised_tool_names


def test_engine_options_are_checked_in_python_too(tmp_path: Path) -> None:
    for bad in (
        {"risk_floor": float("nan")},
        {"risk_floor": float("inf")},
        {"min_confidence": float("nan")},
        {"port": 70000},
        {"relaxed": "no"},
    ):
        with pytest.raises(ValueError) as info:
            ReferenceEngine(db=tmp_path / "x.sqlite", **bad)
        assert next(iter(bad)) in str(info.value)


def test_negative_zero_is_zero_one_policy_one_snapshot(tmp_path: Path) -> None:
    minus = ReferenceEngine(db=tmp_path / "a.sqlite", risk_floor=-0.0, min_confidence=-0.0)
    plus = ReferenceEngine(db=tmp_path / "b.sqlite", risk_floor=0.0, min_confidence=0.0)
    assert str(minus.policy.risk_floor) == "0.0" and str(minus.policy.min_confidence) == "0.0"
    assert minus.policy.snapshot_id == plus.policy.snapshot_id
