"""Figures of ``summary.json`` read from the measured seconds' rows (``intervals.csv``)."""

from __future__ import annotations

import math

from bench.usage import setting


def percentile(values: list[float], pct: float) -> float | None:
    """The ``pct`` percentile of ``values`` (nearest rank), None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, math.ceil(pct / 100 * len(ordered)) - 1)  # nearest-rank
    return ordered[rank]


def busy_figures(rows: list[dict]) -> dict:
    """``summary.json``'s ``outside_cpu_pct``, ``steal_pct`` and ``kernel_cpu_pct``: each ``{"mean", "max"}`` (% of the machine's
    CPU, 1 decimal) over the measured seconds that have it, None each when none has (older runs)."""
    out = {}
    for name in ("outside_cpu_pct", "steal_pct", "kernel_cpu_pct"):
        values = [r[name] for r in rows if r.get(name) is not None]
        out[name] = {"mean": round(sum(values) / len(values), 1) if values else None,
                     "max": max(values) if values else None}
    return out


def worker_changes(rows: list[dict]) -> list[dict]:
    """The measured seconds in which the number of running workers changed (the web UI, or a lost process):
    ``[{"t_s", "workers_before", "workers"}]``, counted as each second ended."""
    changes, before = [], None
    for row in rows:
        now = row.get("workers")
        if before is not None and now is not None and now != before:
            changes.append({"t_s": row["t_s"], "workers_before": before, "workers": now})
        before = now if now is not None else before
    return changes


def index_bytes(rows: list[dict]) -> dict | None:
    """``summary.json``'s ``claim_index_bytes``: ``{"first", "last", "max"}`` of the claim's index size
    (bytes, intervals.csv's ``claim_index_bytes``) over the measured window; None when never sampled."""
    sizes = [r["claim_index_bytes"] for r in rows if r.get("claim_index_bytes") is not None]
    return {"first": sizes[0], "last": sizes[-1], "max": max(sizes)} if sizes else None


def monitor_notes(rows: list[dict], failures: int, costs_s: dict, in_flight_s: float,
                  lock_skips: dict | None = None, *, table_queries: bool = True) -> list[str]:
    """Plain-language notes on how often the monitor's table queries could be afforded, with their cost, and how
    many gave up waiting for a lock on the queue table (``lock_skips``: counts by kind, ``age`` and ``counts``, and
    the monitor's ``lock_timeout_ms``); without ``table_queries`` (``MONITOR=stats``) that none ran."""
    notes = [] if table_queries else [f"{setting('monitor', 'stats', quote=False)}: no table query ran during the load "
                                      "(no oldest eligible age, queue depth or running count per second)"]
    n = len(rows)
    for column, kind, what, budget in (("oldest_eligible_age_s", "age", "oldest eligible age", 5),
                                       ("queue_depth", "counts", "queue depth and running", 2))[:2 if table_queries else 0]:
        taken = sum(1 for r in rows if r.get(column) is not None)
        spent = costs_s.get(kind) or []
        skipped = (lock_skips or {}).get(kind, 0)
        if n and taken < n:
            mean_ms = f"{1000 * sum(spent) / len(spent):,.1f} ms" if spent else "more than the run"
            notes.append(f"{what} sampled in {taken} of {n} seconds: one sample took {mean_ms} on this "
                         f"table under this load, and samples are spaced so they take at most {budget} % "
                         "of the time" + (f"; {skipped} gave up after waiting {lock_skips.get('lock_timeout_ms')} ms for a "
                                          "lock on the queue table (a migration's), leaving their second without "
                                          "a sample" if skipped else ""))
    if in_flight_s > 1.0:
        notes.append(f"a monitor table query had been running for {in_flight_s:,.1f} s when the load stopped")
    if failures:
        notes.append(f"{failures} monitor statements failed or hit their statement_timeout "
                     "(5 s for the statistics query, 30 s for a table query)")
    return notes


def column(rows: list[dict], name: str) -> list:
    """The values of column ``name`` over ``rows``, the seconds without one left out."""
    return [r[name] for r in rows if r.get(name) is not None]
