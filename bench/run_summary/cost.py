"""What a job cost the database over the measured window (``summary.json`` ``cost_per_job``; docs/results.md,
"Cost per job")."""

from __future__ import annotations

from typing import Mapping

from bench.results.run_files import COST_COUNTERS, COST_DERIVED, CPU_COUNTERS, IMAGES_COUNTER

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


def _statements(run_info: Mapping, jobs_completed: int) -> dict:
    """The tool's statements' execution time (µs) and shared buffers hit and read per job, from pg_stat_statements
    over the measured window; None each when not read."""
    pgss = run_info.get("pg_stat_statements") or {}
    per_job = {"statements_exec_us": ("statements_exec_ms", 1000), "statements_buffers_hit": ("statements_blks_hit", 1),
               "statements_buffers_read": ("statements_blks_read", 1)}
    return {key: None if pgss.get(name) is None else round(pgss[name] * scale / jobs_completed, 3)
            for key, (name, scale) in per_job.items()}


def _not_read(rows: list[dict], engine: Mapping) -> list[str]:
    """The columns the engine has but this run did not read: the server CPU when the server is not on this host,
    the full-page image bytes when they could not be read (None in every second)."""
    return [c for c in OPTIONAL
            if c not in (engine.get("cost_absent") or ()) and not any(row.get(c) is not None for row in rows)]


def whole_load_cost(start: Mapping, end: Mapping, jobs_completed: int) -> dict:
    """run.json's ``cost_whole_load``: ``{"start", "end"}`` (each cost column's counter, as the monitor read it before
    the first worker connected and after the last one left) and ``jobs_completed`` over the whole load (warm-up and
    stop included)."""
    return {"start": {column: start.get(key) for key, column in COST_COUNTERS.items()},
            "end": {column: end.get(key) for key, column in COST_COUNTERS.items()}, "jobs_completed": jobs_completed}


def _window(rows: list[dict], columns: list[str]) -> list[dict]:
    """``rows`` from the first second with a sample before it (with ``WARMUP=0`` the first second has none)."""
    first = next((i for i, row in enumerate(rows) if any(row.get(c) is not None for c in columns)), len(rows))
    return rows[first:]


def _delayed_per_job(whole: Mapping, columns: list[str]) -> dict:
    """Per job over the whole load for ``columns``: (end − start) / jobs completed; None where either is missing."""
    jobs, start, end = whole.get("jobs_completed"), whole.get("start") or {}, whole.get("end") or {}
    return {c: None if not jobs or start.get(c) is None or end.get(c) is None else round((end[c] - start[c]) / jobs, 3)
            for c in columns}


def cost_per_job(rows: list[dict], jobs_completed: int, run_info: Mapping | None = None) -> dict:
    """``{<each cost column of intervals.csv>: per job completed, "hot_update_share", "server_cpu_us",
    "statements_exec_us", "wal_bytes_without_fpi", "log", "source"}``. ``rows``: intervals.csv's; ``run_info``:
    run.json's: its ``engine_capabilities`` (``label``; ``log_name``, which ``log`` repeats: the log whose bytes
    ``wal_bytes`` counts; ``cost_counters``; ``cost_absent``; ``cost_delayed``, the columns taken over the whole
    load, :func:`whole_load_cost`), ``pg_stat_statements`` and how ``wal_fpi_bytes`` was read. The other columns
    are taken over the measured window, from its first second with a sample before it, per job completed in
    those seconds. A column the run has no counter for is None, and so is one some second lacks (a failed
    sample); every figure is None when no job was completed. ``source`` says how the figures were read and why
    any is None. ``hot_update_share``: HOT updates over updates of the queue table (None without either)."""
    run_info = run_info or {}
    engine = run_info.get("engine_capabilities") or {}
    columns = list(COST_COUNTERS.values())
    label, lacks, not_read = engine.get("label", "the engine"), list(engine.get("cost_absent") or ()), _not_read(rows, engine)
    absent = lacks + not_read
    delayed = [c for c in engine.get("cost_delayed") or () if c not in absent]
    windowed = [c for c in columns if c not in absent and c not in delayed]
    rows = _window(rows, windowed)
    gaps = [c for c in windowed if not rows or any(row.get(c) is None for row in rows)]
    cpu_read = CPU_SUMMED[0] not in absent  # the backends' column: every engine that reads CPU has it
    notes = ([f"no counter on {label} for {', '.join(lacks)}"] if lacks else []) + (
        [f"not read in this run: {', '.join(not_read)}"] if not_read else []) + (
        [f"not measured: the monitor read no {', '.join(gaps)} in some second (a sample that failed)"] if gaps else []) + (
        [f"{', '.join(delayed)} over the whole load, from before the first worker connected to after the last left "
         "(the server publishes them up to a second late, which a window of seconds would cut)"] if delayed else [])
    source = "; ".join([f"{label}: growth of the server's counters between the monitor's samples, one at the "
                        f"middle of each second: {engine.get('cost_counters', '')}", *([] if cpu_read else [CPU_ABSENT]),
                        f"full-page image bytes: {run_info.get('wal_fpi_bytes_read', 'not read')}", *notes])
    jobs = sum(row.get("jobs_completed") or 0 for row in rows) if rows else 0
    if not jobs_completed or not jobs:
        return dict.fromkeys([*columns, *COST_DERIVED]) | {"log": engine.get("log_name"),
                                                           "source": "no job completed in the window"}
    totals = {c: sum(row[c] for row in rows) if c in windowed and c not in gaps else None for c in columns}
    per_job = ({c: None if total is None else round(total / jobs, 3) for c, total in totals.items()}
               | _delayed_per_job(run_info.get("cost_whole_load") or {}, delayed))
    updated, hot, images = per_job["tuples_updated"], per_job["tuples_hot_updated"], totals["wal_fpi_bytes"]
    cpu = [totals[c] for c in CPU_SUMMED if c not in lacks]  # MariaDB: one process, all of it backends
    return (per_job
            | {"hot_update_share": round(hot / updated, 4) if updated and hot is not None else None,
               "server_cpu_us": None if not cpu or None in cpu else round(sum(cpu) / jobs, 3),
               **_statements(run_info, jobs_completed),
               "wal_bytes_without_fpi": (None if images is None or totals["wal_bytes"] is None
                                         else round((totals["wal_bytes"] - images) / jobs, 3)),
               "log": engine.get("log_name"), "wal_fpi_bytes_read": run_info.get("wal_fpi_bytes_read"),
               "source": source})
