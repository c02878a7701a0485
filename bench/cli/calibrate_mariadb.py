"""``make calibrate ENGINE=mariadb``: mariadb-slap (https://mariadb.com/kb/en/mariadb-slap/) and queue-bench on
the same claim and completion SQL, in alternating pairs (docs/calibration.md)."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

from bench import runner
from bench.cli.calibrate_grid import refuse_grid
from bench.cli.calibrate_pairs import (GOAL_CPU_FACTOR, GOAL_MEDIAN_RATIO, PAIRS_DEFAULT, RETRIES_PER_PAIR,
                                       Native, finish, monitor_during, run_pairs, with_swarm_side)
from bench.config.parsers import parse_int as _int
from bench.config.run_config import build_config
from bench.engines import get_engine
from bench.engines.mariadb.embedded import embedded_mariadb
from bench.engines.mariadb.slap import count_problems, find_slap, job_counts, run_slap, slap_script, slap_version
from bench.engines.postgres.pgbench import per_job_us
from bench.errors import RunFailed

SLAP = Native("mariadb_slap", "mariadb-slap", "jobs_per_s", "jobs/s", "jobs",
              "(kept pairs; mariadb-slap over each whole run, the harness over its {measured_s} s measured windows)")
#: Both sides' isolation: the engine's default (repeatable_read). Before the statements keyed by id
#: forced the primary key (:mod:`bench.engines.mariadb.policies`), the optimizer read the completion's
#: ``UPDATE … WHERE id = … AND status = 'running'`` through the (status, priority, run_at, id) index,
#: whose next-key locks deadlocked with the claims, and mariadb-slap ended at that first error.
ISOLATION = "repeatable_read"
#: Jobs per client of the first sizing run; each next one is larger until a run lasts PROBE_MIN_S
#: or PROBE_SHARE × DURATION, whichever is longer.
PROBE_START_PER_CLIENT = 5
PROBE_MIN_S = 2.0
PROBE_SHARE = 0.25
PROBE_ROUNDS = 5
#: A sizing run is at most this many times larger than the one before.
PROBE_GROWTH_MAX = 10
PER_CLIENT_MIN = 10
#: Pending rows seeded per job mariadb-slap will claim, so the last claims still find a backlog.
BACKLOG_SAFETY = 1.25
#: A monitor sample counts as due once its second's middle is this long before mariadb-slap ended.
SAMPLE_GRACE_S = 0.2


def _slap_side(slap: str, dsn: str, cfg, backlog: int, per_client: int, out_dir: Path) -> dict:
    """One mariadb-slap run on a freshly prepared table, the monitor beside it: :func:`run_slap`'s figures plus
    ``jobs`` (done on the table), ``jobs_per_s``, ``counts``, CPU per job (µs), ``monitor_samples`` and every
    problem found."""
    engine = get_engine("mariadb")
    conn = engine.connect(dsn, "queue-bench calibrate")
    try:
        engine.claim_schema(conn, cfg.schema, cfg.workers + 2)  # its clients + the monitor's two connections
        engine.prepare(conn, cfg, backlog, log=lambda _m: None, state_schema=None)
        stats: list = []
        result = run_slap(slap, dsn, slap_script(cfg.schema, cfg.policy, cfg.index, cfg.lease_s), out_dir,
                          clients=cfg.workers, per_client=per_client, schema=cfg.schema, isolation=cfg.isolation,
                          during=monitor_during(lambda: engine.monitor(dsn, cfg), engine.spawn_samplers, stats))
        counts = job_counts(conn, cfg.schema)
    finally:
        conn.close()
    jobs, wall_s = counts["done"], result["wall_s"]
    start = dt.datetime.fromisoformat(result["started"]).timestamp()
    taken = [w for t, w in stats if t + 0.5 < start + wall_s]
    due = max(0, math.ceil(wall_s - 0.5 - SAMPLE_GRACE_S))
    missed = due - sum(1 for w in taken if w is not None)
    result.update({
        "jobs": jobs, "jobs_per_s": jobs / wall_s if wall_s > 0 else 0.0, "counts": counts,
        "cpu_us_per_job": per_job_us(result["cpu_s"], jobs), "user_us_per_job": per_job_us(result["user_s"], jobs),
        "system_us_per_job": per_job_us(result["system_s"], jobs), "monitor_samples": len(taken),
    })
    result["problems"] += count_problems(counts, result["jobs_expected"])
    if missed > 0:
        result["problems"].append(f"the monitor missed {missed} of {due} samples during mariadb-slap")
    return result


def _sizing(slap: str, dsn: str, cfg, out_dir: Path, log) -> tuple[int, list[dict]]:
    """(jobs per client for a run of about ``cfg.duration_s``, the sizing runs' figures). Raises RunFailed when a
    sizing run has a problem."""
    per_client, runs = PROBE_START_PER_CLIENT, []
    long_enough_s = max(PROBE_MIN_S, PROBE_SHARE * cfg.duration_s)
    for i in range(1, PROBE_ROUNDS + 1):
        backlog = max(runner.compute_backlog(cfg)[0], math.ceil(BACKLOG_SAFETY * cfg.workers * per_client))
        result = _slap_side(slap, dsn, cfg, backlog, per_client, out_dir / f"sizing{i}")
        runs.append({**result, "dir": f"mariadb-slap/sizing{i}"})
        if result["problems"]:
            raise RunFailed(f"mariadb-slap's sizing run {i} failed: {'; '.join(result['problems'])} "
                            f"(its files: {out_dir / f'sizing{i}'})")
        if result["wall_s"] >= long_enough_s:
            break
        growth = min(PROBE_GROWTH_MAX, 1.2 * long_enough_s / max(result["wall_s"], 1e-3))
        per_client = math.ceil(per_client * growth)
    rate = runs[-1]["jobs_per_s"]
    per_client = max(PER_CLIENT_MIN, math.ceil(rate * cfg.duration_s / cfg.workers))
    log(f"mariadb-slap: {rate:,.1f} jobs/s in its sizing run of {runs[-1]['wall_s']:.1f} s: "
        f"{per_client:,} jobs per client (about {cfg.duration_s:g} s)")
    return per_client, runs


def _pair(slap: str, dsn: str, cfg, label: str, *, backlog: int, per_client: int, cal_dir: Path, log) -> dict:
    """One A B pair (mariadb-slap, then queue-bench); ``queue_bench`` None when mariadb-slap's side failed."""
    side = _slap_side(slap, dsn, cfg, backlog, per_client, cal_dir / "mariadb-slap" / label)
    entry = {"label": label, "mariadb_slap_dir": f"mariadb-slap/{label}", "mariadb_slap": side, "queue_bench": None,
             "ratio": None, "problems": [f"mariadb-slap: {p}" for p in side["problems"]]}
    if side["problems"]:
        return entry
    return with_swarm_side(entry, side["jobs_per_s"], cfg, dsn, cal_dir, log)


def _calibrate_on(slap: str, dsn: str, cfg, pairs: int, cal_dir: Path, log) -> dict:
    engine = get_engine("mariadb")
    figures = {"engine": "mariadb", "mariadb_slap_binary": slap, "mariadb_slap_version": slap_version(slap),
               "config": cfg.public(), "backlog": None, "measured_s": max(1, int(round(cfg.duration_s))),
               "warmup_s": int(round(cfg.warmup_s)), "mariadb_slap_jobs_per_client": None,
               "mariadb_slap_target_s": cfg.duration_s, "sizing_runs": [],
               "pairs_requested": pairs, "retries_per_pair": RETRIES_PER_PAIR,
               "goal": {"median_ratio_min": GOAL_MEDIAN_RATIO, "harness_cpu_per_job_max_x_mariadb_slap": GOAL_CPU_FACTOR},
               "pairs": []}
    # Refuse before anything is created or dropped: a database not the tool's, one in use by
    # another run, or too few connections for either side.
    conn = engine.connect(dsn, "queue-bench calibrate")
    try:
        engine.claim_schema(conn, cfg.schema, max(cfg.workers + 2, cfg.connections_needed()))
    finally:
        conn.close()
    log(f"calibration: {pairs} pairs of mariadb-slap (A) then queue-bench (B), {cfg.workers} clients; "
        f"mariadb-slap a fixed number of jobs per client (about {cfg.duration_s:g} s), queue-bench "
        f"{cfg.duration_s:g} s measured after {cfg.warmup_s:g} s warm-up; same monitor on both sides -> {cal_dir}")
    try:
        per_client, figures["sizing_runs"] = _sizing(slap, dsn, cfg, cal_dir / "mariadb-slap", log)
        backlog = max(runner.compute_backlog(cfg)[0], math.ceil(BACKLOG_SAFETY * cfg.workers * per_client))
        figures.update({"mariadb_slap_jobs_per_client": per_client, "backlog": backlog})
        run_pairs(figures, pairs, lambda label: _pair(slap, dsn, cfg, label, backlog=backlog, per_client=per_client,
                                                      cal_dir=cal_dir, log=log), SLAP, log)
    finally:
        engine.drop_schema_at(dsn, cfg.schema)
        finish(figures, cal_dir, log, SLAP)
    return figures


def calibrate_mariadb(*, workers: str = "50", duration: str = "20s", warmup: str = "5s",
                      pairs: str | int = PAIRS_DEFAULT, dsn: str | None = None, schema: str = "qbench",
                      results: str = "results", batch: str = "1", processes: str | None = None, log=print) -> int:
    """Run the MariaDB calibration (the embedded server without a DSN) and print the figures; returns 0 when a
    pair was kept, 1 when none was or a sizing run failed (RunFailed). Raises ConfigError before anything is
    created: ``PAIRS``, ``WORKERS``, …; ``MARIADB_SLAP`` with no mariadb-slap on ``$PATH``; the grid's
    parameters (:func:`bench.cli.calibrate_grid.refuse_grid`)."""
    refuse_grid(workers, batch, processes)
    n_pairs = _int("PAIRS", pairs, minimum=1, maximum=100)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    cal_dir = Path(results) / f"calibration-{stamp}"
    cfg = build_config("default", {"engine": "mariadb", "policy": "skip_locked", "workers": workers, "batch": 1,
                                   "txn": "short", "work_ms": 0, "index": "composite", "history": 0, "isolation": ISOLATION,
                                   "duration": duration, "warmup": warmup, "schema": schema,
                                   "results": str(cal_dir / "runs")}, dsn=dsn)
    slap = find_slap()
    if cfg.dsn:
        figures = _calibrate_on(slap, cfg.dsn, cfg, n_pairs, cal_dir, log)
    else:
        with embedded_mariadb(max_connections=2 * cfg.workers + 20, log=lambda _m: None) as embedded_dsn:
            figures = _calibrate_on(slap, embedded_dsn, cfg, n_pairs, cal_dir, log)
    return 0 if figures["pairs_kept"] else 1
