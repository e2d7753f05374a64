"""The MCP tool surface of the reference engine: the governed tools it implements for real.

:class:`GovernedTools` exposes one async method per tool; :func:`register` adds them to a
FastMCP server, which derives each input schema from the method signature and advertises the
method's :func:`tool_description` (what a model reads). A method returns a plain ``dict``
(FastMCP sends it as JSON text content, and as ``structuredContent`` unless registered
text-only) or raises an :class:`~algenta_graph.engine.errors.EngineToolError`. Planning a
decision is :mod:`~algenta_graph.engine.planning`, executing one
:mod:`~algenta_graph.engine.execution`; the tools here are their MCP signatures.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Annotated, Any, TypeVar

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations
from pydantic import Field, StrictBool

from algenta_graph.engine import datasets, simulation
from algenta_graph.engine.arguments import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_ACTION_CHARS,
    MAX_KEY_CHARS,
    MAX_RATIONALE_CHARS,
    MAX_SCENARIO_BYTES,
    CallerMetadata,
    FiniteFloat,
    ForceFlag,
    OverrideSafetyFlag,
    Scenario,
    TimeoutSeconds,
    check_size,
)
from algenta_graph.engine.concurrency import off_loop
from algenta_graph.engine.contract import DEFAULT_RELAXED, IMPLEMENTED_TOOLS, engine_contract
from algenta_graph.engine.execution import Executor
from algenta_graph.engine.planning import Planning
from algenta_graph.engine.policy import Policy, policy_check
from algenta_graph.engine.store import Store

F = TypeVar("F", bound=Callable[..., Any])

_DESCRIPTION = "__tool_description__"


def tool_description(text: str) -> Callable[[F], F]:
    """Give a tool method the description ``tools/list`` advertises (what a model reads).

    The method's docstring is for a Python reader; this text is the tool's wire description
    (whitespace runs are folded into one space when it is registered).
    """

    def mark(method: F) -> F:
        setattr(method, _DESCRIPTION, text)
        return method

    return mark


class GovernedTools:
    """The implemented tool surface of one engine.

    Args:
        store: the engine's store.
        policy: the execution policy (kept as a snapshot in the store).
        allow_webhook_hosts: the hosts besides loopback that may receive a webhook.
        denials: the ``--denials`` wire form; it only informs ``get_contract`` (the server
            applies the form itself).
        auth_required: whether the engine has API keys.
        registry_tool_count: how many tools the whole registry advertises.
        relaxed: the mode (:data:`~algenta_graph.engine.contract.DEFAULT_RELAXED`).
    """

    def __init__(
        self,
        store: Store,
        policy: Policy,
        *,
        allow_webhook_hosts: Collection[str] = (),
        denials: str = "mcp-error",
        auth_required: bool = False,
        registry_tool_count: int = 0,
        relaxed: bool = DEFAULT_RELAXED,
    ) -> None:
        self.relaxed = relaxed
        self.store = store
        self.policy = policy
        self.allow_webhook_hosts = tuple(allow_webhook_hosts)
        self.denials = denials
        self.auth_required = auth_required
        self.registry_tool_count = registry_tool_count
        self.planning = Planning(store, policy)
        self.executor = Executor(
            store,
            policy,
            allow_webhook_hosts=self.allow_webhook_hosts,
            auth_required=auth_required,
            relaxed=relaxed,
        )
        store.record_policy(policy.snapshot_id, policy.as_dict())

    # -- discovery and data ----------------------------------------------------------------

    @tool_description(
        "Fetch the engine's machine-readable contract: engine version, implemented"
        " capabilities, the current execution policy and its gates, the datasets and scenarios"
        " you can use. Call this first to discover what the engine offers."
    )
    async def get_contract(self) -> dict[str, Any]:
        """The ``get_contract`` tool: the engine's contract, mode and policy."""
        return engine_contract(
            policy=self.policy,
            denials=self.denials,
            allow_webhook_hosts=self.allow_webhook_hosts,
            auth_required=self.auth_required,
            registry_tool_count=self.registry_tool_count,
            relaxed=self.relaxed,
        )

    @tool_description(
        "Run one governed exact query against a connected dataset (orders, inventory,"
        " customers): filter rows by column conditions, pick columns, sort and limit. Returns the"
        " matching rows and how many matched."
    )
    async def query_data(
        self,
        dataset: Annotated[str, Field(description="Dataset name: orders, inventory or customers.")],
        filters: Annotated[
            dict[str, Any] | None,
            Field(
                description=(
                    "Column conditions: {column: value} for equality or {column: {op: value}}"
                    " with op in eq, ne, gt, gte, lt, lte, in, contains."
                )
            ),
        ] = None,
        columns: Annotated[
            list[str] | None, Field(description="Columns to return (default: all).")
        ] = None,
        order_by: Annotated[str | None, Field(description="Column to sort by.")] = None,
        descending: Annotated[StrictBool, Field(description="Sort descending.")] = False,
        limit: Annotated[int, Field(ge=1, le=datasets.MAX_LIMIT, description="Max rows.")] = 50,
    ) -> dict[str, Any]:
        """The ``query_data`` tool: :func:`~algenta_graph.engine.datasets.query`."""
        return datasets.query(
            dataset,
            filters=filters,
            columns=columns,
            order_by=order_by,
            descending=descending,
            limit=limit,
        )

    # -- policy ----------------------------------------------------------------------------

    @tool_description(
        "Read the execution policy execute_decision enforces: the confidence minimum, the risk"
        " floor, and its gates in the order they apply, each with what lifts it."
    )
    async def get_execution_policy(self) -> dict[str, Any]:
        """The ``get_execution_policy`` tool: the policy, and each gate with what lifts it."""
        return {
            "policy_snapshot_id": self.policy.snapshot_id,
            **self.policy.as_dict(),
            "gates": [
                {
                    "gate": "idempotency",
                    "blocks": "a decision already executed (delivered, or sent with an unknown"
                    " outcome)",
                    "lift": "force",
                },
                {
                    "gate": "confidence",
                    "blocks": f"confidence below {self.policy.min_confidence:g}",
                    "lift": "override_safety",
                },
                {
                    "gate": "risk_floor",
                    "blocks": f"risk_p5 below {-self.policy.risk_floor:g}",
                    "lift": "override_safety",
                },
            ],
        }

    @tool_description(
        "List the versioned snapshots of the execution policy (newest first); every receipt's"
        " policy_snapshot_id names one of them."
    )
    async def list_execution_policy_snapshots(
        self, limit: Annotated[int, Field(ge=1, le=200)] = 20
    ) -> dict[str, Any]:
        """The ``list_execution_policy_snapshots`` tool: the current policy and its history."""
        snapshots = await off_loop(self.store.policy_snapshots)
        return {"current": self.policy.snapshot_id, "snapshots": snapshots[:limit]}

    # -- simulation ------------------------------------------------------------------------

    @tool_description(
        "Run a seeded Monte Carlo simulation over a decision scenario and return the decision"
        " envelope: recommended action, expected value, confidence, risk p5/p95 (return on"
        " capital), and the same metrics for every candidate action."
    )
    async def simulate(
        self,
        scenario: Scenario,
        n_samples: Annotated[
            int, Field(ge=100, le=simulation.MAX_SAMPLES, description="Monte Carlo draws.")
        ] = 10_000,
        seed: Annotated[int, Field(description="Random seed; same seed, same result.")] = 42,
    ) -> dict[str, Any]:
        """The ``simulate`` tool: :func:`~algenta_graph.engine.simulation.simulate`, previewed."""
        check_size("simulate", "scenario", scenario, MAX_SCENARIO_BYTES)
        result = await off_loop(simulation.simulate, scenario, seed=seed, n_samples=n_samples)
        result["policy_check"] = policy_check(self.policy, result["confidence"], result["risk_p5"])
        return result

    @tool_description(
        "Return a governed recommendation for a decision scenario (read-only, nothing is"
        " logged or executed): the best action with its expected value, confidence and risk, and"
        " whether the current policy would let it execute."
    )
    async def recommend(self, scenario: Scenario) -> dict[str, Any]:
        """The ``recommend`` tool: the best action of a 5,000-draw simulation (seed 42)."""
        check_size("recommend", "scenario", scenario, MAX_SCENARIO_BYTES)
        result = await off_loop(simulation.simulate, scenario, seed=42, n_samples=5000)
        check_ = policy_check(self.policy, result["confidence"], result["risk_p5"])
        return {
            "scenario": result["scenario"],
            "recommended_action": result["recommended_action"],
            "expected_value": result["expected_value"],
            "confidence": result["confidence"],
            "risk_p5": result["risk_p5"],
            "risk_p95": result["risk_p95"],
            "policy_check": check_,
            "rationale": (
                f"{result['recommended_action']} has the highest expected value"
                f" ({result['expected_value']:,.2f}) and wins in"
                f" {result['confidence']:.0%} of simulated outcomes"
            ),
        }

    # -- decisions and their plans ---------------------------------------------------------

    @tool_description(
        "Produce a proposed, not-yet-committed decision plan for a scenario, with a plan_id"
        " and plan_hash that log_decision binds a decision to, and a single-use nonce (an"
        " operator approves the plan out of band with them). Nothing is executed."
    )
    async def plan_decision(
        self,
        scenario: Scenario,
        chosen_action: Annotated[
            str | None,
            Field(description="The action to plan (default: the recommended one)."),
        ] = None,
        n_samples: Annotated[int, Field(ge=100, le=simulation.MAX_SAMPLES)] = 10_000,
        seed: int = 42,
        decision_id: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=200,
                description=(
                    "Propose the plan for this already logged decision, whose plan was executed"
                    " (a re-execution needs a newly approved plan); it is bound to the decision."
                ),
            ),
        ] = None,
    ) -> dict[str, Any]:
        """The ``plan_decision`` tool: :meth:`Planning.propose`."""
        return await self.planning.propose(
            scenario,
            chosen_action=chosen_action,
            n_samples=n_samples,
            seed=seed,
            decision_id=decision_id,
        )

    @tool_description(
        "Persist a decision record (chosen action, expected value, confidence, risk p5/p95,"
        " rationale) to decision memory for audit and later execution, bound to its plan."
        " Returns its decision_id. Does not execute anything."
    )
    async def log_decision(
        self,
        chosen_action: Annotated[str, Field(min_length=1, max_length=MAX_ACTION_CHARS)],
        expected_value: FiniteFloat,
        confidence: Annotated[float, Field(ge=0.0, le=1.0)],
        risk_p5: FiniteFloat,
        risk_p95: FiniteFloat,
        rationale: Annotated[str | None, Field(max_length=MAX_RATIONALE_CHARS)] = None,
        scenario: Annotated[
            str | dict[str, Any] | None, Field(description="The scenario it was chosen from.")
        ] = None,
        plan_hash: Annotated[
            str | None,
            Field(
                description=(
                    "The plan_hash of a plan from plan_decision (numbers must match); alone, it"
                    " binds the one plan with this hash no decision is bound to yet."
                )
            ),
        ] = None,
        plan_id: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=200,
                description=(
                    "Bind to this plan from plan_decision (numbers must match): each decision"
                    " runs under the approval of its own plan."
                ),
            ),
        ] = None,
    ) -> dict[str, Any]:
        """The ``log_decision`` tool: :meth:`Planning.log`."""
        return await self.planning.log(
            chosen_action=chosen_action,
            expected_value=expected_value,
            confidence=confidence,
            risk_p5=risk_p5,
            risk_p95=risk_p95,
            rationale=rationale,
            scenario=scenario,
            plan_hash=plan_hash,
            plan_id=plan_id,
        )

    @tool_description(
        "Read one logged decision, the plan it is bound to (plan_id, state, approval) and"
        " every execution of it (receipt, the force / override_safety flags used, and the"
        " caller's metadata), oldest first."
    )
    async def get_decision(
        self, decision_id: Annotated[str, Field(min_length=1, max_length=200)]
    ) -> dict[str, Any]:
        """The ``get_decision`` tool: :meth:`Planning.show`."""
        return await self.planning.show(decision_id)

    @tool_description(
        "List logged decisions, newest first, with how often each was executed and the status"
        " of its latest execution."
    )
    async def list_decisions(
        self,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
        offset: Annotated[int, Field(ge=0)] = 0,
    ) -> dict[str, Any]:
        """The ``list_decisions`` tool: a page of decisions and how many there are."""
        rows, total = await off_loop(self.store.list_decisions, limit=limit, offset=offset)
        return {"decisions": rows, "count": len(rows), "total": total, "offset": offset}

    # -- execution -------------------------------------------------------------------------

    @tool_description(
        "Dispatch one already-logged decision for real-world execution (a webhook POST) and"
        " persist the execution receipt. Blocked by the idempotency, confidence or risk_floor"
        " policy gates."
    )
    async def execute_decision(
        self,
        decision_id: Annotated[str, Field(min_length=1, max_length=200)],
        webhook_url: Annotated[str, Field(min_length=1, description="Where to POST the action.")],
        timeout_seconds: TimeoutSeconds = DEFAULT_TIMEOUT_SECONDS,
        force: ForceFlag = False,
        override_safety: OverrideSafetyFlag = False,
        metadata: CallerMetadata = None,
    ) -> dict[str, Any]:
        """The ``execute_decision`` tool of a relaxed engine: :meth:`Executor.execute`."""
        return await self.executor.execute(
            decision_id,
            webhook_url,
            timeout_seconds=timeout_seconds,
            force=force,
            override_safety=override_safety,
            metadata=metadata,
        )

    @tool_description(
        "Dispatch one already-planned, already-logged and approved decision for real-world"
        " execution (a webhook POST) and persist the execution receipt. Blocked by the"
        " idempotency, confidence or risk_floor policy gates."
    )
    async def execute_decision_strict(
        self,
        decision_id: Annotated[str, Field(min_length=1, max_length=200)],
        webhook_url: Annotated[str, Field(min_length=1, description="Where to POST the action.")],
        idempotency_key: Annotated[
            str | None,
            Field(
                max_length=MAX_KEY_CHARS,
                description=(
                    "Required. The caller's key for this attempt: a repeated key returns the"
                    " first attempt's receipt and sends nothing."
                ),
            ),
        ] = None,
        nonce: Annotated[
            str | None,
            Field(
                max_length=MAX_KEY_CHARS,
                description=(
                    "Required. The single-use nonce plan_decision returned for the plan this"
                    " decision was logged with; that plan must be approved."
                ),
            ),
        ] = None,
        timeout_seconds: TimeoutSeconds = DEFAULT_TIMEOUT_SECONDS,
        force: ForceFlag = False,
        override_safety: OverrideSafetyFlag = False,
        metadata: CallerMetadata = None,
    ) -> dict[str, Any]:
        """The ``execute_decision`` tool of a strict engine: :meth:`Executor.execute`.

        ``idempotency_key`` and ``nonce`` are advertised as required strings (:func:`register`);
        an absent one is refused by the executor with a named code.
        """
        return await self.executor.execute(
            decision_id,
            webhook_url,
            timeout_seconds=timeout_seconds,
            force=force,
            override_safety=override_safety,
            metadata=metadata,
            strict=(idempotency_key, nonce),
        )


_READ = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
ANNOTATIONS: dict[str, ToolAnnotations] = {
    **dict.fromkeys(
        (
            "get_contract",
            "query_data",
            "simulate",
            "recommend",
            "get_decision",
            "list_decisions",
            "get_execution_policy",
            "list_execution_policy_snapshots",
        ),
        _READ,
    ),
    "plan_decision": ToolAnnotations(readOnlyHint=False, idempotentHint=False, openWorldHint=False),
    "log_decision": ToolAnnotations(
        readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False
    ),
    "execute_decision": ToolAnnotations(
        readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=True
    ),
}
"""Each implemented tool's MCP annotations (read-only, destructive, open world)."""


def register(server: FastMCP, tools: GovernedTools, *, structured: bool = True) -> None:
    """Add every implemented tool of ``tools`` to ``server`` (input schema from the signature).

    Args:
        server: the FastMCP server.
        tools: the engine's tool surface; a strict engine registers ``execute_decision_strict``
            as ``execute_decision``.
        structured: advertise an output schema and send ``structuredContent`` besides the JSON
            text (FastMCP's default for a ``dict`` return); False sends the JSON text only, with
            no output schema, like the public Algenta server.
    """
    for name in IMPLEMENTED_TOOLS:
        strict_execute = name == "execute_decision" and not tools.relaxed
        method: Callable[..., Any] = getattr(
            tools, "execute_decision_strict" if strict_execute else name
        )
        description = " ".join(getattr(method, _DESCRIPTION).split())
        server.add_tool(
            method,
            name=name,
            description=description,
            annotations=ANNOTATIONS[name],
            structured_output=structured,
        )
        if strict_execute:
            # advertised as required strings; absent ones are refused by the tool with a named
            # code (idempotency_key_required, nonce_required), not a generic validation error
            registered = server._tool_manager.get_tool(name)
            assert registered is not None
            params = registered.parameters
            for field in ("idempotency_key", "nonce"):
                prop = params["properties"][field]
                prop.pop("anyOf", None)
                prop.pop("default", None)
                prop.update(type="string", minLength=1, maxLength=MAX_KEY_CHARS)
            params["required"] = [*params.get("required", []), "idempotency_key", "nonce"]
