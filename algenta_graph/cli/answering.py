"""An operator's answer given on the command line: ``run --resume JSON`` and the prompt's.

Every shape the graph accepts (:mod:`algenta_graph.nodes.answers`) is taken as it is:
LangChain's decisions (``{"decisions": [{"type": "approve"}]}``), one decision in ``per_call``
mode (``{"type": "approve"}``), the short form (``{"action": "override" | "decline"}``) and
Agent Inbox's list of responses. An answer that names no operator is recorded under the OS user
running the command (:func:`named_operator`), as the prompt's empty name is, and the command says
so; the graph itself checks everything else. A refused answer is told in the graph's own words,
one line (:func:`refusal`), never as pydantic's report.
"""

from __future__ import annotations

import argparse
import getpass
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["answer_arg", "named_operator", "os_user", "refusal"]

_SHAPES = (
    '{"decisions": [{"type": "approve"}]}, {"type": "approve"} (per_call), '
    '{"action": "override" | "decline"} or Agent Inbox\'s [{"type": "accept", "args": null}]'
)


def answer_arg(text: str) -> dict[str, Any] | list[Any]:
    """An argparse type: ``--resume``'s JSON, an object or Agent Inbox's list.

    The shape itself is the graph's to check (its refusal names what is wrong).
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not valid JSON ({exc.msg} at character {exc.pos})"
        ) from None
    if not isinstance(value, dict | list):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an answer: give a JSON object or list, e.g. {_SHAPES}"
        )
    return value


def os_user() -> str:
    """The name of the OS user running the command ("" when the system has none for it)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (e.g. a bare container)
        return ""


def _names_operator(answer: Any) -> bool:
    if isinstance(answer, Mapping):
        named = answer.get("operator")
        inner = answer.get("decisions")
        return (isinstance(named, str) and bool(named.strip())) or (
            isinstance(inner, list) and any(_names_operator(d) for d in inner)
        )
    if isinstance(answer, list):
        return any(_names_operator(r) for r in answer)
    return False


def named_operator(answer: Any, user: str) -> tuple[Any, bool]:
    """``answer`` naming ``user`` as its operator when it names none; whether it was added.

    The operator goes where each shape carries it: at the top of an object, on every response
    of Agent Inbox's list. An answer of no known shape is returned as it is (the graph refuses
    it, naming why).

    >>> named_operator({"decisions": [{"type": "approve"}]}, "ana")
    ({'decisions': [{'type': 'approve'}], 'operator': 'ana'}, True)
    >>> named_operator([{"type": "accept", "args": None}], "ana")
    ([{'type': 'accept', 'args': None, 'operator': 'ana'}], True)
    >>> named_operator({"action": "decline", "operator": "bo"}, "ana")
    ({'action': 'decline', 'operator': 'bo'}, False)
    """
    if not user or _names_operator(answer):
        return answer, False
    if isinstance(answer, Mapping):
        return {**answer, "operator": user}, True
    if isinstance(answer, list) and all(isinstance(r, Mapping) for r in answer):
        return [{**r, "operator": user} for r in answer], True
    return answer, False


def refusal(exc: Exception) -> str:
    """What was wrong with a refused answer, in the graph's words, on one line.

    A pydantic ``ValidationError`` (the interrupt's ``response_schema``) lists each problem with
    where it is in the answer; its report's boilerplate (the model's name, the input echoed, the
    documentation link) is left out.
    """
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return " ".join(str(exc).split())
    problems: list[str] = []
    for error in exc.errors(include_url=False, include_input=False):
        message = str(error["msg"]).removeprefix("Value error, ")
        where = ".".join(str(p) for p in _answer_location(error["loc"]))
        line = f"{where}: {message}" if where and not message.startswith(where) else message
        if line not in problems:
            problems.append(line)
    return "; ".join(problems) or "the answer was refused"


_FORMS = frozenset({"hitl", "short", "inbox", "decision"})
"""The tags of the answer's forms (``nodes/answers.py``), first in pydantic's locations."""
_DECISION_TYPES = frozenset({"approve", "edit", "reject", "respond"})


def _answer_location(loc: tuple[int | str, ...]) -> list[int | str]:
    """Where in the answer an error is: pydantic's location without the unions' tags.

    >>> _answer_location(("hitl", "decisions", 0, "approve", "message"))
    ['decisions', 0, 'message']
    >>> _answer_location(("decision", "edit", "edited_action", "name"))
    ['edited_action', 'name']
    """
    parts = list(loc[1:] if loc and loc[0] in _FORMS else loc)
    after_tag = bool(loc) and loc[0] == "decision"
    out: list[int | str] = []
    for part in parts:
        tagged = (after_tag or (bool(out) and isinstance(out[-1], int))) and (
            part in _DECISION_TYPES
        )
        if not tagged and not str(part).startswith("function-"):
            out.append(part)
        after_tag = False
    return out
