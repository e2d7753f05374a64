"""What the index accepts as a tool: LangChain tools, MCP tools and dicts, reduced to
``(name, description, schema)``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

from langchain_core.tools import BaseTool
from mcp.types import Tool as McpTool

__all__ = ["ToolLike", "tool_parts"]

ToolLike: TypeAlias = BaseTool | McpTool | Mapping[str, Any]
"""What `ToolIndex.add` accepts: a LangChain tool, an MCP tool, or a dict."""

_SCHEMA_KEYS = ("input_schema", "inputSchema", "parameters", "args_schema")


def _describe(tool: object) -> str:
    text = repr(tool)
    return text if len(text) <= 80 else text[:77] + "..."


def _langchain_parts(tool: BaseTool) -> tuple[str, str, Any]:
    name = tool.name
    try:
        schema: Any = tool.tool_call_schema
        if schema is not None and not isinstance(schema, Mapping):
            schema = schema.model_json_schema()
    except Exception as exc:
        raise ValueError(f"tool {name!r}: cannot read its input schema: {exc}") from exc
    return name, tool.description or "", schema


def _mapping_parts(tool: Mapping[str, Any]) -> tuple[str, str, Any]:
    if "name" not in tool and isinstance(tool.get("function"), Mapping):
        tool = tool["function"]  # OpenAI style: {"type": "function", "function": {...}}
    name = tool.get("name")
    if not isinstance(name, str):
        raise ValueError(f"tool dict needs a string 'name', got {_describe(tool)}")
    schema: Any = None
    for key in _SCHEMA_KEYS:
        if key in tool:
            schema = tool[key]
            break
    if isinstance(schema, Mapping) and not isinstance(schema, dict):
        schema = dict(schema)
    return name, tool.get("description") or "", schema


def tool_parts(tool: object) -> tuple[str, str, Any]:
    """``(name, description, schema)`` of one tool, or a ValueError saying what is wrong."""
    if isinstance(tool, BaseTool):
        return _langchain_parts(tool)
    if isinstance(tool, McpTool):
        return tool.name, tool.description or "", tool.inputSchema
    if isinstance(tool, Mapping):
        return _mapping_parts(tool)
    raise ValueError(
        f"unsupported tool of type {type(tool).__name__}: expected a LangChain BaseTool, "
        f"an mcp.types.Tool or a dict with 'name', 'description', 'input_schema' "
        f"({_describe(tool)})"
    )
