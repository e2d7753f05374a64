"""``configure_otlp`` sends the spans and metrics to an OTLP/HTTP collector.

A script in a subprocess (so the global providers it sets stay there) configures the SDK with
:func:`algenta_graph.telemetry.configure_otlp`, runs one turn of the governed graph on the
reference engine, and shuts down; a local HTTP server stands in for the collector and decodes
what arrives with the OTLP protobuf messages.
"""

from __future__ import annotations

import http.server
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from algenta_graph._net import free_port
from algenta_graph.engine import ReferenceEngine

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from algenta_graph.graph import create_governed_agent
    from algenta_graph.telemetry import configure_otlp, instrument
    from algenta_graph.testing import ScriptedChatModel

    async def main(engine_url: str, collector: str) -> None:
        shutdown = configure_otlp(collector, service_name="otlp-test")
        call = {"name": "get_contract", "args": {}, "id": "c1"}
        model = ScriptedChatModel(replies=[{"content": "", "tool_calls": [call]}, "done"])
        graph = instrument(await create_governed_agent(model, base_url=engine_url))
        await graph.ainvoke({"messages": [("user", "contract")]})
        shutdown()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)

CONFIGURED = textwrap.dedent(
    """
    import asyncio, sys
    from algenta_graph.config import parse_config
    from algenta_graph.graph import create_governed_agent
    from algenta_graph.testing import ScriptedChatModel

    async def main(engine_url: str, collector: str) -> None:
        # the configuration alone: no configure_otlp, no instrument (the providers flush at exit)
        config = parse_config({
            "base_url": engine_url,
            "telemetry": {"exporter": "otlp", "endpoint": collector, "service_name": "otlp-test"},
        })
        call = {"name": "get_contract", "args": {}, "id": "c1"}
        model = ScriptedChatModel(replies=[{"content": "", "tool_calls": [call]}, "done"])
        graph = await create_governed_agent(model, config=config)
        await graph.ainvoke({"messages": [("user", "contract")]})

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


class Collector(http.server.ThreadingHTTPServer):
    def __init__(self) -> None:
        self.posts: list[tuple[str, bytes]] = []
        super().__init__(("127.0.0.1", free_port()), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.posts.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("source", [SCRIPT, CONFIGURED], ids=["configure_otlp", "configuration"])
def test_configure_otlp_exports_spans_and_metrics(
    engine: ReferenceEngine, collector: Collector, tmp_path: Path, source: str
) -> None:
    """Set up in code, or by the configuration's ``[telemetry] exporter = "otlp"`` alone."""
    script = tmp_path / "run.py"
    script.write_text(source)
    url = f"http://127.0.0.1:{collector.server_address[1]}"
    done = subprocess.run(
        [sys.executable, str(script), engine.url, url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    spans: dict[str, Any] = {}
    services: set[str] = set()
    metrics: set[str] = set()
    for path, body in collector.posts:
        if path == "/v1/traces":
            traces = ExportTraceServiceRequest.FromString(body)
            for resource in traces.resource_spans:
                for attribute in resource.resource.attributes:
                    if attribute.key == "service.name":
                        services.add(attribute.value.string_value)
                for scope in resource.scope_spans:
                    assert scope.scope.name == "algenta_graph"
                    spans.update({s.name: s for s in scope.spans})
        else:
            assert path == "/v1/metrics"
            exported = ExportMetricsServiceRequest.FromString(body)
            for resource in exported.resource_metrics:
                for scope in resource.scope_metrics:
                    metrics.update(m.name for m in scope.metrics)
    assert services == {"otlp-test"}
    assert {
        "invoke_agent algenta_governed_agent",
        "retrieve_tools",
        "model",
        "governed_tool",
        "tools/call get_contract",
    } <= set(spans)
    call = spans["tools/call get_contract"]
    assert call.parent_span_id == spans["governed_tool"].span_id
    assert {"algenta.retrieval.duration", "mcp.client.operation.duration"} <= metrics
