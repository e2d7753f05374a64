"""algenta-graph: a prebuilt, compiled LangGraph graph for governed agents.

>>> from algenta_graph import create_governed_agent          # doctest: +SKIP
>>> graph = await create_governed_agent(profile="execute")   # doctest: +SKIP

Names are imported lazily (on first use), so ``import algenta_graph`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # the graph
    "create_governed_agent": "algenta_graph.graph",
    "create_governed_agent_sync": "algenta_graph.sync",
    "governed_agent": "algenta_graph.graph",
    "aclose_governed_agent": "algenta_graph.graph",
    "build_governed_graph": "algenta_graph.graph",
    "GovernedAgentSync": "algenta_graph.sync",
    # gates and escalation
    "DEFAULT_POLICIES": "algenta_graph.governance.gates",
    "GATES": "algenta_graph.governance.gates",
    "Gate": "algenta_graph.governance.gates",
    "EscalationRequest": "algenta_graph.nodes.questions",
    "EscalationAlreadyDecided": "algenta_graph.errors",
    # state and its records
    "GovernedState": "algenta_graph.state",
    "OperatorDecision": "algenta_graph.operator_records",
    "ReceiptRecord": "algenta_graph.records",
    "DenialRecord": "algenta_graph.records",
    "OperatorDecisionRecord": "algenta_graph.operator_records",
    # outcomes
    "ExecutionReceipt": "algenta_graph.connection.outcomes",
    "ExecutionDenial": "algenta_graph.connection.outcomes",
    "ExecutionFailure": "algenta_graph.connection.outcomes",
    "ExecutionOutcome": "algenta_graph.connection.outcomes",
    "parse_execution_outcome": "algenta_graph.connection.outcomes",
    # errors
    "AlgentaGraphError": "algenta_graph.errors",
    "EngineConnectionError": "algenta_graph.errors",
    "EngineAuthError": "algenta_graph.errors",
    "EngineTimeoutError": "algenta_graph.errors",
    "ToolNotInProfileError": "algenta_graph.errors",
    "RecordsFileError": "algenta_graph.errors",
    # parts
    "ToolIndex": "algenta_graph.retrieval",
    "UsageSignal": "algenta_graph.retrieval.usage",
    "EngineConnection": "algenta_graph.connection.engine",
    "DemoChatModel": "algenta_graph.models",
    "RunContext": "algenta_graph.governance.run_settings",
    "ModelPackageMissingError": "algenta_graph.errors",
    "ModelSetupError": "algenta_graph.errors",
}

__all__ = [
    "DEFAULT_POLICIES",
    "GATES",
    "AlgentaGraphError",
    "DemoChatModel",
    "DenialRecord",
    "EngineAuthError",
    "EngineConnection",
    "EngineConnectionError",
    "EngineTimeoutError",
    "EscalationAlreadyDecided",
    "EscalationRequest",
    "ExecutionDenial",
    "ExecutionFailure",
    "ExecutionOutcome",
    "ExecutionReceipt",
    "Gate",
    "GovernedAgentSync",
    "GovernedState",
    "ModelPackageMissingError",
    "ModelSetupError",
    "OperatorDecision",
    "OperatorDecisionRecord",
    "ReceiptRecord",
    "RecordsFileError",
    "RunContext",
    "ToolIndex",
    "ToolNotInProfileError",
    "UsageSignal",
    "__version__",
    "aclose_governed_agent",
    "build_governed_graph",
    "create_governed_agent",
    "create_governed_agent_sync",
    "governed_agent",
    "parse_execution_outcome",
]

if TYPE_CHECKING:
    from algenta_graph.connection.engine import EngineConnection
    from algenta_graph.connection.outcomes import (
        ExecutionDenial,
        ExecutionFailure,
        ExecutionOutcome,
        ExecutionReceipt,
        parse_execution_outcome,
    )
    from algenta_graph.errors import (
        AlgentaGraphError,
        EngineAuthError,
        EngineConnectionError,
        EngineTimeoutError,
        EscalationAlreadyDecided,
        ModelPackageMissingError,
        ModelSetupError,
        RecordsFileError,
        ToolNotInProfileError,
    )
    from algenta_graph.governance.gates import DEFAULT_POLICIES, GATES, Gate
    from algenta_graph.governance.run_settings import RunContext
    from algenta_graph.graph import (
        aclose_governed_agent,
        build_governed_graph,
        create_governed_agent,
        governed_agent,
    )
    from algenta_graph.models import DemoChatModel
    from algenta_graph.nodes.questions import EscalationRequest
    from algenta_graph.operator_records import OperatorDecision, OperatorDecisionRecord
    from algenta_graph.records import DenialRecord, ReceiptRecord
    from algenta_graph.retrieval import ToolIndex
    from algenta_graph.retrieval.usage import UsageSignal
    from algenta_graph.state import GovernedState
    from algenta_graph.sync import GovernedAgentSync, create_governed_agent_sync


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'algenta_graph' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
