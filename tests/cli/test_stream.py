"""``algenta-graph run`` prints the model's answer as it streams, once.

A model that streams (here the offline demo model, made to stream its answer word by word)
has its answer written chunk by chunk as the chunks arrive; a model that does not stream has
it written whole; in both cases exactly once. The graph runs against the reference engine
over real HTTP with a real SQLite checkpoint file.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessageChunk, BaseMessage, ToolCallChunk
from langchain_core.outputs import ChatGenerationChunk

from algenta_graph.cli.run import run_thread
from algenta_graph.engine import ReferenceEngine
from algenta_graph.graph import governed_agent
from algenta_graph.models import DemoChatModel
from algenta_graph.serving.checkpointer import open_checkpointer

pytestmark = pytest.mark.timeout(180)

PROMPT = "What can this engine do? Show me its contract."


class StreamingDemoModel(DemoChatModel):
    """The demo model, streaming: its text word by word, its tool calls in one chunk."""

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Iterator[ChatGenerationChunk]:
        tools = [t["function"] for t in kw.get("tools", []) if t.get("type") == "function"]
        reply = self._reply(messages, tools)
        if reply.tool_calls:
            # "type" as AIMessageChunk sets it (the same chunk with or without it)
            calls: list[ToolCallChunk] = [
                {
                    "name": c["name"],
                    "args": json.dumps(c["args"]),
                    "id": c["id"],
                    "index": i,
                    "type": "tool_call_chunk",
                }
                for i, c in enumerate(reply.tool_calls)
            ]
            chunk = ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=calls))
            if run_manager:
                run_manager.on_llm_new_token("", chunk=chunk)
            yield chunk
            return
        text = str(reply.content)
        words = text.split(" ")
        for i, word in enumerate(words):
            piece = word if i == len(words) - 1 else word + " "
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
            if run_manager:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk


class Recorder(io.StringIO):
    """A text stream that remembers every write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, s: str) -> int:
        self.writes.append(s)
        return super().write(s)


async def _turn(engine: ReferenceEngine, model: Any, db: Path) -> tuple[Recorder, str]:
    out = Recorder()
    async with (
        open_checkpointer(str(db)) as saver,
        governed_agent(model, base_url=engine.url, profile="execute", checkpointer=saver) as g,
    ):
        code = await run_thread(g, "t", prompt=PROMPT, resume=None, interactive=False, out=out)
        assert code == 0
        state = await g.aget_state({"configurable": {"thread_id": "t"}})
    answer = state.values["messages"][-1]
    assert answer.type == "ai" and not answer.tool_calls
    return out, str(answer.content)


async def test_a_streaming_model_is_printed_as_it_streams_once(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    out, answer = await _turn(engine, StreamingDemoModel(), tmp_path / "s.sqlite")
    text = out.getvalue()
    first_line = answer.strip().splitlines()[0]
    assert text.count(first_line) == 1, text
    assert "calls get_contract" in text
    # the answer arrived in many writes, one per streamed word
    words = answer.split()
    streamed = [w for w in out.writes if w.strip() and w.strip() in words]
    assert len(streamed) >= min(len(words), 5), out.writes


async def test_a_model_that_does_not_stream_is_printed_once(
    engine: ReferenceEngine, tmp_path: Path
) -> None:
    out, answer = await _turn(engine, DemoChatModel(), tmp_path / "p.sqlite")
    text = out.getvalue()
    for line in answer.strip().splitlines():
        assert text.count(line.strip()) == 1, (line, text)
