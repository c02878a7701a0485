"""Which queue (tenant) a job belongs to with ``NAMED_QUEUES`` or ``TENANTS`` above 1, in Python and in SQL alike
(the rule: docs/design.md); no database."""

from __future__ import annotations

import math
from decimal import Decimal

#: The fractional part of the golden ratio: ``u = frac(id × WEYL)`` for a seeded row.
WEYL = "0.6180339887498949"


def queue_count(cfg) -> int:
    """``NAMED_QUEUES`` or ``TENANTS`` (at most one is above 1)."""
    return max(int(getattr(cfg, "named_queues", 1) or 1), int(getattr(cfg, "tenants", 1) or 1))


def flood_share(cfg) -> float:
    """The share ``f`` of jobs for ``q0``: ``TENANT_FLOOD`` when above 0 with ``TENANTS`` > 1, else ``1 / N``."""
    n = queue_count(cfg)
    flood = float(getattr(cfg, "tenant_flood", 0.0) or 0.0) if int(getattr(cfg, "tenants", 1) or 1) > 1 else 0.0
    return flood if flood > 0 else 1.0 / n


def queue_names(n: int) -> list[str]:
    """``["q0", …, "q<n-1>"]``; ``["default"]`` (the table's default) for one queue."""
    return ["default"] if n <= 1 else [f"q{i}" for i in range(n)]


def queue_index(u: float, n: int, flood: float) -> int:
    """The queue index (0..n-1) of a job with ``u`` in [0, 1), tenant 0 taking the share ``flood``."""
    if n <= 1 or u < flood:
        return 0
    if flood >= 1:
        return 0
    return min(n - 1, 1 + math.floor((u - flood) * (n - 1) / (1 - flood)))


def seeded_u(job_id: int) -> float:
    """``u`` of a seeded row: ``frac(id × WEYL)`` (Weyl's sequence), as :func:`queue_sql` computes it in decimal."""
    x = Decimal(job_id) * Decimal(WEYL)
    return float(x - int(x))


def queue_sql(u_sql: str, n: int, flood: float) -> str:
    """An SQL integer expression (PostgreSQL and MariaDB) equal to :func:`queue_index` of ``u_sql``
    (an SQL expression in [0, 1)); the literals are inlined."""
    if n <= 1 or flood >= 1:
        return "0"
    f = repr(float(flood))
    return (f"(CASE WHEN ({u_sql}) < {f} THEN 0 ELSE LEAST({n - 1}, 1 + FLOOR((({u_sql}) - {f}) * {n - 1} "
            f"/ (1 - {f}))) END)")


def seeded_u_sql(id_sql: str) -> str:
    """``u`` of a seeded row in SQL (``id_sql`` an integer expression): exact decimal arithmetic."""
    return f"(({id_sql}) * {WEYL} - FLOOR(({id_sql}) * {WEYL}))"
