"""The graph's view of the tool catalog.

What a run may see, the schemas a model is bound to, and the ``search_tools`` gateway.

One :class:`GovernedCatalog` is built per graph (never per turn) over an open
:class:`~algenta_graph.connection.EngineConnection`: the connection's tools (already filtered by
its profile and scrubbed of ``force`` / ``override_safety``), their model-facing schemas
converted once, and the BM25 index over them.

What a provider sees is provider-valid (:mod:`algenta_graph.retrieval.naming`): every tool is
bound under its model-facing name (``^[a-zA-Z0-9_-]{1,64}$``, stable, unique), with parameters
whose top level is a plain object schema and whose top-level property keys providers accept;
:meth:`GovernedCatalog.real_call` maps a model's call (name and argument keys) back to the real
one. A tool whose schema the providers would reject is left out of binding, retrieval and
search (:attr:`GovernedCatalog.refused` says why) instead of failing every request.

Per turn the model is bound to a bounded set (:meth:`GovernedCatalog.bound_names`): the
``always_include`` base tools (not counted in ``top_k``), the retrieval top-K, at most
:data:`MAX_FOUND_TOOLS` tools found by ``search_tools`` (the most recently found), and
``search_tools`` itself. In a catalog that holds both an engine's tools and other servers',
retrieval binds a tool only when it scores at least :data:`MIXED_CATALOG_FLOOR` of the turn's
best hit: the engine's vocabulary (customers, records, data) overlaps any business tool's, and
a weak match from the other catalog would otherwise fill the top-K (``search_tools`` still finds
every tool).
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, Field, ValidationError

from algenta_graph.connection.client import SEARCH_TOOL
from algenta_graph.errors import UnsupportedToolSchemaError
from algenta_graph.governance.run_settings import RunSettings
from algenta_graph.retrieval.naming import ToolNames, provider_parameters, safe_property_keys

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from algenta_graph.connection.client import EngineClient
    from algenta_graph.retrieval import ToolIndex
    from algenta_graph.retrieval.usage import UsageSignal

__all__ = ["MAX_FOUND_TOOLS", "GovernedCatalog", "SearchToolsArgs"]

logger = logging.getLogger(__name__)

MAX_FOUND_TOOLS = 20
"""At most this many tools found by ``search_tools`` are bound on a step (the most recently
found; one search returns at most 20), so the bound set stays bounded however long a turn
searches."""
_BOUND_CACHE = 256
MIXED_CATALOG_FLOOR = 0.25
"""In a catalog mixing the engine's tools and other servers', the least score (a fraction of the
turn's best hit) at which retrieval binds a tool. Measured on the reference engine beside a
CRM (``tests/integration/test_engineless.py``): it keeps ``query_data`` and ``log_decision``
(which match ``customer`` and ``record``) out of the top-5 of CRM prompts naming an action,
and the CRM's tools out of the engine's prompts."""


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
    """The tools of one graph: lookup, per-run visibility, model binding and search.

    Args:
        connection: the open engine connection whose catalog (``connection.tools``) this is.
        model: the chat model, bound to each step's tools.
        index: the tool index over the catalog (retrieval and ``search_tools``).
        always_include: tools bound on every step whatever retrieval ranks (real or
            model-facing names; each must be in the catalog), still subject to the run's
            profile.
        usage: an optional usage signal (:attr:`usage`).

    Raises:
        TypeError: ``always_include`` is one string, not a list of tool names.
        ValueError: an ``always_include`` tool is not in the catalog, or providers reject its
            schema.
    """

    def __init__(
        self,
        connection: EngineClient,
        model: BaseChatModel,
        index: ToolIndex,
        *,
        always_include: Sequence[str] = (),
        usage: UsageSignal | None = None,
    ):
        self.conn = connection
        self.model = model
        self.index = index
        self.usage = usage
        """Optional usage signal (:mod:`algenta_graph.retrieval.usage`): reranks retrieval by
        what served similar queries before, and learns from every successful call."""
        self.tools: dict[str, BaseTool] = {t.name: t for t in connection.tools}
        self.search_tool = _make_search_tool()
        algenta = [n for n in self.tools if connection.is_algenta_tool(n)]
        self.names = ToolNames([*self.tools, SEARCH_TOOL], algenta=algenta)
        self.mixed = 0 < len(algenta) < len(self.tools)
        """Whether the catalog holds both the engine's tools and other servers' (retrieval
        then binds only hits of at least :data:`MIXED_CATALOG_FLOOR` of the best)."""
        """Real name <-> model-facing name of every tool (and ``search_tools``)."""
        self.arg_keys: dict[str, dict[str, str]] = {}
        """``{real name: {model-facing argument key: real key}}`` for renamed argument keys."""
        self.refused: dict[str, str] = {}
        """Tools left out because providers reject their schema: ``{real name: why}``."""
        self.schemas: dict[str, dict[str, Any]] = {}
        for name, tool in self.tools.items():
            try:
                self.schemas[name] = self._model_schema(name, tool)
            except (UnsupportedToolSchemaError, ValueError, TypeError) as exc:
                self.refused[name] = str(exc)
                logger.warning("not shown to the model: %s", exc)
        self.schemas[SEARCH_TOOL] = self._model_schema(SEARCH_TOOL, self.search_tool)
        self.always_include: tuple[str, ...] = self._resolve_always_include(always_include)
        self._bound: OrderedDict[tuple[str, ...], Runnable[Any, BaseMessage]] = OrderedDict()
        self._warned_no_store = False

    def _model_schema(self, name: str, tool: BaseTool) -> dict[str, Any]:
        """The OpenAI-format schema a model is shown.

        Its name is the model-facing one, its parameters provider-valid.
        """
        spec = convert_to_openai_tool(tool)
        function = dict(spec["function"])
        function["name"] = self.names.model(name)
        parameters = provider_parameters(function.get("parameters"), tool=name)
        function["parameters"], renamed = safe_property_keys(parameters)
        if renamed:
            self.arg_keys[name] = renamed
        return {**spec, "function": function}

    def real_call(self, name: str, args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """A model's call as MCP sees it: the real tool name and the real argument keys.

        The top-level argument keys renamed for providers are mapped back (see
        :func:`~algenta_graph.retrieval.naming.safe_property_keys`).
        """
        real = self.names.real(name)
        keys = self.arg_keys.get(real)
        if not keys:
            return real, dict(args)
        mapped = {k: v for k, v in args.items() if k not in keys}
        mapped.update({keys[k]: v for k, v in args.items() if k in keys})
        return real, mapped

    def _resolve_always_include(self, names: Sequence[str]) -> tuple[str, ...]:
        if isinstance(names, str):
            raise TypeError("always_include must be a list of tool names, not one string")
        resolved: list[str] = []
        for given in names:
            real = self.names.real(given)
            if real == SEARCH_TOOL:
                continue  # always bound anyway
            if real not in self.tools:
                raise ValueError(
                    f"always_include: no tool {given!r} in the catalog (the profile's Algenta "
                    f"tools and the extra servers' tools): {', '.join(sorted(self.tools))}"
                )
            if real in self.refused:
                raise ValueError(f"always_include: {self.refused[real]}")
            if real not in resolved:
                resolved.append(real)
        return tuple(resolved)

    def allowed(self, name: str, run: RunSettings) -> bool:
        """Whether this run may see and call ``name`` (catalog, then the run's profile)."""
        if name not in self.tools or name in self.refused:
            return False
        if run.profile is None or not self.conn.is_algenta_tool(name):
            return True
        return run.profile.allows(name)

    def allow_list(self, run: RunSettings) -> list[str] | None:
        """The names this run may see, or ``None`` when every catalog tool is visible."""
        if run.profile is None and not self.refused:
            return None
        return [n for n in self.tools if self.allowed(n, run)]

    def bound_names(self, selected: Sequence[str], run: RunSettings) -> list[str]:
        """The real names bound on a step, each only when this run may see it.

        ``always_include``, the first ``top_k`` of ``selected`` (retrieval's), the last
        :data:`MAX_FOUND_TOOLS` of the rest (found by ``search_tools``); ``search_tools`` is
        added by :meth:`bound_model`.
        """
        chosen = [n for n in selected if n != SEARCH_TOOL and n not in self.always_include]
        chosen = chosen[: run.top_k] + chosen[run.top_k :][-MAX_FOUND_TOOLS:]
        return [n for n in dict.fromkeys([*self.always_include, *chosen]) if self.allowed(n, run)]

    def bound_model(
        self, names: Sequence[str], run: RunSettings | None = None
    ) -> Runnable[Any, BaseMessage]:
        """The model bound to ``names`` plus ``search_tools`` (a small LRU per selection).

        With ``run``, ``names`` is the step's ``selected_tools`` and the bound set is
        :meth:`bound_names` (base tools added, found tools capped).
        """
        if run is not None:
            names = self.bound_names(names, run)
        key = (
            *dict.fromkeys(n for n in names if n != SEARCH_TOOL and n in self.schemas),
            SEARCH_TOOL,
        )
        bound = self._bound.get(key)
        if bound is None:
            bound = self.model.bind_tools([self.schemas[n] for n in key])
            self._bound[key] = bound
            if len(self._bound) > _BOUND_CACHE:
                self._bound.popitem(last=False)
        else:
            self._bound.move_to_end(key)
        return bound

    def profile_name(self, run: RunSettings) -> str:
        """The profile a run works under (the run's, else the connection's)."""
        return run.profile.name if run.profile is not None else self.conn.profile.name

    def usage_store(self, store: BaseStore | None) -> bool:
        """Whether the usage signal (if any) has a store on this run: its own or ``store``.

        A signal without one (configured, but the graph was compiled without a store and the
        run has none) neither reranks nor learns; that is logged once per catalog.
        """
        if self.usage is None:
            return False
        if self.usage.has_store(store):
            return True
        if not self._warned_no_store:
            self._warned_no_store = True
            logger.warning(
                "usage signal: this run has no store (compile the graph with store=, or serve "
                "it: the LangGraph server supplies one); retrieval is BM25 alone and nothing is "
                "learned"
            )
        return False

    async def retrieve(
        self, query: str, run: RunSettings, store: BaseStore | None = None
    ) -> list[str]:
        """The top-K tool names for ``query`` among the tools this run may see.

        Base tools (``always_include``) are not counted; the usage signal, when there is one,
        reranks them from its history in ``store`` (the run's store; or the signal's own).
        With embeddings, the query is embedded off the event loop.
        """
        if not query:
            return []
        k = run.top_k + len(self.always_include)
        allow = self.allow_list(run)
        if self.usage is not None and self.usage_store(store):
            hits = await self.usage.asearch(
                self.index, query, k, allow, profile=self.profile_name(run), store=store
            )
        else:
            hits = await self.index.asearch(query, k=k, allow=allow)
        if self.mixed and hits and max(h.score for h in hits) > 0:
            least = max(h.score for h in hits) * MIXED_CATALOG_FLOOR
            hits = [h for h in hits if h.score >= least]
        names = [h.tool_id for h in hits if h.tool_id not in self.always_include]
        return names[: run.top_k]

    async def search(
        self, args: Mapping[str, Any], run: RunSettings
    ) -> tuple[str, list[str], bool]:
        """Answer a ``search_tools`` call: (JSON body or error text, real names found, ok).

        Each tool found is listed under the name to call it by (``name``, model-facing) and,
        when that differs, its real MCP name (``mcp_name``).
        """
        try:
            parsed = SearchToolsArgs.model_validate(args)
        except ValidationError as exc:
            return f"Error: invalid search_tools arguments: {validation_problems(exc)}", [], False
        # the query's embedding (if any) off the event loop, as for retrieve_tools
        hits = await self.index.asearch(parsed.query, k=parsed.k, allow=self.allow_list(run))
        found: list[tuple[str, dict[str, Any]]] = []
        for h in hits:
            if h.tool_id not in self.tools:
                continue
            entry: dict[str, Any] = {"name": self.names.model(h.tool_id)}
            if entry["name"] != h.tool_id:
                entry["mcp_name"] = h.tool_id
            entry["description"] = (self.tools[h.tool_id].description or "")[:200]
            entry["score"] = round(h.score, 3)
            found.append((h.tool_id, entry))
        body = json.dumps(
            {"tools": [e for _, e in found], "note": "these tools are callable on your next step"}
        )
        return body, [real for real, _ in found], True
