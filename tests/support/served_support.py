"""The served graph's test harness: ``langgraph dev`` as a subprocess, and what the tests of
the served graph share (the auth file, a user turn, a bearer header, the interrupt of a
paused thread, a low-confidence decision logged through the server).

The dev server runs as a subprocess in its own process group, with its working directory in a
temporary directory (it keeps its state in ``.langgraph_api/`` under the working directory), and
is stopped by its process-group id. Its real URL is read from its log: it prints the ``API:``
line ANSI-coloured even into a file, before the app is ready, and it silently moves to another
port when the requested one is taken.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from repo_paths import REPO

from algenta_graph._net import free_port
from algenta_graph.serving.auth import token_digest

CONFIG = REPO / "langgraph.json"

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_API_LINE = re.compile(r"API:\s*(https?://[^\s]+)")


@dataclass(frozen=True)
class DevServer:
    """A running ``langgraph dev`` process."""

    url: str
    pid: int
    log_path: Path

    def log(self) -> str:
        """The server's log so far, without ANSI colours."""
        return _ANSI.sub("", self.log_path.read_text(errors="replace"))


def _read_api_url(log_path: Path) -> str | None:
    if not log_path.exists():
        return None
    match = _API_LINE.search(_ANSI.sub("", log_path.read_text(errors="replace")))
    return match.group(1).rstrip("/") if match else None


@contextmanager
def langgraph_dev(
    config: Path,
    *,
    workdir: Path,
    env: Mapping[str, str],
    port: int | None = None,
    startup_timeout: float = 120.0,
    extra_args: tuple[str, ...] = (),
) -> Iterator[DevServer]:
    """Run ``langgraph dev`` on ``config`` until the block exits; yield its real URL.

    ``workdir`` becomes the server's working directory, so its ``.langgraph_api/`` state lands
    there (and is removed on exit). The process is stopped by its process group.
    """
    executable = shutil.which("langgraph")
    assert executable, "the `langgraph` command is missing: pip install 'langgraph-cli[inmem]'"
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "langgraph-dev.log"
    requested = port or free_port()
    command = [
        executable,
        "dev",
        "--no-browser",
        "--no-reload",
        "--port",
        str(requested),
        "--config",
        str(config),
        *extra_args,
    ]
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            command,
            cwd=workdir,
            env={**os.environ, **env},
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        url = _wait_until_ready(proc, log_path, startup_timeout)
        yield DevServer(url=url, pid=proc.pid, log_path=log_path)
    finally:
        _stop_process_group(proc)
        shutil.rmtree(workdir / ".langgraph_api", ignore_errors=True)


def _wait_until_ready(proc: subprocess.Popen[bytes], log_path: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    url: str | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"langgraph dev exited with {proc.returncode} before it was ready:\n"
                + _ANSI.sub("", log_path.read_text(errors="replace"))[-4000:]
            )
        url = url or _read_api_url(log_path)
        if url is not None:
            try:
                if httpx.get(f"{url}/ok", timeout=2.0).status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
        time.sleep(0.25)
    raise AssertionError(
        f"langgraph dev was not ready within {timeout:.0f}s (url={url}):\n"
        + _ANSI.sub("", log_path.read_text(errors="replace"))[-4000:]
    )


def _stop_process_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


# ---------------------------------------------------------------------------------------------
# shared by the tests of the served graph: the token file, requests, answers


OPERATOR_TOKENS: dict[str, tuple[str, list[str]]] = {
    "tok-alice": ("alice", ["agent"]),
    "tok-ana": ("ana", ["operator"]),
    "tok-olga": ("olga", ["operator"]),
    "tok-audrey": ("audrey", ["auditor"]),
}
"""An agent, two operators racing each other, an auditor: the auth file of the escalation tests."""


def write_auth_file(path: Path, tokens: Mapping[str, tuple[str, list[str]]]) -> Path:
    path.write_text(
        json.dumps(
            {
                "tokens": {
                    token_digest(token): {"identity": identity, "roles": roles}
                    for token, (identity, roles) in tokens.items()
                }
            }
        )
    )
    return path


def user_turn(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def values_of(value: object) -> dict[str, Any]:
    """A run's or a thread state's values: the SDK types them as a dict or a list of dicts
    (a list for a graph whose state is not a mapping; the served graphs' states are)."""
    assert isinstance(value, dict), value
    return value


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def interrupt_value(state: Mapping[str, Any]) -> dict[str, Any]:
    [task] = [t for t in state["tasks"] if t.get("interrupts")]
    return dict(task["interrupts"][-1]["value"])


async def log_shaky_decision(client: Any, thread: str) -> str:
    """Log a low-confidence decision on ``thread``; its decision_id."""
    await client.runs.wait(
        thread,
        "governed_agent",
        input=user_turn(
            "log_decision chosen_action=raise_price expected_value=40 confidence=0.3 "
            "risk_p5=-0.1 risk_p95=0.5"
        ),
    )
    state = await client.threads.get_state(thread)
    return str(
        next(
            m["artifact"]["structured_content"]["decision_id"]
            for m in reversed(state["values"]["messages"])
            if m.get("type") == "tool" and m.get("name") == "log_decision"
        )
    )


async def escalate(client: Any, webhook_url: str) -> tuple[str, str, dict[str, Any]]:
    """A new thread of the caller's waiting on the confidence gate: (thread, decision, the
    interrupt's value)."""
    thread = (await client.threads.create())["thread_id"]
    decision = await log_shaky_decision(client, thread)
    await client.runs.wait(
        thread,
        "governed_agent",
        input=user_turn(f"execute_decision decision_id={decision} webhook_url={webhook_url}"),
    )
    state = await client.threads.get_state(thread)
    assert state["next"] == ["denial_handler_confidence"], state["next"]
    return thread, decision, interrupt_value(state)
