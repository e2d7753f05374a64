"""The one typed configuration of the governed agent, for the imported and the served graph.

:class:`AgentConfig` holds every option of
:func:`~algenta_graph.graph.create_governed_agent` that makes sense outside Python code; the
served graph (``langgraph.json``, :mod:`algenta_graph.serving.server`) is built from one, and
``create_governed_agent(config=...)`` takes the same object, so both share one code path and one
set of defaults (the ``DEFAULT_*`` constants here).

Where a configuration comes from (:func:`load_config`), later wins:

1. the defaults;
2. the file named by ``ALGENTA_CONFIG`` (or passed), TOML (``.toml``) or JSON (``.json``);
3. the environment variables of earlier releases, which keep working and win over the file:
   ``ALGENTA_BASE_URL``, ``ALGENTA_API_KEY``, ``ALGENTA_OPERATOR_API_KEY``, ``ALGENTA_PROFILE``,
   ``ALGENTA_MODEL``, ``ALGENTA_TOP_K``, ``ALGENTA_ON_DENIAL``.

Python objects are named by import path, ``"package.module:attribute"``: ``embeddings`` (a
LangChain ``Embeddings``, or a callable returning one), ``authorize_operator`` (the rule
``(identity, gate, config) -> bool`` itself) and ``model = {path = "..."}`` (a chat model, or a
callable returning one; a plain string is an ``init_chat_model`` id such as ``"openai:gpt-5"``).

**Secrets never go into the file**: a secret is written ``{env = "CRM_TOKEN"}`` (optionally
``prefix = "Bearer "``) in place of its value and read from the environment when the
configuration is resolved (:func:`resolve_config`); a literal value where a secret belongs (the
engine keys, a header or a stdio ``env`` entry whose name says token, key, secret, password,
cookie or authorization, a password in a URL) is refused.

Every problem is reported at once, each on one line naming its source (the file, or the
environment variable) and its key (:class:`ConfigError`)::

    /srv/agent.toml: extra_servers.crm.headers.Authorization: the environment variable
    CRM_TOKEN is not set

Example (the README's "Configuration" has a commented file)::

    config = load_config("agent.toml")            # the file, then the ALGENTA_* variables
    graph = await create_governed_agent(config=config, checkpointer="runs.sqlite")

>>> AgentConfig().top_k, AgentConfig().profile, AgentConfig().step_limit
(5, 'observe', 50)
>>> parse_config({"top_k": 3, "always_include": ["get_contract"]}).always_include
['get_contract']
>>> parse_config({"top_k": "3"}, source="agent.toml")
Traceback (most recent call last):
  ...
algenta_graph.config.ConfigError: agent.toml: top_k: Input should be a valid integer
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from algenta_graph.errors import AlgentaGraphError
from algenta_graph.governance.contract import DEFAULT_PROFILE, resolve_profile
from algenta_graph.governance.escalations import (
    DecisionType,
    EscalationSettings,
    InterruptMode,
    NotifyHook,
)
from algenta_graph.governance.gates import GateName, Policy, describe_gates, parse_on_denial
from algenta_graph.governance.tool_gates import ToolGates

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from langchain_core.language_models import BaseChatModel

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_NAME",
    "DEFAULT_STEP_LIMIT",
    "DEFAULT_SYSTEM_PROMPT",
    "DEFAULT_TOP_K",
    "DEMO_MODEL",
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_CONFIG",
    "ENV_MODEL",
    "ENV_ON_DENIAL",
    "ENV_OPERATOR_API_KEY",
    "ENV_PROFILE",
    "ENV_TOP_K",
    "ENV_VARIABLES",
    "AgentConfig",
    "ConfigError",
    "ConfigProblem",
    "ConfigTable",
    "EnvSecret",
    "EscalationTable",
    "HttpServer",
    "ImportPath",
    "ImportedModel",
    "NotifyTable",
    "ResolvedConfig",
    "StdioServer",
    "TelemetryTable",
    "UsageSettings",
    "WebsocketServer",
    "import_object",
    "iter_secrets",
    "load_config",
    "masked",
    "parse_config",
    "read_config_file",
    "resolve_config",
]

# ---------------------------------------------------------------------------------------------
# names and defaults

ENV_CONFIG = "ALGENTA_CONFIG"
"""The environment variable naming the configuration file (TOML or JSON)."""
ENV_BASE_URL = "ALGENTA_BASE_URL"
ENV_API_KEY = "ALGENTA_API_KEY"
ENV_OPERATOR_API_KEY = "ALGENTA_OPERATOR_API_KEY"
ENV_PROFILE = "ALGENTA_PROFILE"
ENV_MODEL = "ALGENTA_MODEL"
ENV_TOP_K = "ALGENTA_TOP_K"
ENV_ON_DENIAL = "ALGENTA_ON_DENIAL"
ENV_VARIABLES: Mapping[str, str] = {
    "base_url": ENV_BASE_URL,
    "api_key": ENV_API_KEY,
    "operator_api_key": ENV_OPERATOR_API_KEY,
    "profile": ENV_PROFILE,
    "model": ENV_MODEL,
    "top_k": ENV_TOP_K,
    "on_denial": ENV_ON_DENIAL,
}
"""``{key: the environment variable that wins over the file for it}``."""

DEFAULT_TOP_K = 5
"""How many tools retrieval binds per turn by default (plus the base tools and
``search_tools``)."""
DEFAULT_STEP_LIMIT = 50
"""The default ``recursion_limit`` of a run (LangGraph's own default, 25, is about 10 tool
rounds of this graph)."""
DEFAULT_CONNECT_TIMEOUT = 30.0
"""Seconds for connecting to an MCP server, initialising and listing its tools."""
DEFAULT_CALL_TIMEOUT = 60.0
"""Seconds one tool call may take."""
DEFAULT_NAME = "algenta_governed_agent"
"""The compiled graph's name."""
DEMO_MODEL = "demo"
"""The ``model`` value (also the default) that selects the offline
:class:`~algenta_graph.models.DemoChatModel`."""
DEFAULT_SYSTEM_PROMPT = (
    "You are a governed agent working on an Algenta decision engine through tools. "
    "If the tool you need is not bound, call search_tools to find it. "
    "execute_decision is governed by named policy gates:\n"
    + describe_gates()
    + "\nWhen a gate denies an execution, you cannot override it; tell the user which gate "
    "blocked which decision and why."
)
"""The system prompt by default: what the gates are, and that the model cannot override them."""

_RESERVED_SERVERS = frozenset({"algenta", "algenta-operator"})
"""The connection's own server names (the engine, and its operator session)."""
_SECRET_NAME = re.compile(
    r"authorization|token|secret|passw|cookie|(^|[-_])(api)?key($|[-_])", re.I
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_MASK = "****"
_TRANSPORTS = frozenset({"streamable_http", "streamable-http", "http", "sse", "stdio", "websocket"})


# ---------------------------------------------------------------------------------------------
# errors


@dataclass(frozen=True)
class ConfigProblem:
    """One problem of a configuration: where it came from, which key, what is wrong."""

    source: str
    """The file, ``"environment variable ALGENTA_..."``, or ``"the configuration"`` (Python)."""
    key: str
    """The dotted key (``extra_servers.crm.headers.Authorization``)."""
    message: str

    def __str__(self) -> str:
        """``source: key: message``."""
        return f"{self.source}: {self.key}: {self.message}"


class ConfigError(AlgentaGraphError, ValueError):
    """The configuration is wrong; raised by :func:`load_config` and :func:`resolve_config`.

    Its message is one line per problem (:class:`ConfigProblem`), each naming the file or the
    environment variable and the key; the served graph refuses to start with it.

    Args:
        problems: every problem found (at least one).
    """

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.problems: tuple[ConfigProblem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


# ---------------------------------------------------------------------------------------------
# the types


class ConfigTable(BaseModel):
    """The base of every configuration table: strictly typed, unknown keys refused, frozen.

    A new table (the escalation settings, the telemetry exporter) subclasses it, so a wrong
    key or type in it is reported like every other (one line naming the file and the key).
    """

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class EnvSecret(ConfigTable):
    """A secret read from the environment, written in place of its value: ``{env = "NAME"}``.

    ``prefix`` is put before the value (``{env = "CRM_TOKEN", prefix = "Bearer "}`` for an
    ``Authorization`` header).
    """

    env: Annotated[str, Field(pattern=_ENV_NAME.pattern)]
    """The environment variable holding the secret."""
    prefix: str = ""
    """Text put before the secret's value."""

    def value(self, environ: Mapping[str, str]) -> str | None:
        """The secret (with its prefix) from ``environ``; ``None`` when unset or empty."""
        raw = environ.get(self.env)
        return f"{self.prefix}{raw}" if raw else None


def _check_import_path(value: str) -> str:
    if not _IMPORT_PATH.match(value):
        raise ValueError(f"must be an import path 'package.module:attribute', got {value!r}")
    return value


ImportPath = Annotated[str, AfterValidator(_check_import_path)]
"""``"package.module:attribute"``: a Python object named by where it is defined."""


def _text_or_secret(value: Any) -> Any:
    """A header / stdio ``env`` value: a string, or ``{env = "NAME"}`` (one clear error)."""
    if isinstance(value, str | EnvSecret):
        return value
    if isinstance(value, Mapping):
        return EnvSecret.model_validate(value)
    raise ValueError(
        f'must be a string or a secret from the environment ({{env = "NAME"}}), got '
        f"{type(value).__name__}"
    )


TextOrSecret = Annotated[str | EnvSecret, BeforeValidator(_text_or_secret)]


def _secret_only(value: Any) -> Any:
    """An engine key: only ``{env = "NAME"}``; a literal is refused (secrets stay out of files)."""
    if value is None or isinstance(value, EnvSecret):
        return value
    if isinstance(value, str):
        raise ValueError(
            'a secret is never written into the configuration: use {env = "NAME"} and set '
            "that environment variable"
        )
    if isinstance(value, Mapping):
        return EnvSecret.model_validate(value)
    raise ValueError(f'must be {{env = "NAME"}}, got {type(value).__name__}')


SecretSetting = Annotated[EnvSecret | None, BeforeValidator(_secret_only)]


def _no_literal_secrets(values: Mapping[str, TextOrSecret] | None, what: str) -> None:
    for name, value in (values or {}).items():
        if isinstance(value, str) and value and _SECRET_NAME.search(name):
            raise ValueError(
                f"{what} {name!r} looks like a secret: never write it into the configuration; "
                f'use {{env = "NAME"}} (e.g. {{env = "CRM_TOKEN", prefix = "Bearer "}})'
            )


def _check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
        raise ValueError(f"must be an http(s):// or ws(s):// URL, got {url!r}")
    if parts.password:
        raise ValueError("a password in the URL is a secret: use a header {env = ...} instead")
    for name, value in parse_qsl(parts.query):
        if value and _SECRET_NAME.search(name):
            raise ValueError(
                f"the query parameter {name!r} looks like a secret: send it in a header "
                "from the environment instead"
            )
    return url


Url = Annotated[str, AfterValidator(_check_url)]


class HttpServer(ConfigTable):
    """An extra MCP server over streamable HTTP or SSE (``langchain-mcp-adapters``'s shape)."""

    transport: Literal["streamable_http", "streamable-http", "http", "sse"]
    url: Url
    headers: dict[str, TextOrSecret] = {}
    """Request headers; a secret one as ``{env = "NAME", prefix = "Bearer "}``."""
    timeout: Annotated[float, Field(gt=0)] | None = None
    """Seconds for an HTTP request (default: the configuration's ``connect_timeout``)."""
    sse_read_timeout: Annotated[float, Field(gt=0)] | None = None
    """Seconds to wait for a new event on the stream."""
    terminate_on_close: bool | None = None
    """Whether to end the server's session when closing (streamable HTTP)."""

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, TextOrSecret]) -> dict[str, TextOrSecret]:
        _no_literal_secrets(value, "the header")
        return value


class StdioServer(ConfigTable):
    """An extra MCP server started as a subprocess (``langchain-mcp-adapters``'s shape)."""

    transport: Literal["stdio"]
    command: Annotated[str, Field(min_length=1)]
    args: list[str] = []
    env: dict[str, TextOrSecret] | None = None
    """The subprocess's environment; a secret entry as ``{env = "NAME"}``."""
    cwd: str | None = None
    encoding: str | None = None

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, TextOrSecret] | None) -> dict[str, TextOrSecret] | None:
        _no_literal_secrets(value, "the environment entry")
        return value


class WebsocketServer(ConfigTable):
    """An extra MCP server over a WebSocket (``langchain-mcp-adapters``'s shape)."""

    transport: Literal["websocket"]
    url: Url


ExtraServer = Annotated[
    HttpServer | StdioServer | WebsocketServer, Field(discriminator="transport")
]
"""One extra MCP server, by its ``transport``."""


class ImportedModel(ConfigTable):
    """A chat model named by import path: a ``BaseChatModel``, or a callable returning one."""

    path: ImportPath


def _model_setting(value: Any) -> Any:
    if value is None or isinstance(value, ImportedModel):
        return value
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise ValueError('must not be empty (use "demo" for the offline model)')
        return text
    if isinstance(value, Mapping):
        return ImportedModel.model_validate(value)
    raise ValueError(
        'must be an init_chat_model id ("openai:gpt-5"), "demo", or {path = '
        f'"package.module:factory"}}, got {type(value).__name__}'
    )


ModelSetting = Annotated[str | ImportedModel | None, BeforeValidator(_model_setting)]


class UsageSettings(ConfigTable):
    """Learning from use (:class:`~algenta_graph.retrieval.usage.UsageSignal`), on when present.

    Its history lives in the run's LangGraph store (the server's, when served) under
    :data:`~algenta_graph.retrieval.usage.DEFAULT_NAMESPACE`, which only the graph writes.
    """

    weight: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.5
    """The largest relative lift of a tool's retrieval score."""
    half_life_days: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 30.0
    """Days after which a recorded call counts half."""
    per_tool_cap: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 200.0
    """The most calls one tool's history is worth."""
    max_terms: Annotated[int, Field(ge=1)] = 256
    """Distinct query terms kept per tool."""
    depth: Annotated[int, Field(ge=1)] = 50
    """How many retrieval hits the signal reranks."""


Duration = Annotated[str | int | float, Field(union_mode="left_to_right")]
_DURATION: TypeAdapter[timedelta] = TypeAdapter(timedelta)
"""Seconds, or an ISO 8601 duration (``"PT4H"``)."""


class NotifyTable(ConfigTable):
    """``[escalation.notify]``: a URL posted once per escalation raised, signed with HMAC-SHA256.

    The table form of :class:`~algenta_graph.governance.escalations.WebhookNotify`; its
    ``secret`` is ``{env = "NAME"}``.
    """

    url: Url
    """Where the notice is posted."""
    secret: Annotated[EnvSecret, BeforeValidator(_secret_only)]
    """The HMAC key, from the environment."""
    timeout_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 5.0
    """How long one attempt may take."""
    attempts: Annotated[int, Field(ge=1)] = 3
    """How many attempts one notice gets while the receiver fails."""


class EscalationTable(ConfigTable):
    """``[escalation]``: how the denial handlers ask operators (per-gate deadlines, hooks).

    The file form of :class:`~algenta_graph.governance.escalations.EscalationSettings` (whose
    fields document each key): the notification secret is ``{env = "NAME"}`` and the hook an
    import path. ``expires_after`` takes seconds or an ISO 8601 duration (``"PT4H"``).
    """

    require_reason: bool = False
    """Every answer must give a reason (the interrupt's ``response_schema`` says so)."""
    interrupt_mode: InterruptMode = "batched"
    """``batched`` (one ``HITLRequest`` per gate and step) or ``per_call``."""
    allowed_decisions: dict[GateName, list[DecisionType]] = {}
    """Per gate, the decisions an operator may take (default all)."""
    expires_after: dict[
        GateName, Annotated[str | int | float, Field(union_mode="left_to_right")]
    ] = {}
    """Per gate, how long an escalation waits (seconds, or ``"PT4H"``)."""
    notify: NotifyTable | None = None
    """A URL notified once per escalation raised."""
    hook: ImportPath | None = None
    """A Python callable notified once per escalation raised."""

    @field_validator("expires_after")
    @classmethod
    def _durations(cls, value: dict[str, Any]) -> dict[str, Any]:
        for gate, duration in value.items():
            try:
                _DURATION.validate_python(duration)
            except ValidationError as exc:
                message = exc.errors()[0]["msg"]
                raise ValueError(
                    f'{gate}: {message} (seconds, or an ISO 8601 duration such as "PT4H")'
                ) from None
        return value

    @model_validator(mode="after")
    def _valid(self) -> EscalationTable:
        self.settings()  # the handlers' own model checks the values (a bad duration, ...)
        return self

    def settings(
        self, *, secret: str | None = None, hook: NotifyHook | None = None
    ) -> EscalationSettings:
        """The handlers' :class:`EscalationSettings`, with the resolved secret and hook.

        Raises:
            ValueError: a value the handlers refuse (its message names the key).
        """
        data: dict[str, Any] = {
            "require_reason": self.require_reason,
            "interrupt_mode": self.interrupt_mode,
            "allowed_decisions": self.allowed_decisions,
            "expires_after": self.expires_after,
            "hook": hook,
        }
        if self.notify is not None:
            data["notify_url"] = {
                "url": self.notify.url,
                "secret": secret or "unresolved",
                "timeout_seconds": self.notify.timeout_seconds,
                "attempts": self.notify.attempts,
            }
        try:
            return EscalationSettings.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(f"{where}: {first['msg']}") from None


class TelemetryTable(ConfigTable):
    """``[telemetry]``: where the graph's spans and metrics go.

    Without it (or with ``exporter = "none"``) the graph uses whatever global OpenTelemetry
    providers the process has (the API's no-ops unless the application set some).
    ``exporter = "otlp"`` sets them up once per process with
    :func:`~algenta_graph.telemetry.configure_otlp` (the ``otlp`` extra).
    """

    exporter: Literal["none", "otlp"] = "none"
    """``none``: the process's own providers; ``otlp``: OTLP/HTTP to ``endpoint``."""
    endpoint: Url | None = None
    """The collector's base URL (default ``OTEL_EXPORTER_OTLP_ENDPOINT``)."""
    service_name: Annotated[str, Field(min_length=1)] = "algenta-graph"
    """The ``service.name`` resource attribute (``OTEL_SERVICE_NAME`` wins)."""


def _on_denial(value: Any) -> Any:
    try:
        policies = parse_on_denial(value, "on_denial")
    except ValueError as exc:  # the key is named by the problem already
        message = str(exc)
        raise ValueError(message.removeprefix("on_denial: ")) from None
    return policies or None


class AgentConfig(ConfigTable):
    """Everything that configures a governed agent outside Python code (see the module docs).

    Build one with :func:`load_config` (a file and the environment), :func:`parse_config` (a
    mapping) or directly (``AgentConfig(top_k=3)``). Every key is optional.
    """

    base_url: Url | None = None
    """The engine's MCP endpoint (default ``http://localhost:8000/mcp``)."""
    api_key: SecretSetting = None
    """The engine's API token, ``{env = "NAME"}`` (``ALGENTA_API_KEY`` wins)."""
    operator_api_key: SecretSetting = None
    """The operator path's own engine credential, ``{env = "NAME"}``
    (``ALGENTA_OPERATOR_API_KEY`` wins)."""
    profile: str = DEFAULT_PROFILE
    """The tool profile: ``observe``, ``govern``, ``execute`` or ``full``; a run may only
    narrow it."""
    model: ModelSetting = None
    """``"demo"`` (the default, offline), an ``init_chat_model`` id (``"openai:gpt-5"``), or
    ``{path = "package.module:factory"}``."""
    top_k: Annotated[int, Field(ge=1)] = DEFAULT_TOP_K
    """How many tools retrieval binds per turn."""
    on_denial: Annotated[dict[GateName, Policy] | None, BeforeValidator(_on_denial)] = None
    """``report`` / ``escalate`` / ``halt`` for every gate, or ``{gate = policy}``; a run may only
    make a gate stricter."""
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    """The model's system prompt (``""``: none)."""
    step_limit: Annotated[int, Field(ge=4)] = DEFAULT_STEP_LIMIT
    """A run's default ``recursion_limit``; a run reaching it ends with a final message."""
    connect_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)] = DEFAULT_CONNECT_TIMEOUT
    """Seconds for connecting to an MCP server and listing its tools."""
    call_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)] = DEFAULT_CALL_TIMEOUT
    """Seconds one tool call may take."""
    extra_servers: dict[str, ExtraServer] = {}
    """More MCP servers whose tools join the catalog, ``{name: connection}``."""
    always_include: list[Annotated[str, Field(min_length=1)]] = []
    """Base tools, bound on every step whatever retrieval ranks (not counted in ``top_k``)."""
    embeddings: ImportPath | None = None
    """A LangChain ``Embeddings`` (or a callable returning one) fused with BM25; none by
    default, so nothing is downloaded or called."""
    authorize_operator: ImportPath | None = None
    """``(identity, gate, config) -> bool``: who may answer an escalation (served: on top of the
    server's own rule)."""
    usage: UsageSettings | None = None
    """Learning from use (``[usage]``, even empty, turns it on)."""
    escalation: EscalationTable = EscalationTable()
    """How the denial handlers ask operators (``[escalation]``)."""
    telemetry: TelemetryTable = TelemetryTable()
    """Where spans and metrics go (``[telemetry]``)."""
    tool_gates: ToolGates = ToolGates()
    """Gates on any tool (``[tool_gates]``: ``require_approval``, ``[[tool_gates.budgets]]``,
    ``[[tool_gates.argument_rules]]``; :class:`~algenta_graph.governance.tool_gates.ToolGates`)."""
    name: Annotated[str, Field(min_length=1)] = DEFAULT_NAME
    """The compiled graph's name."""

    _sources: dict[str, str] = PrivateAttr(default_factory=dict)

    @field_validator("profile")
    @classmethod
    def _profile(cls, value: str) -> str:
        return resolve_profile(value).name

    @field_validator("extra_servers")
    @classmethod
    def _servers(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if name in _RESERVED_SERVERS:
                raise ValueError(f"the server name {name!r} is reserved for the Algenta engine")
            if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_-]*$", name):
                raise ValueError(f"server name {name!r}: letters, digits, '_' and '-' only")
        return value

    def __eq__(self, other: object) -> bool:
        """Equal values are equal configurations, wherever each was read from."""
        if not isinstance(other, AgentConfig):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    __hash__ = None  # type: ignore[assignment]  # mutable-valued fields (dicts, lists)

    def source_of(self, key: str) -> str:
        """Where the top-level ``key`` came from.

        The file, an environment variable, or ``"the configuration"`` (made in Python).
        """
        return self._sources.get(key.split(".", 1)[0], self._sources.get("", "the configuration"))

    @property
    def file(self) -> str | None:
        """The file this configuration was read from, if any."""
        return self._sources.get("") if self._sources.get("") != "the configuration" else None


# ---------------------------------------------------------------------------------------------
# loading


def _problems(exc: ValidationError, source_of: Callable[[str], str]) -> list[ConfigProblem]:
    out: list[ConfigProblem] = []
    for error in exc.errors():
        loc = [str(p) for p in error["loc"]]
        # a discriminated union names the member in the location: extra_servers.crm.sse.url
        if len(loc) >= 3 and loc[0] == "extra_servers" and loc[2] in _TRANSPORTS:
            del loc[2]
        key = ".".join(loc) or "(top level)"
        message = str(error["msg"])
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        elif message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        out.append(ConfigProblem(source_of(loc[0] if loc else ""), key, message))
    return out


def parse_config(
    data: Mapping[str, Any],
    *,
    source: str = "the configuration",
    sources: Mapping[str, str] | None = None,
) -> AgentConfig:
    """Validate a mapping (a parsed file) into an :class:`AgentConfig`.

    Args:
        data: the configuration's keys and values.
        source: how problems name where ``data`` came from (a file path).
        sources: ``{top-level key: source}`` for keys that came from elsewhere (an
            environment variable).

    Raises:
        ConfigError: every problem, one line each, naming its source and key.
    """
    by_key = dict(sources or {})

    def source_of(key: str) -> str:
        return by_key.get(key, source)

    if not isinstance(data, Mapping):
        raise ConfigError([ConfigProblem(source, "(top level)", "must be a table of keys")])
    try:
        config = AgentConfig.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(_problems(exc, source_of)) from None
    config._sources = {"": source, **{k: source_of(k) for k in data}}
    return config


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The keys of a TOML (``.toml``) or JSON (``.json``) configuration file.

    Raises:
        ConfigError: the file is missing, unreadable, not TOML / JSON, or not a table.
    """
    where = str(path)
    suffix = Path(path).suffix.lower()
    if suffix not in (".toml", ".json"):
        raise ConfigError(
            [ConfigProblem(where, "(file)", "a configuration file ends in .toml or .json")]
        )
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError([ConfigProblem(where, "(file)", "no such file")]) from None
    except OSError as exc:
        raise ConfigError([ConfigProblem(where, "(file)", f"cannot be read ({exc})")]) from None
    try:
        text = raw.decode("utf-8")
        data: Any = _toml_loads(text) if suffix == ".toml" else json.loads(text)
    except UnicodeDecodeError:
        raise ConfigError([ConfigProblem(where, "(file)", "is not UTF-8 text")]) from None
    except json.JSONDecodeError as exc:
        message = f"is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        raise ConfigError([ConfigProblem(where, "(file)", message)]) from None
    except ValueError as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise ConfigError([ConfigProblem(where, "(file)", f"is not valid TOML: {exc}")]) from None
    if not isinstance(data, dict):
        raise ConfigError([ConfigProblem(where, "(top level)", "must be a table (an object)")])
    return data


def _toml_loads(text: str) -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise ValueError(
                "reading TOML on Python 3.10 needs tomli (pip install tomli), or use JSON"
            ) from None
    return tomllib.loads(text)


def _env_overrides(
    environ: Mapping[str, str], problems: list[ConfigProblem]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The values the ``ALGENTA_*`` variables set (typed), and ``{key: its variable}``."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def text(key: str) -> str | None:
        raw = environ.get(ENV_VARIABLES[key], "").strip()
        if raw:
            sources[key] = f"environment variable {ENV_VARIABLES[key]}"
        return raw or None

    for key in ("base_url", "profile", "model"):
        raw = text(key)
        if raw is not None:
            values[key] = raw
    for key in ("api_key", "operator_api_key"):
        if text(key) is not None:
            values[key] = {"env": ENV_VARIABLES[key]}
    raw = text("top_k")
    if raw is not None:
        try:
            values["top_k"] = int(raw)
        except ValueError:
            problems.append(
                ConfigProblem(sources["top_k"], "top_k", f"must be an integer >= 1, not {raw!r}")
            )
    raw = text("on_denial")
    if raw is not None:
        try:
            values["on_denial"] = parse_on_denial(raw, ENV_ON_DENIAL)
        except ValueError as exc:
            message = str(exc).removeprefix(f"{ENV_ON_DENIAL}: ")
            problems.append(ConfigProblem(sources["on_denial"], "on_denial", message))
    return values, sources


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> AgentConfig:
    """The configuration from a file and the environment (the environment wins).

    Args:
        path: the TOML or JSON file; default the file ``ALGENTA_CONFIG`` names, else none (the
            defaults and the environment).
        environ: the environment to read (default ``os.environ``).

    Raises:
        ConfigError: every problem (the file, each key, each ``ALGENTA_*`` variable), one
            line each.
    """
    env = os.environ if environ is None else environ
    if path is None:
        path = env.get(ENV_CONFIG, "").strip() or None
    data = read_config_file(path) if path is not None else {}
    problems: list[ConfigProblem] = []
    overrides, sources = _env_overrides(env, problems)
    source = str(path) if path is not None else "the configuration"
    try:
        config = parse_config({**data, **overrides}, source=source, sources=sources)
    except ConfigError as exc:
        problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return config


# ---------------------------------------------------------------------------------------------
# resolving: secrets from the environment, objects from their import paths


def import_object(path: str) -> Any:
    """The object ``"package.module:attribute"`` names (``attribute`` may be dotted).

    Raises:
        ImportError: the module cannot be imported, or has no such attribute (the message
            says which).
    """
    module_name, _, attribute = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # the module's own import failure, whatever it is
        raise ImportError(f"cannot import {module_name!r} ({type(exc).__name__}: {exc})") from exc
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportError(f"{module_name!r} has no attribute {attribute!r}") from None
    return obj


@dataclass(frozen=True)
class ResolvedConfig:
    """A configuration with its secrets read and its Python objects imported.

    What :func:`~algenta_graph.graph.create_governed_agent` builds from; made by
    :func:`resolve_config`. The secrets are never in its ``repr``.
    """

    config: AgentConfig
    api_key: str | None = field(default=None, repr=False)
    """The engine's API token (``None``: not configured)."""
    operator_api_key: str | None = field(default=None, repr=False)
    """The operator path's engine credential (``None``: not configured)."""
    extra_servers: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    """The extra servers as ``langchain-mcp-adapters`` connection dicts, secrets filled in."""
    model: BaseChatModel | None = None
    """The chat model (``None`` when not resolved)."""
    embeddings: Embeddings | None = None
    """The embedding model, or ``None`` (BM25 alone)."""
    authorize_operator: Callable[[str, str, Any], bool] | None = None
    """The configured operator rule, or ``None``."""
    escalation: EscalationSettings = field(default_factory=EscalationSettings, repr=False)
    """The denial handlers' settings (the notification secret read, the hook imported)."""


_EMBEDDINGS: dict[str, Embeddings] = {}
"""Embedding models by import path: made once per process (the served graph is built once per
event loop and setting; each build reuses the model)."""
_EMBEDDINGS_LOCK = threading.Lock()


def iter_secrets(value: Any, key: str = "") -> Iterator[tuple[str, EnvSecret]]:
    """Every secret of a configuration (or of a part of one): ``(dotted key, EnvSecret)``."""
    if isinstance(value, EnvSecret):
        yield key, value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from iter_secrets(getattr(value, name), f"{key}.{name}" if key else name)
    elif isinstance(value, Mapping):
        for name, item in value.items():
            yield from iter_secrets(item, f"{key}.{name}" if key else str(name))


def _server_dict(server: BaseModel, environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in type(server).model_fields:
        value = getattr(server, name)
        if value is None or (name == "args" and value == []):
            continue
        if isinstance(value, Mapping):
            value = {
                k: (v.value(environ) if isinstance(v, EnvSecret) else v) for k, v in value.items()
            }
        out[name] = value
    return out


def resolve_config(
    config: AgentConfig,
    *,
    environ: Mapping[str, str] | None = None,
    skip: Collection[str] = (),
) -> ResolvedConfig:
    """Read the configuration's secrets and import its objects; every problem at once.

    Args:
        config: the configuration.
        environ: where secrets are read (default ``os.environ``).
        skip: keys not to resolve (``"model"``, ``"embeddings"``, ``"authorize_operator"``):
            the caller passes those objects itself.

    Raises:
        ConfigError: a secret missing from the environment, an import path that does not
            import, an object of the wrong kind, or a model that cannot be made; each naming
            its key and source.
    """
    env = os.environ if environ is None else environ
    problems: list[ConfigProblem] = []

    def problem(key: str, message: str) -> None:
        problems.append(ConfigProblem(config.source_of(key), key, message))

    for key, secret in iter_secrets(config, ""):
        if secret.value(env) is None:
            problem(key, f"the environment variable {secret.env} is not set")
    api_key = config.api_key.value(env) if config.api_key else None
    operator_key = config.operator_api_key.value(env) if config.operator_api_key else None
    servers = {name: _server_dict(s, env) for name, s in config.extra_servers.items()}

    model = None if "model" in skip else _resolve_model(config, problem)
    embeddings = None
    if config.embeddings and "embeddings" not in skip:
        embeddings = _resolve_embeddings(config.embeddings, problem)
    authorize = None
    if config.authorize_operator and "authorize_operator" not in skip:
        authorize = _resolve_rule(config.authorize_operator, problem)
    escalation = _resolve_escalation(config.escalation, env, problem)
    if problems:
        raise ConfigError(problems)
    return ResolvedConfig(
        config, api_key, operator_key, servers, model, embeddings, authorize, escalation
    )


def _resolve_escalation(
    table: EscalationTable, env: Mapping[str, str], problem: Callable[[str, str], None]
) -> EscalationSettings:
    hook: Any = None
    if table.hook is not None:
        try:
            hook = import_object(table.hook)
        except ImportError as exc:
            problem("escalation.hook", str(exc))
        else:
            if not callable(hook):
                problem("escalation.hook", f"{table.hook} is a {type(hook).__name__}, not callable")
                hook = None
    secret = table.notify.secret.value(env) if table.notify is not None else None
    return table.settings(secret=secret, hook=hook)


def _resolve_model(config: AgentConfig, problem: Callable[[str, str], None]) -> Any:
    from langchain_core.language_models import BaseChatModel

    from algenta_graph.models import resolve_model

    setting = config.model
    if setting is None or setting == DEMO_MODEL:
        return resolve_model(None)
    if isinstance(setting, str):
        try:
            return resolve_model(setting)
        except Exception as exc:  # ModelSetupError, ModelPackageMissingError, a provider's
            problem("model", " ".join(str(exc).split()))
            return None
    try:
        obj = import_object(setting.path)
    except ImportError as exc:
        problem("model.path", str(exc))
        return None
    if not isinstance(obj, BaseChatModel) and callable(obj):
        try:
            obj = obj()
        except Exception as exc:
            problem("model.path", f"{setting.path}() failed ({type(exc).__name__}: {exc})")
            return None
    if not isinstance(obj, BaseChatModel):
        problem(
            "model.path",
            f"{setting.path} is a {type(obj).__name__}, not a LangChain chat model "
            "(or a callable returning one)",
        )
        return None
    return obj


def _resolve_embeddings(path: str, problem: Callable[[str, str], None]) -> Embeddings | None:

    with _EMBEDDINGS_LOCK:  # made once, however many builds resolve it at the same time
        if path not in _EMBEDDINGS:
            made = _make_embeddings(path, problem)
            if made is None:
                return None
            _EMBEDDINGS[path] = made
        return _EMBEDDINGS[path]


def _make_embeddings(path: str, problem: Callable[[str, str], None]) -> Embeddings | None:
    from langchain_core.embeddings import Embeddings

    try:
        obj = import_object(path)
    except ImportError as exc:
        problem("embeddings", str(exc))
        return None
    if not isinstance(obj, Embeddings) and callable(obj):
        try:
            obj = obj()
        except Exception as exc:
            problem("embeddings", f"{path}() failed ({type(exc).__name__}: {exc})")
            return None
    if not isinstance(obj, Embeddings):
        problem(
            "embeddings",
            f"{path} is a {type(obj).__name__}, not a LangChain Embeddings (or a callable "
            "returning one)",
        )
        return None
    return obj


def _resolve_rule(
    path: str, problem: Callable[[str, str], None]
) -> Callable[[str, str, Any], bool] | None:
    try:
        obj = import_object(path)
    except ImportError as exc:
        problem("authorize_operator", str(exc))
        return None
    try:
        inspect.signature(obj).bind("identity", "gate", {})
    except TypeError:
        problem(
            "authorize_operator",
            f"{path} must be a function (identity, gate, config) -> bool",
        )
        return None
    except ValueError:  # a builtin without a signature: trusted to take the three arguments
        pass
    return obj  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------
# showing it


def masked(config: AgentConfig, *, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The configuration as plain data with every secret masked, and where each key came from.

    A secret shows as ``{"env": NAME, "value": "****"}`` (``"<not set>"`` when missing), the
    default model as ``"demo"``; the result has a ``"sources"`` table (``{key: the file or the
    environment variable}``) of the keys not left at their default.
    """
    env = os.environ if environ is None else environ
    data = config.model_dump(mode="python")

    def mask(value: Any, original: Any) -> Any:
        if isinstance(original, EnvSecret):
            shown: dict[str, Any] = {"env": original.env}
            if original.prefix:
                shown["prefix"] = original.prefix
            shown["value"] = _MASK if original.value(env) is not None else "<not set>"
            return shown
        if isinstance(original, BaseModel):
            return {k: mask(value[k], getattr(original, k)) for k in type(original).model_fields}
        if isinstance(original, Mapping):
            return {k: mask(value[k], original[k]) for k in original}
        return value

    out: dict[str, Any] = mask(data, config)
    if out.get("model") is None:
        out["model"] = DEMO_MODEL  # the default, shown by name
    out["sources"] = {key: config.source_of(key) for key in sorted(config.model_fields_set)}
    return out
