"""What a job cost the database over the measured window (``summary.json`` ``cost_per_job``; docs/results.md,
"Cost per job")."""

from __future__ import annotations

from typing import Mapping

from bench.results.run_files import COST_COUNTERS, COST_DERIVED, CPU_COUNTERS, IMAGES_COUNTER

CPU_SOURCE = ("server CPU from /proc for the server's own processes (the server is on this host): the workers' "
              "backends and the rest of the server (PostgreSQL's postmaster and background processes) summed as "
              "server_cpu_us; the tool's monitor's backends apart, left out of it")
CPU_ABSENT = ("no server CPU from /proc (the server is not on this host): statements_exec_us, the tool's "
              "statements' execution time from pg_stat_statements where it is read, stands in; it is not CPU time: "
              "it leaves out commit and the WAL flush, and counts waits inside statements (for a lock, for a core)")
#: intervals.csv's server CPU columns: read only when the server is on this host.
CPU_COLUMNS = tuple(COST_COUNTERS[key] for key in CPU_COUNTERS.values())
#: Of them, those summed as ``server_cpu_us`` per job: the monitor's left out.
CPU_SUMMED = tuple(COST_COUNTERS[CPU_COUNTERS[kind]] for kind in ("backends", "background"))
#: The columns a run reads only where it can: the server CPU (the server on this host), the full-page image bytes
#: (pg_walinspect in the database).
OPTIONAL = (*CPU_COLUMNS, COST_COUNTERS[IMAGES_COUNTER])


def _statements_us(run_info: Mapping, jobs_completed: int) -> float | None:
    """The tool's statements' execution time per job (µs) from pg_stat_statements, None when not read."""
    exec_ms = (run_info.get("pg_stat_statements") or {}).get("statements_exec_ms")
    return None if exec_ms is None else round(exec_ms * 1000 / jobs_completed, 3)


def _not_read(rows: list[dict], engine: Mapping) -> list[str]:
    """The columns the engine has but this run did not read: the server CPU when the server is not on this host,
    the full-page image bytes when they could not be read (None in every second)."""
    return [c for c in OPTIONAL
            if c not in (engine.get("cost_absent") or ()) and not any(row.get(c) is not None for row in rows)]


def cost_per_job(rows: list[dict], jobs_completed: int, run_info: Mapping | None = None) -> dict:
    """``{<each cost column of intervals.csv>: per job completed, "hot_update_share", "server_cpu_us",
    "statements_exec_us", "wal_bytes_without_fpi", "log", "source"}`` over ``rows`` (intervals.csv's).
    ``run_info``: run.json's: its ``engine_capabilities`` (``label``; ``log_name``, which ``log`` repeats: the log
    whose bytes ``wal_bytes`` counts; ``cost_counters``; ``cost_absent``), ``pg_stat_statements`` and how
    ``wal_fpi_bytes`` was read. A column the run has no counter for is None, and so is one some second lacks (a
    failed sample); every figure is None when no job was completed. ``source`` says how the figures were read
    and why any is None. ``hot_update_share``: HOT updates over updates of the queue table (None without either)."""
    run_info = run_info or {}
    engine = run_info.get("engine_capabilities") or {}
    columns = list(COST_COUNTERS.values())
    label, lacks, not_read = engine.get("label", "the engine"), list(engine.get("cost_absent") or ()), _not_read(rows, engine)
    absent = lacks + not_read
    gaps = [c for c in columns if c not in absent and (not rows or any(row.get(c) is None for row in rows))]
    cpu_read = all(c not in absent for c in CPU_SUMMED)
    notes = ([f"no counter on {label} for {', '.join(lacks)}"] if lacks else []) + (
        [f"not read in this run: {', '.join(not_read)}"] if not_read else []) + (
        [f"not measured: the monitor read no {', '.join(gaps)} in some second (a sample that failed)"] if gaps else [])
    source = "; ".join([f"{label}: growth of the server's counters between the monitor's samples, one at the "
                        f"middle of each second: {engine.get('cost_counters', '')}", CPU_SOURCE if cpu_read else CPU_ABSENT,
                        f"full-page image bytes: {run_info.get('wal_fpi_bytes_read', 'not read')}", *notes])
    if not jobs_completed:
        return dict.fromkeys([*columns, *COST_DERIVED]) | {"log": engine.get("log_name"),
                                                   "source": "no job completed in the window"}
    totals = {c: None if c in absent or c in gaps else sum(row[c] for row in rows) for c in columns}
    per_job = {c: None if total is None else round(total / jobs_completed, 3) for c, total in totals.items()}
    updated, hot, images = totals["tuples_updated"], totals["tuples_hot_updated"], totals["wal_fpi_bytes"]
    cpu = [totals[c] for c in CPU_SUMMED]
    return (per_job
            | {"hot_update_share": round(hot / updated, 4) if updated and hot is not None else None,
               "server_cpu_us": None if None in cpu else round(sum(cpu) / jobs_completed, 3),
               "statements_exec_us": _statements_us(run_info, jobs_completed),
               "wal_bytes_without_fpi": (None if images is None or totals["wal_bytes"] is None
                                         else round((totals["wal_bytes"] - images) / jobs_completed, 3)),
               "log": engine.get("log_name"), "source": source})
