"""Parameter names as users write them: a request written ``q=Paris`` reaches the tools whose
parameter is ``q`` (one letter, or a stopword such as ``to``, which the tokenizer drops from
prose), and indexing those names moves no other score."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from algenta_graph._native import tokenize
from algenta_graph.retrieval import ToolIndex


def _tool(name: str, description: str, *params: str) -> dict[str, object]:
    props = {p: {"type": "string"} for p in params}
    return {"name": name, "description": description, "input_schema": {"properties": props}}


TOOLS = [
    _tool("web_search", "Search the web.", "q", "lang"),
    _tool("geocode", "Coordinates of a place.", "address", "country"),
    _tool("send_email", "Send an email.", "to", "subject", "body"),
    _tool("route", "Driving directions between two places.", "from", "to", "mode"),
    _tool("plot", "Plot points.", "x", "y"),
    _tool("weather", "Weather for a city.", "city", "units"),
]


def test_a_pair_reaches_the_tool_whose_parameter_it_names() -> None:
    index = ToolIndex()
    index.add(TOOLS)
    assert index.search("q=Paris")[0].tool_id == "web_search"
    assert index.search("to=ann@example.com subject=hello")[0].tool_id == "send_email"
    assert index.search("from=Oslo to=Bergen")[0].tool_id == "route"
    assert index.search("x=1 y=2")[0].tool_id == "plot"
    # In prose the same letters and stopwords stay values: nothing matches.
    assert index.search("q x y to from") == []
    # An equation names no parameter.
    assert index.search("y=x^2") == []


def _catalog(rng: random.Random, short: bool) -> list[dict[str, object]]:
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "theta",
        "kappa",
        "lambda",
        "omega",
    ]
    tools = []
    for i in range(120):
        params = rng.sample(words, rng.randrange(0, 4))
        # The same tools, with short names (repeated across tools) or names that index nothing.
        extra = rng.sample(["q", "x", "to", "in", "A"], rng.randrange(0, 3))
        params += extra if short else [str(10 + n) for n in range(len(extra))]
        desc = " ".join(rng.choices(words, k=rng.randrange(1, 8)))
        tools.append(_tool(f"tool_{i}", desc, *params))
    return tools


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32),
    st.lists(
        st.sampled_from(["alpha", "beta", "gamma", "delta", "zeta", "omega", "q", "x", "to"]),
        min_size=1,
        max_size=5,
    ),
)
def test_short_names_move_no_other_score(seed: int, words: list[str]) -> None:
    with_short, without = ToolIndex(), ToolIndex()
    with_short.add(_catalog(random.Random(seed), short=True))
    without.add(_catalog(random.Random(seed), short=False))
    query = " ".join(words)  # no pair: the short names are not asked for
    assert with_short.search(query, 20) == without.search(query, 20)


def test_tokenize_keeps_pair_names_only() -> None:
    assert tokenize("q=Paris") == ["pari", "q"]
    assert tokenize("x = 3.14, y = 2") == []
