"""One run: check the server, prepare the table, drive the swarm through warm-up and
the measured window, sample the database, audit, and write the result files.

Import :mod:`bench.swarm` (which monkey-patches for gevent) before this module
when psycopg has not been imported yet; :func:`run` re-checks.
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import math
import os
import platform
import secrets
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
import psycopg
import psycopg.sql

from . import swarm  # noqa: I001 - first: gevent's monkey-patching must precede psycopg's import
from . import __version__, audit, db, jobs, metrics, plans, results, statements
from .config import REPO_ROOT, ConfigError, RunConfig, mask_dsn
from .monitor import Monitor, spawn_samplers
from .producers import Producer
from .faults import choose_workers
from .reaper import Reaper
from .mover import Mover
from .cpu_meter import CpuMeter
from .rss import RSS_REPORTED_MIN, RssLog
from .queue_verdict import saturation as _saturation

#: Assumed claim+complete ceiling per batch row when the job does no work (jobs/s),
#: a little above the pgbench reference figures in docs/design.md (about 4,100 jobs/s at
#: batch 1 on 2 cores); used only to size the default backlog.
BACKLOG_CEILING_JOBS_PER_S = 6000
BACKLOG_SAFETY = 1.25
BACKLOG_MIN, BACKLOG_MAX = 1_000, 5_000_000
#: Above this harness CPU (% of one core) the load generator may be the bottleneck.
SUSPECT_CPU_PCT = 90.0
PROGRESS_EVERY_S = 5
#: Period of the event-loop lag probe: a greenlet sleeps this long, over and over, and
#: records how much later than asked it woke (``loop_lag_us``).
LOOP_LAG_PERIOD_S = 0.010
#: Above this event-loop lag p99 (µs) over the measured window the load generator is saturated
#: and the run suspect. It is the probe's own period: a p99 above it means that in 1 % of ticks
#: the loop woke more than a whole period late (a 10 ms timer firing after 20 ms), so the process
#: is not keeping its own schedule. Every latency it measures ends when its greenlet runs again,
#: and each worker cycle waits for at least three wake-ups (claim reply, the work's timer,
#: completion reply): a lag of this size adds tens of ms to cycles that at the calibration
#: load (README "Calibration": pgbench 3,305 claim+complete transactions/s at 50 clients)
#: last 50 / 3,305 s = 15 ms, so the generator, not the database, sets the pace. A starved generator
#: reads low on CPU (it waits for a core), so the CPU rule alone misses it. Measured figures
#: behind the choice are in the README ("Event-loop lag").
SUSPECT_LOOP_LAG_P99_US = 10_000


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


def _git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def _iso_at(unix_s: float) -> str:
    return dt.datetime.fromtimestamp(unix_s, dt.timezone.utc).isoformat(timespec="milliseconds")


def new_run_id(cfg: RunConfig) -> str:
    """``<UTC time>-<policy>-w<workers>-b<batch>-<index>-<4 hex>``: sortable and unique."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{cfg.policy}-w{cfg.workers}-b{cfg.batch}-{cfg.index}-{secrets.token_hex(2)}"


def _fmt_ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.3f} ms"


class _Clock:
    """Per-second ticks relative to the load start (monotonic), with Unix time of the start."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.unix0 = time.time()

    def now_s(self) -> float:
        return time.monotonic() - self.t0

    def sleep_until(self, t_s: float) -> None:
        delay = t_s - self.now_s()
        if delay > 0:
            gevent.sleep(delay)


def _p99(hist) -> int:
    return metrics.values_at_percentiles(hist, (99,))[0]


def _interval_row(interval: metrics.Interval, t_s: int, sample, cpu_pct: tuple[float, float, float]) -> dict:
    """One intervals.csv row; ``cpu_pct`` is the harness's (total, user, system) % of a core (:class:`CpuMeter`)."""
    claim = interval.histograms["claim_latency_us"]
    complete = interval.histograms["complete_latency_us"]
    row = {
        "t_s": t_s,
        "claims": interval.counters["claims"],
        "jobs_claimed": interval.counters["jobs_claimed"],
        "jobs_completed": interval.counters["jobs_completed"],
        "empty_claims": interval.counters["empty_claims"],
        "errors": sum(interval.errors.values()),
        "harness_cpu_pct": round(cpu_pct[0], 1),
        "harness_user_pct": round(cpu_pct[1], 1),
        "harness_system_pct": round(cpu_pct[2], 1),
    }
    if claim.get_total_count():
        p50, p95, p99 = metrics.values_at_percentiles(claim, (50, 95, 99))
        row.update(claim_p50_us=p50, claim_p95_us=p95, claim_p99_us=p99, claim_max_us=claim.get_max_value())
    if complete.get_total_count():
        row["complete_p99_us"] = _p99(complete)
    loop_lag = interval.histograms["loop_lag_us"]
    if loop_lag.get_total_count():
        row["loop_lag_p99_us"] = _p99(loop_lag)
    lag = interval.histograms["producer_lag_us"]
    if interval.counters["jobs_produced"]:
        row["jobs_produced"] = interval.counters["jobs_produced"]
        row["producer_lag_p99_us"] = _p99(lag)
    row.update(_sample_columns(sample))
    return row


def _sample_columns(sample: dict | None) -> dict:
    """The intervals.csv columns of one second's monitor sample (none when it was not sampled)."""
    return {k: v for k, v in (sample or {}).items() if k != "age_by_priority"}


def _loop_lag_probe(recorder: metrics.Recorder, period_s: float = LOOP_LAG_PERIOD_S) -> None:
    """Sleep ``period_s`` over and over (run it in a greenlet until killed), recording in
    ``loop_lag_us`` how late each wake-up came beyond ``period_s`` (µs, at least 1): the time a
    ready greenlet waited for the event loop, i.e. for the process to get a core."""
    while True:
        started = time.perf_counter()
        gevent.sleep(period_s)
        recorder.loop_lag(int((time.perf_counter() - started - period_s) * 1e6))


def _percentile(values: list[float], pct: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, math.ceil(pct / 100 * len(ordered)) - 1)  # nearest-rank
    return ordered[rank]


def run(cfg: RunConfig, dsn: str, *, log: Callable[[str], None] = print, embedded: bool = False,
        state_schema: str | None = None) -> Path:
    """Run one benchmark against ``dsn`` and return the run directory.

    Raises :class:`bench.config.ConfigError` before creating anything when the
    database is unreachable, the schema is not the tool's, or the server lacks
    connections; :class:`bench.swarm.NotCooperativeError` if psycopg would block.
    A Ctrl-C during the load stops it, and the files are still written with
    ``complete: false``; one after the load waits until they are written. With ``state_schema`` the seeded history is restored from
    a saved state there (see :func:`bench.db.ensure_history_state`).
    """
    wait_fn = swarm.check_cooperative()
    logging.getLogger("locust").setLevel(logging.ERROR)  # e.g. its "spawn rate is very high" warning: all users start at once by design
    admin = db.connect(dsn, application_name="queue-bench admin")
    try:
        server = db.server_info(admin)
        db.check_schema_usable(admin, cfg.schema)
        db.lock_schema(admin, cfg.schema)  # held by this session until the run ends
        room = db.check_capacity(admin, cfg.connections_needed())  # this admin connection is already counted
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            return _run(cfg, dsn, admin, server, room, wait_fn, log, embedded, state_schema)
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
    finally:
        admin.close()


def _run(cfg, dsn, admin, server, room, wait_fn, log, embedded, state_schema) -> Path:
    if cfg.backlog or cfg.rate > 0:
        backlog, backlog_how = cfg.backlog, ("given" if cfg.backlog else "none: open-loop producers feed the queue")
    else:
        backlog, backlog_how = compute_backlog(cfg)
    run_id = new_run_id(cfg)
    started_at = _now_iso()
    log(f"queue-bench {__version__}: run {run_id}")
    log(f"policy {cfg.policy}, workers {cfg.workers}, batch {cfg.batch}, txn {cfg.txn}, work {cfg.work_ms:g} ms, "
        f"index {cfg.index}, history {cfg.history:,}, backlog {backlog:,} ({backlog_how})")
    log(f"server: {server['server_version'].split(',')[0]}; connections free {room['available']} of "
        f"{room['max_connections']}; psycopg wait function {wait_fn}")

    seed = db.prepare(admin, cfg, backlog, log=log, state_schema=state_schema)
    sizes_before = db.table_sizes(admin, cfg.schema)
    claim_plans, plans_when = None, None
    if backlog + cfg.history > 0:  # an empty table's plan says nothing: then it is taken after the load
        claim_plans, plans_when = _capture_plans(admin, cfg, "on the seeded table, before the load")
    vacuum_before = db.vacuum_counts(admin, cfg.schema)
    pgss_missing = statements.unavailable_reason(admin)
    # Created only now: bad input and an interrupted seeding leave no run directory behind.
    run_dir = Path(cfg.results) / run_id
    run_dir.mkdir(parents=True)

    recorder = metrics.Recorder(cfg.batch)
    claim_log = swarm.ClaimLog()
    ctx = swarm.SwarmContext(cfg=cfg, dsn=dsn, recorder=recorder, log=claim_log)
    monitor = Monitor(lambda name: db.connect(dsn, application_name=name), cfg.schema,
                      priorities=tuple(sorted({0} | {p for p, _ in cfg.priority_mix})))

    from locust.env import Environment  # imported late: locust patches at import (already done by swarm)

    swarm.QueueWorker.ctx = ctx
    swarm.QueueWorker._serial = 0
    swarm.QueueWorker.fixed_count = cfg.workers
    user_classes = [swarm.QueueWorker]
    if cfg.rate > 0:
        Producer.ctx, Producer._serial, Producer.fixed_count = ctx, 0, cfg.producers
        user_classes.append(Producer)
    stop_timeout_s = max(10.0, 2 * cfg.work_ms * cfg.batch / 1000.0 * (cfg.workers if cfg.txn == "hold" else 1))
    stop_timeout_s += swarm.EXPLAIN_TIMEOUT_MS / 1000.0 + 5  # one worker explains its claim as it stops
    env = Environment(user_classes=user_classes, stop_timeout=stop_timeout_s)
    locust_runner = env.create_local_runner()
    proc = psutil.Process()
    cpu_meter = CpuMeter(proc)

    n_warm = int(round(cfg.warmup_s))
    n_meas = max(1, int(round(cfg.duration_s)))
    clock = _Clock()
    ctx.measured_start_unix = clock.unix0 + n_warm
    n_users = cfg.workers + (cfg.producers if cfg.rate > 0 else 0)
    locust_runner.start(n_users, spawn_rate=n_users * 10)
    samples: dict[int, dict] = {}  # second index -> monitor values taken in that second

    def note(k: int, values: dict) -> None:
        entry = samples.setdefault(k, {"monitor_query_us": 0})
        entry["monitor_query_us"] += int(values["cost_s"] * 1e6)
        entry.update({key: v for key, v in values.items() if key != "cost_s" and v is not None})

    samplers = spawn_samplers(monitor, clock.now_s, n_warm + n_meas, note)
    samplers.append(gevent.spawn(_loop_lag_probe, recorder))
    faults_not_opened = [f"{f.kind}@{f.start_s:g}-{f.end_s:g}" for f in cfg.faults if f.start_s >= n_meas]
    for fault in faults_not_opened:
        log(f"warning: fault window {fault} starts after the measured window ends (DURATION {n_meas} s): "
            "it will not open")
    fault_greenlets = [gevent.spawn(_fault_window, f, ctx, dsn, clock, n_warm, recorder, log) for f in cfg.faults
                       if f.start_s < n_meas]
    reaper = None
    if cfg.reaper_interval_s > 0:
        reaper = Reaper(db.connect(dsn, application_name="queue-bench reaper"), cfg.schema,
                        cfg.reaper_interval_s, recorder)
        reaper_greenlet = gevent.spawn(reaper.run)
    mover = None
    if cfg.layout == "archive":
        mover = Mover(db.connect(dsn, application_name="queue-bench mover"), cfg.schema, recorder)
        mover_greenlet = gevent.spawn(mover.run)
    # Running totals, not the intervals: one second's histograms are held at a time (see metrics.Window).
    measured = metrics.Window()
    totals: Counter = Counter()  # warm-up, measured and stop phase: the invariants cover them all
    max_rows_per_claim = 0
    rows: list[dict] = []  # one small dict per measured second; monitor samples are added at the end
    recent: collections.deque = collections.deque(maxlen=PROGRESS_EVERY_S)  # for the progress line
    hlogs = results.HistogramLogs(run_dir / "histograms", metrics.HISTOGRAM_NAMES, clock.unix0)
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
        if len(recent) == recent.maxlen:
            recent[0].release()  # leaves the progress line's window now
        recent.append(interval)
        rows.append(_interval_row(interval, interval.index - n_warm, None, cpu))

    complete = True
    prev_s = 0.0
    interrupted = gevent.event.Event()
    previous_handlers = {sig: signal.signal(sig, lambda *_: interrupted.set())
                         for sig in (signal.SIGINT, signal.SIGTERM)}
    pgss_reset = _pgss_reset(admin, cfg, pgss_missing) if n_warm == 0 else None
    try:
        for k in range(n_warm + n_meas):
            if interrupted.wait(timeout=max(0.0, k + 1 - clock.now_s())):
                complete = False
                log("interrupted: stopping the swarm and writing what was measured (complete: false)")
                break
            now_s = clock.now_s()
            interval = recorder.rotate(k, prev_s, now_s)
            prev_s = now_s
            cpu = cpu_meter.read()
            account(interval, cpu if k >= n_warm else None)
            rss.tick(k + 1)
            if k + 1 == n_warm:  # the measured window starts now
                pgss_reset = _pgss_reset(admin, cfg, pgss_missing)
            if (k + 1) % PROGRESS_EVERY_S == 0:
                _progress(log, k + 1, n_warm, n_meas, list(recent), samples.get(k))
    finally:
        # From here on the results are being written: a Ctrl-C waits for them (run() restores the handlers).
        for sig in previous_handlers:
            signal.signal(sig, lambda *_: log("the load has stopped: writing the results first"))
    # The claim's pg_stat_statements entry covers the measured window only: read it now, before
    # the stop phase and before any plan capture executes the claim again.
    pgss = _pgss_read(admin, cfg, pgss_missing, pgss_reset)
    # Intervals after the last tick (stop phase) still count for the invariants.
    ctx.stopping = True
    table_query_in_flight_s = monitor.table_query_running_s()
    gevent.killall(samplers)
    gevent.killall(fault_greenlets)  # each closes what it opened (finally)
    ctx.active_faults.clear()
    locust_runner.stop()
    locust_runner.quit()
    if reaper is not None:
        reaper.stop()
        reaper_greenlet.join(timeout=30)
        reaper.conn.close()
    if mover is not None:
        mover.stop()
        mover_greenlet.join(timeout=30)
        mover.conn.close()
    workers_plan = plans.workers_plan(ctx.plan_sessions, ctx.worker_explain, prepared=cfg.prepared,
                                      plan_cache=cfg.plan_cache)
    tail = recorder.rotate(n_warm + n_meas, prev_s, clock.now_s())
    tail_measured = (not complete and tail.counters["claims"] and measured.intervals < n_meas
                     and clock.now_s() > n_warm)
    account(tail, cpu_meter.read() if tail_measured else None)
    hlogs.close()
    ended_unix = time.time()
    # Samples join the rows only now: a table sample taken in second k may have returned after tick k.
    for row in rows:
        row.update(_sample_columns(samples.get(row["t_s"] + n_warm)))

    database_lost = None
    try:
        # The table sampler may have been killed mid-query: take the final sample on a fresh connection.
        monitor.reset_table_conn()
        final_sample = {**monitor.sample_stats(), **monitor.sample_table(force=True)}
        if not db.is_alive(admin):  # e.g. its backend was terminated: audit on a new connection
            admin = db.connect(dsn, application_name="queue-bench audit")
        vacuum_after = db.vacuum_counts(admin, cfg.schema)
        if plans_when is None:
            claim_plans, plans_when = _capture_plans(admin, cfg, "on the table as the load left it")
        audit_result = audit.run_audit(
            admin, cfg.schema, claim_log, seeded_rows=cfg.history + backlog, over_claims=totals["over_claims"],
            poison_share=cfg.poison_share, relation="jobs_all" if cfg.layout == "archive" else "jobs")
        sizes_after = db.table_sizes(admin, cfg.schema)
    except (ConfigError, psycopg.Error) as err:
        # The database went away during the run: write what was measured, with nothing audited.
        database_lost = (str(err).strip().splitlines() or [type(err).__name__])[0]
        database_lost = database_lost.removeprefix("DSN: ").split("; allowed:")[0]
        log(f"the database went away during the run ({database_lost}): writing what was measured, unaudited")
        complete = False
        final_sample = {"queue_depth": None}
        plans_when = plans_when or "not captured: the database went away"
        vacuum_after = None
        audit_result = {"invariants": dict.fromkeys(audit.INVARIANTS), "status_counts": {}, "details": {},
                        "redeliveries": None, "retry_gaps": None}
        sizes_after = None
        pgss = pgss if "unavailable" not in pgss else {"unavailable": "the database went away"}
    monitor.close()
    claim_log.close()
    claim_plan = plans.plans_text(claim_plans, plans_when, workers_plan)
    (run_dir / "claim_plan.txt").write_text(claim_plan + "\n")

    measured_start_unix = clock.unix0 + (measured.start_s if measured.intervals else n_warm)
    measured_end_unix = clock.unix0 + measured.end_s if measured.intervals else measured_start_unix  # empty window
    run_info = {
        "run_id": run_id, "tool_version": __version__, "git_sha": _git_sha(),
        **server,
        "client": {"cores": os.cpu_count(), "memory_bytes": psutil.virtual_memory().total,
                   "python": platform.python_version(), "platform": platform.platform(),
                   "hostname": socket.gethostname(), "psycopg_wait": wait_fn},
        "dsn_masked": mask_dsn(dsn), "embedded_database": embedded,
        "config": cfg.public(), "backlog": backlog, "backlog_computed": backlog_how,
        "seed": {"rows": seed.history + seed.backlog, "history": seed.history, "backlog": seed.backlog,
                 "seconds": round(seed.seconds, 3), "rows_per_s": round(seed.rows_per_s, 1),
                 "index_seconds": round(seed.index_seconds, 3), "vacuum_seconds": round(seed.vacuum_seconds, 3)},
        "connections": room,
        # the nodes of the plan the workers ran (read on a worker's own session)
        "claim_plan_nodes": workers_plan.get("nodes") or None,
        "claim_plans": {**(_plans_summary(claim_plans) or {"auto": None}),
                        "workers": {k: v for k, v in workers_plan.items() if k not in ("text", "nodes")}},
        "autovacuum": _vacuum_during(vacuum_before, vacuum_after, cfg),
        "faults_not_opened": faults_not_opened,
        "pg_stat_statements": pgss,
        "monitor_table_query_in_flight_s": round(table_query_in_flight_s, 3),
        "database_lost": database_lost,
        "monitor_table_cost_s": monitor.table_cost_s,
        "monitor_errors": dict(monitor.errors),
        "sizes_before": sizes_before, "sizes_after": sizes_after,
        "started_at": started_at, "load_started_at": _iso_at(clock.unix0),
        "measured_start": _iso_at(measured_start_unix), "measured_end": _iso_at(measured_end_unix),
        "ended_at": _iso_at(ended_unix),
        "harness_rss_mb": rss.summary(),
    }
    summary = summarize(run_id, cfg, measured, rows, complete, max_rows_per_claim, audit_result,
                        final_sample, monitor.failures, run_info)
    results.write_json(run_dir / "run.json", run_info)
    results.write_intervals(run_dir / "intervals.csv", rows)
    results.write_json(run_dir / "summary.json", summary)
    if len({0} | {p for p, _ in cfg.priority_mix}) > 1:
        results.write_priority_ages(run_dir / "priority_ages.csv", [
            (r["t_s"], samples.get(r["t_s"] + n_warm, {}).get("age_by_priority")) for r in rows])
    if audit_result["retry_gaps"] is not None:
        # Seconds between successive claims of each job that failed at least once (database time).
        results.write_json_list(run_dir / "retry_gaps.json", audit_result["retry_gaps"])
    _final_lines(log, summary)
    return run_dir


def _progress(log, elapsed_s: int, n_warm: int, n_meas: int, intervals: list, sample) -> None:
    """A ``pgbench -P`` style line over the last :data:`PROGRESS_EVERY_S` measured seconds; its
    claim p99 is that of those seconds' claim histograms merged into one, never the largest
    per-second p99. Runs during the load, so it takes only the percentile it prints."""
    total = n_warm + n_meas
    if elapsed_s <= n_warm or not intervals:
        log(f"progress: {elapsed_s:.1f}/{total} s (warm-up)")
        return
    last = intervals[-PROGRESS_EVERY_S:]
    jobs_s = sum(iv.counters["jobs_completed"] for iv in last) / len(last)
    claims = metrics.merge(last, "claim_latency_us")
    p99 = _p99(claims) if claims.get_total_count() else None
    age = (sample or {}).get("oldest_eligible_age_s")
    age = "-" if age is None else f"{age:.1f} s"
    errors = sum(sum(iv.errors.values()) for iv in last)
    log(f"progress: {elapsed_s:.1f}/{total} s, {jobs_s:,.1f} jobs/s, claim p99 {_fmt_ms(p99)}, "
        f"oldest age {age}, errors {errors}")


def summarize(run_id, cfg, measured: metrics.Window, rows, complete, max_rows_per_claim, audit_result, final_sample,
              monitor_failures, run_info) -> dict:
    """Build ``summary.json`` (docs/design.md keys plus ``suspect``, ``backlog_exhausted`` and details)."""
    measured_s = measured.seconds
    counters = Counter(measured.counters)
    errors = Counter(measured.errors)
    claim = metrics.merge(measured, "claim_latency_us")
    complete_h = metrics.merge(measured, "complete_latency_us")
    pickup = metrics.merge(measured, "pickup_latency_us")
    ages = [r["oldest_eligible_age_s"] for r in rows if r.get("oldest_eligible_age_s") is not None]
    costs = [r["monitor_query_us"] for r in rows if r.get("monitor_query_us") is not None]
    cpu_max = max((r["harness_cpu_pct"] for r in rows), default=0.0)
    # No eligible row at some sample (a count of 0, or no oldest eligible row at all).
    depth_zero = any(r.get("queue_depth") == 0 or r.get("oldest_eligible_age_s") == 0 for r in rows) or (
        final_sample["queue_depth"] == 0)
    # Without producers an empty queue means the seeded backlog ran out; with them it means keeping up.
    backlog_exhausted = depth_zero and cfg.rate == 0
    saturation = _saturation(cfg, rows, counters, measured_s)
    growth = plans.claim_growth(rows)
    reasons = []
    if cpu_max > SUSPECT_CPU_PCT:
        reasons.append(f"load generator CPU reached {cpu_max:.0f} % of a core (> {SUSPECT_CPU_PCT:.0f} %): "
                       "the harness may be the bottleneck")
    # The last row of an interrupted run is a partial second the monitor never reached.
    whole = rows if complete else rows[:-1]
    missed = sum(1 for r in whole if r.get("lock_waiters") is None)
    if missed:
        reasons.append(f"the monitor missed {missed} of {len(whole)} samples")
    # The work per job as measured around each job's sleep (a 1 ms sleep can take several ms on a
    # busy event loop); what the configuration asked for only when no job ran in the window.
    work_h = metrics.merge(measured, "work_duration_us")
    work_s = metrics.mean_value(work_h) / 1e6 if work_h.get_total_count() else jobs.expected_work_s(cfg)
    loop_lag = metrics.merge(measured, "loop_lag_us")
    if loop_lag.get_total_count() and _p99(loop_lag) > SUSPECT_LOOP_LAG_P99_US:
        claim_p99_us = _p99(claim) if claim.get_total_count() else None
        reasons.append(f"event-loop lag p99 {_p99(loop_lag) / 1000:,.2f} ms "
                       f"(> {SUSPECT_LOOP_LAG_P99_US / 1000:g} ms): the load generator waited for a core, so it "
                       "may set the pace instead of the database, and each latency it measured (claim p99 "
                       f"{_fmt_ms(claim_p99_us)}) may include that much of its own delay")
    claim_mean_s = (metrics.mean_value(claim) / 1e6) if claim.get_total_count() else 0.0
    cycle_s = claim_mean_s + work_s * cfg.batch + ((metrics.mean_value(complete_h) / 1e6) if complete_h.get_total_count() else 0.0)
    if measured_s and cycle_s * 5 > measured_s:
        reasons.append(f"one worker cycle (claim + work + completion) takes about {cycle_s:,.2f} s, so the "
                       f"{measured_s:,.1f} s window holds fewer than 5 per worker: throughput is quantised; "
                       "use a longer DURATION")
    if work_s * cfg.batch > cfg.lease_s:
        reasons.append(f"the work per claim (about {work_s * cfg.batch:,.2f} s) outlasts the lease "
                       f"({cfg.lease_s:g} s): completions arrive after the lease expired"
                       + ("" if cfg.reaper_interval_s > 0 else ", and with no reaper nothing takes the jobs back"))
    if run_info.get("database_lost"):
        reasons.append(f"the database went away during the run ({run_info['database_lost']}); "
                       "the end-of-run audit could not run, so the invariants are unknown")
    notes = _monitor_notes(rows, monitor_failures, run_info["monitor_table_cost_s"],
                           run_info["monitor_table_query_in_flight_s"])
    if backlog_exhausted:
        reasons.append("the backlog ran dry: throughput is bounded by the seeded backlog")
    if measured_s and counters["jobs_completed"] == 0:
        reasons.append("no job was completed in the measured window: there is no throughput or latency "
                       "to report (a claim may take longer than the window: use a longer DURATION)")
    summary = {
        "run_id": run_id,
        "complete": complete,
        "config": cfg.public(),
        "measured_s": round(measured_s, 3),
        "measured_start": run_info["measured_start"],
        "measured_end": run_info["measured_end"],
        "throughput_jobs_per_s": round(counters["jobs_completed"] / measured_s, 2) if measured_s else None,
        "claims_per_s": round(counters["claims"] / measured_s, 2) if measured_s else None,
        "jobs_claimed": counters["jobs_claimed"],
        "jobs_completed": counters["jobs_completed"],
        "empty_claims": counters["empty_claims"],
        "max_rows_per_claim": max_rows_per_claim,
        "claim_latency_us": metrics.latency_summary(claim),
        "complete_latency_us": metrics.latency_summary(complete_h),
        "pickup_latency_ms": metrics.latency_summary(pickup, scale=1000.0),
        "oldest_eligible_age_s": {
            "max": max(ages) if ages else None,
            "p95": _percentile(ages, 95),
            "final": ages[-1] if ages else None,  # the last sample inside the measured window
        },
        "errors": dict(errors),
        "invariants": audit_result["invariants"],
        "harness_cpu_max_pct": cpu_max,
        "suspect": bool(reasons),
        "suspect_reasons": reasons,
        "backlog_exhausted": bool(backlog_exhausted),
        "stale_completions": counters["stale_completions"],
        "retries": counters["retries"],
        "dead_lettered": counters["dead_lettered"] + counters["reaper_dead_lettered"],
        "lease_expiries": counters["lease_expiries"],
        "redeliveries": audit_result["redeliveries"],
        "offered_rate_jobs_per_s": cfg.rate or None,
        "jobs_produced": counters["jobs_produced"],
        "producer_lag_ms": metrics.latency_summary(metrics.merge(measured, "producer_lag_us"), scale=1000.0),
        **saturation,
        "nowait_retries": counters["nowait_retries"],
        "monitor_query_us": {"mean": round(sum(costs) / len(costs), 1) if costs else None,
                             "max": max(costs) if costs else None},
        "monitor_failures": monitor_failures,
        "monitor_notes": notes,
        "database_lost": run_info.get("database_lost"),
        "faults": [dict(f.__dict__) for f in cfg.faults],
        "faults_not_opened": run_info["faults_not_opened"],
        "crashed_claims": counters["crashed_claims"],
        "crashed_jobs": counters["crashed_jobs"],
        "late_completions": counters["late_completions"],
        "backend_kills": counters["backend_kills"],
        "status_counts": audit_result["status_counts"],
        "batch_wait_us": metrics.latency_summary(metrics.merge(measured, "batch_wait_us")),
        "work_duration_us": metrics.latency_summary(work_h),
        "work_expected_ms": round(jobs.expected_work_s(cfg) * 1000.0, 3),
        "loop_lag_us": metrics.latency_summary(loop_lag),
        "loop_lag_limit_us": SUSPECT_LOOP_LAG_P99_US,
        "nowait_backoff_us": metrics.latency_summary(metrics.merge(measured, "nowait_backoff_us")),
        "monitor_errors": run_info.get("monitor_errors", {}),
        "archived_jobs": counters["archived_jobs"],
        "plans": run_info["claim_plans"],
        "claim_growth": growth,
        "plan_warnings": plans.plan_warnings(run_info["claim_plans"]["workers"], growth),
        "autovacuum": run_info["autovacuum"],
        "pg_stat_statements": run_info["pg_stat_statements"],
        "table_sizes": {"before": run_info["sizes_before"], "after": run_info["sizes_after"]},
        "audit": audit_result["details"],
        "harness_rss_mb": run_info["harness_rss_mb"],
    }
    return summary


def _fault_window(fault, ctx, dsn: str, clock: "_Clock", n_warm: int, recorder: metrics.Recorder, log) -> None:
    """Open ``fault``'s window at its start (seconds since measured start), close it at its end."""
    clock.sleep_until(n_warm + fault.start_s)
    log(f"fault: {fault.kind} from {fault.start_s:g} s to {fault.end_s:g} s of the measured window")
    conn = None
    try:
        if fault.kind in ("crash_after_claim", "late_worker"):
            ctx.late_extra_s = fault.extra_s
            ctx.crashed.clear()
            ctx.active_faults[fault.kind] = choose_workers(list(ctx.worker_names), fault.share)
            clock.sleep_until(n_warm + fault.end_s)
        elif fault.kind == "long_transaction":
            conn = db.connect(dsn, autocommit=False, application_name="queue-bench long transaction")
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            conn.execute(psycopg.sql.SQL("SELECT count(*) FROM {}").format(
                psycopg.sql.Identifier(ctx.cfg.schema, "jobs")))  # takes the snapshot: holds xmin from here
            clock.sleep_until(n_warm + fault.end_s)
            conn.rollback()
        elif fault.kind == "backend_kill":
            conn = db.connect(dsn, application_name="queue-bench backend killer")
            while clock.now_s() < n_warm + fault.end_s:
                row = conn.execute("""
                    SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                    WHERE datname = current_database() AND application_name LIKE 'queue-bench worker-%'
                    ORDER BY random() LIMIT 1""").fetchone()
                if row and row[0]:
                    recorder.count("backend_kills")
                clock.sleep_until(min(n_warm + fault.end_s, clock.now_s() + fault.every_s))
    finally:
        ctx.active_faults.pop(fault.kind, None)
        if conn is not None:
            conn.close()


def _capture_plans(conn, cfg: RunConfig, when: str) -> tuple[dict | None, str]:
    """What the claim's custom and generic plans would do on a fresh statement (see
    bench.plans), and when they were taken (or why the capture failed)."""
    try:
        return plans.capture_claim_plans(conn, cfg.schema, cfg.policy, cfg.batch, cfg.lease_s), when
    except psycopg.Error as err:
        return None, f"{when}: capture failed: {str(err).strip().splitlines()[0]}"


def _vacuum_during(before: dict, after: dict | None, cfg: RunConfig) -> dict:
    """Autovacuum and autoanalyze runs on the queue table between the end of seeding and the end of
    the run; an autoanalyze invalidates the workers' cached claim plans, which are then rebuilt."""
    enabled = cfg.autovacuum == "on" and before["server_autovacuum"]
    if after is None:
        return {"enabled": enabled, "server_autovacuum": before["server_autovacuum"],
                "autovacuum_runs": None, "autoanalyze_runs": None}
    return {"enabled": enabled, "server_autovacuum": before["server_autovacuum"],
            "autovacuum_runs": after["autovacuum_count"] - before["autovacuum_count"],
            "autoanalyze_runs": after["autoanalyze_count"] - before["autoanalyze_count"],
            "last_autovacuum": after["last_autovacuum"], "last_autoanalyze": after["last_autoanalyze"]}


def _pgss_read(conn, cfg: RunConfig, missing: str | None, reset: str | None) -> dict:
    """The claim's pg_stat_statements figures since the measured start, or ``{"unavailable": why}``."""
    if missing or isinstance(reset, str):
        return {"unavailable": missing or reset}
    try:
        return statements.read_claim(conn, cfg.schema)
    except psycopg.Error as err:
        return {"unavailable": f"read failed: {str(err).strip().splitlines()[0]}"}


def _plans_summary(captured: dict | None) -> dict | None:
    """The plans without their text, for summary.json."""
    if captured is None:
        return None
    return {"auto": captured["auto"],
            **{mode: {k: v for k, v in captured[mode].items() if k != "text"} for mode in plans.PLAN_MODES}}


def _pgss_reset(conn, cfg: RunConfig, missing: str | None) -> str | None:
    """Reset the claim's pg_stat_statements entries at the measured start; a reason string if not possible."""
    if missing:
        return missing
    try:
        statements.reset_claim(conn, cfg.schema)
    except psycopg.Error as err:
        return f"reset failed: {str(err).strip().splitlines()[0]}"
    return None


def _monitor_notes(rows: list[dict], failures: int, costs_s: dict, in_flight_s: float) -> list[str]:
    """Plain-language notes on how often the monitor's table queries could be afforded, with their cost."""
    notes = []
    n = len(rows)
    for column, kind, what, budget in (("oldest_eligible_age_s", "age", "oldest eligible age", 5),
                                       ("queue_depth", "counts", "queue depth and running", 2)):
        taken = sum(1 for r in rows if r.get(column) is not None)
        spent = costs_s.get(kind) or []
        if n and taken < n:
            mean_ms = f"{1000 * sum(spent) / len(spent):,.1f} ms" if spent else "more than the run"
            notes.append(f"{what} sampled in {taken} of {n} seconds: one sample took {mean_ms} on this "
                         f"table under this load, and samples are spaced so they take at most {budget} % "
                         "of the time")
    if in_flight_s > 1.0:
        notes.append(f"a monitor table query had been running for {in_flight_s:,.1f} s when the load stopped")
    if failures:
        notes.append(f"{failures} monitor statements failed or hit their statement_timeout "
                     "(5 s for the statistics query, 30 s for a table query)")
    return notes


def _final_lines(log, s: dict) -> None:
    c = s["claim_latency_us"]
    if not s["measured_s"]:
        log("nothing was measured: the run stopped during the warm-up")
        return
    log(f"throughput {s['throughput_jobs_per_s']} jobs/s over {s['measured_s']} s "
        f"({s['jobs_completed']:,} jobs completed, {s['claims_per_s']} claims/s, {s['empty_claims']:,} empty claims)")
    log(f"claim latency p50 {_fmt_ms(c['p50'])}, p95 {_fmt_ms(c['p95'])}, p99 {_fmt_ms(c['p99'])}, max {_fmt_ms(c['max'])}")
    age_max = s["oldest_eligible_age_s"]["max"]
    log(f"oldest eligible age max {'not sampled' if age_max is None else f'{age_max:.3f} s'}; "
        f"errors {s['errors'] or 'none'}; "
        f"invariants {s['invariants']}")
    if s.get("saturation_verdict"):
        log(f"queue: {s['saturation_verdict']}")
    rss = s["harness_rss_mb"]
    at = ", ".join(f"{rss[f'at_{m}m']:,.1f} MB at {m} min" for m in RSS_REPORTED_MIN if rss[f"at_{m}m"] is not None)
    growth = "" if rss["growth_mb_per_min"] is None else f", {rss['growth_mb_per_min']:+,.2f} MB per minute"
    log(f"harness RSS {(at + ', ') if at else ''}{rss['end']:,.1f} MB at the end, peak {rss['max']:,.1f} MB{growth}")
    if s["suspect"]:
        log("SUSPECT: " + "; ".join(s["suspect_reasons"]))
