"""The configuration's types and tables, each a strict :class:`ConfigTable`.

Secrets, import paths, URLs, the extra servers, ``[usage]``, ``[escalation]``, ``[telemetry]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from algenta_graph.config.names import _ENV_NAME, _IMPORT_PATH, _SECRET_NAME
from algenta_graph.governance.escalations import (
    DEFAULT_CHECK_EVERY,
    DecisionType,
    EscalationSettings,
    InterruptMode,
    NotifyHook,
)
from algenta_graph.governance.gates import GateName
from algenta_graph.governance.notice_signing import new_secret

if TYPE_CHECKING:
    pass


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


def check_url(url: str) -> str:
    """``url`` when it is an http(s):// or ws(s):// URL without a secret in it.

    Raises:
        ValueError: naming what is wrong with it.
    """
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


Url = Annotated[str, AfterValidator(check_url)]


def _ledger(value: Any) -> Any:
    """A ledger: ``"memory"``, a SQLite path, a ``postgresql://`` URL, or ``{env = "NAME"}``."""
    if value is None or isinstance(value, EnvSecret):
        return value
    if isinstance(value, Mapping):
        return EnvSecret.model_validate(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            'must be "memory", a SQLite file path, a postgresql:// URL or {env = "NAME"}'
        )
    parts = urlsplit(value.strip()) if "://" in value else None
    if parts is not None and parts.password:
        raise ValueError(
            'a password in the URL is a secret: use {env = "NAME"} (or ALGENTA_LEDGER) instead'
        )
    return value.strip()


LedgerSetting = Annotated[str | EnvSecret | None, BeforeValidator(_ledger)]
"""Where the ledger lives (:mod:`algenta_graph.ledger`); a URL with a password from the
environment."""


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


def _duration(value: Any, where: str) -> None:
    """Refuse what is not a duration (seconds, or ISO 8601), naming ``where``."""
    try:
        _DURATION.validate_python(value)
    except ValidationError as exc:
        message = exc.errors()[0]["msg"]
        raise ValueError(
            f'{where}{message} (seconds, or an ISO 8601 duration such as "PT4H")'
        ) from None


"""Seconds, or an ISO 8601 duration (``"PT4H"``)."""


class NotifyTable(ConfigTable):
    """``[escalation.notify]``: a URL posted once per escalation raised.

    Each notice is signed the Standard Webhooks way with a ``whsec_`` secret. The table form
    of :class:`~algenta_graph.governance.escalations.WebhookNotify`; its ``secret`` is
    ``{env = "NAME"}``.
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
    warn_before: dict[
        GateName, Annotated[str | int | float, Field(union_mode="left_to_right")]
    ] = {}
    """Per gate, how long before its deadline a served graph warns once (seconds, or
    ``"PT15M"``; shorter than the gate's ``expires_after``)."""
    check_every: Annotated[str | int | float, Field(union_mode="left_to_right")] = (
        DEFAULT_CHECK_EVERY.total_seconds()
    )
    """How often a served graph looks for deadlines to warn of or expire (seconds, or ISO 8601;
    default 30)."""
    quorum: dict[GateName, int] = {}
    """Per gate, how many distinct operators must approve (two-person approval: 2)."""
    notify: NotifyTable | None = None
    """A URL notified once per escalation raised."""
    hook: ImportPath | None = None
    """A Python callable notified once per escalation raised."""

    @field_validator("expires_after", "warn_before")
    @classmethod
    def _durations(cls, value: dict[str, Any]) -> dict[str, Any]:
        for gate, duration in value.items():
            _duration(duration, f"{gate}: ")
        return value

    @field_validator("check_every")
    @classmethod
    def _interval(cls, value: str | float) -> str | float:
        _duration(value, "")
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
            "warn_before": self.warn_before,
            "check_every": self.check_every,
            "quorum": self.quorum,
            "hook": hook,
        }
        if self.notify is not None:
            data["notify_url"] = {
                "url": self.notify.url,
                # unresolved (the table's own validation, or a variable not set, which
                # resolve_config reports by name): a well-formed stand-in, never sent
                "secret": secret if secret is not None else new_secret(),
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
    capture_content: bool = False
    """Record tool argument values and results on spans and runs (off: names and outcomes
    only). ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` set to ``SPAN_ONLY``,
    ``SPAN_AND_EVENT`` or ``true`` turns it on, to ``NO_CONTENT`` or ``false`` off."""
