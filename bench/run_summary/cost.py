"""What a job cost the database over the measured window (``summary.json`` ``cost_per_job``; docs/results.md,
"Cost per job")."""

from __future__ import annotations

from bench.results.run_files import COST_COUNTERS, CPU_COUNTERS

#: How the figures are read (the label beside them).
SOURCE = ("growth of the server's counters between the monitor's samples, one at the middle of each second: "
          "pg_current_wal_lsn() and pg_stat_wal (the whole server's WAL, the monitor included), the queue table's "
          "pg_stat_user_tables row counts, pg_stat_database's buffers")
CPU_SOURCE = ("; server CPU from /proc for the server's own processes (the server is on this host): the workers' "
              "backends and the postmaster with its background processes, summed as server_cpu_us; the tool's "
              "monitor's backends apart, left out of it")
CPU_ABSENT = ("; no server CPU from /proc (the server is not on this host): statements_exec_us, the tool's "
              "statements' execution time from pg_stat_statements, is a lower bound of the server's work (it "
              "leaves out commit and WAL flush) and not CPU time (it counts waits inside statements)")
#: intervals.csv's server CPU columns (µs a second) summed as ``server_cpu_us`` per job: the monitor's left out.
CPU_COLUMNS = tuple(COST_COUNTERS[CPU_COUNTERS[kind]] for kind in ("backends", "background"))
#: The per-second columns read after the load rather than sampled (full-page image bytes: pg_walinspect).
READ_AFTER = ("wal_fpi_bytes",)


def _statements_us(run_info: dict, jobs_completed: int) -> float | None:
    """The tool's statements' execution time per job (µs) from pg_stat_statements, None when not read."""
    exec_ms = (run_info.get("pg_stat_statements") or {}).get("statements_exec_ms")
    return None if exec_ms is None else round(exec_ms * 1000 / jobs_completed, 3)


def cost_per_job(rows: list[dict], jobs_completed: int, run_info: dict | None = None) -> dict:
    """``{<each cost column of intervals.csv>: per job completed, "hot_update_share", "server_cpu_us",
    "statements_exec_us", "wal_bytes_without_fpi", "source"}`` over ``rows`` (intervals.csv's; ``run_info``:
    run.json's, for pg_stat_statements and how ``wal_fpi_bytes`` was read). A column this server does not
    have (None in every second) is None; every figure None, and ``source`` saying why, when a second lacks
    a column the others have, or no job was completed. ``hot_update_share``: HOT updates over updates of the
    queue table (None without updates)."""
    run_info = run_info or {}
    columns = [*COST_COUNTERS.values(), *READ_AFTER]
    read = [c for c in columns if any(row.get(c) is not None for row in rows)]  # on this server
    extra = ("hot_update_share", "server_cpu_us", "statements_exec_us", "wal_bytes_without_fpi")
    if not rows or not read or any(row.get(c) is None for row in rows for c in read):
        why = "not measured: the monitor read no server counters in some second (MariaDB, or a sample that failed)"
        return dict.fromkeys([*columns, *extra]) | {"source": why}
    if not jobs_completed:
        return dict.fromkeys([*columns, *extra]) | {"source": "no job completed in the window"}
    totals = {c: sum(row[c] for row in rows) if c in read else None for c in columns}
    per_job = {c: None if total is None else round(total / jobs_completed, 3) for c, total in totals.items()}
    updated, cpu, images = totals["tuples_updated"], [totals[c] for c in CPU_COLUMNS], totals["wal_fpi_bytes"]
    return (per_job
            | {"hot_update_share": round(totals["tuples_hot_updated"] / updated, 4) if updated else None,
               "server_cpu_us": None if None in cpu else round(sum(cpu) / jobs_completed, 3),
               "statements_exec_us": _statements_us(run_info, jobs_completed),
               "wal_bytes_without_fpi": (None if images is None or totals["wal_bytes"] is None
                                         else round((totals["wal_bytes"] - images) / jobs_completed, 3)),
               "source": (SOURCE + (CPU_SOURCE if None not in cpu else CPU_ABSENT) + "; full-page image bytes: "
                          + run_info.get("wal_fpi_bytes_read", "not read"))})
