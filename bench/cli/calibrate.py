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

pgbench (``--log``, ``--aggregate-interval``, the aggregate log's columns):
https://www.postgresql.org/docs/15/pgbench.html#PGBENCH-LOGGING
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
import re
import shutil
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
from bench.config.parsers import parse_int as _int
from bench.config.run_config import build_config
from bench.errors import ConfigError
from bench.engines.postgres.monitor import Monitor, spawn_samplers

PAIRS_DEFAULT = 3
#: A failed pair is run again up to this many times before it is left out.
RETRIES_PER_PAIR = 2
GOAL_MEDIAN_RATIO = 0.95
GOAL_CPU_FACTOR = 1.5
#: The line every calibration prints last (other issues extend calibration and keep it).
SUMMARY_FORMAT = "median ratio: {median} (min {min}, max {max}, {kept} pairs, {left_out} left out)"
#: pgbench runs this long past the measured window, so that its last measured second
#: is complete and written (pgbench 15 does not write the interval it stops in).
PGBENCH_TAIL_S = 2

_FAILED_RE = re.compile(r"number of failed transactions: (\d+)")
#: pgbench 15 aggregate log columns (0-based): interval_start, num_transactions, ...,
#: serialization_failures and deadlock_failures last.
_AGG_START, _AGG_TRANSACTIONS = 0, 1


def find_pgbench() -> str:
    """Path of a pgbench binary (PATH, then the server binaries queue-bench would use).

    Raises ConfigError (``PGBENCH``) when there is none.
    """
    found = shutil.which("pgbench")
    if found:
        return found
    try:
        from bench.engines.postgres.embedded_binaries import find_server_binaries

        candidate = Path(find_server_binaries().bindir) / "pgbench"
        if candidate.exists():
            return str(candidate)
    except Exception:  # noqa: BLE001 - any failure here means "not found"
        pass
    raise ConfigError("PGBENCH", "no pgbench found on PATH; install postgresql-client (it ships pgbench)")


def read_aggregate_log(paths: list[Path]) -> dict[int, dict[str, int]]:
    """pgbench's per-second aggregate logs (one file per thread) summed by interval.

    Returns ``{interval_start (Unix s): {"transactions": n, "failures": n,
    "threads": files that have the interval}}``; ``failures`` is the sum of the
    serialization and deadlock failure columns (pgbench 15: the last two).
    """
    out: dict[int, dict[str, int]] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            cols = line.split()
            if len(cols) < 6:
                continue
            entry = out.setdefault(int(cols[_AGG_START]), {"transactions": 0, "failures": 0, "threads": 0})
            entry["transactions"] += int(cols[_AGG_TRANSACTIONS])
            entry["failures"] += int(cols[-1]) + int(cols[-2]) if len(cols) >= 15 else 0
            entry["threads"] += 1
    return out


def run_pgbench(pgbench: str, dsn: str, script: str, clients: int, warmup_s: int, duration_s: int,
                out_dir: Path, during: Callable[[Callable[[], float], int], Callable[[], None]] | None = None) -> dict:
    """Run pgbench with ``script`` and ``clients`` clients; measure the window after the warm-up.

    The measured window is the ``duration_s`` whole Unix seconds starting at the
    first whole second at least ``warmup_s`` after pgbench was started (so at
    least the warm-up is dropped; the aggregate log's intervals are whole Unix
    seconds). ``during(now_s, n_seconds)`` is started beside pgbench (the monitor)
    and returns a function that stops it, called when pgbench ends. Writes the script,
    pgbench's output and its aggregate logs into ``out_dir``.

    Returns ``{"tps", "transactions", "measured_s", "measured_start", "measured_end",
    "per_second" (transactions of each measured second), "failed", "exit_code",
    "cpu_s", "cpu_us_per_job", "calibrate_cpu_s", "problems" (strings; empty when
    the run is clean)}``.
    """
    out_dir = out_dir.resolve()  # pgbench runs in it: its paths must not be relative to the caller's
    out_dir.mkdir(parents=True)
    script_path = out_dir / "claim_complete.sql"
    script_path.write_text(script)
    threads = min(2, clients)
    own = psutil.Process()
    started = time.time()
    window_start = math.ceil(started + warmup_s)
    window_end = window_start + duration_s
    seconds = int(math.ceil(window_end - started)) + PGBENCH_TAIL_S
    argv = [pgbench, "-n", "-M", "prepared", "-f", str(script_path), "-c", str(clients), "-j", str(threads),
            "-T", str(seconds), "--log", "--aggregate-interval=1", f"--log-prefix={out_dir / 'aggregate'}", dsn]
    with open(out_dir / "pgbench.out", "w") as output:
        proc = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, cwd=out_dir)
    stop = during(lambda: time.time() - started, seconds) if during else (lambda: None)
    cpu = {}
    try:
        ps = psutil.Process(proc.pid)
        for name, at in (("start", window_start), ("end", window_end)):
            gevent.sleep(max(0.0, at - time.time()))
            times, mine = ps.cpu_times(), own.cpu_times()
            cpu[name] = (times.user + times.system, mine.user + mine.system, times.user, times.system)
    except psutil.NoSuchProcess:  # pgbench ended early: reported below
        pass
    finally:
        exit_code = proc.wait()
        stop()
    out = (out_dir / "pgbench.out").read_text()
    failed_match = _FAILED_RE.search(out)
    failed = int(failed_match.group(1)) if failed_match else 0
    intervals = read_aggregate_log(sorted(out_dir.glob("aggregate.*")))
    measured = [intervals.get(t, {"transactions": 0, "failures": 0, "threads": 0})
                for t in range(window_start, window_end)]
    transactions = sum(m["transactions"] for m in measured)
    problems = []
    if exit_code != 0:
        last = out.strip().splitlines()[-1] if out.strip() else "no output"
        problems.append(f"pgbench exited with status {exit_code} ({last})")
    if failed or any(m["failures"] for m in measured):
        problems.append(f"pgbench reported {failed} failed transactions")
    missing = sum(1 for m in measured if m["threads"] < threads)
    if missing:
        problems.append(f"pgbench's aggregate log lacks {missing} of the {duration_s} measured seconds")
    cpu_s = cpu["end"][0] - cpu["start"][0] if len(cpu) == 2 else None
    user_s = cpu["end"][2] - cpu["start"][2] if len(cpu) == 2 else None
    system_s = cpu["end"][3] - cpu["start"][3] if len(cpu) == 2 else None
    return {
        "tps": transactions / duration_s,
        "transactions": transactions,
        "measured_s": duration_s,
        "measured_start": runner._iso_at(window_start),
        "measured_end": runner._iso_at(window_end),
        "per_second": [m["transactions"] for m in measured],
        "failed": failed,
        "exit_code": exit_code,
        "cpu_s": cpu_s,
        "cpu_us_per_job": _per_job_us(cpu_s, transactions),
        "user_s": user_s, "system_s": system_s,
        "user_us_per_job": _per_job_us(user_s, transactions),
        "system_us_per_job": _per_job_us(system_s, transactions),
        # the calibrating process's own CPU over the window: the monitor's client side
        "calibrate_cpu_s": cpu["end"][1] - cpu["start"][1] if len(cpu) == 2 else None,
        "argv": argv[:-1] + ["<dsn>"],
        "problems": problems,
    }


def _per_job_us(cpu_s: float | None, jobs: int) -> float | None:
    return 1e6 * cpu_s / jobs if cpu_s is not None and jobs else None


def harness_figures(run_dir: Path) -> dict:
    """queue-bench's side of a pair from its result files.

    Returns ``{"jobs_per_s", "jobs_completed", "measured_s", "cpu_us_per_job"
    (mean harness CPU of the measured seconds × measured_s / jobs completed),
    "harness_cpu_mean_pct", "harness_cpu_max_pct", "suspect", "suspect_reasons",
    "cpu_s", "complete"}``.
    """
    summary = json.loads((run_dir / "summary.json").read_text())
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
            "cpu_s": cpu_s, "cpu_us_per_job": _per_job_us(cpu_s, jobs),
            "user_s": user_s, "system_s": system_s,
            "user_us_per_job": _per_job_us(user_s, jobs), "system_us_per_job": _per_job_us(system_s, jobs),
            "harness_cpu_mean_pct": round(mean_pct, 2) if mean_pct is not None else None,
            "harness_cpu_max_pct": summary["harness_cpu_max_pct"],
            "suspect": summary["suspect"], "suspect_reasons": summary["suspect_reasons"],
            "complete": summary["complete"]}


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
    problems = entry["problems"] + [f"queue-bench: {r}" for r in qb["suspect_reasons"]]
    if not qb["complete"]:
        problems.append("queue-bench: the run was interrupted")
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
    (cal_dir / "calibration.json").write_text(json.dumps(figures, indent=2) + "\n")
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
