"""``algenta-graph config check``: a near-miss key is refused with the valid key it was meant to
be, found along the key's own table (``[escalation] require_reasons`` -> ``require_reason``); a
key like no valid one gets no guess."""

from __future__ import annotations

from pathlib import Path

import pytest


def check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    import algenta_graph.cli as cli_module

    code = cli_module.main(["config", "check", "--no-connect", str(path)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("topk = 5\n", "topk: unknown key; did you mean top_k?"),
        (
            "[escalation]\nrequire_reasons = true\n",
            "escalation.require_reasons: unknown key; did you mean require_reason?",
        ),
        ("[usage]\nhalf_life = 3\n", "usage.half_life: unknown key; did you mean half_life_days?"),
        (
            '[extra_servers.crm]\ntransport = "streamable_http"\nurl = "http://127.0.0.1:9/mcp"\n'
            "header = {}\n",
            "extra_servers.crm.header: unknown key; did you mean headers?",
        ),
        (
            '[[tool_gates.budgets]]\ntool = "crm.*"\nthread_limt = 3\n',
            "tool_gates.budgets.0.thread_limt: unknown key; did you mean thread_limit?",
        ),
        ("zzz = 1\n", "zzz: unknown key"),
    ],
)
def test_a_near_miss_key_names_the_key_meant(
    text: str,
    line: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("ALGENTA_CONFIG", "ALGENTA_TOP_K", "ALGENTA_PROFILE", "ALGENTA_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "agent.toml"
    path.write_text(text)
    code, err = check(path, capsys)
    assert code == 2
    assert err.splitlines() == [f"algenta-graph config check: error: {path}: {line}"]
