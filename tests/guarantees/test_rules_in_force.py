"""Rules that mean what they say, against real servers: a CRM over MCP (FastMCP, bearer token,
a tool it marks ``destructiveHint``), the reference engine, SQLite checkpoints.

1. **Misconfigured rules refused at start.** Each rule that would govern nothing or check less
   than it says (a typo in every kind of pattern, a posture for a server that is not there, a
   server down and not optional, an argument no tool takes, a type the tool does not take) is
   refused by ``create_governed_agent`` and by ``algenta-graph config check``; each schema whose
   constraint a value could slip past (no ``type``, a misspelt or unenforced keyword, an
   unchecked format, an external reference, a negated enum) is refused when it is made.
2. **Format and conversion bypass attempts denied.** Refunds over 1000 dressed up as text
   FastMCP converts (``"5000"``, ``"5e3"``, ``" 5000"``, ...), as a boolean, a list or an
   object; emails to addresses a format check alone would pass; executions to webhooks outside
   the rule (not a URI, another scheme, another host, not a string).
3. **Edits and approvals refused.** An operator's edit of a held refund beyond the rule (as a
   number and as text), an edit of an engine ``confidence`` escalation to a forbidden webhook,
   an approval of an ``arguments`` escalation whose call breaks another rule, and answers after
   the graph is rebuilt with the rule changed (the old digest: stale; no digest: the rule in
   force).

The proof is what the CRM and the engine really received: no call outside the rules ran.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crm_support import TOKEN, CrmServer, running_crm
from graph_support import log_decision
from guarantee_support import figure
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command
from pydantic import ValidationError

from algenta_graph._net import free_port
from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.errors import ConfigError
from algenta_graph.governance.tool_gates import ArgumentRule, ToolGates, parse_tool_gates
from algenta_graph.graph import create_governed_agent
from algenta_graph.testing import ScriptedChatModel

pytestmark = pytest.mark.timeout(600)

LIMIT = {"properties": {"amount": {"type": "number", "maximum": 1000}}}
EMAIL = {
    "properties": {
        "address": {
            "type": "string",
            "format": "email",
            "pattern": r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$",
        }
    }
}
HOOKS = {
    "properties": {
        "webhook_url": {"type": "string", "format": "uri", "pattern": r"^http://127\.0\.0\.1:\d+/"}
    }
}
KNOWN = {"properties": {"account_id": {"type": "string", "pattern": "^a[0-9]+$"}}}

MISCONFIGURED: list[tuple[str, dict[str, Any]]] = [
    ("approval typo", {"require_approval": ["crm.delete_custmer"]}),
    ("bare typo", {"require_approval": ["delete_custmer"]}),
    ("case", {"require_approval": ["crm.Delete_Customer"]}),
    ("wrong server", {"require_approval": ["crn.delete_customer"]}),
    ("glob naming nothing", {"require_approval": ["crm.remove_*"]}),
    ("allow typo", {"allow": ["crm.purge_custmer"]}),
    ("budget typo", {"budgets": [{"tool": "crm.lookup_custmer", "thread_limit": 1}]}),
    ("engine tool typo", {"budgets": [{"tool": "algenta.execute_decison", "run_limit": 1}]}),
    ("rule typo", {"argument_rules": [{"name": "r", "tool": "crm.refnd", "schema": LIMIT}]}),
    (
        "argument typo",
        {
            "argument_rules": [
                {
                    "name": "r",
                    "tool": "crm.refund",
                    "schema": {"properties": {"amout": {"type": "number", "maximum": 1}}},
                }
            ]
        },
    ),
    (
        "type the tool does not take",
        {
            "argument_rules": [
                {
                    "name": "r",
                    "tool": "crm.refund",
                    "schema": {"properties": {"amount": {"type": "string", "maxLength": 3}}},
                }
            ]
        },
    ),
    ("posture of no server", {"servers": {"crn": {"unlisted": "deny"}}}),
    ("down and not optional", {"require_approval": ["billing.refund"]}),
]
UNSAFE_SCHEMAS: list[dict[str, Any]] = [
    {"properties": {"amount": {"maximum": 1000}}},
    {"properties": {"address": {"format": "email"}}},
    {"properties": {"amount": {"type": "number", "maximun": 1000}}},
    {"properties": {"phone": {"type": "string", "format": "phone"}}},
    {"properties": {"body": {"type": "string", "contentEncoding": "base64"}}},
    {"properties": {"amount": {"$ref": "https://schemas.example/amount"}}},
    {"properties": {"amount": {"not": {"enum": [5000]}}}},
    {"properties": {"amount": {"type": ["number", "string"], "maximum": 1000}}},
    {"properties": {"amount": {"type": "string", "maximum": 1000}}},
    {"properties": {"metadata": {"properties": {"x": {"type": "number"}}}}},
]
AMOUNTS: list[Any] = [
    "5000", "5e3", " 5000", "5000.0", "1e9", "+5000", "5_000", "Infinity", True, [5000],
    {"value": 5000}, None, 1000.01, 5000, 10**12,
]  # fmt: skip
ADDRESSES = [
    "not an email; rm -rf /",
    "a@b; rm -rf /",
    "ana@example.com\nBcc: all@example.com",
    "@example.com",
    "ana@",
    "",
    42,
]
HOOK_URLS: list[Any] = [
    "::not a uri::",
    "javascript:alert(1)",
    "https://evil.example/steal",
    "http://127.0.0.1.evil.example/",
    "file:///etc/passwd",
    ["http://127.0.0.1:1/"],
    12345,
]


def call(name: str, args: dict[str, Any], n: int) -> dict[str, Any]:
    return {"content": "", "tool_calls": [{"name": name, "args": args, "id": f"c{n}"}]}


@pytest.fixture
def crm() -> Iterator[CrmServer]:
    with running_crm(destructive=True) as server:
        yield server


def _config_file(
    tmp_path: Path, engine: ReferenceEngine, crm: CrmServer, dead: str, gates: dict[str, Any]
) -> Path:
    import json

    path = tmp_path / f"agent-{len(list(tmp_path.glob('agent-*.json')))}.json"
    path.write_text(
        json.dumps(
            {
                "base_url": engine.url,
                "profile": "execute",
                "extra_servers": {
                    "crm": {
                        "transport": "streamable_http",
                        "url": crm.url,
                        "headers": {"Authorization": {"env": "CRM_TOKEN", "prefix": "Bearer "}},
                    },
                    "billing": {"transport": "streamable_http", "url": dead},
                },
                "tool_gates": gates,
            }
        )
    )
    return path


async def test_rules_that_would_not_hold_are_refused_and_no_call_runs_outside_them(
    tmp_path: Path,
    engine: ReferenceEngine,
    crm: CrmServer,
    webhook: WebhookReceiver,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import algenta_graph.cli as cli

    monkeypatch.setenv("CRM_TOKEN", TOKEN)
    monkeypatch.delenv("ALGENTA_CONFIG", raising=False)
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    servers = {"crm": crm.connection(), "billing": {"transport": "streamable_http", "url": dead}}
    model = ScriptedChatModel(replies=["hi"])

    # 1. refused at start, by the build and by config check
    built_refused = checked_refused = 0
    for label, gates in MISCONFIGURED:
        with pytest.raises(ConfigError, match=r"tool_gates\."):
            await create_governed_agent(
                model, base_url=engine.url, profile="execute", extra_servers=servers,
                tool_gates=gates,
            )  # fmt: skip
        built_refused += 1
        path = _config_file(tmp_path, engine, crm, dead, gates)
        code = await asyncio.to_thread(cli.main, ["config", "check", str(path)])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and "tool_gates." in err, (label, err)
        checked_refused += 1
    schemas_refused = 0
    for schema in UNSAFE_SCHEMAS:
        with pytest.raises(ValueError, match="would not check what the tool receives"):
            parse_tool_gates({"argument_rules": [{"name": "r", "tool": "crm.*", "schema": schema}]})
        schemas_refused += 1
    assert crm.calls == []

    # 2. + 3. through the compiled graph
    rules = ToolGates(
        require_approval=["crm.refund"],
        argument_rules=[
            ArgumentRule(name="refund_at_most_1000", tool="crm.refund", schema=LIMIT),
            ArgumentRule(name="real_addresses", tool="crm.email_customer", schema=EMAIL),
            ArgumentRule(name="internal_hooks", tool="algenta.execute_decision", schema=HOOKS),
        ],
    )
    denied = edits_refused = stale_refused = 0
    attempts = 0
    async with (
        EngineConnection(engine.url, profile="execute", extra_servers={"crm": crm.connection()})
        as conn,
        AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver,
    ):  # fmt: skip

        async def graph(replies: list[Any], gates: ToolGates = rules, **options: Any) -> Any:
            model = ScriptedChatModel(replies=[*replies, "done", "done"])
            return await create_governed_agent(
                model,
                connection=conn,
                checkpointer=saver,
                tool_gates=gates,
                single_process=True,
                **options,
            )

        async def attempt(thread: str, name: str, args: dict[str, Any]) -> None:
            nonlocal denied, attempts
            attempts += 1
            g = await graph([call(name, args, attempts)])
            out = await g.ainvoke(
                {"messages": [("user", thread)]}, {"configurable": {"thread_id": thread}}
            )
            if [d["gate"] for d in out["denials"]] == ["arguments"]:
                denied += 1

        for i, amount in enumerate(AMOUNTS):
            await attempt(f"amount-{i}", "refund", {"account_id": "a1", "amount": amount})
        for i, address in enumerate(ADDRESSES):
            await attempt(f"email-{i}", "email_customer", {"address": address, "body": "hi"})
        decision = await log_decision(conn, confidence=0.9)
        for i, url in enumerate(HOOK_URLS):
            await attempt(
                f"hook-{i}", "execute_decision", {"decision_id": decision, "webhook_url": url}
            )

        async def refused(g: Any, thread: str, answer: Any) -> None:
            nonlocal edits_refused, stale_refused
            with pytest.raises(ValidationError) as why:
                await g.ainvoke(Command(resume=answer), {"configurable": {"thread_id": thread}})
            if "stale answer" in str(why.value):
                stale_refused += 1
            else:
                assert "break rule" in str(why.value), why.value
                edits_refused += 1

        # a held refund: edits beyond the rule refused, then the approval runs it once
        held = await graph([call("refund", {"account_id": "a1", "amount": 10}, 0)])
        cfg: Any = {"configurable": {"thread_id": "held"}}
        await held.ainvoke({"messages": [("user", "refund 10")]}, cfg)
        for amount in (5000, "5000", "5e3", [1]):
            edited = {"name": "refund", "args": {"account_id": "a1", "amount": amount}}
            edit = {"type": "edit", "edited_action": edited}
            await refused(held, "held", {"decisions": [edit], "operator": "ana"})
        await held.ainvoke(
            Command(resume={"decisions": [{"type": "approve"}], "operator": "ana"}), cfg
        )

        # an engine confidence escalation: edits to a forbidden webhook refused
        low = await log_decision(conn, confidence=0.3)
        shaky = await graph(
            [call("execute_decision", {"decision_id": low, "webhook_url": webhook.url}, 0)]
        )
        await shaky.ainvoke(
            {"messages": [("user", "execute")]}, {"configurable": {"thread_id": "low"}}
        )
        for url in (
            "https://evil.example/steal",
            "::not a uri::",
            "http://127.0.0.1.evil.example/",
        ):
            edit = {
                "type": "edit",
                "edited_action": {
                    "name": "execute_decision",
                    "args": {"decision_id": low, "webhook_url": url},
                },
            }
            await refused(shaky, "low", {"decisions": [edit], "operator": "ana"})
        await shaky.ainvoke(
            Command(resume={"decisions": [{"type": "reject"}], "operator": "ana"}),
            {"configurable": {"thread_id": "low"}},
        )

        # an arguments escalation: its approval overrides its rule, not another one
        two = ToolGates(
            argument_rules=[
                ArgumentRule(name="refund_at_most_1000", tool="crm.refund", schema=LIMIT),
                ArgumentRule(name="known_accounts", tool="crm.refund", schema=KNOWN),
            ]
        )
        over = await graph(
            [call("refund", {"account_id": "z9", "amount": 5000}, 0)],
            two,
            on_denial={"arguments": "escalate"},
        )
        await over.ainvoke(
            {"messages": [("user", "refund")]}, {"configurable": {"thread_id": "over"}}
        )
        await refused(over, "over", {"decisions": [{"type": "approve"}], "operator": "ana"})

        # the rule changed (same name) and the graph rebuilt: the old digest is stale, and an
        # approval without one meets the rule in force
        before = await graph([call("refund", {"account_id": "a2", "amount": 500}, 0)])
        changed: Any = {"configurable": {"thread_id": "changed"}}
        await before.ainvoke({"messages": [("user", "refund 500")]}, changed)
        shown = (await before.aget_state(changed)).interrupts[0].value["digest"]
        lower = ToolGates(
            require_approval=["crm.refund"],
            argument_rules=[
                ArgumentRule(
                    name="refund_at_most_1000",
                    tool="crm.refund",
                    schema={"properties": {"amount": {"type": "number", "maximum": 100}}},
                )
            ],
        )
        after = await graph([], lower)
        approve = {"decisions": [{"type": "approve"}], "operator": "ana"}
        await refused(after, "changed", {**approve, "digest": shown})
        await refused(after, "changed", approve)

    refunds = [c for n, c in crm.calls if n == "refund"]
    emails = [c for n, c in crm.calls if n == "email_customer"]
    hooks = [
        c["arguments"].get("webhook_url")
        for c in engine.call_log()
        if c["name"] == "execute_decision"
    ]
    ungoverned = [
        r for r in refunds if not (isinstance(r["amount"], float) and r["amount"] <= 1000)
    ]
    ungoverned += [e for e in emails if e["address"] in ADDRESSES]
    ungoverned += [h for h in hooks if h != webhook.url]
    figure(
        "rules_in_force",
        misconfigured=len(MISCONFIGURED),
        refused_at_build=built_refused,
        refused_by_config_check=checked_refused,
        unsafe_schemas=len(UNSAFE_SCHEMAS),
        schemas_refused=schemas_refused,
        bypass_attempts=attempts,
        bypass_denied=denied,
        edits_and_approvals_refused=edits_refused,
        stale_refused=stale_refused,
        ungoverned_executions=len(ungoverned),
        refunds_run=len(refunds),
    )
    assert built_refused == checked_refused == len(MISCONFIGURED)
    assert schemas_refused == len(UNSAFE_SCHEMAS)
    assert denied == attempts == len(AMOUNTS) + len(ADDRESSES) + len(HOOK_URLS)
    assert edits_refused == 4 + 3 + 1 + 1 and stale_refused == 1
    assert ungoverned == []
    # the approved refund, as held, ran once: the proof is not vacuous
    assert refunds == [{"account_id": "a1", "amount": 10.0}]
