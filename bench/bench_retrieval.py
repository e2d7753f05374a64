"""Tool-retrieval benchmark: algenta-graph's ToolIndex against ratel-ai, bm25s and rank-bm25.

Run from the repository root (results go to stdout; the committed figures are in
``bench/RESULTS.md``)::

    python bench/bench_retrieval.py                 # 1k, 10k, 50k generated tools + BFCL v3
    python bench/bench_retrieval.py --sizes 1000 --engines algenta bm25s --no-bfcl

Every (engine, catalog) pair runs in a fresh subprocess, so the memory figure is that
process's RSS growth from building the index (after ``gc.collect()``), not a guess. Catalogs
are generated with a fixed seed: services, verbs and objects in mixed naming styles
(snake_case, camelCase, kebab-case, dotted namespaces, PascalCase), 0-8 parameters each with
descriptions, enums, nested objects, arrays of objects, ``$defs``/``$ref`` and ``anyOf``.
Queries are generated from randomly chosen tools in plain English.

Peers get the same information: ratel-ai receives each tool's name, description and JSON
schema (it projects the schema itself); bm25s and rank-bm25 receive one text per tool: the
name's words (``split_name``), then the projection our index uses (name, description,
parameter names, parameter descriptions, enum values), tokenized their own way (bm25s: its
tokenizer with English stopwords; rank-bm25: lowercase ``\\w+`` words minus the same
stopwords). Peers use k1 0.9, b 0.4 as in ``bench/eval/README.md``. Neither bm25s nor
rank-bm25 can add a document to a built index, so their "add one tool" figure is a full
re-index.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import inspect
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bfcl  # noqa: E402  (bench/bfcl.py, shared with tests/retrieval/test_bfcl.py)

ENGINES = ("algenta", "ratel", "bm25s", "rank_bm25")
SEED = 20260501
K = 5

# --- catalog generator ------------------------------------------------------------------------

SERVICES = (  # noqa: SIM905
    "github gitlab bitbucket jira linear asana trello notion confluence slack discord teams "
    "zoom gmail outlook calendar drive dropbox box onedrive s3 gcs azure_blob postgres mysql "
    "mongodb redis elasticsearch kafka rabbitmq snowflake bigquery databricks airflow dbt "
    "stripe paypal square quickbooks xero netsuite salesforce hubspot zendesk intercom "
    "freshdesk twilio sendgrid mailchimp shopify woocommerce magento datadog grafana "
    "prometheus pagerduty opsgenie sentry kubernetes docker terraform ansible vault okta "
    "auth0 workday bamboohr greenhouse figma miro spotify youtube twitter linkedin reddit "
    "openweather maps calendly"
).split()
VERBS = {
    "get": ("get", "fetch", "show", "retrieve"),
    "list": ("list", "show all", "enumerate", "give me all"),
    "create": ("create", "make", "add", "open a new"),
    "update": ("update", "change", "edit", "modify"),
    "delete": ("delete", "remove", "drop", "get rid of"),
    "search": ("search", "find", "look up", "query"),
    "send": ("send", "post", "deliver", "dispatch"),
    "export": ("export", "download", "dump", "save"),
    "archive": ("archive", "close", "shelve", "retire"),
    "sync": ("sync", "synchronize", "mirror", "replicate"),
    "assign": ("assign", "hand over", "give", "delegate"),
    "approve": ("approve", "accept", "sign off", "confirm"),
    "schedule": ("schedule", "plan", "book", "set up"),
    "cancel": ("cancel", "abort", "call off", "stop"),
    "count": ("count", "how many", "tally", "number of"),
    "restore": ("restore", "recover", "undelete", "bring back"),
}
OBJECTS = (  # noqa: SIM905
    "issue pull_request commit branch repository release tag milestone comment review label "
    "project board card task sprint epic page database block message channel thread reaction "
    "meeting event invite email draft attachment folder file bucket object table row column "
    "index topic partition queue consumer schema query dashboard alert incident monitor "
    "metric log trace span deployment pod service node cluster secret policy role user group "
    "team member invoice payment refund subscription customer charge payout order product "
    "variant inventory cart coupon contact lead deal ticket conversation campaign template "
    "segment report forecast budget expense receipt employee candidate interview offer "
    "playlist track video channel_stats post follower location route weather_forecast booking"
).split()
QUALIFIERS = (  # noqa: SIM905
    "open closed archived recent pending overdue failed active inactive draft public private "
    "shared starred unread flagged critical scheduled recurring external internal billable"
).split()
SYLLABLES = (  # noqa: SIM905
    "ka lo mi ne ru sa ti vo ze qua bri dex fin gor hal jun kel mor nix pel"
).split()

PARAMS: tuple[tuple[str, str, str, tuple[str, ...] | None], ...] = (
    ("id", "string", "Unique identifier of the {obj}", None),
    ("limit", "integer", "Maximum number of {objs} to return", None),
    ("cursor", "string", "Pagination cursor from a previous call", None),
    ("page_size", "integer", "How many {objs} per page", None),
    ("start_date", "string", "Only {objs} created on or after this date (ISO 8601)", None),
    ("end_date", "string", "Only {objs} created before this date", None),
    ("status", "string", "Filter {objs} by status", ("open", "closed", "pending", "archived")),
    ("sort_order", "string", "Sort direction", ("asc", "desc")),
    ("sort_by", "string", "Field to sort {objs} by", ("created_at", "updated_at", "name")),
    ("include_archived", "boolean", "Also return archived {objs}", None),
    ("owner", "string", "User who owns the {obj}", None),
    ("title", "string", "Title of the {obj}", None),
    ("body", "string", "Text content of the {obj}", None),
    ("tags", "array", "Tags to attach to the {obj}", None),
    ("region", "string", "Data center region", ("us-east-1", "eu-west-1", "ap-south-1")),
    ("priority", "string", "Priority of the {obj}", ("low", "medium", "high", "urgent")),
    ("currency", "string", "ISO currency code for amounts", ("usd", "eur", "gbp", "jpy")),
    ("amount", "number", "Amount in the smallest currency unit", None),
    ("email", "string", "Email address of the recipient", None),
    ("dry_run", "boolean", "Validate the request without changing anything", None),
    ("timezone", "string", "IANA time zone used for dates", None),
    ("format", "string", "Output format of the export", ("csv", "json", "pdf", "xlsx")),
    ("workspace", "string", "Workspace or organization slug", None),
    ("query", "string", "Free-text search over {objs}", None),
    ("assignee", "string", "User the {obj} is assigned to", None),
    ("visibility", "string", "Who can see the {obj}", ("public", "private", "internal")),
)


def _style(words: list[str], style: str) -> str:
    if style == "snake":
        return "_".join(words)
    if style == "kebab":
        return "-".join(words)
    if style == "camel":
        return words[0] + "".join(w.capitalize() for w in words[1:])
    if style == "pascal":
        return "".join(w.capitalize() for w in words)
    return ".".join([words[0], "_".join(words[1:])])  # dotted namespace


def _param_schema(
    rng: random.Random, obj: str, style: str, depth: int = 0
) -> tuple[str, dict[str, Any]]:
    name, typ, desc, enum = rng.choice(PARAMS)
    objs = obj.replace("_", " ") + "s"
    text = desc.format(obj=obj.replace("_", " "), objs=objs)
    key = _style(name.split("_"), "camel" if style in ("camel", "pascal") else "snake")
    schema: dict[str, Any] = {"type": typ, "description": text}
    if typ == "array":
        schema["items"] = {"type": "string"}
    if enum:
        schema["enum"] = list(enum)
    if depth == 0 and rng.random() < 0.08:  # a nested filter object
        inner = dict(_param_schema(rng, obj, style, depth + 1) for _ in range(rng.randint(1, 3)))
        key, schema = (
            "filter",
            {
                "type": "object",
                "description": f"Conditions the {objs} must match",
                "properties": inner,
            },
        )
    elif depth == 0 and rng.random() < 0.05:  # an array of objects
        inner = dict(_param_schema(rng, obj, style, depth + 1) for _ in range(2))
        key, schema = (
            "items",
            {
                "type": "array",
                "description": f"The {objs} to process in one batch",
                "items": {"type": "object", "properties": inner},
            },
        )
    elif rng.random() < 0.1:  # nullable
        schema = {"anyOf": [schema, {"type": "null"}], "description": text}
    return key, schema


Intent = tuple[str, str, str | None, str]  # service, verb, qualifier, object


def generate_tools(n: int, seed: int = SEED) -> list[dict[str, Any]]:
    """``n`` distinct realistic tools as ``{"name", "description", "input_schema"}`` dicts."""
    return generate_catalog(n, seed)[0]


def generate_catalog(n: int, seed: int = SEED) -> tuple[list[dict[str, Any]], list[Intent]]:
    """``n`` distinct tools and, for each, what it does (for generating queries)."""
    rng = random.Random(seed)
    # A long tail of product names so the vocabulary grows with the catalog, as it does in
    # real multi-server catalogs: 4,000 draws up to 50k tools (the catalogs of the committed
    # figures), one per 10 tools beyond (2-4 syllables).
    if n <= 50_000:
        products = sorted(
            {"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))) for _ in range(4000)}
        )
    else:
        products = sorted(
            {
                "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
                for _ in range(n // 10)
            }
        )
    styles = ("snake", "snake", "camel", "kebab", "dotted", "pascal")
    tools: list[dict[str, Any]] = []
    intents: list[Intent] = []
    seen: set[str] = set()
    while len(tools) < n:
        service = rng.choice(SERVICES) if rng.random() < 0.7 else rng.choice(products)
        verb = rng.choice(list(VERBS))
        obj = rng.choice(OBJECTS)
        qual = rng.choice(QUALIFIERS) if rng.random() < 0.3 else None
        words = [service, verb, *([qual] if qual else []), *obj.split("_")]
        if verb in ("list", "search", "export", "count", "sync"):
            words[-1] += "s"
        style = rng.choice(styles)
        name = _style(words, style)
        if name in seen:
            continue
        seen.add(name)
        o = obj.replace("_", " ")
        q = f"{qual} " if qual else ""
        sentences = [
            f"{verb.capitalize()} {q}{o}s in {service.replace('_', ' ')}.",
            f"{verb.capitalize()}s a {q}{o} on the connected {service.replace('_', ' ')} account.",
            f"Use this to {verb} {q}{o}s for the current workspace in {service}.",
        ]
        extra = rng.choice(
            [
                "",
                " Requires admin scope.",
                " Results are paginated.",
                f" Returns the {o} as JSON.",
                " Rate limited to 100 calls per minute.",
                f" Fails if the {o} does not exist.",
            ]
        )
        props = dict(_param_schema(rng, obj, style) for _ in range(rng.randint(0, 8)))
        schema: dict[str, Any] = {"type": "object", "properties": props}
        if props and rng.random() < 0.05:  # a shared definition behind $ref
            schema["$defs"] = {
                "Owner": {
                    "type": "object",
                    "properties": {"login": {"type": "string", "description": "Account login"}},
                }
            }
            props["created_by"] = {"$ref": "#/$defs/Owner"}
        tools.append(
            {"name": name, "description": rng.choice(sentences) + extra, "input_schema": schema}
        )
        intents.append((service, verb, qual, obj))
    return tools, intents


def generate_queries(intents: Sequence[Intent], n: int, seed: int = SEED) -> list[str]:
    """Plain-English requests aimed at randomly chosen tools, in other words than the tools'."""
    rng = random.Random(seed + 1)
    out = []
    for _ in range(n):
        service, verb, qual, obj = rng.choice(intents)
        phrase = rng.choice(VERBS[verb])
        what = " ".join(w for w in (qual, obj.replace("_", " ")) if w)
        tail = rng.choice(["", " for me", " please", " from last week", " on our account"])
        where = rng.choice([f" in {service}", f" on {service}", f" from {service}"])
        out.append(f"{phrase} the {what}{where}{tail}".replace("_", " "))
    return out


# --- engines ----------------------------------------------------------------------------------


def tool_text(tool: dict[str, Any]) -> str:
    """One flat text per tool for the text-only peers: the name's words, then our projection
    (name, description, parameter names and texts)."""
    from algenta_graph._native import project_tool

    p = project_tool(tool["name"], tool.get("description") or "", tool.get("input_schema"))
    return " ".join([split_name(tool["name"]), *(" ".join(v) for v in p.values())])


def split_name(name: str) -> str:
    """``getHTTPResponse_code`` -> ``get HTTP Response code``: the name's words, for peers whose
    tokenizer keeps identifiers whole (as ``bench/eval/apibench/README.md`` drives bm25s)."""
    name = re.sub(r"([a-z0-9])([A-Z])|([A-Z])([A-Z][a-z])", r"\1\3 \2\4", name)
    return re.sub(r"[^A-Za-z0-9]+", " ", name).strip()


class Engine:
    name = ""

    def build(self, tools: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def search(self, query: str, k: int) -> list[str]:
        raise NotImplementedError

    def add_one(self, tool: dict[str, Any]) -> None:
        raise NotImplementedError


class Algenta(Engine):
    name = "algenta"

    def __init__(self) -> None:
        from algenta_graph.retrieval import ToolIndex

        self.index = ToolIndex()

    def build(self, tools: list[dict[str, Any]]) -> None:
        self.index.add(tools)

    def search(self, query: str, k: int) -> list[str]:
        return [h.tool_id for h in self.index.search(query, k)]

    def add_one(self, tool: dict[str, Any]) -> None:
        self.index.add([tool])


class Ratel(Engine):
    name = "ratel"

    def __init__(self) -> None:
        from ratel_ai import ToolRegistry

        self.registry = ToolRegistry()

    def build(self, tools: list[dict[str, Any]]) -> None:
        from ratel_ai import Tool

        self._register(
            [
                Tool(t["name"], t["name"], t.get("description") or "", t.get("input_schema") or {})
                for t in tools
            ]
        )

    def _register(self, tools: list[Any]) -> None:
        pending = self.registry.register(tools)
        if inspect.iscoroutine(pending):
            asyncio.run(pending)  # a no-op for BM25; awaited so nothing is left dangling

    def search(self, query: str, k: int) -> list[str]:
        return [h.tool_id for h in self.registry.search(query, k)]

    def add_one(self, tool: dict[str, Any]) -> None:
        from ratel_ai import Tool

        self._register(
            [Tool(tool["name"], tool["name"], tool["description"], tool["input_schema"])]
        )


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


class Bm25s(Engine):
    name = "bm25s"

    def __init__(self) -> None:
        import bm25s  # noqa: F401  (imported before the memory baseline)

        tool_text({"name": "warm_up"})

    def build(self, tools: list[dict[str, Any]], texts: list[str] | None = None) -> None:
        import bm25s

        self.tools = list(tools)
        self.texts = texts if texts is not None else [tool_text(t) for t in tools]
        self.names = [t["name"] for t in self.tools]
        self.retriever = bm25s.BM25(k1=0.9, b=0.4)
        tokens = bm25s.tokenize(self.texts, stopwords="en", show_progress=False)
        self.retriever.index(tokens, show_progress=False)

    def search(self, query: str, k: int) -> list[str]:
        import bm25s

        q = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
        if not q[0]:
            return []
        docs, _ = self.retriever.retrieve(
            q, k=min(k, len(self.names)), show_progress=False, n_threads=1
        )
        return [self.names[i] for i in docs[0]]

    def add_one(self, tool: dict[str, Any]) -> None:
        self.build([*self.tools, tool], [*self.texts, tool_text(tool)])


class RankBm25(Engine):
    name = "rank_bm25"

    def __init__(self) -> None:
        import numpy  # noqa: F401
        import rank_bm25  # noqa: F401

        tool_text({"name": "warm_up"})

    def build(self, tools: list[dict[str, Any]], texts: list[str] | None = None) -> None:
        from rank_bm25 import BM25Okapi

        self.stop = _stopwords()
        self.tools = list(tools)
        self.texts = texts if texts is not None else [tool_text(t) for t in tools]
        self.names = [t["name"] for t in self.tools]
        self.bm25 = BM25Okapi([self._tok(t) for t in self.texts], k1=0.9, b=0.4)

    def _tok(self, text: str) -> list[str]:
        return [w for w in re.findall(r"\w+", text.lower()) if w not in self.stop]

    def search(self, query: str, k: int) -> list[str]:
        import numpy as np

        scores = self.bm25.get_scores(self._tok(query))
        top = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
        top = top[np.argsort(-scores[top], kind="stable")]
        return [self.names[i] for i in top if scores[i] > 0]

    def add_one(self, tool: dict[str, Any]) -> None:
        self.build([*self.tools, tool], [*self.texts, tool_text(tool)])


def make_engine(name: str) -> Engine:
    return {"algenta": Algenta, "ratel": Ratel, "bm25s": Bm25s, "rank_bm25": RankBm25}[name]()


# --- measurement (inside one worker process) ----------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def latencies(run: Callable[[int], object], n: int, warmup: int = 20) -> list[float]:
    """Milliseconds of ``run(i)`` for ``i`` in ``range(n)``, after ``warmup`` calls."""
    for i in range(min(warmup, n)):
        run(i)
    lat = []
    for i in range(n):
        t0 = time.perf_counter_ns()
        run(i)
        lat.append((time.perf_counter_ns() - t0) / 1e6)
    return lat


def query_budget(engine: str, size: int) -> int:
    """Queries per engine and size: the slow peers are bounded (and the report says so)."""
    if engine == "rank_bm25":
        return {1000: 300, 10_000: 100}.get(size, 30)
    if engine == "ratel" and size >= 50_000:
        return 200
    return 1000


class ThreadRig:
    """Throughput on 1 and on 2 threads of one persistent pool (so per-thread caches are warm
    in both), next to a control: a known GIL-free workload (sha256 of 200 KB, about 70 us per
    call, which hashlib computes with the GIL released) measured in the same trial. The
    machine is shared; the control says how much parallelism it offered at that moment."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(2)
        self._data = b"x" * 200_000

    def rate(self, work: Callable[[list[Any]], object], items: list[Any], threads: int) -> float:
        chunks = [items[i::threads] for i in range(threads)]
        start = time.perf_counter()
        for future in [self.pool.submit(work, c) for c in chunks]:
            future.result()
        return len(items) / (time.perf_counter() - start)

    def _control(self, chunk: list[int]) -> None:
        for _ in chunk:
            hashlib.sha256(self._data).digest()

    def scaling(
        self, work: Callable[[list[Any]], object], items: list[Any], trials: int
    ) -> dict[str, float]:
        """Best 1-thread and best 2-thread throughput over ``trials`` interleaved trials (the
        least disturbed of each on a shared machine), and the same for the control."""
        self.rate(work, items[: max(2, len(items) // 10)], 2)  # warm both threads
        one = two = c1 = c2 = 0.0
        control_items = list(range(600))
        for _ in range(trials):
            one = max(one, self.rate(work, items, 1))
            two = max(two, self.rate(work, items, 2))
            c1 = max(c1, self.rate(self._control, control_items, 1))
            c2 = max(c2, self.rate(self._control, control_items, 2))
        return {"qps_1": one, "qps_2": two, "control_scaling_2": c2 / c1}


def worker_synthetic(engine_name: str, size: int) -> dict[str, Any]:
    all_tools, intents = generate_catalog(size + 20)
    tools, extra = all_tools[:size], all_tools[size:]
    n_queries = query_budget(engine_name, size)
    queries = generate_queries(intents[:size], n_queries)
    engine = make_engine(engine_name)  # imports everything before the memory baseline
    gc.collect()
    before = rss_bytes()
    start, cpu_start = time.perf_counter(), time.process_time()
    engine.build(tools)
    build_s = time.perf_counter() - start
    build_cpu_s = time.process_time() - cpu_start
    gc.collect()
    memory = rss_bytes() - before
    heap = engine.index.stats()["heap_bytes"] if engine_name == "algenta" else 0  # type: ignore[attr-defined]
    for q in queries[:20]:  # warm-up
        engine.search(q, K)
    lat = []
    for q in queries:
        t0 = time.perf_counter_ns()
        engine.search(q, K)
        lat.append((time.perf_counter_ns() - t0) / 1e6)
    # Add one new tool, then search for it: repeated for the incremental index, once for the
    # engines that rebuild everything.
    adds = []
    for tool, intent in list(zip(extra, intents[size:], strict=True))[
        : 20 if engine_name == "algenta" else 1
    ]:
        q = generate_queries([intent], 1)[0]
        t0 = time.perf_counter_ns()
        engine.add_one(tool)
        engine.search(q, K)
        adds.append((time.perf_counter_ns() - t0) / 1e6)
    thread_queries = queries * max(1, 2000 // len(queries)) if engine_name == "algenta" else queries
    rig = ThreadRig()
    trials = 7 if engine_name == "algenta" else 3

    def searches(chunk: list[str]) -> None:
        for q in chunk:
            engine.search(q, K)

    threads = rig.scaling(searches, thread_queries, trials)
    # The plain latency loop above is a single-thread run too: never compare 2 threads
    # against a slower 1-thread figure than that one.
    threads["qps_1"] = max(threads["qps_1"], len(lat) / (sum(lat) / 1000))
    threads["scaling_2"] = threads["qps_2"] / threads["qps_1"]
    result: dict[str, Any] = {
        "engine": engine_name,
        "size": size,
        "queries": len(queries),
        "build_s": build_s,
        "build_cpu_s": build_cpu_s,
        "memory_mb": memory / 2**20,
        "p50_ms": pct(lat, 0.5),
        "p95_ms": pct(lat, 0.95),
        "add_one_search_ms": statistics.median(adds),
        **threads,
    }
    if engine_name == "algenta":
        result["heap_mb"] = heap / 2**20
        index = engine.index  # type: ignore[attr-defined]
        batches = [thread_queries[i : i + 50] for i in range(0, len(thread_queries), 50)]

        def batched(chunk: list[list[str]]) -> None:
            for batch in chunk:
                index.search_many(batch, K)

        many = rig.scaling(batched, batches, trials)
        result["many_qps_1"], result["many_qps_2"] = many["qps_1"] * 50, many["qps_2"] * 50
        result["many_scaling_2"] = many["qps_2"] / many["qps_1"]
        result["many_control_scaling_2"] = many["control_scaling_2"]
    return result


def worker_bfcl(engine_name: str) -> dict[str, Any]:
    data = bfcl.load_bfcl()
    engine = make_engine(engine_name)
    engine.build(data.tools)

    def search(queries: Sequence[str], k: int) -> list[list[str]]:
        return [engine.search(q, k) for q in queries]

    s = bfcl.score(search, data.queries)
    return {
        "engine": engine_name,
        "recall_at_1": s.recall_at_1,
        "recall_at_5": s.recall_at_5,
        "mrr": s.mrr,
        "queries": s.queries,
        "tools": len(data.tools),
    }


# --- orchestration ----------------------------------------------------------------------------


def run_worker(args: list[str], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "?"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fmt_row(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"| {r['engine']} | {r['size']} | error: {r['error']} |"
    return (
        f"| {r['engine']} | {r['size']:,} | {r['queries']} | {r['build_s']:.3f} | "
        f"{r['build_cpu_s']:.3f} | "
        f"{r['p50_ms']:.4f} | {r['p95_ms']:.4f} | {r['memory_mb']:.1f} | "
        f"{r['add_one_search_ms']:.3f} | {r['qps_1']:,.0f} | {r['qps_2']:,.0f} | "
        f"{r['scaling_2']:.2f}x | {r['control_scaling_2']:.2f}x |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 10_000, 50_000])
    parser.add_argument("--engines", nargs="*", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--no-bfcl", action="store_true")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="also write every result to this JSON file")
    ns = parser.parse_args(argv)

    if ns.worker:
        kind, engine, *rest = ns.worker
        out = worker_bfcl(engine) if kind == "bfcl" else worker_synthetic(engine, int(rest[0]))
        print(json.dumps(out))
        return 0

    with open("/proc/loadavg") as fh:
        log(f"load average before the run: {fh.read().split()[:3]}; cores: {os.cpu_count()}")
    results: list[dict[str, Any]] = []
    header = (
        "| engine | tools | queries | build s | build CPU s | p50 ms | p95 ms | memory MB | "
        "add one + search ms | 1 thread q/s | 2 threads q/s | 2T/1T | control 2T/1T |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = []
    for size in ns.sizes:
        for engine in ns.engines:
            log(f"[{time.strftime('%H:%M:%S')}] {engine} @ {size:,} tools ...")
            r = run_worker(["synthetic", engine, str(size)], timeout=1800)
            r.setdefault("engine", engine)
            r.setdefault("size", size)
            results.append(r)
            rows.append(fmt_row(r))
            log("    " + rows[-1])
    print(header)
    print("\n".join(rows))
    if not ns.no_bfcl:
        if not bfcl.bfcl_available():
            log(f"BFCL v3 data not found in {bfcl.eval_dir()}; skipped")
        else:
            print("\n| engine | recall@1 | recall@5 | MRR |\n|---|---|---|---|")
            for engine in ns.engines:
                log(f"[{time.strftime('%H:%M:%S')}] {engine} on BFCL v3 ...")
                r = run_worker(["bfcl", engine], timeout=1800)
                r.setdefault("engine", engine)
                results.append({"bfcl": True, **r})
                line = (
                    f"| {engine} | error: {r['error']} |"
                    if "error" in r
                    else f"| {engine} | {r['recall_at_1']:.3f} | {r['recall_at_5']:.3f} | "
                    f"{r['mrr']:.3f} |"
                )
                log("    " + line)
                print(line)
    extra = [r for r in results if r.get("engine") == "algenta" and "heap_mb" in r]
    if extra:
        print(
            "\n| algenta | index heap estimate MB | search_many 1 thread q/s | "
            "2 threads q/s | 2T/1T | control 2T/1T |\n|---|---|---|---|---|---|"
        )
    for r in extra:
        print(
            f"| {r['size']:,} tools | {r['heap_mb']:.1f} | {r['many_qps_1']:,.0f} | "
            f"{r['many_qps_2']:,.0f} | {r['many_scaling_2']:.2f}x | "
            f"{r['many_control_scaling_2']:.2f}x |"
        )
    if ns.json:
        ns.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
