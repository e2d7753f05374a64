"""``execute_decision`` on the reference engine, end to end over real MCP and real HTTP: the
gates and their overrides, real webhook deliveries and failures, concurrency, restarts, auth,
and every ``--denials`` wire form read back by the project's own outcome parser."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import mcp.types as mt
import pytest
from mcp import ClientSession

from algenta_graph._net import free_port
from algenta_graph.connection.outcomes import (
    ExecutionDenial,
    ExecutionFailure,
    ExecutionReceipt,
    parse_execution_outcome,
)
from algenta_graph.engine import DENIAL_FORMS, ReferenceEngine, WebhookReceiver, read_log

Session = Callable[..., Any]


def text(result: Any) -> str:
    """The text of a tool result's first content block."""
    block = result.content[0]
    assert isinstance(block, mt.TextContent), block
    return block.text


RECEIPT_FIELDS = {
    "decision_id",
    "webhook_url",
    "execution_status",
    "response_code",
    "executed_at",
    "policy_snapshot_id",
    "schema_snapshot_id",
    "manifest_version",
    "payload_summary",
    "safety_overridden",
}


def body(result: Any) -> Any:
    return json.loads(text(result))


async def log(
    s: ClientSession, *, confidence: float = 0.9, risk_p5: float = 0.1, action: str = "ship_it"
) -> str:
    result = await s.call_tool(
        "log_decision",
        {
            "chosen_action": action,
            "expected_value": 128000.0,
            "confidence": confidence,
            "risk_p5": risk_p5,
            "risk_p95": max(risk_p5, 0.9),
        },
    )
    assert not result.isError, text(result)
    return str(body(result)["decision_id"])


async def execute(s: ClientSession, decision_id: str, url: str, **extra: Any) -> Any:
    return await s.call_tool(
        "execute_decision", {"decision_id": decision_id, "webhook_url": url, **extra}
    )


async def receipt(s: ClientSession, decision_id: str, url: str, **extra: Any) -> dict[str, Any]:
    result = await execute(s, decision_id, url, **extra)
    assert not result.isError, text(result)
    out = dict(body(result))
    assert set(out) >= RECEIPT_FIELDS
    return out


async def denial(s: ClientSession, decision_id: str, url: str, **extra: Any) -> dict[str, Any]:
    result = await execute(s, decision_id, url, **extra)
    assert result.isError, text(result)
    return dict(body(result)["error"])


def _rpc(method: str, params: dict[str, Any], rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


_INIT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "test", "version": "0"},
}


# -- delivery ----------------------------------------------------------------------------------


async def test_delivered_receipt_and_webhook_body(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    meta = {"algenta_graph": {"thread_id": "t-1", "tool_call_id": "call-1"}}
    async with mcp_session(engine.url) as s:
        decision_id = await log(s)
        r = await receipt(s, decision_id, webhook.url, metadata=meta)
        stored = body(await s.call_tool("get_decision", {"decision_id": decision_id}))
    assert r["execution_status"] == "delivered" and r["response_code"] == 200
    assert r["decision_id"] == decision_id and r["webhook_url"] == webhook.url
    assert r["payload_summary"] == {
        "action": "ship_it",
        "confidence": 0.9,
        "expected_value": 128000.0,
    }
    assert r["safety_overridden"] is False
    assert r["policy_snapshot_id"] == engine.policy.snapshot_id
    assert isinstance(parse_execution_outcome(r), ExecutionReceipt)
    # the webhook got one real POST carrying the decision, the action and the caller's metadata
    assert len(webhook.received) == 1
    sent = webhook.received[0]
    assert sent["decision_id"] == decision_id and sent["chosen_action"] == "ship_it"
    assert sent["metadata"] == meta and sent["execution_id"] == r["execution_id"]
    assert [e["body"] for e in read_log(webhook.log_path or "")] == webhook.received
    # the engine kept the execution with its flags and metadata
    [execution] = stored["executions"]
    assert {k: execution[k] for k in RECEIPT_FIELDS} == {k: r[k] for k in RECEIPT_FIELDS}
    assert execution["force"] is False and execution["override_safety"] is False
    assert execution["metadata"] == meta
    assert engine.executions(decision_id) == stored["executions"]


async def test_webhook_500_is_a_failed_receipt_and_may_be_retried(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with mcp_session(engine.url) as s:
        decision_id = await log(s)
        failed = await receipt(s, decision_id, webhook.url_for_status(500))
        retried = await receipt(s, decision_id, webhook.url)
    assert failed["execution_status"] == "failed" and failed["response_code"] == 500
    assert "500" in failed["failure_reason"]
    outcome = parse_execution_outcome(failed)
    assert isinstance(outcome, ExecutionReceipt) and outcome.execution_status == "failed"
    # a failed delivery does not count for idempotency
    assert retried["execution_status"] == "delivered"
    assert [e["execution_status"] for e in engine.executions(decision_id)] == [
        "failed",
        "delivered",
    ]
    assert len(webhook.received) == 2


@pytest.mark.parametrize(
    ("code", "status"), [(201, "delivered"), (204, "delivered"), (404, "failed"), (503, "failed")]
)
async def test_any_2xx_is_delivered_anything_else_failed(
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Session,
    code: int,
    status: str,
) -> None:
    async with mcp_session(engine.url) as s:
        r = await receipt(s, await log(s), webhook.url_for_status(code))
    assert r["execution_status"] == status and r["response_code"] == code
    assert (r["failure_reason"] is None) is (status == "delivered")


def test_webhook_receiver_records_bodies_and_answers_as_asked(tmp_path: Path) -> None:
    log_path = tmp_path / "hooks.jsonl"
    with WebhookReceiver(log_path=log_path) as hook:
        assert httpx.post(hook.url, json={"n": 1}).status_code == 200
        assert httpx.post(hook.url_for_status(418), json={"n": 2}).status_code == 418
        assert httpx.post(hook.url_for_delay(0.05), json={"n": 3}).json()["delayed"] == 0.05
        assert httpx.get(hook.url).status_code == 405
    assert hook.received == [{"n": 1}, {"n": 2}, {"n": 3}]
    assert [r["path"] for r in read_log(log_path)] == ["/hook", "/status/418", "/delay/0.05"]


async def test_a_webhook_slower_than_the_timeout_is_unknown_and_counts_as_executed(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    """The POST reached the webhook, which answers after the timeout: the receipt says the
    outcome is unknown, and every further call is an idempotency denial: 4 calls, 1 POST."""
    slow = webhook.url_for_delay(3)
    async with mcp_session(engine.url) as s:
        decision_id = await log(s)
        first = await receipt(s, decision_id, slow, timeout_seconds=1)
        again = [await denial(s, decision_id, slow, timeout_seconds=1) for _ in range(2)]
        fast_url_too = await denial(s, decision_id, webhook.url)
    assert first["execution_status"] == "unknown" and first["response_code"] is None
    assert first["retryable"] is False
    assert (
        "timeout" in first["failure_reason"]
        and "after the request was sent" in (first["failure_reason"])
    )
    assert [d["gate"] for d in [*again, fast_url_too]] == ["idempotency"] * 3
    assert "unknown outcome" in fast_url_too["message"]
    assert len(webhook.received) == 1 and webhook.received[0]["decision_id"] == decision_id
    assert [e["execution_status"] for e in engine.executions(decision_id)] == ["unknown"]


async def test_the_default_timeout_and_a_15_s_webhook_give_one_post(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    """A delivery of unknown outcome: the default timeout (10 s) and a 15 s webhook, 3 calls."""
    slow = webhook.url_for_delay(15)
    async with mcp_session(engine.url) as s:
        decision_id = await log(s)
        first = await receipt(s, decision_id, slow)
        again = [await denial(s, decision_id, slow) for _ in range(2)]
    assert first["execution_status"] == "unknown" and "within 10s" in first["failure_reason"]
    assert [d["gate"] for d in again] == ["idempotency", "idempotency"]
    assert len(webhook.received) == 1


async def test_an_unknown_delivery_is_sent_again_only_with_force(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with mcp_session(engine.url) as s:
        decision_id = await log(s)
        await receipt(s, decision_id, webhook.url_for_delay(3), timeout_seconds=1)
        denied = await denial(s, decision_id, webhook.url)
        forced = await receipt(s, decision_id, webhook.url, force=True)
    assert denied["gate"] == "idempotency" and "force" in denied["override_hint"]
    assert forced["execution_status"] == "delivered"
    assert [e["force"] for e in engine.executions(decision_id)] == [False, True]
    assert len(webhook.received) == 2


async def test_a_connection_dropped_after_the_request_is_unknown(
    engine: ReferenceEngine, mcp_session: Session
) -> None:
    """A webhook that reads the whole request and closes the connection without answering."""
    received: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.readuntil(b"\r\n\r\n"))
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with mcp_session(engine.url) as s:
            decision_id = await log(s)
            r = await receipt(s, decision_id, f"http://127.0.0.1:{port}/hook")
            again = await denial(s, decision_id, f"http://127.0.0.1:{port}/hook")
    finally:
        server.close()
        await server.wait_closed()
    assert r["execution_status"] == "unknown" and r["response_code"] is None
    assert "after the request was sent" in r["failure_reason"]
    assert again["gate"] == "idempotency"
    assert len(received) == 1 and received[0].startswith(b"POST /hook")


@pytest.mark.parametrize("bad", [0, 0.3, 0.999, 60.5, 1e9, -1])
async def test_timeout_seconds_outside_1_to_60_is_refused_naming_the_field(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session, bad: float
) -> None:
    async with mcp_session(engine.url) as s:
        decision_id = await log(s)
        result = await execute(s, decision_id, webhook.url, timeout_seconds=bad)
        schema = next(t for t in (await s.list_tools()).tools if t.name == "execute_decision")
    assert result.isError
    error = body(result)["error"]
    assert error["code"] == "invalid_arguments" and "timeout_seconds" in error["message"]
    assert webhook.received == [] and engine.executions() == []
    timeout = schema.inputSchema["properties"]["timeout_seconds"]
    assert (timeout["minimum"], timeout["maximum"], timeout["default"]) == (1, 60, 10)


@pytest.mark.parametrize("ok", [1, 60])
async def test_timeout_seconds_bounds_are_accepted(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session, ok: float
) -> None:
    async with mcp_session(engine.url) as s:
        r = await receipt(s, await log(s), webhook.url, timeout_seconds=ok)
    assert r["execution_status"] == "delivered"


async def test_refused_connection_is_a_failed_receipt_and_stays_retryable(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    closed = f"http://127.0.0.1:{free_port()}/hook"
    async with mcp_session(engine.url) as s:
        decision_id = await log(s)
        r = await receipt(s, decision_id, closed, timeout_seconds=5)
        retried = await receipt(s, decision_id, webhook.url)
    assert r["execution_status"] == "failed" and r["response_code"] is None
    assert "refused" in r["failure_reason"] and "nothing was sent" in r["failure_reason"]
    assert r["retryable"] is True
    assert retried["execution_status"] == "delivered"
    assert len(webhook.received) == 1


async def test_non_loopback_webhook_host_is_refused_and_nothing_is_sent(
    engine: ReferenceEngine, mcp_session: Session
) -> None:
    async with mcp_session(engine.url) as s:
        decision_id = await log(s)
        result = await execute(s, decision_id, "https://hooks.example.test/algenta")
    assert result.isError
    err = body(result)["error"]
    assert err["code"] == "webhook_host_not_allowed" and "hooks.example.test" in err["message"]
    assert "gate" not in err
    assert isinstance(parse_execution_outcome(result), ExecutionFailure)
    assert engine.executions() == []


async def test_unknown_decision_is_an_error_not_a_gate(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with mcp_session(engine.url) as s:
        result = await execute(s, "dec_missing", webhook.url)
    assert result.isError
    assert body(result)["error"]["code"] == "decision_not_found"
    assert isinstance(parse_execution_outcome(result), ExecutionFailure)
    assert webhook.received == []


# -- gates -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gate", "confidence", "risk_p5"),
    [("confidence", 0.4, 0.1), ("risk_floor", 0.9, -0.8)],
)
async def test_safety_gate_blocks_and_override_safety_lifts_it(
    engine: ReferenceEngine,
    webhook: WebhookReceiver,
    mcp_session: Session,
    gate: str,
    confidence: float,
    risk_p5: float,
) -> None:
    async with mcp_session(engine.url) as s:
        decision_id = await log(s, confidence=confidence, risk_p5=risk_p5)
        denied = await denial(s, decision_id, webhook.url)
        forced = await denial(s, decision_id, webhook.url, force=True)
        assert webhook.received == []
        r = await receipt(s, decision_id, webhook.url, override_safety=True)
    assert denied["code"] == f"execution_blocked_{gate}" and denied["gate"] == gate
    assert "override_safety" in denied["override_hint"]
    assert forced["gate"] == gate  # force does not lift a safety gate
    assert r["execution_status"] == "delivered" and r["safety_overridden"] is True
    [execution] = engine.executions(decision_id)
    assert execution["override_safety"] is True and execution["force"] is False
    assert len(webhook.received) == 1 and webhook.received[0]["safety_overridden"] is True


async def test_override_safety_on_a_passing_decision_is_not_an_override(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with mcp_session(engine.url) as s:
        r = await receipt(s, await log(s), webhook.url, override_safety=True)
    assert r["safety_overridden"] is False


async def test_idempotency_gate_and_force_allows_one_re_execution_per_call(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    async with mcp_session(engine.url) as s:
        decision_id = await log(s)
        first = await receipt(s, decision_id, webhook.url)
        again = await denial(s, decision_id, webhook.url)
        forced = await receipt(s, decision_id, webhook.url, force=True)
        after = await denial(s, decision_id, webhook.url)
    assert first["execution_status"] == forced["execution_status"] == "delivered"
    assert again["code"] == after["code"] == "execution_blocked_idempotency"
    assert "force" in again["override_hint"]
    assert [e["force"] for e in engine.executions(decision_id)] == [False, True]
    assert len(webhook.received) == 2


async def test_gates_apply_in_order_idempotency_confidence_risk_floor(
    start_engine: Callable[..., ReferenceEngine], webhook: WebhookReceiver, mcp_session: Session
) -> None:
    engine = start_engine()
    lenient = start_engine(min_confidence=0.3)
    async with mcp_session(engine.url) as s:
        both = await log(s, confidence=0.4, risk_p5=-0.9)  # trips confidence and risk_floor
        first = await denial(s, both, webhook.url)
        await receipt(s, both, webhook.url, override_safety=True)
        second = await denial(s, both, webhook.url, override_safety=True)  # idempotency first
        third = await denial(s, both, webhook.url, force=True)  # then confidence
    async with mcp_session(lenient.url) as s:
        fourth = await denial(s, await log(s, confidence=0.4, risk_p5=-0.9), webhook.url)
    assert [d["gate"] for d in (first, second, third, fourth)] == [
        "confidence",
        "idempotency",
        "confidence",
        "risk_floor",
    ]


async def test_concurrent_executions_of_one_decision_deliver_once(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    url = webhook.url_for_delay(
        0.5
    )  # the first delivery is still in flight when the second arrives
    async with mcp_session(engine.url) as a, mcp_session(engine.url) as b:
        decision_id = await log(a)
        results = await asyncio.gather(
            execute(a, decision_id, url), execute(b, decision_id, url), execute(a, decision_id, url)
        )
    outcomes = [parse_execution_outcome(r) for r in results]
    receipts = [o for o in outcomes if isinstance(o, ExecutionReceipt)]
    denials = [o for o in outcomes if isinstance(o, ExecutionDenial)]
    assert len(receipts) == 1 and receipts[0].execution_status == "delivered"
    assert [d.gate for d in denials] == ["idempotency", "idempotency"]
    assert len(webhook.received) == 1
    assert len(engine.executions(decision_id)) == 1


async def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_a_cancelled_call_still_records_the_delivery_it_started(
    engine: ReferenceEngine, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    """The client cancels (MCP notifications/cancelled) while the webhook holds its answer: the
    engine finishes the delivery and keeps the receipt, so a retry is an idempotency denial,
    never a second delivery."""
    async with mcp_session(engine.url) as s:
        decision_id = await log(s)
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        init = await http.post(engine.url, json=_rpc("initialize", _INIT))
        sid = {"mcp-session-id": init.headers["mcp-session-id"]}
        await http.post(
            engine.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=sid
        )
        args = {"decision_id": decision_id, "webhook_url": webhook.url_for_delay(1.0)}
        call = asyncio.create_task(
            http.post(
                engine.url,
                json=_rpc("tools/call", {"name": "execute_decision", "arguments": args}, 7),
                headers=sid,
            )
        )
        await _wait_for(lambda: len(webhook.received) == 1, "the webhook POST")
        cancel = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": 7, "reason": "client gave up"},
        }
        assert (await http.post(engine.url, json=cancel, headers=sid)).status_code == 202
        answer = await call
    assert "Request cancelled" in answer.text  # the server did cancel the request
    # the execution is on record (outcome unknown) before the POST; then its final receipt
    await _wait_for(
        lambda: [e["execution_status"] for e in engine.executions(decision_id)] == ["delivered"],
        "the stored receipt",
    )
    [execution] = engine.executions(decision_id)
    assert execution["execution_status"] == "delivered"
    async with mcp_session(engine.url) as s:
        again = await denial(s, decision_id, webhook.url)
    assert again["gate"] == "idempotency"
    assert len(webhook.received) == 1


# -- persistence -------------------------------------------------------------------------------


async def test_state_survives_a_restart_on_the_same_db(
    tmp_path: Path, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    db = tmp_path / "engine.sqlite"
    async with ReferenceEngine(db=db, relaxed=True) as engine, mcp_session(engine.url) as s:
        decision_id = await log(s)
        first = await receipt(s, decision_id, webhook.url, metadata={"run": 1})
        port = engine.port
    async with (
        ReferenceEngine(db=db, port=port, relaxed=True) as engine,
        mcp_session(engine.url) as s,
    ):
        stored = body(await s.call_tool("get_decision", {"decision_id": decision_id}))
        listed = body(await s.call_tool("list_decisions", {}))
        again = await denial(s, decision_id, webhook.url)
        log_names = [c["name"] for c in engine.call_log()]
    assert stored["decision"]["chosen_action"] == "ship_it"
    assert stored["executions"][0]["execution_id"] == first["execution_id"]
    assert stored["executions"][0]["metadata"] == {"run": 1}
    assert listed["total"] == 1 and listed["decisions"][0]["last_execution_status"] == "delivered"
    assert again["gate"] == "idempotency"
    assert log_names[:2] == ["log_decision", "execute_decision"]
    assert log_names[-3:] == ["get_decision", "list_decisions", "execute_decision"]
    assert len(webhook.received) == 1


async def test_an_engine_object_can_be_restarted(tmp_path: Path, mcp_session: Session) -> None:
    engine = ReferenceEngine(db=tmp_path / "e.sqlite", relaxed=True)
    for _ in range(2):
        with engine:
            async with mcp_session(engine.url) as s:
                await log(s)
        assert not engine.running
    assert [c["name"] for c in engine.call_log()] == ["log_decision", "log_decision"]


# -- auth --------------------------------------------------------------------------------------


async def test_api_key_guards_every_mcp_request_including_initialize(
    start_engine: Callable[..., ReferenceEngine], mcp_session: Session
) -> None:
    engine = start_engine(api_key="s3cret")
    headers = {"Accept": "application/json, text/event-stream"}
    init = _rpc("initialize", _INIT)
    async with httpx.AsyncClient(headers=headers, timeout=10) as http:
        anonymous = await http.post(engine.url, json=init)
        wrong = await http.post(engine.url, json=init, headers={"Authorization": "Bearer nope"})
        basic = await http.post(engine.url, json=init, headers={"Authorization": "Basic s3cret"})
        listing = await http.post(engine.url, json=_rpc("tools/list", {}, 2))
        stream = await http.get(engine.url)
        lower = await http.post(engine.url, json=init, headers={"Authorization": "bearer s3cret"})
        upper = await http.post(engine.url, json=init, headers={"Authorization": "BEARER s3cret"})
    refused = (anonymous, wrong, basic, listing, stream)
    assert [r.status_code for r in refused] == [401] * 5
    assert all(r.json()["error"]["code"] == "unauthorized" for r in refused)
    assert "Bearer" in anonymous.json()["error"]["message"]
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    assert lower.status_code == upper.status_code == 200  # the scheme is case-insensitive
    assert engine.call_log() == []  # refused requests never reached a tool
    async with mcp_session(engine.url, api_key="s3cret") as s:
        ok = await s.call_tool("get_contract", {})
    assert not ok.isError and body(ok)["auth"] == "bearer"
    assert [c["name"] for c in engine.call_log()] == ["get_contract"]


# -- wire forms --------------------------------------------------------------------------------


@pytest.mark.parametrize("form", DENIAL_FORMS)
async def test_every_denial_wire_form_is_parsed_by_the_outcome_parser(
    start_engine: Callable[..., ReferenceEngine],
    webhook: WebhookReceiver,
    mcp_session: Session,
    form: str,
) -> None:
    engine = start_engine(denials=form)
    async with mcp_session(engine.url) as s:
        low = await log(s, confidence=0.2)
        risky = await log(s, risk_p5=-0.95)
        good = await log(s)
        results = {
            "confidence": await execute(s, low, webhook.url),
            "risk_floor": await execute(s, risky, webhook.url),
            "receipt": await execute(s, good, webhook.url),
            "idempotency": await execute(s, good, webhook.url),
            "missing": await execute(s, "dec_missing", webhook.url),
        }
    for gate in ("confidence", "risk_floor", "idempotency"):
        raw = results[gate]
        assert raw.isError is (form == "mcp-error")
        outcome = parse_execution_outcome(raw)
        assert isinstance(outcome, ExecutionDenial), (form, gate, outcome)
        assert outcome.gate == gate and outcome.code == f"execution_blocked_{gate}"
        assert outcome.override_hint and outcome.message
        error = body(raw)["error"]
        if form == "sdk":
            assert error["status_code"] == 409
            assert error["message"].startswith("API error 409: ")
            upstream = json.loads(error["message"].removeprefix("API error 409: "))
            assert upstream["error"]["gate"] == gate
        else:
            assert error["gate"] == gate
    got = parse_execution_outcome(results["receipt"])
    assert isinstance(got, ExecutionReceipt) and got.execution_status == "delivered"
    assert isinstance(parse_execution_outcome(results["missing"]), ExecutionFailure)
    assert len(webhook.received) == 1


# The schema of the first release (no idempotency_key / plan_id / identity on executions).
_FIRST_SCHEMA = """
CREATE TABLE decisions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, decision_id TEXT NOT NULL UNIQUE,
    chosen_action TEXT NOT NULL, expected_value REAL NOT NULL, confidence REAL NOT NULL,
    risk_p5 REAL NOT NULL, risk_p95 REAL NOT NULL, rationale TEXT, scenario TEXT,
    plan_hash TEXT, logged_at TEXT NOT NULL);
CREATE TABLE executions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, execution_id TEXT NOT NULL UNIQUE,
    decision_id TEXT NOT NULL REFERENCES decisions(decision_id),
    execution_status TEXT NOT NULL, receipt TEXT NOT NULL, force INTEGER NOT NULL,
    override_safety INTEGER NOT NULL, metadata TEXT, executed_at TEXT NOT NULL);
"""


async def test_a_database_of_the_first_release_is_completed_and_its_deliveries_count(
    tmp_path: Path, webhook: WebhookReceiver, mcp_session: Session
) -> None:
    import sqlite3

    db = tmp_path / "old.sqlite"
    receipt_ = {"decision_id": "dec_old", "execution_status": "delivered"}
    with sqlite3.connect(db) as conn:
        conn.executescript(_FIRST_SCHEMA)
        conn.execute(
            "INSERT INTO decisions(decision_id, chosen_action, expected_value, confidence,"
            " risk_p5, risk_p95, logged_at) VALUES ('dec_old', 'a', 1, 0.9, 0.1, 0.2, 'x')"
        )
        conn.execute(
            "INSERT INTO executions(execution_id, decision_id, execution_status, receipt, force,"
            " override_safety, executed_at) VALUES ('exe_old', 'dec_old', 'delivered', ?, 0, 0,"
            " 'x')",
            (json.dumps(receipt_),),
        )
    conn.close()
    async with ReferenceEngine(db=db, relaxed=True) as engine, mcp_session(engine.url) as s:
        again = await denial(s, "dec_old", webhook.url)
        new = await receipt(s, await log(s), webhook.url)
    assert again["gate"] == "idempotency"
    assert new["execution_status"] == "delivered" and len(webhook.received) == 1
