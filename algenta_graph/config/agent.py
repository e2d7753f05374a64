"""``AgentConfig``: every option of the governed agent that makes sense outside Python code."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    field_validator,
)

from algenta_graph.config.names import (
    _RESERVED_SERVERS,
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_NAME,
    DEFAULT_STEP_LIMIT,
    DEFAULT_SYSTEM_PROMPT,
    DEFAULT_TOP_K,
)
from algenta_graph.config.tables import (
    ConfigTable,
    EscalationTable,
    ExtraServer,
    ImportPath,
    LedgerSetting,
    ModelSetting,
    SecretSetting,
    TelemetryTable,
    UsageSettings,
    check_url,
)
from algenta_graph.governance.contract import DEFAULT_PROFILE, resolve_profile
from algenta_graph.governance.gates import GateName, Policy, parse_on_denial
from algenta_graph.governance.tool_gates import ToolGates

if TYPE_CHECKING:
    pass


def _on_denial(value: Any) -> Any:
    try:
        policies = parse_on_denial(value, "on_denial")
    except ValueError as exc:  # the key is named by the problem already
        message = str(exc)
        raise ValueError(message.removeprefix("on_denial: ")) from None
    return policies or None


def _engine_url(value: Any) -> Any:
    """The engine's URL, ``false`` (no engine) or none; anything else named plainly."""
    if value is None or value is False:
        return value
    if isinstance(value, str):
        return check_url(value)
    raise ValueError(
        f"must be the engine's MCP endpoint (an http(s):// URL) or false for no engine, got "
        f"{value!r}"
    )


class AgentConfig(ConfigTable):
    """Everything that configures a governed agent outside Python code (see the module docs).

    Build one with :func:`load_config` (a file and the environment), :func:`parse_config` (a
    mapping) or directly (``AgentConfig(top_k=3)``). Every key is optional.
    """

    base_url: Annotated[str | Literal[False] | None, BeforeValidator(_engine_url)] = None
    """The engine's MCP endpoint (default ``http://localhost:8000/mcp``), or ``false``: no
    Algenta engine (``ALGENTA_BASE_URL=none``): the graph serves the ``extra_servers``' tools
    with every graph-side gate, and the engine's gates do not exist."""
    api_key: SecretSetting = None
    """The engine's API token, ``{env = "NAME"}`` (``ALGENTA_API_KEY`` wins)."""
    operator_api_key: SecretSetting = None
    """The operator path's own engine credential, ``{env = "NAME"}``
    (``ALGENTA_OPERATOR_API_KEY`` wins)."""
    operator_key_is_agent_key: bool = False
    """Without ``operator_api_key``, whether the one ``api_key`` is also the operator credential
    (a relaxed local engine; ``ALGENTA_OPERATOR_KEY_IS_AGENT_KEY`` wins). Off by default: an
    override without an operator credential is then refused, never sent."""
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
    extra_servers: dict[str, ExtraServer] = Field(default_factory=dict)
    """More MCP servers whose tools join the catalog, ``{name: connection}``."""
    always_include: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
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
    ledger: LedgerSetting = None
    """The ledger every process serving the graph shares (:mod:`algenta_graph.ledger`):
    ``"memory"``, a SQLite file path (one machine), a ``postgresql://`` URL, or
    ``{env = "NAME"}`` for a URL with a password (``ALGENTA_LEDGER`` wins). Default: the one the
    deployment implies (the checkpointer's database), else the graph refuses to start."""
    single_process: bool = False
    """The deployment is one process (``ALGENTA_SINGLE_PROCESS``): without a ledger configured
    or implied, it is this process's memory (a restart forgets it)."""

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
