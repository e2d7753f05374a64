"""Send the spans and metrics to an OTLP collector: :func:`configure_otlp` (the ``otlp`` extra).

The graph itself needs only ``opentelemetry-api``; this sets the global providers up with the
SDK and the OTLP/HTTP exporters (``pip install "algenta-graph[otlp]"``). The exporters read the
standard environment (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_HEADERS``, ...)
unless ``endpoint`` is given. An application that configures OpenTelemetry itself does not need
it: the graph uses whatever global providers are set.

Example::

    from algenta_graph.telemetry import configure_otlp

    shutdown = configure_otlp("http://localhost:4318")   # before the first run
    ...
    shutdown()                                           # flush what is buffered
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["configure_otlp", "configure_otlp_once"]

_CONFIGURED: dict[str, tuple[str | None, str]] = {}
"""The one OTLP set-up of this process (the global providers can be set only once)."""
_LOCK = threading.Lock()

logger = logging.getLogger(__name__)


def configure_otlp(
    endpoint: str | None = None,
    *,
    service_name: str = "algenta-graph",
    export_interval_seconds: float = 10.0,
) -> Callable[[], None]:
    """Set the global tracer and meter providers to export over OTLP/HTTP.

    Args:
        endpoint: the collector's base URL (``http://host:4318``); default
            ``OTEL_EXPORTER_OTLP_ENDPOINT``, else the exporters' own default
            (``http://localhost:4318``).
        service_name: the ``service.name`` resource attribute (``OTEL_SERVICE_NAME`` wins).
        export_interval_seconds: how often metrics are exported.

    Returns:
        A function that flushes and shuts both providers down.

    Raises:
        ImportError: the SDK or the exporter is not installed (naming the extra).
    """
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ImportError(
            f"configure_otlp needs the OpenTelemetry SDK and OTLP exporter ({exc.name} is "
            'missing): pip install "algenta-graph[otlp]"'
        ) from exc

    base = endpoint.rstrip("/") if endpoint else None
    span_kwargs: dict[str, Any] = {"endpoint": f"{base}/v1/traces"} if base else {}
    metric_kwargs: dict[str, Any] = {"endpoint": f"{base}/v1/metrics"} if base else {}
    resource = Resource.create({"service.name": service_name})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(**span_kwargs)))
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(**metric_kwargs),
        export_interval_millis=export_interval_seconds * 1000,
    )
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)

    def shutdown() -> None:
        tracer_provider.shutdown()
        meter_provider.shutdown()

    return shutdown


def configure_otlp_once(
    endpoint: str | None = None, *, service_name: str = "algenta-graph"
) -> None:
    """:func:`configure_otlp` the first time a process asks; later calls keep that set-up.

    What a configuration's ``[telemetry] exporter = "otlp"`` runs when a graph is built (the
    served graph is built once per event loop and setting). A later call asking for another
    endpoint or service name is logged as a warning: the global providers are set once.

    Raises:
        ImportError: the SDK or the exporter is not installed (naming the extra).
    """
    wanted = (endpoint, service_name)
    with _LOCK:
        done = _CONFIGURED.get("otlp")
        if done is None:
            configure_otlp(endpoint, service_name=service_name)
            _CONFIGURED["otlp"] = wanted
        elif done != wanted:
            logger.warning(
                "OTLP export is already set up for %s (service %s); %s (service %s) is ignored",
                done[0] or "the default endpoint",
                done[1],
                endpoint or "the default endpoint",
                service_name,
            )
