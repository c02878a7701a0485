"""One run: check the server, prepare the table, drive the swarm through warm-up and
the measured window, sample the database, audit, and write the result files.

Import :mod:`bench.load.swarm` (which monkey-patches for gevent) before this module
when psycopg has not been imported yet; :func:`run` re-checks.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import gevent
import gevent.event
import psutil

from bench.load import swarm  # noqa: I001 - first: gevent's monkey-patching must precede psycopg's import
from bench import __version__
from bench.engines import engine_for
from bench.measure import metrics, seconds
from bench import run_summary
from bench.results import run_files
from bench.results.model import RunResult
from bench.config.parameters import defaults_on
from bench.config.queue_definition import describe_queue
from bench.config.run_config import RunConfig, mask_dsn
from bench.errors import ConfigError
from bench.load.distributed import run_driver
from bench.load.library_driver import LibraryWorkersDriver
from bench.load.fault_windows import fault_window
from bench.load.web_ui import WebUI
from bench.measure.cpu_meter import CpuMeter
from bench.measure.rss import RssLog
from bench.workload.queues import queue_count

#: Assumed claim+complete ceiling per batch row when the job does no work (jobs/s),
#: a little above the pgbench reference figures in docs/design.md (about 4,100 jobs/s at
#: batch 1 on 2 cores); used only to size the default backlog.
BACKLOG_CEILING_JOBS_PER_S = 6000
BACKLOG_SAFETY = 1.25
BACKLOG_MIN, BACKLOG_MAX = 1_000, 5_000_000


def compute_backlog(cfg: RunConfig) -> tuple[int, str]:
    """Pending rows to seed so the run cannot drain them, and how that was computed.

    Upper bound on the claim rate: ``workers × batch × 1000 / work_ms`` when jobs
    take time, else :data:`BACKLOG_CEILING_JOBS_PER_S` × batch; times the whole run
    (warm-up + measured), × :data:`BACKLOG_SAFETY`, within [1,000, 5,000,000].
    If a run still drains it, the summary says ``backlog_exhausted``.
    """
    ceiling = BACKLOG_CEILING_JOBS_PER_S * cfg.batch
    if cfg.work_ms > 0:
        ceiling = min(ceiling, cfg.workers * cfg.batch * 1000.0 / cfg.work_ms)
    seconds = cfg.warmup_s + cfg.duration_s
    rows = int(min(BACKLOG_MAX, max(BACKLOG_MIN, math.ceil(ceiling * seconds * BACKLOG_SAFETY))))
    how = (f"computed: ceiling {ceiling:,.0f} jobs/s x {seconds:g} s x {BACKLOG_SAFETY}"
           f" = {rows:,} rows (bounded to [{BACKLOG_MIN:,}, {BACKLOG_MAX:,}])")
    return rows, how


#: The directory that holds ``bench/``: a checkout's root when the tool runs from one (``pip install -e .``).
PACKAGE_PARENT = Path(__file__).resolve().parents[1]


def _git_sha() -> str | None:
    """The checkout's commit, or None when the tool is not run from a checkout (an installed wheel: its
    directory is not the root of a git work tree, even inside someone else's) or git is missing."""
    try:
        out = subprocess.run(["git", "-C", str(PACKAGE_PARENT), "rev-parse", "--show-toplevel", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != PACKAGE_PARENT:
        return None
    return lines[1]


def _now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def run(cfg: RunConfig, dsn: str, *, log: Callable[[str], None] = print, embedded: bool = False,
        state_schema: str | None = None, external_workers: tuple[str, int, float] | None = None,
        web_ui: tuple[str, int, int] | None = None) -> Path:
    """Run one benchmark against ``dsn`` and return the run directory.

    Raises :class:`bench.config.run_config.ConfigError` before creating anything when the
    database is unreachable, the schema is not the tool's, or the server lacks
    connections; the engine's ``NotCooperativeError`` (a RunFailed) if its driver would block.
    A Ctrl-C during the load stops it, and the files are still written with
    ``complete: false``; one after the load waits until they are written. With ``state_schema`` the seeded history is restored from
    a saved state there (see :func:`bench.engines.postgres.db.ensure_history_state`). With
    ``external_workers`` (bind host, port, seconds to wait for them) this process is the master of ``cfg.processes`` worker
    processes started elsewhere (``qbench worker``) instead of starting them itself. With ``web_ui``
    (host, port, max workers) Locust's web UI runs over the load (:class:`bench.load.web_ui.WebUI`):
    its Stop ends the measured window as a complete run, and the database is checked for the
    connections of max workers.
    """
    engine = engine_for(cfg)
    engine.capabilities.check(cfg.public())
    sessions = engine.sessions(dsn, cfg)
    wait_fn = sessions.check_cooperative()
    logging.getLogger("locust").setLevel(logging.ERROR)  # e.g. its "spawn rate is very high" warning: all users start at once by design
    admin = engine.connect(dsn, "queue-bench admin")
    try:
        server = engine.server_info(admin)
        extra = web_ui[2] - cfg.workers if web_ui else 0  # the workers the web UI may add
        try:
            room = engine.claim_schema(admin, cfg.schema, cfg.connections_needed() + extra)  # locked until the run ends
        except ConfigError as err:
            if extra and err.param == "WORKERS":  # it is the web UI's most workers that do not fit
                detail = str(err).split(": ", 1)[1].split("; allowed:")[0]
                raise ConfigError("MAX_WORKERS", f"{detail} (for MAX_WORKERS {web_ui[2]}); allowed: a lower "
                                                 "MAX_WORKERS, or a server with more connections") from None
            raise
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return _run(engine, cfg, dsn, sessions, admin, server, room, wait_fn, log, embedded, state_schema,
                        external_workers, web_ui)
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
    finally:
        admin.close()


def _run(engine, cfg, dsn, sessions, admin, server, room, wait_fn, log, embedded, state_schema,
         external_workers, web_ui) -> Path:
    if cfg.backlog or cfg.rate > 0:
        backlog, backlog_how = cfg.backlog, ("given" if cfg.backlog else "none: open-loop producers feed the queue")
    else:
        backlog, backlog_how = compute_backlog(cfg)
    run_id = run_files.new_run_id(cfg)
    started_at = _now_iso()
    log(f"queue-bench {__version__}: run {run_id}")
    log(f"policy {cfg.policy}, workers {cfg.workers}, batch {cfg.batch}, txn {cfg.txn}, work {cfg.work_ms:g} ms, "
        f"index {cfg.index}, history {cfg.history:,}, backlog {backlog:,} ({backlog_how})")
    log(f"server: {server['server_version'].split(',')[0]}; connections free {room['available']} of "
        f"{room['max_connections']}; driver waits on {wait_fn}")

    seed = engine.prepare(admin, cfg, backlog, log=log, state_schema=state_schema)
    sizes_before = engine.table_sizes(admin, cfg.schema)
    claim_plans, plans_when = None, None
    if backlog + cfg.history > 0:  # an empty table's plan says nothing: then it is taken after the load
        claim_plans, plans_when = engine.capture_plans(admin, cfg, "on the seeded table, before the load")
    vacuum_before = engine.vacuum_counts(admin, cfg.schema)
    pgss_missing = engine.statement_stats_unavailable(admin)
    # Created only now: bad input and an interrupted seeding leave no run directory behind.
    run_dir = Path(cfg.results) / run_id
    run_dir.mkdir(parents=True)

    recorder = metrics.Recorder(cfg.batch)
    claim_log = swarm.ClaimLog()
    ctx = swarm.SwarmContext(cfg=cfg, sessions=sessions, recorder=recorder, log=claim_log)
    monitor = engine.monitor(dsn, cfg)

    library_command = engine.library_worker_command(dsn, cfg)  # LIBRARY_MODE=worker: the library's own processes
    driver = (LibraryWorkersDriver(cfg, ctx, library_command, log) if library_command
              else run_driver(cfg, ctx, dsn, external_workers, log))
    proc = psutil.Process()
    cpu_meter = CpuMeter(proc)

    n_warm = int(round(cfg.warmup_s))
    n_meas = max(1, int(round(cfg.duration_s)))
    try:
        driver.start()
    except BaseException:  # no process started, or Ctrl-C while waiting for them: nothing was measured
        driver.kill()
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    connect_s = driver.wait_connected()
    if connect_s >= 1.0:
        log(f"workers connected in {connect_s:.1f} s; the warm-up and the measured window start now")
    clock = seconds.Clock()  # from here on: the warm-up, then the measured window, in whole seconds
    ctx.measured_start_unix = clock.unix0 + n_warm
    cpu_meter.read()  # the connecting phase's CPU belongs to no second
    samples: dict[int, dict] = {}  # second index -> monitor values taken in that second

    def note(k: int, values: dict) -> None:
        entry = samples.setdefault(k, {"monitor_query_us": 0})
        entry["monitor_query_us"] += int(values["cost_s"] * 1e6)
        entry.update({key: v for key, v in values.items() if key != "cost_s" and v is not None})

    samplers = engine.spawn_samplers(monitor, clock.now_s, n_warm + n_meas, note)
    samplers.append(gevent.spawn(seconds.loop_lag_probe, recorder))
    for note_text in cfg.notes:  # windows clipped to the measured window by validation
        log(f"note: {note_text}")
    fault_greenlets = [gevent.spawn(fault_window, engine, f, driver, dsn, clock, n_warm, recorder, log)
                       for f in cfg.faults]
    reaper = None
    if cfg.reaper_interval_s > 0:
        reaper = engine.reaper(dsn, cfg, recorder)
        reaper_greenlet = gevent.spawn(reaper.run)
    mover = None
    if cfg.layout == "archive":
        mover = engine.mover(dsn, cfg, recorder)
        mover_greenlet = gevent.spawn(mover.run)
    vacuumer = None
    if cfg.vacuums():  # VACUUM_EVERY_S: in this (the master) process only, on its own connection
        vacuumer = engine.vacuumer(dsn, cfg, recorder, clock.now_s)
        vacuumer_greenlet = gevent.spawn(vacuumer.run)
    # Running totals, not the intervals: one second's histograms are held at a time (see metrics.Window).
    measured = metrics.Window()
    totals: Counter = Counter()  # warm-up, measured and stop phase: the invariants cover them all
    max_rows_per_claim = 0
    rows: list[dict] = []  # one small dict per measured second; monitor samples are added at the end
    recent: collections.deque = collections.deque(maxlen=seconds.PROGRESS_EVERY_S)  # for the progress line
    hlogs = run_files.HistogramLogs(run_dir / "histograms", metrics.HISTOGRAM_NAMES, clock.unix0)
    driver.open_process_logs(lambda i: run_files.HistogramLogs(run_dir / "histograms" / f"process-{i}",
                             metrics.HISTOGRAM_NAMES, clock.unix0), run_files.ProcessSeconds(run_dir / "processes.csv"))
    rss = RssLog(proc, log)

    def account(interval: metrics.Interval, cpu: tuple[float, float, float] | None) -> None:
        """Count ``interval`` in the totals; with ``cpu``, it is measured: to the logs, the window and a row."""
        nonlocal max_rows_per_claim
        totals.update(interval.counters)
        max_rows_per_claim = max(max_rows_per_claim, interval.max_rows_per_claim)
        if cpu is None:  # warm-up or stop phase: counted, never read again
            interval.release()
            return
        hlogs.write(interval)
        measured.add(interval)
        driver.measured(interval.index - n_warm)  # each process's part: summary.json processes, processes.csv
        if len(recent) == recent.maxlen:
            recent[0].release()  # leaves the progress line's window now
        recent.append(interval)
        rows.append(seconds.interval_row(interval, interval.index - n_warm, None, cpu) | {"workers": driver.running_workers()})

    complete = True
    prev_s = 0.0
    interrupted = gevent.event.Event()
    previous_handlers = {sig: signal.signal(sig, lambda *_: interrupted.set())
                         for sig in (signal.SIGINT, signal.SIGTERM)}
    pgss_reset = engine.statement_stats_reset(admin, cfg, pgss_missing) if n_warm == 0 else None
    try:
        ui = WebUI(driver, *web_ui, cfg.producers if cfg.rate > 0 else 0, interrupted.set, log) if web_ui else None
    except BaseException:  # its port was taken since the check: nothing was measured
        driver.kill()
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    try:
        for k in range(n_warm + n_meas):
            if interrupted.wait(timeout=max(0.0, k + 1 - clock.now_s())):
                complete = bool(ui and ui.stop_pressed and k > n_warm)  # the UI's Stop ends a measured window
                log("interrupted: stopping the swarm and writing what was measured (complete: false)"
                    if not complete else f"stopped in the web UI after {k - n_warm} measured seconds")
                break
            now_s = clock.now_s()
            interval = driver.rotate(recorder, k, prev_s, now_s)
            if ui:
                ui.feed(interval)
            prev_s = now_s
            cpu = driver.cpu(cpu_meter.read())
            account(interval, cpu if k >= n_warm else None)
            rss.tick(k + 1)
            if k + 1 == n_warm:  # the measured window starts now
                pgss_reset = engine.statement_stats_reset(admin, cfg, pgss_missing)
            if (k + 1) % seconds.PROGRESS_EVERY_S == 0:
                seconds.progress_line(log, k + 1, n_warm, n_meas, list(recent), samples.get(k))
    finally:
        # From here on the results are being written: a Ctrl-C waits for them (run() restores the handlers);
        # a second one stops waiting for the jobs in progress (a long WORK_MS would hold the stop for long).
        after_load = []

        def on_interrupt_after_load(*_):
            after_load.append(1)
            if len(after_load) == 1:
                log("the load has stopped: writing the results first (Ctrl-C again: do not wait for the jobs "
                    "in progress)")
            else:
                log("not waiting for the jobs in progress: their workers stop now; those jobs stay claimed "
                    "until their lease expires")
                driver.kill()
        for sig in previous_handlers:
            signal.signal(sig, on_interrupt_after_load)
    # The claim's pg_stat_statements entry covers the measured window only: read it now, before
    # the stop phase and before any plan capture executes the claim again.
    pgss = engine.statement_stats_read(admin, cfg, pgss_missing, pgss_reset)
    # Intervals after the last tick (stop phase) still count for the invariants.
    ctx.stopping = True
    table_query_in_flight_s = monitor.table_query_running_s()
    gevent.killall(samplers)
    gevent.killall(fault_greenlets)  # each closes what it opened (finally)
    ctx.active_faults.clear()
    driver.stop()
    driver.quit()
    if ui:
        ui.close()
    if reaper is not None:
        reaper.stop()
        reaper_greenlet.join(timeout=30)
        reaper.conn.close()
    if mover is not None:
        mover.stop()
        mover_greenlet.join(timeout=30)
        mover.conn.close()
    if vacuumer is not None:
        vacuumer.stop()  # cancels a pass in progress
        vacuumer_greenlet.join(timeout=30)
        vacuumer.conn.close()
    workers_plan = engine.workers_plan(ctx.plan_sessions, ctx.worker_explain, cfg)
    # The second the loop was in when it stopped (n_warm + n_meas on a complete run): an interrupted
    # run's partial last second keeps its own index, not the planned end's.
    tail = driver.tail(recorder, recorder.rotations, prev_s, clock.now_s())
    tail_measured = (not complete and tail.counters["claims"] and measured.intervals < n_meas
                     and clock.now_s() > n_warm)
    account(tail, driver.cpu(cpu_meter.read()) if tail_measured else None)
    hlogs.close()
    driver.close_process_logs()
    ended_unix = time.time()
    # Samples join the rows only now: a table sample taken in second k may have returned after tick k.
    for row in rows:
        row.update(seconds.sample_columns(samples.get(row["t_s"] + n_warm)))
        if vacuumer is not None:
            row.update(seconds.vacuum_columns(vacuumer.passes, row["t_s"] + n_warm))

    database_lost = None
    try:
        # The table sampler may have been killed mid-query: take the final sample on a fresh connection.
        monitor.reset_table_conn()
        final_sample = {**monitor.sample_stats(), **monitor.sample_table(force=True)}
        if not engine.is_alive(admin):  # e.g. its backend was terminated: audit on a new connection
            admin = engine.connect(dsn, "queue-bench audit")
        vacuum_after = engine.vacuum_counts(admin, cfg.schema)
        if plans_when is None:
            claim_plans, plans_when = engine.capture_plans(admin, cfg, "on the table as the load left it")
        audit_result = engine.audit(admin, cfg, claim_log, seeded_rows=cfg.history + backlog,
                                    over_claims=totals["over_claims"])
        if queue_count(cfg) > 1 and measured.intervals:  # NAMED_QUEUES, TENANTS: per queue, from the table
            audit_result["completed_per_queue"] = engine.completed_per_queue(
                admin, cfg, clock.unix0 + measured.start_s, clock.unix0 + measured.end_s)
        sizes_after = engine.table_sizes(admin, cfg.schema)
    except (ConfigError, *engine.database_errors) as err:
        # The database went away during the run: write what was measured, with nothing audited.
        database_lost = engine.error_message(err)
        database_lost = database_lost.removeprefix("DSN: ").split("; allowed:")[0]
        log(f"the database went away during the run ({database_lost}): writing what was measured, unaudited")
        complete = False
        final_sample = {"queue_depth": None}
        plans_when = plans_when or "not captured: the database went away"
        vacuum_after = sizes_after = None
        audit_result = {"invariants": dict.fromkeys(engine.invariants), "status_counts": {}, "details": {},
                        "redeliveries": None, "retry_gaps": None, "fifo_out_of_order_share": None}
        pgss = pgss if "unavailable" not in pgss else {"unavailable": "the database went away"}
    monitor.close()
    claim_log.close()
    claim_plan = engine.plans_text(claim_plans, plans_when, workers_plan)
    (run_dir / "claim_plan.txt").write_text(claim_plan + "\n")

    measured_start_unix = clock.unix0 + (measured.start_s if measured.intervals else n_warm)
    measured_end_unix = clock.unix0 + measured.end_s if measured.intervals else measured_start_unix  # empty window
    run_info = {
        "run_id": run_id, "tool_version": __version__, "git_sha": _git_sha(),
        **server,
        "client": {"cores": os.cpu_count(), "memory_bytes": psutil.virtual_memory().total,
                   "python": platform.python_version(), "platform": platform.platform(),
                   "hostname": socket.gethostname(), "driver_wait": wait_fn},
        "dsn_masked": mask_dsn(dsn), "embedded_database": embedded,
        "config": cfg.public(), "config_defaults": defaults_on(cfg.engine), "queue_definition": describe_queue(cfg.queue, cfg.library_mode),
        "backlog": backlog, "backlog_computed": backlog_how,
        "seed": {"rows": seed.history + seed.backlog, "history": seed.history, "backlog": seed.backlog,
                 "seconds": round(seed.seconds, 3), "rows_per_s": round(seed.rows_per_s, 1),
                 "index_seconds": round(seed.index_seconds, 3), "vacuum_seconds": round(seed.vacuum_seconds, 3)},
        "connections": room,
        # the nodes of the plan the workers ran (read on a worker's own session)
        "claim_plan_nodes": workers_plan.get("nodes") or None,
        "claim_plans": {**(engine.plans_summary(claim_plans) or {"auto": None}),
                        "workers": {k: v for k, v in workers_plan.items() if k not in ("text", "nodes")}},
        "autovacuum": run_summary.vacuum_during(vacuum_before, vacuum_after, cfg),
        "vacuum_passes": run_summary.vacuum_passes(cfg, vacuumer.passes if vacuumer else [], n_warm, rows),
        "pg_stat_statements": pgss,
        "monitor_table_query_in_flight_s": round(table_query_in_flight_s, 3),
        "database_lost": database_lost,
        "monitor_table_cost_s": monitor.table_cost_s,
        "monitor_errors": dict(monitor.errors),
        "sizes_before": sizes_before, "sizes_after": sizes_after,
        "started_at": started_at, "load_started_at": seconds.iso_at(clock.unix0),
        "measured_start": seconds.iso_at(measured_start_unix), "measured_end": seconds.iso_at(measured_end_unix),
        "ended_at": seconds.iso_at(ended_unix),
        "harness_rss_mb": rss.summary(),
        "processes": driver.processes,
        "web_ui": ui.info(measured.seconds) if ui else None,
    }
    summary = run_summary.summarize(run_id, cfg, measured, rows, complete, max_rows_per_claim, audit_result,
                        final_sample, monitor.failures, run_info, engine.plan_warnings)
    run_files.write_intervals(run_dir / "intervals.csv", rows)
    RunResult(run_dir, run_info, summary).dump()
    if len({0} | {p for p, _ in cfg.priority_mix}) > 1:
        run_files.write_priority_ages(run_dir / "priority_ages.csv", [
            (r["t_s"], samples.get(r["t_s"] + n_warm, {}).get("age_by_priority")) for r in rows])
    if audit_result["retry_gaps"] is not None:
        # Seconds between successive claims of each job that failed at least once (database time).
        run_files.write_json_list(run_dir / "retry_gaps.json", audit_result["retry_gaps"])
    run_summary.final_lines(log, summary)
    return run_dir
