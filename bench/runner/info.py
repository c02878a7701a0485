"""``run.json`` of one run: what ran, where, on what, and what the run saw of the server."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from pathlib import Path

import psutil

from bench import __version__, run_summary
from bench.config.connection_budget import connections_needed
from bench.config.network_parameters import liveness_roles, tcp_liveness
from bench.config.parameters import defaults_on
from bench.config.pooler_parameters import pooler_record
from bench.config.queue_definition import describe_queue
from bench.config.run_config import mask_dsn
from bench.measure import seconds
from bench.run_summary import measurement_cost
from bench.usage import setting

#: The directory that holds ``bench/``: a checkout's root when the tool runs from one (``pip install -e .``).
PACKAGE_PARENT = Path(__file__).resolve().parents[2]


def git_sha() -> str | None:
    """The checkout's commit, or None when not run from a checkout's root (an installed wheel) or without git."""
    try:
        out = subprocess.run(["git", "-C", str(PACKAGE_PARENT), "rev-parse", "--show-toplevel", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != PACKAGE_PARENT:
        return None
    return lines[1]


def client_info(driver_wait: str) -> dict:
    """``run.json``'s ``client``: cores, memory (bytes), Python, platform, host name, ``driver_wait``."""
    return {"cores": os.cpu_count(), "memory_bytes": psutil.virtual_memory().total,
            "python": platform.python_version(), "platform": platform.platform(),
            "hostname": socket.gethostname(), "driver_wait": driver_wait}


def seed_info(seed) -> dict:
    """``run.json``'s ``seed``: rows seeded (history and backlog), seconds and rows/s, index and VACUUM seconds."""
    return {"rows": seed.history + seed.backlog, "history": seed.history, "backlog": seed.backlog,
            "seconds": round(seed.seconds, 3), "rows_per_s": round(seed.rows_per_s, 1),
            "index_seconds": round(seed.index_seconds, 3), "vacuum_seconds": round(seed.vacuum_seconds, 3)}


def pooler_info(run) -> dict | None:
    """``run.json``'s ``pooler``: :func:`pooler_record` and what the run read of the pooler (``detection``,
    ``console``, ``pool``: database and user, ``mode_disagrees``), whose console its figures came from
    (``console_source``), the embedded pooler's ``pid`` and the per-second reads that failed; None without one."""
    record = pooler_record(run.cfg)
    if record is None:
        return None
    facts = run.pooler_facts or {}
    source = ("embedded" if run.pooler_pid is not None else "POOLER_ADMIN_DSN") if run.pooler_console else None
    return {**record, "detection": facts.get("detection"), "console": facts.get("console"),
            "pool": facts.get("pool"), "mode_disagrees": run_summary.mode_disagreements(run.cfg.pool_mode, facts),
            "console_source": source, "pid": run.pooler_pid,
            "sampler_errors": run.pooler_watch.errors if run.pooler_watch is not None else None}


def wait_events_info(monitor, engine, sampled: bool = True) -> dict:
    """``run.json`` ``wait_events``: how the monitor sampled the wait events (:meth:`WaitEventFold.info`), or
    ``{"not_measured": why}`` where it does not, or did not (``sampled`` False: ``MONITOR=stats``)."""
    fold = getattr(monitor, "wait_events", None)
    if fold is None:
        return {"not_measured": engine.not_measured.get("wait_events", f"not measured on {engine.capabilities.label}")}
    if not sampled:  # the measurement at its minimum leaves their sampling out
        return {"not_measured": f"not measured: {setting('monitor', 'stats')} leaves the wait events' sampling out"}
    return fold.info()


def run_info(run) -> dict:
    """``run.json`` of ``run`` (a :class:`bench.runner.run.Run` that has been audited)."""
    cfg, engine, tally, audited, workers_plan = run.cfg, run.engine, run.tally, run.audited, run.workers_plan
    measured = tally.measured
    start_unix = run.clock.unix0 + (measured.start_s if measured.intervals else run.n_warm)
    end_unix = run.clock.unix0 + measured.end_s if measured.intervals else start_unix  # empty window
    vacuumer = run.side_tasks.vacuumer
    return {
        "run_id": run.run_id, "tool_version": __version__, "git_sha": git_sha(),
        **run.server,
        "client": client_info(run.wait_fn),
        "dsn_masked": mask_dsn(run.dsn), "embedded_database": run.embedded, "pooler": pooler_info(run),
        "relay": run.relay.record(cfg.crossing_relay()) if run.relay else None,
        "config": cfg.public(), "config_defaults": defaults_on(cfg.engine),
        "queue_definition": describe_queue(cfg.queue, cfg.library_mode),
        "backlog": run.backlog, "backlog_computed": run.backlog_how,
        "seed": seed_info(run.seed),
        "connections": run.room,
        "connections_needed": connections_needed(cfg.connection_budget()),
        "commit_mode": run.commit_mode,
        "failover": run.failover.record if run.failover else None,
        # the nodes of the plan the workers ran (read on a worker's own session)
        "claim_plan_nodes": workers_plan.get("nodes") or None,
        "claim_plans": {**(engine.plans_summary(run.claim_plans) or {"auto": None}),
                        "workers": {k: v for k, v in workers_plan.items() if k not in ("text", "nodes")}},
        "autovacuum": run_summary.vacuum_during(run.vacuum_before, audited.vacuum_after, cfg,
                                                 run.server.get("server_settings")),
        "vacuum_passes": run_summary.vacuum_passes(cfg, vacuumer.passes if vacuumer else [], run.n_warm, tally.rows),
        "pg_stat_statements": run.pgss,
        "wal_fpi_bytes_read": run.monitor.images_note,
        "cost_whole_load": run_summary.whole_load_cost(run.load_start_sample, audited.final_sample, tally.totals["jobs_completed"]),
        "monitor_table_query_in_flight_s": round(run.table_query_in_flight_s, 3),
        "database_lost": audited.database_lost,
        "monitor_table_cost_s": run.monitor.table_cost_s,
        "monitor_lock_skips": {**run.monitor.lock_skips, "lock_timeout_ms": run.monitor.table_lock_timeout_ms},
        "monitor_errors": dict(run.monitor.errors),
        "wait_events": wait_events_info(run.monitor, engine, sampled=cfg.monitor == "full"),
        "sizes_before": run.sizes_before, "sizes_after": audited.sizes_after,
        "started_at": run.started_at, "load_started_at": seconds.iso_at(run.clock.unix0),
        "measured_start": seconds.iso_at(start_unix), "measured_end": seconds.iso_at(end_unix),
        "ended_at": seconds.iso_at(run.ended_unix),
        "harness_rss_mb": run.rss.summary(),
        "processes": run.driver.processes,
        # the busiest processes outside the run over the measured window (docs/reading-the-report.md, "A busy machine")
        "outside_processes": run.machine.others.busiest(),
        "process_cpu_mean_pct": measurement_cost.process_cpu_means(run.run_dir / "processes.csv"),
        # the workers whose session was open as the clock started and as the load stopped (docs/results.md)
        "workers_connected": {"asked": cfg.workers, "at_start": run.workers_at_start, "at_end": run.workers_at_end,
                              "connect_wait_s": round(run.connect_s, 2)},
        "web_ui": run.ui.info(measured.seconds) if run.ui else None,
        "replica": run.side_tasks.replica.info if run.side_tasks.replica else None,
        "migrations": run.migrations,
        # TCP_USER_TIMEOUT_MS as the workers', producers' and reaper's connections have it (docs/network.md)
        "tcp_liveness": {**(tcp_liveness(cfg.tcp_user_timeout_ms) or {"tcp_user_timeout_ms": 0}),
                         "applied_to": liveness_roles(cfg.public())},
        "partitions": [watch.record(tally.totals["lease_expiries"]) for watch in run.partitions],
    }
