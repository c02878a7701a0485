"""Does claim latency grow with the table? The ``GROWTH_*`` rule over ``intervals.csv``'s measured seconds."""

from __future__ import annotations


#: Claim latency "grows with the table" when, over the measured window, the table's tuples grew by
#: at least GROWTH_TABLE_RATIO, per-second claim p50 correlates with them at least GROWTH_MIN_R
#: (Pearson), and the last quarter's median p50 is at least GROWTH_LATENCY_RATIO x the first
#: quarter's; at least GROWTH_MIN_POINTS seconds with both values are needed.
GROWTH_TABLE_RATIO = 1.5
GROWTH_MIN_R = 0.8
GROWTH_LATENCY_RATIO = 1.5
GROWTH_MIN_POINTS = 8


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return (ordered[(n - 1) // 2] + ordered[n // 2]) / 2


def claim_growth(rows: list[dict]) -> dict:
    """Does claim latency grow with the table? From ``rows`` (measured seconds with ``claim_p50_us`` and
    ``table_tuples``): ``{"grows", "points", "table_tuples_first", "table_tuples_last", "claim_p50_first_us",
    "claim_p50_last_us", "r", "slope_us_per_1k_tuples"}`` (first/last: medians of the first and last quarter;
    ``grows`` None with fewer than :data:`GROWTH_MIN_POINTS` seconds)."""
    points = [(float(r["table_tuples"]), float(r["claim_p50_us"])) for r in rows
              if r.get("table_tuples") is not None and r.get("claim_p50_us") is not None]
    out = {"grows": None, "points": len(points), "table_tuples_first": None, "table_tuples_last": None,
           "claim_p50_first_us": None, "claim_p50_last_us": None, "r": None, "slope_us_per_1k_tuples": None}
    if len(points) < GROWTH_MIN_POINTS:
        return out
    quarter = max(2, len(points) // 4)
    first, last = points[:quarter], points[-quarter:]
    out.update(table_tuples_first=_median([t for t, _ in first]), table_tuples_last=_median([t for t, _ in last]),
               claim_p50_first_us=_median([c for _, c in first]), claim_p50_last_us=_median([c for _, c in last]))
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_c = sum(c for _, c in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points)
    var_c = sum((c - mean_c) ** 2 for _, c in points)
    cov = sum((t - mean_t) * (c - mean_c) for t, c in points)
    r = cov / (var_t * var_c) ** 0.5 if var_t and var_c else 0.0
    out["r"] = round(r, 3)
    out["slope_us_per_1k_tuples"] = round(1000 * cov / var_t, 3) if var_t else None
    out["grows"] = bool(out["table_tuples_first"] > 0
                        and out["table_tuples_last"] >= GROWTH_TABLE_RATIO * out["table_tuples_first"]
                        and r >= GROWTH_MIN_R
                        and out["claim_p50_last_us"] >= GROWTH_LATENCY_RATIO * out["claim_p50_first_us"])
    return out


def growth_warning(growth: dict, unit: str = "tuples") -> str | None:
    """The report's red line when :func:`claim_growth` found growth (``growth["grows"]``), else None; ``unit``: what
    the engine counts (``tuples`` on PostgreSQL, ``rows`` on MariaDB)."""
    if not growth.get("grows"):
        return None
    return (f"Claim latency grew with the table during the run: claim p50 {growth['claim_p50_first_us'] / 1000:,.3f} ms "
            f"at {growth['table_tuples_first']:,.0f} {unit} to {growth['claim_p50_last_us'] / 1000:,.3f} ms at "
            f"{growth['table_tuples_last']:,.0f} {unit} (+{growth['slope_us_per_1k_tuples']:,.1f} µs per 1,000 "
            f"{unit}, r = {growth['r']:.2f}): the figures of this run depend on how long it ran.")
