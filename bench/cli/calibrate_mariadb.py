"""``make calibrate ENGINE=mariadb``: mariadb-slap (https://mariadb.com/kb/en/mariadb-slap/) and queue-bench on
the same claim and completion SQL, in alternating pairs (docs/calibration.md); what differs from pgbench's
calibration (:mod:`bench.cli.calibrate_pairs` runs both): the sizing of mariadb-slap's fixed number of jobs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from bench import runner
from bench.cli.calibrate_pairs import Native, calibrate_with, native_side, per_job
from bench.engines.mariadb.embedded import embedded_mariadb
from bench.engines.mariadb.slap import count_problems, find_slap, job_counts, run_slap, slap_script, slap_version
from bench.errors import RunFailed

#: Both sides' isolation: the engine's default (docs/calibration.md: why it no longer deadlocks).
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


class Slap(Native):
    """mariadb-slap: a fixed number of jobs per client, sized before the pairs; no warm-up, no time limit."""

    key, name = "mariadb_slap", "mariadb-slap"
    rate_key, rate_unit, jobs_key = "jobs_per_s", "jobs/s", "jobs"
    cpu_window = "(kept pairs; mariadb-slap over each whole run, the harness over its {measured_s} s measured windows)"
    timing = ("; mariadb-slap a fixed number of jobs per client (about {duration:g} s), queue-bench {duration:g} s "
              "measured after {warmup:g} s warm-up;")
    parameters = {"engine": "mariadb", "index": "composite", "isolation": ISOLATION}
    head = {"engine": "mariadb"}
    find, embedded, version = staticmethod(find_slap), staticmethod(embedded_mariadb), staticmethod(slap_version)

    def extra(self, cfg) -> dict:
        return {"mariadb_slap_jobs_per_client": None, "mariadb_slap_target_s": cfg.duration_s, "sizing_runs": []}

    def ready(self, binary: str, dsn: str, cfg, figures: dict, cal_dir: Path, log) -> Callable[[Path], dict]:
        """The sizing runs (:func:`_sizing`); RunFailed when one has a problem."""
        per_client, figures["sizing_runs"] = _sizing(binary, dsn, cfg, cal_dir / self.name, log)
        backlog = _backlog(cfg, per_client)
        figures.update({"mariadb_slap_jobs_per_client": per_client, "backlog": backlog})
        return lambda out_dir: _slap_side(binary, dsn, cfg, backlog, per_client, out_dir)


def _backlog(cfg, per_client: int) -> int:
    """Pending rows for ``per_client`` jobs per client: the run's backlog, or more (:data:`BACKLOG_SAFETY`)."""
    return max(runner.compute_backlog(cfg)[0], math.ceil(BACKLOG_SAFETY * cfg.workers * per_client))


def _slap_side(slap: str, dsn: str, cfg, backlog: int, per_client: int, out_dir: Path) -> dict:
    """One mariadb-slap run on a freshly prepared table, the monitor beside it: :func:`run_slap`'s figures plus
    ``jobs`` (done on the table), ``jobs_per_s``, ``counts``, CPU per job (µs), ``monitor_samples`` and problems."""
    script = slap_script(cfg.schema, cfg.policy, cfg.index, cfg.lease_s)

    def count(conn, result: dict) -> None:
        counts = job_counts(conn, cfg.schema)
        jobs, wall_s = counts["done"], result["wall_s"]
        result.update({"jobs": jobs, "jobs_per_s": jobs / wall_s if wall_s > 0 else 0.0, "counts": counts,
                       **per_job(result, jobs)})
        result["problems"] += count_problems(counts, result["jobs_expected"])
    return native_side(dsn, cfg, backlog, lambda during: run_slap(
                           slap, dsn, script, out_dir=out_dir, clients=cfg.workers, per_client=per_client,
                           schema=cfg.schema, isolation=cfg.isolation, during=during),
                       name="mariadb-slap", count=count, window=lambda result: (
                           result["started"], result["wall_s"],
                           max(0, math.ceil(result["wall_s"] - 0.5 - SAMPLE_GRACE_S))))


def _sizing(slap: str, dsn: str, cfg, out_dir: Path, log) -> tuple[int, list[dict]]:
    """(jobs per client for about ``cfg.duration_s``, the sizing runs' figures). RunFailed on a problem."""
    per_client, runs = PROBE_START_PER_CLIENT, []
    long_enough_s = max(PROBE_MIN_S, PROBE_SHARE * cfg.duration_s)
    for i in range(1, PROBE_ROUNDS + 1):
        result = _slap_side(slap, dsn, cfg, _backlog(cfg, per_client), per_client, out_dir / f"sizing{i}")
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


SLAP = Slap()


def calibrate_mariadb(**options) -> int:
    """``qbench calibrate`` on MariaDB: :func:`bench.cli.calibrate_pairs.calibrate_with` against mariadb-slap; also
    raises RunFailed (exit status 1) when a sizing run failed."""
    return calibrate_with(SLAP, **options)
