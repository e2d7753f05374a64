"""Build time of ``ToolIndex.add`` on a million tools, phase by phase, for A/B runs.

Run from the repository root (figures in ``bench/RESULTS.md``)::

    python bench/bench_build.py --catalog generated --cache /tmp/gen1m.pkl
    python bench/bench_build.py --catalog near-duplicate --cache /tmp/nd1m.pkl
    python bench/bench_build.py --cache /tmp/gen1m.pkl --site /tmp/main-site   # another build

The catalog is ``bench_million``'s (``generated`` or ``near-duplicate``, ``--size`` tools),
generated once and kept in ``--cache`` (a pickle: later runs load it with the garbage
collector off, about 1-5 s, instead of generating it again). ``--site DIR`` imports
``algenta_graph`` from ``DIR`` first (for example a ``pip install --no-deps --target DIR``
of a wheel built from main), so two builds of the package can be timed alternately by an
outside timer. One line of JSON: the build's wall and CPU seconds, when each phase's last
progress report came (seconds into the build), and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import gc
import json
import pickle
import resource
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--catalog", choices=("generated", "near-duplicate"), default="generated")
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--cache", type=Path, help="pickle of the catalog (written if absent)")
    parser.add_argument("--site", type=Path, help="import algenta_graph from this directory")
    ns = parser.parse_args(argv)
    if ns.site is not None:
        if not (ns.site / "algenta_graph").is_dir():
            raise SystemExit(f"--site {ns.site}: no algenta_graph package there")
        sys.path.insert(0, str(ns.site))
    sys.path.insert(1, str(HERE))
    import algenta_graph
    from algenta_graph.retrieval import ToolIndex

    start = time.perf_counter()
    if ns.cache is not None and ns.cache.exists():
        gc.disable()
        with ns.cache.open("rb") as fh:
            tools: list[dict[str, Any]] = pickle.load(fh)
        gc.enable()
    else:
        import bench_million as bm
        import bench_retrieval as br

        if ns.catalog == "generated":
            tools = br.generate_catalog(ns.size)[0]
        else:
            tools = bm.near_duplicate_catalog(ns.size)[0]
        if ns.cache is not None:
            with ns.cache.open("wb") as fh:
                pickle.dump(tools, fh, protocol=5)
    gc.freeze()  # the catalog's objects are never collected: no collector pass over them
    loaded_s = time.perf_counter() - start
    last: dict[str, float] = {}
    index = ToolIndex()
    start, cpu = time.perf_counter(), time.process_time()

    def progress(phase: str, done: int, total: int) -> None:
        last[phase] = time.perf_counter() - start

    index.add(tools, progress=progress)
    build_s, build_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    result = {
        "package": str(Path(algenta_graph.__file__).parent),
        "tools": len(index),
        "load_s": round(loaded_s, 2),
        "build_s": round(build_s, 2),
        "build_cpu_s": round(build_cpu_s, 2),
        **{f"{phase}_ends_s": round(t, 2) for phase, t in last.items()},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
