"""One run as an object holding its state (after Locust's ``Environment`` and pyperf's runner); each phase a
method, called in order by :meth:`Run.execute`."""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import time
from pathlib import Path
from typing import Callable

import gevent
import psutil

from bench import __version__, run_summary
from bench.config.pooler_parameters import users_console
from bench.config.run_config import RunConfig
from bench.engines import engine_for, non_loopback_host, round_trip_probe
from bench.errors import ConfigError, QBenchError
from bench.load import swarm
from bench.load.distributed import run_driver
from bench.load.fault_windows import fault_window
from bench.load.library_driver import LibraryWorkersDriver
from bench.load.web_ui import WebUI
from bench.measure import metrics, seconds
from bench.measure.cpu_meter import CpuMeter
from bench.measure.machine_cpu import MachineMeter
from bench.measure.rss import RssLog
from bench.results import run_files
from bench.results.dead_rows import table_autovacuum_ineffective
from bench.results.model import RunResult, utc_now
from bench.runner.audit import Audited, audit, database_lost
from bench.runner.backlog import run_backlog
from bench.runner.info import run_info
from bench.runner.interrupts import SIGNALS, Interrupts
from bench.runner.round_trip import RoundTripProbe
from bench.runner.side_tasks import SideTasks
from bench.runner.tally import Tally
from bench.usage import named, option, setting


class Run:
    """One benchmark of ``cfg`` against ``dsn`` (arguments: :func:`bench.runner.run`). Construction checks what
    needs no server; :meth:`execute` returns the run directory. ``dsn`` is the workers', producers' and reaper's;
    :attr:`direct` (``cfg.direct_dsn()``, else ``dsn``) everything else's: behind a pooler, the server itself."""

    def __init__(self, cfg: RunConfig, dsn: str, *, log: Callable[[str], None] = print, embedded: bool = False,
                 state_schema: str | None = None, external_workers: tuple[str, int, float] | None = None,
                 web_ui: tuple[str, int, int] | None = None, pooler=None, relay=None):
        self.cfg, self.dsn, self.log, self.embedded = cfg, dsn, log, embedded
        self.relay = relay  # the delay relay dsn goes through (NET_DELAY_MS): its process the run's own
        self.upstream = relay.upstream_dsn if relay else dsn  # what the relay forwards to: the pooler or the server
        self.pooler, self.pooler_pid = pooler, (pooler.pid if pooler else None)  # the embedded pooler, its process the run's
        # the console the pooler figures are read on: the embedded pooler's, or POOLER_ADMIN_DSN of a user's;
        # pooler_facts: what the run read of the pooler before the load (run.json pooler)
        self.pooler_console, self.pooler_facts, self.pooler_watch = pooler.admin_dsn if pooler else users_console(cfg), None, None
        # the tool's own connections (admin, monitor, audit, mover, VACUUM, faults): DSN_DIRECT behind a pooler,
        # which only the workers, producers and reaper go through (docs/poolers.md), and never the delay relay
        self.direct = cfg.direct_dsn() or self.upstream
        self.state_schema, self.external_workers, self.web_ui = state_schema, external_workers, web_ui
        self.engine = engine_for(cfg)
        self.engine.capabilities.check(cfg.public())
        self.sessions = self.engine.sessions(dsn, cfg)
        self.wait_fn = self.sessions.check_cooperative()

    def execute(self) -> Path:
        """Claim the schema on an admin connection, run every phase, and restore the signal handlers."""
        logging.getLogger("locust").setLevel(logging.ERROR)  # e.g. its "spawn rate is very high" warning: all users start at once by design
        admin = self.admin = self.engine.connect(self.direct, "queue-bench admin")
        try:
            self.server = self.engine.server_info(admin)
            if self.direct != self.upstream:  # behind a pooler: before the schema is claimed or created
                self.engine.check_direct(admin, self.dsn)
            if self.cfg.replica is True and self.cfg.dsn_replica:  # before the schema is claimed or created
                self.engine.check_given_standby(admin, self.cfg)  # and SYNC_COMMIT on the DSN's server
            self.room = self._claim_schema()  # locked until the run ends
            handlers = {sig: signal.getsignal(sig) for sig in SIGNALS}
            try:
                with contextlib.ExitStack() as self.exits:  # the standby (REPLICA=1), stopped last
                    return self._phases()
            finally:
                for sig, handler in handlers.items():
                    signal.signal(sig, handler)
        finally:
            self.admin.close()  # the one in use: another after a failover or a lost connection

    def _claim_schema(self) -> dict:
        """The engine's claim of the schema, checked for the connections the run needs (and the web UI's most workers):
        its :meth:`RunConfig.connection_budget` (behind a pooler, the pool and the tool's direct ones)."""
        extra = self.web_ui[2] - self.cfg.workers if self.web_ui else 0  # the workers the web UI may add
        try:
            return self.engine.claim_schema(self.admin, self.cfg.schema, self.cfg.connection_budget(extra))
        except ConfigError as err:
            if extra and err.param == "WORKERS":  # it is the web UI's most workers that do not fit
                detail = err.problem.split("; allowed:")[0]
                raise ConfigError("MAX_WORKERS", f"{detail} (for {setting('max_workers', self.web_ui[2])}); allowed: "
                                                 + named("a lower {max_workers}, or a server with more connections")) from None
            raise

    def _phases(self) -> Path:
        self._announce()
        self._prepare()
        self._start_load()
        self._swarm()
        self._stop()
        self.audited = self._audit()
        return self._write()

    def _announce(self) -> None:
        """Choose the backlog and the run id; log the run's first lines."""
        cfg = self.cfg
        self.backlog, self.backlog_how = run_backlog(cfg)
        self.run_id = run_files.new_run_id(cfg)
        self.started_at = utc_now("milliseconds")
        self.log(f"queue-bench {__version__}: run {self.run_id}")
        self.log(f"policy {cfg.policy}, workers {cfg.workers}, batch {cfg.batch}, txn {cfg.txn}, work {cfg.work_ms:g} ms, "
                 f"index {cfg.index}, history {cfg.history:,}, backlog {self.backlog:,} ({self.backlog_how})")
        self.log(f"server: {self.server['server_version'].split(',')[0]}; connections free {self.room['available']} of "
                 f"{self.room['max_connections']}; driver waits on {self.wait_fn}")
        budget = cfg.connection_budget()
        if budget.pooler != "none":  # the server's budget is the pool's, not a connection per worker
            self.log(f"connections: {budget.sentence()}")
        blocked = table_autovacuum_ineffective(cfg.public(), self.server.get("server_settings"))
        if blocked:
            self.log(f"note: autovacuum never runs on this server ({blocked}), whatever the queue table's "
                     f"autovacuum_enabled says: its dead rows stay until a VACUUM ({option('vacuum_every_s')})")
        if self.direct != self.upstream:  # behind a pooler: what it is, read before the load (docs/poolers.md)
            self.pooler_facts = self.engine.pooler_facts(self.dsn, self.pooler_console, detect=self.pooler_pid is None)
            for line in run_summary.pooler_lines(self.cfg, self.pooler_facts):
                self.log(line)

    def _prepare(self) -> None:
        """Prepare the table (seed it), read what the run compares against afterwards, create the run directory."""
        engine, admin, cfg = self.engine, self.admin, self.cfg
        self.seed = engine.prepare(admin, cfg, self.backlog, log=self.log, state_schema=self.state_schema)
        engine.check_migrations(admin, cfg, self.log)  # a failing one drops the schema and is refused, before any load
        self.sizes_before = engine.table_sizes(admin, cfg.schema)
        # an empty table's plan says nothing: then it is taken after the load
        self.claim_plans, self.plans_when = (engine.capture_plans(admin, cfg, "on the seeded table, before the load")
                                             if self.backlog + cfg.history > 0 else (None, None))
        self.vacuum_before = engine.vacuum_counts(admin, cfg.schema)
        self.pgss_missing = engine.statement_stats_unavailable(admin)
        self.standby_dsn = self.exits.enter_context(engine.standby(self.direct, cfg, self.log)) if cfg.replica is True else None
        self.standby_root = engine.standby_root(self.standby_dsn, cfg) if self.standby_dsn else None  # the embedded one's
        self.failover = engine.observe_failover(self.direct)  # a user's multi-host DSN: a change of primary noticed
        if any(f.kind == "failover" for f in cfg.faults):  # from here the tool's connections name both servers, the
            self.failover = engine.failover(self.direct, self.standby_dsn, cfg, self.pooler)  # workers' too unless
            self.dsn, self.direct = self.failover.workers_dsn(self.dsn), self.failover.dsn  # the embedded pooler's
            self.sessions = engine.sessions(self.dsn, cfg)
        self.commit_mode = engine.commit_mode(self.dsn, admin, cfg)  # read back on the workers' path, standby named
        self.run_dir = Path(cfg.results) / self.run_id  # only now: bad input, an interrupted seeding leave none
        self.made_dirs = [d for d in (self.run_dir, *self.run_dir.parents) if not d.exists()]  # deepest first
        self.run_dir.mkdir(parents=True)

    def _start_load(self) -> None:
        """Start the workers; once connected, the clock, the samplers, the fault windows and the side tasks."""
        cfg = self.cfg
        self._make_driver()
        self.load_start_sample = self.monitor.sample_stats()  # before any worker connects: cost over the whole load
        self.n_warm = int(round(cfg.warmup_s))
        self.n_meas = max(1, int(round(cfg.duration_s)))
        try:
            self._started_or_cleaned(self.driver.start)  # no process started, or Ctrl-C while waiting for them
            self.connect_s = self._started_or_cleaned(self.driver.wait_connected)
        except (QBenchError, KeyboardInterrupt):  # a process that did not start, a refused session, Ctrl-C or
            # SIGTERM while waiting for them: nothing was measured
            self.engine.drop_schema_at(self.direct, cfg.schema)  # created by this run
            raise
        self.workers_at_start = self.driver.connected_workers()
        if self.connect_s >= 1.0 or self.workers_at_start < cfg.workers:
            self.log(f"workers connected in {self.connect_s:.1f} s: {self.workers_at_start} of {cfg.workers}; "
                     "the warm-up and the measured window start now")
        self.clock = clock = seconds.Clock()
        self.ctx.measured_start_unix = clock.unix0 + self.n_warm
        self.cpu_meter.read()  # the connecting phase's CPU belongs to no second
        self._relay_columns()
        self.machine.read()
        self.tally = Tally(self.driver, self.n_warm)
        self.samplers = self.engine.spawn_samplers(self.monitor, clock.now_s, self.n_warm + self.n_meas, self.tally.note,
                                                   table=cfg.monitor == "full")
        self.samplers.append(gevent.spawn(seconds.loop_lag_probe, self.recorder))
        pool = (self.pooler_facts or {}).get("pool")
        if self.pooler_console and isinstance(pool, list):  # the pooler's pool and totals, each second
            self.pooler_watch = self.engine.pooler_watch(self.pooler_console, tuple(pool), self.pooler_pid)
            self.samplers.append(self.engine.spawn_pooler_sampler(self.pooler_watch, clock.now_s,
                                                                  self.n_warm + self.n_meas, self.tally.note))
        for note_text in cfg.notes:  # windows clipped to the measured window by validation
            self.log(f"note: {note_text}")
        self.migrations, self.partitions = [], []  # each migration window's attempts, each partition's PartitionWatch
        self.fault_greenlets = [gevent.spawn(fault_window, self.engine, f, self.driver, self.direct, clock=clock,
                                             n_warm=self.n_warm, recorder=self.recorder, log=self.log,
                                             migrations=self.migrations, relay=self.relay,
                                             partitions=self.partitions, totals=self.tally.totals,
                                             failover=self.failover)
                                for f in cfg.faults]
        # the claim log is written here as claims commit only with this process's own workers
        local_log = cfg.processes == 1 and self.external_workers is None and not isinstance(self.driver, LibraryWorkersDriver)
        position = (lambda: self.claim_log.events) if local_log else (lambda: None)
        if self.failover is not None:  # the claim log's length as the promotion begins (or is noticed): acknowledged
            self.failover.errors = lambda: self.tally.errors(self.recorder)  # the workers' errors by kind so far
            self.samplers += self.failover.start(position, clock, self.n_warm, self.log)
        self.side_tasks = SideTasks(self.engine, cfg, self.direct, self.recorder, clock.now_s, pooled_dsn=self.dsn)
        if self.standby_dsn:
            self.side_tasks.watch_replica(self.direct, self.standby_dsn, self.tally.note, self.n_warm + self.n_meas, position)
        self.tally.open_logs(self.run_dir, clock.unix0)
        self.rss = RssLog(self.proc, self.log)

    def _make_driver(self) -> None:
        """The recorder, the claim log, the run context, the monitor and the run driver (not started)."""
        cfg, dsn = self.cfg, self.dsn
        self.recorder = metrics.Recorder(cfg.batch)
        self.claim_log = swarm.ClaimLog()
        self.ctx = swarm.SwarmContext(cfg=cfg, sessions=self.sessions, recorder=self.recorder, log=self.claim_log)
        self.monitor = self.engine.monitor(self.direct, cfg)
        # the workers' path and TCP liveness (a pooler's behind one), started before them: sampling at the clock's start
        self.round_trip = RoundTripProbe(*round_trip_probe(cfg.engine, self.engine.application_dsn(dsn, cfg)))
        library_command = self.engine.library_worker_command(dsn, cfg)  # LIBRARY_MODE=worker: the library's own processes
        self.driver = (LibraryWorkersDriver(cfg, self.ctx, library_command, self.log) if library_command
                       else run_driver(cfg, self.ctx, dsn, self.external_workers, self.log, self.run_id))
        self.proc = psutil.Process()
        self.cpu_meter = CpuMeter(self.proc)
        self.relay_cpu = CpuMeter(psutil.Process(self.relay.pid)) if self.relay else None  # the relay's own process
        # the machine's CPU outside the run: not this process's tree, load generators here, the server's for this
        # run (all of a server the tool started: the processes it starts and reaps between two reads too)
        self.machine = MachineMeter(self._own_trees, self.monitor.server_pids)
        self.server_elsewhere = non_loopback_host(cfg.engine, self.direct) is not None

    def _started_or_cleaned(self, start):
        """``start()``'s result; when it fails or is interrupted, kill the workers and remove the run directory
        (with the results directories it created, when empty), then re-raise."""
        try:
            return start()
        except BaseException:
            self.driver.kill()
            self.round_trip.stop()
            shutil.rmtree(self.run_dir, ignore_errors=True)
            for made in self.made_dirs[1:]:
                try:
                    made.rmdir()
                except OSError:  # something else is in it
                    break
            raise

    def _swarm(self) -> None:
        """The load: one tick a second until the window's end, a Ctrl-C or the web UI's Stop; returns
        ``complete``."""
        cfg, n_warm = self.cfg, self.n_warm
        self.complete, self.prev_s = True, 0.0
        self.interrupts = Interrupts(self.log)
        self.pgss_reset = self._window_starts() if n_warm == 0 else None
        self.ui = (self._started_or_cleaned(  # its port was taken since the check: nothing was measured
            lambda: WebUI(self.driver, *self.web_ui, producers=cfg.producers if cfg.rate > 0 else 0,
                          on_stop=self.interrupts.event.set, log=self.log)) if self.web_ui else None)
        try:
            for k in range(n_warm + self.n_meas):
                if self.interrupts.event.wait(timeout=max(0.0, k + 1 - self.clock.now_s())):
                    self.complete = bool(self.ui and self.ui.stop_pressed and k > n_warm)  # the UI's Stop ends a measured window
                    self.log("interrupted: stopping the swarm and writing what was measured (complete: false)"
                             if not self.complete else f"stopped in the web UI after {k - n_warm} measured seconds")
                    break
                self._tick(k)
        finally:
            self.interrupts.load_ended(self.driver)  # run() restores the handlers

    def _tick(self, k: int) -> None:
        """Close second ``k`` of the load: count it, and log the progress line every few seconds."""
        now_s = self.clock.now_s()
        interval = self.driver.rotate(self.recorder, k, self.prev_s, now_s)
        if self.ui:
            self.ui.feed(interval)
        self.prev_s = now_s
        cpu = self.driver.cpu(self.cpu_meter.read())
        self.tally.account(interval, cpu if k >= self.n_warm else None, self._busy(), self._relay_columns())
        self.rss.tick(k + 1)
        if k + 1 == self.n_warm:
            self.pgss_reset = self._window_starts()
        if (k + 1) % seconds.PROGRESS_EVERY_S == 0:
            seconds.progress_line(self.log, k + 1, self.n_warm, self.n_meas, list(self.tally.recent),
                                  self.tally.samples.get(k))

    def _after_failover(self) -> None:
        """After a failover the admin connection's server is gone: a new one on the promoted standby (the run's
        DSN names both), the schema's lock taken again there."""
        if not (self.failover and self.failover.record) or self.engine.is_alive(self.admin):  # none, or none noticed
            return
        self.admin.close()
        self.admin = self.engine.connect(self.direct, "queue-bench admin")
        self.engine.claim_schema(self.admin, self.cfg.schema, 0)

    def _stop(self) -> None:
        """Stop the load and everything beside it; count the stop phase; join the samples to the rows."""
        self._after_failover()
        # The claim's pg_stat_statements entry covers the measured window only: read it now, before
        # the stop phase and before any plan capture executes the claim again.
        self.pgss = self.engine.statement_stats_read(self.admin, self.cfg, self.pgss_missing, self.pgss_reset)
        # Intervals after the last tick (stop phase) still count for the invariants.
        self.ctx.stopping = True
        self.table_query_in_flight_s = self.monitor.table_query_running_s()
        gevent.killall(self.samplers)
        gevent.killall(self.fault_greenlets)  # each closes what it opened (finally)
        self.ctx.active_faults.clear()
        self.driver.stop()
        self.round_trip.stop()
        self.workers_at_end = self.driver.connected_workers()
        self.driver.quit()
        if self.ui:
            self.ui.close()
        self.side_tasks.stop()
        self.workers_plan = self.engine.workers_plan(self.ctx.plan_sessions, self.ctx.worker_explain, self.cfg)
        self._account_tail()
        self.tally.close_logs()
        self.ended_unix = time.time()
        vacuumer = self.side_tasks.vacuumer
        self.tally.join_samples(vacuumer.passes if vacuumer is not None else None)
        self.side_tasks.replica_columns(self.tally.rows, self.n_warm, self.claim_log)
        self.round_trip.add_columns(self.tally.rows, self.n_warm, self.clock.t0)
        measured = self.tally.measured
        self.round_trip_window = (self.round_trip.window(self.clock.t0 + measured.start_s, self.clock.t0 + measured.end_s)
                                  if measured.start_s is not None else None)
    def _window_starts(self):
        """The measured window starts: count the busiest other processes, reset the statement statistics."""
        self.machine.count_others_from_now()
        return self.engine.statement_stats_reset(self.admin, self.cfg, self.pgss_missing)

    def _account_tail(self) -> None:
        """Count the stop phase's interval; measured only when an interrupted run stopped inside its window."""
        # The second the loop was in when it stopped (n_warm + n_meas on a complete run): an interrupted
        # run's partial last second keeps its own index, not the planned end's.
        tail = self.driver.tail(self.recorder, self.recorder.rotations, self.prev_s, self.clock.now_s())
        tail_measured = (not self.complete and tail.counters["claims"] and self.tally.measured.intervals < self.n_meas
                         and self.clock.now_s() > self.n_warm)
        self.tally.account(tail, self.driver.cpu(self.cpu_meter.read()) if tail_measured else None, self._busy(),
                           self._relay_columns())

    def _relay_columns(self) -> dict:
        """intervals.csv's ``relay_cpu_pct``: the delay relay's CPU since the previous read, % of one core; {}
        without a relay, None when its process is gone."""
        if self.relay_cpu is None:
            return {}
        try:
            return {"relay_cpu_pct": round(self.relay_cpu.read()[0], 1)}
        except psutil.Error:
            return {"relay_cpu_pct": None}

    def _own_trees(self) -> tuple[int, ...]:
        """The roots of the run's process trees besides this process: the load generators here, the servers the tool
        started for this run (the embedded one's and its standby's), the embedded pooler, the relay and the probe."""
        server_root = self.monitor.server_pids()[:1] if self.embedded else ()
        standby = (self.standby_root,) if self.standby_root else ()
        pooler, relay = (self.pooler_pid,) if self.pooler_pid is not None else (), (self.relay.pid,) if self.relay else ()
        return (*self.driver.local_pids(), *server_root, *standby, *pooler, *relay, self.round_trip.pid)

    def _busy(self):
        """The machine's CPU outside the run over the second just closed; None when the server is on this host
        (a loopback DSN) but none of its processes was found here (in a container: its CPU would read as outside)."""
        busy = self.machine.read()
        return busy if self.server_elsewhere or self.monitor.server_pids() else None

    def _audit(self) -> Audited:
        """The end-of-run reads, or, when the database went away, what is written instead (incomplete,
        unaudited)."""
        try:
            return audit(self)
        except (ConfigError, *self.engine.database_errors) as err:
            lost = database_lost(self.engine, err)
            self.log(f"the database went away during the run ({lost.database_lost}): writing what was measured, "
                     "unaudited")
            self.complete = False
            self.plans_when = self.plans_when or "not captured: the database went away"
            if "unavailable" in self.pgss:
                self.pgss = {"unavailable": "the database went away"}
            return lost

    def _write(self) -> Path:
        """Write the result files, log the last lines; returns the run directory."""
        self.monitor.close()
        if self.pooler_watch is not None:
            self.pooler_watch.close()
        self.claim_log.close()
        run_dir, tally, audited = self.run_dir, self.tally, self.audited
        claim_plan = self.engine.plans_text(self.claim_plans, self.plans_when, self.workers_plan)
        (run_dir / "claim_plan.txt").write_text(claim_plan + "\n")
        info = run_info(self)
        summary = run_summary.summarize(run_summary.RunFacts(
            run_id=self.run_id, cfg=self.cfg, measured=tally.measured, rows=tally.rows, complete=self.complete,
            max_rows_per_claim=tally.max_rows_per_claim, audit=audited.audit, final_sample=audited.final_sample,
            monitor_failures=self.monitor.failures, run_info=info, plan_warnings=self.engine.plan_warnings,
            round_trip=self.round_trip_window))
        run_files.write_intervals(run_dir / "intervals.csv", tally.rows)
        RunResult(run_dir, info, summary).dump()
        if len({0} | {p for p, _ in self.cfg.priority_mix}) > 1:
            run_files.write_priority_ages(run_dir / "priority_ages.csv", [
                (r["t_s"], tally.samples.get(r["t_s"] + self.n_warm, {}).get("age_by_priority")) for r in tally.rows])
        if audited.audit["retry_gaps"] is not None:
            # Seconds between successive claims of each job that failed at least once (database time).
            run_files.write_json_list(run_dir / "retry_gaps.json", audited.audit["retry_gaps"])
        run_summary.final_lines(self.log, summary)
        return run_dir
