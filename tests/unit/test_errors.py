"""One hierarchy of errors, in one module (docs/ARCHITECTURE.md, "Modules": `errors.py`).

Every exception class a module of the package exports (its ``__all__``) is the one
:mod:`algenta_graph.errors` defines, and derives from :class:`AlgentaGraphError`; the reference
engine (:mod:`algenta_graph.engine`) is a separate program with errors of its own.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from langgraph.store.memory import InMemoryStore

import algenta_graph
from algenta_graph import errors
from algenta_graph.errors import AlgentaGraphError, DecidedClaim, EscalationAlreadyDecided
from algenta_graph.ledger import AnswerDecision, ClaimAnswer, Entry
from algenta_graph.retrieval.usage import UsageSignal


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(algenta_graph.__path__, "algenta_graph."):
        if info.name.startswith(("algenta_graph.engine", "algenta_graph._")):
            continue
        if info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return names


def test_every_exported_exception_is_defined_in_errors_and_derives_from_the_root() -> None:
    seen: dict[str, list[str]] = {}
    for name in _modules():
        module = importlib.import_module(name)
        for export in getattr(module, "__all__", ()):
            value = getattr(module, export, None)
            if inspect.isclass(value) and issubclass(value, BaseException):
                seen.setdefault(f"{value.__module__}.{value.__qualname__}", []).append(name)
    assert seen, "no exported exception found: the walk is broken"
    wrong = {
        cls: where
        for cls, where in seen.items()
        if not cls.startswith("algenta_graph.errors.")
        or not issubclass(getattr(errors, cls.rsplit(".", 1)[1]), AlgentaGraphError)
    }
    assert wrong == {}


def test_every_error_of_the_module_says_when_it_is_raised() -> None:
    classes = [
        getattr(errors, n)
        for n in errors.__all__
        if inspect.isclass(getattr(errors, n)) and issubclass(getattr(errors, n), BaseException)
    ]
    assert len(classes) >= 15
    undocumented = [c.__name__ for c in classes if "raise" not in (c.__doc__ or "").lower()]
    assert undocumented == []


def test_a_claim_is_what_the_error_reads_and_its_message_names_who_decided() -> None:
    answer = ClaimAnswer(
        operator="ana",
        thread_id="t-1",
        decided_at="2026-01-02T03:04:05+00:00",
        decisions=[AnswerDecision(action="override", type="approve", verdict="approved")],
    )
    claim = Entry(key="k", value=answer, token="tok", host="h", pid=1, at=0.0)
    decided: DecidedClaim = claim  # the ledger's entry satisfies the protocol
    exc = EscalationAlreadyDecided(decided)
    assert exc.claim is claim
    assert str(exc).startswith(
        "escalation already decided by ana (override in thread t-1 at "
        "2026-01-02T03:04:05+00:00, still being applied); "
    )


async def test_a_usage_signal_without_a_store_raises_the_named_error() -> None:
    signal = UsageSignal()
    with pytest.raises(errors.UsageStoreMissing, match="pass store="):
        await signal.arecord("invoice", "send_invoice", profile="execute")
    assert isinstance(errors.UsageStoreMissing("x"), ValueError)
    # with a store it records, and nothing was lost by the failed call
    store = InMemoryStore()
    await signal.arecord("invoice", "send_invoice", profile="execute", store=store)
    assert len(store.search(("algenta_graph", "usage", "execute"))) == 1
