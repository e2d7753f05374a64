"""Render the graph's two pictures offline, from the real graph builder.

``docs/graph.png`` is the main loop (the denial handlers as one box) and
``docs/graph-denials.png`` the denial routes (one handler per gate), both drawn by
:mod:`algenta_graph.drawing`; their Graphviz sources are ``docs/graph.dot`` and
``docs/graph-denials.dot``, which ``tests/unit/test_drawing.py`` holds against the builder.
The pictures depend only on the graph's nodes and edges, not on an engine's catalog, so the
builder is given an empty offline catalog (``algenta_graph.testing.OfflineConnection``).

Needs Debian's Graphviz (``apt-get install graphviz``); run ``python docs/render_graph.py``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from algenta_graph.drawing import Picture, denial_routes, main_loop
from algenta_graph.graph import build_governed_graph
from algenta_graph.testing import OfflineConnection

DOCS = Path(__file__).resolve().parent


def pictures() -> dict[str, Picture]:
    """Each picture by the name of its files in ``docs/`` (``<name>.dot``, ``<name>.png``)."""
    builder = build_governed_graph(OfflineConnection())
    return {"graph": main_loop(builder), "graph-denials": denial_routes(builder)}


def render(dot: str) -> bytes:
    """The PNG Graphviz's ``dot`` renders from ``dot`` (DOT text)."""
    done = subprocess.run(
        ["dot", "-Tpng"], input=dot.encode(), capture_output=True, check=True, timeout=120
    )
    return done.stdout


if __name__ == "__main__":
    for name, picture in pictures().items():
        source = picture.dot()
        (DOCS / f"{name}.dot").write_text(source)
        (DOCS / f"{name}.png").write_bytes(render(source))
        print(f"wrote docs/{name}.dot and docs/{name}.png")
