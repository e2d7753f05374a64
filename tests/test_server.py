"""The served graph: ``langgraph dev`` with the repository's ``langgraph.json``, driven by
``langgraph_sdk`` against a real reference engine and a real webhook receiver.

The dev server runs as a subprocess in its own process group, with its working directory in a
temporary directory (it keeps its state in ``.langgraph_api/`` under the working directory), and
is stopped by its process-group id. Its real URL is read from its log: it prints the ``API:``
line ANSI-coloured even into a file, before the app is ready, and it silently moves to another
port when the requested one is taken.
"""

from __future__ import annotations

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

import httpx
import pytest

from algenta_graph._net import free_port

REPO = Path(__file__).resolve().parents[1]
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
# the harness itself, on a trivial graph


_TRIVIAL_GRAPH = """
from typing import TypedDict

from langgraph.graph import END, START, StateGraph


class S(TypedDict):
    n: int


async def bump(state: S) -> S:
    return {"n": state["n"] + 1}


def make_graph():
    builder = StateGraph(S)
    builder.add_node("bump", bump)
    builder.add_edge(START, "bump")
    builder.add_edge("bump", END)
    return builder.compile()
"""


@pytest.mark.slow
def test_harness_reads_the_real_url_when_the_port_is_taken(tmp_path: Path) -> None:
    """``langgraph dev`` moves off a taken port without failing; the harness follows it."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "trivial.py").write_text(_TRIVIAL_GRAPH)
    (project / "langgraph.json").write_text(
        '{"dependencies": ["."], "graphs": {"trivial": "./trivial.py:make_graph"}}'
    )
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with langgraph_dev(
            project / "langgraph.json", workdir=project, env={}, port=port
        ) as server:
            assert not server.url.endswith(f":{port}")
            assert "already in use" in server.log()
            run = httpx.post(
                f"{server.url}/runs/wait",
                json={"assistant_id": "trivial", "input": {"n": 41}},
                timeout=60,
            )
            assert run.status_code == 200, run.text
            assert run.json() == {"n": 42}
            pid = server.pid
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    assert not (project / ".langgraph_api").exists()
