"""ToolIndex: the facade over the native BM25F index."""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.tools import StructuredTool, tool
from mcp.types import Tool as McpTool
from pydantic import BaseModel, Field

from algenta_graph.retrieval import DEFAULT_WEIGHTS, Hit, ToolIndex


def _dict_tool(name: str, description: str, **params: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "input_schema": {"type": "object", "properties": params},
    }


CATALOG = [
    _dict_tool(
        "get_weather",
        "Current weather conditions for a city",
        city={"type": "string", "description": "City name"},
        unit={"type": "string", "enum": ["celsius", "fahrenheit"]},
    ),
    _dict_tool("send_email", "Send an email message", to={"type": "string"}),
    _dict_tool("list_files", "List the files in a directory", path={"type": "string"}),
    _dict_tool("weather_alerts", "Severe weather alerts for a region"),
    _dict_tool("execute_decision", "Execute a logged decision", decision_id={"type": "string"}),
    _dict_tool("turn_off_lights", "Switch the lights off in a room", room={"type": "string"}),
]


@pytest.fixture
def index() -> ToolIndex:
    ix = ToolIndex()
    ix.add(CATALOG)
    return ix


def names(hits: list[Hit]) -> list[str]:
    return [h.tool_id for h in hits]


def test_search_ranks_best_first(index: ToolIndex) -> None:
    hits = index.search("what's the weather in Paris in celsius?")
    assert names(hits)[:2] == ["get_weather", "weather_alerts"]
    assert hits[0].score > hits[1].score > 0
    assert names(index.search("email my boss"))[0] == "send_email"
    assert names(index.search("turn the lights off"))[0] == "turn_off_lights"


def test_identifier_query_matches_any_naming_style(index: ToolIndex) -> None:
    for query in ["sendEmail", "send-email", "SEND_EMAIL"]:
        assert names(index.search(query))[0] == "send_email"


def test_param_names_and_enums_are_indexed(index: ToolIndex) -> None:
    assert names(index.search("fahrenheit")) == ["get_weather"]
    assert names(index.search("decision_id")) == ["execute_decision"]


def test_hit_is_frozen(index: ToolIndex) -> None:
    hit = index.search("email")[0]
    assert hit == Hit("send_email", hit.score)
    with pytest.raises(AttributeError):
        hit.score = 0.0  # type: ignore[misc]


def test_k_bounds(index: ToolIndex) -> None:
    assert index.search("weather", k=0) == []
    assert len(index.search("weather", k=1)) == 1
    assert len(index.search("weather", k=100)) == 2
    assert len(index.search("weather", k=10**30)) == 2


def test_empty_and_unknown_queries(index: ToolIndex) -> None:
    assert index.search("") == []
    assert index.search("   ") == []
    assert index.search("the of and") == []
    assert index.search("xylophone") == []
    assert ToolIndex().search("weather") == []


def test_allow_restricts_hits(index: ToolIndex) -> None:
    assert names(index.search("weather", allow={"weather_alerts"})) == ["weather_alerts"]
    assert names(index.search("weather", allow=["weather_alerts", "nope"])) == ["weather_alerts"]
    assert index.search("weather", allow=frozenset()) == []
    assert names(index.search("weather", allow=None)) == ["get_weather", "weather_alerts"]


def test_allow_must_not_be_a_string(index: ToolIndex) -> None:
    with pytest.raises(TypeError, match="not a string"):
        index.search("weather", allow="get_weather")
    with pytest.raises(TypeError, match="tool names"):
        index.search("weather", allow=[1, 2])  # type: ignore[list-item]


def test_search_many_equals_search(index: ToolIndex) -> None:
    queries = ["weather", "email", "", "files in a directory", "lights off"]
    assert index.search_many(queries, k=3) == [index.search(q, k=3) for q in queries]
    allow = {"get_weather", "list_files"}
    assert index.search_many(queries, 3, allow) == [index.search(q, 3, allow) for q in queries]
    assert index.search_many([]) == []


def test_len_contains_remove_replace(index: ToolIndex) -> None:
    assert len(index) == len(CATALOG)
    assert "send_email" in index
    assert "nope" not in index
    assert 42 not in index
    assert index.remove("send_email") is True
    assert index.remove("send_email") is False
    assert "send_email" not in index
    assert names(index.search("email")) == []
    index.add([_dict_tool("list_files", "Enumerate mailbox email folders")])
    assert len(index) == len(CATALOG) - 1
    assert names(index.search("email")) == ["list_files"]
    assert sorted(index.tool_names) == sorted(
        t["name"] for t in CATALOG if t["name"] != "send_email"
    )


def test_ties_break_by_name() -> None:
    ix = ToolIndex()
    ix.add([_dict_tool(n, "identical shared text") for n in ["delta", "alpha", "charlie", "bravo"]])
    hits = ix.search("shared text", k=3)
    assert names(hits) == ["alpha", "bravo", "charlie"]
    assert len({h.score for h in hits}) == 1


def test_deterministic_across_instances_and_insertion_order() -> None:
    shuffled = CATALOG[:]
    random.Random(7).shuffle(shuffled)
    a, b = ToolIndex(), ToolIndex()
    a.add(CATALOG)
    b.add(shuffled)
    for q in ["weather", "email files", "decision", "lights in the room", "city"]:
        assert a.search(q, k=10) == b.search(q, k=10)


def test_weights_change_ranking() -> None:
    tools = [
        _dict_tool("archive", "Store the invoice document"),
        _dict_tool("invoice_lookup", "Find a record"),
    ]
    by_name = ToolIndex(name_weight=5.0, description_weight=0.1)
    by_name.add(tools)
    by_prose = ToolIndex(name_weight=0.1, description_weight=5.0)
    by_prose.add(tools)
    assert names(by_name.search("invoice"))[0] == "invoice_lookup"
    assert names(by_prose.search("invoice"))[0] == "archive"
    assert DEFAULT_WEIGHTS["name"] > DEFAULT_WEIGHTS["description"]
    assert DEFAULT_WEIGHTS["param_names"] > DEFAULT_WEIGHTS["param_text"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k1": -1.0}, "k1"),
        ({"b": 1.5}, "b must be between"),
        ({"b": {"description": -0.1}}, "description b must be between"),
        ({"b": {"names": 0.5}}, "unknown field"),
        ({"length_exponent": 1.5}, "length exponent must be between"),
        ({"name_weight": float("nan")}, "name weight"),
        (
            {
                "name_weight": 0.0,
                "description_weight": 0.0,
                "param_name_weight": 0.0,
                "param_text_weight": 0.0,
            },
            "at least one",
        ),
    ],
)
def test_bad_parameters(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ToolIndex(**kwargs)


def test_per_field_settings_accept_a_number_or_a_partial_dict() -> None:
    from algenta_graph.retrieval import DEFAULT_B, DEFAULT_LENGTH_EXPONENT

    index = ToolIndex(b={"description": 0.5}, length_exponent=1.0)
    assert index._index.b == {**DEFAULT_B, "description": 0.5}
    assert index._index.length_exponent == dict.fromkeys(DEFAULT_LENGTH_EXPONENT, 1.0)
    assert ToolIndex(b=0.4)._index.b == dict.fromkeys(DEFAULT_B, 0.4)


# --- every accepted tool shape -------------------------------------------------------------


class _Forecast(BaseModel):
    city: str = Field(description="City to forecast")
    days: int = Field(default=3, description="Number of days ahead")


def test_langchain_tool_with_pydantic_schema() -> None:
    @tool(args_schema=_Forecast)
    def weather_forecast(city: str, days: int = 3) -> str:
        """Multi-day weather forecast."""
        return city

    ix = ToolIndex()
    ix.add([weather_forecast])
    assert names(ix.search("forecast")) == ["weather_forecast"]
    assert names(ix.search("how many days ahead")) == ["weather_forecast"]


def test_langchain_tool_with_json_schema_dict() -> None:
    # langchain-mcp-adapters builds exactly this: a StructuredTool whose args_schema is a dict.
    lc_tool = StructuredTool(
        name="query_data",
        description="Query the warehouse",
        args_schema={
            "type": "object",
            "properties": {"sql_text": {"type": "string", "description": "A SELECT statement"}},
        },
        func=lambda **_: "",
    )
    ix = ToolIndex()
    ix.add([lc_tool])
    assert names(ix.search("select statement")) == ["query_data"]


def test_mcp_tool() -> None:
    mcp_tool = McpTool(
        name="list_decisions",
        description="List logged decisions",
        inputSchema={"type": "object", "properties": {"status_filter": {"type": "string"}}},
    )
    ix = ToolIndex()
    ix.add([mcp_tool])
    assert names(ix.search("filter by status")) == ["list_decisions"]


@pytest.mark.parametrize("key", ["input_schema", "inputSchema", "parameters"])
def test_dict_schema_keys(key: str) -> None:
    ix = ToolIndex()
    ix.add([{"name": "t", "description": "", key: {"properties": {"zebra_count": {}}}}])
    assert names(ix.search("zebra")) == ["t"]


def test_openai_style_dict() -> None:
    ix = ToolIndex()
    ix.add(
        [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"q": {}}}}}]
    )
    assert "f" in ix


def test_tool_without_schema_or_description() -> None:
    ix = ToolIndex()
    ix.add([{"name": "ping"}, {"name": "noop", "description": None, "input_schema": None}])
    assert names(ix.search("ping")) == ["ping"]


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"name": "bad_schema", "input_schema": [1, 2]}, "'bad_schema'.*JSON object"),
        ({"name": "bad_json", "input_schema": "{nope"}, "'bad_json'.*not valid JSON"),
        ({"name": "bad_desc", "description": 3}, "'bad_desc'.*description must be a string"),
        ({"name": ""}, "non-empty"),
        ({"name": "   "}, "non-empty"),
        ({"description": "no name"}, "needs a string 'name'"),
        ({"name": 5}, "name must be a string, got int"),
        (object(), "unsupported tool of type object"),
        ("get_weather", "unsupported tool of type str"),
    ],
)
def test_bad_tools_raise_value_error_and_add_nothing(bad: Any, message: str) -> None:
    ix = ToolIndex()
    ix.add(CATALOG[:1])
    with pytest.raises(ValueError, match=message):
        ix.add([CATALOG[1], bad])
    assert len(ix) == 1
    assert "send_email" not in ix


def test_ref_cycle_is_harmless() -> None:
    schema = {
        "type": "object",
        "properties": {"node": {"$ref": "#/$defs/Node"}},
        "$defs": {"Node": {"properties": {"next_node": {"$ref": "#/$defs/Node"}}}},
    }
    ix = ToolIndex()
    ix.add([{"name": "linked_list", "input_schema": schema}])
    assert names(ix.search("next node")) == ["linked_list"]


def test_huge_strings() -> None:
    ix = ToolIndex()
    huge = "lorem " * 200_000 + "x" * 1_000_000
    ix.add([{"name": "big", "description": huge}, CATALOG[0]])
    assert names(ix.search("lorem")) == ["big"]
    assert names(ix.search("weather " + huge))[0] in {"big", "get_weather"}


def test_single_tool_not_wrapped_in_a_list() -> None:
    with pytest.raises(ValueError, match="wrap it in a list"):
        ToolIndex().add(CATALOG[0])  # type: ignore[arg-type]


@pytest.mark.parametrize(("k", "exc"), [(-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_k(index: ToolIndex, k: Any, exc: type[Exception]) -> None:
    with pytest.raises(exc, match="k must"):
        index.search("weather", k=k)
    with pytest.raises(exc, match="k must"):
        index.search_many(["weather"], k=k)


def test_bad_query(index: ToolIndex) -> None:
    with pytest.raises(TypeError, match="query must be a string"):
        index.search(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="query must be a string"):
        index.search_many(["ok", b"bytes"])  # type: ignore[list-item]


# --- concurrency and exact incremental statistics -----------------------------------------


def test_concurrent_searches_agree(index: ToolIndex) -> None:
    queries = ["weather", "email", "files", "lights off", "decision"] * 40
    expected = [index.search(q) for q in queries]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(index.search, queries))
    assert got == expected


WORDS = ["alpha", "beta", "gamma", "delta", "echo", "fox", "golf", "hotel", "india", "juliet"]

tool_st = st.builds(
    lambda name, desc, params, enum: {
        "name": name,
        "description": " ".join(desc),
        "input_schema": {
            "type": "object",
            "properties": {p: {"type": "string", "enum": enum} for p in params},
        },
    },
    name=st.sampled_from([f"tool_{w}" for w in WORDS] + ["getAlpha", "beta.gamma", "x-y"]),
    desc=st.lists(st.sampled_from(WORDS), max_size=8),
    params=st.lists(st.sampled_from([f"{w}_id" for w in WORDS]), max_size=3, unique=True),
    enum=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3, unique=True),
)
op_st = st.one_of(
    st.tuples(st.just("add"), st.lists(tool_st, min_size=1, max_size=4)),
    st.tuples(st.just("remove"), st.sampled_from([f"tool_{w}" for w in WORDS] + ["getAlpha"])),
)


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(op_st, max_size=25), query=st.lists(st.sampled_from(WORDS), max_size=4))
def test_incremental_ranks_exactly_like_fresh_build(ops: list[Any], query: list[str]) -> None:
    incremental = ToolIndex()
    final: dict[str, dict[str, Any]] = {}
    for kind, arg in ops:
        if kind == "add":
            incremental.add(arg)
            for t in arg:
                final.pop(t["name"], None)  # re-adding moves it to the end of the fresh build
                final[t["name"]] = t
        else:
            incremental.remove(arg)
            final.pop(arg, None)
    fresh = ToolIndex()
    fresh.add(list(final.values()))
    assert len(incremental) == len(fresh)
    q = " ".join(query)
    assert incremental.search(q, k=50) == fresh.search(q, k=50)
    assert incremental.stats() == fresh.stats() | {"heap_bytes": incremental.stats()["heap_bytes"]}


def test_a_chunked_add_indexes_texts_repeated_across_chunks_like_small_adds() -> None:
    """An add of more than one chunk (16,384 tools, `native/src/py/build.rs`) numbers each short
    parameter text once as it is staged: a later chunk carries only the number of a text staged
    in an earlier one, and pass 1 reuses that text's terms (ARCHITECTURE.md, "Retrieval").
    Every tool must find its own texts' terms: checked against how the catalog was made, and
    against adds too small to be chunked."""
    rng = random.Random(11)
    n_texts, n_tools = 300, 40_000
    # Text i holds a word of its own: i in letters between "qz" and "x" (a digit would be a
    # term apart; the "x" keeps the stemmer from merging two of them).
    marker = [
        f"qz{chr(97 + i // 26 // 26)}{chr(97 + i // 26 % 26)}{chr(97 + i % 26)}x"
        for i in range(n_texts)
    ]
    texts = [f"{WORDS[i % 10]} {WORDS[i * 7 % 10]} {marker[i]}" for i in range(n_texts)]
    tools, having = [], defaultdict(set)
    for n in range(n_tools):
        picked = rng.sample(range(n_texts), 3)
        name = f"ns{n % 50}.tool_{n}"
        tools.append(
            _dict_tool(
                name,
                f"tool number {n}",
                **{
                    f"p{j}": {"type": "string", "description": texts[t]}
                    for j, t in enumerate(picked)
                },
            )
        )
        for t in picked:
            having[t].add(name)
    chunked = ToolIndex()
    chunked.add(tools)
    small = ToolIndex()
    for at in range(0, n_tools, 5_000):
        small.add(tools[at : at + 5_000])
    for t in [0, 1, 150, 299, *rng.sample(range(n_texts), 20)]:
        found = {h.tool_id for h in chunked.search(marker[t], k=1_000)}
        assert found == having[t], marker[t]
        query = f"{marker[t]} {WORDS[t % 10]}"
        assert chunked.search(query, k=50) == small.search(query, k=50)
    assert chunked.search("ns7", k=50) == small.search("ns7", k=50)
    # "ns7" is the term of the namespace (staged from the name, numbered like a parameter
    # text) and "ns" a part of it, which every tool has: the ns7 tools come first.
    top = {h.tool_id for h in chunked.search("ns7", k=n_tools // 50)}
    assert top == {f"ns7.tool_{n}" for n in range(7, n_tools, 50)}
    assert chunked.stats() == small.stats() | {"heap_bytes": chunked.stats()["heap_bytes"]}


@settings(max_examples=60, deadline=None)
@given(
    tools=st.lists(tool_st, min_size=1, max_size=30),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
    allowed=st.sets(st.sampled_from([f"tool_{w}" for w in WORDS] + ["getAlpha", "x-y"])),
    k=st.integers(min_value=1, max_value=8),
)
def test_allow_is_the_filtered_full_ranking(
    tools: list[dict[str, Any]], query: list[str], allowed: set[str], k: int
) -> None:
    ix = ToolIndex()
    ix.add(tools)
    q = " ".join(query)
    everything = ix.search(q, k=len(ix))
    assert ix.search(q, k, allow=allowed) == [h for h in everything if h.tool_id in allowed][:k]
    assert ix.search(q, k) == everything[:k]


def _random_catalog(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    vocab = [f"{a}{b}" for a in ("get", "set", "list", "sync", "open") for b in WORDS]
    return [
        {
            "name": f"{rng.choice(WORDS)}_{rng.choice(vocab)}_{i}",
            "description": " ".join(rng.choices(vocab + WORDS, k=rng.randint(0, 12))),
            "input_schema": {
                "type": "object",
                "properties": {
                    rng.choice(vocab): {"type": "string", "description": rng.choice(WORDS)}
                    for _ in range(rng.randint(0, 4))
                },
            },
        }
        for i in range(n)
    ]


def test_batches_removals_and_readds_rank_like_one_build() -> None:
    tools = _random_catalog(3000, seed=11)
    chunked = ToolIndex()
    for start in range(0, len(tools), 700):
        chunked.add(tools[start : start + 700])
    for t in tools[::7]:
        assert chunked.remove(t["name"])
    chunked.add(tools[::7][::-1])  # re-added into reused slots, in another order
    fresh = ToolIndex()
    fresh.add(tools)
    rng = random.Random(5)
    queries = [" ".join(rng.choices([*WORDS, "getalpha", "sync"], k=3)) for _ in range(200)]
    assert chunked.search_many(queries, k=10) == fresh.search_many(queries, k=10)


def test_adds_and_searches_from_threads() -> None:
    tools = _random_catalog(2000, seed=3)
    index = ToolIndex()
    index.add(tools[:1000])
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for start in range(1000, 2000, 50):
                index.add(tools[start : start + 50])
                index.remove(tools[start]["name"])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(300):
                for hit in index.search("alpha gamma", k=5):
                    assert isinstance(hit.tool_id, str)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert not any(t.is_alive() for t in threads)
    assert len(index) == 2000 - 20
