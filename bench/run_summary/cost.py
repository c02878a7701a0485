"""What a job cost the database over the measured window (``summary.json`` ``cost_per_job``; docs/results.md)."""

from __future__ import annotations

#: How the WAL figure is read (the label beside it).
WAL_SOURCE = ("pg_current_wal_lsn() differences between the monitor's samples, one at the middle of each second: "
              "the whole server's WAL, the tool's monitor included")


def cost_per_job(rows: list[dict], jobs_completed: int) -> dict:
    """``{"wal_bytes", "wal_source"}``: WAL bytes per job completed over ``rows`` (intervals.csv's, each with
    ``wal_bytes``); ``wal_bytes`` None, and ``wal_source`` saying why, when a second has no WAL figure or no job
    was completed."""
    wal = [row.get("wal_bytes") for row in rows]
    if not wal or None in wal:
        return {"wal_bytes": None, "wal_source": "not measured: the monitor read no WAL position in some second"
                                                 " (MariaDB, or a sample that failed)"}
    if not jobs_completed:
        return {"wal_bytes": None, "wal_source": "no job completed in the window"}
    return {"wal_bytes": round(sum(wal) / jobs_completed, 1), "wal_source": WAL_SOURCE}
