"""A ``FAULTS`` window opened and closed on the run's clock, in seconds since the measured start."""

from __future__ import annotations

import math

import gevent

from bench.config.faults import WORKER_KINDS
from bench.load.partition_watch import PartitionWatch
from bench.measure import metrics, seconds

__all__ = ["fault_window", "mark_workers", "migrate", "partition"]


def mark_workers(ctx, kind: str, chosen: set[str], extra_s: float) -> None:
    """Open a :data:`WORKER_KINDS` window on the workers ``chosen`` (names) of ``ctx``."""
    ctx.late_extra_s = extra_s
    ctx.crashed[kind] = set()
    ctx.active_faults[kind] = chosen


def migrate(migration, fault, clock: "seconds.Clock", n_warm: int, record: dict) -> None:
    """Attempt ``migration`` until it is done or fails otherwise than by its lock timeout, pausing ``retry_ms``
    after each timeout while the next attempt would still start before the window's end; each attempt appended
    to ``record["attempts"]`` as it starts (``start_s``, ``end_s``, ``outcome``, ``error``; s since measured start;
    ``outcome`` ``running`` while it runs: the run's end cancels it)."""
    while True:
        attempt = {"start_s": round(clock.now_s() - n_warm, 3), "end_s": None, "outcome": "running", "error": None}
        record["attempts"].append(attempt)
        attempt["outcome"], attempt["error"] = migration.attempt()
        attempt["end_s"] = round(clock.now_s() - n_warm, 3)
        if attempt["outcome"] != "lock_timeout" or clock.now_s() + fault.retry_ms / 1000 >= n_warm + fault.end_s:
            return
        clock.sleep_until(clock.now_s() + fault.retry_ms / 1000)


def partition(relay, fault, ctx, *, clock: "seconds.Clock", n_warm: int, log, watches: list, totals) -> None:
    """A ``partition`` window: ``relay`` (the run's delay relay) a black hole until the window's end, what the
    workers of ``ctx`` saw kept in a :class:`PartitionWatch` appended to ``watches`` (with the run's ``totals``'
    lease expiries as it opened); healed whatever ends it."""
    watch = PartitionWatch(fault.start_s, fault.end_s, list(ctx.worker_names),
                           lease_expiries_at_cut=totals["lease_expiries"])
    watches.append(watch)
    ctx.partition = watch
    try:
        watch.cut(None)  # timed from just before the relay is asked: a worker's figure is not made shorter
        watch.connections_cut = relay.ask("partition").get("connections_cut")
        clock.sleep_until(n_warm + fault.end_s)
    finally:
        relay.ask("heal")
        watch.heal()
        noticed = sorted(n["after_s"] for n in watch.noticed.values())
        log(f"fault: partition healed at {fault.end_s:g} s: {len(noticed)} of {len(watch.workers)} workers noticed"
            + (f", the first {noticed[0]:g} s and the last {noticed[-1]:g} s after it began" if noticed else ""))


def fault_window(engine, fault, driver, dsn: str, *, clock: "seconds.Clock", n_warm: int,
                 recorder: metrics.Recorder, log, migrations: list | None = None, relay=None,
                 partitions: list | None = None, totals=None, failover=None) -> None:
    """Open ``fault``'s window at its start (s since measured start), once the main loop has rotated into that
    second, and close it at its end; ``driver`` marks the chosen workers in their processes. A ``migration``
    appends its record (``start_s``, ``end_s``, ``statement``, ``attempts``) to ``migrations``; a ``partition``
    (through ``relay``, the run's delay relay) its :class:`PartitionWatch` to ``partitions`` (``totals``: the run's
    running counts); a ``failover`` is carried out by ``failover`` (the engine's), from ``wal_stop_s`` before its
    start."""
    opens_s = fault.start_s - fault.wal_stop_s  # the failover's WAL receiver is stopped before the kill
    clock.sleep_until(n_warm + opens_s)
    while recorder.rotations < n_warm + math.floor(opens_s):
        gevent.sleep(0.001)
    log(f"fault: {fault.kind} from {fault.start_s:g} s to {fault.end_s:g} s of the measured window")
    conn = None
    try:
        if fault.kind in WORKER_KINDS:
            # A window at the load's first instant opens before Locust has created the users: choose
            # among every worker, not the ones that happen to exist yet (none, at t = 0).
            driver.open_fault(fault, lambda: clock.now_s() >= n_warm + fault.end_s)
            clock.sleep_until(n_warm + fault.end_s)
        elif fault.kind == "long_transaction":
            conn = engine.hold_snapshot(dsn, driver.cfg.schema)  # holds xmin from here
            clock.sleep_until(n_warm + fault.end_s)
        elif fault.kind == "migration":  # on its own connection; end: the deadline for its retries
            conn = engine.migration(dsn, driver.cfg, fault)
            record = {"start_s": fault.start_s, "end_s": fault.end_s, "ddl": fault.ddl,
                      "lock_timeout_ms": fault.lock_timeout_ms, "retry_ms": fault.retry_ms,
                      "statement": conn.text, "timeout_set": conn.timeout_set, "attempts": []}
            (migrations if migrations is not None else []).append(record)
            migrate(conn, fault, clock, n_warm, record)
        elif fault.kind == "partition":  # the relay's; the workers are this process's (one process: validation)
            partition(relay, fault, driver.ctx, clock=clock, n_warm=n_warm, log=log,
                      watches=partitions if partitions is not None else [],
                      totals=totals if totals is not None else {"lease_expiries": 0})
        elif fault.kind == "process_kill":  # a library's own worker process (bench.load.library_driver)
            if driver.kill_process() is not None:
                recorder.count("process_kills")
            clock.sleep_until(n_warm + fault.end_s)
        elif fault.kind == "failover":  # the kill at start, the promotion PROMOTE_AFTER_S later
            failover.run(fault, clock, n_warm, log)
            clock.sleep_until(n_warm + fault.end_s)
        elif fault.kind == "backend_kill":
            conn = engine.killer(dsn)
            while clock.now_s() < n_warm + fault.end_s:
                if engine.kill_one_worker(conn):
                    recorder.count("backend_kills")
                clock.sleep_until(min(n_warm + fault.end_s, clock.now_s() + fault.every_s))
    finally:
        if fault.kind in WORKER_KINDS:
            driver.close_fault(fault.kind)
        if conn is not None and fault.kind == "migration":
            conn.close()  # cancels its statement if it still runs
        elif conn is not None:
            engine.release(conn)
