"""One load generator process of a distributed run: a Locust worker runner with its share of the
users, its own connections, its own recorder and its own claim log.

Started by :class:`bench.load.distributed.DistributedDriver` as
``python -m bench.load.worker_process --master-port PORT --index I``, with the run's
:class:`~bench.config.run_config.RunConfig` pickled on its standard input and the DSN in the
environment variable :data:`DSN_ENV` (never on a command line, where ``ps`` would show a password).
It talks to the master only through Locust: the master's runner spawns and stops its users, and
these custom messages (``register_message`` / ``send_message``) carry the rest:

master → process
    ``qbench_go`` (every worker connected: claim now), ``qbench_rotate`` ``{"index", "start_s",
    "end_s"}`` (close that second and send it), ``qbench_stopping`` (finish the current cycle).
process → master
    ``qbench_connected`` ``{"process", "workers"}`` (workers whose first connection is open),
    ``qbench_interval`` ``{"process", "interval", "cpu", "events"}`` (the second, encoded by
    :func:`bench.measure.interval_codec.encode`, this process's CPU over it, % of a core, and the
    claim log's stamped lines of that second), ``qbench_done`` ``{"process", "tail", "plan_sessions",
    "worker_explain", "events", "events_total"}`` once its users have stopped (the stop phase's
    interval, the plan state its workers read, the last lines); the process exits
    :data:`EXIT_AFTER_DONE_S` later.
"""

from bench.load import swarm  # first: gevent's monkey-patching precedes every driver import

import argparse  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import sys  # noqa: E402

import gevent  # noqa: E402
import psutil  # noqa: E402

from bench.engines import get_engine  # noqa: E402
from bench.load.driver import user_classes, stop_timeout_s  # noqa: E402
from bench.measure import interval_codec, metrics, seconds  # noqa: E402
from bench.measure.claimlog import StampedLog  # noqa: E402
from bench.measure.cpu_meter import CpuMeter  # noqa: E402

__all__ = ["DSN_ENV", "main"]

#: The environment variable that carries the DSN to a worker process.
DSN_ENV = "QBENCH_WORKER_DSN"
#: Seconds a process stays up after sending ``qbench_done`` (for the message to leave).
EXIT_AFTER_DONE_S = 1.0


def main(argv: list[str] | None = None) -> int:
    """Run one worker process until the master quits; returns the exit status (0, or 1 when the
    engine's driver would block the event loop)."""
    parser = argparse.ArgumentParser(prog="python -m bench.load.worker_process")
    parser.add_argument("--master-host", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("--index", type=int, required=True, help="this process's number, from 1")
    args = parser.parse_args(argv)
    cfg = pickle.loads(sys.stdin.buffer.read())
    dsn = os.environ[DSN_ENV]
    from locust.env import Environment

    engine = get_engine(cfg.engine)
    sessions = engine.sessions(dsn, cfg)
    sessions.check_cooperative()
    recorder = metrics.Recorder(cfg.batch)
    log = StampedLog()
    ctx = swarm.SwarmContext(cfg=cfg, sessions=sessions, recorder=recorder, log=log, name_prefix=f"p{args.index}-")
    env = Environment(user_classes=user_classes(cfg), stop_timeout=stop_timeout_s(cfg))
    env.run_context = ctx
    runner = env.create_worker_runner(args.master_host, args.master_port)
    cpu = CpuMeter(psutil.Process())

    def on_go(environment, msg, **_):
        cpu.read()  # the connecting phase's CPU belongs to no second
        ctx.go.set()

    def on_rotate(environment, msg, **_):
        interval = recorder.rotate(int(msg.data["index"]), float(msg.data["start_s"]), float(msg.data["end_s"]))
        runner.send_message("qbench_interval", {"process": args.index, "interval": interval_codec.encode(interval),
                                                "cpu": list(cpu.read()), "events": log.take()})
        interval.release()  # a killed process loses at most its last second of claim events

    def on_stopping(environment, msg, **_):
        ctx.stopping = True

    runner.register_message("qbench_go", on_go)
    runner.register_message("qbench_rotate", on_rotate)
    runner.register_message("qbench_stopping", on_stopping)

    def on_test_stop(environment, **_):
        tail = recorder.rotate(recorder.rotations, 0.0, 0.0)
        runner.send_message("qbench_done", {
            "process": args.index, "tail": interval_codec.encode(tail), "plan_sessions": ctx.plan_sessions,
            "worker_explain": ctx.worker_explain, "events": log.take(), "events_total": log.events})
        tail.release()
        # Everything is handed over: exit once the message is out (Locust's quit ends the runner's
        # greenlets, not the process, and after its stop the master no longer lists this process).
        gevent.spawn_later(EXIT_AFTER_DONE_S, os._exit, 0)

    env.events.test_stop.add_listener(on_test_stop)

    def report_connected():
        sent = -1
        while True:
            if ctx.connected_workers != sent:
                sent = ctx.connected_workers
                runner.send_message("qbench_connected", {"process": args.index, "workers": sent})
            gevent.sleep(0.02)

    reporters = [gevent.spawn(report_connected), gevent.spawn(seconds.loop_lag_probe, recorder)]
    try:
        runner.greenlet.join()
    finally:
        gevent.killall(reporters)
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
