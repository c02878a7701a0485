"""The run driver (:class:`RunDriver`): what starts and stops a run's Locust users; :class:`LocalDriver` runs
them in this process (docs/architecture.md)."""

from __future__ import annotations

import os
import socket
import time
from typing import Callable, Protocol

import gevent
from locust.env import Environment

from bench.config.run_config import RunConfig
from bench.config.faults import choose_workers
from bench.errors import SessionRefused
from bench.load import swarm
from bench.load.fault_windows import mark_workers
from bench.load.producers import Producer
from bench.load.process_stats import MeasuredParts, finish_process_stats, new_process_stats
from bench.measure.metrics import Interval, Recorder


class RunDriver(Protocol):
    """Starts and stops one run's users."""

    users: int

    def start(self) -> None:
        """Start every user (workers, then producers) at once."""

    def wait_connected(self) -> float:
        """Wait for every worker's first connection, then let them claim; the seconds waited."""

    def rotate(self, recorder: Recorder, index: int, start_s: float, end_s: float) -> Interval:
        """Close second ``index``: every process's values of it, merged exactly."""

    def cpu(self, own: tuple[float, float, float]) -> tuple[float, float, float]:
        """The load generator's CPU over the second just closed (% of a core): ``own``, or the busiest process's."""

    def tail(self, recorder: Recorder, index: int, start_s: float, end_s: float) -> Interval:
        """The stop phase's second, after :meth:`stop`: every process's last values, merged."""

    def local_pids(self) -> tuple[int, ...]:
        """The process ids of the load generator processes on this host that have reported theirs (this one's
        children among them, or ``qbench worker`` processes started beside it)."""

    def measured(self, t_s: int) -> None:
        """Count the second just closed as measured second ``t_s`` and write its ``processes.csv`` rows."""

    def running_workers(self) -> int:
        """Workers running as the second just closed ended; after :meth:`stop`, as it began."""

    def connected_workers(self) -> int:
        """Workers whose session is open: when :meth:`wait_connected` returned, those connected then; once
        :meth:`stop` has returned, those whose session was open as the load stopped."""

    def open_fault(self, fault, given_up) -> None:
        """Open a ``crash_after_claim`` or ``late_worker`` window on :func:`bench.config.faults.fault_count` of
        the workers, chosen at random, once every worker has started (or ``given_up()``)."""

    def close_fault(self, kind: str) -> None:
        """Close the window of fault ``kind`` opened by :meth:`open_fault`."""

    def open_process_logs(self, open_logs, per_second) -> None:
        """Write each process's measured seconds to ``per_second`` (``ProcessSeconds``), and with several
        processes its histograms to ``open_logs(i)``."""

    def close_process_logs(self) -> None:
        """Close what :meth:`open_process_logs` opened, ``processes.csv`` included."""

    @property
    def processes(self) -> list[dict]:
        """Per load generator process: ``{"process", "pid", "workers", "lost", "missing_seconds", "cpu_max_pct",
        "counters"}``."""

    def stop(self) -> None:
        """Stop the users: each finishes its current cycle, within the stop timeout."""

    def left_running(self, by_claimant: dict[str, tuple[int, float | None]] | None) -> None:
        """Note in each lost process's entry the jobs it left running (the database's ``running`` jobs by
        claimant, the audit's ``running_by_claimant``), and say so."""

    def quit(self) -> None:
        """Release what :meth:`start` created."""

    def kill(self) -> None:
        """Stop every user now, without waiting for its cycle (the user's second Ctrl-C)."""


def stop_timeout_s(cfg: RunConfig) -> float:
    """Seconds a stopping user may take: the longest cycle (under ``hold`` every worker's batch), at least 10 s,
    plus the EXPLAIN one worker runs as it stops."""
    cycle_s = 2 * cfg.work_ms * cfg.batch / 1000.0 * (cfg.workers if cfg.txn == "hold" else 1)
    return max(10.0, cycle_s) + swarm.EXPLAIN_TIMEOUT_MS / 1000.0 + 5


def user_classes(cfg: RunConfig) -> list[type]:
    """This run's Locust user classes: ``cfg.producers`` producers with ``RATE`` (``fixed_count``) and workers
    for every other user; the same names in every process of a distributed run."""
    classes = [type("QueueWorker", (swarm.QueueWorker,), {"weight": 1})]
    if cfg.rate > 0:
        classes.append(type("Producer", (Producer,), {"fixed_count": cfg.producers}))
    return classes


def locust_environment(cfg: RunConfig, ctx: swarm.SwarmContext) -> Environment:
    """The run's Locust environment: its user classes and stop timeout, ``ctx`` as ``run_context`` (read by every
    user's ``__init__``)."""
    env = Environment(user_classes=user_classes(cfg), stop_timeout=stop_timeout_s(cfg))
    env.run_context = ctx
    return env


def users(cfg: RunConfig) -> int:
    """How many Locust users the run starts: workers, and producers with ``RATE``."""
    return cfg.workers + (cfg.producers if cfg.rate > 0 else 0)


#: How long a run waits for every worker's first connection before its clock starts anyway (s).
CONNECT_WAIT_S = 60.0


def wait_for_workers(connected: Callable[[], int], workers: int, alive: Callable[[], object] = lambda: True,
                     refused: Callable[[], dict | None] = lambda: None) -> float:
    """Wait (at most :data:`CONNECT_WAIT_S`) until ``connected()`` reaches ``workers``, or no process is
    ``alive()``; the seconds waited. Raises :class:`SessionRefused` at once when ``refused()`` names a worker
    whose first session was refused for good (:attr:`bench.load.swarm.SwarmContext.refused`)."""
    started = time.monotonic()
    while connected() < workers and time.monotonic() - started < CONNECT_WAIT_S and alive():
        refusal = refused()
        if refusal is not None:
            raise SessionRefused(refusal["worker"], refusal["kind"], refusal["message"], refusal["cause"])
        gevent.sleep(0.02)
    return time.monotonic() - started


class LocalDriver:
    """The users of one run in this process (Locust's ``LocalRunner``), sharing ``ctx``."""

    def __init__(self, cfg: RunConfig, ctx: swarm.SwarmContext):
        self.cfg, self.ctx = cfg, ctx
        self.users = users(cfg)
        self.env = locust_environment(cfg, ctx)
        self.runner = self._runner = self.env.create_local_runner()
        self._stats = new_process_stats(1, os.getpid(), socket.gethostname())
        self._last: Interval | None = None
        self._last_cpu = (0.0, 0.0, 0.0)
        self._per_second = None
        self._workers_at_stop: int | None = None

    def start(self) -> None:
        """Start every user at once (spawn rate 10 × the users: all within 0.1 s)."""
        self._runner.start(self.users, spawn_rate=self.users * 10)

    def wait_connected(self) -> float:
        """Wait (at most :data:`CONNECT_WAIT_S`) for every worker's first connection, then let them claim
        (``ctx.go``); the seconds waited."""
        waited = wait_for_workers(lambda: self.ctx.connected_workers, self.cfg.workers,
                                  refused=lambda: self.ctx.refused)
        self.ctx.go.set()  # the workers start claiming together
        self._stats["workers"] = self.ctx.connected_workers  # as the load starts (intervals.csv has each second's)
        return waited

    def rotate(self, recorder: Recorder, index: int, start_s: float, end_s: float) -> Interval:
        """Close second ``index`` of the run: this process's recorder holds every value."""
        self._last = recorder.rotate(index, start_s, end_s)
        return self._last

    tail = rotate  # the stop phase's second: the same recorder

    def cpu(self, own: tuple[float, float, float]) -> tuple[float, float, float]:
        """The load generator's CPU over the second just closed (% of a core): this process's."""
        self._last_cpu = own
        return own

    def local_pids(self) -> tuple[int, ...]:
        """None besides this process (see :meth:`RunDriver.local_pids`)."""
        return ()

    def running_workers(self) -> int:
        """This process's workers running now, or as the stop began (see :meth:`RunDriver.running_workers`)."""
        return self._workers_at_stop if self._workers_at_stop is not None else self.ctx.running_workers

    def connected_workers(self) -> int:
        """See :meth:`RunDriver.connected_workers`."""
        if self._workers_at_stop is None:
            return self.ctx.connected_workers
        return self._workers_at_stop - len(self.ctx.disconnected)

    def open_fault(self, fault, given_up) -> None:
        """Mark the chosen workers in this process's context (see :meth:`RunDriver.open_fault`)."""
        while len(self.ctx.worker_names) < self.cfg.workers and not given_up():
            gevent.sleep(0.001)
        mark_workers(self.ctx, fault.kind, choose_workers(list(self.ctx.worker_names), fault.share), fault.extra_s)

    def close_fault(self, kind: str) -> None:
        """Close fault ``kind``'s window (see :meth:`RunDriver.close_fault`)."""
        self.ctx.active_faults.pop(kind, None)

    def measured(self, t_s: int) -> None:
        """Count the second just closed as measured second ``t_s`` and write its ``processes.csv`` row."""
        parts = MeasuredParts()
        parts.parts, parts.cpus = {1: self._last}, {1: self._last_cpu[0]}  # held by the run, not released here
        parts.count({1: self._stats})
        if self._per_second is not None:
            self._per_second.write(t_s, 1, self._last_cpu, self._last, host=self._stats["host"], pid=self._stats["pid"])

    def open_process_logs(self, open_logs, per_second) -> None:
        """``processes.csv`` rows to ``per_second``; no histogram logs of its own."""
        self._per_second = per_second

    def close_process_logs(self) -> None:
        """Close ``processes.csv`` (see :meth:`open_process_logs`)."""
        if self._per_second is not None:
            self._per_second.close()

    @property
    def processes(self) -> list[dict]:
        """One entry, this process (the shape of :attr:`bench.load.distributed.DistributedDriver.processes`)."""
        return [finish_process_stats(self._stats)]

    def left_running(self, by_claimant: dict[str, tuple[int, float | None]] | None) -> None:
        """Nothing: this process is never lost (see :meth:`RunDriver.left_running`)."""

    def stop(self) -> None:
        """Stop the users; Locust waits up to :func:`stop_timeout_s` for each cycle to finish."""
        self._workers_at_stop = self.running_workers()  # the stop phase's second: the workers that ran it
        self.ctx.disconnected = set(self.ctx.disconnected)  # as the load stopped: the stop changes it no more
        self._runner.stop()

    def quit(self) -> None:
        """Quit the local runner (its greenlets end)."""
        self._runner.quit()

    def kill(self) -> None:
        """Kill every user's greenlet now; a stop in progress then returns at once."""
        self._runner.user_greenlets.kill(block=False)
