"""The operator's side on the served graph (``langgraph dev`` on a free port, real tokens):
operators see only what waits for them, and the review clients' answers behave as on the
library graph (``docs/ARCHITECTURE.md``, invariant 15).

- Which gates a thread waits on, and who decided, are thread metadata the graph keeps itself
  (``algenta_graph.governance.visibility``: the server's in-process SDK client); the auth filters
  give ``operator:<gate>`` the threads waiting on that gate plus those it decided, ``operator``
  every waiting thread plus those it decided, an agent its own, an auditor everything. Checked
  over the whole threads API: search, get, state, history, and the stream of a thread's runs.
- A bad answer is refused at the API (the run fails with the ``response_schema``'s error, which
  names it) and changes nothing; the interrupt publishes its ``response_schema``.
- Agent Chat UI's "mark as resolved" (``command: {goto: END}``) and Agent Inbox's
  (``updateState(values=None, asNode=END)``) are refused; Agent Chat UI's exact resume (input
  ``{}`` and a command) answers an escalation on a thread the operator does not own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from guarantee_support import figure
from served_support import CONFIG, langgraph_dev

from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.governance.visibility import DECIDED_KEY, WAITING_KEY
from algenta_graph.serving.auth import ENV_AUTH_FILE, token_digest

pytestmark = pytest.mark.timeout(900)

TOKENS = {
    "tok-alice": ("alice", ["agent"]),
    "tok-bob": ("bob", ["agent"]),
    "tok-ana": ("ana", ["operator"]),
    "tok-cleo": ("cleo", ["operator:confidence"]),
    "tok-gus": ("gus", ["operator:risk_floor"]),
    "tok-audrey": ("audrey", ["auditor"]),
}
ASSISTANT = "governed_agent"


def write_tokens(path: Path) -> Path:
    table = {
        token_digest(token): {"identity": identity, "roles": roles}
        for token, (identity, roles) in TOKENS.items()
    }
    path.write_text(json.dumps({"tokens": table}))
    return path


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer tok-{who}"}


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


@contextmanager
def http_client(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=120) as client:
        yield client


def wait(http: httpx.Client, who: str, thread: str, **body: Any) -> Any:
    """``POST /threads/{thread}/runs/wait`` as ``who``; the response (status checked by callers)."""
    return http.post(
        f"/threads/{thread}/runs/wait",
        json={"assistant_id": ASSISTANT, **body},
        headers=bearer(who),
    )


def resume(http: httpx.Client, who: str, thread: str, **body: Any) -> tuple[str, str]:
    """An operator's answer as a run of its own (``POST /threads/{thread}/runs``, as Agent
    Inbox sends it): the run's final status, and its output as the auditor joins it."""
    made = http.post(
        f"/threads/{thread}/runs",
        json={"assistant_id": ASSISTANT, **body},
        headers=bearer(who),
    )
    assert made.status_code == 200, made.text
    run = made.json()["run_id"]
    joined = http.get(f"/threads/{thread}/runs/{run}/join", headers=bearer("audrey"))
    assert joined.status_code == 200, joined.text
    status = http.get(f"/threads/{thread}/runs/{run}", headers=bearer("audrey")).json()["status"]
    return str(status), joined.text


def state(http: httpx.Client, thread: str) -> Any:
    response = http.get(f"/threads/{thread}/state", headers=bearer("audrey"))
    assert response.status_code == 200, response.text
    return response.json()


def interrupts(snapshot: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [i for t in snapshot["tasks"] for i in t.get("interrupts") or []]


def log_decision(http: httpx.Client, who: str, thread: str, **fields: Any) -> str:
    text = " ".join(f"{k}={v}" for k, v in fields.items())
    answer = wait(
        http, who, thread, input=user(f"log_decision chosen_action=raise_price {text} risk_p95=0.5")
    )
    assert answer.status_code == 200, answer.text
    messages = state(http, thread)["values"]["messages"]
    return str(
        next(
            m["artifact"]["structured_content"]["decision_id"]
            for m in reversed(messages)
            if m.get("type") == "tool" and m.get("name") == "log_decision"
        )
    )


def escalate(http: httpx.Client, who: str, thread: str, decision: str, hook: str) -> Any:
    answer = wait(
        http, who, thread, input=user(f"execute_decision decision_id={decision} webhook_url={hook}")
    )
    assert answer.status_code == 200, answer.text
    snapshot = state(http, thread)
    [asked] = interrupts(snapshot)
    return snapshot, asked


def new_thread(http: httpx.Client, who: str) -> str:
    made = http.post("/threads", json={}, headers=bearer(who))
    assert made.status_code == 200, made.text
    return str(made.json()["thread_id"])


def metadata(http: httpx.Client, thread: str) -> dict[str, Any]:
    return dict(http.get(f"/threads/{thread}", headers=bearer("audrey")).json()["metadata"])


def read(http: httpx.Client, who: str, endpoint: str, thread: str, run: str) -> bool:
    """Whether ``who`` gets ``thread`` from ``endpoint`` (a refusal is a 403/404, or a joined
    stream's single ``error`` event)."""
    if endpoint == "search":
        found = http.post("/threads/search", json={"limit": 100}, headers=bearer(who))
        assert found.status_code == 200, found.text
        return thread in {t["thread_id"] for t in found.json()}
    if endpoint == "stream":
        path = f"/threads/{thread}/runs/{run}/stream"
        with http.stream("GET", path, headers=bearer(who)) as response:
            if response.status_code != 200:
                assert response.status_code in (403, 404), response.status_code
                return False
            text = response.read().decode()
        events = re.findall(r"^event: *(\S+)", text, flags=re.M)
        return events != ["error"]
    method, path = {
        "get": ("GET", f"/threads/{thread}"),
        "state": ("GET", f"/threads/{thread}/state"),
        "history": ("POST", f"/threads/{thread}/history"),
    }[endpoint]
    response = http.request(
        method, path, headers=bearer(who), json={} if method == "POST" else None
    )
    assert response.status_code in (200, 403, 404), (endpoint, response.status_code)
    return response.status_code == 200


ENDPOINTS = ("search", "get", "state", "history", "stream")


def last_run(http: httpx.Client, thread: str) -> str:
    runs = http.get(f"/threads/{thread}/runs", headers=bearer("audrey")).json()
    return str(runs[0]["run_id"])


def test_operators_see_only_what_waits_for_them_and_answers_behave_as_in_the_library(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    env = {
        "ALGENTA_BASE_URL": engine.url,
        "ALGENTA_OPERATOR_KEY_IS_AGENT_KEY": "1",  # the reference engine here has no keys
        "ALGENTA_PROFILE": "execute",
        "ALGENTA_MODEL": "demo",
        ENV_AUTH_FILE: str(write_tokens(tmp_path / "auth.json")),
    }
    with (
        langgraph_dev(CONFIG, workdir=tmp_path / "server", env=env) as server,
        http_client(server.url) as http,
    ):
        hook = webhook.url
        # T1 (alice): waits on the confidence gate; T2 (bob): on the risk floor; T3 (alice):
        # waits on nothing; T4 (bob): a confidence escalation cleo already declined
        t1, t2, t3, t4 = (new_thread(http, w) for w in ("alice", "bob", "alice", "bob"))
        shaky = log_decision(http, "alice", t1, confidence=0.3, expected_value=40, risk_p5=0.1)
        _, asked1 = escalate(http, "alice", t1, shaky, hook)
        risky = log_decision(http, "bob", t2, confidence=0.9, expected_value=40, risk_p5=-0.9)
        _, asked2 = escalate(http, "bob", t2, risky, hook)
        assert asked2["value"]["gate"] == "risk_floor"
        log_decision(http, "alice", t3, confidence=0.9, expected_value=40, risk_p5=0.1)
        other = log_decision(http, "bob", t4, confidence=0.3, expected_value=40, risk_p5=0.1)
        escalate(http, "bob", t4, other, hook)
        # cleo declines T4 as Agent Chat UI sends it: input {} and a resume command
        status, _ = resume(
            http,
            "cleo",
            t4,
            input={},
            command={"resume": {"decisions": [{"type": "reject", "message": "not now"}]}},
        )
        assert status == "success"
        [record] = state(http, t4)["values"]["operator_decisions"]
        assert (record["operator"], record["roles"], record["verdict"]) == (
            "cleo",
            ["operator:confidence"],
            "declined",
        )
        # the graph keeps who waits on what, and who decided, in the thread metadata
        assert metadata(http, t1)[WAITING_KEY] == ["confidence"]
        assert metadata(http, t2)[WAITING_KEY] == ["risk_floor"]
        assert WAITING_KEY not in metadata(http, t3)
        assert (metadata(http, t4)[WAITING_KEY], metadata(http, t4)[DECIDED_KEY]) == ([], ["cleo"])
        # ... which no client may set
        forged = http.patch(
            f"/threads/{t3}",
            json={"metadata": {WAITING_KEY: ["confidence"]}},
            headers=bearer("alice"),
        )
        assert forged.status_code == 403 and WAITING_KEY in forged.text
        made = http.post(
            "/threads", json={"metadata": {DECIDED_KEY: ["cleo"]}}, headers=bearer("bob")
        )
        assert DECIDED_KEY not in made.json()["metadata"]

        # 1. who sees which thread, over the whole threads API
        threads = {"t1": t1, "t2": t2, "t3": t3, "t4": t4}
        runs = {name: last_run(http, tid) for name, tid in threads.items()}
        visible = {
            "alice": {"t1", "t3"},
            "bob": {"t2", "t4"},
            "ana": {"t1", "t2"},  # every waiting thread
            "cleo": {"t1", "t4"},  # waiting on confidence, and the one she decided
            "gus": {"t2"},  # waiting on the risk floor
            "audrey": {"t1", "t2", "t3", "t4"},
        }
        leaks = hidden = checks = 0
        for who, expected in visible.items():
            for name, tid in threads.items():
                for endpoint in ENDPOINTS:
                    seen = read(http, who, endpoint, tid, runs[name])
                    checks += 1
                    if seen and name not in expected:
                        leaks += 1
                        print(f"LEAK {who} {endpoint} {name}")
                    if not seen and name in expected:
                        hidden += 1
                        print(f"HIDDEN {who} {endpoint} {name}")
        figure(
            "operator_visibility",
            roles=len(visible),
            threads=len(threads),
            endpoints=len(ENDPOINTS),
            checks=checks,
            leaks=leaks,
        )
        assert leaks == 0 and hidden == 0

        # 2. the interrupt publishes its response_schema; a bad answer is refused at the API,
        #    naming what is wrong, and changes nothing
        assert asked1["response_schema"]["title"] == "EscalationAnswer"
        before = state(http, t1)
        for who, answer, needle in (
            ("ana", {"decisions": [{"type": "approve"}] * 2}, "at most 1 item"),
            ("ana", {"decisions": [{"type": "respond"}]}, "respond.message"),
            ("gus", {"decisions": [{"type": "approve"}]}, "'gus' may not answer a confidence"),
            ("ana", {"decisions": [{"type": "approve", "digest": "sha256:0"}]}, "stale answer"),
        ):
            status, output = resume(http, who, t1, input={}, command={"resume": answer})
            assert status == "error" and needle in output, (status, output)
            after = state(http, t1)
            assert [i["id"] for i in interrupts(after)] == [asked1["id"]]
            assert after["values"]["operator_decisions"] == before["values"]["operator_decisions"]
            assert metadata(http, t1)[WAITING_KEY] == ["confidence"]
        # 3. "mark as resolved": Agent Chat UI's goto END, Agent Inbox's updateState to END
        resolved = wait(http, "ana", t1, input={}, command={"goto": "__end__"})
        assert resolved.status_code == 403 and "only be a resume" in resolved.text
        inbox = http.post(
            f"/threads/{t1}/state",
            json={"values": None, "as_node": "__end__"},
            headers=bearer("alice"),
        )
        assert inbox.status_code == 403, inbox.text
        assert [i["id"] for i in interrupts(state(http, t1))] == [asked1["id"]]
        assert engine.executions(shaky) == []

        # 4. ana approves T1 as Agent Chat UI does (a thread she does not own)
        status, _ = resume(
            http, "ana", t1, input={}, command={"resume": {"decisions": [{"type": "approve"}]}}
        )
        assert status == "success"
        done = state(http, t1)
        [record] = done["values"]["operator_decisions"]
        assert (record["operator"], record["verdict"], record["result"]) == (
            "ana",
            "approved",
            "receipt",
        )
        assert record["digest"] == asked1["value"]["digest"]
        assert record["interrupt_id"] == asked1["id"]
        assert done["next"] == [] and len(engine.executions(shaky)) == 1
        assert metadata(http, t1)[WAITING_KEY] == [] and metadata(http, t1)[DECIDED_KEY] == ["ana"]
        # ana still sees the thread she decided; cleo, who did not, no longer does
        assert read(http, "ana", "get", t1, runs["t1"])
        assert not read(http, "cleo", "get", t1, runs["t1"])
