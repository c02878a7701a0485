"""``make calibrate``: pgbench and queue-bench on the same claim and completion SQL, in alternating pairs.

The method (pairs, the same measured window, retries, CPU per job, the goal) is docs/calibration.md's; the
grid is :mod:`bench.cli.calibrate_grid`, what every engine shares :mod:`bench.cli.calibrate_pairs`."""

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
    """pgbench's side of a pair on a freshly prepared table of ``backlog`` pending rows, the monitor beside it;
    files into ``out_dir``. Returns :func:`run_pgbench`'s figures with ``monitor_samples``; with
    ``count_jobs`` also ``table``, ``processed``, ``batch``, ``jobs``, ``jobs_per_s`` (tps × batch) and
    ``cpu_us_per_job`` (µs), a problem unless the done rows are ``processed`` × batch, each claimed once."""
    with db.connect(dsn, application_name="queue-bench calibrate") as conn:
        db.check_schema_usable(conn, cfg.schema)
        db.lock_schema(conn, cfg.schema)
        db.check_capacity(conn, cfg.workers + 2)  # pgbench's clients + the monitor's two connections
        db.prepare(conn, cfg, backlog, log=lambda _m: None)
        stats: list = []
        script = claim_complete_script(builtin_queue.definition(cfg), cfg.policy, cfg.lease_s, cfg.batch)
        n_warm, n_meas = int(round(cfg.warmup_s)), max(1, int(round(cfg.duration_s)))
        result = run_pgbench(pgbench, dsn, script, out_dir, clients=cfg.workers, warmup_s=n_warm, duration_s=n_meas,
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
    """``result`` with its jobs counted from ``table`` and ``processed`` (see :func:`pgbench_side`)."""
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
    """One A B pair (pgbench, then queue-bench); ``queue_bench`` None when pgbench's side failed."""
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
    """Run the calibration and print the figures; returns the exit status: 0 when a pair was kept (grid: every
    configuration and process count kept a round), else 1. ``processes``, a list of ``workers`` or a ``batch``
    other than 1 run the grid (:mod:`bench.cli.calibrate_grid`). Raises ConfigError (``PAIRS``, ``WORKERS``,
    ...) before anything is created."""
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
