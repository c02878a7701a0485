"""``make calibrate``: pgbench and queue-bench on the same claim and completion SQL,
same client count, same database, same measured window, same monitor load.

A pair is one pgbench run (A) then one queue-bench run (B), each on a freshly
prepared table (same backlog, ``skip_locked``, batch 1, ``WORK_MS=0``, partial
index); the pairs alternate A B A B ... (:data:`PAIRS_DEFAULT` pairs unless told).

- pgbench runs the statements of :func:`bench.engines.postgres.pgbench.claim_complete_script` with
  ``-M prepared`` (one pgbench transaction = one claim + one completion = one
  job) and writes its per-second aggregate log (``--aggregate-interval=1``:
  transactions counted per interval, not rounded rates). Its first seconds up to
  the warm-up boundary are dropped exactly as queue-bench drops its warm-up, and
  its tps is the transactions of the following ``DURATION`` whole seconds over
  those seconds.
- The same :class:`bench.engines.postgres.monitor.Monitor` sampling loop that runs during every
  queue-bench run runs during pgbench too, on its own two connections, so both
  sides carry the same extra load.
- A pair in which either side is suspect (queue-bench's ``suspect``; pgbench
  failed transactions, a non-zero exit, missing seconds in its log, or missed
  monitor samples) is run again, up to :data:`RETRIES_PER_PAIR` times; a pair
  that still fails is reported and left out of the median.
- CPU µs per job, both over the measured window only: pgbench's process CPU
  (user + system, read with psutil at the window's start and end) over its
  jobs in that window; the harness's per-second CPU (``harness_cpu_pct`` in
  ``intervals.csv``, the measured window) over its completed jobs.

Output: each pair's ratio, then :data:`SUMMARY_FORMAT`; the same figures in
``<results>/calibration-<stamp>/calibration.json`` (with pgbench's logs and the
queue-bench run directories under it). Goal (docs/design.md): median ratio
≥ :data:`GOAL_MEDIAN_RATIO` and harness CPU per job ≤ :data:`GOAL_CPU_FACTOR` ×
pgbench's.

pgbench is found, run and its logs read by :mod:`bench.engines.postgres.pgbench`.

With ``--processes`` (``make calibrate CAL_PROCESSES=1,2,4``), lists of workers or a batch other
than 1, :func:`calibrate` runs the grid of :mod:`bench.cli.calibrate_grid` instead: rounds of
pgbench then queue-bench with each process count, per workers × batch configuration.

What every engine's calibration shares (the pairs and their retries, the printed lines,
queue-bench's side, the monitor beside the native client, calibration.json) is in
:mod:`bench.cli.calibrate_pairs`; MariaDB's counterpart, driven by mariadb-slap, is
:mod:`bench.cli.calibrate_mariadb`.
"""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path
from typing import Callable

from bench.engines.postgres import builtin_queue, db
from bench.engines.postgres.embedded import embedded_postgres
from bench import runner
from bench.engines.postgres.pgbench import (claim_complete_script, find_pgbench, per_job_us, processed_transactions,
                                            run_pgbench)
from bench.cli.calibrate_pairs import (GOAL_CPU_FACTOR, GOAL_MEDIAN_RATIO, PAIRS_DEFAULT, RETRIES_PER_PAIR,
                                       SUMMARY_FORMAT, Native, finish, monitor_during, run_pairs,
                                       with_swarm_side)
from bench.config.parsers import parse_int as _int
from bench.config.run_config import build_config
from bench.engines.postgres.monitor import Monitor, spawn_samplers

__all__ = ["GOAL_CPU_FACTOR", "GOAL_MEDIAN_RATIO", "PAIRS_DEFAULT", "PGBENCH", "RETRIES_PER_PAIR", "SUMMARY_FORMAT",
           "calibrate"]

PGBENCH = Native("pgbench", "pgbench", "tps", "tps", "transactions",
                 "over the same {measured_s} s measured windows (kept pairs)")


def _monitor_during(dsn: str, cfg, stats_taken: list) -> Callable[[Callable[[], float], int], Callable[[], None]]:
    """``during`` for :func:`run_pgbench`: :func:`monitor_during` with PostgreSQL's monitor."""
    return monitor_during(lambda: Monitor(lambda name: db.connect(dsn, application_name=name), cfg.schema),
                          spawn_samplers, stats_taken)


def pgbench_side(pgbench: str, dsn: str, cfg, backlog: int, out_dir: Path, *, count_jobs: bool = False) -> dict:
    """pgbench's side of a pair: a freshly prepared table with ``backlog`` pending rows, then
    :func:`run_pgbench` with ``cfg.workers`` clients and the script of ``cfg.batch`` jobs per
    transaction, the monitor beside it; writes into ``out_dir``.

    Returns :func:`run_pgbench`'s figures with ``monitor_samples``; a missed monitor sample is one
    of its ``problems``. With ``count_jobs``, also ``table`` (:func:`db.job_counts` after pgbench
    ended), ``processed`` (the transactions pgbench reports for its whole run), ``batch``, ``jobs``
    (measured transactions × batch), ``jobs_per_s`` (tps × batch) and ``cpu_us_per_job`` over those
    jobs, which holds only when every transaction completed ``batch`` jobs: the table's done rows
    must be ``processed`` × batch, each claimed once, none left running, else it is a problem."""
    with db.connect(dsn, application_name="queue-bench calibrate") as conn:
        db.check_schema_usable(conn, cfg.schema)
        db.lock_schema(conn, cfg.schema)
        db.check_capacity(conn, cfg.workers + 2)  # pgbench's clients + the monitor's two connections
        db.prepare(conn, cfg, backlog, log=lambda _m: None)
        stats: list = []
        script = claim_complete_script(builtin_queue.definition(cfg), cfg.policy, cfg.lease_s, cfg.batch)
        n_warm, n_meas = int(round(cfg.warmup_s)), max(1, int(round(cfg.duration_s)))
        result = run_pgbench(pgbench, dsn, script, cfg.workers, n_warm, n_meas, out_dir,
                             during=_monitor_during(dsn, cfg, stats))
        if count_jobs:
            _count_jobs(result, db.job_counts(conn, cfg.schema), cfg.batch, processed_transactions(out_dir))
    start = dt.datetime.fromisoformat(result["measured_start"]).timestamp()
    in_window = [w for t, w in stats if start <= t + 0.5 < start + n_meas]
    missed = n_meas - sum(1 for w in in_window if w is not None)
    result["monitor_samples"] = len(in_window)
    if missed > 0:
        result["problems"].append(f"the monitor missed {missed} of {n_meas} samples during pgbench")
    return result


def _count_jobs(result: dict, table: dict, batch: int, processed: int | None) -> None:
    """``result`` (pgbench's side) with its jobs from ``table`` (:func:`db.job_counts`) and the
    transactions pgbench ``processed``: see :func:`pgbench_side`."""
    result.update({"table": table, "processed": processed, "batch": batch, "jobs": result["transactions"] * batch,
                   "jobs_per_s": result["tps"] * batch,
                   "cpu_us_per_job": per_job_us(result["cpu_s"], result["transactions"] * batch),
                   "user_us_per_job": per_job_us(result["user_s"], result["transactions"] * batch),
                   "system_us_per_job": per_job_us(result["system_s"], result["transactions"] * batch)})
    if processed is None:
        result["problems"].append("pgbench's output lacks its count of transactions processed")
    elif table["done"] != processed * batch:
        result["problems"].append(f"the table has {table['done']:,} jobs done after {processed:,} pgbench "
                                  f"transactions of batch {batch} (expected {processed * batch:,}): some "
                                  "transactions claimed fewer jobs, so jobs/s is not tps × batch")
    if table["running"] or table["attempts_done"] != table["done"]:
        result["problems"].append(f"after pgbench the table has {table['running']:,} jobs running and "
                                  f"{table['attempts_done'] - table['done']:,} claims of done jobs beyond one each")


def _pair(pgbench: str, dsn: str, cfg, label: str, *, backlog: int, cal_dir: Path, log) -> dict:
    """One A B pair: pgbench, then queue-bench, each on a freshly prepared table.

    When pgbench's side already failed, queue-bench is not run (``queue_bench`` None):
    the pair is run again either way."""
    pg = pgbench_side(pgbench, dsn, cfg, backlog, cal_dir / "pgbench" / label)
    entry = {"label": label, "pgbench_dir": f"pgbench/{label}", "pgbench": pg, "queue_bench": None,
             "ratio": None, "problems": [f"pgbench: {p}" for p in pg["problems"]]}
    if pg["problems"]:
        return entry
    return with_swarm_side(entry, pg["tps"], cfg, dsn, cal_dir, log)


def _calibrate_on(dsn: str, cfg, pairs: int, cal_dir: Path, log) -> dict:
    pgbench = find_pgbench()
    backlog, _ = runner.compute_backlog(cfg)
    version = subprocess.run([pgbench, "--version"], capture_output=True, text=True).stdout.strip()
    figures = {"pgbench_binary": pgbench, "pgbench_version": version, "config": cfg.public(),
               "backlog": backlog, "measured_s": max(1, int(round(cfg.duration_s))),
               "warmup_s": int(round(cfg.warmup_s)), "pairs_requested": pairs, "retries_per_pair": RETRIES_PER_PAIR,
               "goal": {"median_ratio_min": GOAL_MEDIAN_RATIO, "harness_cpu_per_job_max_x_pgbench": GOAL_CPU_FACTOR},
               "pairs": []}
    # Refuse before anything is created or dropped: a schema not the tool's, one in use by
    # another run, or too few connections for either side (pgbench's clients + the monitor's two).
    with db.connect(dsn, application_name="queue-bench calibrate") as conn:
        db.check_schema_usable(conn, cfg.schema)
        db.lock_schema(conn, cfg.schema)
        db.check_capacity(conn, max(cfg.workers + 2, cfg.connections_needed()))
    log(f"calibration: {pairs} pairs of pgbench (A) then queue-bench (B), {cfg.workers} clients, "
        f"{cfg.duration_s:g} s measured after {cfg.warmup_s:g} s warm-up, same monitor on both sides -> {cal_dir}")
    try:
        run_pairs(figures, pairs, lambda label: _pair(pgbench, dsn, cfg, label, backlog=backlog, cal_dir=cal_dir, log=log), PGBENCH, log)
    finally:
        with db.connect(dsn) as conn:
            db.drop_schema(conn, cfg.schema)
        finish(figures, cal_dir, log, PGBENCH)
    return figures


def calibrate(*, workers: str = "50", duration: str = "20s", warmup: str = "5s", pairs: str | int = PAIRS_DEFAULT,
              dsn: str | None = None, schema: str = "qbench", results: str = "results", batch: str = "1",
              processes: str | None = None, log=print) -> int:
    """Run the calibration and print the figures; returns the exit status.

    0 when at least one pair was kept, 1 when every pair was left out; bad input
    raises :class:`bench.config.run_config.ConfigError` (``PAIRS``, ``WORKERS``, ...) before
    anything is created. With ``processes`` (e.g. ``"1,2,4"``), a list of ``workers`` or a
    ``batch`` other than 1 (each a value or a comma list), the grid of
    :mod:`bench.cli.calibrate_grid` instead: 0 when every configuration and process count kept a
    round, else 1.
    """
    n_pairs = _int("PAIRS", pairs, minimum=1, maximum=100)
    from bench.cli.calibrate_grid import calibrate_grid, grid_requested  # here: it imports this module (a cycle)

    if grid_requested(workers, batch, processes):
        return calibrate_grid(workers=workers, batch=batch, processes=processes, duration=duration, warmup=warmup,
                              n_pairs=n_pairs, dsn=dsn, schema=schema, results=results, log=log)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    cal_dir = Path(results) / f"calibration-{stamp}"
    cfg = build_config("default", {"policy": "skip_locked", "workers": workers, "batch": 1, "txn": "short",
                                   "work_ms": 0, "index": "partial", "history": 0, "duration": duration,
                                   "warmup": warmup, "schema": schema, "results": str(cal_dir / "runs")}, dsn=dsn)
    find_pgbench()
    if cfg.dsn:
        figures = _calibrate_on(cfg.dsn, cfg, n_pairs, cal_dir, log)
    else:
        with embedded_postgres(max_connections=2 * cfg.workers + 20, log=lambda _m: None) as embedded_dsn:
            figures = _calibrate_on(embedded_dsn, cfg, n_pairs, cal_dir, log)
    return 0 if figures["pairs_kept"] else 1
