"""What an escalation binds and how long it waits (fast tier, mutation-tested;
``docs/ARCHITECTURE.md``, invariant 15): ``algenta_graph.governance.escalations``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from algenta_graph.governance.escalations import (
    ALL_DECISIONS,
    DIGEST_FIELDS,
    EscalationSettings,
    WebhookNotify,
    deadline,
    escalation_digest,
    is_overdue,
    parse_time,
)
from algenta_graph.governance.notice_signing import new_secret

SECRET = new_secret()
SHOWN: dict[str, Any] = {
    "thread_id": "t1",
    "tool_call_id": "c1",
    "gate": "confidence",
    "decision_id": "d1",
    "args": {"decision_id": "d1", "webhook_url": "https://hook", "override_safety": True},
    "denial": {"code": "execution_blocked_confidence", "message": "low"},
    "policy_snapshot_id": "pol_1",
    # a held call's (``None`` for an engine decision); each is bound all the same
    "tool": "crm.delete_customer",
    "args_digest": "sha256:" + "0" * 64,
    "rule": "require_approval:crm.*",
    # the graph's rules in force for the tool, with the gate's policy
    "rules": {"tool": "crm.delete_customer", "policy": "escalate", "require_approval": ["crm.*"]},
}


def test_the_defaults_are_the_graphs_behaviour_without_configuration() -> None:
    settings = EscalationSettings()
    assert settings.require_reason is False
    assert settings.interrupt_mode == "batched"
    assert settings.expires_after == {} and settings.allowed_decisions == {}
    assert settings.notify_url is None and settings.hook is None
    for gate in ("idempotency", "confidence", "risk_floor"):
        assert settings.decisions_for(gate) == list(ALL_DECISIONS)
    assert ALL_DECISIONS == ("approve", "edit", "reject", "respond")


def test_allowed_decisions_are_per_gate_without_duplicates() -> None:
    settings = EscalationSettings(
        allowed_decisions={"idempotency": ["reject", "reject", "respond"]}
    )
    assert settings.decisions_for("idempotency") == ["reject", "respond"]
    assert settings.decisions_for("confidence") == list(ALL_DECISIONS)
    decided = settings.decisions_for("idempotency")
    decided.append("approve")  # a copy: the settings do not change
    assert settings.decisions_for("idempotency") == ["reject", "respond"]


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"allowed_decisions": {"confidence": []}}, "confidence: at least one decision"),
        ({"allowed_decisions": {"novel": ["approve"]}}, "allowed_decisions.novel"),
        ({"allowed_decisions": {"confidence": ["maybe"]}}, "allowed_decisions.confidence.0"),
        ({"expires_after": {"confidence": 0}}, "confidence: expires_after must be positive"),
        ({"expires_after": {"confidence": -5}}, "must be positive"),
        ({"expires_after": {"novel": 5}}, "expires_after.novel"),
        ({"interrupt_mode": "each"}, "interrupt_mode"),
        ({"require_reasons": True}, "Extra inputs are not permitted"),
        ({"notify_url": {"url": "not a url", "secret": SECRET}}, "notify_url.url"),
        ({"notify_url": {"url": "https://x", "secret": SECRET, "attempts": 0}}, "attempts"),
        ({"notify_url": {"url": "https://x", "secret": SECRET, "timeout_seconds": 0}}, "timeout"),
        ({"notify_url": {"url": "https://x", "secret": "s3cret"}}, "(?s)notify_url.secret.*whsec_"),
    ],
)
def test_a_bad_setting_is_refused_by_name(options: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError, match=needle) as refused:
        EscalationSettings(**options)
    assert "s3cret" not in str(refused.value)  # a secret refused is never shown


def test_the_settings_are_plain_data_but_the_hook_and_the_secret() -> None:
    def hook(notice: Any) -> None:
        return None

    # model_validate: pydantic coerces the text, its constructor is typed with the results
    settings = EscalationSettings.model_validate(
        {
            "expires_after": {"confidence": "PT2H"},
            "notify_url": WebhookNotify.model_validate(
                {"url": "https://ops.example/h", "secret": SECRET}
            ),
            "hook": hook,
        }
    )
    dumped = settings.model_dump(mode="json")
    assert "hook" not in dumped
    assert dumped["expires_after"] == {"confidence": "PT2H"}
    assert dumped["notify_url"]["secret"] == "**********"  # never shown
    assert SECRET not in repr(settings)
    assert "hook" not in EscalationSettings.model_json_schema()["properties"]
    assert settings.notify_url is not None
    assert (settings.notify_url.timeout_seconds, settings.notify_url.attempts) == (5.0, 3)
    with pytest.raises(ValidationError):
        settings.require_reason = True  # frozen


def test_a_deadline_counts_from_when_the_escalation_was_raised() -> None:
    settings = EscalationSettings.model_validate(
        {"expires_after": {"confidence": 90, "risk_floor": "PT1H"}}
    )
    raised = "2030-01-01T00:00:00+00:00"
    assert deadline(settings, "confidence", raised) == "2030-01-01T00:01:30+00:00"
    assert deadline(settings, "risk_floor", raised) == "2030-01-01T01:00:00+00:00"
    assert deadline(settings, "idempotency", raised) is None  # no deadline for this gate
    assert deadline(settings, "confidence", None) is None  # raised before deadlines existed
    assert deadline(settings, "confidence", "") is None
    assert deadline(settings, "confidence", "2030-01-01T00:00:00") == (
        "2030-01-01T00:01:30+00:00"  # a naive time is UTC
    )


def test_overdue_is_strictly_after_the_deadline() -> None:
    at = "2030-01-01T00:00:00+00:00"
    moment = parse_time(at)
    assert not is_overdue(at, moment)
    assert is_overdue(at, moment + timedelta(microseconds=1))
    assert not is_overdue(at, moment - timedelta(seconds=1))
    assert not is_overdue(None, moment + timedelta(days=999))
    assert is_overdue("2030-01-01T01:00:00+01:00", moment + timedelta(seconds=1))  # offsets


def test_parse_time_keeps_offsets_and_takes_naive_times_as_utc() -> None:
    assert parse_time("2030-01-01T00:00:00").tzinfo is timezone.utc
    aware = parse_time("2030-01-01T02:00:00+02:00")
    assert aware == datetime(2030, 1, 1, tzinfo=timezone.utc)
    with pytest.raises(ValueError):
        parse_time("soon")


def test_the_digest_binds_every_field_shown_and_nothing_else() -> None:
    digest = escalation_digest(SHOWN)
    assert digest.startswith("sha256:") and len(digest) == 7 + 64
    assert escalation_digest(dict(reversed(list(SHOWN.items())))) == digest  # canonical JSON
    assert escalation_digest({**SHOWN, "asked_at": "later", "extra": 1}) == digest
    assert set(DIGEST_FIELDS) == set(SHOWN)
    for name in DIGEST_FIELDS:
        changed = {**SHOWN, name: "something else"}
        assert escalation_digest(changed) != digest, name
        missing = {k: v for k, v in SHOWN.items() if k != name}
        assert escalation_digest(missing) != digest, name
    nested = {**SHOWN, "args": {**SHOWN["args"], "webhook_url": "https://other"}}
    assert escalation_digest(nested) != digest
    assert escalation_digest({}) == escalation_digest(dict.fromkeys(DIGEST_FIELDS))
