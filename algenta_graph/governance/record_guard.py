"""No ``update_state`` writes governed records, forks them away, or answers an escalation.

The served graph's ``update_state`` / ``bulk_update_state`` (:func:`guard_records`), for every
caller, with or without auth, refuses (:class:`~algenta_graph.errors.RecordsWriteRefused`, an
HTTP 403 when served):

- any update naming a governed record field (:data:`~algenta_graph.state.RECORD_FIELDS`): in
  its values, in a :class:`~langgraph.types.Command`'s ``update`` (a bulk update's
  ``command``), or in the updates nested in a ``__copy__``;
- any Command that resumes (only an operator's run answers an escalation) or routes
  (``goto``) to a governance node;
- any update from an explicit earlier ``checkpoint_id`` (a fork);
- any update as a governance node (:data:`~algenta_graph.topology.GOVERNANCE_NODES`), named
  or, with ``as_node=None``, inferred by LangGraph as the last node that ran;
- any update at all while a governance node is due on the thread (its state's ``next``): a
  pending escalation is answered only by an operator's resume, and an unfinished governed step
  only by continuing the run.

Runs are unaffected: nodes write records as before (``docs/ARCHITECTURE.md``, invariant 10).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, Send

from algenta_graph._langgraph import infer_as_node, rebuild_as, state_checkpointer
from algenta_graph.errors import RecordsWriteRefused
from algenta_graph.state import RECORD_FIELDS
from algenta_graph.topology import DENIAL_HANDLER_NODES, GOVERNANCE_NODES

if TYPE_CHECKING:
    from langgraph.checkpoint.base import CheckpointTuple
    from langgraph.types import StateSnapshot

__all__ = ["guard_records"]


_COPY = "__copy__"
"""LangGraph's ``as_node`` that copies the latest checkpoint, then applies the ``(values,
as_node)`` pairs listed as its values."""


def _updates(supersteps: Any) -> list[tuple[Any, Any]]:
    """Every ``(values, as_node)`` of ``supersteps``, including those nested in a copy's."""
    found: list[tuple[Any, Any]] = []
    for step in supersteps or ():
        for update in step or ():
            # a StateUpdate, or any (values, as_node[, task_id]) sequence, as LangGraph reads it
            fields: Sequence[Any] = update
            values, as_node, *_ = (*fields, None, None)
            found.append((values, as_node))
            if as_node == _COPY and _is_list(values):
                found.extend(_updates([[item for item in values if _is_list(item)]]))
    return found


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _records_written(values: Any) -> list[str]:
    """The governed record fields an update's values would write, however they are shaped.

    A mapping, a :class:`~langgraph.types.Command`'s ``update``, a list of either or of
    ``(field, value)`` pairs, or an object with the fields as attributes.
    """
    if values is None:
        return []
    if isinstance(values, Command):
        return _records_written(values.update)
    if isinstance(values, Mapping):
        return [f for f in RECORD_FIELDS if f in values]
    if _is_list(values):
        written: list[str] = []
        for item in values:
            if _is_list(item) and len(item) == 2 and isinstance(item[0], str):
                written += [item[0]] if item[0] in RECORD_FIELDS else []
            else:
                written += _records_written(item)
        return [f for f in RECORD_FIELDS if f in written]
    return [f for f in RECORD_FIELDS if getattr(values, f, None) is not None]


def _command_refusal(values: Any) -> str | None:
    """Why a Command in an update's values is refused: it resumes, or routes to governance."""
    commands = [values] if isinstance(values, Command) else []
    if _is_list(values):
        commands += [item for item in values if isinstance(item, Command)]
    for command in commands:
        if command.resume is not None:
            return (
                "update_state with a resume is refused: an escalation is answered only by an "
                'operator\'s resume (a run with command={"resume": ...})'
            )
        goto: Any = command.goto
        targets: Sequence[Any] = goto if _is_list(goto) else [goto]
        for target in targets:
            node = target.node if isinstance(target, Send) else target
            if node in GOVERNANCE_NODES:
                return (
                    f"update_state with a Command to {node!r} is refused: it is a governance "
                    "node, entered only by the graph's own routing"
                )
    return None


def _governance_refusal(as_node: Any, inferred: bool = False) -> str | None:
    if as_node not in GOVERNANCE_NODES:
        return None
    named = f"the last node that ran, {as_node!r}" if inferred else repr(as_node)
    return (
        f"update_state as {named} is refused: it is a governance node, entered only by a run; "
        "its results are the governed records and messages it writes itself, and an escalation "
        "is answered only by an operator's resume"
    )


def _refusal(config: Any, supersteps: Any) -> str | None:
    """Why an update is refused, from the update alone (no state is read)."""
    configurable = (config or {}).get("configurable") or {}
    if configurable.get("checkpoint_id"):
        return (
            "update_state from an earlier checkpoint is refused: a fork would drop the "
            "governed records written after it"
        )
    for values, as_node in _updates(supersteps):
        written = _records_written(values)
        if written:
            return (
                f"update_state on governed records ({', '.join(written)}) is refused: "
                "they are written only by the graph's own nodes"
            )
        refused = _governance_refusal(as_node) or _command_refusal(values)
        if refused:
            return refused
    return None


def _pending_refusal(state: StateSnapshot) -> str | None:
    """Why no update may change a thread in this state: a governance node is due on it."""
    waiting = sorted(
        {t.name for t in state.tasks if t.name in DENIAL_HANDLER_NODES and t.interrupts}
    )
    if waiting:
        return (
            f"update_state is refused: the thread has a pending escalation ({', '.join(waiting)}) "
            "waiting for an operator; it is answered only by an operator's resume "
            '(command={"resume": ...}), and no update may replace or complete it'
        )
    due = sorted({n for n in state.next if n in GOVERNANCE_NODES})
    if due:
        return (
            f"update_state is refused: the thread's governed step is unfinished ({', '.join(due)} "
            "is due); continue the run (a run without input) instead, so that it finishes and "
            "records what it did"
        )
    return None


def _inferred_refusal(
    graph: CompiledStateGraph[Any, Any, Any, Any], saved: CheckpointTuple | None
) -> str | None:
    """Why an ``as_node=None`` update is refused, if it is.

    LangGraph would attribute it to the last node that ran (its own rule, on the latest
    checkpoint), and that is a governance node (a run that halted in one).
    """
    try:
        inferred = infer_as_node(graph, saved.checkpoint["versions_seen"] if saved else {})
    except LookupError:  # pragma: no cover - a LangGraph without this rule: fail closed
        return "update_state without as_node is refused here: name the node it acts as (as_node)"
    return _governance_refusal(inferred, inferred=True)


def _unnamed(supersteps: Any) -> bool:
    return any(as_node is None for _, as_node in _updates(supersteps))


class _RecordGuardedGraph(CompiledStateGraph[Any, Any, Any, Any]):
    """The compiled graph, with a guarded ``update_state``.

    It cannot write governed records, write as a governance node, or change a thread on which a
    governance node is due.
    """

    def bulk_update_state(self, config: Any, supersteps: Any) -> Any:
        refused = _refusal(config, supersteps) or _pending_refusal(self.get_state(config))
        if not refused and _unnamed(supersteps):
            saved = state_checkpointer(self, config).get_tuple(config)
            refused = _inferred_refusal(self, saved)
        if refused:
            raise RecordsWriteRefused(refused)
        return super().bulk_update_state(config, supersteps)

    async def abulk_update_state(self, config: Any, supersteps: Any) -> Any:
        refused = _refusal(config, supersteps) or _pending_refusal(await self.aget_state(config))
        if not refused and _unnamed(supersteps):
            saved = await state_checkpointer(self, config).aget_tuple(config)
            refused = _inferred_refusal(self, saved)
        if refused:
            raise RecordsWriteRefused(refused)
        return await super().abulk_update_state(config, supersteps)


def guard_records(
    graph: CompiledStateGraph[Any, Any, Any, Any],
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Guard ``graph``'s state updates; runs are unaffected.

    Its ``(a)update_state`` / ``(a)bulk_update_state`` then refuse what the module docs list,
    raising :class:`~algenta_graph.errors.RecordsWriteRefused`.

    Args:
        graph: the compiled governed graph.

    Returns:
        ``graph`` rebuilt as a guarded graph (a guarded one is returned as it is).

    Raises:
        TypeError: a LangGraph release renamed the compiled graph's attributes, so it cannot be
            rebuilt (fails closed: nothing is served unguarded).
    """
    if isinstance(graph, _RecordGuardedGraph):
        return graph
    return rebuild_as(graph, _RecordGuardedGraph)
