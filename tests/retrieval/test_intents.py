"""A message of several requests: each request's tools reach the top k, a message of one
request is ranked exactly as without the split, other languages are not hurt, and with
embeddings every request gets its own query vector (off the event loop in async code)."""

from __future__ import annotations

import asyncio
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.embeddings import Embeddings

import algenta_graph._native as _native
from algenta_graph.retrieval import INTENT_PART_WEIGHT, ToolIndex, split_intents

TOOLS = [
    {"name": "get_weather", "description": "Current weather and temperature for a city."},
    {"name": "weather_alerts", "description": "Severe weather alerts for a region, by email."},
    {"name": "weather_history", "description": "Past weather of a city on a date."},
    {"name": "weather_radar", "description": "Rain radar images of a city, sent by email."},
    {"name": "weather_uv_index", "description": "UV index forecast of a city."},
    {"name": "forecast_weather", "description": "Weather forecast for a city, by day, by email."},
    {"name": "currency_convert", "description": "Convert an amount between two currencies."},
    {"name": "book_flight", "description": "Book a flight between two airports."},
    {"name": "triangle_area", "description": "Area of a triangle from its base and height."},
    {"name": "send_email", "description": "Send an email message to a recipient."},
]


def _names(index: ToolIndex, query: str, k: int = 5) -> list[str]:
    return [h.tool_id for h in index.search(query, k)]


def _indexes() -> tuple[ToolIndex, ToolIndex]:
    multi, single = ToolIndex(), ToolIndex(multi_intent=False)
    multi.add(TOOLS)
    single.add(TOOLS)
    return multi, single


def test_each_request_of_a_message_reaches_the_top_k() -> None:
    multi, single = _indexes()
    # The weather tools mention email too: the whole message ranks two of them first.
    query = "Weather alerts and the rain radar for Paris, and send an email to Ann"
    assert _names(single, query, 2) == ["weather_radar", "weather_alerts"]
    assert _names(multi, query, 2) == ["weather_radar", "send_email"]
    for query, second in [
        ("weather forecast for Paris; book a flight to Rome", "book_flight"),
        ("- weather forecast in Oslo by day\n- send an email to Ann", "send_email"),
        ("Show the weather radar of Lyon, then send an email to Bob", "send_email"),
    ]:
        assert second in _names(multi, query, 2), query


def test_a_message_of_one_request_ranks_exactly_as_without_the_split() -> None:
    multi, single = _indexes()
    for query in [
        "area of a triangle with base 10 and height 5",
        "weather and temperature in Paris",
        "Book a flight. It should leave in the morning.",
        "",
    ]:
        assert split_intents(query) == []
        assert multi.search(query, 10) == single.search(query, 10)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "weather",
                "city",
                "book",
                "flight",
                "and",
                "then",
                "email",
                "send",
                "convert",
                "currency",
                ";",
                "\n",
                "find",
                "what",
                "area",
                "triangle",
                "also",
                "radar",
                "alerts",
                ".",
                "forecast",
            ]
        ),
        max_size=14,
    )
)
def test_the_whole_messages_best_tool_stays_first(words: list[str]) -> None:
    multi, single = _indexes()
    query = " ".join(words)
    got, whole = multi.search(query, 5), single.search(query, 5)
    assert bool(got) == bool(whole)
    if not split_intents(query):
        assert got == whole
    elif whole:
        assert got[0] == whole[0]
        # A request's best tool never scores above INTENT_PART_WEIGHT of the whole's best.
        assert all(h.score <= whole[0].score for h in got)
        assert all(
            h.score <= INTENT_PART_WEIGHT * whole[0].score * (1 + 1e-5)
            for h in got
            if h.tool_id not in {w.tool_id for w in single.search(query, 50)}
        )


def test_other_languages_are_not_hurt() -> None:
    tools = [
        {"name": "wetter", "description": "Aktuelles Wetter und Temperatur einer Stadt."},
        {"name": "waehrung", "description": "Rechnet einen Betrag in eine andere Währung um."},
        {"name": "flug_buchen", "description": "Bucht einen Flug zwischen zwei Flughäfen."},
        {"name": "meteo", "description": "Météo et température actuelles d'une ville."},
        {"name": "devise", "description": "Convertit un montant dans une autre devise."},
        {"name": "vuelo", "description": "Reserva un vuelo entre dos aeropuertos."},
        {"name": "clima", "description": "Clima y temperatura actual de una ciudad."},
    ]
    multi, single = ToolIndex(), ToolIndex(multi_intent=False)
    multi.add(tools)
    single.add(tools)
    one_request = [
        "Wie ist das Wetter und die Temperatur in Berlin?",
        "Quelle est la météo et la température à Lyon ?",
        "Reserva un vuelo de Madrid a Lima y paga con tarjeta",
        "東京の天気と気温",
    ]
    for query in one_request:
        assert multi.search(query, 7) == single.search(query, 7), query
    # Lines and semicolons split in any language: the second request reaches the top 2.
    for query, first, second in [
        ("Wetter in Berlin; einen Flug nach Rom buchen", "wetter", "flug_buchen"),
        ("Météo à Lyon\nconvertit 100 euros dans une autre devise", "meteo", "devise"),
        ("clima de Quito y temperatura; reserva un vuelo a Lima", "clima", "vuelo"),
    ]:
        assert len(split_intents(query)) == 2
        got = _names(multi, query, 2)
        assert got[0] == _names(single, query, 1)[0]
        assert sorted(got) == sorted([first, second]), query


def test_split_intents_says_which_requests_are_ranked() -> None:
    assert split_intents("Get the weather in Paris and convert 100 EUR to USD") == [
        "Get the weather in Paris ",
        " convert 100 EUR to USD",
    ]
    # A fragment of one term is no request of its own; fewer than two: none.
    assert split_intents("Identify the object in this image and classify it") == []
    with pytest.raises(TypeError):
        split_intents(b"bytes")  # type: ignore[arg-type]


CONCEPTS = {
    "money": {"currency", "euro", "eur", "usd", "dollars", "convert", "amount"},
    "weather": {"weather", "forecast", "rain", "temperature", "umbrella"},
    "travel": {"flight", "plane", "airport", "trip", "fly"},
}


class ConceptEmbeddings(Embeddings):
    """One dimension per concept; records what it embeds, and refuses blocking calls in
    async code (``aembed_query`` is its own)."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.blocking = True

    def _vector(self, text: str) -> list[float]:
        words = set(re.findall(r"[a-z]+", text.lower()))
        return [float(len(words & vocab)) for vocab in CONCEPTS.values()] + [0.01]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        assert self.blocking, "embed_query called from async code"
        self.queries.append(text)
        return self._vector(text)

    async def aembed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return self._vector(text)


def test_each_request_gets_its_own_query_vector() -> None:
    tools = [
        {"name": "currency_convert", "description": "Convert an amount to another currency."},
        {"name": "get_forecast", "description": "Weather forecast for a city."},
        {"name": "book_flight", "description": "Book a flight to an airport."},
    ]
    model = ConceptEmbeddings()
    index = ToolIndex(embeddings=model)
    index.add(tools)
    # Neither request shares a word with its tool: only the requests' own vectors find both.
    query = "Will I need an umbrella in Paris tomorrow and tell me how many dollars 100 euro is"
    parts = split_intents(query)
    assert len(parts) == 2
    got = [h.tool_id for h in index.search(query, 2)]
    assert sorted(got) == ["currency_convert", "get_forecast"]
    assert model.queries == [query, *parts]
    # The native call checks the vectors match the requests.
    vector = model._vector(query)
    with pytest.raises(ValueError, match="intent vectors"):
        index._index.search(query, 2, None, vector, [vector])
    # Cached: searching again embeds nothing.
    index.search(query, 2)
    assert model.queries == [query, *parts]


def test_async_search_embeds_each_request_off_the_event_loop() -> None:
    model = ConceptEmbeddings()
    index = ToolIndex(embeddings=model)
    index.add(
        [
            {"name": "currency_convert", "description": "Convert an amount to a currency."},
            {"name": "get_forecast", "description": "Weather forecast for a city."},
        ]
    )
    model.blocking = False
    query = "Will I need an umbrella in Paris and tell me how many dollars 100 euro is"
    hits = asyncio.run(index.asearch(query, 2))
    assert sorted(h.tool_id for h in hits) == ["currency_convert", "get_forecast"]
    other = "weather forecast in Rome; convert 5 euro to usd"
    asyncio.run(index.aembed_query(other))
    assert index.search(other, 2)  # every vector cached by aembed_query: no blocking call
    assert set(model.queries) == {query, other, *split_intents(query), *split_intents(other)}


def test_intent_vectors_are_checked() -> None:
    index = _native.Bm25Index()
    index.add(TOOLS)
    with pytest.raises(ValueError, match="need the query's vector"):
        index.search("a; b", 5, None, None, [[1.0]])
    with pytest.raises(TypeError, match="not a string"):
        index.search("weather in Paris; book a flight", 5, None, [1.0], "ab")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="entries for 1 queries"):
        index.search_many(["x"], 5, None, [[1.0]], [None, None])
