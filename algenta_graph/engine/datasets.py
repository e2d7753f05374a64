"""Built-in sample datasets with real rows, and the filter language ``query_data`` accepts.

The rows are generated once from a fixed seed, so every engine serves the same data.

>>> rows = query("inventory", filters={"on_hand": {"lt": 20}}, order_by="on_hand", limit=2)
>>> [r["on_hand"] < 20 for r in rows["rows"]]
[True, True]
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from datetime import date, timedelta
from typing import Any

from algenta_graph.engine.errors import EngineToolError

Row = dict[str, Any]

_REGIONS = ("north", "south", "east", "west")
_PRODUCTS = (
    ("SKU-100", "standard widget", 4.20),
    ("SKU-101", "deluxe widget", 9.75),
    ("SKU-200", "gear assembly", 18.40),
    ("SKU-201", "gear housing", 7.10),
    ("SKU-300", "control board", 42.00),
    ("SKU-301", "sensor pack", 27.50),
    ("SKU-400", "power supply", 33.90),
    ("SKU-401", "cable harness", 5.60),
)
_WAREHOUSES = ("ams-1", "chi-2", "sgp-1")
_CUSTOMERS = (
    "acme corp",
    "globex",
    "initech",
    "umbrella retail",
    "stark supply",
    "wayne logistics",
    "tyrell farms",
    "soylent foods",
    "hooli",
    "vandelay imports",
)
_SEGMENTS = ("enterprise", "mid-market", "smb")


def _build() -> dict[str, list[Row]]:
    rng = random.Random(20260101)
    customers: list[Row] = []
    for i, name in enumerate(_CUSTOMERS):
        customers.append(
            {
                "customer_id": f"cus_{i + 1:03d}",
                "name": name,
                "segment": _SEGMENTS[i % len(_SEGMENTS)],
                "region": _REGIONS[i % len(_REGIONS)],
                "lifetime_value": round(rng.uniform(5_000, 250_000), 2),
            }
        )
    inventory: list[Row] = []
    for sku, name, cost in _PRODUCTS:
        for wh in _WAREHOUSES:
            inventory.append(
                {
                    "sku": sku,
                    "name": name,
                    "warehouse": wh,
                    "on_hand": rng.randint(0, 400),
                    "reorder_point": rng.choice((25, 50, 75, 100)),
                    "unit_cost": cost,
                    "lead_time_days": rng.randint(3, 30),
                }
            )
    orders: list[Row] = []
    start = date(2026, 9, 1)
    for i in range(60):
        sku, _name, cost = rng.choice(_PRODUCTS)
        qty = rng.randint(1, 120)
        price = round(cost * rng.uniform(1.3, 2.2), 2)
        cust = rng.choice(customers)
        orders.append(
            {
                "order_id": f"ord_{1001 + i}",
                "customer_id": cust["customer_id"],
                "region": cust["region"],
                "sku": sku,
                "quantity": qty,
                "unit_price": price,
                "total": round(qty * price, 2),
                "status": rng.choices(
                    ("shipped", "pending", "cancelled", "returned"), weights=(70, 18, 7, 5)
                )[0],
                "order_date": (start + timedelta(days=i)).isoformat(),
            }
        )
    return {"orders": orders, "inventory": inventory, "customers": customers}


DATASETS: dict[str, list[Row]] = _build()

DESCRIPTIONS: dict[str, str] = {
    "orders": "Sales order lines: customer, region, sku, quantity, price, status, date.",
    "inventory": "Stock on hand per sku and warehouse, with reorder point, unit cost, lead time.",
    "customers": "Customer accounts: segment, region and lifetime value.",
}

_OPS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "contains")
MAX_LIMIT = 500


def describe() -> list[dict[str, Any]]:
    """Name, description, columns and row count of every dataset."""
    return [
        {
            "dataset": name,
            "description": DESCRIPTIONS[name],
            "columns": list(rows[0]),
            "row_count": len(rows),
        }
        for name, rows in DATASETS.items()
    ]


def _matches(value: Any, op: str, operand: Any) -> bool:
    try:
        if op == "eq":
            return bool(value == operand)
        if op == "ne":
            return bool(value != operand)
        if op == "gt":
            return bool(value > operand)
        if op == "gte":
            return bool(value >= operand)
        if op == "lt":
            return bool(value < operand)
        if op == "lte":
            return bool(value <= operand)
        if op == "in":
            return value in operand
        return str(operand).lower() in str(value).lower()  # contains
    except TypeError as exc:
        raise EngineToolError(
            "invalid_filter", f"cannot compare {value!r} with {operand!r} using {op!r}"
        ) from exc


def query(
    dataset: str,
    *,
    filters: Mapping[str, Any] | None = None,
    columns: list[str] | None = None,
    order_by: str | None = None,
    descending: bool = False,
    limit: int = 50,
) -> dict[str, Any]:
    """Filter, project, sort and limit one dataset.

    ``filters`` maps a column to a value (equality) or to ``{op: value}`` with ``op`` one of
    eq, ne, gt, gte, lt, lte, in, contains. Raises :class:`EngineToolError` naming the
    unknown dataset, column or operator.
    """
    if dataset not in DATASETS:
        raise EngineToolError(
            "unknown_dataset",
            f"unknown dataset {dataset!r}; available: {', '.join(sorted(DATASETS))}",
            status_code=404,
        )
    rows = DATASETS[dataset]
    known = list(rows[0])

    def check_column(col: str, what: str) -> None:
        if col not in known:
            raise EngineToolError(
                "unknown_column",
                f"unknown {what} column {col!r} in dataset {dataset!r};"
                f" columns: {', '.join(known)}",
            )

    if not 1 <= limit <= MAX_LIMIT:
        raise EngineToolError("invalid_limit", f"limit must be between 1 and {MAX_LIMIT}")
    conditions: list[tuple[str, str, Any]] = []
    for col, spec in (filters or {}).items():
        check_column(col, "filter")
        if isinstance(spec, Mapping):
            if not spec:
                raise EngineToolError("invalid_filter", f"empty condition for column {col!r}")
            for op, operand in spec.items():
                if op not in _OPS:
                    raise EngineToolError(
                        "invalid_filter",
                        f"unknown operator {op!r} for column {col!r}; use one of {', '.join(_OPS)}",
                    )
                if op == "in" and not isinstance(operand, list):
                    raise EngineToolError("invalid_filter", f"'in' on {col!r} needs a list")
                conditions.append((col, op, operand))
        else:
            conditions.append((col, "eq", spec))
    for col in columns or []:
        check_column(col, "selected")
    if order_by is not None:
        check_column(order_by, "order_by")

    matching = [r for r in rows if all(_matches(r[c], op, v) for c, op, v in conditions)]
    if order_by is not None:
        matching = sorted(matching, key=lambda r: r[order_by], reverse=descending)
    selected = columns or known
    out = [{c: r[c] for c in selected} for r in matching[:limit]]
    return {
        "dataset": dataset,
        "columns": selected,
        "rows": out,
        "row_count": len(out),
        "total_matching": len(matching),
        "truncated": len(matching) > limit,
    }
