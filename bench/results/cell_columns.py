"""The columns of a sweep's ``cells.csv`` (docs/sweeps.md): the contract the comparison report reads."""

from __future__ import annotations

from bench.results.run_files import COST_COUNTERS, COST_DERIVED

#: The figures of ``summary.json`` ``cost_per_job`` a cell carries: one per cost column of intervals.csv and
#: those worked out from them (its labels, ``source`` and ``log``, are not carried).
COST_KEYS: tuple[str, ...] = (*COST_COUNTERS.values(), *COST_DERIVED)
#: Their cells.csv columns, ``cost_<key>``: per job completed, empty when the run did not measure them.
COST_COLUMNS: tuple[str, ...] = tuple(f"cost_{key}" for key in COST_KEYS)

#: Columns of a sweep's cells.csv, in order: the run (5), its parameters (to ``autovacuum``), its figures
#: (:data:`CELL_TEXT_COLUMNS` hold text, the others numbers), its cost per job (:data:`COST_COLUMNS`).
CELL_COLUMNS = (
    "cell_id", "rep", "run_id", "run_dir", "status", "engine", "queue", "isolation",
    "policy", "workers", "batch", "index", "layout", "fillfactor", "history", "backlog", "rate", "work_ms", "txn",
    "duration_s", "plan_cache", "prepared", "autovacuum",
    "throughput_jobs_per_s", "claims_per_s", "jobs_completed", "empty_claims", "empty_claims_while_work_waited", "errors_total",
    "claim_p50_us", "claim_p95_us", "claim_p99_us", "claim_mean_us", "complete_p99_us",
    "batch_wait_p50_us", "batch_wait_p99_us", "oldest_age_max_s", "oldest_age_slope_s_per_s",
    "plan_workers", "plan_workers_scan", "plan_workers_generic", "plan_workers_custom",
    "plan_workers_buffers", "plan_workers_ms", "plan_workers_rows_examined",
    "plan_explain_scan", "plan_explain_rows_examined",
    "plan_auto", "plan_custom_scan", "plan_custom_buffers", "plan_custom_ms",
    "plan_generic_scan", "plan_generic_buffers", "plan_generic_ms",
    "pgss_calls", "pgss_mean_ms", "pgss_shared_blks_per_call",
    "table_bytes_before", "indexes_bytes_before", "table_bytes_after", "indexes_bytes_after",
    "harness_cpu_max_pct", "suspect", "invariants_ok", "saturated", "invariants_unchecked", "pickup_p50_us",
    "library_mode", "server_release", "pooler", "pool_mode", "pool_size",
    "net_delay_ms", "net_jitter_ms", "relay_cpu_max_pct", "round_trip_p50_us", "sync_commit",
    *COST_COLUMNS,
)
CELL_TEXT_COLUMNS = ("server_release", "plan_workers", "plan_workers_scan", "plan_explain_scan", "plan_auto",
                     "plan_custom_scan", "plan_generic_scan", "suspect", "invariants_ok", "saturated", "invariants_unchecked",
                     "library_mode", "pooler", "pool_mode", "sync_commit")
