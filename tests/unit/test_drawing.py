"""The graph's pictures show its shape, leave no route out, and are the committed ones.

- the main loop draws the handlers as one box: every route of the real graph (sixty-odd) is one
  of its dozen edges, with every label kept (a gate's name as ``<gate>``);
- the denial routes draw each handler, reached by its gate's name from ``governed_tool``; the
  routes every handler shares are drawn once;
- ``docs/graph.dot`` and ``docs/graph-denials.dot`` are what the builder draws now, and the
  committed PNGs are rendered from them (Graphviz, which CI installs: the size of a fresh
  rendering is the committed picture's).
"""

from __future__ import annotations

import importlib.util
import shutil
import struct
from types import ModuleType
from typing import Any

import pytest
from ci_support import in_ci
from repo_paths import REPO

from algenta_graph.drawing import HANDLERS, denial_routes, main_loop, routes
from algenta_graph.governance.gates import GATE_NAMES
from algenta_graph.graph import build_governed_graph
from algenta_graph.testing import OfflineConnection
from algenta_graph.topology import DENIAL_HANDLER_NODES, handler_node_name

DOCS = REPO / "docs"


def _builder() -> Any:
    return build_governed_graph(OfflineConnection())


def _render_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_graph", DOCS / "render_graph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_main_loop_keeps_every_route_in_a_dozen_edges() -> None:
    real = routes(_builder())
    picture = main_loop(_builder())
    assert len(real) > 50 and len(picture.edges) == 12
    drawn = {(e.source, e.target): e.label.split(" / ") for e in picture.edges}
    for route in real:  # every route is an edge of the picture, its labels kept
        source = HANDLERS if route.source in DENIAL_HANDLER_NODES else route.source
        target = HANDLERS if route.target in DENIAL_HANDLER_NODES else route.target
        for label in route.labels:
            general = label
            for gate in GATE_NAMES:
                general = general.replace(gate, "<gate>")
            assert general in drawn[(source, target)], (route, drawn.get((source, target)))
    assert drawn[("governed_tool", "model")] == ["ok", "failed"]
    assert drawn[(HANDLERS, HANDLERS)] == ["then <gate>"]
    assert [line for line in picture.lines() if "then <gate>" in line] == [
        "denial_handler_<gate> --(then <gate>)--> denial_handler_<gate>"
    ]


def test_the_denial_routes_show_each_handler_reached_by_its_gate() -> None:
    picture = denial_routes(_builder())
    fan = [(e.target, e.label) for e in picture.edges if e.source == "governed_tool"]
    assert fan == [(handler_node_name(g), g) for g in GATE_NAMES]
    shared = {(e.source, e.target, e.label) for e in picture.edges if e.group}
    assert shared == {
        ("retrieve_tools", HANDLERS, "<gate> pending"),
        (HANDLERS, "model", "resolved"),
        (HANDLERS, HANDLERS, "then <gate>"),
        (HANDLERS, "__end__", "halt"),
    }
    assert set(DENIAL_HANDLER_NODES) <= set(picture.nodes)


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk comes first
    return width, height


def test_the_committed_pictures_are_the_builders() -> None:
    script = _render_script()
    for name, picture in script.pictures().items():
        source = (DOCS / f"{name}.dot").read_text()
        assert source == picture.dot(), (
            f"docs/{name}.dot is not what the graph draws now: run python docs/render_graph.py"
        )
    if shutil.which("dot") is None:
        if in_ci():
            pytest.fail("Graphviz is not installed in CI (apt-get install graphviz)")
        pytest.skip("Graphviz is not installed (apt-get install graphviz)")
    for name, picture in script.pictures().items():
        committed = (DOCS / f"{name}.png").read_bytes()
        assert _png_size(script.render(picture.dot())) == _png_size(committed), (
            f"docs/{name}.png was not rendered from docs/{name}.dot: run python "
            "docs/render_graph.py"
        )
