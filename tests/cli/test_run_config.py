"""``algenta-graph run`` reads the configuration the served graph reads, and fails cleanly.

Against the reference engine over real HTTP, as real processes:

- ``--config FILE`` and ``ALGENTA_CONFIG`` are read (here a gate on any tool, which holds the
  call for an operator) and the run says which file it read; an option given on the command
  line wins over the file; a bad file is one line naming the file and the key, before anything
  is created;
- an engine URL without ``/mcp`` gets a hint naming the URL to try;
- a run that fails before writing a thread leaves no checkpoint file (nor the directories made
  for it) behind; a file that already held a thread is kept.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from cli_support import assert_one_line_error, cli

from algenta_graph.audit.records import read_records
from algenta_graph.engine import ReferenceEngine

pytestmark = pytest.mark.timeout(300)

PROMPT = "What can this engine do? Show me its contract."


def _gated(tmp_path: Path, engine: ReferenceEngine) -> Path:
    config = tmp_path / "agent.toml"
    config.write_text(
        f'base_url = "{engine.url}"\n[tool_gates]\nrequire_approval = ["get_contract"]\n'
    )
    return config


def _pending(stdout: str) -> dict[str, object]:
    [line] = [json.loads(x) for x in stdout.splitlines() if x.startswith('{"pending_escalation"')]
    value = line["pending_escalation"]
    assert isinstance(value, dict)
    return value


def test_run_reads_the_configuration_file(engine: ReferenceEngine, tmp_path: Path) -> None:
    config = _gated(tmp_path, engine)
    db = tmp_path / "runs.sqlite"
    held = cli("run", PROMPT, "--config", str(config), "--db", str(db))
    assert held.returncode == 3, (held.stdout[-2000:], held.stderr)
    assert f"(configuration: {config})" in held.stdout
    assert _pending(held.stdout)["tool"] == "algenta.get_contract"
    assert "the approval gate held the call of algenta.get_contract({})" in held.stdout
    [denial] = read_records(db)["cli"]["denials"]
    assert denial["gate"] == "approval"

    # an option on the command line wins over the file: the approval gate only reports
    told = cli(
        "run", PROMPT, "--config", str(config), "--db", str(db), "--thread", "told",
        "--on-denial", '{"approval": "report"}',
    )  # fmt: skip
    assert told.returncode == 0, (told.stdout[-2000:], told.stderr)
    assert "pending_escalation" not in told.stdout
    assert [d["policy"] for d in read_records(db)["told"]["denials"]] == ["report"]


def test_run_reads_the_file_algenta_config_names(engine: ReferenceEngine, tmp_path: Path) -> None:
    config = _gated(tmp_path, engine)
    db = tmp_path / "runs.sqlite"
    held = cli("run", PROMPT, "--db", str(db), env={"ALGENTA_CONFIG": str(config)})
    assert held.returncode == 3, (held.stdout[-2000:], held.stderr)
    assert f"(configuration: {config})" in held.stdout
    assert _pending(held.stdout)["gate"] == "approval"


def test_a_bad_configuration_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("top_k = 0\n")
    db = tmp_path / "new" / "runs.sqlite"
    proc = cli("run", PROMPT, "--config", str(config), "--db", str(db))
    assert_one_line_error(proc, str(config), "top_k")
    assert not (tmp_path / "new").exists()
    missing = cli("run", PROMPT, "--db", str(db), env={"ALGENTA_CONFIG": str(tmp_path / "no.toml")})
    assert_one_line_error(missing, "no.toml", "no such file")


def test_an_engine_url_without_mcp_gets_a_hint(engine: ReferenceEngine, tmp_path: Path) -> None:
    root = engine.url.removesuffix("/mcp")
    proc = cli("run", "hello", "--base-url", root, "--db", str(tmp_path / "runs.sqlite"))
    assert_one_line_error(proc, f"{root} has no /mcp path", f"try {engine.url}", code=1)
    proc = cli("run", "hello", "--base-url", root + "/", "--db", str(tmp_path / "runs.sqlite"))
    assert_one_line_error(proc, f"try {engine.url}", code=1)


def _closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/mcp"


def test_a_failed_run_leaves_no_checkpoint_file_behind(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    url = _closed_url()
    workdir = tmp_path / "work"
    workdir.mkdir()
    default = cli("run", "hello", "--base-url", url, cwd=workdir)
    assert_one_line_error(default, url, code=1)
    assert list(workdir.iterdir()) == []  # no algenta-graph.sqlite

    nested = tmp_path / "a" / "b" / "runs.sqlite"
    assert_one_line_error(cli("run", "hello", "--base-url", url, "--db", str(nested)), code=1)
    assert not (tmp_path / "a").exists()

    # a file that holds a thread is kept, whatever fails later
    kept = tmp_path / "kept.sqlite"
    done = cli("run", PROMPT, "--base-url", engine.url, "--db", str(kept))
    assert done.returncode == 0, done.stderr
    assert_one_line_error(cli("run", "again", "--base-url", url, "--db", str(kept)), code=1)
    assert "cli" in read_records(kept)
