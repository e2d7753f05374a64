"""The outcome of ``execute_decision``: a receipt, a named-gate denial, or a failure.

:func:`parse_execution_outcome` is the one parser of an ``execute_decision`` result. It accepts
whatever a caller has in hand -- an MCP ``CallToolResult``, a LangChain ``ToolMessage``, a list
of content blocks, a dict or a JSON string -- and recognises the outcome by **shape**, on every
wire form an engine uses:

* ``isError: true`` with the denial JSON as text, with or without FastMCP's
  ``Error executing tool execute_decision: ...`` prefix;
* ``isError: false`` with an ``{"error": {...}}`` body;
* ``structuredContent``, including FastMCP's ``{"result": ...}`` wrapping;
* the public Algenta MCP server's form, ``{"error": {"code": "execution_blocked_<gate>",
  "message": "API error 409: {...upstream body...}", "status_code": 409}}``, where the gate and
  the override hint live inside the message string;
* JSON encoded twice (a JSON string inside text content).

It never raises. A receipt is produced only when every receipt field is present and correctly
typed; anything that is neither a receipt nor a denial is an :class:`ExecutionFailure` that keeps
the raw text.

>>> outcome = parse_execution_outcome(
...     '{"error": {"code": "execution_blocked_confidence", "gate": "confidence",'
...     ' "message": "confidence 0.41 < 0.6", "override_hint": "override_safety=true"}}'
... )
>>> outcome.kind, outcome.gate
('denial', 'confidence')
>>> parse_execution_outcome("not json").kind
'failure'

All three models dump to JSON-serialisable dicts (``model_dump(mode="json")``) carrying a
``kind`` discriminator, and :func:`outcome_from_dict` turns such a dict back into its model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from algenta_graph.governance.gates import ENGINE_GATE_NAMES

__all__ = [
    "KNOWN_GATES",
    "ExecutionDenial",
    "ExecutionFailure",
    "ExecutionOutcome",
    "ExecutionReceipt",
    "outcome_from_dict",
    "parse_execution_outcome",
    "tool_result_json",
]

KNOWN_GATES: tuple[str, ...] = ENGINE_GATE_NAMES
"""The named policy gates of ``execute_decision`` (from :mod:`algenta_graph.governance.gates`).
Another gate name is still a denial."""

_RAW_LIMIT = 16_384
_MAX_DEPTH = 6
_BLOCKED_CODE = re.compile(r"^execution_blocked_([A-Za-z0-9][A-Za-z0-9_.\-]{0,63})$")
_GATE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
_TOOL_ERROR_PREFIX = re.compile(r"^\s*Error executing tool [^:\n]*:\s*")
_API_ERROR_PREFIX = re.compile(r"^\s*API error (\d{3})\s*:\s*")


class ExecutionReceipt(BaseModel):
    """A completed ``execute_decision``: the engine dispatched the decision and kept a receipt.

    ``execution_status`` says whether the webhook delivery itself succeeded (``"delivered"``),
    certainly did not (``"failed"``), or may have (``"unknown"``: the request went out and no
    answer came); all are completed, non-gated calls. Unknown extra fields are kept (e.g. the
    engine's ``retryable``, ``execution_id``, ``idempotency_key``).
    """

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    kind: Literal["receipt"] = "receipt"
    decision_id: str = Field(min_length=1)
    webhook_url: str = Field(min_length=1)
    execution_status: Literal["delivered", "failed", "unknown"]
    response_code: int | None
    executed_at: str = Field(min_length=1)
    policy_snapshot_id: str | None
    schema_snapshot_id: str | None
    manifest_version: str | None
    payload_summary: dict[str, Any]
    safety_overridden: bool

    @field_validator("executed_at")
    @classmethod
    def _iso_timestamp(cls, value: str) -> str:
        text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
        datetime.fromisoformat(text)  # ValueError -> ValidationError: not a receipt
        return value


class ExecutionDenial(BaseModel):
    """``execute_decision`` was blocked by a named policy gate; nothing was executed.

    ``gate`` is normally one of :data:`KNOWN_GATES`; an unknown gate name is still a denial
    (``is_known_gate`` is then False).
    """

    model_config = ConfigDict(frozen=True)

    kind: Literal["denial"] = "denial"
    gate: str
    code: str
    message: str
    override_hint: str | None = None
    status_code: int | None = None

    @property
    def is_known_gate(self) -> bool:
        """True for a gate of :data:`KNOWN_GATES`."""
        return self.gate in KNOWN_GATES


class ExecutionFailure(BaseModel):
    """Anything that is neither a receipt nor a named-gate denial (``raw`` keeps the text)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["failure"] = "failure"
    message: str
    raw: str = ""


ExecutionOutcome = ExecutionReceipt | ExecutionDenial | ExecutionFailure
"""The three outcomes of ``execute_decision`` (there is no "pending")."""

_OUTCOME_ADAPTER: TypeAdapter[ExecutionReceipt | ExecutionDenial | ExecutionFailure] = TypeAdapter(
    Annotated[ExecutionReceipt | ExecutionDenial | ExecutionFailure, Field(discriminator="kind")]
)


def outcome_from_dict(data: Mapping[str, Any]) -> ExecutionOutcome:
    """Rebuild an outcome from its ``model_dump(mode="json")`` (as stored in graph state).

    Raises ``pydantic.ValidationError`` when ``data`` is not a dumped outcome.
    """
    return _OUTCOME_ADAPTER.validate_python(dict(data))


# --------------------------------------------------------------------------- parsing


def parse_execution_outcome(result: Any) -> ExecutionOutcome:
    """Parse any form of an ``execute_decision`` result into an outcome; never raises."""
    try:
        return _parse(result)
    except Exception as exc:  # a parser of untrusted input must not crash its caller
        return ExecutionFailure(
            message=f"could not parse the execute_decision result ({type(exc).__name__})",
            raw=_safe_raw(result),
        )


def _parse(result: Any) -> ExecutionOutcome:
    if isinstance(result, ExecutionReceipt | ExecutionDenial):
        return result  # already parsed: passes through as it is (its own code included)
    payloads, is_error, raw = _unwrap(result, 0)
    outcomes: list[ExecutionReceipt | ExecutionDenial] = []
    error_messages: list[str] = []
    for payload in payloads:
        found = _classify(payload, 0, error_messages)
        if found is not None:
            outcomes.append(found)
    # an MCP error result can carry a denial, never a receipt
    if is_error and any(isinstance(o, ExecutionReceipt) for o in outcomes):
        return ExecutionFailure(
            message="the engine flagged the result as an error but its body is a receipt",
            raw=raw,
        )
    if outcomes:
        first = outcomes[0]
        dumps = {json.dumps(o.model_dump(mode="json"), sort_keys=True) for o in outcomes}
        if len(dumps) > 1 and any(type(o) is not type(first) for o in outcomes):
            return ExecutionFailure(
                message="the result carries contradicting outcomes (a receipt and a denial)",
                raw=raw,
            )
        return first
    if error_messages:
        message = f"execute_decision failed: {error_messages[0]}"
    elif is_error:
        message = f"execute_decision failed with an MCP tool error: {_snippet(raw)}"
    else:
        message = f"unrecognised execute_decision result: {_snippet(raw)}"
    return ExecutionFailure(message=message, raw=raw)


def _unwrap(result: Any, depth: int) -> tuple[list[Any], bool, str]:
    """Return (payload candidates, isError flag, raw text) for any accepted input form."""
    if depth > _MAX_DEPTH:
        return [], False, _safe_raw(result)
    if isinstance(result, ExecutionFailure):
        return [], False, result.raw
    # mcp.types.CallToolResult (duck-typed: content + isError)
    if hasattr(result, "content") and hasattr(result, "isError"):
        payloads: list[Any] = []
        structured = getattr(result, "structuredContent", None)
        if structured is not None:
            payloads.append(structured)
        texts = list(_texts(getattr(result, "content", None)))
        payloads.extend(texts)
        return payloads, getattr(result, "isError", False) is True, _join_raw(texts, structured)
    # langchain_core.messages.ToolMessage (duck-typed: tool_call_id + content + artifact)
    if hasattr(result, "tool_call_id") and hasattr(result, "content"):
        payloads = []
        artifact = getattr(result, "artifact", None)
        structured = artifact.get("structured_content") if isinstance(artifact, Mapping) else None
        if structured is not None:
            payloads.append(structured)
        content = result.content
        texts = [content] if isinstance(content, str) else list(_texts(content))
        payloads.extend(texts)
        is_error = getattr(result, "status", None) == "error"
        return payloads, is_error, _join_raw(texts, structured)
    if isinstance(result, bytes | bytearray):
        return _unwrap(bytes(result).decode("utf-8", errors="replace"), depth + 1)
    if isinstance(result, str):
        decoded = _decode_json(result)
        if isinstance(decoded, Mapping) and _looks_like_call_tool_result(decoded):
            return _unwrap(decoded, depth + 1)
        return [result], False, _cap(result)
    if isinstance(result, Mapping):
        if _looks_like_call_tool_result(result):
            structured = result.get("structuredContent", result.get("structured_content"))
            payloads = [] if structured is None else [structured]
            texts = list(_texts(result.get("content")))
            payloads.extend(texts)
            is_error = result.get("isError", result.get("is_error")) is True
            return payloads, is_error, _join_raw(texts, structured)
        return [result], False, _safe_raw(result)
    if isinstance(result, list | tuple):
        texts = list(_texts(result))
        return texts, False, _join_raw(texts, None)
    return [], False, _safe_raw(result)


def _looks_like_call_tool_result(data: Mapping[str, Any]) -> bool:
    return isinstance(data.get("content"), list) and any(
        key in data for key in ("isError", "is_error", "structuredContent", "structured_content")
    )


def _texts(content: Any) -> Iterator[str]:
    """Text of each text content block (MCP objects, LangChain dicts or plain strings)."""
    if isinstance(content, str):
        yield content
        return
    if not isinstance(content, list | tuple):
        return
    for block in content:
        if isinstance(block, str):
            yield block
        elif isinstance(block, Mapping):
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                yield block["text"]
        elif getattr(block, "type", None) == "text" and isinstance(
            getattr(block, "text", None), str
        ):
            yield block.text


def _classify(
    value: Any, depth: int, errors: list[str]
) -> ExecutionReceipt | ExecutionDenial | None:
    """Recognise one payload value by its shape; ``None`` when it is neither outcome."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, str):
        decoded = _decode_json(value)
        if decoded is not _NOTHING:
            return _classify(decoded, depth + 1, errors)
        embedded = _decode_json(value, lenient=True)  # JSON inside prose: a denial, never more
        found = None if embedded is _NOTHING else _classify(embedded, depth + 1, errors)
        return found if isinstance(found, ExecutionDenial) else None
    if isinstance(value, list) and value and all(_is_text_block(b) for b in value):
        # a serialised list of content blocks (e.g. a ToolMessage's content dumped to a string)
        for block in value:
            found = _classify(block["text"], depth + 1, errors)
            if found is not None:
                return found
        return None
    if not isinstance(value, Mapping):
        return None
    if set(value) == {"result"}:  # FastMCP wraps a non-object return value
        return _classify(value["result"], depth + 1, errors)
    receipt = _receipt(value)
    if "error" in value:
        denial = _classify_error(value["error"], depth, [], status=value.get("status_code"))
        if receipt is not None and denial is None:
            return receipt  # a receipt may carry an "error" field (e.g. a failed delivery)
        if receipt is not None:
            errors.append("a body that is both a receipt and a denial")
            return None
        return _classify_error(value["error"], depth, errors, status=value.get("status_code"))
    if receipt is not None:
        return receipt
    if "detail" in value and len(value) == 1:  # FastAPI's HTTPException body
        detail = value["detail"]
        if isinstance(detail, Mapping) and "error" not in detail:
            return _classify_error(detail, depth, errors, status=None)
        return _classify(detail, depth + 1, errors)
    if _BLOCKED_CODE.match(str(value.get("code", ""))):  # a bare error object
        return _classify_error(value, depth, errors, status=value.get("status_code"))
    return None


def _is_text_block(block: Any) -> bool:
    return (
        isinstance(block, Mapping)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )


def _receipt(value: Mapping[str, Any]) -> ExecutionReceipt | None:
    try:
        return ExecutionReceipt.model_validate(dict(value))
    except (ValidationError, ValueError, TypeError):
        return None


def _classify_error(
    error: Any, depth: int, errors: list[str], *, status: Any
) -> ExecutionDenial | None:
    if isinstance(error, str):
        decoded = _decode_json(error, lenient=True)
        if isinstance(decoded, Mapping) and depth < _MAX_DEPTH:
            if "error" in decoded or "detail" in decoded:
                found = _classify(decoded, depth + 1, errors)
                return found if isinstance(found, ExecutionDenial) else None
            return _classify_error(decoded, depth + 1, errors, status=status)
        errors.append(_snippet(error))
        return None
    if not isinstance(error, Mapping):
        return None
    code = error.get("code")
    code = code if isinstance(code, str) else None
    message = error.get("message")
    message = message if isinstance(message, str) else None
    gate = error.get("gate")
    gate = gate.strip() if isinstance(gate, str) and _GATE_NAME.match(gate.strip()) else None
    hint = error.get("override_hint")
    hint = hint if isinstance(hint, str) else None
    status_code = error.get("status_code", status)
    status_code = status_code if type(status_code) is int else None

    # The public Algenta MCP server nests the upstream body inside the message string.
    inner: ExecutionDenial | None = None
    if message is not None and depth < _MAX_DEPTH:
        api = _API_ERROR_PREFIX.match(message)
        embedded = _decode_json(message[api.end() :] if api else message, lenient=True)
        if isinstance(embedded, Mapping):
            found = _classify(embedded, depth + 1, [])
            if isinstance(found, ExecutionDenial):
                inner = found
        if api and status_code is None:
            status_code = int(api.group(1))

    code_match = _BLOCKED_CODE.match(code) if code else None
    code_gate = code_match.group(1) if code_match else None
    gates = {g for g in (gate, code_gate, inner.gate if inner else None) if g}
    if not gates:
        label = code or "error"
        errors.append(f"{label}: {_snippet(message or json.dumps(error, default=str))}")
        return None
    if len(gates) > 1:
        errors.append(f"contradicting gates {sorted(gates)} in one denial body")
        return None
    (the_gate,) = gates
    if inner is not None:
        return ExecutionDenial(
            gate=the_gate,
            code=inner.code,
            message=inner.message,
            override_hint=inner.override_hint or hint,
            status_code=status_code if status_code is not None else inner.status_code,
        )
    return ExecutionDenial(
        gate=the_gate,
        code=code or f"execution_blocked_{the_gate}",
        message=message or f"execution blocked by the {the_gate} gate",
        override_hint=hint,
        status_code=status_code,
    )


class _Nothing:
    pass


_NOTHING: Any = _Nothing()


def _decode_json(text: str, *, lenient: bool = False) -> Any:
    """Decode the JSON that ``text`` is (after a FastMCP tool-error prefix); ``_NOTHING`` if none.

    ``lenient`` also finds a JSON object inside surrounding prose (used for denials only: a
    receipt must be the whole text).
    """
    stripped = text.strip()
    if not stripped:
        return _NOTHING
    prefix = _TOOL_ERROR_PREFIX.match(stripped)
    if prefix:
        stripped = stripped[prefix.end() :]
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):
        if not lenient:
            return _NOTHING
    start = stripped.find("{")
    if start < 0:
        return _NOTHING
    try:  # the first JSON object, ignoring text around it
        value, _ = json.JSONDecoder().raw_decode(stripped[start:])
        return value
    except (ValueError, RecursionError):
        return _NOTHING


def _cap(text: str) -> str:
    return text if len(text) <= _RAW_LIMIT else text[:_RAW_LIMIT] + "...[truncated]"


def _snippet(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _join_raw(texts: list[str], structured: Any) -> str:
    if texts:
        return _cap("\n".join(texts))
    if structured is not None:
        return _safe_raw(structured)
    return ""


def _safe_raw(value: Any) -> str:
    try:
        if isinstance(value, str):
            return _cap(value)
        if isinstance(value, BaseModel):
            return _cap(value.model_dump_json())
        return _cap(json.dumps(value, default=repr, ensure_ascii=False))
    except Exception:
        try:
            return _cap(repr(value))
        except Exception:
            return f"<unprintable {type(value).__name__}>"


def tool_result_json(result: Any) -> Any:
    """The JSON body of any tool's MCP result; ``None`` when there is no JSON body.

    A ``CallToolResult`` (``structuredContent``, else its text blocks) or a ``ToolMessage``
    (``artifact["structured_content"]``, else its text), with FastMCP's ``{"result": ...}``
    wrapper removed.

    >>> from mcp.types import CallToolResult, TextContent
    >>> tool_result_json(CallToolResult(content=[TextContent(type="text", text='{"a": 1}')]))
    {'a': 1}
    >>> tool_result_json(CallToolResult(content=[], structuredContent={"result": [1]}))
    [1]
    """
    structured: Any = None
    if hasattr(result, "tool_call_id"):  # a ToolMessage
        artifact = getattr(result, "artifact", None)
        if isinstance(artifact, Mapping):
            structured = artifact.get("structured_content")
        content = getattr(result, "content", "")
        text = content if isinstance(content, str) else "".join(_texts(content))
    else:  # a CallToolResult
        structured = getattr(result, "structuredContent", None)
        text = "".join(_texts(getattr(result, "content", None)))
    data = structured
    if data is None:
        decoded = _decode_json(text)
        data = None if decoded is _NOTHING else decoded
    if isinstance(data, Mapping) and set(data) == {"result"}:
        data = data["result"]
    return data
