"""The inbox read at a glance, in a real browser: every record and escalation in words.

A real ``langgraph dev`` serving the inbox, the reference engine, a webhook receiver and a real
CRM over MCP (``crm.delete_customer`` needs an operator's approval, ``crm.refund`` has a budget,
so its call is a ``tool_calls`` record); headless Chromium. On the queue, the escalation page,
the page after an answer, the audit timeline and the decided page, a held call, a tool-call
record and an engine decision each say what they are about (the tool and its server and the
call's arguments; the decision and the action it decides) before any JSON, each answer says
what it will do, and the page after an answer shows what happened: the tool's answer, the
receipt, or the refusal naming who decided. No page shows Python's ``None``. ``/inbox`` leads to
``/inbox/``; a queue left open when its session ends goes to the sign-in page, and signing in
there leads back to the queue.

The README's screenshots (``docs/inbox-*.png``) are taken here: ``ALGENTA_SCREENSHOTS=1``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from browser_support import chromium, sign_in, text_of, unstale, wait_for
from crm_support import TOKEN as CRM_TOKEN
from crm_support import running_crm
from guarantee_support import async_wait_until
from inbox_support import (
    TOKENS,
    by_id,
    none_shown,
    queue_ids,
    screenshot,
    served,
    submit,
)
from served_support import (
    bearer,
    escalate,
    interrupt_value,
    log_shaky_decision,
    user_turn,
    write_auth_file,
)

from algenta_graph.engine import ReferenceEngine, WebhookReceiver

pytestmark = pytest.mark.timeout(900)

HELD = "crm.delete_customer(account_id=b2, reason=churned)"
"""The held call, as every page names it."""


def settings(crm_url: str) -> str:
    return f"""
[escalation]
require_reason = true

[extra_servers.crm]
transport = "streamable_http"
url = "{crm_url}"
headers = {{ Authorization = {{ env = "CRM_TOKEN", prefix = "Bearer " }} }}

[tool_gates]
require_approval = ["crm.delete_customer"]

[[tool_gates.budgets]]
tool = "crm.refund"
thread_limit = 2

[[tool_gates.argument_rules]]
name = "known_reason"
tool = "crm.delete_customer"
schema = {{ type = "object", properties = {{ reason = {{ type = "string", enum = ["churned"] }}}}}}
"""


def cells(driver: Any, table: str, css: str) -> list[str]:
    """The text of each ``css`` cell of the rows of ``#table``, read in one step of the page."""
    found = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), c => c.innerText);",
        f"#{table} tr > {css}",
    )
    return [str(c) for c in found]


def queue_about(driver: Any) -> dict[str, str]:
    """What each escalation of the queue is about, by escalation id, read in one step of the
    page (the queue refreshes itself)."""
    found = driver.execute_script(
        "return Array.from(document.querySelectorAll('#queue tr.entry'),"
        " r => [r.dataset.escalation, r.querySelector('td.about').innerText]);"
    )
    return {str(e): str(a) for e, a in found}


def records(driver: Any, table: str) -> list[tuple[str, str, str]]:
    """Each record row of ``#table``: ``(record field, what it is about, what happened)``."""
    found = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), r => [r.dataset.field,"
        " r.querySelector('td.about').innerText, r.querySelector('td.happened').innerText]);",
        f"#{table} tr.record",
    )
    return [(str(f), str(a), str(h)) for f, a, h in found]


def seen(driver: Any) -> Any:
    """The page's visible text, once checked for ``None``."""
    from selenium.webdriver.common.by import By

    assert none_shown(driver) == [], (driver.current_url, none_shown(driver))
    return driver.find_element(By.TAG_NAME, "body").text


def copy_thread(base: str, thread: str) -> str:
    """A copy of ``thread`` made by its owner (a second thread waiting on the same escalation)."""
    response = httpx.post(f"{base}/threads/{thread}/copy", headers=bearer("tok-alice"), timeout=30)
    assert response.status_code == 200, response.text
    return str(response.json()["thread_id"])


async def test_every_record_escalation_and_answer_reads_in_words(
    engine: ReferenceEngine, webhook: WebhookReceiver, tmp_path: Path
) -> None:
    from langgraph_sdk import get_client
    from selenium.webdriver.common.by import By

    with (
        running_crm() as crm,
        # two runs at once, so an answer can meet another operator's answer being applied
        served(
            engine,
            tmp_path,
            settings(crm.url),
            extra_args=("--n-jobs-per-worker", "2"),
            CRM_TOKEN=CRM_TOKEN,
        ) as (server, _),
    ):
        base = server.url
        alice: Any = get_client(url=base, headers=bearer("tok-alice"))
        ana_api: Any = get_client(url=base, headers=bearer("tok-ana"))
        auditor: Any = get_client(url=base, headers=bearer("tok-audrey"))

        # thread A: a refund let through (a tool_calls record), then a delete held for approval
        held_thread = (await alice.threads.create())["thread_id"]
        for ask in (
            "refund the crm customer account_id=b2 amount=10",
            "delete the crm customer account_id=b2 reason=churned",
        ):
            await alice.runs.wait(held_thread, "governed_agent", input=user_turn(ask))
        state = await alice.threads.get_state(held_thread)
        assert state["next"] == ["denial_handler_approval"], state["next"]
        [held] = interrupt_value(state)["escalations"]
        assert held["tool"] == "crm.delete_customer" and crm.count("delete_customer") == 0
        # thread B: an engine decision (raise_price) the confidence gate denied
        engine_thread, decision, asked = await escalate(alice, webhook.url)
        [denied] = asked["escalations"]

        with chromium(tmp_path / "chrome-ana") as ana:
            # a bare /inbox leads to the inbox (not the API's JSON 401)
            ana.get(f"{base}/inbox")
            wait_for(ana, lambda d: "/inbox/login" in d.current_url)
            sign_in(ana, base, "tok-ana")
            wait_for(ana, lambda d: "/inbox/queue" in d.current_url)
            ana.get(f"{base}/inbox")
            wait_for(ana, lambda d: d.current_url.endswith("/inbox/queue"))

            # the queue: each escalation names what it is about
            wait_for(ana, lambda d: len(queue_ids(d)) == 2)
            about = queue_about(ana)
            assert about[held["escalation_id"]] == HELD, about
            assert about[denied["escalation_id"]] == f"decision {decision} (raise_price)", about
            unstale(ana, seen)
            screenshot(ana, tmp_path, "inbox-queue.png")

            # the held call: the call in words, what each answer does, the records in words
            ana.get(f"{base}/inbox/escalations/{held_thread}/{held['escalation_id']}")
            seen(ana)
            assert text_of(ana, "about-0") == f"The approval gate holds the call {HELD}", text_of(
                ana, "about-0"
            )
            assert text_of(ana, "does-0-approve") == f"runs {HELD} once; the model gets its answer"
            assert text_of(ana, "answering-as") == "ana"  # what an answer is recorded as
            assert text_of(ana, "does-0-edit").startswith(
                "runs crm.delete_customer once with the arguments you enter below"
            )
            assert text_of(ana, "does-0-reject").startswith("declines: nothing runs")
            assert text_of(ana, "does-0-respond").startswith("declines: nothing runs")
            assert [r[:2] for r in records(ana, "thread-records")] == [
                ("tool_calls", "crm.refund"),
                ("denials", HELD),
            ]
            happened = [r[2] for r in records(ana, "thread-records")]
            assert happened == [
                "let through to run: no gate held it",
                f"held by the approval gate: {held['message']}; an operator was asked",
            ], happened

            # an edit that breaks an argument rule: refused by the rule's name, nothing runs
            edited = json.dumps({"account_id": "b2", "reason": "fraud"})
            refused = submit(ana, decision="edit", reason="a different reason", args=edited)
            assert refused.startswith("refused by the graph: edit: "), refused
            assert "known_reason" in refused and "nothing was run" in refused, refused
            assert text_of(ana, "about-0") == f"The approval gate holds the call {HELD}"
            assert crm.count("delete_customer") == 0

            # approved: the page shows what the tool answered
            message = submit(ana, decision="approve", reason="customer asked to be forgotten")
            assert message == "recorded: approved", message
            seen(ana)
            outcome = text_of(ana, "outcome")
            assert outcome == f"ana approved: {HELD} ran once and answered", outcome
            assert json.loads(text_of(ana, "result")) == {"deleted": "b2"}
            assert crm.count("delete_customer") == 1

            # the engine decision: the decision and its action, what approving sends where
            ana.get(f"{base}/inbox/escalations/{engine_thread}/{denied['escalation_id']}")
            page = seen(ana)
            assert page.index("raise_price") < page.index('"chosen_action"')  # words first
            assert text_of(ana, "about-0") == (
                f"The confidence gate denied executing decision {decision} (raise_price)"
            )
            decides = text_of(ana, "decides-0")
            assert decides.startswith("raise_price: expected value 40"), decides
            assert "confidence 0.3" in decides, decides
            assert text_of(ana, "does-0-approve") == (
                f"executes decision {decision} (raise_price) with override_safety=true and "
                f"POSTs its webhook to {webhook.url}"
            )
            assert text_of(ana, "does-0-reject").startswith(
                f"declines: decision {decision} is not executed and no webhook is sent"
            )
            screenshot(ana, tmp_path, "inbox-escalation.png")

            # approved: the page shows the receipt
            message = submit(ana, decision="approve", reason="signed off at 3 a.m.")
            assert message == "recorded: approved", message
            seen(ana)
            outcome = text_of(ana, "outcome")
            assert outcome == (
                f"ana approved: decision {decision} (raise_price) was executed with "
                f"override_safety=true; its webhook POST to {webhook.url} was delivered "
                "(HTTP 200)"
            ), outcome
            receipt = text_of(ana, "receipt")
            assert "delivered" in receipt and "execution" in receipt, receipt
            screenshot(ana, tmp_path, "inbox-answered.png")
            await async_wait_until(
                lambda: [b for b in webhook.received if b.get("decision_id") == decision],
                timeout=60,
                what="the webhook POST",
            )

            # the audit timelines: every record in words
            ana.get(f"{base}/inbox/threads/{held_thread}/timeline")
            seen(ana)
            assert records(ana, "timeline") == [
                ("tool_calls", "crm.refund", "let through to run: no gate held it"),
                (
                    "denials",
                    HELD,
                    f"held by the approval gate: {held['message']}; an operator was asked",
                ),
                ("operator_decisions", HELD, "ana approved: it ran once and answered"),
                ("tool_calls", "crm.delete_customer", "ran on ana's approval"),
            ]
            ana.get(f"{base}/inbox/threads/{engine_thread}/timeline")
            seen(ana)
            delivered = f"its webhook POST to {webhook.url} was delivered (HTTP 200)"
            assert sorted(records(ana, "timeline")) == [
                (
                    "denials",
                    f"decision {decision} (raise_price)",
                    f"denied by the confidence gate: {denied['message']}; an operator was asked",
                ),
                (
                    "operator_decisions",
                    f"decision {decision} (raise_price)",
                    f"ana approved: it was executed with override_safety=true; {delivered}",
                ),
                (
                    "receipts",
                    f"decision {decision} (raise_price)",
                    f"executed on ana's override: {delivered}",
                ),
            ]

            # the decided page: what each decision was about and what came of it
            ana.get(f"{base}/inbox/decided")
            seen(ana)
            rows = dict(
                zip(
                    cells(ana, "decided", "td.about"),
                    cells(ana, "decided", "td.happened"),
                    strict=True,
                )
            )
            assert rows == {
                HELD: "ana approved: it ran once and answered",
                f"decision {decision} (raise_price)": (
                    f"ana approved: it was executed with override_safety=true; {delivered}"
                ),
            }

        # a refusal: olga answers a copy of a thread while ana's answer is being applied. The
        # copy is made before its denial handler asks (so it asks there under the copy's own
        # thread, as a copy made while waiting could not be answered with the digest shown)
        raced = (await alice.threads.create())["thread_id"]
        slow = await log_shaky_decision(alice, raced)
        await alice.runs.wait(
            raced,
            "governed_agent",
            input=user_turn(
                f"execute_decision decision_id={slow} webhook_url={webhook.url_for_delay(6)}"
            ),
            interrupt_before=["denial_handler_confidence"],
        )
        copy = copy_thread(base, raced)
        for thread in (raced, copy):
            await alice.runs.wait(thread, "governed_agent", input=None)
        [race] = interrupt_value(await alice.threads.get_state(raced))["escalations"]
        [same] = interrupt_value(await alice.threads.get_state(copy))["escalations"]
        assert same["escalation_id"] == race["escalation_id"]
        approve = {"decisions": [{"type": "approve", "message": "ana first"}]}
        run = await ana_api.runs.create(raced, "governed_agent", command={"resume": approve})
        await async_wait_until(
            lambda: engine.executions(slow), timeout=60, what="ana's answer in flight"
        )
        with chromium(tmp_path / "chrome-olga") as olga:
            sign_in(olga, base, "tok-olga")
            wait_for(olga, lambda d: "/inbox/queue" in d.current_url)
            olga.get(f"{base}/inbox/escalations/{copy}/{race['escalation_id']}")
            refused = submit(olga, decision="reject", reason="olga says no")
            assert refused.startswith("refused: another operator decided first: "), refused
            assert "already decided by ana" in refused, refused
            seen(olga)
            await ana_api.runs.join(raced, run["run_id"])
            # the copy answered again: ana's answer is completed there, and olga is told so
            told = submit(olga, decision="reject", reason="olga says no again")
            assert told.startswith("refused: another operator decided first: "), told
            assert f"already decided by ana (override in thread {raced}" in told, told
            seen(olga)
            [done] = (await auditor.threads.get_state(copy))["values"]["operator_decisions"]
            assert (done["operator"], done["answered_in_thread"]) == ("ana", raced)

            # the queue left open when its session ends goes to sign-in, then back to the queue
            olga.get(f"{base}/inbox/queue")
            first = olga.current_window_handle
            olga.switch_to.new_window("tab")
            olga.get(f"{base}/inbox/queue")
            olga.find_element(By.CSS_SELECTOR, "form.who button").click()  # signs out
            wait_for(olga, lambda d: "/inbox/login" in d.current_url)
            olga.close()
            olga.switch_to.window(first)
            wait_for(olga, lambda d: "/inbox/login" in d.current_url)
            assert olga.current_url.endswith("/inbox/login?next=%2Finbox%2Fqueue"), olga.current_url
            sign_in_here(olga, "tok-olga")
            wait_for(olga, lambda d: d.find_elements(By.ID, "queue-live"))
            assert olga.current_url.endswith("/inbox/queue")

            # ... and so does one whose token is revoked meanwhile
            rest = {t: who for t, who in TOKENS.items() if t != "tok-olga"}
            write_auth_file(tmp_path / "auth.json", rest)
            wait_for(olga, lambda d: "/inbox/login" in d.current_url)
            assert olga.current_url.endswith("/inbox/login?next=%2Finbox%2Fqueue")
            assert not olga.find_elements(By.ID, "queue-stale")
            write_auth_file(tmp_path / "auth.json", TOKENS)

        # a bare /inbox without a session: a redirect, never the API's 401
        bare = httpx.get(f"{base}/inbox", follow_redirects=False, timeout=30)
        assert bare.status_code in (307, 308) and bare.headers["location"] == "/inbox/", bare


def sign_in_here(driver: Any, token: str) -> None:
    """Sign in on the sign-in page the browser is on (its ``next`` kept)."""
    by_id(driver, "token").send_keys(token)
    by_id(driver, "sign-in").click()
