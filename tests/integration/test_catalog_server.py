"""The generated large-catalog MCP server, over real streamable HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import pytest
from mcp import ClientSession

from algenta_graph.catalog_server import MAX_SIZE, CatalogServer, generate_tools


def test_generated_catalog_is_deterministic_and_distinct() -> None:
    first, again = generate_tools(), generate_tools()
    assert len(first) == MAX_SIZE == 10_000
    assert [t.model_dump() for t in first] == [t.model_dump() for t in again]
    assert len({t.name for t in first}) == MAX_SIZE
    assert all(t.description and t.inputSchema["type"] == "object" for t in first)
    assert [t.name for t in generate_tools(3)] == [t.name for t in first[:3]]


@pytest.mark.parametrize("size", [0, -1, MAX_SIZE + 1, 2.5, True, "10"])
def test_bad_size_is_refused(size: object) -> None:
    with pytest.raises(ValueError, match="size must be an integer"):
        generate_tools(size)  # type: ignore[arg-type]


async def test_lists_and_calls_tools_over_mcp(
    mcp_session: Callable[..., AbstractAsyncContextManager[ClientSession]],
) -> None:
    async with CatalogServer(size=500) as catalog, mcp_session(catalog.url) as session:
        assert catalog.running
        listed = await session.list_tools()
        assert [t.name for t in listed.tools] == [t.name for t in catalog.tools]
        ok = await session.call_tool(
            "crm_reject_contacts", {"contact_id": "c-1", "reason": "duplicate"}
        )
        assert not ok.isError
        assert ok.structuredContent == {
            "tool": "crm_reject_contacts",
            "arguments": {"contact_id": "c-1", "reason": "duplicate"},
            "ok": True,
        }
        assert json.loads(ok.content[0].text)["ok"] is True  # type: ignore[union-attr]
        missing = await session.call_tool("crm_reject_contacts", {"contact_id": "c-1"})
        assert missing.isError
        assert "reason" in missing.content[0].text  # type: ignore[union-attr]
        unknown = await session.call_tool("no_such_tool", {})
        assert unknown.isError
        assert "no_such_tool" in unknown.content[0].text  # type: ignore[union-attr]
    assert not catalog.running
