"""Render the README's trace picture from spans the graph really exported (offline).

One thread on the reference engine, instrumented with the OpenTelemetry SDK's in-memory
exporter: a turn whose model makes two calls at once (one delivered, one denied by the
confidence gate and escalated), then the operator's override in a second run. The finished
spans are written to ``--spans`` (JSON, one object per span) and drawn as a waterfall per run
with matplotlib (``pip install matplotlib``; not a dependency of the package): one bar per span,
nested by parent, the run that answers the escalation linked to the span whose denial raised it.

Run: ``python bench/trace_picture.py --out docs/trace.png --spans /tmp/trace.spans.json``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import format_span_id, format_trace_id

from algenta_graph.connection.engine import EngineConnection
from algenta_graph.engine import ReferenceEngine, WebhookReceiver
from algenta_graph.graph import create_governed_agent
from algenta_graph.telemetry import instrument
from algenta_graph.testing import ScriptedChatModel

SHOWN = {
    "gen_ai.tool.call.id": "call",
    "algenta.outcome": "outcome",
    "algenta.gate": "gate",
    "algenta.policy": "policy",
    "algenta.operator.identity": "operator",
}


def _execute(decision_id: str, url: str, call_id: str) -> dict[str, Any]:
    args = {"decision_id": decision_id, "webhook_url": url}
    return {"name": "execute_decision", "args": args, "id": call_id}


async def _log(conn: EngineConnection, confidence: float) -> str:
    message = await conn.call_tool(
        "log_decision",
        {
            "chosen_action": "restock_fast_movers",
            "expected_value": 1000.0,
            "confidence": confidence,
            "risk_p5": 0.05,
            "risk_p95": 0.4,
        },
        tool_call_id="setup",
    )
    body = message.artifact["structured_content"]
    return str(body.get("result", body)["decision_id"])


async def record(db: Path) -> list[ReadableSpan]:
    """Run the scenario and return its finished spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = ReferenceEngine(relaxed=True, db=db / "engine.sqlite").start()
    try:
        with WebhookReceiver() as webhook:
            # a relaxed local engine without keys: the operator path may use its session
            async with EngineConnection(
                engine.url, profile="execute", operator_key_is_agent_key=True
            ) as conn:
                ok, low = await _log(conn, 0.9), await _log(conn, 0.3)
                both = {
                    "content": "",
                    "tool_calls": [
                        _execute(ok, webhook.url, "c1"),
                        _execute(low, webhook.url, "c2"),
                    ],
                }
                warm = {"content": "", "tool_calls": [{"name": "get_contract", "args": {},
                                                       "id": "w1"}]}  # fmt: skip
                replies = [warm, "ok", both, "One delivered; the other was overridden."]
                model = ScriptedChatModel(replies=replies)
                async with AsyncSqliteSaver.from_conn_string(str(db / "cp.sqlite")) as saver:
                    graph = instrument(
                        await create_governed_agent(
                            model, connection=conn, checkpointer=saver, single_process=True
                        ),
                        tracer_provider=provider,
                    )
                    # a first turn warms the process up (model binding, sessions); not drawn
                    await graph.ainvoke(
                        {"messages": [("user", "contract")]},
                        {"configurable": {"thread_id": "warm-up"}},
                    )
                    exporter.clear()
                    cfg: Any = {"configurable": {"thread_id": "readme-trace"}}
                    await graph.ainvoke({"messages": [("user", "Execute both decisions")]}, cfg)
                    answer = {"action": "override", "operator": "ana", "reason": "signed off"}
                    await graph.ainvoke(Command(resume=answer), cfg)
    finally:
        engine.stop()
    return list(exporter.get_finished_spans())


def as_json(span: ReadableSpan) -> dict[str, Any]:
    return {
        "name": span.name,
        "trace_id": format_trace_id(span.context.trace_id),
        "span_id": format_span_id(span.context.span_id),
        "parent_id": format_span_id(span.parent.span_id) if span.parent else None,
        "start": span.start_time,
        "end": span.end_time,
        "attributes": {
            k: v if not isinstance(v, tuple) else list(v)
            for k, v in (span.attributes or {}).items()
        },
        "links": [
            {
                "trace_id": format_trace_id(link.context.trace_id),
                "span_id": format_span_id(link.context.span_id),
                "attributes": dict(link.attributes or {}),
            }
            for link in span.links
        ],
    }


def draw(spans: list[dict[str, Any]], out: Path) -> None:
    """One waterfall per run, stacked; the link from the answering run to its escalation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import ConnectionPatch

    by_id = {s["span_id"]: s for s in spans}

    def depth(span: dict[str, Any]) -> int:
        d = 0
        while span["parent_id"] in by_id:
            span, d = by_id[span["parent_id"]], d + 1
        return d

    def walk(span: dict[str, Any], into: list[dict[str, Any]]) -> list[dict[str, Any]]:
        into.append(span)
        for child in sorted(
            (s for s in spans if s["parent_id"] == span["span_id"]), key=lambda s: s["start"]
        ):
            walk(child, into)
        return into

    roots = sorted((s for s in spans if s["parent_id"] is None), key=lambda s: s["start"])
    runs = [walk(root, []) for root in roots]
    colours = {
        "invoke_agent": "#4c72b0",
        "tools/call": "#dd8452",
        "chat": "#8172b3",
        "retrieve_tools": "#55a868",
        "denial_handler": "#c44e52",
    }

    def colour(name: str) -> str:
        return next((c for k, c in colours.items() if name.startswith(k)), "#937860")

    fig, axes = plt.subplots(
        len(runs),
        1,
        figsize=(13, 0.36 * sum(len(r) for r in runs) + 2.2),
        gridspec_kw={"height_ratios": [len(r) for r in runs]},
        squeeze=False,
    )
    where: dict[str, tuple[Any, float, float]] = {}
    titles = [
        "run 1: the turn (retrieval, the model's two calls at once, an escalation)",
        "run 2, whenever the operator answers: the override (a new trace, linked)",
    ]
    for i, (run, ax) in enumerate(zip(runs, (row[0] for row in axes), strict=True)):
        t0, t1 = run[0]["start"], run[0]["end"]
        total = (t1 - t0) / 1e6
        for y, span in enumerate(run):
            start = (span["start"] - t0) / 1e6
            width = max((span["end"] - span["start"]) / 1e6, total * 0.004)
            ax.barh(y, width, left=start, color=colour(span["name"]), height=0.64)
            a = span["attributes"]
            detail = [f"{short}={a[k]}" for k, short in SHOWN.items() if k in a]
            if a.get("algenta.escalation.waiting"):
                detail.append("waits for an operator")
            if detail:
                ax.text(start + width + total * 0.01, y, ", ".join(detail), va="center", fontsize=8)
            where[span["span_id"]] = (ax, start, y)
        ax.set_yticks(range(len(run)))
        ax.set_yticklabels(
            ["\u00a0\u00a0\u00a0" * depth(s) + s["name"] for s in run],
            fontsize=8.5,
            family="monospace",
        )
        ax.tick_params(axis="y", pad=250, length=0)
        for label in ax.get_yticklabels():
            label.set_horizontalalignment("left")
        ax.set_ylim(len(run) - 0.4, -0.6)
        ax.set_xlim(0, total * 1.45)
        ax.set_xlabel("ms since the run started", fontsize=8.5)
        title = titles[i] if i < len(titles) else f"run {i + 1}"
        ax.set_title(f"{title}   (trace {run[0]['trace_id']})", fontsize=9.5, loc="left")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    for span in spans:
        for link in span["links"]:
            if span["parent_id"] is None and link["span_id"] in where:
                ax_to, x_to, y_to = where[link["span_id"]]
                ax_from, x_from, y_from = where[span["span_id"]]
                fig.add_artist(
                    ConnectionPatch(
                        (x_from, y_from),
                        (x_to, y_to),
                        coordsA=ax_from.transData,
                        coordsB=ax_to.transData,
                        arrowstyle="->",
                        linestyle="--",
                        color="#333333",
                        connectionstyle="arc3,rad=0.3",
                    )
                )
                ax_to.text(
                    x_to,
                    y_to - 0.55,
                    "run 2 links to the call whose denial raised the escalation \u2192 ",
                    fontsize=8,
                    color="#333333",
                    ha="right",
                    va="center",
                )
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/trace.png")
    parser.add_argument("--spans", default=None, help="also write the spans (JSON) here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spans = [as_json(s) for s in asyncio.run(record(Path(tmp)))]
    if args.spans:
        Path(args.spans).write_text(json.dumps(spans, indent=1))
    draw(spans, Path(args.out))
    print(f"{len(spans)} spans -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
