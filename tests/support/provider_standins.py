"""Local HTTP stand-ins for the OpenAI Chat Completions and Anthropic Messages APIs.

The tests point the **real** ``langchain_openai.ChatOpenAI`` / ``langchain_anthropic.ChatAnthropic``
classes (``base_url=``) at a :class:`ProviderStandIn`. It answers from a script, and first
checks every request against the rules the real API enforces, answering HTTP 400 in the
provider's own error shape when one is broken, so a request the real API would reject fails the
test. Every request and every rule broken is recorded (``requests``, ``rejections``).

OpenAI Chat Completions (https://platform.openai.com/docs/api-reference/chat/create,
https://platform.openai.com/docs/guides/function-calling):

- O1 ``tools[].function.name``: "Must be a-z, A-Z, 0-9, or contain underscores and dashes, with a
  maximum length of 64".
- O2 ``tools[].function.parameters``: "described as a JSON Schema object": a top level of
  ``"type": "object"``, without ``oneOf``/``anyOf``/``allOf``/``enum``/``not`` there (the API's
  400: "Invalid schema for function ...: schema must be a JSON Schema of 'type: "object"'").
  Every array schema in it has ``items`` (the API's 400: "Invalid schema for function ...:
  In context=('properties', 'tags'), array schema missing items"; widely reported with MCP
  tools, e.g. https://github.com/sigoden/aichat/pull/1049).
- O3 at most 128 tools ("Invalid 'tools': array too long").
- O4 every assistant message with ``tool_calls`` is followed by one ``tool`` message per
  ``tool_call_id`` ("An assistant message with 'tool_calls' must be followed by tool messages
  responding to each 'tool_call_id'").
  Exactly one: a second tool message for the same id is refused (stricter than the
  documented wording).
- O5 a ``tool`` message answers a preceding assistant message's ``tool_calls`` ("messages with
  role 'tool' must be a response to a preceeding message with 'tool_calls'").
- O6 ``tool_calls[].function.arguments`` is a JSON string; roles are system, developer, user,
  assistant, tool; ``parallel_tool_calls`` only with ``tools``.

Anthropic Messages (https://docs.anthropic.com/en/api/messages,
https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use):

- A1 ``tools[].name`` matches ``^[a-zA-Z0-9_-]{1,64}$``; names are unique; ``input_schema`` is a
  JSON Schema with ``"type": "object"`` at the top level.
- A1b the top-level property keys of ``input_schema`` match ``^[a-zA-Z0-9_.-]{1,64}$`` (the
  API's 400: "tools.N.custom.input_schema.properties: Property keys should match pattern
  '^[a-zA-Z0-9_.-]{1,64}$'"; not in the reference pages, measured and widely reported, e.g.
  https://github.com/beautyfree/appstore-connect-mcp/issues/2).
- A2 ``max_tokens`` is required; roles are ``user`` and ``assistant`` only (the system prompt
  is the top-level ``system`` parameter); the first message is a user message.
- A3 roles alternate. (The API documents that consecutive same-role turns are combined; the
  stand-in is stricter on purpose: ``langchain-anthropic`` merges them itself, and a request
  that needs the API's merging is one whose tool results could be split.)
- A4 "text content blocks must be non-empty" (and contain non-whitespace text); every message
  has non-empty content except an optional final assistant message.
- A5 each ``tool_use`` block is answered by a ``tool_result`` block with its id in the **next**
  message ("`tool_use` ids were found without `tool_result` blocks immediately after ...
  Each `tool_use` block must have a corresponding `tool_result` block in the next message"),
  and a ``tool_result`` answers a ``tool_use`` of the previous message.
  One answer per call: a second ``tool_result`` for the same id is refused too (stricter
  than the documented rule, like O4's "one tool message per id", so that a replaced answer
  can never reach the wire twice).
- A6 in that user message the ``tool_result`` blocks come first ("Tool result blocks must
  immediately follow their corresponding tool use blocks ... the tool_result blocks must come
  FIRST in the content array").
- A7 a request whose messages hold ``tool_use`` / ``tool_result`` blocks defines ``tools``;
  ``tool_use`` ids match ``^[a-zA-Z0-9_-]+$``.

Script: a list of :class:`Reply` objects or callables ``(Request) -> Reply`` (a callable sees
the request, e.g. to call a tool by the model-facing name it was bound under). A streaming
request (``"stream": true``) is answered as server-sent events, text one word per event.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from algenta_graph._serve import BackgroundServer

NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]+")
PROPERTY_KEY = re.compile(r"[a-zA-Z0-9_.-]{1,64}")
OPENAI_ROLES = {"system", "developer", "user", "assistant", "tool"}
TOP_LEVEL_REFUSED = ("oneOf", "anyOf", "allOf", "enum", "not")

Kind = Literal["openai", "anthropic"]


@dataclass
class Reply:
    """One scripted model turn: text and/or tool calls ``(model-facing name, args)``."""

    text: str = ""
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass
class Request:
    """What a script callable sees: the request body and the tool names it was bound to."""

    body: dict[str, Any]
    tools: list[str]

    def tool(self, prefix: str) -> str:
        """The one bound tool whose name starts with ``prefix`` (AssertionError otherwise)."""
        found = [t for t in self.tools if t.startswith(prefix)]
        assert len(found) == 1, (prefix, self.tools)
        return found[0]

    def schema(self, name: str) -> dict[str, Any]:
        """The parameter schema the tool ``name`` was bound with (both wire forms)."""
        for t in self.body.get("tools") or []:
            if t.get("name") == name:
                return dict(t["input_schema"])
            if (t.get("function") or {}).get("name") == name:
                return dict(t["function"].get("parameters") or {})
        raise KeyError(name)

    def last_tool_results(self) -> list[str]:
        """The text of the tool results answering the latest tool calls (both wire forms)."""
        messages = self.body.get("messages") or []
        out: list[str] = []
        for m in reversed(messages):
            if m.get("role") == "tool":
                out.append(_text(m.get("content")))
                continue
            if m.get("role") == "user" and isinstance(m.get("content"), list):
                results = [b for b in m["content"] if b.get("type") == "tool_result"]
                if results:
                    return [_text(b.get("content")) for b in results]
            break
        return list(reversed(out))


Script = Sequence["Reply | Callable[[Request], Reply]"]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(_text(b.get("text", b.get("content", ""))) for b in content)
    return "" if content is None else str(content)


# ---------------------------------------------------------------------------- the rules


def _schema_problems(where: str, schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return [f"{where}: the schema must be a JSON object"]
    problems = []
    if schema.get("type") != "object":
        problems.append(
            f"{where}: schema must be a JSON Schema of 'type: \"object\"', "
            f"got 'type: \"{schema.get('type')}\"'"
        )
    refused = [k for k in TOP_LEVEL_REFUSED if k in schema]
    if refused:
        problems.append(f"{where}: schema must not have {refused} at the top level")
    return problems


def _arrays_without_items(schema: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Where an array schema lacks ``items`` (OpenAI: "array schema missing items")."""
    if not isinstance(schema, dict):
        return []
    found: list[tuple[str, ...]] = []
    kind = schema.get("type")
    if "array" in (kind if isinstance(kind, list) else [kind]) and "items" not in schema:
        found.append(path)
    for key in ("properties", "$defs", "definitions"):
        for name, sub in (schema.get(key) or {}).items():
            found += _arrays_without_items(sub, (*path, key, name))
    for key in ("anyOf", "oneOf", "allOf"):
        for n, sub in enumerate(schema.get(key) or []):
            found += _arrays_without_items(sub, (*path, key, str(n)))
    for key in ("items", "additionalProperties"):
        found += _arrays_without_items(schema.get(key), (*path, key))
    return found


def openai_problems(body: dict[str, Any]) -> list[str]:
    """The rules O1-O6 that ``body`` breaks (empty when OpenAI would accept it)."""
    problems: list[str] = []
    tools = body.get("tools") or []
    if len(tools) > 128:
        problems.append("O3 Invalid 'tools': array too long (maximum 128)")
    for i, tool in enumerate(tools):
        fn = tool.get("function") or {}
        if tool.get("type") != "function":
            problems.append(f"O1 tools[{i}].type must be 'function'")
        name = fn.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            problems.append(f"O1 Invalid 'tools[{i}].function.name': {name!r} does not match")
        if "parameters" in fn:
            problems += [
                f"O2 {p}" for p in _schema_problems(f"function {name!r}", fn["parameters"])
            ]
            problems += [
                f"O2 Invalid schema for function {name!r}: In context={where}, array schema "
                "missing items."
                for where in _arrays_without_items(fn["parameters"])
            ]
    if "parallel_tool_calls" in body and not tools:
        problems.append("O6 'parallel_tool_calls' is only allowed when 'tools' are specified")
    messages = body.get("messages") or []
    if not messages:
        problems.append("O6 'messages' must be a non-empty array")
    pending: set[str] = set()
    answering: set[str] = set()  # ids of the latest assistant tool_calls message
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in OPENAI_ROLES:
            problems.append(f"O6 messages[{i}].role {role!r} is invalid")
        if role == "tool":
            call_id = m.get("tool_call_id")
            if call_id not in answering:
                problems.append(
                    f"O5 messages[{i}]: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'"
                )
            elif call_id not in pending:
                problems.append(f"O4 messages[{i}]: a second tool message for {call_id!r}")
            pending.discard(call_id)
            continue
        if pending:
            problems.append(
                "O4 An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(sorted(pending))}"
            )
            pending = set()
        answering = set()
        if role == "assistant" and m.get("tool_calls"):
            for c in m["tool_calls"]:
                args = (c.get("function") or {}).get("arguments")
                if not isinstance(args, str):
                    problems.append(f"O6 messages[{i}]: tool call arguments must be a string")
                else:
                    try:
                        json.loads(args)
                    except json.JSONDecodeError:
                        problems.append(f"O6 messages[{i}]: tool call arguments are not JSON")
            answering = {c.get("id") for c in m["tool_calls"]}
            pending = set(answering)
    if pending:
        problems.append(
            "O4 An assistant message with 'tool_calls' must be followed by tool messages "
            f"responding to each 'tool_call_id': {', '.join(sorted(pending))}"
        )
    return problems


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def anthropic_problems(body: dict[str, Any]) -> list[str]:
    """The rules A1-A7 that ``body`` breaks (empty when Anthropic would accept it)."""
    problems: list[str] = []
    tools = body.get("tools") or []
    names = [t.get("name") for t in tools]
    for i, tool in enumerate(tools):
        name = tool.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            problems.append(f"A1 tools.{i}.name: {name!r} should match ^[a-zA-Z0-9_-]{{1,64}}$")
        problems += [
            f"A1 {p}" for p in _schema_problems(f"tools.{i}.input_schema", tool.get("input_schema"))
        ]
        schema = tool.get("input_schema")
        props = (schema.get("properties") if isinstance(schema, dict) else None) or {}
        if any(not PROPERTY_KEY.fullmatch(str(k)) for k in props):
            problems.append(
                f"A1b tools.{i}.custom.input_schema.properties: Property keys should match "
                "pattern '^[a-zA-Z0-9_.-]{1,64}$'"
            )
    if len(set(names)) != len(names):
        problems.append("A1 tools: Tool names must be unique.")
    if "max_tokens" not in body:
        problems.append("A2 max_tokens: Field required")
    messages = body.get("messages") or []
    if not messages:
        problems.append("A2 messages: at least one message is required")
    elif messages[0].get("role") != "user":
        problems.append("A2 messages: first message must use the 'user' role")
    uses_tool_blocks = False
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ("user", "assistant"):
            problems.append(f"A2 messages.{i}: Unexpected role {role!r}")
        if i and role == messages[i - 1].get("role"):
            problems.append(f"A3 messages.{i}: roles must alternate (two {role!r} in a row)")
        blocks = _blocks(m.get("content"))
        final_assistant = i == len(messages) - 1 and role == "assistant"
        if not blocks and not final_assistant:
            problems.append(f"A4 messages.{i}: all messages must have non-empty content")
        for b in blocks:
            if b.get("type") == "text" and not str(b.get("text", "")).strip():
                problems.append(f"A4 messages.{i}: text content blocks must be non-empty")
            if b.get("type") in ("tool_use", "tool_result"):
                uses_tool_blocks = True
            if b.get("type") == "tool_use":
                if not TOOL_USE_ID.fullmatch(str(b.get("id", ""))):
                    problems.append(f"A7 messages.{i}: tool_use.id does not match the pattern")
                if not NAME.fullmatch(str(b.get("name", ""))):
                    problems.append(f"A1 messages.{i}: tool_use.name does not match the pattern")
            if b.get("type") == "tool_result":
                for inner in _blocks(b.get("content")) if b.get("content") else []:
                    if inner.get("type") == "text" and not str(inner.get("text", "")).strip():
                        problems.append(f"A4 messages.{i}: text content blocks must be non-empty")
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        results = [str(b.get("tool_use_id")) for b in blocks if b.get("type") == "tool_result"]
        previous = _blocks(messages[i - 1].get("content")) if i else []
        previous_uses = {str(b.get("id")) for b in previous if b.get("type") == "tool_use"}
        if len(set(results)) != len(results):
            problems.append(f"A5 messages.{i}: more than one `tool_result` for one `tool_use`")
        if results and not set(results) <= previous_uses:
            problems.append(
                f"A5 messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{sorted(set(results) - previous_uses)}. Each `tool_result` block must have a "
                "corresponding `tool_use` block in the previous message."
            )
        kinds = [b.get("type") for b in blocks]
        if any(k != "tool_result" for k in kinds[: len(results)]):
            problems.append(f"A6 messages.{i}: tool_result blocks must come first in the content")
        if uses:
            following = _blocks(messages[i + 1].get("content")) if i + 1 < len(messages) else []
            answered = {b.get("tool_use_id") for b in following if b.get("type") == "tool_result"}
            missing = [u for u in uses if u not in answered]
            if missing:
                problems.append(
                    f"A5 messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have "
                    "a corresponding `tool_result` block in the next message."
                )
    if uses_tool_blocks and not tools:
        problems.append(
            "A7 Requests which include `tool_use` or `tool_result` blocks must define tools."
        )
    return problems


# ---------------------------------------------------------------------------- the server


class ProviderStandIn:
    """A scripted OpenAI or Anthropic API on a free local port (a context manager)."""

    def __init__(self, kind: Kind, script: Script) -> None:
        self.kind = kind
        self.script: list[Any] = list(script)
        self.requests: list[dict[str, Any]] = []
        self.rejections: list[list[str]] = []
        self.streamed: list[bool] = []
        self._lock = threading.Lock()
        self._ids = 0
        path = "/v1/chat/completions" if kind == "openai" else "/v1/messages"
        app = Starlette(routes=[Route(path, self._handle, methods=["POST"])])
        self._server = BackgroundServer(app, name=f"{kind}-standin")

    @property
    def base_url(self) -> str:
        """What to pass as ``base_url``: OpenAI's client appends ``/chat/completions``,
        Anthropic's ``/v1/messages``."""
        root = f"http://{self._server.host}:{self._server.port}"
        return f"{root}/v1" if self.kind == "openai" else root

    def __enter__(self) -> ProviderStandIn:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    def chat_model(self, **options: Any) -> Any:
        """The real LangChain client class of this provider, pointed at the stand-in."""
        if self.kind == "openai":
            from langchain_openai import ChatOpenAI

            return ChatOpenAI(
                model="gpt-4.1-mini",
                base_url=self.base_url,
                api_key="sk-standin",  # type: ignore[arg-type]
                max_retries=0,
                **options,
            )
        from langchain_anthropic import ChatAnthropic

        return ChatAnthropic(  # type: ignore[call-arg]
            model="claude-sonnet-4-6",
            base_url=self.base_url,
            api_key="sk-ant-standin",  # type: ignore[arg-type]
            max_retries=0,
            **options,
        )

    def tools_of(self, n: int) -> list[str]:
        """The tool names bound in request ``n``."""
        return _tool_names(self.kind, self.requests[n])

    def _next_id(self) -> str:
        self._ids += 1
        return f"call_{self._ids:04d}" if self.kind == "openai" else f"toolu_{self._ids:04d}"

    async def _handle(self, request: HttpRequest) -> Response:
        body = await request.json()
        problems = openai_problems(body) if self.kind == "openai" else anthropic_problems(body)
        with self._lock:
            self.requests.append(body)
            self.rejections.append(problems)
            self.streamed.append(bool(body.get("stream")))
        if problems:
            message = "; ".join(problems)
            if self.kind == "openai":
                error = {"message": message, "type": "invalid_request_error", "param": None}
                return JSONResponse({"error": {**error, "code": None}}, status_code=400)
            error = {"type": "invalid_request_error", "message": message}
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        with self._lock:
            if not self.script:
                problem = f"the stand-in's script ran out at request {len(self.requests)}"
                self.rejections[-1] = [problem]
                return JSONResponse({"error": {"message": problem}}, status_code=500)
            step = self.script.pop(0)
        reply = step(Request(body, _tool_names(self.kind, body))) if callable(step) else step
        calls = [(self._next_id(), name, args) for name, args in reply.calls]
        if self.kind == "openai":
            if body.get("stream"):
                return _sse(_openai_chunks(body, reply.text, calls), data_only=True)
            return JSONResponse(_openai_completion(body, reply.text, calls))
        if body.get("stream"):
            return _sse(_anthropic_events(body, reply.text, calls), data_only=False)
        return JSONResponse(_anthropic_message(body, reply.text, calls))


def _tool_names(kind: Kind, body: dict[str, Any]) -> list[str]:
    tools = body.get("tools") or []
    if kind == "openai":
        return [t["function"]["name"] for t in tools]
    return [t["name"] for t in tools]


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text)


def _sse(events: Iterator[tuple[str, dict[str, Any]]], *, data_only: bool) -> StreamingResponse:
    def lines() -> Iterator[str]:
        for event, data in events:
            if data_only:
                yield f"data: {json.dumps(data)}\n\n"
            else:
                yield f"event: {event}\ndata: {json.dumps(data)}\n\n"
        if data_only:
            yield "data: [DONE]\n\n"

    return StreamingResponse(lines(), media_type="text/event-stream")


Call = tuple[str, str, dict[str, Any]]


def _openai_completion(body: dict[str, Any], text: str, calls: list[Call]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ]
    return {
        "id": "chatcmpl-standin",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _openai_chunks(body: dict[str, Any], text: str, calls: list[Call]) -> Iterator[tuple[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-standin",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": body.get("model"),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    yield "", chunk({"role": "assistant", "content": ""})
    for word in _words(text):
        yield "", chunk({"content": word})
    for index, (call_id, name, args) in enumerate(calls):
        head = {"index": index, "id": call_id, "type": "function"}
        yield "", chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]})
        yield (
            "",
            chunk({"tool_calls": [{"index": index, "function": {"arguments": json.dumps(args)}}]}),
        )
    yield "", chunk({}, "tool_calls" if calls else "stop")
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        yield "", {**chunk({}), "choices": [], "usage": usage}


def _anthropic_content(text: str, calls: list[Call]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
    return content


def _anthropic_message(body: dict[str, Any], text: str, calls: list[Call]) -> dict[str, Any]:
    return {
        "id": "msg_standin",
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": _anthropic_content(text, calls),
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def _anthropic_events(
    body: dict[str, Any], text: str, calls: list[Call]
) -> Iterator[tuple[str, Any]]:
    start = {**_anthropic_message(body, "", []), "stop_reason": None}
    yield "message_start", {"type": "message_start", "message": start}
    index = 0
    if text:
        block: dict[str, Any] = {"type": "text", "text": ""}
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        )
        for word in _words(text):
            delta = {"type": "text_delta", "text": word}
            yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": 0}
        index = 1
    for call_id, name, args in calls:
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": block},
        )
        delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
        index += 1
    stop = {"stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None}
    yield "message_delta", {"type": "message_delta", "delta": stop, "usage": {"output_tokens": 5}}
    yield "message_stop", {"type": "message_stop"}


# ---------------------------------------------------------------------------- an MCP server

LONG_NAME = "quarterly_revenue_report_generator_for_every_region_and_product_linev2"
"""A 70-character MCP tool name (providers accept at most 64)."""
UNSAFE_TOOLS: dict[str, dict[str, Any]] = {
    "weather.get_forecast": {
        "description": "Get the weather forecast for a city.",
        "inputSchema": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city."}},
            "required": ["city"],
        },
    },
    "files/read weather": {
        "description": "Read a weather file by its path.",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    LONG_NAME: {
        "description": "Generate the quarterly revenue report for every region.",
        "inputSchema": {"type": "object", "properties": {"quarter": {"type": "string"}}},
    },
    "records.search": {  # property keys Anthropic rejects: renamed, mapped back on the call
        "description": "Search weather records by station name, a page at a time.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "filter[name]": {"type": "string"},
                "page size": {"type": "integer"},
                "tags": {"type": "array"},  # no items: OpenAI rejects it as it is
            },
            "required": ["filter[name]"],
        },
    },
    "weather_no_params": {  # a schema with no properties: fixed, not refused
        "description": "Current weather alerts, no parameters.",
        "inputSchema": {"type": "object"},
    },
    "weather_string_input": {  # a top level the providers reject: refused
        "description": "Weather by a bare string (a schema providers reject).",
        "inputSchema": {"type": "string"},
    },
}


class UnsafeNamesServer:
    """An MCP server (streamable HTTP, free port) whose tools have names providers reject.

    Calls are recorded in ``calls`` as ``(real MCP name, arguments)``; each answers with
    ``{"tool": name, "arguments": ...}`` as JSON text.
    """

    def __init__(self) -> None:
        import contextlib as _contextlib

        import mcp.types as types
        from mcp.server.lowlevel import Server
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from starlette.routing import Mount

        self.calls: list[tuple[str, dict[str, Any]]] = []
        tools = [types.Tool(name=name, **spec) for name, spec in UNSAFE_TOOLS.items()]
        server: Server[Any, Any] = Server("unsafe-names")

        @server.list_tools()
        async def list_tools() -> list[types.Tool]:
            return tools

        @server.call_tool(validate_input=False)
        async def call_tool(name: str, arguments: dict[str, Any]) -> list[types.TextContent]:
            if name not in UNSAFE_TOOLS:
                raise ValueError(f"unknown tool {name!r}")
            self.calls.append((name, dict(arguments)))
            text = json.dumps({"tool": name, "arguments": arguments})
            return [types.TextContent(type="text", text=text)]

        manager = StreamableHTTPSessionManager(app=server, stateless=True, json_response=True)

        async def handle(scope: Any, receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

        @_contextlib.asynccontextmanager
        async def lifespan(_: Starlette) -> Any:
            async with manager.run():
                yield

        app = Starlette(routes=[Mount("/mcp", app=handle)], lifespan=lifespan)
        self._server = BackgroundServer(app, name="unsafe-names-mcp")

    @property
    def url(self) -> str:
        return f"http://{self._server.host}:{self._server.port}/mcp"

    def __enter__(self) -> UnsafeNamesServer:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()
