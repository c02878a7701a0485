"""What a job cost the database over the measured window (``summary.json`` ``cost_per_job``; docs/results.md)."""

from __future__ import annotations

from typing import Mapping

from bench.results.run_files import COST_COUNTERS


def cost_per_job(rows: list[dict], jobs_completed: int, engine: Mapping) -> dict:
    """``{<each cost column of intervals.csv>: per job completed, "hot_update_share", "log", "source"}`` over
    ``rows`` (intervals.csv's). ``engine``: the run's ``engine_capabilities`` (``label``; ``log_name``, which
    ``log`` repeats: the log whose bytes ``wal_bytes`` counts; ``cost_counters``; ``cost_absent``). A column
    the engine has no counter for is None, and so is one some second lacks (a failed sample); every figure
    is None when no job was completed. ``source`` says how the figures were read and why any is None.
    ``hot_update_share``: HOT updates over updates of the queue table (None without either)."""
    columns = list(COST_COUNTERS.values())
    label = engine.get("label", "the engine")
    absent = [c for c in columns if c in (engine.get("cost_absent") or ())]
    gaps = [c for c in columns if c not in absent and (not rows or any(row.get(c) is None for row in rows))]
    notes = ([f"no counter on {label} for {', '.join(absent)}"] if absent else []) + (
        [f"not measured: the monitor read no {', '.join(gaps)} in some second (a sample that failed)"] if gaps else [])
    source = "; ".join([f"{label}: growth of the server's counters between the monitor's samples, one at the "
                        f"middle of each second: {engine.get('cost_counters', '')}", *notes])
    if not jobs_completed:
        return dict.fromkeys(columns) | {"hot_update_share": None, "log": engine.get("log_name"),
                                         "source": "no job completed in the window"}
    totals = {c: None if c in absent or c in gaps else sum(row[c] for row in rows) for c in columns}
    updated, hot = totals["tuples_updated"], totals["tuples_hot_updated"]
    return ({c: None if total is None else round(total / jobs_completed, 3) for c, total in totals.items()}
            | {"hot_update_share": round(hot / updated, 4) if updated and hot is not None else None,
               "log": engine.get("log_name"), "source": source})
