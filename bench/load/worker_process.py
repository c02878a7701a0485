"""One load generator process of a distributed run: a Locust worker runner with its share of the
users, its own connections, its own recorder and its own claim log.

Started by :class:`bench.load.distributed.DistributedDriver` on this machine as
``python -m bench.load.worker_process --master-port PORT`` (the DSN in the environment variable
:data:`DSN_ENV`, never on a command line, where ``ps`` would show a password), or by a user on
another host as ``qbench worker --master-host H --master-port P --dsn DSN``. Either way it talks
to the master only through Locust: the master's runner spawns and stops its users, and these
custom messages (``register_message`` / ``send_message``) carry the rest:

master → process
    ``qbench_config`` ``{"process", "config"}`` (its number and the run's configuration, as
    :meth:`~bench.config.run_config.RunConfig.public` gives it: the DSN masked, the process uses
    its own), ``qbench_go`` (every worker connected: claim now), ``qbench_rotate`` ``{"index",
    "start_s", "end_s"}`` (close that second and send it), ``qbench_stopping`` (finish the
    current cycle), ``qbench_fault`` ``{"kind", "open", "count", "extra_s"}`` (open or close a
    ``crash_after_claim`` / ``late_worker`` window on ``count`` of its workers), ``qbench_refused`` ``{"reason"}`` (not wanted, or the master stopped: exit 2).
    A process that hears no heartbeat from the master for :data:`MASTER_GONE_S` exits.
process → master
    ``qbench_hello`` ``{"host", "pid"}`` (connected, handlers in place: send the configuration),
    ``qbench_ready`` ``{"process", "host", "pid"}`` or ``qbench_failed`` ``{"process", "error"}``
    (its sessions could not be set up), ``qbench_connected`` ``{"process", "workers"}`` (workers
    whose first connection is open), ``qbench_interval`` ``{"process", "interval", "cpu",
    "events", "workers"}`` (the second, encoded by :func:`bench.measure.interval_codec.encode`, this
    process's CPU over it, % of a core, the claim log's stamped lines of that second, and its
    workers running as it closed),
    ``qbench_done`` ``{"process", "tail", "plan_sessions", "worker_explain", "events",
    "events_total"}`` once its users have stopped (the stop phase's interval, the plan state its
    workers read, the last lines); the process exits :data:`EXIT_AFTER_DONE_S` later.
"""

from bench.load import swarm  # first: gevent's monkey-patching precedes every driver import

import argparse  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402
import psutil  # noqa: E402
from locust.rpc import Message  # noqa: E402
from locust.runners import CONNECT_RETRY_COUNT, CONNECT_TIMEOUT  # noqa: E402

from bench.config.run_config import from_public  # noqa: E402
from bench.engines import engine_for  # noqa: E402
from bench.errors import QBenchError  # noqa: E402
from bench.load.driver import stop_timeout_s  # noqa: E402
from bench.load.fault_windows import mark_workers  # noqa: E402
from bench.load.producers import Producer  # noqa: E402
from bench.measure import interval_codec, metrics, seconds  # noqa: E402
from bench.measure.claimlog import StampedLog  # noqa: E402
from bench.measure.cpu_meter import CpuMeter  # noqa: E402

__all__ = ["DSN_ENV", "EXIT_AFTER_DONE_S", "exit_now", "main", "serve"]

#: The environment variable that carries the DSN to a worker process started on this machine.
DSN_ENV = "QBENCH_WORKER_DSN"
#: Seconds a process stays up after sending ``qbench_done`` (for the message to leave).
EXIT_AFTER_DONE_S = 1.0
#: Seconds without a heartbeat from the master after which a process decides it has gone and exits.
MASTER_GONE_S = 10.0
#: Seconds a process waits for its configuration once connected, before it gives up.
CONFIG_WAIT_S = 120.0


def serve(master_host: str, master_port: int, dsn: str, log=print) -> int:
    """Connect to the master at ``master_host:master_port`` and run its users on ``dsn`` until the
    run ends; returns the exit status (0; 1 when no master answered within Locust's connection
    retries, 300 s, the configuration never came, or the sessions could not be set up, after
    telling the master)."""
    from locust.env import Environment

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
    state: dict = {}
    cpu = CpuMeter(psutil.Process())
    greenlets: list = []
    configured = gevent.event.Event()

    def on_config(environment, msg, **_):
        index = int(msg.data["process"])
        state["index"] = index
        try:
            cfg = from_public(msg.data["config"], dsn)
            engine = engine_for(cfg)
            sessions = engine.sessions(dsn, cfg)
            sessions.check_cooperative()
            engine.connect(dsn, "queue-bench worker check").close()  # a DSN this host cannot use fails here
        except Exception as err:  # noqa: BLE001 - any failure is told to the master, in one line
            if not isinstance(err, (QBenchError, KeyError, TypeError, ValueError)):
                err = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
            runner.send_message("qbench_failed", {"process": index, "error": str(err)})
            state["failed"] = str(err)
            configured.set()
            return
        recorder = metrics.Recorder(cfg.batch)
        claims = StampedLog()
        ctx = swarm.SwarmContext(cfg=cfg, sessions=sessions, recorder=recorder, log=claims,
                                 name_prefix=f"p{index}-")
        env.run_context = ctx
        env.stop_timeout = stop_timeout_s(cfg)  # a stopping user finishes its cycle, within this
        state.update(cfg=cfg, recorder=recorder, claims=claims, ctx=ctx)
        greenlets.extend([gevent.spawn(report_connected), gevent.spawn(seconds.loop_lag_probe, recorder)])
        runner.send_message("qbench_ready", {"process": index, "host": socket.gethostname(), "pid": os.getpid()})
        configured.set()

    def on_go(environment, msg, **_):
        cpu.read()  # the connecting phase's CPU belongs to no second
        state["ctx"].go.set()

    def on_rotate(environment, msg, **_):
        interval = state["recorder"].rotate(int(msg.data["index"]), float(msg.data["start_s"]),
                                            float(msg.data["end_s"]))
        runner.send_message("qbench_interval", {"process": state["index"], "interval": interval_codec.encode(interval),
                                                "cpu": list(cpu.read()), "events": state["claims"].take(),
                                                "workers": state["ctx"].running_workers})
        interval.release()  # a killed process loses at most its last second of claim events

    def on_fault(environment, msg, **_):
        ctx, data = state["ctx"], msg.data
        if data["open"]:
            names = list(ctx.worker_names)
            mark_workers(ctx, data["kind"], set(random.sample(names, min(int(data["count"]), len(names)))),
                         float(data["extra_s"]))
        else:
            ctx.active_faults.pop(data["kind"], None)

    def on_stopping(environment, msg, **_):
        state["ctx"].stopping = True

    def on_refused(environment, msg, **_):
        log(f"qbench worker: refused by the master at {master_host}:{master_port}: {msg.data.get('reason')}")
        runner.client.send(Message("quit", None, runner.client_id))  # leave Locust's list of workers
        gevent.spawn_later(0.2, exit_now, 2)

    def watch_master():
        """Exit when the master has gone quiet: no heartbeat for :data:`MASTER_GONE_S`."""
        while True:
            gevent.sleep(1.0)
            last = runner.last_heartbeat_timestamp
            if last and time.time() - last > MASTER_GONE_S:
                log(f"qbench worker: the master at {master_host}:{master_port} went away "
                    f"(no heartbeat for {MASTER_GONE_S:g} s)")
                exit_now(1)

    for name, handler in (("qbench_config", on_config), ("qbench_go", on_go), ("qbench_rotate", on_rotate),
                          ("qbench_stopping", on_stopping), ("qbench_fault", on_fault), ("qbench_refused", on_refused)):
        runner.register_message(name, handler)
    greenlets.append(gevent.spawn(watch_master))
    # Asked for only now: a message the master sent as the connection opened could come before
    # these handlers exist (Locust drops a message it has no handler for).
    runner.send_message("qbench_hello", {"host": socket.gethostname(), "pid": os.getpid()})

    def on_test_stop(environment, **_):
        if "ctx" not in state:
            return
        ctx, claims, recorder = state["ctx"], state["claims"], state["recorder"]
        tail = recorder.rotate(recorder.rotations, 0.0, 0.0)
        runner.send_message("qbench_done", {
            "process": state["index"], "tail": interval_codec.encode(tail), "plan_sessions": ctx.plan_sessions,
            "worker_explain": ctx.worker_explain, "events": claims.take(), "events_total": claims.events})
        tail.release()
        # Everything is handed over: exit once the message is out (Locust's quit ends the runner's
        # greenlets, not the process, and after its stop the master no longer lists this process).
        gevent.spawn_later(EXIT_AFTER_DONE_S, os._exit, 0)

    env.events.test_stop.add_listener(on_test_stop)

    def report_connected():
        sent = -1
        ctx = state["ctx"]
        while True:
            if ctx.connected_workers != sent:
                sent = ctx.connected_workers
                runner.send_message("qbench_connected", {"process": state["index"], "workers": sent})
            gevent.sleep(0.02)

    if not configured.wait(timeout=CONFIG_WAIT_S):
        log(f"qbench worker: no configuration from the master at {master_host}:{master_port} within "
            f"{CONFIG_WAIT_S:g} s")
        return 1
    if "failed" in state:
        log(f"qbench worker: {state['failed']}")
        gevent.sleep(EXIT_AFTER_DONE_S)  # let the message leave
        return 1
    try:
        runner.greenlet.join()
    finally:
        gevent.killall(greenlets)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.load.worker_process``: a process the master started on this machine."""
    parser = argparse.ArgumentParser(prog="python -m bench.load.worker_process")
    parser.add_argument("--master-host", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, required=True)
    args = parser.parse_args(argv)
    return serve(args.master_host, args.master_port, os.environ[DSN_ENV], log=lambda m: print(m, file=sys.stderr))


def exit_now(status: int) -> None:
    """End the process with ``status`` without the interpreter's shutdown, which can block for ever
    in ZeroMQ's context termination when the master has gone with messages still queued to it."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    exit_now(main())
