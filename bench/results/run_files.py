"""The result files of one run (docs/results.md): their names and writers."""

from __future__ import annotations

import csv
import json
import re
import secrets
from pathlib import Path
from typing import Iterable, Mapping

from hdrh.log import HistogramLogWriter

from bench.measure.metrics import values_at_percentiles
from bench.measure.replica_reads import READ_COLUMNS
from bench.results.model import clean_json, utc_stamp
from bench.results.wait_event_columns import WAIT_EVENT_COLUMNS

#: The monitor's cumulative counters of what the server did (where each engine reads them: its
#: ``Capabilities.cost_counters``; docs/results.md) and the intervals.csv column of each one's growth over a second.
COST_COUNTERS = {"wal_lsn": "wal_bytes", "wal_records_total": "wal_records", "wal_fpi_total": "wal_fpi",
                 "tuples_inserted_total": "tuples_inserted", "tuples_updated_total": "tuples_updated",
                 "tuples_hot_updated_total": "tuples_hot_updated", "tuples_deleted_total": "tuples_deleted",
                 "buffers_hit_total": "buffers_hit", "buffers_read_total": "buffers_read",
                 "rows_read_total": "rows_read",
                 "server_cpu_backends_total_us": "server_cpu_backends_us",
                 "server_cpu_monitor_total_us": "server_cpu_monitor_us",
                 "server_cpu_background_total_us": "server_cpu_background_us",
                 "wal_fpi_bytes_total": "wal_fpi_bytes"}
#: The server CPU counters among them, by the kind of server process each counts (µs; read from /proc when
#: the server is on this host).
CPU_COUNTERS = {"backends": "server_cpu_backends_total_us", "monitor": "server_cpu_monitor_total_us",
                "background": "server_cpu_background_total_us"}
#: The figures ``cost_per_job`` works out from them (bench/run_summary/cost.py), beside one per column.
COST_DERIVED = ("hot_update_share", "server_cpu_us", "statements_exec_us", "statements_buffers_hit",
                "statements_buffers_read", "wal_bytes_without_fpi")
#: The bytes of full-page images in the WAL among them (PostgreSQL, with pg_walinspect in the database).
IMAGES_COUNTER = "wal_fpi_bytes_total"

#: ``REPLICA=1``: the standby's per-second sample (replay lag, cancellations by cause since the previous sample,
#: the xmin age its feedback holds on the primary) and the readers' (bench/measure/replica_reads.py).
REPLICA_COLUMNS = ("replica_lag_bytes", "replica_lag_s", "replica_xmin_age", "replica_conflicts_snapshot",
                   "replica_conflicts_lock", "replica_conflicts_bufferpin", "replica_conflicts_deadlock",
                   "replica_conflicts_tablespace", *READ_COLUMNS)

#: With a ``migration`` window, the lock queue on the queue table, sampled every 100 ms and folded by second: the
#: most requests not granted by mode, the most workers among them, the migration's longest wait so far (s), whether
#: it held or asked for a mode that blocks claims, the workers' waits first seen while it did, the stall's ms in
#: the second and how long the stall in progress had lasted, the most at one sample of the second (0: none, it
#: restarts after each stall; bench/engines/lock_queue.py; docs/migrations.md).
LOCK_QUEUE_COLUMNS = ("lock_queue_access_share", "lock_queue_row_share", "lock_queue_row_exclusive",
                      "lock_queue_share_update_exclusive", "lock_queue_share", "lock_queue_share_row_exclusive",
                      "lock_queue_exclusive", "lock_queue_access_exclusive", "lock_queue_workers", "migration_wait_s",
                      "migration_blocking", "delayed_claims", "stall_ms", "ongoing_stall_ms")

#: With a pooler whose console the run reads (``POOLER=pgbouncer``, or ``POOLER_ADMIN_DSN``): its pool at the middle
#: of each second (``SHOW POOLS``: clients active and waiting, the oldest wait now in µs, server connections active,
#: idle, used (idle, awaiting a check: not in use) and all of them) and the growth of its totals over the second
#: (``SHOW STATS``: transactions, queries, their summed wait, transaction and query time in µs, and the means of
#: each per transaction or query), and the pooler process's CPU, % of one core (docs/poolers.md, "Reading the
#: pooler figures"; bench/measure/pooler_seconds.py).
POOLER_COLUMNS = ("pooler_cl_active", "pooler_cl_waiting", "pooler_maxwait_us", "pooler_sv_active", "pooler_sv_idle",
                  "pooler_sv_used", "pooler_server_conns", "pooler_xacts", "pooler_queries", "pooler_wait_us",
                  "pooler_wait_mean_us", "pooler_xact_mean_us", "pooler_query_mean_us", "pooler_cpu_pct")

#: The round trip's intervals.csv columns: the probe's p50 and p99 (µs) of the second's samples, the round trips
#: the workers' sessions sent in cycles that ended in the second and the producers' (docs/network.md).
ROUND_TRIP_COLUMNS = ("round_trip_p50_us", "round_trip_p99_us", "worker_round_trips", "producer_round_trips")

INTERVAL_COLUMNS = (
    "t_s", "claims", "jobs_claimed", "jobs_completed", "empty_claims",
    "claim_p50_us", "claim_p95_us", "claim_p99_us", "claim_max_us", "complete_p99_us",
    "errors", "queue_depth", "oldest_eligible_age_s", "running", "lock_waiters", "dead_tuples",
    "harness_cpu_pct", "monitor_query_us", "jobs_produced", "producer_lag_p99_us", "xmin_age", "table_tuples",
    "loop_lag_p99_us", "harness_user_pct", "harness_system_pct", "history_list_length", "workers",
    "notify_lock_waiters",
    "claim_index_bytes", "autovacuum_count", "vacuum_passes", "vacuum_ms",
    "oldest_eligible_age_flooder_s", "oldest_eligible_age_others_s", "outside_cpu_pct", "steal_pct",
    "kernel_cpu_pct", "pickup_p99_ms",
    *ROUND_TRIP_COLUMNS,
    *COST_COUNTERS.values(),
    *REPLICA_COLUMNS,
    *LOCK_QUEUE_COLUMNS,
    "server_backends",
    *POOLER_COLUMNS,
    "relay_cpu_pct",  # with NET_DELAY_MS/NET_JITTER_MS: the delay relay's process, % of one core (docs/network.md)
    *WAIT_EVENT_COLUMNS,
)

#: ``processes.csv``: one row per measured second and load generator process. Process 0 is the
#: master of a distributed run (the clock, monitor, reaper: no users); a process missing from a
#: second (late or lost) has no row for it.
PROCESS_SECOND_COLUMNS = ("t_s", "process", "host", "pid", "cpu_pct", "user_pct", "system_pct", "loop_lag_p99_us", "claims",
                          "jobs_claimed", "jobs_completed", "errors")

SUMMARY_KEYS = (
    "run_id", "complete", "config", "measured_s", "throughput_jobs_per_s", "claims_per_s",
    "claims", "completions", "jobs_claimed", "jobs_completed", "empty_claims", "max_rows_per_claim", "claim_latency_us",
    "complete_latency_us", "pickup_latency_ms", "oldest_eligible_age_s", "errors", "invariants",
    "harness_cpu_max_pct",
)


def write_json_list(path: Path, items: list) -> None:
    """Write a JSON array, one item per line."""
    path.write_text("[\n" + ",\n".join(json.dumps(clean_json(i)) for i in items) + "\n]\n")


def write_priority_ages(path: Path, samples: list) -> None:
    """``t_s, priority, oldest_eligible_age_s`` rows from ``[(t_s, {priority: age_s} or None)]``."""
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(("t_s", "priority", "oldest_eligible_age_s"))
        for t_s, ages in samples:
            for priority, age in sorted((ages or {}).items()):
                writer.writerow((t_s, priority, round(age, 6)))


def write_intervals(path: Path, rows: Iterable[Mapping]) -> None:
    """Write one CSV row per measured second with :data:`INTERVAL_COLUMNS` (missing → empty cell)."""
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=INTERVAL_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in INTERVAL_COLUMNS})


class ProcessSeconds:
    """``processes.csv`` written one measured second at a time (:data:`PROCESS_SECOND_COLUMNS`), flushed after
    each. Raises OSError when the file cannot be written; :meth:`close` is idempotent."""

    def __init__(self, path: Path):
        self._fh = path.open("w", newline="")
        self._writer = csv.DictWriter(self._fh, fieldnames=PROCESS_SECOND_COLUMNS, extrasaction="ignore")
        self._writer.writeheader()

    def write(self, t_s: int, process: int, cpu_pct: tuple[float, float, float], interval=None,
              loop_lag_p99_us: int | None = None, *, host: str | None = None, pid: int | None = None) -> None:
        """One row: process ``process`` (on ``host``, process id ``pid``: the host's name as the process read
        it)'s (total, user, system) CPU, % of a core, over measured second ``t_s``, and with ``interval`` (that process's :class:`bench.measure.metrics.Interval`) its
        loop-lag p99 (µs) and counters; a process without users (the master) gives its
        ``loop_lag_p99_us`` itself."""
        row = {"t_s": t_s, "process": process, "host": host, "pid": pid, "cpu_pct": round(cpu_pct[0], 1), "user_pct": round(cpu_pct[1], 1),
               "system_pct": round(cpu_pct[2], 1), "loop_lag_p99_us": loop_lag_p99_us}
        if interval is not None:
            lag = interval.histograms["loop_lag_us"]
            if lag.get_total_count():
                row["loop_lag_p99_us"] = values_at_percentiles(lag, (99,))[0]
            row.update({k: interval.counters[k] for k in ("claims", "jobs_claimed", "jobs_completed")},
                       errors=sum(interval.errors.values()))
        self._writer.writerow(row)
        self._fh.flush()

    def close(self) -> None:
        """Close the file (idempotent)."""
        self._fh.close()


class HistogramLogs:
    """One HdrHistogram interval log per histogram name (``names``), ``<directory>/<name>.hlog``, each
    measured second appended and flushed as it ends.

    ``base_time_s`` is the Unix time of the load start (the log's ``BaseTime``; intervals are stamped in
    seconds relative to it, ``Interval_Max`` in ms, values in µs, as the HdrHistogram log format specifies). A
    context manager, or call :meth:`close`. Raises OSError when a file cannot be written."""

    def __init__(self, directory: Path, names: Iterable[str], base_time_s: float):
        directory.mkdir(parents=True, exist_ok=True)
        self._base_ms = base_time_s * 1000.0
        self._files = {}
        self._writers = {}
        for name in names:
            fh = (directory / f"{name}.hlog").open("w")
            self._files[name] = fh
            writer = HistogramLogWriter(fh)
            writer.base_time = self._base_ms  # the writer subtracts it from the histograms' own stamps
            writer.output_log_format_version()
            writer.output_comment(f"queue-bench {name}: one interval per measured second, values in microseconds")
            writer.output_base_time(self._base_ms)
            writer.output_legend()
            fh.flush()
            self._writers[name] = writer

    def write(self, interval) -> None:
        """Append ``interval``'s histogram of every name (a :class:`bench.measure.metrics.Interval`)."""
        for name, writer in self._writers.items():
            hist = interval.histograms[name]
            # Stamps go through the histogram: the writer treats an explicit 0.0 start as "not given".
            hist.set_start_time_stamp(self._base_ms + interval.start_s * 1000.0)
            hist.set_end_time_stamp(self._base_ms + interval.end_s * 1000.0)
            writer.output_interval_histogram(hist, max_value_unit_ratio=1000.0)
            self._files[name].flush()

    def close(self) -> None:
        """Close every log (idempotent)."""
        for fh in self._files.values():
            fh.close()

    def __enter__(self) -> "HistogramLogs":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def new_run_id(cfg) -> str:
    """The directory name of a new run of ``cfg`` (a RunConfig), sortable and unique: ``<UTC
    time>-[<queue>-]<policy>-w<workers>-b<batch>-<index>-<4 hex>`` (``<queue>`` unless ``QUEUE`` is
    ``builtin``; ``na`` for a parameter that does not apply)."""
    stamp = utc_stamp()
    part = lambda value: re.sub(r"[^A-Za-z0-9_]+", "", str(value).replace("n/a", "na")) or "q"  # noqa: E731
    path = Path(cfg.queue)
    queue = "" if cfg.queue == "builtin" else part(path.parent.name if path.suffix == ".toml" else path.name) + "-"
    return f"{stamp}-{queue}{part(cfg.policy)}-w{cfg.workers}-b{cfg.batch}-{part(cfg.index)}-{secrets.token_hex(2)}"
