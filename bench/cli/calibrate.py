"""``make calibrate``: pgbench and queue-bench on the same claim and completion SQL, in alternating pairs.

The method (pairs, the same measured window, retries, CPU per job, the goal) is docs/calibration.md's; the
grid is :mod:`bench.cli.calibrate_grid`, what every engine shares :mod:`bench.cli.calibrate_pairs`."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Callable

from bench import runner
from bench.cli.calibrate_grid import calibrate_grid
from bench.cli.calibrate_pairs import Native, calibrate_with, native_side, per_job
from bench.engines.postgres import builtin_queue, db
from bench.engines.postgres.embedded import embedded_postgres
from bench.engines.postgres.pgbench import claim_complete_script, find_pgbench, processed_transactions, run_pgbench

__all__ = ["PGBENCH", "Pgbench", "calibrate"]


class Pgbench(Native):
    """pgbench: a measured window after a warm-up, as queue-bench's; its tps is its jobs/s at batch 1."""

    key = name = "pgbench"
    rate_key, rate_unit, jobs_key = "tps", "tps", "transactions"
    cpu_window = "over the same {measured_s} s measured windows (kept pairs)"
    timing = ", {duration:g} s measured after {warmup:g} s warm-up,"
    parameters = {"index": "partial"}
    find, embedded = staticmethod(find_pgbench), staticmethod(embedded_postgres)

    def version(self, binary: str) -> str:
        return subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()

    def grid(self, **options) -> int:
        """:func:`bench.cli.calibrate_grid.calibrate_grid` against pgbench."""
        return calibrate_grid(self, **options)

    def ready(self, binary: str, dsn: str, cfg, figures: dict, cal_dir: Path, log) -> Callable[[Path], dict]:
        figures["backlog"] = backlog = runner.compute_backlog(cfg)[0]
        return lambda out_dir: self.side(binary, dsn, cfg, backlog, out_dir)

    def side(self, binary: str, dsn: str, cfg, backlog: int, out_dir: Path, *, count_jobs: bool = False) -> dict:
        """pgbench's side of a pair on a freshly prepared table of ``backlog`` pending rows, the monitor beside it;
        files into ``out_dir``. Returns :func:`run_pgbench`'s figures with ``monitor_samples``; with
        ``count_jobs`` also ``table``, ``processed``, ``batch``, ``jobs``, ``jobs_per_s`` (tps × batch) and
        ``cpu_us_per_job`` (µs), a problem unless the done rows are ``processed`` × batch, each claimed once."""
        script = claim_complete_script(builtin_queue.definition(cfg), cfg.policy, cfg.lease_s, cfg.batch)
        n_warm, n_meas = int(round(cfg.warmup_s)), max(1, int(round(cfg.duration_s)))

        def count(conn, result: dict) -> None:
            _count_jobs(result, db.job_counts(conn, cfg.schema), cfg.batch, processed_transactions(out_dir))
        return native_side(dsn, cfg, backlog, lambda during: run_pgbench(
                               binary, dsn, script, out_dir=out_dir, clients=cfg.workers, warmup_s=n_warm,
                               duration_s=n_meas, during=during),
                           name=self.name, window=lambda result: (result["measured_start"], n_meas, n_meas),
                           count=count if count_jobs else None)


PGBENCH = Pgbench()


def _count_jobs(result: dict, table: dict, batch: int, processed: int | None) -> None:
    """``result`` with its jobs counted from ``table`` and ``processed`` (see :meth:`Pgbench.side`)."""
    jobs = result["transactions"] * batch
    result.update({"table": table, "processed": processed, "batch": batch, "jobs": jobs,
                   "jobs_per_s": result["tps"] * batch, **per_job(result, jobs)})
    if processed is None:
        result["problems"].append("pgbench's output lacks its count of transactions processed")
    elif table["done"] != processed * batch:
        result["problems"].append(f"the table has {table['done']:,} jobs done after {processed:,} pgbench "
                                  f"transactions of batch {batch} (expected {processed * batch:,}): some "
                                  "transactions claimed fewer jobs, so jobs/s is not tps × batch")
    if table["running"] or table["attempts_done"] != table["done"]:
        result["problems"].append(f"after pgbench the table has {table['running']:,} jobs running and "
                                  f"{table['attempts_done'] - table['done']:,} claims of done jobs beyond one each")


def calibrate(**options) -> int:
    """``qbench calibrate`` on PostgreSQL: :func:`bench.cli.calibrate_pairs.calibrate_with` against pgbench."""
    return calibrate_with(PGBENCH, **options)
