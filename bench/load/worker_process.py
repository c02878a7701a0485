"""One load generator process of a distributed run: a Locust worker runner with its share of the users,
connections, recorder and claim log. Its messages with the master: docs/architecture.md."""

import argparse
import os
import random
import socket
import sys
import time

import gevent
import gevent.event
import psutil
from locust.env import Environment
from locust.rpc import Message
from locust.runners import CONNECT_RETRY_COUNT, CONNECT_TIMEOUT

from bench.config.run_config import from_public
from bench.engines import engine_for
from bench.errors import EXIT_FAILED, ConnectRefused, QBenchError
from bench.gevent_patch import patch
from bench.load import swarm
from bench.load.driver import stop_timeout_s
from bench.load.fault_windows import mark_workers
from bench.load.producers import Producer
from bench.measure import interval_codec, metrics, seconds
from bench.measure.claimlog import StampedLog
from bench.measure.cpu_meter import CpuMeter

__all__ = ["DSN_ENV", "EXIT_AFTER_DONE_S", "WorkerProcess", "exit_now", "main", "serve"]

#: The environment variable that carries the DSN to a worker process started on this machine.
DSN_ENV = "QBENCH_WORKER_DSN"
#: Seconds a process stays up after sending ``qbench_done`` (for the message to leave).
EXIT_AFTER_DONE_S = 1.0
#: Seconds without a heartbeat from the master after which a process decides it has gone and exits.
MASTER_GONE_S = 10.0
#: The reason the master gives its processes as it stops (a worker then exits 1, not as one refused).
MASTER_STOPPED = "the master stopped"
#: Seconds a process waits for its configuration once connected, before it gives up.
CONFIG_WAIT_S = 120.0


def serve(master_host: str, master_port: int, dsn: str, log=print, announce: bool = False) -> int:
    """Run the master's users on ``dsn`` until the run ends; returns 0, or 1 when no master answered within
    Locust's retries (300 s), the configuration never came, or the sessions could not be set up. With
    ``announce`` (``qbench worker``) it says in one line each that it joined the master's run and that the run
    ended; a process the master started itself says nothing."""
    # The users' classes by name (Locust's master tells a worker how many of each to start; the
    # counts are the master's): the run's context reaches them through the environment.
    classes = [type("QueueWorker", (swarm.QueueWorker,), {}), type("Producer", (Producer,), {})]
    env = Environment(user_classes=classes)
    try:  # Locust's worker asks for the master every 5 s, 60 times (locust.runners.CONNECT_RETRY_COUNT)
        runner = env.create_worker_runner(master_host, master_port)
    except ConnectionError:
        log(f"qbench worker: no master answered at {master_host}:{master_port} within "
            f"{CONNECT_TIMEOUT * CONNECT_RETRY_COUNT} s")
        return 1
    process = WorkerProcess(env, runner, f"{master_host}:{master_port}", dsn, log, announce)
    process.listen()
    return process.wait()


class WorkerProcess:
    """One load generator process connected to ``master`` (``host:port``): Locust's worker ``runner`` in ``env``,
    the run's state once configured, and a handler per master message."""

    def __init__(self, env, runner, master: str, dsn: str, log, announce: bool = False):
        self.env, self.runner, self.master, self.dsn, self.log = env, runner, master, dsn, log
        self.index = self.cfg = self.recorder = self.claims = self.ctx = self.failed = self.run_id = None
        self.announce = announce
        self.jobs_completed = 0  # by this process's workers, every second it sent
        self.cpu = CpuMeter(psutil.Process())
        self.greenlets: list = []
        self.configured = gevent.event.Event()

    def listen(self) -> None:
        """Register the handlers, watch the master's heartbeat, then say hello (Locust drops a message without a
        handler)."""
        for name, handler in (("qbench_config", self.on_config), ("qbench_go", self.on_go),
                              ("qbench_rotate", self.on_rotate), ("qbench_stopping", self.on_stopping),
                              ("qbench_fault", self.on_fault), ("qbench_refused", self.on_refused)):
            self.runner.register_message(name, handler)
        self.greenlets.append(gevent.spawn(self.watch_master))
        self.runner.send_message("qbench_hello", {"host": socket.gethostname(), "pid": os.getpid()})
        self.env.events.test_stop.add_listener(self.on_test_stop)

    def wait(self) -> int:
        """Wait for the configuration, then for the runner to end; the exit status (see :func:`serve`)."""
        if not self.configured.wait(timeout=CONFIG_WAIT_S):
            self.log(f"qbench worker: no configuration from the master at {self.master} within {CONFIG_WAIT_S:g} s")
            return 1
        if self.failed is not None:
            self.log(f"qbench worker: {self.failed}")
            gevent.sleep(EXIT_AFTER_DONE_S)  # let the message leave
            return 1
        try:
            self.runner.greenlet.join()
        finally:
            gevent.killall(self.greenlets)
        return 0

    def on_config(self, environment, msg, **_) -> None:
        """Set up this process's sessions for the run's configuration; tell the master ready or failed."""
        self.index, self.run_id = int(msg.data["process"]), msg.data.get("run_id")
        try:
            cfg = from_public(msg.data["config"], self.dsn)
            engine = engine_for(cfg)
            sessions = engine.sessions(self.dsn, cfg)
            sessions.check_cooperative()
            engine.connect(self.dsn, "queue-bench worker check").close()  # a DSN this host cannot use fails here
        except ConnectRefused as err:
            refused = {"worker": f"p{self.index} (qbench worker on {socket.gethostname()})", "kind": err.kind,
                       "message": err.detail, "cause": err.cause} if err.permanent else None
            self._fail(str(err), refused)
            return
        except Exception as err:  # noqa: BLE001 - any failure is told to the master, in one line
            if not isinstance(err, (QBenchError, KeyError, TypeError, ValueError)):
                err = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
            self._fail(str(err))
            return
        self.cfg, self.recorder, self.claims = cfg, metrics.Recorder(cfg.batch), StampedLog()
        self.ctx = swarm.SwarmContext(cfg=cfg, sessions=sessions, recorder=self.recorder, log=self.claims,
                                      name_prefix=f"p{self.index}-")
        self.env.run_context = self.ctx
        self.env.stop_timeout = stop_timeout_s(cfg)  # a stopping user finishes its cycle, within this
        self.greenlets.extend([gevent.spawn(self.report_connected), gevent.spawn(seconds.loop_lag_probe, self.recorder)])
        self.runner.send_message("qbench_ready", {"process": self.index, "host": socket.gethostname(),
                                                  "pid": os.getpid()})
        if self.announce:
            self.log(f"qbench worker: connected to the master at {self.master}: load generator process {self.index} "
                     f"of run {self.run_id} (host {socket.gethostname()}, pid {os.getpid()})")
        self.configured.set()

    def _fail(self, error: str, refused: dict | None = None) -> None:
        """Tell the master this process cannot run (``refused``: its DSN was refused for good, as
        :attr:`bench.load.swarm.SwarmContext.refused` has it), then let :meth:`serve` exit."""
        self.runner.send_message("qbench_failed", {"process": self.index, "error": error, "refused": refused})
        self.failed = error
        self.configured.set()

    def on_go(self, environment, msg, **_) -> None:
        """Every worker is connected: claim now."""
        self.cpu.read()  # the connecting phase's CPU belongs to no second
        self.ctx.go.set()

    def on_rotate(self, environment, msg, **_) -> None:
        """Close the second the master names and send it, with this process's CPU and claim events."""
        interval = self.recorder.rotate(int(msg.data["index"]), float(msg.data["start_s"]), float(msg.data["end_s"]))
        self.runner.send_message("qbench_interval", {
            "process": self.index, "interval": interval_codec.encode(interval), "cpu": list(self.cpu.read()),
            "events": self.claims.take(), "workers": self.ctx.running_workers})
        self.jobs_completed += interval.counters["jobs_completed"]
        interval.release()  # a killed process loses at most its last second of claim events

    def on_fault(self, environment, msg, **_) -> None:
        """Open a fault window on ``count`` of this process's workers, chosen at random, or close it."""
        ctx, data = self.ctx, msg.data
        if data["open"]:
            names = list(ctx.worker_names)
            mark_workers(ctx, data["kind"], set(random.sample(names, min(int(data["count"]), len(names)))),
                         float(data["extra_s"]))
        else:
            ctx.active_faults.pop(data["kind"], None)

    def on_stopping(self, environment, msg, **_) -> None:
        """Finish the current cycle."""
        self.ctx.stopping = True

    def on_refused(self, environment, msg, **_) -> None:
        """Not wanted (exit 2), or the master stopped (:data:`MASTER_STOPPED`: this process's part of the run, if it
        began, is lost: exit 1, as when the master goes quiet): leave Locust's list of workers and exit."""
        if msg.data.get("reason") == MASTER_STOPPED:
            self.log(f"qbench worker: the master at {self.master} stopped; this process's part of its run, if it "
                     f"began, is lost; exit {EXIT_FAILED}")
            status = EXIT_FAILED
        else:
            self.log(f"qbench worker: refused by the master at {self.master}: {msg.data.get('reason')}")
            status = 2
        self.runner.client.send(Message("quit", None, self.runner.client_id))
        gevent.spawn_later(0.2, exit_now, status)

    def on_test_stop(self, environment, **_) -> None:
        """The users have stopped: send the stop phase's interval, the plan state and the last claim events."""
        if self.ctx is None:
            return
        tail = self.recorder.rotate(self.recorder.rotations, 0.0, 0.0)
        self.runner.send_message("qbench_done", {
            "process": self.index, "tail": interval_codec.encode(tail), "plan_sessions": self.ctx.plan_sessions,
            "worker_explain": self.ctx.worker_explain, "events": self.claims.take(),
            "disconnected": len(self.ctx.disconnected),
            "events_total": self.claims.events})
        self.jobs_completed += tail.counters["jobs_completed"]
        tail.release()
        if self.announce:
            self.log(f"qbench worker: run {self.run_id} ended: this process's workers completed "
                     f"{self.jobs_completed:,} jobs; its figures are with the master at {self.master}; exit 0")
        # Everything is handed over: exit once the message is out (Locust's quit ends the runner's
        # greenlets, not the process, and after its stop the master no longer lists this process).
        gevent.spawn_later(EXIT_AFTER_DONE_S, os._exit, 0)

    def watch_master(self) -> None:
        """Exit 1 (:data:`bench.errors.EXIT_FAILED`: this process's part of the run is lost) when the master has
        gone quiet: no heartbeat for :data:`MASTER_GONE_S` (it stopped, or the network between them failed)."""
        while True:
            gevent.sleep(1.0)
            last = self.runner.last_heartbeat_timestamp
            if last and time.time() - last > MASTER_GONE_S:
                self.log(f"qbench worker: lost the master at {self.master}: no heartbeat for {MASTER_GONE_S:g} s "
                         f"(it stopped, or the network between them failed); run {self.run_id}'s figures lack this "
                         f"process's from then on; exit {EXIT_FAILED}")
                exit_now(EXIT_FAILED)

    def report_connected(self) -> None:
        """Tell the master how many of this process's workers have their first connection open, and a first session
        refused for good (``ctx.refused``), on each change."""
        sent = (-1, None)
        while True:
            if (self.ctx.connected_workers, self.ctx.refused) != sent:
                sent = (self.ctx.connected_workers, self.ctx.refused)
                self.runner.send_message("qbench_connected", {"process": self.index, "workers": sent[0],
                                                              "refused": sent[1]})
            gevent.sleep(0.02)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.load.worker_process``: a process the master started on this machine."""
    patch()  # this process's entry point: before the engine's driver is imported
    parser = argparse.ArgumentParser(prog="python -m bench.load.worker_process")
    parser.add_argument("--master-host", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, required=True)
    args = parser.parse_args(argv)
    return serve(args.master_host, args.master_port, os.environ[DSN_ENV], log=lambda m: print(m, file=sys.stderr))


def exit_now(status: int) -> None:
    """End the process with ``status`` via ``os._exit`` (the interpreter's shutdown can block in ZeroMQ)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    exit_now(main())
