"""The operator inbox in process (Starlette's TestClient): the server-side session and its
cookie, CSRF, roles, the refusal to start without an auth file, escaping, the answers a form
builds, and every record and escalation put in words (``inbox.wording``).

What needs the served graph (the queue, answers, timelines) is tested in a real browser on
``langgraph dev`` (``tests/browser/test_inbox.py``); here the pages refuse before any API call.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from inbox_support import cookie_decodings
from langgraph.store.memory import InMemoryStore
from starlette.testclient import TestClient

from algenta_graph.errors import InboxConfigError
from algenta_graph.inbox import app as inbox
from algenta_graph.inbox import rendering, startup
from algenta_graph.inbox.escalation import EscalationView
from algenta_graph.inbox.form_tokens import LoginForms
from algenta_graph.inbox.resume import FormDecision, build_resume
from algenta_graph.inbox.session import (
    COOKIE,
    DEFAULT_IDLE_SECONDS,
    NAMESPACE,
    SessionStore,
)
from algenta_graph.inbox.waiting import QueueEntry
from algenta_graph.inbox.wording import (
    Facts,
    answer_effects,
    call_text,
    decision_inputs,
    escalation_about,
    outcome_line,
    record_line,
    thread_facts,
)
from algenta_graph.serving.auth import ENV_AUTH_FILE, token_digest

TOKENS = {
    "tok-ana": ("ana", ["operator"]),
    "tok-cleo": ("cleo", ["operator:confidence"]),
    "tok-alice": ("alice", ["agent"]),
    "tok-audrey": ("audrey", ["auditor"]),
}


@pytest.fixture
def auth_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "auth.json"
    table = {
        token_digest(t): {"identity": who, "roles": roles} for t, (who, roles) in TOKENS.items()
    }
    path.write_text(json.dumps({"tokens": table}))
    monkeypatch.setenv(ENV_AUTH_FILE, str(path))
    monkeypatch.delenv(startup.ENV_ALLOW_OPEN, raising=False)
    return path


class Clock:
    """The sessions' clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
def sessions(store: InMemoryStore, clock: Clock) -> SessionStore:
    return SessionStore(store, clock=clock)


def _app(sessions: SessionStore) -> Any:
    return inbox.create_app(sessions, LoginForms("unit-secret"))


@pytest.fixture
def client(auth_file: Path, sessions: SessionStore) -> Iterator[TestClient]:
    with TestClient(_app(sessions), base_url="http://t") as c:
        yield c


def signed_in(client: TestClient) -> bool:
    """Whether the client's session opens a page (the unit tier has no API behind it: a
    signed-in page answers 502, a refused session a redirect to sign in)."""
    page = client.get("/inbox/queue", follow_redirects=False)
    assert page.status_code in (303, 502), page.text[:300]
    return page.status_code == 502


def login(client: TestClient, token: str) -> Any:
    page = client.get("/inbox/login")
    assert page.status_code == 200
    csrf = page.text.split('name="csrf" value="')[1].split('"')[0]
    return client.post("/inbox/login", data={"csrf": csrf, "token": token}, follow_redirects=False)


# ----------------------------------------------------------------------- start-up


def test_without_an_auth_file_the_inbox_refuses_to_start_and_names_the_way_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV_AUTH_FILE, raising=False)
    monkeypatch.delenv(startup.ENV_ALLOW_OPEN, raising=False)
    with pytest.raises(InboxConfigError) as refused:
        startup.check_startup()
    assert ENV_AUTH_FILE in str(refused.value) and startup.ENV_ALLOW_OPEN in str(refused.value)
    app = inbox.create_app(SessionStore(InMemoryStore()), LoginForms("k"))
    # the server may run open on purpose: it starts, the inbox does not serve
    with TestClient(app) as refused_client:
        for path in ("/inbox/login", "/inbox/queue", "/inbox/threads"):
            response = refused_client.get(path, follow_redirects=False)
            assert response.status_code == 503 and ENV_AUTH_FILE in response.text, path
            assert startup.ENV_ALLOW_OPEN in response.text

    monkeypatch.setenv(startup.ENV_ALLOW_OPEN, "1")
    startup.check_startup()  # allowed on purpose: starts, and says it is open
    with TestClient(app) as open_client:
        page = open_client.get("/inbox/login")
    assert page.status_code == 200 and "runs OPEN" in page.text


# ----------------------------------------------------------------------- sign-in and roles


def test_an_operator_signs_in_once_and_gets_a_signed_httponly_strict_expiring_cookie(
    client: TestClient,
) -> None:
    response = login(client, "tok-ana")
    assert response.status_code == 303 and response.headers["location"] == "/inbox/queue"
    cookie = next(c for c in response.headers.get_list("set-cookie") if c.startswith(f"{COOKIE}="))
    attributes = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "samesite", "max-age", "path"} <= attributes
    assert "samesite=strict" in cookie.lower() and "path=/inbox" in cookie.lower()
    assert "max-age=28800" in cookie.lower()


def test_an_unknown_token_gets_401_and_a_token_without_an_operator_role_403(
    client: TestClient,
) -> None:
    unknown = login(client, "tok-nobody")
    assert unknown.status_code == 401 and "invalid token" in unknown.text
    agent = login(client, "tok-alice")
    assert agent.status_code == 403 and "no operator or auditor role" in agent.text
    assert COOKIE not in agent.cookies


def test_the_sign_in_form_needs_its_own_csrf_token(client: TestClient) -> None:
    client.get("/inbox/login")
    response = client.post("/inbox/login", data={"csrf": "forged", "token": "tok-ana"})
    assert response.status_code == 403 and "forged" in response.text
    assert COOKIE not in response.cookies


def test_an_auditor_reads_timelines_and_answers_nothing(client: TestClient) -> None:
    response = login(client, "tok-audrey")
    assert response.headers["location"] == "/inbox/threads"
    for path in ("/inbox/queue", "/inbox/queue/rows", "/inbox/escalations/t1/esc_1"):
        page = client.get(path)
        assert page.status_code == 403 and "may not answer escalations" in page.text, path
    posted = client.post("/inbox/escalations/t1/esc_1/answer", data={})
    assert posted.status_code == 403


def test_a_bare_inbox_leads_to_the_inbox_not_to_the_apis_401(client: TestClient) -> None:
    bare = client.get("/inbox?next=x", follow_redirects=False)
    assert (bare.status_code, bare.headers["location"]) == (307, "/inbox/?next=x")
    assert "script-src 'self'" in bare.headers["content-security-policy"]
    assert client.get("/inbox").url.path == "/inbox/login"


def test_without_a_session_a_page_asks_to_sign_in_and_a_form_is_refused(
    client: TestClient,
) -> None:
    page = client.get("/inbox/queue", follow_redirects=False)
    assert page.status_code == 303
    assert page.headers["location"] == "/inbox/login?next=%2Finbox%2Fqueue"
    posted = client.post("/inbox/escalations/t1/esc_1/answer", data={"csrf": "x"})
    assert posted.status_code == 401


def test_the_session_cookie_is_an_opaque_id_and_the_store_holds_no_token_in_clear(
    client: TestClient, store: InMemoryStore
) -> None:
    login(client, "tok-ana")
    cookie = client.cookies[COOKIE]
    assert all(b"tok-ana" not in decoded for decoded in cookie_decodings(cookie))
    assert len(base64.urlsafe_b64decode(cookie + "=")) == 32  # 256 random bits, nothing else
    [record] = store.search(NAMESPACE)
    assert record.key != cookie and cookie not in json.dumps(record.value)
    assert "tok-ana" not in json.dumps(record.value)  # sealed with a key from the cookie
    assert record.value["identity"] == "ana" and signed_in(client)


def test_signing_out_ends_the_session_on_the_server_so_a_replayed_cookie_is_refused(
    client: TestClient, sessions: SessionStore, store: InMemoryStore
) -> None:
    login(client, "tok-ana")
    cookie = client.cookies[COOKIE]
    with TestClient(_app(sessions), base_url="http://t") as other:
        other.cookies.set(COOKIE, cookie)
        assert signed_in(other)  # the live session, from another client
        page = client.get("/inbox/queue", follow_redirects=False)
        csrf = page.text.split('name="csrf" value="')[1].split('"')[0]
        out = client.post("/inbox/logout", data={"csrf": csrf}, follow_redirects=False)
        assert out.status_code == 303 and COOKIE not in client.cookies
        assert store.search(NAMESPACE) == []
        assert not signed_in(other)
        posted = other.post("/inbox/escalations/t1/esc_1/answer", data={"csrf": csrf})
        assert posted.status_code == 401


def test_a_session_ends_at_its_absolute_age_whatever_the_activity(
    client: TestClient, clock: Clock, store: InMemoryStore
) -> None:
    login(client, "tok-ana")
    for _ in range(20):  # a page every 25 minutes: never idle
        clock.now += 25 * 60
        if clock.now >= 1_700_000_000.0 + 8 * 3600:
            break
        assert signed_in(client)
    assert not signed_in(client)  # 8 hours after sign-in
    assert store.search(NAMESPACE) == []


def test_a_session_ends_when_idle_and_the_queues_own_refresh_is_not_activity(
    client: TestClient, clock: Clock, store: InMemoryStore
) -> None:
    login(client, "tok-ana")
    clock.now += DEFAULT_IDLE_SECONDS - 60
    assert signed_in(client)  # a page: the idle clock restarts
    for _ in range(3):  # the queue refreshing itself, with nobody at the page
        clock.now += (DEFAULT_IDLE_SECONDS - 1) / 3
        assert client.get("/inbox/queue/rows", follow_redirects=False).status_code != 303
    clock.now += 1  # 30 minutes after the last page opened
    assert client.get("/inbox/queue/rows", follow_redirects=False).status_code == 303
    assert store.search(NAMESPACE) == []


def test_a_cookie_that_names_no_session_is_no_session(client: TestClient) -> None:
    for cookie in ("", "x", "A" * 43, "A" * 5000):
        client.cookies.set(COOKIE, cookie)
        assert not signed_in(client), cookie


def test_signing_in_again_ends_the_earlier_session_and_sweeps_ended_ones(
    client: TestClient, clock: Clock, store: InMemoryStore
) -> None:
    login(client, "tok-ana")
    first = client.cookies[COOKIE]
    with TestClient(client.app, base_url="http://t") as forgotten:
        login(forgotten, "tok-cleo")  # never signed out
    clock.now += DEFAULT_IDLE_SECONDS + 1
    login(client, "tok-ana")
    assert client.cookies[COOKIE] != first
    # the earlier session of this browser ended, cleo's idle one swept: only the new one left
    assert [r.value["identity"] for r in store.search(NAMESPACE)] == ["ana"]
    client.cookies.set(COOKIE, first)
    assert not signed_in(client)


def test_without_a_store_signing_in_is_refused_with_what_to_do(auth_file: Path) -> None:
    with TestClient(inbox.create_app(login_forms=LoginForms("k")), base_url="http://t") as c:
        response = login(c, "tok-ana")
    assert response.status_code == 503 and "LangGraph server's store" in response.text
    assert COOKIE not in response.cookies


def test_a_form_with_a_forged_csrf_token_is_refused_before_anything_is_read_or_sent(
    client: TestClient,
) -> None:
    login(client, "tok-ana")
    response = client.post(
        "/inbox/escalations/t1/esc_1/answer",
        data={"csrf": "forged", "digest": "sha256:x", "decision-0": "approve", "reason-0": "r"},
    )
    assert response.status_code == 403 and "forged (CSRF)" in response.text
    # signing out needs the form's token too
    assert client.post("/inbox/logout", data={"csrf": "forged"}).status_code == 403


def test_every_page_carries_a_strict_content_security_policy(client: TestClient) -> None:
    headers = client.get("/inbox/login").headers
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "default-src 'none'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY" and headers["cache-control"] == "no-store"
    assert client.get("/inbox/static/inbox.js").status_code == 200


def test_after_sign_in_only_a_path_inside_the_inbox_is_followed() -> None:
    assert rendering.safe_next("/inbox/escalations/t/e") == "/inbox/escalations/t/e"
    for bad in ("https://evil.example/inbox/", "//evil.example/inbox/", "/inbox\\..", None):
        assert rendering.safe_next(bad) is None


# ----------------------------------------------------------------------- escaping

SCRIPT = "<script>alert(1)</script>"


def test_arguments_and_messages_are_escaped_in_every_page_that_shows_them() -> None:
    entry = QueueEntry(
        thread_id="t1",
        owner=SCRIPT,
        gate="confidence",
        escalation_id="esc_1",
        decision_id=SCRIPT,
        tool=None,
        code="execution_blocked_confidence",
        message=SCRIPT,
        asked_at=None,
        expires_at=None,
        age="0m01s",
        overdue=False,
        action=SCRIPT,
        about=f"decision {SCRIPT} ({SCRIPT})",
        approving=f"POSTs its webhook to {SCRIPT}",
    )
    html = rendering.templates.get_template("queue_rows.html").render(
        entries=[entry], counts={"confidence": 1}, gates=("confidence",)
    )
    # the owner, the decision id and its action, the message, the webhook
    assert "<script>" not in html and html.count("&lt;script&gt;") == 5
    line = record_line(
        "denials", {"seq": 1, "message": SCRIPT, "code": SCRIPT, "gate": "x"}, Facts()
    )
    records = rendering.templates.get_template("records.html").render(
        lines=[line], table_id="t", broken=None
    )
    assert "<script>" not in records and "&lt;script&gt;" in records


# ----------------------------------------------------------------------- the answer a form builds


def _view(**overrides: Any) -> EscalationView:
    item = {
        "gate": "confidence",
        "escalation_id": "esc_1",
        "decision_id": "dec_1",
        "digest": "sha256:item",
        "args": {"decision_id": "dec_1", "webhook_url": "http://h/x", "override_safety": True},
        "allowed_decisions": ["approve", "edit", "reject", "respond"],
    }
    fields: dict[str, Any] = {
        "thread_id": "t1",
        "owner": "alice",
        "assistant_id": "governed_agent",
        "interrupt_id": "a" * 32,
        "value": {"digest": "sha256:request", "escalations": [item]},
        "items": [item],
        "per_call": False,
        "require_reason": False,
        "pending_interrupts": 1,
    }
    return EscalationView(**{**fields, **overrides})


def test_an_approval_carries_the_digests_it_was_given_for_and_its_reason() -> None:
    answer = build_resume(_view(), [FormDecision("approve", " checked ")])
    assert answer == {
        "decisions": [{"type": "approve", "digest": "sha256:item", "message": "checked"}],
        "digest": "sha256:request",
    }
    per_call = build_resume(_view(per_call=True), [FormDecision("reject", "no")])
    assert per_call == {"type": "reject", "digest": "sha256:item", "message": "no"}
    keyed = build_resume(_view(pending_interrupts=2), [FormDecision("reject", "no")])
    assert list(keyed) == ["a" * 32]


@pytest.mark.parametrize(
    ("form", "needle"),
    [
        (FormDecision("", "why"), "choose approve, edit, reject or respond"),
        (FormDecision("approve", "  "), "a reason is required"),
        (FormDecision("edit", "x", {"decision_id": "dec_2"}), "is not the decision reviewed"),
        (FormDecision("edit", "x", {"metadata": "{oops"}), "metadata is not JSON"),
        (FormDecision("edit", "x", {"metadata": "[1]"}), "metadata must be an object"),
        (FormDecision("edit", "x", {"timeout_seconds": "soon"}), "a whole number of seconds"),
        (FormDecision("edit", "x", {"timeout_seconds": "600"}), "timeout_seconds must be"),
    ],
)
def test_a_wrong_form_is_refused_by_name_and_nothing_is_built(
    form: FormDecision, needle: str
) -> None:
    with pytest.raises(ValueError) as refused:
        build_resume(_view(), [form])
    assert needle in str(refused.value)


def test_a_decision_the_gate_does_not_accept_and_a_count_mismatch_are_refused() -> None:
    view = _view()
    view.items[0]["allowed_decisions"] = ["reject", "respond"]
    with pytest.raises(ValueError, match="'approve' is not accepted"):
        build_resume(view, [FormDecision("approve", "r")])
    with pytest.raises(ValueError, match="answers 2 call"):
        build_resume(_view(), [FormDecision("reject", "r")] * 2)


def test_an_edit_sends_only_what_may_change() -> None:
    answer = build_resume(
        _view(),
        [FormDecision("edit", "new hook", {"webhook_url": "http://h/y", "timeout_seconds": "9"})],
    )
    [decision] = answer["decisions"]
    assert decision["edited_action"] == {
        "name": "execute_decision",
        "args": {"webhook_url": "http://h/y", "timeout_seconds": 9},
    }


def test_respond_gives_the_model_the_reason_as_its_text() -> None:
    answer = build_resume(_view(), [FormDecision("respond", "Ask finance first.")])
    assert answer["decisions"] == [
        {"type": "respond", "digest": "sha256:item", "message": "Ask finance first."}
    ]


def test_each_page_reads_the_tokens_file_again_a_changed_role_or_a_revoked_token_counts_at_once(
    client: TestClient, auth_file: Path
) -> None:
    login(client, "tok-cleo")
    assert client.get("/inbox/queue/rows", follow_redirects=False).status_code != 403

    def rewrite(tokens: dict[str, tuple[str, list[str]]]) -> None:
        table = {
            token_digest(t): {"identity": who, "roles": roles} for t, (who, roles) in tokens.items()
        }
        auth_file.write_text(json.dumps({"tokens": table}))

    rewrite({**TOKENS, "tok-cleo": ("cleo", ["agent"])})  # no longer an operator
    page = client.get("/inbox/queue")
    assert page.status_code == 403 and "roles: agent" in page.text
    cookie = client.cookies[COOKIE]
    rewrite({t: who for t, who in TOKENS.items() if t != "tok-cleo"})  # revoked
    page = client.get("/inbox/queue")
    assert page.status_code == 401 and "no longer accepts your token" in page.text
    assert COOKIE not in client.cookies
    rewrite(TOKENS)  # the token is back: its session is not
    client.cookies.set(COOKIE, cookie)
    assert not signed_in(client)


def test_a_token_that_now_names_someone_else_ends_the_session(
    client: TestClient, auth_file: Path
) -> None:
    login(client, "tok-cleo")
    table = {
        token_digest(t): {"identity": "mallory" if t == "tok-cleo" else who, "roles": roles}
        for t, (who, roles) in TOKENS.items()
    }
    auth_file.write_text(json.dumps({"tokens": table}))
    page = client.get("/inbox/queue")
    assert page.status_code == 401 and "now names &#39;mallory&#39;" in page.text
    assert not signed_in(client)


# ----------------------------------------------------------------------- in words

WEBHOOK = "https://hooks.example/price"
HELD_ITEM: dict[str, Any] = {
    "gate": "approval",
    "tool": "crm.delete_customer",
    "args": {"account_id": "b2", "reason": "churned"},
    "allowed_decisions": ["approve", "edit", "reject", "respond"],
    "rules": {"budgets": []},
    "expires_at": "2030-01-01T00:00:00+00:00",
}
ENGINE_ITEM: dict[str, Any] = {
    "gate": "confidence",
    "decision_id": "dec_1",
    "override_flag": "override_safety",
    "args": {"decision_id": "dec_1", "webhook_url": WEBHOOK, "override_safety": True},
    "allowed_decisions": ["approve", "edit", "reject", "respond"],
}


def test_a_call_names_its_tool_and_every_argument_and_a_value_that_is_not_a_word_is_quoted() -> (
    None
):
    assert call_text("crm.delete_customer", {"account_id": "b2"}) == (
        "crm.delete_customer(account_id=b2)"
    )
    shown = call_text("crm.refund", {"amount": 10.0, "note": "two words", "id": "10", "ok": True})
    assert shown == 'crm.refund(amount=10, note="two words", id="10", ok=true)'
    assert (
        call_text("x.y", {"filters": {"a": [1]}, "to": None}) == 'x.y(filters={"a": [1]}, to=null)'
    )


def test_what_each_answer_does_is_read_from_the_held_call_itself() -> None:
    effects = answer_effects(HELD_ITEM)
    assert effects["approve"] == (
        "runs crm.delete_customer(account_id=b2, reason=churned) once; the model gets its answer"
    )
    assert effects["edit"].startswith("runs crm.delete_customer once with the arguments you enter")
    assert effects["reject"].startswith("declines: nothing runs")
    assert effects["respond"].startswith("declines: nothing runs")
    # another tool, another gate: other words, from the item alone
    other = {**HELD_ITEM, "tool": "billing.refund", "args": {"amount": 900}, "gate": "budget"}
    assert answer_effects(other)["approve"] == (
        "runs billing.refund(amount=900) once, over its budget; the model gets its answer"
    )
    budgeted = {**HELD_ITEM, "rules": {"budgets": [{"tool": "crm.*", "thread_limit": 2}]}}
    assert "unless one of its budgets has run out" in answer_effects(budgeted)["approve"]
    # only the decisions the gate accepts
    narrow = {**HELD_ITEM, "allowed_decisions": ["approve", "reject"]}
    assert set(answer_effects(narrow)) == {"approve", "reject"}


def test_what_approving_an_engine_decision_does_names_the_action_the_flag_and_the_webhook() -> None:
    effects = answer_effects(ENGINE_ITEM, "raise_price_6pct")
    assert effects["approve"] == (
        "executes decision dec_1 (raise_price_6pct) with override_safety=true and POSTs its "
        f"webhook to {WEBHOOK}"
    )
    assert effects["reject"] == (
        "declines: decision dec_1 is not executed and no webhook is sent; the model is told"
    )
    assert effects["edit"].endswith(
        "(nothing else may change; the argument rules on execute_decision still apply)"
    )
    timed = {**ENGINE_ITEM, "args": {**ENGINE_ITEM["args"], "timeout_seconds": 5}}
    assert answer_effects(timed)["approve"].endswith(f"to {WEBHOOK} (timeout 5 s)")
    # the engine could not say what it decides: the decision by its id alone
    assert answer_effects(ENGINE_ITEM)["approve"].startswith("executes decision dec_1 with")
    assert escalation_about(ENGINE_ITEM, "raise_price_6pct") == (
        "The confidence gate denied executing decision dec_1 (raise_price_6pct)"
    )


def test_past_its_deadline_every_answer_says_it_declines() -> None:
    for item in (HELD_ITEM, ENGINE_ITEM):
        effects = answer_effects({**item, "expires_at": "2030-01-01T00:00:00+00:00"}, overdue=True)
        assert set(effects) == set(item["allowed_decisions"])
        assert all(e.startswith("declines: the deadline passed at 2030") for e in effects.values())


def test_a_decision_is_named_by_its_action_and_inputs() -> None:
    decision = {
        "chosen_action": "raise_price_6pct",
        "expected_value": 40.0,
        "confidence": 0.3,
        "risk_p5": -0.1,
        "risk_p95": 0.5,
        "scenario": "price_increase",
        "rationale": None,
    }
    assert decision_inputs(decision) == (
        "raise_price_6pct: expected value 40, confidence 0.3, risk p5 -0.1 to p95 0.5, "
        "scenario price_increase"
    )
    assert decision_inputs({"chosen_action": None}) is None


RECEIPT: dict[str, Any] = {
    "kind": "receipt",
    "decision_id": "dec_1",
    "webhook_url": WEBHOOK,
    "execution_status": "delivered",
    "response_code": 200,
    "payload_summary": {"action": "raise_price_6pct"},
}


def test_every_record_says_what_it_is_about_and_what_happened() -> None:
    held_denial = {
        "kind": "denial",
        "gate": "approval",
        "source": "graph",
        "policy": "escalate",
        "message": "needs approval",
        "tool": "delete_customer",
        "server": "crm",
        "args": {"account_id": "b2"},
        "escalation_id": "esc_h",
        "tool_call_id": "c_h",
    }
    approved = {
        "operator": "ana",
        "verdict": "approved",
        "action": "override",
        "gate": "approval",
        "tool": "crm.delete_customer",
        "result": "executed",
        "outcome": {"result": "executed", "content": '{"deleted": "b2"}'},
        "escalation_id": "esc_h",
        "tool_call_id": "c_h",
    }
    engine_denial = {
        "kind": "denial",
        "gate": "confidence",
        "source": "model",
        "policy": "escalate",
        "message": "confidence 0.3 is below 0.6",
        "decision_id": "dec_1",
    }
    overrode = {
        "operator": "olga",
        "verdict": "approved",
        "gate": "confidence",
        "decision_id": "dec_1",
        "override_flag": "override_safety",
        "result": "receipt",
        "outcome": RECEIPT,
    }
    values: dict[str, list[dict[str, Any]]] = {
        "tool_calls": [
            {"tool": "refund", "server": "crm", "tool_call_id": "c_r"},
            {"tool": "delete_customer", "server": "crm", "tool_call_id": "c_h"},
        ],
        "denials": [held_denial, engine_denial],
        "operator_decisions": [approved, overrode],
        "receipts": [{**RECEIPT, "source": "operator", "operator": "olga"}],
    }
    facts = thread_facts(values)  # the action from the receipt: no engine asked
    lines = [
        (line.about, line.happened)
        for name in ("tool_calls", "denials", "operator_decisions", "receipts")
        for line in (record_line(name, r, facts) for r in values[name])
    ]
    delivered = f"its webhook POST to {WEBHOOK} was delivered (HTTP 200)"
    assert lines == [
        ("crm.refund", "let through to run: no gate held it"),
        ("crm.delete_customer", "ran on ana's approval"),
        (
            "crm.delete_customer(account_id=b2)",
            "held by the approval gate: needs approval; an operator was asked",
        ),
        (
            "decision dec_1 (raise_price_6pct)",
            "denied by the confidence gate: confidence 0.3 is below 0.6; an operator was asked",
        ),
        ("crm.delete_customer(account_id=b2)", "ana approved: it ran once and answered"),
        (
            "decision dec_1 (raise_price_6pct)",
            f"olga approved: it was executed with override_safety=true; {delivered}",
        ),
        ("decision dec_1 (raise_price_6pct)", f"executed on olga's override: {delivered}"),
    ]


def test_a_tool_call_whose_outcome_is_unknown_says_it_may_have_run() -> None:
    record = {"tool": "refund", "server": "crm", "result": "unknown"}
    assert record_line("tool_calls", record, Facts()).happened == (
        "let through to run: no gate held it; its outcome is unknown: it may have run (it counts "
        "against its budgets and is never sent again)"
    )
    failed = record_line("tool_calls", {**record, "result": "failed"}, Facts())
    assert failed.happened == "let through to run: no gate held it; it failed"
    ran = record_line("tool_calls", {**record, "result": "executed"}, Facts())
    assert ran.happened == "let through to run: no gate held it"


@pytest.mark.parametrize(
    ("record", "said"),
    [
        (
            {
                "tool": "crm.rm",
                "verdict": "approved",
                "result": "failed",
                "outcome": {"refused": True, "content": "budget crm.* spent"},
            },
            "ana approved: it was NOT run: budget crm.* spent",
        ),
        (
            {
                "tool": "crm.rm",
                "verdict": "approved",
                "result": "failed",
                "outcome": {"content": "Error: no such customer"},
            },
            "ana approved: it ran and failed: Error: no such customer",
        ),
        (
            {"tool": "crm.rm", "verdict": "approved", "result": "unknown", "outcome": {}},
            "ana approved: it was started, but its outcome is unknown (it is not run again)",
        ),
        (
            {
                "tool": "crm.rm",
                "verdict": "modified",
                "result": "executed",
                "edited_args": {"id": "b3"},
            },
            'ana approved with edited arguments {"id": "b3"}: it ran once and answered',
        ),
        ({"verdict": "declined", "result": "declined"}, "ana rejected: nothing ran"),
        (
            {"verdict": "responded", "result": "declined"},
            "ana responded in the tool's place: nothing ran; the model was given the reason in "
            "the tool's place",
        ),
        (
            {"verdict": "expired", "result": "declined", "expires_at": "2030-01-01"},
            "ana's answer came after the deadline (2030-01-01): nothing ran",
        ),
        (
            {
                "verdict": "approved",
                "result": "denied",
                "override_flag": "force",
                "outcome": {"kind": "denial", "gate": "risk_floor", "message": "too risky"},
            },
            "ana approved: the engine denied it again (the risk_floor gate: too risky); "
            "nothing was executed",
        ),
        (
            {
                "verdict": "approved",
                "result": "failed",
                "override_flag": "force",
                "outcome": {"kind": "failure", "message": "engine unreachable"},
            },
            "ana approved: it was sent with force=true, but the execution failed: engine "
            "unreachable",
        ),
        (
            {
                "verdict": "approved",
                "result": "receipt",
                "override_flag": "force",
                "answered_in_thread": "t0",
                "outcome": {**RECEIPT, "execution_status": "failed", "failure_reason": "HTTP 500"},
            },
            f"ana approved: it was executed with force=true; its webhook POST to {WEBHOOK} "
            "failed: HTTP 500 (answered in thread t0)",
        ),
    ],
)
def test_what_came_of_an_answer_is_said_for_every_outcome(
    record: dict[str, Any], said: str
) -> None:
    assert outcome_line({"operator": "ana", **record}) == said


@pytest.mark.parametrize("name", ["tool_calls", "denials", "operator_decisions", "receipts"])
@pytest.mark.parametrize(
    "source", ["model", "operator", "recovered", "thread_receipts", "graph", None]
)
def test_a_record_missing_every_optional_field_is_put_in_words_without_none(
    name: str, source: str | None
) -> None:
    bare: dict[str, Any] = {"seq": 1, "source": source, "tool": "rm", "server": "crm"}
    for record in (bare, {**bare, "tool": None, "server": None}):
        line = record_line(name, record, Facts())
        words = " ".join((line.about, line.happened, line.who, line.when, line.seq))
        assert "None" not in words, (name, record, words)


@pytest.mark.parametrize(
    ("detail", "shown"),
    [
        (
            "EscalationAlreadyDecided: escalation already decided by olga (reject in thread t "
            "at 2026-12-05T03:12:04+00:00)",
            "refused: another operator decided first: escalation already decided by olga",
        ),
        ("NoEscalationPending: no escalation waits", "refused by the graph: NoEscalationPending"),
        ("thread is busy", "refused: the thread is busy"),
    ],
)
async def test_a_409_before_the_run_is_shown_as_the_server_refused_it(
    detail: str, shown: str
) -> None:
    """The served API refuses an answer to a thread where nothing waits any more (HTTP 409
    naming who decided): the page says so, never "busy" for that refusal."""
    import httpx

    from algenta_graph.inbox.escalation import EscalationView
    from algenta_graph.inbox.resume import submit_answer

    request = httpx.Request("POST", "http://api/threads/t/runs")
    response = httpx.Response(409, json={"detail": detail}, request=request)

    class Runs:
        async def create(self, *args: Any, **kwargs: Any) -> Any:
            raise httpx.HTTPStatusError("409", request=request, response=response)

    class Client:
        runs = Runs()

    view = EscalationView("t", "alice", "agent", "i1", {}, [], False, False, 1)
    outcome = await submit_answer(Client(), view, {"decisions": []}, "e1", "ana")  # type: ignore[arg-type]
    assert str(outcome.message).startswith(shown), outcome
