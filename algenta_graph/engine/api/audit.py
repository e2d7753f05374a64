"""The audit export: every audit row, as JSON, JSON lines or CSV, with its SHA-256.

One row per change, written in the same transaction as the change (``README.md``, "The audit
export"); only an operator key may export.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from algenta_graph.engine.api.common import ApiError, caller_key, endpoint
from algenta_graph.engine.auth import KeyRing
from algenta_graph.engine.concurrency import off_loop
from algenta_graph.engine.store import Store
from algenta_graph.engine.store.audit import AUDIT_COLUMNS

EXPORT_FORMATS: dict[str, str] = {
    "json": "application/json",
    "jsonl": "application/x-ndjson",
    "csv": "text/csv; charset=utf-8",
}


def audit_routes(store: Store, keys: KeyRing | None) -> list[Route]:
    """The route of the audit export, for one engine.

    Args:
        store: the engine's store.
        keys: the engine's API keys (an operator's is needed).
    """

    @endpoint
    async def audit_export(request: Request) -> Response:
        caller_key(request, keys, role="operator")
        fmt = request.path_params["fmt"]
        if fmt not in EXPORT_FORMATS:
            raise ApiError(
                404,
                "unknown_export_format",
                f"no audit export format {fmt!r}; formats: {', '.join(EXPORT_FORMATS)}",
            )
        rows = await off_loop(store.audit_rows)
        data = export_bytes(rows, fmt)
        return Response(
            data,
            media_type=EXPORT_FORMATS[fmt],
            headers={
                "X-Content-SHA256": hashlib.sha256(data).hexdigest(),
                "X-Audit-Export-Rows": str(len(rows)),
            },
        )

    return [Route("/v1/audit-logs/export.{fmt}", audit_export, methods=["GET"])]


def export_bytes(rows: list[dict[str, Any]], fmt: str) -> bytes:
    """The audit rows in one export format (``details`` as JSON text in CSV)."""
    if fmt == "json":
        return json.dumps(rows, sort_keys=True).encode()
    if fmt == "jsonl":
        return b"".join(json.dumps(r, sort_keys=True).encode() + b"\n" for r in rows)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(AUDIT_COLUMNS)
    for r in rows:
        writer.writerow(
            [json.dumps(r[c], sort_keys=True) if c == "details" else r[c] for c in AUDIT_COLUMNS]
        )
    return out.getvalue().encode()
