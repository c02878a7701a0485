"""``summary.json`` ``replica`` (``REPLICA=1``): the standby's replay lag, its cancellations by cause, the
readers' figures, the stale reads and what the standby held back on the primary, over the measured window
(docs/replicas.md); None without a standby."""

from __future__ import annotations

from bench.run_summary.rows import column, percentile

#: intervals.csv's cancellation columns by cause (pg_stat_database_conflicts on the standby).
CAUSES = ("snapshot", "lock", "bufferpin", "deadlock", "tablespace")


def _spread(values: list) -> dict:
    """``{max, p95, mean}`` of ``values`` (None each when empty)."""
    if not values:
        return {"max": None, "p95": None, "mean": None}
    return {"max": max(values), "p95": percentile(values, 95), "mean": round(sum(values) / len(values), 3)}


def replica_figures(rows: list[dict], run_info: dict) -> dict | None:
    """The ``replica`` block from the measured rows and ``run.json``'s ``replica`` (the standby's settings)."""
    info = run_info.get("replica")
    if not info:
        return None
    readers = info["readers"]
    stale = column(rows, "stale_reads")
    reads = sum(column(rows, "replica_reads"))
    return {
        "source": info["source"], "hot_standby_feedback": info["hot_standby_feedback"],
        "max_standby_streaming_delay_s": info["max_standby_streaming_delay_s"],
        "readers": readers, "reader_s": info["reader_s"],
        "lag_bytes": _spread(column(rows, "replica_lag_bytes")),
        "lag_s": _spread(column(rows, "replica_lag_s")),
        "conflicts": {cause: sum(column(rows, f"replica_conflicts_{cause}")) for cause in CAUSES},
        "reads": reads if readers else None,
        "read_p99_us_max": max(column(rows, "replica_read_p99_us"), default=None) if readers else None,
        "read_cancels": sum(column(rows, "replica_read_cancels")) if readers else None,
        "read_errors": sum(column(rows, "replica_read_errors")) if readers else None,
        # None: no readers, or the claim log is not written in this process (why: stale_reads_not_counted)
        "stale_reads": sum(stale) if readers and not info["stale_reads_not_counted"] else None,
        "stale_reads_not_counted": info["stale_reads_not_counted"] if readers else None,
        "primary_dead_tuples_max": max(column(rows, "dead_tuples"), default=None),
        "primary_xmin_age_max": max(column(rows, "replica_xmin_age"), default=None),
        "sampler_errors": info["sampler_errors"],
    }


def replica_line(r: dict) -> str:
    """The terminal's line of the ``replica`` block."""
    def num(v, unit=""):
        return "n/a" if v is None else f"{v:,.3g}{unit}" if isinstance(v, float) else f"{v:,}{unit}"
    conflicts = ", ".join(f"{c} {n}" for c, n in r["conflicts"].items() if n) or "none"
    readers = (f"; {r['readers']} reader{'s' if r['readers'] != 1 else ''} of {r['reader_s']:g} s: {num(r['reads'])} reads, {num(r['read_cancels'])} "
               f"cancelled, stale reads {num(r['stale_reads'])}" if r["readers"] else "")
    return (f"standby (feedback {r['hot_standby_feedback']}, max delay {r['max_standby_streaming_delay_s']:g} s): "
            f"replay lag max {num(r['lag_bytes']['max'], ' B')} / {num(r['lag_s']['max'], ' s')}, cancellations "
            f"{conflicts}{readers}; primary dead tuples max {num(r['primary_dead_tuples_max'])}, xmin age held "
            f"max {num(r['primary_xmin_age_max'])}")
