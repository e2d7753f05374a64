"""The tracer and the metric instruments, from the OpenTelemetry API only.

:class:`Telemetry` takes a ``TracerProvider`` and a ``MeterProvider`` (the global ones by
default: no-op until an application configures the SDK, so nothing is recorded or exported
unless one does). Every span and metric of the package is made through one of these.

>>> t = Telemetry()
>>> t.executions.add(1, {"algenta.outcome": "receipt"})  # no SDK configured: a no-op
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import metrics, trace

from algenta_graph.telemetry import names

__all__ = ["ENGINE_BUCKETS", "SECONDS_BUCKETS", "Telemetry"]

ENGINE_BUCKETS: Sequence[float] = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
"""The MCP conventions' advised boundaries for ``mcp.client.operation.duration`` (s)."""
SECONDS_BUCKETS: Sequence[float] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
)
"""Boundaries (s) of the retrieval histogram: retrieval takes milliseconds."""
_DECISION_BUCKETS: Sequence[float] = (1, 10, 60, 300, 900, 3600, 4 * 3600, 86400, 7 * 86400)


class Telemetry:
    """The tracer and every instrument, from the given providers (the global ones by default).

    Args:
        tracer_provider: where spans go; default the global one
            (``opentelemetry.trace.get_tracer_provider()``).
        meter_provider: where metrics go; default the global one.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        from algenta_graph import __version__

        self.tracer = trace.get_tracer(
            names.INSTRUMENTATION_NAME, __version__, tracer_provider=tracer_provider
        )
        meter = metrics.get_meter(
            names.INSTRUMENTATION_NAME, __version__, meter_provider=meter_provider
        )
        self.executions = meter.create_counter(
            names.METRIC_EXECUTIONS, unit="{execution}", description="Executions recorded."
        )
        self.denials = meter.create_counter(
            names.METRIC_DENIALS, unit="{denial}", description="Named-gate denials recorded."
        )
        self.escalations_raised = meter.create_counter(
            names.METRIC_ESCALATIONS_RAISED, unit="{escalation}", description="Escalations raised."
        )
        self.escalations_answered = meter.create_counter(
            names.METRIC_ESCALATIONS_ANSWERED,
            unit="{escalation}",
            description="Escalations answered by an operator.",
        )
        self.escalations_expired = meter.create_counter(
            names.METRIC_ESCALATIONS_EXPIRED,
            unit="{escalation}",
            description="Escalations recorded as expired.",
        )
        self.decision_time = meter.create_histogram(
            names.METRIC_DECISION_TIME,
            unit="s",
            description="From an escalation's denial to its operator's answer.",
            explicit_bucket_boundaries_advisory=_DECISION_BUCKETS,
        )
        self.retrieval_duration = meter.create_histogram(
            names.METRIC_RETRIEVAL_DURATION,
            unit="s",
            description="Each retrieve_tools run.",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.engine_duration = meter.create_histogram(
            names.METRIC_ENGINE_DURATION,
            unit="s",
            description="Each engine call (MCP tools/call), from sending to its answer.",
            explicit_bucket_boundaries_advisory=ENGINE_BUCKETS,
        )
        self.engine_errors = meter.create_counter(
            names.METRIC_ENGINE_ERRORS, unit="{call}", description="Engine calls that failed."
        )
