"""``make calibrate``: pgbench and queue-bench on the same claim and completion SQL,
same client count, same database, same measured window, same monitor load.

A pair is one pgbench run (A) then one queue-bench run (B), each on a freshly
prepared table (same backlog, ``skip_locked``, batch 1, ``WORK_MS=0``, partial
index); the pairs alternate A B A B ... (:data:`PAIRS_DEFAULT` pairs unless told).

- pgbench runs the statements of :func:`bench.engines.postgres.policies.pgbench_script` with
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
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable

import gevent
import psutil

from bench.engines.postgres import db
from bench.engines.postgres import policies
from bench import runner
from bench.engines.postgres.pgbench import find_pgbench, per_job_us, run_pgbench
from bench.config.parsers import parse_int as _int
from bench.config.run_config import build_config
from bench.results.model import RunResult, problems as run_problems, stamped
from bench.engines.postgres.monitor import Monitor, spawn_samplers

PAIRS_DEFAULT = 3
#: A failed pair is run again up to this many times before it is left out.
RETRIES_PER_PAIR = 2
GOAL_MEDIAN_RATIO = 0.95
GOAL_CPU_FACTOR = 1.5
#: The line every calibration prints last (other issues extend calibration and keep it).
SUMMARY_FORMAT = "median ratio: {median} (min {min}, max {max}, {kept} pairs, {left_out} left out)"


def harness_figures(run_dir: Path) -> dict:
    """queue-bench's side of a pair from its result files.

    Returns ``{"jobs_per_s", "jobs_completed", "measured_s", "cpu_us_per_job"
    (mean harness CPU of the measured seconds × measured_s / jobs completed),
    "harness_cpu_mean_pct", "harness_cpu_max_pct", "suspect", "suspect_reasons",
    "cpu_s", "complete"}``.
    """
    summary = RunResult.load(run_dir).summary
    with open(run_dir / "intervals.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    jobs = summary["jobs_completed"]

    def seconds(column: str) -> float | None:  # CPU seconds: the column's mean % × the measured seconds
        values = [float(r[column]) for r in rows if r.get(column) not in (None, "")]
        return sum(values) / len(values) / 100 * summary["measured_s"] if values else None

    cpu_s, user_s, system_s = seconds("harness_cpu_pct"), seconds("harness_user_pct"), seconds("harness_system_pct")
    mean_pct = 100 * cpu_s / summary["measured_s"] if cpu_s is not None and summary["measured_s"] else None
    return {"jobs_per_s": summary["throughput_jobs_per_s"], "jobs_completed": jobs,
            "measured_s": summary["measured_s"], "measured_start": summary["measured_start"],
            "measured_end": summary["measured_end"],
            "cpu_s": cpu_s, "cpu_us_per_job": per_job_us(cpu_s, jobs),
            "user_s": user_s, "system_s": system_s,
            "user_us_per_job": per_job_us(user_s, jobs), "system_us_per_job": per_job_us(system_s, jobs),
            "harness_cpu_mean_pct": round(mean_pct, 2) if mean_pct is not None else None,
            "harness_cpu_max_pct": summary["harness_cpu_max_pct"],
            "suspect": summary["suspect"], "suspect_reasons": summary["suspect_reasons"],
            "complete": summary["complete"], "problems": run_problems(summary)}


def summary_line(ratios: list[float], left_out: int) -> str:
    """:data:`SUMMARY_FORMAT` filled from the kept pairs' ``ratios`` (``n/a`` when none was kept)."""
    if not ratios:
        return SUMMARY_FORMAT.format(median="n/a", min="n/a", max="n/a", kept=0, left_out=left_out)
    return SUMMARY_FORMAT.format(median=f"{statistics.median(ratios):.2f}", min=f"{min(ratios):.2f}",
                                 max=f"{max(ratios):.2f}", kept=len(ratios), left_out=left_out)


def _monitor_during(dsn: str, cfg, stats_taken: list) -> Callable[[Callable[[], float], int], Callable[[], None]]:
    """``during`` for :func:`run_pgbench`: the runner's monitor loop on its own connections.

    Appends ``(unix time, lock_waiters)`` of each statistics sample to ``stats_taken``."""
    def start(now_s: Callable[[], float], n_seconds: int) -> Callable[[], None]:
        monitor = Monitor(lambda name: db.connect(dsn, application_name=name), cfg.schema)
        started = time.time() - now_s()

        def note(k: int, values: dict) -> None:
            if "lock_waiters" in values:
                stats_taken.append((started + k, values["lock_waiters"]))

        greenlets = spawn_samplers(monitor, now_s, n_seconds, note)

        def stop() -> None:
            gevent.killall(greenlets)
            monitor.close()
        return stop
    return start


def _pgbench_side(pgbench: str, dsn: str, cfg, backlog: int, out_dir: Path) -> dict:
    with db.connect(dsn, application_name="queue-bench calibrate") as conn:
        db.check_schema_usable(conn, cfg.schema)
        db.lock_schema(conn, cfg.schema)
        db.check_capacity(conn, cfg.workers + 2)  # pgbench's clients + the monitor's two connections
        db.prepare(conn, cfg, backlog, log=lambda _m: None)
        stats: list = []
        script = policies.pgbench_script(cfg.schema, cfg.policy, cfg.lease_s)
        n_warm, n_meas = int(round(cfg.warmup_s)), max(1, int(round(cfg.duration_s)))
        result = run_pgbench(pgbench, dsn, script, cfg.workers, n_warm, n_meas, out_dir,
                             during=_monitor_during(dsn, cfg, stats))
    start = dt.datetime.fromisoformat(result["measured_start"]).timestamp()
    in_window = [w for t, w in stats if start <= t + 0.5 < start + n_meas]
    missed = n_meas - sum(1 for w in in_window if w is not None)
    result["monitor_samples"] = len(in_window)
    if missed > 0:
        result["problems"].append(f"the monitor missed {missed} of {n_meas} samples during pgbench")
    return result


def _pair(pgbench: str, dsn: str, cfg, backlog: int, cal_dir: Path, label: str, log) -> dict:
    """One A B pair: pgbench, then queue-bench, each on a freshly prepared table.

    When pgbench's side already failed, queue-bench is not run (``queue_bench`` None):
    the pair is run again either way."""
    pg = _pgbench_side(pgbench, dsn, cfg, backlog, cal_dir / "pgbench" / label)
    entry = {"label": label, "pgbench_dir": f"pgbench/{label}", "pgbench": pg, "queue_bench": None,
             "ratio": None, "problems": [f"pgbench: {p}" for p in pg["problems"]]}
    if pg["problems"]:
        return entry
    run_dir = runner.run(cfg, dsn, log=lambda m: log("    " + m) if m.startswith("SUSPECT") else None)
    qb = harness_figures(run_dir)
    qb["run_dir"] = str(run_dir.resolve().relative_to(cal_dir.resolve()))  # calibration.json's paths: relative to it
    problems = entry["problems"] + [f"queue-bench: {p}" for p in qb["problems"]]  # the results model's rule
    ratio = qb["jobs_per_s"] / pg["tps"] if pg["tps"] and qb["jobs_per_s"] is not None else None
    if ratio is None:
        problems.append("no ratio: one side completed no job")
    return {**entry, "queue_bench": qb, "ratio": ratio, "problems": problems}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


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
        for i in range(1, pairs + 1):
            attempts = []
            for attempt in range(1 + RETRIES_PER_PAIR):
                result = _pair(pgbench, dsn, cfg, backlog, cal_dir, f"pair{i}-try{attempt + 1}", log)
                attempts.append(result)
                pg, qb = result["pgbench"], result["queue_bench"] or {}
                log(f"pair {i}{f' (try {attempt + 1})' if attempt else ''}: pgbench {pg['tps']:,.1f} tps, "
                    f"queue-bench {_fmt(qb.get('jobs_per_s'), ',.1f')} jobs/s, ratio {_fmt(result['ratio'], '.2f')}; "
                    f"CPU per job pgbench {_fmt(pg['cpu_us_per_job'], '.1f')} µs, "
                    f"harness {_fmt(qb.get('cpu_us_per_job'), '.1f')} µs"
                    + (f"; not kept: {'; '.join(result['problems'])}" if result["problems"] else ""))
                if qb.get("complete") is False:
                    raise KeyboardInterrupt
                if not result["problems"]:
                    break
            kept = not attempts[-1]["problems"]
            figures["pairs"].append({"pair": i, "kept": kept, "ratio": attempts[-1]["ratio"] if kept else None,
                                     "attempts": attempts})
            if not kept:
                log(f"pair {i}: left out after {len(attempts)} tries")
    finally:
        with db.connect(dsn) as conn:
            db.drop_schema(conn, cfg.schema)
        _finish(figures, cal_dir, log)
    return figures


def _finish(figures: dict, cal_dir: Path, log) -> None:
    """Summary figures over the kept pairs, the summary line, and calibration.json."""
    kept = [p["attempts"][-1] for p in figures["pairs"] if p["kept"]]
    ratios = [r["ratio"] for r in kept]
    left_out = sum(1 for p in figures["pairs"] if not p["kept"])
    cpu = {}  # µs per job: CPU seconds of the kept pairs' measured windows over their jobs
    for side, jobs_key in (("pgbench", "transactions"), ("queue_bench", "jobs_completed")):
        jobs = sum(r[side][jobs_key] for r in kept)
        for part in ("cpu", "user", "system"):
            seconds = [r[side].get(f"{part}_s") for r in kept]
            cpu[side, part] = 1e6 * sum(seconds) / jobs if kept and jobs and None not in seconds else None
    line = summary_line(ratios, left_out)
    figures.update({
        "median_ratio": statistics.median(ratios) if ratios else None,
        "min_ratio": min(ratios) if ratios else None,
        "max_ratio": max(ratios) if ratios else None,
        "pairs_kept": len(ratios), "pairs_left_out": left_out,
        "cpu_us_per_job": {"pgbench": cpu["pgbench", "cpu"], "harness": cpu["queue_bench", "cpu"],
                           "harness_over_pgbench": (cpu["queue_bench", "cpu"] / cpu["pgbench", "cpu"])
                           if cpu["pgbench", "cpu"] and cpu["queue_bench", "cpu"] is not None else None,
                           "pgbench_user": cpu["pgbench", "user"], "pgbench_system": cpu["pgbench", "system"],
                           "harness_user": cpu["queue_bench", "user"],
                           "harness_system": cpu["queue_bench", "system"]},
        "cores": psutil.cpu_count(),
        "summary_line": line,
    })
    cal_dir.mkdir(parents=True, exist_ok=True)
    (cal_dir / "calibration.json").write_text(json.dumps(stamped(figures), indent=2) + "\n")
    c = figures["cpu_us_per_job"]
    log(f"CPU per job over the same {figures['measured_s']} s measured windows (kept pairs): pgbench {_fmt(c['pgbench'], '.1f')} µs, "
        f"harness {_fmt(c['harness'], '.1f')} µs ({_fmt(c['harness_over_pgbench'], '.2f')} × pgbench; "
        f"goal <= {GOAL_CPU_FACTOR:g} ×); {figures['cores']} cores shared with the server")
    log(f"of which user / system time: pgbench {_fmt(c['pgbench_user'], '.1f')} / {_fmt(c['pgbench_system'], '.1f')} µs, "
        f"harness {_fmt(c['harness_user'], '.1f')} / {_fmt(c['harness_system'], '.1f')} µs")
    log(f"calibration: {(cal_dir / 'calibration.json').resolve()}")
    log(line)


def calibrate(*, workers: str = "50", duration: str = "20s", warmup: str = "5s", pairs: str | int = PAIRS_DEFAULT,
              dsn: str | None = None, schema: str = "qbench", results: str = "results", log=print) -> int:
    """Run the calibration and print the figures; returns the exit status.

    0 when at least one pair was kept, 1 when every pair was left out; bad input
    raises :class:`bench.config.run_config.ConfigError` (``PAIRS``, ``WORKERS``, ...) before
    anything is created.
    """
    n_pairs = _int("PAIRS", pairs, minimum=1, maximum=100)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    cal_dir = Path(results) / f"calibration-{stamp}"
    cfg = build_config("default", {"policy": "skip_locked", "workers": workers, "batch": 1, "txn": "short",
                                   "work_ms": 0, "index": "partial", "history": 0, "duration": duration,
                                   "warmup": warmup, "schema": schema, "results": str(cal_dir / "runs")}, dsn=dsn)
    find_pgbench()
    if cfg.dsn:
        figures = _calibrate_on(cfg.dsn, cfg, n_pairs, cal_dir, log)
    else:
        from bench.engines.postgres.embedded import embedded_postgres

        with embedded_postgres(max_connections=2 * cfg.workers + 20, log=lambda _m: None) as embedded_dsn:
            figures = _calibrate_on(embedded_dsn, cfg, n_pairs, cal_dir, log)
    return 0 if figures["pairs_kept"] else 1
