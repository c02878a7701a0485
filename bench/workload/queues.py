"""Which queue (tenant) a job belongs to, with ``NAMED_QUEUES`` or ``TENANTS`` above 1; no database.

The run's queue names are ``q0 … q<N-1>`` (:func:`queue_names`); with one queue every job keeps the
table's default name (``default``) and the claim does not test the column. A job goes to queue
``index(u)`` for a number ``u`` in [0, 1): tenant 0 (the flooder) takes the share ``f`` of the unit
interval, the other ``N - 1`` queues split the rest evenly (:func:`queue_index`):

    index(u) = 0                                         if u < f
             = min(N - 1, 1 + floor((u - f) (N - 1) / (1 - f)))   otherwise

With no flooder (``TENANT_FLOOD = 0``, and always with ``NAMED_QUEUES``) ``f = 1 / N``, which makes
every queue's share ``1 / N``. Seeded rows (backlog and history) take ``u`` from their id,
``frac(id × 0.6180339887498949)`` (the golden ratio's fractional part: Weyl's equidistributed
sequence, so the queues interleave in id order and each gets its share of any id range to within
a row or so); produced jobs take ``u`` from the producer session's random number generator. The
seeded rows' expression, in SQL, is :func:`queue_sql` over :func:`seeded_u_sql`, exact decimal
arithmetic on both engines.
"""

from __future__ import annotations

import math
from decimal import Decimal

#: The fractional part of the golden ratio: ``u = frac(id × WEYL)`` for a seeded row.
WEYL = "0.6180339887498949"


def queue_count(cfg) -> int:
    """The number of distinct queue names of a run: ``NAMED_QUEUES`` or ``TENANTS`` (at most one of
    them is above 1; :mod:`bench.config.run_config` refuses both)."""
    return max(int(getattr(cfg, "named_queues", 1) or 1), int(getattr(cfg, "tenants", 1) or 1))


def flood_share(cfg) -> float:
    """The share ``f`` of jobs that go to queue ``q0``: ``TENANT_FLOOD`` when above 0 with
    ``TENANTS`` > 1, else ``1 / N`` (an even spread)."""
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
    """``u`` of a seeded row: ``frac(id × WEYL)``, as :func:`queue_sql` computes it in decimal."""
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
