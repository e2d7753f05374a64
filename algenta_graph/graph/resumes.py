"""Every answer to an escalation takes effect, or is refused by name: never a silent success.

An operator's answer is a resume (``Command(resume=...)``: the library's ``ainvoke``, the served
API's ``command={"resume": ...}``, the inbox). LangGraph accepts a resume on a thread with
nothing pending and runs nothing, and a denial handler that meets an escalation already decided
(in a copy, by another worker, by an answer before this one) completes that answer instead of
this one. Both would look like success. The compiled graph (:func:`check_resumes`, a subclass
made by :func:`~algenta_graph._langgraph.rebuild_as`) checks every resume
(``docs/ARCHITECTURE.md``, invariant 12):

- **nothing waits** on the thread: refused before anything is written, with
  :class:`~algenta_graph.errors.EscalationAlreadyDecided` naming the answer its records last
  took (who, how, where, when), or :class:`~algenta_graph.errors.NoEscalationPending`; served,
  the thread's metadata is set to what its state says (nothing waits; who decided), where
  another process's answer left it saying otherwise;
- **an escalation waits**: the run goes on with an
  :class:`~algenta_graph.nodes.claiming.AnswerReport` in its config. A handler that completes
  another answer than this resume's reports it there; once the run has written that answer's
  records (the thread's records end true), the resume is refused with
  :class:`~algenta_graph.errors.EscalationAlreadyDecided` naming it. An answer still being
  applied by a live claimant is refused by the handler itself, nothing written.

LangGraph's strict resume (its private switch, through :mod:`algenta_graph._langgraph`) is set
too: a resume map naming an interrupt that no longer waits is refused before it is saved.

Example::

    graph = check_resumes(graph)
    await graph.ainvoke(Command(resume=answer), cfg)   # EscalationAlreadyDecided: told who won
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel
from langgraph.types import Command, StateSnapshot

from algenta_graph._langgraph import checkpointer_of, rebuild_as, strict_resume
from algenta_graph.errors import EscalationAlreadyDecided, NoEscalationPending
from algenta_graph.governance.visibility import set_waiting
from algenta_graph.nodes.claiming import ANSWER_REPORT, AnswerReport

__all__ = ["check_resumes", "refusal", "waiting_escalations"]

_G = TypeVar("_G", bound=Pregel[Any, Any, Any, Any])


def waiting_escalations(state: StateSnapshot) -> frozenset[str]:
    """The escalations the thread's pending interrupts ask about."""
    found: set[str] = set()
    for task in state.tasks:
        for asked in task.interrupts:
            value = getattr(asked, "value", None)
            items = value.get("escalations") if isinstance(value, Mapping) else None
            for item in items or ():
                if isinstance(item, Mapping) and item.get("escalation_id"):
                    found.add(str(item["escalation_id"]))
    return frozenset(found)


@dataclass(frozen=True)
class _Recorded:
    """The answer a thread's records last took (what the refusal names)."""

    operator: str
    thread_id: str | None
    decided_at: str | None
    summary: str


@dataclass(frozen=True)
class _RecordedClaim:
    value: _Recorded
    done: bool = True


def refusal(
    values: Mapping[str, Any] | None, thread: str | None
) -> EscalationAlreadyDecided | NoEscalationPending:
    """Why a resume on a thread where nothing waits is refused: who decided last, and when.

    ``values``: the thread's state values (its ``operator_decisions`` name the last answer).
    The served API refuses such a resume before its run with this message
    (:mod:`algenta_graph.serving.answer_check`).
    """
    decisions: Sequence[Mapping[str, Any]] = (values or {}).get("operator_decisions") or []
    if not decisions:
        return NoEscalationPending(
            f"no escalation waits for an operator on thread {thread}, and none was decided: "
            "this answer answers nothing, and nothing was written"
        )
    last = decisions[-1]
    answer = [  # the last answer's decisions (one answer may decide several calls)
        d
        for d in decisions
        if (d.get("operator"), d.get("decided_at"))
        == (last.get("operator"), last.get("decided_at"))
    ]
    return EscalationAlreadyDecided(
        _RecordedClaim(
            _Recorded(
                operator=str(last.get("operator") or "?"),
                thread_id=str(last.get("answered_in_thread") or thread or "") or None,
                decided_at=last.get("decided_at"),
                summary=", ".join(str(d.get("action")) for d in answer),
            )
        )
    )


class _ResumeChecked(Pregel[Any, Any, Any, Any]):
    """A compiled graph whose resumes answer what waits, or are refused (see the module docs)."""

    async def astream(  # Pregel's keywords are passed through as they are
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """Pregel's ``astream``; a resume is checked before and after it runs."""
        configurable = dict((config or {}).get("configurable") or {})
        answering = isinstance(input, Command) and input.resume is not None
        if not answering or not (checkpointer_of(config) or self.checkpointer):
            async for chunk in super().astream(input, config, **kwargs):
                yield chunk
            return
        state = await self.aget_state(cast(RunnableConfig, config))
        thread = configurable.get("thread_id")
        waiting = waiting_escalations(state)
        if not waiting:
            # served, the thread's metadata follows its state: nothing waits (it may still say
            # so where another process decided it), and who decided
            values = state.values or {}
            decided = [str(d.get("operator")) for d in values.get("operator_decisions") or []]
            await set_waiting(str(thread) if thread else None, [], decided_by=decided)
            raise refusal(values, str(thread) if thread is not None else None)
        report = AnswerReport(waiting)
        checked: RunnableConfig = {
            **(config or {}),
            "configurable": {**configurable, **strict_resume(), ANSWER_REPORT: report},
        }
        async for chunk in super().astream(input, checked, **kwargs):
            yield chunk
        if report.lost_to is not None:
            raise EscalationAlreadyDecided(report.lost_to)


_CHECKED: dict[type[Any], type[Any]] = {}


def check_resumes(graph: _G) -> _G:
    """``graph`` rebuilt so that every resume takes effect or is refused (idempotent).

    Raises:
        TypeError: a LangGraph release renamed the compiled graph's attributes (fails closed:
            the graph is not served unchecked).
    """
    if isinstance(graph, _ResumeChecked):
        return graph
    base = type(graph)
    cls = _CHECKED.get(base)
    if cls is None:
        cls = _CHECKED[base] = type(f"ResumeChecked{base.__name__}", (_ResumeChecked, base), {})
    return cast(_G, rebuild_as(graph, cls))
