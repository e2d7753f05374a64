"""The operator inbox in a real browser, on the served graph.

A real ``langgraph dev`` with the repository's ``langgraph.json`` (its ``http.app`` is the
inbox), an auth file, its checkpoints in a SQLite file (``server_checkpointer``), the reference
engine and a webhook receiver; headless Chromium (Debian's ``chromium`` + ``chromium-driver``)
driven by Selenium. An agent's run escalates; an operator signs in, sees it in the queue (which
refreshes itself), opens it and approves it with a reason; every wrong form is refused on the
page and changes nothing; a second operator's stale page is refused; the roles hold; the audit
timeline verifies the chain and, once a record is tampered in the checkpoint file, names it; an
argument holding ``<script>`` is shown as text. The queue's refresh patches the page in place:
the operator's focused Review link and selected text stay while rows arrive, go and turn overdue;
a refresh that fails keeps the rows and says on the page since when the list is stale.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from browser_support import chromium, sign_in, text_of, unstale, wait_for
from guarantee_support import async_wait_until, figure
from inbox_support import (
    COOKIE,
    TOKENS,
    by_id,
    cookie_decodings,
    queue_ids,
    served,
    submit,
)
from served_support import bearer, escalate, interrupt_value, user_turn, write_auth_file

from algenta_graph.engine import ReferenceEngine, WebhookReceiver

pytestmark = pytest.mark.timeout(900)

SCRIPT = "<script>window.__xss=1</script>"


def replay(driver: Any, base: str, cookie: str, path: str = "/inbox/queue") -> str:
    """Open ``path`` in ``driver``'s browser holding only ``cookie`` as its session; the URL
    the browser ends on (the sign-in page when the session is refused)."""
    driver.delete_all_cookies()
    driver.get(f"{base}/inbox/static/inbox.css")  # (a cookie is set on a page of its site)
    driver.add_cookie({"name": COOKIE, "value": cookie, "path": "/inbox", "httpOnly": True})
    driver.get(f"{base}{path}")
    return str(driver.current_url)


def form_body(driver: Any) -> str:
    return str(
        driver.execute_script(
            "return new URLSearchParams(new FormData(document.getElementById('answer')))"
            ".toString();"
        )
    )


def post_again(driver: Any, action: str, body: str) -> tuple[int, str]:
    """POST ``body`` to ``action`` from the page, with the session's cookie (a second submit)."""
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {method: 'POST', body: arguments[1], credentials: 'same-origin',"
        " headers: {'Content-Type': 'application/x-www-form-urlencoded'}})"
        ".then(r => r.text().then(t => done([r.status, t])));",
        action,
        body,
    )
    return int(result[0]), str(result[1])


def tamper_latest(db: Path, thread: str) -> None:
    """Change receipts[0] in the thread's latest checkpoint, past the graph (its links kept)."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    serde = JsonPlusSerializer()
    with sqlite3.connect(db) as conn:
        cid, kind, blob = conn.execute(
            "SELECT checkpoint_id, type, checkpoint FROM checkpoints WHERE thread_id = ? "
            "AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1",
            (thread,),
        ).fetchone()
        checkpoint = serde.loads_typed((kind, blob))
        receipt = checkpoint["channel_values"]["receipts"][0]
        receipt["webhook_url"] = "https://attacker.example/hook"
        kind, blob = serde.dumps_typed(checkpoint)
        conn.execute(
            "UPDATE checkpoints SET type = ?, checkpoint = ? WHERE checkpoint_id = ? "
            "AND thread_id = ?",
            (kind, blob, cid, thread),
        )


async def test_an_operator_answers_in_the_browser_and_the_inbox_refuses_every_wrong_form(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    from langgraph_sdk import get_client
    from selenium.webdriver.common.by import By

    counts: dict[str, int] = {}
    with served(engine, tmp_path) as (server, db):
        base = server.url
        alice: Any = get_client(url=base, headers=bearer("tok-alice"))
        auditor: Any = get_client(url=base, headers=bearer("tok-audrey"))
        t1, d1, asked1 = await escalate(alice, webhook.url)
        [item1] = asked1["escalations"]
        t2, _, asked2 = await escalate(alice, f"{webhook.url}?x={SCRIPT}")
        esc1, esc2 = item1["escalation_id"], asked2["escalation_id"]
        assert SCRIPT in json.dumps(asked2["escalations"][0]["args"])

        with (
            chromium(tmp_path / "chrome-ana") as ana,
            chromium(tmp_path / "chrome-olga") as olga,
        ):
            # olga opens the escalation and leaves the page open
            sign_in(olga, base, "tok-olga")
            wait_for(olga, lambda d: "/inbox/queue" in d.current_url)
            olga.get(f"{base}/inbox/escalations/{t1}/{esc1}")
            assert text_of(olga, "code-0") == item1["code"]

            # ana signs in once and sees both escalations, newest first, counted per gate
            sign_in(ana, base, "tok-ana")
            wait_for(ana, lambda d: "/inbox/queue" in d.current_url)
            assert queue_ids(ana) == [esc2, esc1]
            count = ana.find_element(By.CSS_SELECTOR, ".count[data-gate='confidence'] b")
            assert count.text == "2"
            deadline = ana.find_element(By.CSS_SELECTOR, f"tr[data-escalation='{esc1}'] .deadline")
            assert item1["expires_at"] and deadline.text == item1["expires_at"]
            cookie = ana.get_cookie(COOKIE)
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and "expiry" in cookie
            # the cookie is an opaque id: the token is in none of its decodings
            assert all(b"tok-ana" not in d for d in cookie_decodings(cookie["value"]))

            # the queue refreshes itself: a new escalation appears without a reload
            ana.execute_script("window.__same_page = 'yes';")
            t3, _, asked3 = await escalate(alice, webhook.url)
            wait_for(ana, lambda d: asked3["escalation_id"] in queue_ids(d))
            assert ana.execute_script("return window.__same_page;") == "yes"
            assert queue_ids(ana) == [asked3["escalation_id"], esc2, esc1]
            counts["live_refresh"] = 1

            # the <script> argument is text on the page, in the queue and on its own page
            assert SCRIPT in ana.find_element(By.ID, "queue").text
            assert ana.execute_script("return window.__xss;") is None
            ana.get(f"{base}/inbox/escalations/{t2}/{esc2}")
            assert SCRIPT in text_of(ana, "args-0")
            assert "&lt;script&gt;" in ana.page_source
            assert ana.execute_script("return window.__xss;") is None
            assert ana.find_elements(By.TAG_NAME, "script") == []
            counts["script_escaped"] = 1

            # ana opens the first escalation: the engine's view, the denial, the policy
            ana.get(f"{base}/inbox/queue")
            unstale(
                ana,
                lambda d: d.find_element(
                    By.CSS_SELECTOR, f"tr[data-escalation='{esc1}'] a.open"
                ).click(),
            )
            wait_for(ana, lambda d: "/inbox/escalations/" in d.current_url)
            assert d1 in text_of(ana, "engine-0") and item1["message"] in text_of(ana, "message-0")
            assert by_id(ana, "digest").get_attribute("value") == asked1["digest"]

            # every wrong form: a clear message on the page, nothing changed
            wrong = [
                (dict(decision=None, reason="why not"), "choose approve, edit, reject or respond"),
                (dict(decision="approve"), "a reason is required"),
                (
                    dict(decision="edit", reason="other decision", decision_id="dec_other"),
                    "is not the decision reviewed",
                ),
                (dict(decision="edit", reason="bad", metadata="{not json"), "metadata is not JSON"),
            ]
            for fields, needle in wrong:
                ana.get(f"{base}/inbox/escalations/{t1}/{esc1}")
                message = submit(ana, **fields)  # type: ignore[arg-type]
                assert needle in message, (fields, message)
            ana.get(f"{base}/inbox/escalations/{t1}/{esc1}")
            ana.execute_script(
                "document.querySelector('#answer input[name=csrf]').value = 'forged';"
            )
            assert "forged (CSRF)" in submit(ana, decision="approve", reason="forged")
            ana.get(f"{base}/inbox/escalations/{t1}/{esc1}")
            ana.execute_script("document.getElementById('digest').value = 'sha256:0';")
            assert "stale page" in submit(ana, decision="approve", reason="old page")
            counts["wrong_forms_refused"] = len(wrong) + 2
            state = await auditor.threads.get_state(t1)
            effects = len(state["values"]["operator_decisions"]) + len(webhook.received)
            assert state["values"]["operator_decisions"] == [] and webhook.received == []
            assert interrupt_value(state)["escalation_id"] == esc1

            # ana approves with a reason
            ana.get(f"{base}/inbox/escalations/{t1}/{esc1}")
            action = str(by_id(ana, "answer").get_attribute("action"))
            by_id(ana, "decision-0-approve").click()
            by_id(ana, "reason-0").send_keys("signed off in the browser")
            body = form_body(ana)
            by_id(ana, "submit").click()
            wait_for(ana, lambda d: d.find_elements(By.ID, "record-operator"))
            assert text_of(ana, "record-operator") == "ana"
            assert text_of(ana, "record-verdict") == "approved"
            assert text_of(ana, "record-digest") == item1["digest"]
            await async_wait_until(
                lambda: [b for b in webhook.received if b.get("decision_id") == d1],
                timeout=60,
                what="the webhook POST",
            )
            values = (await auditor.threads.get_state(t1))["values"]
            [record] = values["operator_decisions"]
            assert (record["operator"], record["verdict"], record["digest"]) == (
                "ana",
                "approved",
                item1["digest"],
            )
            assert record["reason"] == "signed off in the browser"
            assert [r["operator"] for r in values["receipts"]] == ["ana"]

            # the same form again (a double submit) and olga's stale page: refused, by name
            status, text = post_again(ana, action, body)
            assert status == 409 and "already answered by ana" in text, (status, text[:400])
            # (olga no longer reads t1: it waits for no one, and she did not decide it)
            assert "no longer waits for you" in submit(olga, decision="reject", reason="late")
            counts["double_submit_refused"] = counts["stale_page_refused"] = 1
            posts = [b for b in webhook.received if b.get("decision_id") == d1]
            values = (await auditor.threads.get_state(t1))["values"]
            effects += len(posts) - 1 + len(values["operator_decisions"]) - 1
            assert len(posts) == 1 and len(values["operator_decisions"]) == 1
            counts["webhook_posts"] = len(posts)

            # the decided escalations, filtered by operator, gate and outcome
            ana.get(f"{base}/inbox/decided?operator=ana&gate=confidence&outcome=approved")
            rows = ana.find_elements(By.CSS_SELECTOR, "#decided tr.decided")
            assert [r.get_attribute("data-escalation") for r in rows] == [esc1]
            ana.get(f"{base}/inbox/decided?operator=ana&outcome=declined")
            assert ana.find_elements(By.CSS_SELECTOR, "#decided tr.decided") == []
            assert "No decisions match" in text_of(ana, "none")

            # ana's cookie in olga's browser is ana's live session; once ana signs out, the
            # server has ended it: the same cookie, replayed, opens nothing
            held = str(ana.get_cookie(COOKIE)["value"])
            assert replay(olga, base, held).endswith("/inbox/queue")
            assert text_of(olga, "who") == "ana"
            ana.find_element(By.CSS_SELECTOR, "form.who button").click()
            wait_for(ana, lambda d: "/inbox/login" in d.current_url)
            assert ana.get_cookie(COOKIE) is None
            assert "/inbox/login" in replay(olga, base, held)
            assert not olga.find_elements(By.ID, "who")
            counts["replayed_cookie_refused"] = 1

        with chromium(tmp_path / "chrome-others") as other:
            # an agent's token: 403; an unknown token: 401
            sign_in(other, base, "tok-alice")
            wait_for(other, lambda d: d.find_elements(By.ID, "error"))
            assert "no operator or auditor role" in text_of(other, "error")
            assert other.find_element(By.TAG_NAME, "h1").text == "403"
            sign_in(other, base, "tok-nobody")
            wait_for(other, lambda d: d.find_elements(By.ID, "error"))
            assert "invalid token" in text_of(other, "error")
            counts["agent_403"] = counts["unknown_401"] = 1

            # operator:risk_floor does not see (or open) a confidence escalation
            sign_in(other, base, "tok-gus")
            wait_for(other, lambda d: "/inbox/queue" in d.current_url)
            assert queue_ids(other) == [] and "Nothing waits for you" in text_of(other, "empty")
            other.get(f"{base}/inbox/escalations/{t3}/{asked3['escalation_id']}")
            assert other.find_element(By.TAG_NAME, "h1").text in ("403", "404")
            assert not other.find_elements(By.ID, "answer")
            # ... nor read what the API does not let it read (t1: decided by ana, not waiting)
            other.get(f"{base}/inbox/threads/{t1}/timeline")
            assert other.find_element(By.TAG_NAME, "h1").text == "404"
            assert not other.find_elements(By.ID, "chain-status")
            other.get(f"{base}/inbox/threads")
            listed = other.find_elements(By.CSS_SELECTOR, "#threads tr[data-thread]")
            assert {r.get_attribute("data-thread") for r in listed}.isdisjoint({t1, t2, t3})
            counts["other_gate_hidden"] = 1
            other.delete_all_cookies()

            # the auditor: timelines, never the queue; the chain verified, then tampered
            sign_in(other, base, "tok-audrey")
            wait_for(other, lambda d: "/inbox/threads" in d.current_url)
            other.get(f"{base}/inbox/queue")
            assert other.find_element(By.TAG_NAME, "h1").text == "403"
            other.get(f"{base}/inbox/threads/{t1}/timeline")
            status_line = by_id(other, "chain-status")
            assert status_line.get_attribute("data-ok") == "true", status_line.text
            assert "Chain verified" in status_line.text
            fields = [
                r.get_attribute("data-field")
                for r in other.find_elements(By.CSS_SELECTOR, "#timeline tr.record")
            ]
            assert fields.count("operator_decisions") == 1 and "receipts" in fields
            export = other.execute_async_script(
                "const done = arguments[arguments.length - 1];"
                "fetch(document.getElementById('export').href).then(r => r.text()).then(done);"
            )
            lines = [json.loads(line) for line in str(export).splitlines()]
            assert lines[-1]["type"] == "head" and lines[-1]["count"] == len(fields)

            tamper_latest(db, t1)
            other.get(f"{base}/inbox/threads/{t1}/timeline")
            assert by_id(other, "chain-status").get_attribute("data-ok") == "false"
            broken = text_of(other, "first-broken")
            assert "receipts[0]" in broken, broken
            counts["tamper_named"] = 1

            # a token revoked in the tokens file ends its session at the next page, for good
            held = str(other.get_cookie(COOKIE)["value"])
            rest = {t: who for t, who in TOKENS.items() if t != "tok-audrey"}
            write_auth_file(tmp_path / "auth.json", rest)
            other.get(f"{base}/inbox/threads/{t1}/timeline")
            assert "no longer accepts your token" in text_of(other, "error")
            assert other.get_cookie(COOKIE) is None
            write_auth_file(tmp_path / "auth.json", TOKENS)  # the token is back, not the session
            assert "/inbox/login" in replay(other, base, held, f"/inbox/threads/{t1}/timeline")
            counts["revoked_signed_out"] = 1

    figure(
        "inbox_browser",
        escalations_answered=1,
        webhook_posts=counts["webhook_posts"],
        wrong_forms_refused=counts["wrong_forms_refused"],
        effects_of_refused_forms=effects,
        double_submit_refused=counts["double_submit_refused"],
        stale_page_refused=counts["stale_page_refused"],
        agent_403=counts["agent_403"],
        unknown_401=counts["unknown_401"],
        other_gate_hidden=counts["other_gate_hidden"],
        script_escaped=counts["script_escaped"],
        live_refresh=counts["live_refresh"],
        tamper_named=counts["tamper_named"],
        revoked_signed_out=counts["revoked_signed_out"],
        replayed_cookie_refused=counts["replayed_cookie_refused"],
    )


def test_a_session_past_its_age_is_refused_even_when_its_cookie_is_sent_again(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    """``ALGENTA_INBOX_SESSION_SECONDS``: past it the browser drops the cookie, and the server
    has ended the session too: the cookie put back in the browser opens nothing."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with (
        served(engine, tmp_path, ALGENTA_INBOX_SESSION_SECONDS="20") as (server, _),
        chromium(tmp_path / "chrome") as ana,
    ):
        base = server.url
        sign_in(ana, base, "tok-ana")
        wait_for(ana, lambda d: "/inbox/queue" in d.current_url)
        held = str(ana.get_cookie(COOKIE)["value"])
        assert replay(ana, base, held).endswith("/inbox/queue")  # the cookie alone opens it

        def ended(driver: Any) -> bool:  # a page every 2 seconds: the session is never idle
            driver.get(f"{base}/inbox/queue")
            return "/inbox/login" in driver.current_url

        WebDriverWait(ana, 120, poll_frequency=2).until(ended)
        assert "/inbox/login" in replay(ana, base, held)
        assert not ana.find_elements(By.ID, "who")


async def test_per_call_escalations_are_answered_in_the_browser_one_call_at_a_time(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """``interrupt_mode = "per_call"``: LangChain's ``ToolApprovalRequest``, one decision each;
    an operator responds in the browser (the model gets the text, nothing executes)."""
    from langgraph_sdk import get_client
    from selenium.webdriver.common.by import By

    with served(engine, tmp_path, '[escalation]\ninterrupt_mode = "per_call"\n') as (server, _):
        base = server.url
        alice: Any = get_client(url=base, headers=bearer("tok-alice"))
        auditor: Any = get_client(url=base, headers=bearer("tok-audrey"))
        thread, decision, asked = await escalate(alice, webhook.url)
        assert asked["type"] == "tool_approval"
        [item] = asked["escalations"]
        with chromium(tmp_path / "chrome") as ana:
            sign_in(ana, base, "tok-ana")
            wait_for(ana, lambda d: item["escalation_id"] in queue_ids(d))
            unstale(ana, lambda d: d.find_element(By.CSS_SELECTOR, "#queue a.open").click())
            wait_for(ana, lambda d: d.find_elements(By.ID, "answer"))
            assert by_id(ana, "digest").get_attribute("value") == item["digest"]
            message = submit(ana, decision="respond", reason="Ask finance first.")
            assert message == "recorded: responded", message
            assert text_of(ana, "record-operator") == "ana"
        values = (await auditor.threads.get_state(thread))["values"]
        [record] = values["operator_decisions"]
        assert (record["operator"], record["verdict"], record["digest"]) == (
            "ana",
            "responded",
            item["digest"],
        )
        assert engine.executions(decision) == [] and webhook.received == []


async def test_a_held_call_is_shown_by_its_tool_and_edited_as_json_in_the_browser(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    """A call a graph-side gate held (``[tool_gates] require_approval``) is shown by its tool,
    not as an engine decision; an edit sends its arguments as JSON, scrubbed, and runs once."""
    from langgraph_sdk import get_client
    from selenium.webdriver.common.by import By

    settings = '[tool_gates]\nrequire_approval = ["algenta.recommend"]\n'
    with served(engine, tmp_path, settings) as (server, _):
        base = server.url
        alice: Any = get_client(url=base, headers=bearer("tok-alice"))
        auditor: Any = get_client(url=base, headers=bearer("tok-audrey"))
        thread = (await alice.threads.create())["thread_id"]
        await alice.runs.wait(
            thread, "governed_agent", input=user_turn("recommend scenario=restock_inventory")
        )
        state = await alice.threads.get_state(thread)
        assert state["next"] == ["denial_handler_approval"], state["next"]
        [item] = interrupt_value(state)["escalations"]
        assert item["tool"] == "algenta.recommend"
        with chromium(tmp_path / "chrome") as ana:
            sign_in(ana, base, "tok-ana")
            wait_for(ana, lambda d: item["escalation_id"] in queue_ids(d))
            text = unstale(ana, lambda d: d.find_element(By.CSS_SELECTOR, "#queue tr.entry").text)
            assert "algenta.recommend" in text and "None" not in text, text
            unstale(
                ana, lambda d: d.find_element(By.CSS_SELECTOR, "#queue tr.entry a.open").click()
            )
            wait_for(ana, lambda d: d.find_elements(By.ID, "answer"))
            assert ana.find_element(By.CSS_SELECTOR, "code.held").text == "algenta.recommend"
            assert "nothing was sent" in text_of(ana, "engine-0")
            shown = json.loads(str(by_id(ana, "edit-0-args").get_attribute("value")))
            assert shown == item["args"]
            # not JSON: refused on the page, nothing sent
            error = submit(ana, decision="edit", reason="smaller run", args="{not json")
            assert "the arguments are not JSON" in error, error
            assert "algenta.recommend" in ana.find_element(By.CSS_SELECTOR, "code.held").text
            edited = {"scenario": "price_increase", "force": True}
            message = submit(ana, decision="edit", reason="smaller run", args=json.dumps(edited))
            assert message == "recorded: modified", message
        values = (await auditor.threads.get_state(thread))["values"]
        [record] = values["operator_decisions"]
        assert (record["operator"], record["verdict"], record["tool"]) == (
            "ana",
            "modified",
            "algenta.recommend",
        )
        assert record["edited_args"] == {"scenario": "price_increase"}  # the flag dropped
        assert record["original_args"] == {"scenario": "restock_inventory"}
        [answer] = [m for m in values["messages"] if m["type"] == "tool"]
        assert answer["name"] == "recommend" and answer["status"] == "success"
        assert "price_increase" in json.dumps(answer["content"])  # ran as edited


QUEUE_STATE = """
const live = document.getElementById('queue-live');
const focused = document.activeElement;
const row = window.__row;
const selection = window.getSelection();
return {
  refreshed: live.getAttribute('data-refreshed'),
  error: live.getAttribute('data-error'),
  same_page: window.__same_page || null,
  ids: Array.from(document.querySelectorAll('#queue tr.entry'),
                  r => r.getAttribute('data-escalation')),
  empty: document.getElementById('empty') !== null,
  total: (document.getElementById('total') || {}).textContent || null,
  gates: Array.from(document.querySelectorAll('#counts .count[data-gate]'),
                    c => c.getAttribute('data-gate') + '=' + c.querySelector('b').textContent),
  focus_kept: !!window.__link && focused === window.__link,
  link_connected: !!window.__link && window.__link.isConnected,
  row_kept: !!row && row.isConnected
            && row === document.querySelector(`tr[data-escalation='${window.__key}']`),
  age: row ? row.cells[6].textContent : null,
  overdue: row ? row.classList.contains('overdue') : null,
  deadline: row ? row.cells[7].textContent : null,
  selected: selection.toString(),
  selection_connected: selection.rangeCount > 0 && selection.anchorNode.isConnected,
};
"""
"""The queue as the operator's page holds it, read in one step of the page: whether the Review
link focused (``window.__link``) is still the focused, connected element, whether its row
(``window.__row``, escalation ``window.__key``) is still the same element, and the selection."""


def queue_state(driver: Any) -> dict[str, Any]:
    return dict(driver.execute_script(QUEUE_STATE))


SET_ROWS_URL = """
const live = document.getElementById('queue-live');
const was = live.getAttribute('data-rows');
live.setAttribute('data-rows', arguments[0]);
return was;
"""
"""Point the queue's refresh at another URL (``arguments[0]``); returns the one it had."""


def stale_notice(driver: Any, says: str) -> dict[str, Any] | None:
    """The stale-queue notice's text and the queue's state, once the notice is shown and
    names ``says``."""
    from selenium.webdriver.common.by import By

    notice = driver.find_element(By.ID, "queue-stale")
    text = notice.text if notice.is_displayed() else ""
    return {"text": text, "state": queue_state(driver)} if says in text else None


def refreshed_since(driver: Any, before: str | None, condition: Any) -> dict[str, Any]:
    """The queue's state once it refreshed after ``before`` and ``condition(state)`` holds."""

    def ready(d: Any) -> dict[str, Any] | None:
        state = queue_state(d)
        return state if state["refreshed"] != before and condition(state) else None

    found: dict[str, Any] = wait_for(driver, ready)
    return found


async def test_the_queue_refreshes_in_place_and_the_operator_keeps_focus_and_selection(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    """The queue's refresh patches the rows it keeps (their ages tick), inserts a new
    escalation in the server's order and removes an answered one, and the operator's place
    stays: the Review link Tab-ed to is still the focused, connected element, and the decision
    id selected (to copy it) is still selected, also when its row turns overdue; the empty
    state turns into the table and back without a reload."""
    from langgraph_sdk import get_client
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    settings = '[escalation]\nrequire_reason = true\nexpires_after = {confidence = "PT30S"}\n'
    with served(engine, tmp_path, settings) as (server, _):
        base = server.url
        alice: Any = get_client(url=base, headers=bearer("tok-alice"))
        with (
            chromium(tmp_path / "chrome-ana") as ana,
            chromium(tmp_path / "chrome-olga") as olga,
        ):
            # nothing waits yet: the empty state, then the table without a reload
            sign_in(ana, base, "tok-ana")
            wait_for(ana, lambda d: "/inbox/queue" in d.current_url)
            ana.execute_script("window.__same_page = 'yes';")
            state = queue_state(ana)
            assert state["empty"] and state["ids"] == [] and state["total"] == "0", state
            _, d1, asked1 = await escalate(alice, webhook.url)
            esc1 = asked1["escalation_id"]
            state = refreshed_since(ana, state["refreshed"], lambda s: s["ids"] == [esc1])
            assert not state["empty"] and state["same_page"] == "yes", state
            t2, _, asked2 = await escalate(alice, webhook.url)
            esc2 = asked2["escalation_id"]
            state = refreshed_since(ana, state["refreshed"], lambda s: s["ids"] == [esc2, esc1])

            # ana Tabs to esc1's Review link and selects its decision id (to copy it)
            link = ana.find_element(By.CSS_SELECTOR, f"tr[data-escalation='{esc1}'] a.open")
            ana.execute_script("document.activeElement.blur();")
            for _ in range(40):
                if ana.switch_to.active_element == link:
                    break
                ActionChains(ana).send_keys(Keys.TAB).perform()
            assert ana.switch_to.active_element == link
            ana.execute_script(
                "const row = document.querySelector(`tr[data-escalation='${arguments[0]}']`);"
                "window.__key = arguments[0]; window.__row = row;"
                "window.__link = document.activeElement;"
                "window.getSelection().selectAllChildren(row.cells[2].querySelector('code'));",
                esc1,
            )
            before = queue_state(ana)
            assert before["focus_kept"] and before["row_kept"] and before["selected"] == d1, before
            assert not before["overdue"] and "(overdue)" not in before["deadline"], before

            # another escalation arrives: inserted first (newest first), the rest kept in place
            _, _, asked3 = await escalate(alice, webhook.url)
            esc3 = asked3["escalation_id"]
            state = refreshed_since(ana, before["refreshed"], lambda s: esc3 in s["ids"])
            assert state["ids"] == [esc3, esc2, esc1], state
            assert state["focus_kept"] and state["link_connected"], state
            assert state["row_kept"] and state["age"] != before["age"], (before, state)
            assert state["selected"] == d1 and state["selection_connected"], state
            assert state["total"] == "3" and "confidence=3" in state["gates"], state

            # olga answers esc2 in her browser: its row goes, ana's place stays
            sign_in(olga, base, "tok-olga")
            wait_for(olga, lambda d: "/inbox/queue" in d.current_url)
            olga.get(f"{base}/inbox/escalations/{t2}/{esc2}")
            message = submit(olga, decision="reject", reason="not tonight")
            assert message.startswith("recorded: "), message
            state = refreshed_since(ana, state["refreshed"], lambda s: esc2 not in s["ids"])
            assert state["ids"] == [esc3, esc1], state
            assert state["focus_kept"] and state["link_connected"] and state["row_kept"], state
            assert state["selected"] == d1 and state["selection_connected"], state
            assert state["total"] == "2" and "confidence=2" in state["gates"], state
            assert ana.switch_to.active_element == link  # the very element Selenium focused

            # esc1's deadline (30 s) passes: its row turns overdue in place, ana's place stays
            state = refreshed_since(ana, state["refreshed"], lambda s: s["overdue"])
            assert "(overdue)" in state["deadline"] and state["ids"] == [esc3, esc1], state
            assert state["focus_kept"] and state["link_connected"] and state["row_kept"], state
            assert state["selected"] == d1 and state["selection_connected"], state

            # the refresh fails (an answer without the queue, then an HTTP error): the rows stay
            # as they were, ana's place too, and the page says since when the list is stale
            rows_url = ana.execute_script(SET_ROWS_URL, f"{base}/inbox/static/inbox.js")
            failed = wait_for(ana, lambda d: stale_notice(d, "holds no queue"))
            assert failed["state"]["ids"] == [esc3, esc1], failed
            refreshed = failed["state"]["refreshed"]  # a failed refresh does not count
            assert failed["state"]["focus_kept"] and failed["state"]["row_kept"], failed
            assert failed["state"]["selected"] == d1, failed
            ana.execute_script(SET_ROWS_URL, f"{base}/inbox/no-such-page")
            failed = wait_for(ana, lambda d: stale_notice(d, "HTTP 404"))
            assert "has not refreshed since" in failed["text"], failed
            assert failed["state"]["refreshed"] == refreshed, failed
            assert failed["state"]["ids"] == [esc3, esc1], failed
            # it works again: the notice goes, the rows refresh
            ana.execute_script(SET_ROWS_URL, rows_url)
            state = refreshed_since(ana, state["refreshed"], lambda s: s["error"] is None)
            assert not ana.find_element(By.ID, "queue-stale").is_displayed(), state
            assert state["ids"] == [esc3, esc1] and state["focus_kept"], state

            # ana's role narrows to a gate nothing waits on: the table turns into the empty state
            narrowed = {**TOKENS, "tok-ana": ("ana", ["operator:risk_floor"])}
            write_auth_file(tmp_path / "auth.json", narrowed)
            state = refreshed_since(ana, state["refreshed"], lambda s: s["empty"])
            assert state["ids"] == [] and state["total"] == "0", state
            assert state["gates"] == ["risk_floor=0"], state
            assert not state["link_connected"] and state["same_page"] == "yes", state
            assert ana.find_elements(By.ID, "queue") == []
            assert "Nothing waits for you" in text_of(ana, "empty")
            assert state["error"] is None, state
