"""One library worker process: exits 0 once it reported as it stopped, 1 when its library could not start
or its worker failed (the traceback on stderr)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import socket
import sys
import traceback

from bench.config.run_config import from_public
from bench.engines.postgres.library_workers import ADAPTERS, DSN_ENV
from bench.engines.postgres.library_workers.channel import Channel
from bench.engines.postgres.library_workers.meter import Meter
from bench.engines.postgres.library_workers.producers import produce

#: How long a stopping process waits for its library to stop (s); its jobs in progress finish first.
STOP_WAIT_S = 60.0


async def serve(module) -> int:
    """Run one process of the worker (or the producers) of ``module`` (an adapter of :data:`ADAPTERS`) for the
    run on stdin; the exit status."""
    channel = Channel(asyncio.get_running_loop())
    first = await channel.commands.get()
    if first is None:
        return 1
    cfg = from_public(first["config"], os.environ[DSN_ENV])
    meter = Meter(cfg, first["claims_path"])
    worker = module.LibraryWorker(cfg, meter, int(first["process"]), int(first["workers"]))
    try:
        await worker.open()
    except Exception as err:  # the library's or its driver's: one line for the run
        channel.send({"type": "failed", "error": ": ".join([type(err).__name__, *str(err).strip().splitlines()[:1]])})
        return 1
    channel.send({"type": "ready", "pid": os.getpid(), "host": socket.gethostname()})
    stop = asyncio.Event()
    probe = asyncio.create_task(meter.loop_lag_probe())
    running = None
    workers = int(first["workers"]) if first["role"] == "worker" else 0
    while True:
        command = await channel.commands.get()
        if command is None or command["cmd"] == "stop":
            break
        if command["cmd"] == "go" and running is None:
            running = asyncio.create_task(worker.work(stop) if first["role"] == "worker"
                                          else produce(cfg, worker, meter, stop))
            running.add_done_callback(_fail_unless_stopping(stop))
        elif command["cmd"] == "rotate":
            channel.send(meter.rotate(int(command["index"]), float(command["start_s"]), float(command["end_s"]),
                                      workers))
    stop.set()
    if running is not None:
        await asyncio.wait_for(running, timeout=STOP_WAIT_S)
    probe.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await probe
    channel.send(meter.tail())
    meter.log.close()
    await worker.close()
    return 0


def _fail_unless_stopping(stop: asyncio.Event):
    """A done callback: a worker ending before the run stopped it exits the process (status 1, traceback on stderr)."""
    def done(task: asyncio.Task) -> None:
        if stop.is_set() or task.cancelled():
            return
        err = task.exception()
        traceback.print_exception(err or RuntimeError("the library's worker returned before the run stopped it"))
        sys.stderr.flush()
        os._exit(1)
    return done


def main(argv: list[str]) -> int:
    """Entry point: ``argv`` is ``[package]``."""
    if len(argv) != 1 or argv[0] not in ADAPTERS:
        print(f"usage: python -m {__package__} {{{','.join(ADAPTERS)}}}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"{__package__}.{ADAPTERS[argv[0]]}")
    # the event loop the library's own command line runs its worker on (asyncio's unless the adapter says)
    return getattr(module, "run_event_loop", asyncio.run)(serve(module))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
