"""The run driver of ``PROCESSES > 1``: Locust's master runner here, its worker runners in
:mod:`bench.load.worker_process` processes, each second merged exactly (docs/architecture.md)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import gevent
from locust.runners import HEARTBEAT_INTERVAL, HEARTBEAT_LIVENESS

from bench.config.faults import split_choice
from bench.config.run_config import RunConfig
from bench.load import swarm
from bench.load.locust_master import drop_workers, keep_out_latecomers
from bench.load.driver import LocalDriver, locust_environment, users, wait_for_workers
from bench.load.worker_process import DSN_ENV, MASTER_STOPPED
from bench.load.process_merge import ROTATE_WAIT_S, START_WAIT_S, MergedProcesses
from bench.results.model import process_name

__all__ = ["DistributedDriver", "LOST_AFTER_S", "NAMED_LOST_WITHIN_S", "ROTATE_WAIT_S", "START_WAIT_S", "WATCH_EVERY_S",
           "run_driver"]

#: A process from which no message came for this long (s) is lost: Locust's own liveness, its workers' heartbeat
#: every ``HEARTBEAT_INTERVAL`` s (1) and ``HEARTBEAT_LIVENESS`` beats missed (3) (``locust.runners``); a live
#: process also sends its part of every second.
LOST_AFTER_S = HEARTBEAT_LIVENESS * HEARTBEAT_INTERVAL
#: The bound on naming a lost process (s after it died or was cut off): :data:`LOST_AFTER_S` of silence since its
#: last message (which came before it died), checked every :data:`WATCH_EVERY_S` in the window and as the load
#: stops alike, and 2 s for a busy master's loop (docs/processes-and-ui.md).
NAMED_LOST_WITHIN_S = LOST_AFTER_S + 2
#: How often the master looks for lost processes (s), beside each second's merge.
WATCH_EVERY_S = 0.1
#: How long a master waits for workers started elsewhere (``qbench worker``) to connect (s), unless
#: ``external`` gives its own (``qbench master --worker-wait-s``).
EXTERNAL_WAIT_S = 300.0


def run_driver(cfg: RunConfig, ctx: swarm.SwarmContext, dsn: str, external: tuple[str, int, float] | None, log,
               run_id: str | None = None):
    """:class:`DistributedDriver` with ``PROCESSES > 1`` or ``external`` workers (bind host, port, optional
    seconds to wait), else :class:`bench.load.driver.LocalDriver`; ``run_id`` is told to each process."""
    if cfg.processes > 1 or external:
        return DistributedDriver(cfg, ctx, dsn, external=external, log=log, run_id=run_id)
    return LocalDriver(cfg, ctx)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DistributedDriver(MergedProcesses):
    """``cfg.processes`` Locust worker processes under this process's master, sharing ``ctx``'s configuration, on
    ``dsn``. :attr:`processes`: per process ``{"process", "pid", "workers", "lost", "missing_seconds",
    "cpu_max_pct", "counters"}``."""

    NOUN, NOT_STARTED = "load generator process", "could not start its sessions"
    SILENT_EXIT = "process {i} exited with status {status}"

    def __init__(self, cfg: RunConfig, ctx: swarm.SwarmContext, dsn: str, *, external: tuple[str, int, float] | None = None,
                 log=print, run_id: str | None = None):
        self._init_processes(cfg, ctx, log, range(1, cfg.processes + 1), "qbench-claims-")
        self.dsn, self.external, self.run_id = dsn, external, run_id
        self.users = users(cfg)
        self.env = locust_environment(cfg, ctx)
        bind_host, self.port = external[:2] if external else ("127.0.0.1", _free_port())
        self.master = self.runner = self.env.create_master_runner(bind_host, self.port)
        self.clients: dict[str, int] = {}  # Locust client id -> process number, in connection order
        self.heard: dict[int, float] = {}  # process -> when the last message came from it (time.monotonic())
        self.connected: dict[int, int] = {}
        self.refused: dict | None = None  # the first worker whose first session was refused for good, any process
        self.started = False  # the users have been started (no worker may join from then on)
        self.watch = None  # the greenlet of _watch_lost, from the start
        keep_out_latecomers(self.master, lambda client_id: self.started and client_id not in self.clients)
        for name, handler in (("qbench_connected", self._on_connected), ("qbench_interval", self._on_interval),
                              ("qbench_done", self._on_done), ("qbench_ready", self._on_ready),
                              ("qbench_hello", self._on_hello),
                              ("qbench_failed", self._on_failed)):
            self.master.register_message(name, self._heard_from(handler))
        self.env.events.heartbeat_sent.add_listener(self._on_heartbeat)

    def _heard_from(self, handler):
        """``handler``, noting first that its process was heard from."""
        def heard(environment, msg, **kw):
            if msg.node_id in self.clients:
                self.heard[self.clients[msg.node_id]] = time.monotonic()
            return handler(environment, msg, **kw)
        return heard

    def _on_heartbeat(self, client_id, timestamp, **_):
        """Locust's master has a worker's heartbeat (each second)."""
        if client_id in self.clients:
            self.heard[self.clients[client_id]] = time.monotonic()

    # -- messages from the processes
    def _on_hello(self, environment, msg, **_):
        """Give a connected process its number and the run's configuration (DSN masked); one beyond
        ``cfg.processes`` gets none."""
        client_id = msg.node_id
        if client_id in self.clients:
            return
        if self.started or len(self.clients) >= self.cfg.processes:
            reason = ("the run has started: a worker cannot join it" if self.started else
                      f"the master expects {self.cfg.processes} workers and has them all")
            self.master.send_message("qbench_refused", {"reason": reason}, client_id=client_id)
            return
        index = len(self.clients) + 1
        self.clients[client_id] = index
        self.master.send_message("qbench_config", {"process": index, "config": self.cfg.public(),
                                                   "run_id": self.run_id}, client_id=client_id)

    def _on_ready(self, environment, msg, **_):
        i = int(msg.data["process"])
        self.ready[i] = msg.data
        if self.external:  # started elsewhere: say who came
            self.log(f"master: worker {i} of {self.cfg.processes} joined: host {msg.data.get('host')}, "
                     f"pid {msg.data.get('pid')}")

    def _on_failed(self, environment, msg, **_):
        self.failed[int(msg.data["process"])] = str(msg.data.get("error"))
        if msg.data.get("refused") and self.refused is None:
            self.refused = msg.data["refused"]

    def _on_connected(self, environment, msg, **_):
        self.connected[int(msg.data["process"])] = int(msg.data["workers"])
        if msg.data.get("refused") and self.refused is None:
            self.refused = msg.data["refused"]

    def _on_interval(self, environment, msg, **_):
        self._append_events(int(msg.data["process"]), msg.data.get("events"))
        self._take_interval(int(msg.data["process"]), msg.data)

    def _on_done(self, environment, msg, **_):
        self._append_events(int(msg.data["process"]), msg.data.get("events"))
        self.done[int(msg.data["process"])] = msg.data

    # -- the run driver
    def _alive(self) -> list[int]:
        """The processes still running; marks lost one whose OS process exited or from which no message came for
        :data:`LOST_AFTER_S`, naming it (host, pid) once."""
        alive, now = [], time.monotonic()
        for i in sorted(self.stats):
            if i in self.done:  # it reported as it stopped, and exits EXIT_AFTER_DONE_S later: not lost
                alive.append(i)
                continue
            proc = self.procs.get(i)
            silent_s = now - self.heard.get(i, now)
            if (proc is not None and proc.poll() is not None) or silent_s >= LOST_AFTER_S:
                if not self.stats[i]["lost"]:
                    why = (f"no message from it for {silent_s:.1f} s" if silent_s >= LOST_AFTER_S
                           else "its process exited")
                    self.log(f"{process_name(self.stats[i])} lost ({why}): its workers stop with it; the run goes on")
                self.stats[i]["lost"] = True
            elif not self.stats[i]["lost"]:
                alive.append(i)
        return alive

    def start(self) -> None:
        """Start the processes (or wait for ``external`` ones), each with its configuration and sessions, then
        every user. Raises RunFailed naming the process that failed or did not come."""
        if self.external is None:
            env = {**os.environ, DSN_ENV: self.dsn}
            for i in range(1, self.cfg.processes + 1):  # numbered here by start; renumbered below
                self._spawn(i, [sys.executable, "-m", "bench.load.worker_process", "--master-port", str(self.port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env)
            wait_s = START_WAIT_S
        else:
            self.log(f"master: waiting for {self.cfg.processes} workers on {self.external[0]}:{self.port} "
                     f"(qbench worker --master-host <this host> --master-port {self.port} --dsn <DSN>)")
            wait_s = float(self.external[2]) if len(self.external) > 2 else EXTERNAL_WAIT_S
        self._wait_ready(self.cfg.processes, wait_s, "EXPECT_WORKERS" if self.external else "PROCESSES")
        self.heard = dict.fromkeys(self.ready, time.monotonic())
        # A process's number is the order its hello came in, not the order it was started.
        by_pid = {proc.pid: proc for proc in self.procs.values()}
        self.procs = {i: by_pid[r["pid"]] for i, r in self.ready.items() if r.get("pid") in by_pid}
        drop_workers(self.master, [c for c in self.master.clients if c not in self.clients])  # refused: no users
        self.started = True
        self.master.start(self.users, spawn_rate=self.users * 10)
        # Locust's own stop waits for every worker's users, a lost one's until Locust drops it: name it meanwhile
        self.watch = gevent.spawn(self._watch_lost)

    def _watch_lost(self) -> None:
        """Look for lost processes every :data:`WATCH_EVERY_S` until :meth:`quit` or :meth:`kill`."""
        while True:
            self._alive()
            gevent.sleep(WATCH_EVERY_S)

    def wait_connected(self) -> float:
        """Wait (at most :data:`CONNECT_WAIT_S`) for every worker's first connection, then let them claim; the
        seconds waited."""
        waited = wait_for_workers(lambda: sum(self.connected.values()), self.cfg.workers, self._alive,
                                  refused=lambda: self.refused)
        for i, n in self.connected.items():
            self.stats[i]["workers"] = n
        self.master.send_message("qbench_go")
        self.ctx.go.set()
        return waited

    def _ask_rotate(self, alive: list[int], body: dict) -> None:
        self.master.send_message("qbench_rotate", body)

    def open_fault(self, fault, given_up) -> None:
        """Tell each process how many of its workers the window takes (:func:`bench.config.faults.split_choice`);
        each picks that many of its own."""
        while sum(self.connected.values()) < self.cfg.workers and not given_up() and self._alive():
            gevent.sleep(0.001)
        counts = split_choice({i: self.connected.get(i, 0) for i in self._alive()}, fault.share)
        for client_id, i in self.clients.items():
            self.master.send_message("qbench_fault", {"kind": fault.kind, "open": True, "count": counts.get(i, 0),
                                                      "extra_s": fault.extra_s}, client_id=client_id)

    def close_fault(self, kind: str) -> None:
        """Close fault ``kind``'s window in every process."""
        self.master.send_message("qbench_fault", {"kind": kind, "open": False})

    def _ask_stop(self) -> None:
        self.master.send_message("qbench_stopping")
        self.master.stop()

    def quit(self) -> None:
        """Quit the master, wait for the processes to exit, remove the claim log files."""
        if self.watch is not None:
            self.watch.kill()
        self.master.quit()
        super().quit()

    def kill(self) -> None:
        """Stop every process started here now, tell the others to exit; remove the claim log files."""
        if self.watch is not None:
            self.watch.kill()
        super().kill()
        for client_id in self.clients:
            self.master.send_message("qbench_refused", {"reason": MASTER_STOPPED}, client_id=client_id)
