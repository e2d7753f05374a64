"""What a call may send: the limits on arguments and the argument types the tools share.

The MCP tools derive their input schemas from these types; the HTTP API's request bodies use
the same limits.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field, StrictBool

from algenta_graph.engine.errors import InvalidArguments

MAX_METADATA_BYTES = 16 * 1024
MAX_SCENARIO_BYTES = 64 * 1024
MAX_RATIONALE_CHARS = 8000
MAX_ACTION_CHARS = 200
MIN_TIMEOUT_SECONDS = 1.0
MAX_TIMEOUT_SECONDS = 60.0
DEFAULT_TIMEOUT_SECONDS = 10.0
MAX_KEY_CHARS = 200
"""The longest ``idempotency_key`` or ``nonce`` (and ``Idempotency-Key`` header) accepted."""

Scenario = Annotated[
    str | dict[str, Any],
    Field(
        description=(
            "A built-in scenario name (restock_inventory, price_increase, expand_region) or a"
            " definition {'name': str, 'actions': {action: {'mean': float, 'stdev': float,"
            " 'capital': float}}}: each action's value is normal(mean, stdev), capital is what it"
            " puts at risk."
        )
    ),
]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]

# the execute_decision arguments both modes share (strict adds idempotency_key and nonce)
TimeoutSeconds = Annotated[
    float,
    Field(
        ge=MIN_TIMEOUT_SECONDS,
        le=MAX_TIMEOUT_SECONDS,
        description=(
            f"Seconds to wait for the webhook's answer ({MIN_TIMEOUT_SECONDS:g} to"
            f" {MAX_TIMEOUT_SECONDS:g}). A delivery without an answer counts as executed."
        ),
    ),
]
ForceFlag = Annotated[
    StrictBool, Field(description="Operator only: re-execute a delivered decision once.")
]
OverrideSafetyFlag = Annotated[
    StrictBool, Field(description="Operator only: bypass the confidence/risk gates.")
]
CallerMetadata = Annotated[
    dict[str, Any] | None, Field(description="Caller metadata, stored and forwarded.")
]


def check_size(tool: str, name: str, value: Any, limit: int) -> None:
    """Refuse an argument whose JSON is over ``limit`` bytes.

    Args:
        tool: the tool (or route) the argument was sent to, for the message.
        name: the argument's name.
        value: its value.
        limit: the most bytes of JSON it may take.

    Raises:
        InvalidArguments: ``value`` is over the limit.
    """
    size = len(json.dumps(value).encode())
    if size > limit:
        raise InvalidArguments(tool, f"{name} is {size} bytes of JSON; the limit is {limit} bytes")
