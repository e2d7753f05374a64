"""``algenta-graph config check [FILE]``: the resolved configuration, secrets masked; exit 2 on
any error, each problem one line; an unreachable extra server a warning (a real closed port)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from algenta_graph._net import free_port
from algenta_graph.engine import ReferenceEngine

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """``algenta-graph ARGS`` in-process: (exit code, stdout, stderr)."""
    import algenta_graph.cli as cli_module

    for name in ("ALGENTA_CONFIG", "ALGENTA_TOP_K", "ALGENTA_PROFILE", "ALGENTA_API_KEY"):
        monkeypatch.delenv(name, raising=False)

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli_module.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_check_prints_the_resolved_configuration_with_secrets_masked(
    cli: Run, engine: ReferenceEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(
        f'base_url = "{engine.url}"\nprofile = "execute"\napi_key = {{ env = "ENGINE_KEY" }}\n'
        f'[extra_servers.engine_again]\ntransport = "streamable_http"\nurl = "{engine.url}"\n'
        'headers = { Authorization = { env = "ENGINE_KEY", prefix = "Bearer " } }\n'
    )
    monkeypatch.setenv("ENGINE_KEY", "engine-s3cret")
    monkeypatch.setenv("ALGENTA_TOP_K", "4")
    code, out, err = cli("config", "check", str(path))
    assert code == 0, err
    assert err == ""  # the extra server answered: no warning
    assert "engine-s3cret" not in out
    shown = json.loads(out)
    assert (shown["profile"], shown["top_k"]) == ("execute", 4)
    assert shown["api_key"] == {"env": "ENGINE_KEY", "value": "****"}
    assert shown["sources"]["top_k"] == "environment variable ALGENTA_TOP_K"
    assert shown["sources"]["profile"] == str(path)

    # the file named by ALGENTA_CONFIG, by default
    monkeypatch.setenv("ALGENTA_CONFIG", str(path))
    code, again, _ = cli("config", "check")
    assert code == 0 and json.loads(again) == shown


def test_check_exits_2_with_one_line_per_problem(cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(
        'topk = 3\nembeddings = "no_such_package.emb:make"\n'
        '[extra_servers.crm]\ntransport = "sse"\nurl = "http://127.0.0.1:9/mcp"\n'
        'headers = { Authorization = { env = "CRM_TOKEN_NOT_SET" } }\n'
    )
    code, out, err = cli("config", "check", str(path))
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"algenta-graph config check: error: {path}: topk: unknown key; did you mean top_k?"
    ]
    path.write_text(
        'embeddings = "no_such_package.emb:make"\n'
        '[extra_servers.crm]\ntransport = "sse"\nurl = "http://127.0.0.1:9/mcp"\n'
        'headers = { Authorization = { env = "CRM_TOKEN_NOT_SET" } }\n'
    )
    code, out, err = cli("config", "check", str(path))
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"algenta-graph config check: error: {path}: extra_servers.crm.headers.Authorization: "
        "the environment variable CRM_TOKEN_NOT_SET is not set",
        f"algenta-graph config check: error: {path}: embeddings: cannot import "
        "'no_such_package.emb' (ModuleNotFoundError: No module named 'no_such_package')",
    ]
    code, _, err = cli("config", "check", str(tmp_path / "missing.toml"))
    assert code == 2 and "missing.toml: (file): no such file" in err


def test_an_unreachable_extra_server_is_a_warning_not_an_error(cli: Run, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    path = tmp_path / "agent.json"
    path.write_text(json.dumps({"extra_servers": {"crm": {"transport": "sse", "url": dead}}}))
    code, out, err = cli("config", "check", str(path))
    assert code == 0 and json.loads(out)["extra_servers"]["crm"]["url"] == dead
    assert f"warning: {path}: extra_servers.crm: unreachable at {dead}" in err
    code, _, err = cli("config", "check", "--no-connect", str(path))
    assert code == 0 and err == ""


def test_check_refuses_a_rule_that_names_no_tool_naming_the_nearest(
    cli: Run, engine: ReferenceEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``require_approval = ["crm.delete_custmer"]``: check connects to the engine and the CRM,
    and refuses the rule (exit 2), naming the tool meant; nothing on stdout."""
    from crm_support import TOKEN, running_crm

    monkeypatch.setenv("CRM_TOKEN", TOKEN)
    with running_crm() as crm:
        path = tmp_path / "agent.toml"
        path.write_text(
            f'base_url = "{engine.url}"\nprofile = "execute"\n'
            f'[extra_servers.crm]\ntransport = "streamable_http"\nurl = "{crm.url}"\n'
            'headers = { Authorization = { env = "CRM_TOKEN", prefix = "Bearer " } }\n'
            '[tool_gates]\nrequire_approval = ["crm.delete_custmer"]\n'
        )
        code, out, err = cli("config", "check", str(path))
    assert code == 2 and out == ""
    [line] = err.splitlines()
    assert line.startswith(f"algenta-graph config check: error: {path}: tool_gates.")
    assert "'crm.delete_custmer' names no tool" in line
    assert "crm.delete_customer" in line.partition("nearest:")[2]


def test_check_prints_each_rule_with_the_tools_it_governs(
    cli: Run, engine: ReferenceEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crm_support import TOKEN, running_crm

    monkeypatch.setenv("CRM_TOKEN", TOKEN)
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    with running_crm(destructive=True) as crm:
        path = tmp_path / "agent.toml"
        path.write_text(
            f'base_url = "{engine.url}"\nprofile = "execute"\n'
            f'[extra_servers.crm]\ntransport = "streamable_http"\nurl = "{crm.url}"\n'
            'headers = { Authorization = { env = "CRM_TOKEN", prefix = "Bearer " } }\n'
            f'[extra_servers.billing]\ntransport = "streamable_http"\nurl = "{dead}"\n'
            "[tool_gates]\n"
            'require_approval = ["delete_customer", "billing.refund"]\n'
            "[[tool_gates.budgets]]\n"
            'tool = "crm.*"\n'
            "thread_limit = 20\n"
            "[tool_gates.servers.billing]\n"
            "optional = true\n"
        )
        code, out, err = cli("config", "check", str(path))
        assert code == 0, err
        assert f"extra_servers.billing: unreachable at {dead}" in err
        assert "tool_gates" not in err
        shown = json.loads(out)
        assert shown["tool_gates_resolved"] == [
            {
                "rule": "require_approval 'delete_customer'",
                "gate": "approval",
                "tools": ["crm.delete_customer"],
            },
            {
                "rule": "require_approval 'billing.refund'",
                "gate": "approval",
                "tools": [],
                "note": "server 'billing' is unreachable and optional: kept for its return",
            },
            {
                "rule": "budget 'crm.*' (thread_limit=20, run_limit=None)",
                "gate": "budget",
                "tools": [
                    "crm.purge_customer",
                    "crm.email_customer",
                    "crm.lookup_customer",
                    "crm.delete_customer",
                    "crm.refund",
                    "crm.customers.delete",
                ],
            },
            {
                "rule": "servers.billing.unlisted = 'allow'",
                "gate": "approval",
                "tools": [],
                "note": "server 'billing' is unreachable",
            },
            {
                "rule": "destructiveHint: held for an operator (allow releases a tool)",
                "gate": "approval",
                "tools": ["crm.purge_customer"],
            },
        ]
        code, out, err = cli("config", "check", "--no-connect", str(path))
    assert code == 0 and "tool_gates_resolved" not in json.loads(out)
    assert err.splitlines() == [
        f"algenta-graph config check: warning: {path}: tool_gates: not resolved against the "
        "catalog (--no-connect): a rule that names no tool is not found"
    ]


def test_check_with_rules_needs_the_engine(cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    path.write_text(f'base_url = "{dead}"\n[tool_gates]\nrequire_approval = ["x"]\n')
    code, out, err = cli("config", "check", str(path))
    assert code == 2 and out == ""
    [line] = err.splitlines()
    assert line.startswith(f"algenta-graph config check: error: {path}: base_url: the engine is ")
    assert dead in line and "--no-connect" in line
