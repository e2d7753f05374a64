"""A scripted engine connection and catalog for the fast tests of the governed nodes.

The guarantee and graph tests drive the nodes against the real reference engine over HTTP; the
fast tier (and the mutation run, ``bench/mutation.sh``) drives them against this stand-in, which
answers each ``execute_decision`` with the next scripted MCP result, keeps every call, and
serves ``get_decision`` from a dict, so one test runs in milliseconds and can script what no
honest engine does (a receipt for another decision, an execution tagged by another thread).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from algenta_graph.connection.outcomes import ExecutionOutcome
from algenta_graph.errors import AlgentaGraphError
from algenta_graph.governance.contract import resolve_profile
from algenta_graph.governance.escalations import EscalationSettings
from algenta_graph.governance.run_settings import GraphSettings, RunSettings
from algenta_graph.nodes.executor import DecisionExecutor
from algenta_graph.nodes.governed_tool import GovernedToolNode
from algenta_graph.nodes.questions import EscalationItem, escalation_items

ALGENTA_TOOLS = frozenset(
    {"execute_decision", "get_contract", "log_decision", "simulate", "query_data", "recommend"}
)
HOOK = "http://127.0.0.1:9/hook"


def receipt_body(decision_id: str = "d1", **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "decision_id": decision_id,
        "webhook_url": HOOK,
        "execution_status": "delivered",
        "response_code": 200,
        "executed_at": "2026-01-01T00:00:00Z",
        "policy_snapshot_id": None,
        "schema_snapshot_id": None,
        "manifest_version": None,
        "payload_summary": {},
        "safety_overridden": False,
    }
    body.update(fields)
    return body


def denial_body(gate: str) -> dict[str, Any]:
    return {
        "error": {
            "code": f"execution_blocked_{gate}",
            "gate": gate,
            "message": f"blocked by {gate}",
            "override_hint": "ask an operator",
        }
    }


def denial_record(
    gate: str = "confidence", call: str = "c1", decision: str = "d1", **extra: Any
) -> dict[str, Any]:
    """The state record of an engine gate's denial of ``execute_decision`` (``extra`` added)."""
    return {
        "kind": "denial",
        "gate": gate,
        "code": f"execution_blocked_{gate}",
        "message": f"blocked by {gate}",
        "override_hint": "ask",
        "status_code": None,
        "decision_id": decision,
        "webhook_url": HOOK,
        "tool_call_id": call,
        "source": "model",
        **extra,
    }


RAISED = "2030-01-01T00:00:00+00:00"
"""When :func:`escalated_denial` says its escalation was raised."""


def escalated_denial(
    gate: str = "confidence", call: str = "c1", decision: str = "d1", **extra: Any
) -> dict[str, Any]:
    """:func:`denial_record` as a denial handler escalates it (its id, when it was raised)."""
    escalation = {
        "policy": "escalate",
        "escalation_id": f"esc_{call}",
        "raised_at": RAISED,
        "timeout_seconds": 5,
    }
    return denial_record(gate, call, decision, **{**escalation, **extra})


def held_denial(call: str = "h1") -> dict[str, Any]:
    """The state record of a call ``require_approval`` held (``crm.delete_customer``)."""
    return {
        "kind": "denial",
        "gate": "approval",
        "code": "approval_required",
        "message": "an operator must approve crm.delete_customer",
        "source": "graph",
        "tool_call_id": call,
        "tool": "delete_customer",
        "server": "crm",
        "catalog_name": "delete_customer",
        "args": {"account_id": "a1"},
        "args_digest": "sha256:" + "0" * 64,
        "rule": "require_approval:crm.delete_customer",
        "policy": "escalate",
        "escalation_id": f"esc_{call}",
        "raised_at": RAISED,
    }


def items_of(
    gate: str,
    denials: Sequence[dict[str, Any]],
    settings: EscalationSettings,
    *,
    policy_snapshot_id: str | None = "pol_1",
    expires: Callable[[Mapping[str, Any]], str | None] = lambda d: None,
) -> list[EscalationItem]:
    """The escalation items a denial handler builds for ``denials`` (thread ``t1``)."""
    return escalation_items(
        gate,
        denials,
        settings=settings,
        thread_id="t1",
        policy_snapshot_id=policy_snapshot_id,
        interrupt_ids=[None] * len(denials),
        expires=expires,
    )


def answer(body: Any, *, status: str = "success", artifact: Any = None) -> ToolMessage:
    """An MCP result as the adapters hand it over (a ToolMessage)."""
    text = body if isinstance(body, str) else json.dumps(body)
    return ToolMessage(
        content=[{"type": "text", "text": text}],
        tool_call_id="scripted",
        status=status,
        artifact=artifact,
    )


class StubConnection:
    """An :class:`~algenta_graph.connection.client.EngineClient` that answers calls from scripts and
    records every call (see the module docs)."""

    def __init__(self, profile: str = "execute") -> None:
        self.profile = resolve_profile(profile)
        self.has_engine = True
        self.answers: list[Any] = []
        self.calls: list[tuple[str, dict[str, Any], str]] = []
        self.executions: dict[str, list[Any]] = {}
        self.get_decision_calls: list[str] = []
        self.get_decision_error: AlgentaGraphError | None = None
        self.get_decision_result: Any = None
        self.operator_answers: list[Any] = []
        self.operator_calls: list[dict[str, Any]] = []
        self.execute_supplied: frozenset[str] = frozenset()
        """The graph-supplied fields this engine declares (none, unless a test sets some)."""
        self.policy_snapshot_id: str | None = "pol_stub"
        """What ``get_contract`` reports as the engine's policy snapshot (the denial handlers
        read it into an escalation's digest); its calls are kept in ``contract_calls``."""
        self.contract_calls = 0

    def is_algenta_tool(self, name: str) -> bool:
        return name in ALGENTA_TOOLS

    def tool_origin(self, name: str) -> tuple[str, str] | None:
        """No origin is reported: the node falls back to the engine's or an unknown server."""
        return None

    async def call_tool(self, name: str, args: Mapping[str, Any], *, tool_call_id: str) -> Any:
        if name == "get_contract":  # the handlers' read of the policy snapshot, not scripted
            self.contract_calls += 1
            return answer({"policy": {"policy_snapshot_id": self.policy_snapshot_id}})
        self.calls.append((name, dict(args), tool_call_id))
        scripted = self.answers.pop(0)
        if isinstance(scripted, Exception):
            raise scripted
        return scripted

    async def get_decision(self, decision_id: str) -> dict[str, Any]:
        self.get_decision_calls.append(decision_id)
        if self.get_decision_error is not None:
            raise self.get_decision_error
        if self.get_decision_result is not None:
            # scripted: a record, or on purpose something else (a test of a malformed answer)
            return cast("dict[str, Any]", self.get_decision_result)
        return {
            "decision": {"decision_id": decision_id},
            "executions": self.executions.get(decision_id, []),
        }

    async def execute_as_operator(self, decision_id: str, webhook_url: str, **kw: Any) -> Any:
        if not kw.get("extra"):  # graph-supplied arguments: recorded only when there are some
            kw.pop("extra", None)
        self.operator_calls.append({"decision_id": decision_id, "webhook_url": webhook_url, **kw})
        scripted = self.operator_answers.pop(0)
        if isinstance(scripted, Exception):
            raise scripted
        outcome: ExecutionOutcome = scripted
        return outcome


class StubCatalog:
    """The catalog's per-run visibility rule over a fixed tool list, and a scripted search."""

    def __init__(self, conn: StubConnection, tools: frozenset[str] | None = None) -> None:
        self.conn = conn
        self.tools = set(tools if tools is not None else ALGENTA_TOOLS | {"shadow_tool"})
        self.search_result: tuple[str, list[str], bool] = ('{"tools": []}', ["simulate"], True)
        self.searches: list[dict[str, Any]] = []
        self.search_runs: list[RunSettings] = []
        self.usage: Any = None  # no usage signal

    def real_call(self, name: str, args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """Every name here is provider-safe already: the model's name is the real one."""
        return name, dict(args)

    def usage_store(self, store: Any) -> bool:
        """As the catalog's: whether the usage signal (if any) has a store on this run."""
        return self.usage is not None and bool(self.usage.has_store(store))

    def allow_list(self, run: RunSettings) -> list[str] | None:
        return None if run.profile is None else [n for n in self.tools if self.allowed(n, run)]

    def profile_name(self, run: RunSettings) -> str:
        return run.profile.name if run.profile is not None else self.conn.profile.name

    def allowed(self, name: str, run: RunSettings) -> bool:
        if name not in self.tools:
            return False
        if run.profile is None or not self.conn.is_algenta_tool(name):
            return True
        return run.profile.allows(name)

    async def search(
        self, args: Mapping[str, Any], run: RunSettings
    ) -> tuple[str, list[str], bool]:
        self.searches.append(dict(args))
        self.search_runs.append(run)
        return self.search_result


def make_node(
    profile: str = "execute", policies: Mapping[str, Any] | None = None
) -> tuple[GovernedToolNode, StubConnection, StubCatalog]:
    from algenta_graph.governance.gates import DEFAULT_POLICIES

    conn = StubConnection(profile)
    catalog = StubCatalog(conn)
    built = GraphSettings(
        top_k=5, policies=dict(policies if policies is not None else DEFAULT_POLICIES)
    )
    from algenta_graph.ledger import MemoryLedger

    # a ledger of its own: the stubs' escalation ids repeat from test to test
    node = GovernedToolNode(catalog, DecisionExecutor(conn), built, ledger=MemoryLedger())  # type: ignore[arg-type]
    return node, conn, catalog


def execute_call(decision_id: Any = "d1", call_id: str = "c1", **extra: Any) -> dict[str, Any]:
    return {
        "name": "execute_decision",
        "args": {"decision_id": decision_id, "webhook_url": HOOK, **extra},
        "id": call_id,
        "type": "tool_call",
    }


def step_state(*calls: dict[str, Any], **values: Any) -> dict[str, Any]:
    """A state whose latest AI message makes ``calls``."""
    state: dict[str, Any] = {
        "messages": [HumanMessage("go"), AIMessage("", tool_calls=list(calls))],
        "selected_tools": ["execute_decision"],
        "receipts": [],
        "denials": [],
        "operator_decisions": [],
    }
    state.update(values)
    return state


def config(thread_id: str | None = "t1", **configurable: Any) -> Any:
    conf = dict(configurable)
    if thread_id is not None:
        conf["thread_id"] = thread_id
    return {"configurable": conf}
