"""Build the multi-intent dev set from the committed single-request dev sets.

Each query of ``queries.jsonl`` joins two to four requests of one source set whose gold tools
all differ, in one of five phrasings (``and``, ``;``, a list, ``then``, ``also``); its gold is
every request's gold, in order. The requests are taken unchanged (their end punctuation
dropped where they are joined inside a sentence, and the first letter of a later request
lowercased when it joins a sentence and is not an acronym or ``I``). Deterministic: run from
the repository root, it rewrites ``queries.jsonl`` byte for byte::

    python bench/eval/multi_intent/make.py

Sources: BFCL v3 (``bench/bfcl.py``'s merged loading: its query texts, scored against its
catalog) and APIBench (``bench/apibench.py``), 300 queries each: 60 per phrasing, of which 36
join two requests, 18 three and 6 four.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent.parent
sys.path.insert(0, str(BENCH))

import apibench  # noqa: E402
import bfcl  # noqa: E402

SEED = 46
PHRASINGS = ("and", "semicolon", "list", "then", "also")
PER_PHRASING = 60
SIZES = (2,) * 36 + (3,) * 18 + (4,) * 6
"""How many requests each of a phrasing's 60 queries joins."""
END = ".?!"


def _bare(text: str) -> str:
    """The request without surrounding space and its end punctuation."""
    return text.strip().rstrip(END).rstrip()


def _inner(text: str) -> str:
    """A request that continues a sentence: its first letter lowercased, unless it starts an
    acronym (``GDP``, ``T-test``) or is the pronoun ``I``."""
    text = _bare(text)
    first = text.split(" ", 1)[0]
    if first[:1].isupper() and (first[1:].islower() or first == "A") and first != "I":
        return text[0].lower() + text[1:]
    return text


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text[-1:] in END else text + "."


def phrase(requests: list[str], how: str) -> str:
    first, rest = requests[0], requests[1:]
    if how == "and":
        inner = [_bare(first), *(_inner(r) for r in rest)]
        return _sentence(", ".join(inner[:-1]) + " and " + inner[-1])
    if how == "semicolon":
        return _sentence("; ".join([_bare(first), *(_inner(r) for r in rest)]))
    if how == "list":
        return "\n".join(f"{i}. {_sentence(r)}" for i, r in enumerate(requests, 1))
    if how == "then":
        return _sentence(", then ".join([_bare(first), *(_inner(r) for r in rest)]))
    if how == "also":
        return " ".join([_sentence(first), *(f"Also, {_sentence(_inner(r))}" for r in rest)])
    raise ValueError(how)


def build(
    source: str, queries: list[tuple[str, str]], rng: random.Random
) -> list[dict[str, object]]:
    rows = []
    for how in PHRASINGS:
        for size in SIZES:
            while True:
                picked = rng.sample(queries, size)
                golds = [gold for _, gold in picked]
                if len(set(golds)) == size:
                    break
            rows.append(
                {
                    "query": phrase([text for text, _ in picked], how),
                    "gold": golds,
                    "source": source,
                    "phrasing": how,
                }
            )
    return rows


def lines() -> str:
    """The text of ``queries.jsonl``: one JSON object a line."""
    rng = random.Random(SEED)
    rows = build("bfcl", bfcl.load_bfcl().queries, rng)
    rows += build("apibench", apibench.load_apibench().queries, rng)
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def main() -> None:
    text = lines()
    (HERE / "queries.jsonl").write_text(text, encoding="utf-8")
    print(f"{text.count(chr(10))} queries written to {HERE / 'queries.jsonl'}")


if __name__ == "__main__":
    main()
