"""The tracer and the metric instruments, from the OpenTelemetry API only.

:class:`Telemetry` takes a ``TracerProvider`` and a ``MeterProvider`` (the global ones by
default: no-op until an application configures the SDK, so nothing is recorded or exported
unless one does). Every span and metric of the package is made through one of these.

>>> t = Telemetry()
>>> t.executions.add(1, {"algenta.outcome": "receipt"})  # no SDK configured: a no-op
>>> t.counting, t.configured
(False, False)
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import metrics, trace

from algenta_graph.telemetry import names

__all__ = [
    "ENGINE_BUCKETS",
    "SECONDS_BUCKETS",
    "Telemetry",
    "meter_configured",
    "tracer_configured",
]

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
        capture_content: record argument values and results (the OpenTelemetry GenAI
            conventions' opt-in content: ``gen_ai.tool.call.arguments`` and
            ``gen_ai.tool.call.result`` on the spans, the values in the LangChain run of
            ``execute_decision``). Off by default: a webhook URL, the caller's metadata or a
            payload may hold credentials and personal data, and a trace is read by more people
            than the state.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        capture_content: bool = False,
    ) -> None:
        from algenta_graph import __version__

        self.capture_content = capture_content
        """Whether argument values and results are recorded (opt-in content)."""
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
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

    @property
    def counting(self) -> bool:
        """Whether the metrics go anywhere (a real ``MeterProvider``, not the API's no-op)."""
        return meter_configured(self._meter_provider)

    @property
    def configured(self) -> bool:
        """Whether spans or metrics go anywhere (see :func:`tracer_configured`)."""
        return tracer_configured(self._tracer_provider) or self.counting


def tracer_configured(provider: trace.TracerProvider | None = None) -> bool:
    """Whether ``provider`` (default: the global one) records spans: not the API's stand-in.

    Until an application sets a provider, the API's global is a proxy whose spans are no-ops
    (``NoOpTracerProvider`` is the explicit no-op).

    >>> tracer_configured(), tracer_configured(trace.NoOpTracerProvider())
    (False, False)
    """
    found = provider or trace.get_tracer_provider()
    return not isinstance(found, trace.NoOpTracerProvider) and (
        type(found).__name__ != "ProxyTracerProvider"
    )


def meter_configured(provider: metrics.MeterProvider | None = None) -> bool:
    """Whether ``provider`` (default: the global one) records metrics: not the API's stand-in.

    >>> meter_configured(), meter_configured(metrics.NoOpMeterProvider())
    (False, False)
    """
    found = provider or metrics.get_meter_provider()
    return not isinstance(found, metrics.NoOpMeterProvider) and (
        type(found).__name__ != "_ProxyMeterProvider"
    )
