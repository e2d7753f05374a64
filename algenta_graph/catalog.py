"""The graph's view of the tool catalog: what a run may see, the schemas a model is bound to,
and the ``search_tools`` gateway.

One :class:`GovernedCatalog` is built per graph (never per turn) over an open
:class:`~algenta_graph.connection.EngineConnection`: the connection's tools (already filtered by
its profile and scrubbed of ``force`` / ``override_safety``), their model-facing schemas
converted once, and the BM25 index over them.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, Field, ValidationError

from algenta_graph.run_settings import RunSettings

if TYPE_CHECKING:
    from algenta_graph.connection import EngineConnection
    from algenta_graph.retrieval import ToolIndex

__all__ = ["EXECUTE_TOOL", "SEARCH_TOOL", "GovernedCatalog", "SearchToolsArgs"]

SEARCH_TOOL = "search_tools"
EXECUTE_TOOL = "execute_decision"
_BOUND_CACHE = 256


class SearchToolsArgs(BaseModel):
    """The arguments of the ``search_tools`` gateway."""

    query: str = Field(description="What you need a tool for, in a few words.")
    k: int = Field(default=5, ge=1, le=20, description="How many tools to return.")


async def _search_tools_placeholder(query: str, k: int = 5) -> str:
    raise RuntimeError("search_tools is answered inside the governed graph, not executed")


def _make_search_tool() -> BaseTool:
    return StructuredTool.from_function(
        coroutine=_search_tools_placeholder,
        name=SEARCH_TOOL,
        description=(
            "Search the catalog of tools available to you (BM25 over names, descriptions and "
            "parameters). The tools found become callable on your next step. Use it when none "
            "of your current tools fits the task."
        ),
        args_schema=SearchToolsArgs,
    )


def validation_problems(exc: ValidationError) -> str:
    """A pydantic error as one line: ``field: message; ...``."""
    return "; ".join(
        f"{'.'.join(map(str, e['loc'])) or 'payload'}: {e['msg']}" for e in exc.errors()
    )


class GovernedCatalog:
    """The tools of one graph: lookup, per-run visibility, model binding and search."""

    def __init__(self, connection: EngineConnection, model: BaseChatModel, index: ToolIndex):
        self.conn = connection
        self.model = model
        self.index = index
        self.tools: dict[str, BaseTool] = {t.name: t for t in connection.tools}
        self.search_tool = _make_search_tool()
        self.schemas: dict[str, dict[str, Any]] = {
            name: convert_to_openai_tool(tool) for name, tool in self.tools.items()
        }
        self.schemas[SEARCH_TOOL] = convert_to_openai_tool(self.search_tool)
        self._bound: OrderedDict[tuple[str, ...], Runnable[Any, BaseMessage]] = OrderedDict()

    def allowed(self, name: str, run: RunSettings) -> bool:
        """Whether this run may see and call ``name`` (catalog, then the run's profile)."""
        if name not in self.tools:
            return False
        if run.profile is None or not self.conn.is_algenta_tool(name):
            return True
        return run.profile.allows(name)

    def allow_list(self, run: RunSettings) -> list[str] | None:
        """The names this run may see, or ``None`` when the run does not narrow the catalog."""
        if run.profile is None:
            return None
        return [n for n in self.tools if self.allowed(n, run)]

    def bound_model(self, names: Sequence[str]) -> Runnable[Any, BaseMessage]:
        """The model bound to ``names`` plus ``search_tools`` (a small LRU per selection)."""
        key = (*dict.fromkeys(n for n in names if n != SEARCH_TOOL), SEARCH_TOOL)
        bound = self._bound.get(key)
        if bound is None:
            bound = self.model.bind_tools([self.schemas[n] for n in key])
            self._bound[key] = bound
            if len(self._bound) > _BOUND_CACHE:
                self._bound.popitem(last=False)
        else:
            self._bound.move_to_end(key)
        return bound

    def retrieve(self, query: str, run: RunSettings) -> list[str]:
        """The top-K tool names for ``query`` among the tools this run may see."""
        if not query:
            return []
        return [
            h.tool_id for h in self.index.search(query, k=run.top_k, allow=self.allow_list(run))
        ]

    def search(self, args: Mapping[str, Any], run: RunSettings) -> tuple[str, list[str], bool]:
        """Answer a ``search_tools`` call: (JSON body or error text, names found, ok)."""
        try:
            parsed = SearchToolsArgs.model_validate(args)
        except ValidationError as exc:
            return f"Error: invalid search_tools arguments: {validation_problems(exc)}", [], False
        hits = self.index.search(parsed.query, k=parsed.k, allow=self.allow_list(run))
        found = [
            {
                "name": h.tool_id,
                "description": (self.tools[h.tool_id].description or "")[:200],
                "score": round(h.score, 3),
            }
            for h in hits
            if h.tool_id in self.tools
        ]
        body = json.dumps({"tools": found, "note": "these tools are callable on your next step"})
        return body, [str(f["name"]) for f in found], True
