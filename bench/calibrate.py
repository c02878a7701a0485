"""``make calibrate``: pgbench and queue-bench on the same claim and completion SQL,
same client count, same database, in one invocation.

Sequence: pgbench, queue-bench, pgbench again; each on a freshly prepared table
(same backlog, ``skip_locked``, batch 1, ``WORK_MS=0``, partial index). pgbench
runs the statements of :func:`bench.policies.pgbench_script` with ``-M prepared``
(one pgbench transaction = one claim + one completion = one job), for the
warm-up plus the measured window; its two tps figures bracket the machine's
drift. Goal (DESIGN.md): queue-bench ≥ 0.9 × pgbench. The harness CPU (% of one
core) is printed beside it, because on a 2-core machine the load generator and
the server share the CPU.

pgbench: https://www.postgresql.org/docs/current/pgbench.html
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from . import db, policies, runner
from .config import ConfigError, build_config

_TPS_RE = re.compile(r"^tps = ([0-9.]+) \(without initial connection time\)", re.M)


def find_pgbench() -> str:
    """Path of a pgbench binary (PATH, then the server binaries queue-bench would use).

    Raises ConfigError (``PGBENCH``) when there is none.
    """
    found = shutil.which("pgbench")
    if found:
        return found
    try:
        from .embedded import find_server_binaries

        candidate = Path(find_server_binaries().bindir) / "pgbench"
        if candidate.exists():
            return str(candidate)
    except Exception:  # noqa: BLE001 - any failure here means "not found"
        pass
    raise ConfigError("PGBENCH", "no pgbench found on PATH; install postgresql-client (it ships pgbench)")


def run_pgbench(pgbench: str, dsn: str, script: str, clients: int, seconds: int) -> dict:
    """Run pgbench with ``script`` for ``seconds`` with ``clients`` clients and 2 threads.

    Returns {"tps": float, "failed": int, "client_cpu_pct": float (pgbench's own CPU,
    % of one core)}. Raises RuntimeError with pgbench's output when it fails.
    """
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as fh:
        fh.write(script)
        path = fh.name
    try:
        argv = [pgbench, "-n", "-M", "prepared", "-f", path, "-c", str(clients), "-j", "2",
                "-T", str(seconds), dsn]
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ps = psutil.Process(proc.pid)
        cpu = 0.0
        try:
            while proc.poll() is None:
                times = ps.cpu_times()
                cpu = times.user + times.system
                time.sleep(0.5)
        except psutil.NoSuchProcess:
            pass
        out = proc.communicate()[0]
        elapsed = time.perf_counter() - started
    finally:
        Path(path).unlink(missing_ok=True)
    match = _TPS_RE.search(out)
    if proc.returncode != 0 or not match:
        raise RuntimeError(f"pgbench failed ({proc.returncode}):\n{out}")
    failed = re.search(r"number of failed transactions: (\d+)", out)
    return {"tps": float(match.group(1)), "failed": int(failed.group(1)) if failed else 0,
            "client_cpu_pct": round(100 * cpu / elapsed, 1)}


def _calibrate_on(dsn: str, cfg, log) -> dict:
    pgbench = find_pgbench()
    script = policies.pgbench_script(cfg.schema, cfg.policy, cfg.lease_s)
    backlog, _ = runner.compute_backlog(cfg)
    seconds = int(round(cfg.warmup_s + cfg.duration_s))
    figures = {"pgbench": []}

    def pgbench_once(label: str) -> None:
        with db.connect(dsn) as conn:
            db.prepare(conn, cfg, backlog, log=lambda _m: None)
        result = run_pgbench(pgbench, dsn, script, cfg.workers, seconds)
        figures["pgbench"].append(result)
        log(f"pgbench ({label}): {result['tps']:,.1f} jobs/s, {cfg.workers} clients, {seconds} s, "
            f"pgbench CPU {result['client_cpu_pct']:.0f} % of a core")

    pgbench_once("before")
    run_dir = runner.run(cfg, dsn, log=lambda m: log("  " + m) if m.startswith(("throughput", "claim", "SUSPECT")) else None)
    summary = json.loads((run_dir / "summary.json").read_text())
    figures["queue_bench"] = {"jobs_per_s": summary["throughput_jobs_per_s"],
                              "harness_cpu_max_pct": summary["harness_cpu_max_pct"], "run_dir": str(run_dir)}
    log(f"queue-bench: {summary['throughput_jobs_per_s']:,.1f} jobs/s, {cfg.workers} workers, "
        f"{cfg.duration_s:g} s measured after {cfg.warmup_s:g} s warm-up, "
        f"harness CPU max {summary['harness_cpu_max_pct']:.0f} % of a core")
    pgbench_once("after")
    with db.connect(dsn) as conn:
        db.drop_schema(conn, cfg.schema)
    pg_mean = sum(r["tps"] for r in figures["pgbench"]) / len(figures["pgbench"])
    figures["ratio"] = round(summary["throughput_jobs_per_s"] / pg_mean, 3) if pg_mean else None
    return figures


def calibrate(*, workers: str = "50", duration: str = "20s", dsn: str | None = None,
              schema: str = "qbench", log=print) -> int:
    """Run the calibration and print the figures; returns the exit status (0, or 2 on bad input)."""
    cfg = build_config("default", {"policy": "skip_locked", "workers": workers, "batch": 1, "txn": "short",
                                   "work_ms": 0, "index": "partial", "history": 0, "duration": duration,
                                   "warmup": "5s", "schema": schema}, dsn=dsn)
    find_pgbench()
    if cfg.dsn:
        figures = _calibrate_on(cfg.dsn, cfg, log)
    else:
        from .embedded import embedded_postgres

        with embedded_postgres(max_connections=2 * cfg.workers + 20, log=lambda _m: None) as embedded_dsn:
            figures = _calibrate_on(embedded_dsn, cfg, log)
    pg = [r["tps"] for r in figures["pgbench"]]
    log(f"calibration: queue-bench {figures['queue_bench']['jobs_per_s']:,.1f} jobs/s / pgbench "
        f"{sum(pg) / len(pg):,.1f} tps (mean of {', '.join(f'{x:,.1f}' for x in pg)}) = ratio {figures['ratio']:.2f} "
        f"(goal >= 0.90); harness CPU max {figures['queue_bench']['harness_cpu_max_pct']:.0f} % of a core, "
        f"{psutil.cpu_count()} cores shared with the server")
    return 0
