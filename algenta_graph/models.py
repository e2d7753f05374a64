"""Chat models for the governed graph: an offline stand-in, a scripted one, and model resolution.

- :class:`DemoChatModel` is a **deterministic offline stand-in** for a real chat model, used
  by the ``algenta-graph demo`` command and as the default when no model is given. It does not
  understand language: it reads ``key=value`` pairs from the latest user message and calls the
  bound tool whose required arguments those pairs fill, then answers with a plain summary of
  the tool results. Use a real model (``"openai:gpt-5"``, any LangChain chat model) for real
  work.
- :func:`resolve_model` turns ``None`` / an ``init_chat_model`` string / a model object into
  a chat model.

The offline models (this one, and :class:`~algenta_graph.testing.ScriptedChatModel` for tests)
implement ``bind_tools`` the way provider models do (``self.bind(tools=...)``
with OpenAI-format schemas), so what they were shown is exactly what a provider would see.

Example::

    >>> from langchain_core.messages import HumanMessage
    >>> from langchain_core.tools import tool
    >>> @tool
    ... def log_decision(chosen_action: str, confidence: float) -> str:
    ...     '''Log a decision.'''
    ...     return "ok"
    >>> model = DemoChatModel().bind_tools([log_decision])
    >>> msg = model.invoke([HumanMessage("log chosen_action=ship confidence=0.8")])
    >>> msg.tool_calls[0]["name"], msg.tool_calls[0]["args"]
    ('log_decision', {'chosen_action': 'ship', 'confidence': 0.8})
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from algenta_graph.errors import ModelPackageMissingError, ModelSetupError
from algenta_graph.nodes.steps import message_text

__all__ = [
    "PROVIDER_PACKAGES",
    "DemoChatModel",
    "ModelPackageMissingError",
    "ModelSetupError",
    "parse_key_values",
    "resolve_model",
]

_PAIR = re.compile(r"""(?<![\w.-])([A-Za-z_][\w.-]*)=("(?:[^"\\]|\\.)*"|'[^']*'|\S+)""")
_SUMMARY_LIMIT = 400


def parse_key_values(text: str) -> dict[str, str]:
    """Return the ``key=value`` pairs in ``text``, values kept whole (URLs included).

    A value runs to the next whitespace; quote it (``rationale="two words"``) to include
    spaces. One trailing ``,`` or ``;`` is treated as punctuation and dropped. Later pairs win.

    >>> parse_key_values("execute decision_id=d-1 webhook_url=http://h:1/hook?a=1&b=2, now")
    {'decision_id': 'd-1', 'webhook_url': 'http://h:1/hook?a=1&b=2'}
    """
    pairs: dict[str, str] = {}
    for match in _PAIR.finditer(text):
        key, raw = match.group(1), match.group(2)
        if raw[:1] in {'"', "'"}:
            try:
                value = shlex.split(raw)[0]
            except ValueError:
                value = raw[1:-1]
        else:
            value = raw[:-1] if raw[-1] in ",;" and len(raw) > 1 else raw
        pairs[key] = value
    return pairs


def _coerce(value: str, schema: Mapping[str, Any]) -> Any:
    """Convert a ``key=value`` string to the JSON type the tool's schema asks for."""
    types = schema.get("type")
    if types is None and "anyOf" in schema:
        types = [s.get("type") for s in schema["anyOf"] if isinstance(s, Mapping)]
    if isinstance(types, str):
        types = [types]
    types = [t for t in (types or []) if t and t != "null"]
    if value[:1] in {"{", "["}:  # JSON-looking values try the structured types first
        types = sorted(types, key=lambda t: t not in {"object", "array"})
    for kind in types:
        try:
            if kind == "integer":
                return int(value)
            if kind == "number":
                return float(value)
            if kind == "boolean" and value.lower() in {"true", "false"}:
                return value.lower() == "true"
            if kind in {"object", "array"}:
                return json.loads(value)
        except (ValueError, json.JSONDecodeError):
            continue
        if kind == "string":
            return value
    return value


def _summarise(text: str) -> str:
    """A short plain summary of one tool result: scalar fields of JSON, else the first lines."""
    text = text.strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict) and set(data) == {"result"}:
        data = data["result"]
    if isinstance(data, dict):
        scalars = [
            f"{k}={v}"
            for k, v in data.items()
            if isinstance(v, (str, int, float, bool)) and len(str(v)) <= 80
        ]
        nested = [k for k, v in data.items() if isinstance(v, (dict, list))]
        body = ", ".join(scalars[:8])
        if nested:
            body += ("; " if body else "") + "also " + ", ".join(nested[:6])
    else:
        first_line = text.splitlines()[0] if text else ""
        sentences = re.split(r"(?<=[.!?])\s+", " ".join(first_line.split()))
        body = " ".join(sentences[:2])
    if len(body) > _SUMMARY_LIMIT:
        body = body[: _SUMMARY_LIMIT - 3] + "..."
    return body


def tool_call_id(seed: str) -> str:
    """A stable tool call id derived from ``seed`` (offline models need no randomness)."""
    return "call_" + hashlib.sha256(seed.encode()).hexdigest()[:16]


class ToolCallingModel(BaseChatModel):
    """A local chat model that binds tools like a provider model (``BaseChatModel`` raises)."""

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools as OpenAI-format schemas, like a provider model."""
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


class DemoChatModel(ToolCallingModel):
    """A deterministic offline stand-in for a chat model (no network, no API key).

    What it does on each call, given the conversation and the bound tools:

    1. If no tool has answered since the latest user message (or only ``search_tools`` has),
       it reads the ``key=value`` pairs of that message (see :func:`parse_key_values`) and
       calls the bound tool whose **required** arguments those pairs fill, preferring the tool
       that uses the most of the given pairs, then the earlier tool in the bound order (the
       governed graph binds tools in retrieval rank). Values are converted to the schema's
       types. Pairs naming no property of the chosen tool are not sent.
    2. If no bound tool fits and ``search_tools`` is bound (and has not been tried this turn),
       it calls ``search_tools`` with the user's message, so the gateway can pull in a tool.
    3. Otherwise it answers with a plain summary of every tool result of this turn, denials
       included, or says that no bound tool matched.

    It is not a language model and is documented as a stand-in everywhere it is used.
    """

    gateway_tool: str = "search_tools"
    """Name of the gateway tool it falls back to when no bound tool fits."""

    @property
    def _llm_type(self) -> str:
        return "algenta-demo"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        tools = [t["function"] for t in kwargs.get("tools", []) if t.get("type") == "function"]
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages, tools))])

    def _reply(self, messages: list[BaseMessage], tools: list[dict[str, Any]]) -> AIMessage:
        last_human = max(
            (i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1
        )
        if last_human < 0:
            return AIMessage("Hello. Give me key=value pairs and I will call a matching tool.")
        question = message_text(messages[last_human])
        results = [m for m in messages[last_human + 1 :] if isinstance(m, ToolMessage)]
        searched = any(m.name == self.gateway_tool for m in results)
        if all(m.name == self.gateway_tool for m in results):
            call = self._pick(question, tools, exclude_gateway=True)
            if call is not None:
                return AIMessage("", tool_calls=[call])
            if not searched and any(t["name"] == self.gateway_tool for t in tools):
                seed = f"{len(messages)}:{self.gateway_tool}:{question}"
                return AIMessage(
                    "",
                    tool_calls=[
                        {
                            "name": self.gateway_tool,
                            "args": {"query": question},
                            "id": tool_call_id(seed),
                            "type": "tool_call",
                        }
                    ],
                )
        real = [m for m in results if m.name != self.gateway_tool]
        if not real:
            names = ", ".join(t["name"] for t in tools) or "none"
            return AIMessage(
                "I (the offline demo model) found no bound tool whose required arguments "
                f"your key=value pairs fill. Bound tools: {names}."
            )
        lines = ["Summary (offline demo model):"]
        for m in real:
            status = " (error)" if m.status == "error" else ""
            lines.append(f"- {m.name}{status}: {_summarise(message_text(m))}")
        return AIMessage("\n".join(lines))

    def _pick(
        self, question: str, tools: list[dict[str, Any]], *, exclude_gateway: bool
    ) -> dict[str, Any] | None:
        given = parse_key_values(question)
        best: tuple[int, int, dict[str, Any]] | None = None
        for rank, tool in enumerate(tools):
            if exclude_gateway and tool["name"] == self.gateway_tool:
                continue
            params = tool.get("parameters") or {}
            props: Mapping[str, Any] = params.get("properties") or {}
            required = list(params.get("required") or [])
            if any(r not in given for r in required):
                continue
            used = [k for k in given if k in props]
            if not used and not required and given:
                continue
            key = (-len(used), rank)
            if best is None or key < best[:2]:
                best = (key[0], key[1], tool)
        if best is None:
            return None
        tool = best[2]
        props = (tool.get("parameters") or {}).get("properties") or {}
        args = {k: _coerce(v, props[k]) for k, v in given.items() if k in props}
        seed = f"{tool['name']}:{json.dumps(args, sort_keys=True)}:{question}"
        return {"name": tool["name"], "args": args, "id": tool_call_id(seed), "type": "tool_call"}


# provider prefix of an init_chat_model string -> the pip package that provides its chat model
# (the common ones; init_chat_model names the package for the rest)
PROVIDER_PACKAGES: dict[str, str] = {
    "openai": "langchain-openai",
    "azure_openai": "langchain-openai",
    "anthropic": "langchain-anthropic",
    "google_genai": "langchain-google-genai",
    "google_vertexai": "langchain-google-vertexai",
    "bedrock": "langchain-aws",
    "bedrock_converse": "langchain-aws",
    "mistralai": "langchain-mistralai",
    "groq": "langchain-groq",
    "ollama": "langchain-ollama",
    "fireworks": "langchain-fireworks",
    "together": "langchain-together",
    "cohere": "langchain-cohere",
    "deepseek": "langchain-deepseek",
    "xai": "langchain-xai",
    "huggingface": "langchain-huggingface",
}
_PACKAGE_IN_MESSAGE = re.compile(r"requires the ([A-Za-z0-9_.-]+) package")


def _provider(model: str) -> str | None:
    prefix, sep, _ = model.partition(":")
    if sep:
        return prefix.replace("-", "_").lower()
    lower = model.lower()
    if lower.startswith(("gpt-", "o1", "o3", "o4", "chatgpt")):
        return "openai"
    if lower.startswith("claude"):
        return "anthropic"
    return None


def resolve_model(model: BaseChatModel | str | None) -> BaseChatModel:
    """Return a chat model: ``None`` -> :class:`DemoChatModel`; a string -> ``init_chat_model``.

    A string such as ``"openai:gpt-5"`` or ``"anthropic:claude-sonnet-4-5"`` needs the
    provider's package (``pip install langchain-openai``) and its API key (``OPENAI_API_KEY``).
    A missing package raises :class:`ModelPackageMissingError` naming the package to install;
    any other failure to create the model (unknown provider, missing credentials) raises
    :class:`ModelSetupError` with the provider's reason.
    """
    if model is None:
        return DemoChatModel()
    if isinstance(model, str):
        provider = _provider(model)
        package = PROVIDER_PACKAGES.get(provider or "")
        try:
            from langchain.chat_models import init_chat_model
        except ImportError as exc:  # langchain is a runtime dependency; a broken install
            raise ModelPackageMissingError(model, "langchain") from exc
        try:
            return init_chat_model(model)
        except ImportError as exc:
            found = _PACKAGE_IN_MESSAGE.search(str(exc))
            missing = package or (found.group(1) if found else None)
            not_installed = isinstance(exc.__cause__ or exc, ModuleNotFoundError)
            if missing is None or not not_installed:  # unknown, or installed but broken
                raise ModelSetupError(f"model {model!r}: {exc}") from exc
            raise ModelPackageMissingError(model, missing) from exc
        except Exception as exc:
            raise ModelSetupError(f"could not create the chat model {model!r}: {exc}") from exc
    if not isinstance(model, BaseChatModel):
        raise TypeError(
            f"model must be a LangChain chat model, an init_chat_model string or None, "
            f"not {type(model).__name__}"
        )
    return model
