"""What an escalation binds, how long it waits, and how a deployment configures both.

The rules of the operator's side, with no node in them (``docs/ARCHITECTURE.md``, "Escalation
and the operator", invariant 15):

- :class:`EscalationSettings`: the one typed configuration of the denial handlers (reasons
  required or not, ``batched`` or ``per_call`` interrupts, the decisions each gate accepts,
  per-gate deadlines, the notification hook). A pydantic model, so a configuration file can
  include it as a section;
- :func:`escalation_digest`: the digest of what an operator is shown (thread, tool call, gate,
  decision, arguments, the denial, the engine's policy snapshot; a held call's tool, argument
  digest and rule; the graph's rules in force for the tool and the gate's policy), which an
  answer may carry: an answer is bound to what was reviewed, under the rules it was asked under;
- :func:`deadline` and :func:`is_overdue`: an escalation past its gate's ``expires_after`` can
  only be declined (recorded ``expired``, never executed), whatever answer arrives;
- :attr:`EscalationSettings.quorum` and :func:`approvals_said`: a gate whose escalations need
  the approval of M distinct operators (two-person approval), and how far one has come.

>>> settings = EscalationSettings(expires_after={"confidence": "PT1H"})
>>> deadline(settings, "confidence", "2030-01-01T00:00:00+00:00")
'2030-01-01T01:00:00+00:00'
>>> deadline(settings, "risk_floor", "2030-01-01T00:00:00+00:00") is None
True
>>> escalation_digest({"gate": "confidence", "decision_id": "d1"})[:7]
'sha256:'
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, Literal

import rfc8785
from pydantic import (
    AnyHttpUrl,
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from algenta_graph.governance.gates import GateName
from algenta_graph.governance.notice_signing import signing_key
from algenta_graph.governance.tool_gates import ToolRef

__all__ = [
    "ALL_DECISIONS",
    "DEFAULT_CHECK_EVERY",
    "DIGEST_FIELDS",
    "DecisionType",
    "EscalationSettings",
    "InterruptMode",
    "NotifyHook",
    "RulesInForce",
    "WebhookNotify",
    "already_approved",
    "approvals_said",
    "deadline",
    "escalation_digest",
    "is_overdue",
    "parse_time",
]

DecisionType = Literal["approve", "edit", "reject", "respond"]
"""LangChain's human-in-the-loop decision types (``langchain.agents.middleware``)."""
InterruptMode = Literal["batched", "per_call"]
"""``batched``: one interrupt per gate and step (LangChain's ``HITLRequest``); ``per_call``: one
interrupt per escalated call (LangChain's ``ToolApprovalRequest``, with a ``response_schema``)."""
ALL_DECISIONS: tuple[DecisionType, ...] = ("approve", "edit", "reject", "respond")
"""Every decision an escalated ``execute_decision`` call can take (the default for each gate)."""

DEFAULT_CHECK_EVERY = timedelta(seconds=30)
"""How often a served graph looks for deadlines to act on, unless ``check_every`` says."""

NotifyHook = Callable[[Mapping[str, Any]], Awaitable[None] | None]
"""A Python notification hook: called once per escalation raised with its notice (a dict:
``escalation_id``, ``thread_id``, ``gate``, ``decision_id``, ``tool_call_id``, ``code``,
``message``, ``digest``, ``asked_at``, ``expires_at``); sync or async; its exception is logged,
never raised (:mod:`algenta_graph.governance.notifications`)."""

RulesInForce = Callable[[str, ToolRef], Mapping[str, Any]]
"""``(gate, tool) -> the graph's rules in force`` for an escalated call of ``tool`` under
``gate`` (:meth:`~algenta_graph.governance.tool_gates.CompiledGates.in_force` with the gate's
policy): plain data, bound by the escalation's digest."""

DIGEST_FIELDS: tuple[str, ...] = (
    "thread_id",
    "tool_call_id",
    "gate",
    "decision_id",
    "args",
    "denial",
    "policy_snapshot_id",
    "tool",
    "args_digest",
    "rule",
    "rules",
)
"""What an escalation's digest binds: everything the operator is shown that decides what an
approval does (for a held call also its tool, ``server.tool``, the digest of its arguments and
the rule that held it; ``null`` for an engine decision), and the graph's rules in force for the
tool with the gate's policy (``rules``: an answer given under other rules is stale)."""


class WebhookNotify(BaseModel):
    """A notification URL: a JSON ``POST`` per escalation raised, signed the Standard Webhooks way.

    The request carries ``webhook-id`` (the escalation's id, the same on every attempt, so a
    receiver can drop a duplicate), ``webhook-timestamp`` (when this attempt was sent) and
    ``webhook-signature`` (``v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``): a
    receiver that refuses a timestamp outside its tolerance refuses an old notice replayed
    (:mod:`algenta_graph.governance.notice_signing`).
    """

    # an invalid secret is named in the error, never shown
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    url: AnyHttpUrl
    """Where the notice is posted."""
    secret: SecretStr
    """The signing secret: ``whsec_`` and the base64 of 24 to 64 random bytes (Standard Webhooks'
    format; ``notice_signing.new_secret()`` makes one); never logged or shown."""
    timeout_seconds: PositiveFloat = 5.0
    """How long one attempt may take; a timed-out attempt may have been delivered, so it is not
    repeated."""
    attempts: PositiveInt = 3
    """How many attempts one notice gets while the receiver fails (5xx, refused connection)."""

    @field_validator("secret")
    @classmethod
    def _standard_secret(cls, value: SecretStr) -> SecretStr:
        signing_key(value.get_secret_value())  # says what is wrong, never the secret
        return value


class EscalationSettings(BaseModel):
    """How the denial handlers ask operators, and what an answer may be.

    The defaults are the graph's behaviour without configuration. A frozen pydantic model:
    include it in a configuration file as a section (everything but ``hook`` is plain data).

    Example::

        EscalationSettings(
            require_reason=True,
            expires_after={"confidence": "PT4H", "risk_floor": 3600},
            notify_url={"url": "https://ops.example/hooks/algenta", "secret": "whsec_..."},
        )
    """

    # its notification secret, refused, is named in the error and never shown
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    require_reason: bool = False
    """Whether every answer must give a reason; the interrupt's ``response_schema`` then says
    so, and LangGraph refuses an answer without one before it is saved."""
    interrupt_mode: InterruptMode = "batched"
    """``batched`` (one ``HITLRequest`` per gate and step) or ``per_call`` (one
    ``ToolApprovalRequest`` per escalated call, answered with one decision)."""
    allowed_decisions: dict[GateName, list[DecisionType]] = Field(default_factory=dict)
    """Per gate, the decisions an operator may take (default: all of :data:`ALL_DECISIONS`);
    each review config states them, and any other is refused."""
    expires_after: dict[GateName, timedelta] = Field(default_factory=dict)
    """Per gate, how long an escalation waits (seconds, or ISO 8601 ``PT4H``); past it, it can
    only be declined, recorded ``expired``, whatever answer arrives. No entry: no deadline."""
    warn_before: dict[GateName, timedelta] = Field(default_factory=dict)
    """Per gate, how long before its deadline a served graph sends one warning notice
    (seconds, or ISO 8601), through the notification hooks; each gate named must have an
    ``expires_after`` longer than it. No entry: no warning."""
    check_every: timedelta = DEFAULT_CHECK_EVERY
    """How often a served graph looks for escalations to warn of or expire (seconds, or ISO
    8601; default 30 seconds)."""
    quorum: dict[GateName, Annotated[int, Field(ge=1)]] = Field(default_factory=dict)
    """Per gate, how many distinct operators must approve an escalation before anything runs
    (two-person approval: ``{"risk_floor": 2}``; default 1). Each approval is bound to the
    escalation's digest and kept in the graph's ledger, so every worker counts the same ones;
    the escalation asks again ("1 of 2 approvals: ana") until the last; an operator counts
    once (by identity, whatever token they answer with); any reject or respond ends it. Under a
    quorum an ``edit`` is refused: it would run arguments the other approvers never saw."""
    notify_url: WebhookNotify | None = None
    """A URL notified once per escalation raised (see :class:`WebhookNotify`)."""
    hook: SkipJsonSchema[NotifyHook | None] = Field(default=None, exclude=True)
    """A Python callable notified once per escalation raised (:data:`NotifyHook`)."""
    rules_in_force: SkipJsonSchema[RulesInForce | None] = Field(default=None, exclude=True)
    """Set by the graph builder, not a setting: the graph's rules in force for an escalated
    call (:data:`RulesInForce`), which its question shows and its digest binds."""

    @field_validator("allowed_decisions")
    @classmethod
    def _some_decision(cls, value: dict[str, list[DecisionType]]) -> dict[str, list[str]]:
        for gate, decisions in value.items():
            if not decisions:
                raise ValueError(f"{gate}: at least one decision (approve, edit, reject, respond)")
        return {gate: list(dict.fromkeys(d)) for gate, d in value.items()}

    @field_validator("expires_after", "warn_before")
    @classmethod
    def _positive(cls, value: dict[str, timedelta], info: ValidationInfo) -> dict[str, timedelta]:
        for gate, after in value.items():
            if after <= timedelta(0):
                raise ValueError(f"{gate}: {info.field_name} must be positive, got {after}")
        return value

    @field_validator("check_every")
    @classmethod
    def _sometimes(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError(f"check_every must be positive, got {value}")
        return value

    @model_validator(mode="after")
    def _warn_before_deadline(self) -> EscalationSettings:
        for gate, lead in self.warn_before.items():
            after = self.expires_after.get(gate)
            if after is None:
                raise ValueError(
                    f"warn_before.{gate}: the gate has no deadline (set expires_after.{gate})"
                )
            if lead >= after:
                raise ValueError(
                    f"warn_before.{gate}: {lead} is not shorter than expires_after.{gate} "
                    f"({after}): the warning would come before the escalation is raised"
                )
        return self

    def warn_before_for(self, gate: str) -> timedelta | None:
        """How long before an escalation of ``gate`` expires it is warned of (``None``: never).

        >>> EscalationSettings(expires_after={"confidence": 60}, warn_before={"confidence": 10}
        ...     ).warn_before_for("confidence")
        datetime.timedelta(seconds=10)
        """
        return next((lead for name, lead in self.warn_before.items() if name == gate), None)

    @model_validator(mode="after")
    def _no_edit_under_quorum(self) -> EscalationSettings:
        for gate, decisions in self.allowed_decisions.items():
            if "edit" in decisions and self.quorum_for(gate) > 1:
                raise ValueError(
                    f"allowed_decisions.{gate}: edit is refused under a quorum "
                    f"(quorum.{gate} = {self.quorum_for(gate)}): an edit would run arguments "
                    "the other approvers never saw; allow approve, reject and respond"
                )
        return self

    def quorum_for(self, gate: str) -> int:
        """How many distinct operators must approve an escalation of ``gate``.

        >>> EscalationSettings(quorum={"risk_floor": 2}).quorum_for("risk_floor")
        2
        >>> EscalationSettings(quorum={"risk_floor": 2}).quorum_for("confidence")
        1
        """
        return next((n for name, n in self.quorum.items() if name == gate), 1)

    def decisions_for(self, gate: str) -> list[DecisionType]:
        """The decisions an operator may take on an escalation of ``gate``.

        Under a quorum (:attr:`quorum`), never ``edit``.

        >>> EscalationSettings(allowed_decisions={"idempotency": ["reject"]}).decisions_for(
        ...     "idempotency")
        ['reject']
        >>> EscalationSettings().decisions_for("confidence")
        ['approve', 'edit', 'reject', 'respond']
        """
        found = next((d for name, d in self.allowed_decisions.items() if name == gate), None)
        decisions = list(found) if found is not None else list(ALL_DECISIONS)
        if self.quorum_for(gate) > 1:
            return [d for d in decisions if d != "edit"]
        return decisions


def approvals_said(approvers: Sequence[str], quorum: int) -> str:
    """How far an escalation's approvals have come, in words.

    >>> approvals_said(["ana"], 2)
    '1 of 2 approvals: ana'
    >>> approvals_said([], 2)
    '0 of 2 approvals'
    """
    names = f": {', '.join(approvers)}" if approvers else ""
    return f"{len(approvers)} of {quorum} approvals{names}"


def already_approved(operator: str | None, approvers: Sequence[str], quorum: int) -> str:
    """Why an operator's second approval toward a quorum is refused, naming them.

    >>> already_approved("ana", ["ana"], 2)  # doctest: +ELLIPSIS
    "operator 'ana' already approved this escalation (1 of 2 approvals: ana); ..."
    """
    return (
        f"operator {operator!r} already approved this escalation "
        f"({approvals_said(approvers, quorum)}); a quorum of {quorum} needs another "
        "operator's approval: nothing was counted twice"
    )


def parse_time(text: str) -> datetime:
    """An ISO 8601 time as an aware ``datetime`` (a naive one is taken as UTC).

    >>> parse_time("2030-01-01T00:00:00").tzinfo is timezone.utc
    True
    """
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def deadline(settings: EscalationSettings, gate: str, raised_at: str | None) -> str | None:
    """When an escalation of ``gate`` raised at ``raised_at`` expires (ISO 8601), or ``None``."""
    after = next((a for name, a in settings.expires_after.items() if name == gate), None)
    if after is None or not raised_at:
        return None
    return (parse_time(raised_at) + after).isoformat()


def is_overdue(expires_at: str | None, now: datetime) -> bool:
    """Whether a deadline has passed at ``now`` (never, without one).

    >>> is_overdue("2030-01-01T00:00:00+00:00", parse_time("2030-01-01T00:00:01+00:00"))
    True
    >>> is_overdue("2030-01-01T00:00:00+00:00", parse_time("2030-01-01T00:00:00+00:00"))
    False
    >>> is_overdue(None, parse_time("2030-01-01T00:00:00+00:00"))
    False
    """
    return expires_at is not None and now > parse_time(expires_at)


def escalation_digest(shown: Mapping[str, Any]) -> str:
    """The digest of what an operator is shown: ``sha256:`` + the SHA-256 of its RFC 8785 JSON.

    Only :data:`DIGEST_FIELDS` count (a missing one counts as ``null``), so the digest of an
    escalation is the same wherever and whenever it is computed, and changes when anything that
    decides what an approval does changes.

    >>> a = escalation_digest({"gate": "confidence", "args": {"webhook_url": "u"}})
    >>> a == escalation_digest({"args": {"webhook_url": "u"}, "gate": "confidence", "x": 1})
    True
    >>> a == escalation_digest({"gate": "confidence", "args": {"webhook_url": "v"}})
    False
    """
    canonical = rfc8785.dumps({name: shown.get(name) for name in DIGEST_FIELDS})
    return "sha256:" + hashlib.sha256(canonical).hexdigest()
