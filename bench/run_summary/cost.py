"""What a job cost the database over the measured window (``summary.json`` ``cost_per_job``; docs/results.md)."""

from __future__ import annotations

from bench.results.run_files import COST_COUNTERS

#: How the figures are read (the label beside them).
SOURCE = ("growth of the server's counters between the monitor's samples, one at the middle of each second: "
          "pg_current_wal_lsn() and pg_stat_wal (the whole server's WAL, the monitor included), the queue table's "
          "pg_stat_user_tables row counts, pg_stat_database's buffers")


def cost_per_job(rows: list[dict], jobs_completed: int) -> dict:
    """``{<each cost column of intervals.csv>: per job completed, "hot_update_share", "source"}`` over ``rows``
    (intervals.csv's); every figure None, and ``source`` saying why, when a second lacks one or no job was
    completed. ``hot_update_share``: HOT updates over updates of the queue table (None without updates)."""
    columns = list(COST_COUNTERS.values())
    if not rows or any(row.get(c) is None for row in rows for c in columns):
        why = "not measured: the monitor read no server counters in some second (MariaDB, or a sample that failed)"
        return dict.fromkeys(columns) | {"hot_update_share": None, "source": why}
    if not jobs_completed:
        return dict.fromkeys(columns) | {"hot_update_share": None, "source": "no job completed in the window"}
    totals = {c: sum(row[c] for row in rows) for c in columns}
    updated = totals["tuples_updated"]
    return ({c: round(total / jobs_completed, 3) for c, total in totals.items()}
            | {"hot_update_share": round(totals["tuples_hot_updated"] / updated, 4) if updated else None,
               "source": SOURCE})
