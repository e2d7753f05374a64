"""The ``algenta-graph demo`` walkthrough: offline, no API key.

It starts the reference engine and a webhook receiver in this process, builds the governed
graph with a SQLite checkpointer and the offline :class:`~algenta_graph.models.DemoChatModel`
(a deterministic stand-in that calls the tool whose arguments the user's ``key=value`` pairs
fill), and walks through:

1. observe: the engine's contract and a read-only recommendation;
2. plan and log a decision, and a human operator approves the plan out of band (HTTP, never a
   model tool): the reference engine runs in its default, strict mode, where
   ``execute_decision`` needs an agent key enabled to execute, a decision logged with the
   ``plan_hash`` of an approved plan, that plan's single-use nonce and an idempotency key (the
   graph supplies both; the model never sees them);
3. execute it: a receipt, and the webhook really received;
4. execute it again: an idempotency denial, reported by the model (the thread's receipt stops
   it before the engine; a second session hits the engine's own gate);
5. a low-confidence decision: the confidence gate, an escalation, an operator override, a
   receipt with ``safety_overridden``;
6. a risky decision: the risk_floor gate, an escalation, declined by the operator;

and ends with the receipts table read back from the checkpoint file, checked against the
webhook receiver's log. ``--model openai:gpt-5`` swaps in a real model.
"""

from __future__ import annotations

import json
import secrets
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import httpx
from langchain_core.messages import ToolMessage

from algenta_graph.audit.records import format_records, read_records
from algenta_graph.connection.outcomes import tool_result_json
from algenta_graph.console import print_update
from algenta_graph.errors import DemoError

__all__ = ["DemoError", "run_demo"]

OPERATOR = "ana.ops (demo operator)"


def _tool_json(values: Mapping[str, Any], tool: str) -> dict[str, Any]:
    """The JSON result of the latest ``tool`` call in the thread."""
    for message in reversed(values.get("messages", [])):
        if isinstance(message, ToolMessage) and message.name == tool:
            data = tool_result_json(message)
            if data is None:
                raise DemoError(f"{tool} did not return JSON: {str(message.content)[:200]}")
            if not isinstance(data, Mapping):
                raise DemoError(f"{tool} returned {data!r}, not a JSON object")
            if message.status == "error":
                raise DemoError(f"{tool} failed: {data}")
            return dict(data)
    raise DemoError(f"the model did not call {tool}")


class _Walkthrough:
    def __init__(
        self, graph: Any, out: TextIO, approve: Callable[[Mapping[str, Any]], Any] | None = None
    ) -> None:
        self.graph = graph
        self.out = out
        self.step = 0
        self.approve = approve

    def say(self, text: str = "") -> None:
        print(text, file=self.out)

    def header(self, title: str, explain: str) -> None:
        self.step += 1
        self.say(f"\n=== {self.step}. {title} ===")
        self.say(f"    {explain}")

    async def turn(self, thread: str, payload: Any) -> dict[str, Any]:
        from langgraph.types import Command

        config = {"configurable": {"thread_id": thread}}
        if isinstance(payload, str):
            self.say(f"  [user] {payload}")
            payload = {"messages": [("user", payload)]}
        elif isinstance(payload, Command):
            self.say(f"  [operator resumes] {json.dumps(payload.resume)}")
        async for chunk in self.graph.astream(payload, config, stream_mode="updates"):
            for node, update in chunk.items():
                print_update(node, update, self.out)
        snapshot = await self.graph.aget_state(config)
        return {"values": snapshot.values, "interrupts": snapshot.interrupts}

    async def answer(self, thread: str, action: str, reason: str) -> dict[str, Any]:
        """The demo operator resumes ``thread``: ``action`` (override or decline), and why."""
        from langgraph.types import Command

        return await self.turn(
            thread, Command(resume={"action": action, "operator": OPERATOR, "reason": reason})
        )

    async def plan_and_log(self, thread: str, scenario: str) -> str:
        state = await self.turn(thread, f"plan_decision scenario={scenario}")
        plan = _tool_json(state["values"], "plan_decision")
        if self.approve is not None:
            await self.approve(plan)
        state = await self.turn(
            thread,
            "log_decision "
            f"chosen_action={plan['chosen_action']} expected_value={plan['expected_value']} "
            f"confidence={plan['confidence']} risk_p5={plan['risk_p5']} "
            f"risk_p95={plan['risk_p95']} plan_hash={plan['plan_hash']} "
            f"plan_id={plan['plan_id']}",
        )
        return str(_tool_json(state["values"], "log_decision")["decision_id"])


def _model_label(spec: Any, model: Any) -> str:
    if spec is None or type(model).__name__ == "DemoChatModel":
        return "DemoChatModel (offline deterministic stand-in, not a real LLM)"
    return spec if isinstance(spec, str) else type(model).__name__


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise DemoError(what)


async def run_demo(
    *,
    model: Any = None,
    db: str | None = None,
    keep: bool = False,
    webhook_log: str | None = None,
    out: TextIO | None = None,
) -> int:
    """Run the walkthrough; returns 0 when every step had its expected outcome.

    ``model``: a chat model, an ``init_chat_model`` string or ``None`` (the offline demo
    model); ``db``: the SQLite checkpoint file (default: a temporary one).
    """
    from algenta_graph.engine import ApiKey, ReferenceEngine, WebhookReceiver
    from algenta_graph.graph import governed_agent
    from algenta_graph.models import resolve_model
    from algenta_graph.serving.checkpointer import open_checkpointer

    out = out or sys.stdout
    agent_token, operator_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    override_token = secrets.token_urlsafe(24)
    keys = {
        agent_token: ApiKey("demo-graph", frozenset({"agent"}), execute=True),
        operator_token: ApiKey(OPERATOR, frozenset({"operator"})),
        # the graph's operator path: overrides need an operator key at the engine too
        override_token: ApiKey("demo-operator-path", frozenset({"operator"}), execute=True),
    }
    chat_model = resolve_model(model)  # an unusable --model fails here, before anything starts
    tmp: str | None = None
    if db is None:
        tmp = tempfile.mkdtemp(prefix="algenta-demo-")
        db = str(Path(tmp) / "demo-checkpoints.sqlite")
    say = _Walkthrough(None, out).say
    try:
        async with (
            ReferenceEngine(keys=keys) as engine,
            WebhookReceiver(log_path=webhook_log) as webhook,
        ):

            async def approve(plan: Mapping[str, Any]) -> None:
                """The operator approves the plan out of band (HTTP, operator key)."""
                async with httpx.AsyncClient(timeout=30) as client:
                    answer = await client.post(
                        engine.approve_url.format(plan_id=plan["plan_id"]),
                        json={"plan_hash": plan["plan_hash"], "nonce": plan["nonce"]},
                        headers={"Authorization": f"Bearer {operator_token}"},
                    )
                _expect(answer.status_code == 200, f"plan approval failed: {answer.text}")
                say(
                    f"  [operator approves plan {plan['plan_id']} out of band: HTTP "
                    f"{answer.status_code} {answer.json().get('status')}]"
                )

            say("algenta-graph demo: a governed LangGraph agent, offline")
            say(f"  reference engine : {engine.url}")
            say(f"  webhook receiver : {webhook.url}")
            say(f"  checkpoints      : {db} (SQLite)")
            say("  engine mode      : strict (keys, approved plans, nonce, idempotency key)")
            say(f"  model            : {_model_label(model, chat_model)}")
            async with (
                open_checkpointer(db) as saver,
                governed_agent(
                    chat_model,
                    base_url=engine.url,
                    api_key=agent_token,
                    operator_api_key=override_token,
                    profile="execute",
                    checkpointer=saver,
                ) as graph,
            ):
                w = _Walkthrough(graph, out, approve)
                t = "demo"

                w.header(
                    "Observe", "Read the engine's contract; retrieval binds the few tools that fit."
                )
                await w.turn(t, "What can this engine do? Show me its contract.")
                await w.turn(t, "recommend scenario=restock_inventory")

                w.header("Plan and log", "Plan a decision, then record it (nothing executes yet).")
                decision = await w.plan_and_log(t, "restock_inventory")
                say(f"    -> decision {decision} logged")

                w.header(
                    "Execute", "Dispatch it: the engine POSTs the webhook and returns a receipt."
                )
                state = await w.turn(
                    t, f"execute_decision decision_id={decision} webhook_url={webhook.url}"
                )
                receipts = state["values"]["receipts"]
                _expect(
                    any(r["decision_id"] == decision for r in receipts), "no receipt for step 3"
                )
                _expect(len(webhook.received) == 1, "the webhook did not receive the delivery")
                say(f"    -> receipt in state; webhook receiver got {len(webhook.received)} POST")

                w.header(
                    "Execute again",
                    "Same decision, same thread: the thread's receipt stops it before the engine "
                    "(idempotency, policy: report).",
                )
                state = await w.turn(
                    t, f"execute_decision decision_id={decision} webhook_url={webhook.url}"
                )
                _expect(
                    state["values"]["denials"][-1]["gate"] == "idempotency",
                    "no idempotency denial in step 4",
                )
                say("    A second session (another thread) tries too: the engine's own gate.")
                await w.turn(
                    "demo-second-session",
                    f"plan_decision scenario=restock_inventory decision_id={decision}",
                )
                state = await w.turn(
                    "demo-second-session",
                    f"execute_decision decision_id={decision} webhook_url={webhook.url}",
                )
                _expect(
                    state["values"]["denials"][-1]["gate"] == "idempotency",
                    "the engine did not deny the second session",
                )
                _expect(len(webhook.received) == 1, "a repeated execution reached the webhook")

                w.header(
                    "Low confidence",
                    "A coin-flip price change: the confidence gate denies it, the graph "
                    "escalates to a human operator (interrupt), who overrides.",
                )
                decision2 = await w.plan_and_log(t, "price_increase")
                state = await w.turn(
                    t, f"execute_decision decision_id={decision2} webhook_url={webhook.url}"
                )
                _expect(bool(state["interrupts"]), "the confidence denial did not escalate")
                _expect(
                    state["interrupts"][0].value["gate"] == "confidence",
                    "the escalation is not for the confidence gate",
                )
                state = await w.answer(
                    t, "override", "pricing committee approved the test in writing"
                )
                last = state["values"]["receipts"][-1]
                _expect(
                    last["decision_id"] == decision2 and last["safety_overridden"] is True,
                    "the override produced no receipt with safety_overridden",
                )

                w.header(
                    "Risky",
                    "A regional expansion with a fat left tail: the risk_floor gate denies it; "
                    "the operator declines to override.",
                )
                decision3 = await w.plan_and_log(t, "expand_region")
                state = await w.turn(
                    t, f"execute_decision decision_id={decision3} webhook_url={webhook.url}"
                )
                _expect(bool(state["interrupts"]), "the risk_floor denial did not escalate")
                state = await w.answer(t, "decline", "downside exceeds this quarter's risk budget")
                _expect(
                    state["values"]["operator_decisions"][-1]["result"] == "declined",
                    "the decline was not recorded",
                )
            delivered = [r["decision_id"] for r in webhook.received]

        w.header("Receipts", f"Read back from the checkpoint file {db}.")
        records = read_records(db)
        say(format_records(records))
        from_checkpoint = sorted(
            r["decision_id"]
            for kinds in records.values()
            for r in kinds["receipts"]
            if r.get("execution_status") == "delivered"
        )
        _expect(
            from_checkpoint == sorted(delivered),
            f"checkpoint receipts {from_checkpoint} != webhook log {sorted(delivered)}",
        )
        say(
            f"\nOK: {len(from_checkpoint)} delivered receipts in the checkpoint file match the "
            f"{len(delivered)} POSTs the webhook receiver logged."
        )
        if tmp is not None and keep:
            say(f"(checkpoint file kept: {db}; try `algenta-graph receipts --db {db}`)")
        return 0
    except DemoError as exc:
        print(f"\ndemo failed: {exc}", file=out)
        return 1
    finally:
        if tmp is not None and not keep:
            shutil.rmtree(tmp, ignore_errors=True)
