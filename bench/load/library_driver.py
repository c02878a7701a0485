"""The run driver of ``LIBRARY_MODE=worker``: a queue library's own worker in ``PROCESSES`` processes (and with
``RATE`` one of its producers), spoken to over their standard streams in JSON lines
(:mod:`bench.engines.postgres.library_workers`), each second merged exactly (docs/architecture.md)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess

import gevent

from bench.config.run_config import RunConfig
from bench.errors import RunFailed
from bench.load import swarm
from bench.load.process_merge import ROTATE_WAIT_S, START_WAIT_S, MergedProcesses


def split_workers(workers: int, processes: int) -> list[int]:
    """``workers`` split over ``processes`` as evenly as whole numbers allow, the first ones taking one more."""
    return [workers // processes + (1 if i < workers % processes else 0) for i in range(processes)]


class LibraryWorkersDriver(MergedProcesses):
    """The library's own processes for one run: ``command`` is ``(argv, environment)`` from the engine."""

    NOUN, NOT_STARTED, SILENT_EXIT = "library worker process", "could not start", "nothing on its stderr"

    def __init__(self, cfg: RunConfig, ctx: swarm.SwarmContext, command: tuple[list[str], dict[str, str]], log=print):
        shares = split_workers(cfg.workers, cfg.processes)
        self.roles = {i + 1: ("worker", n) for i, n in enumerate(shares)}
        if cfg.rate > 0:
            self.roles[cfg.processes + 1] = ("producer", 0)
        self._init_processes(cfg, ctx, log, self.roles, "qbench-library-")
        self.argv, self.env = command
        self.users = cfg.workers
        self._readers: list = []

    # -- the processes' streams
    def _send(self, i: int, message: dict) -> None:
        proc = self.procs.get(i)
        if proc is None or proc.poll() is not None or self.stats[i]["lost"]:
            return
        try:
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it has gone: _alive says so

    def _read(self, i: int) -> None:
        """Handle process ``i``'s messages until its stdout closes."""
        for raw in self.procs[i].stdout:
            message = json.loads(raw)
            kind = message["type"]
            if kind == "ready":
                self.ready[i] = message
            elif kind == "failed":
                self.failed[i] = message["error"]
            elif kind == "interval":  # its claim-log lines it writes to claims-<i>.log itself, as they happen
                self._take_interval(i, message)
            elif kind == "done":
                self.done[i] = message

    def _alive(self) -> list[int]:
        """The processes still running; one whose OS process exited before it reported is marked lost, once."""
        alive = []
        for i, proc in sorted(self.procs.items()):
            if i in self.done:
                alive.append(i)
            elif proc.poll() is not None:
                if not self.stats[i]["lost"]:
                    why = self._stderr_tail(i)
                    self.stats[i].update(lost=True, exit_status=proc.returncode, exit_reason=why)
                    then = "as the run stopped" if self._workers_at_stop is not None else "and the run goes on"
                    self.log(f"library worker process {i} (pid {proc.pid}) lost: it exited with status "
                             f"{proc.returncode} ({why}); its jobs in progress are left to the library's own "
                             f"recovery, {then}")
            else:
                alive.append(i)
        return alive

    # -- the run driver
    def start(self) -> None:
        """Start every process and wait until each has opened its library's app. Raises RunFailed naming the
        process that failed or did not start."""
        env = {**os.environ, **self.env}
        for i, (role, workers) in self.roles.items():
            # A session of its own: a terminal's Ctrl-C reaches this process only, which stops them in order.
            self._spawn(i, self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True)
            self._readers.append(gevent.spawn(self._read, i))
            self._send(i, {"process": i, "role": role, "workers": workers, "config": self.cfg.public(),
                           "claims_path": str(self.tmp / f"claims-{i}.log")})
        self._wait_ready(len(self.roles), START_WAIT_S, "LIBRARY_MODE")

    def wait_connected(self) -> float:
        """Every process is ready once :meth:`start` returns: let them all work; 0 s waited."""
        for i, (_, workers) in self.roles.items():
            self.stats[i]["workers"] = workers
            self._send(i, {"cmd": "go"})
        self.ctx.go.set()
        return 0.0

    def _ask_rotate(self, alive: list[int], body: dict) -> None:
        for i in alive:
            self._send(i, {"cmd": "rotate", **body})

    def open_fault(self, fault, given_up) -> None:
        """Not used: the configuration refuses the tool's own worker faults under ``LIBRARY_MODE=worker``."""
        raise RunFailed(f"FAULTS: {fault.kind} does not apply to a library's own worker")

    def close_fault(self, kind: str) -> None:
        """Nothing to close (see :meth:`open_fault`)."""

    def kill_process(self) -> int | None:
        """``SIGKILL`` one live worker process chosen at random (``process_kill``), once the second just closed is
        merged (its work before that is counted); its number, None when none is left."""
        self.merged.wait(ROTATE_WAIT_S + 1)
        alive = [i for i in self._alive() if self.roles[i][0] == "worker" and i not in self.done]
        if not alive:
            return None
        i = random.choice(alive)
        self.log(f"fault: process_kill sends SIGKILL to library worker process {i} (pid {self.procs[i].pid})")
        self.procs[i].send_signal(signal.SIGKILL)
        return i

    def _ask_stop(self) -> None:
        for i in self._alive():
            self._send(i, {"cmd": "stop"})

    def quit(self) -> None:
        """Wait for the processes to exit (each does once it has reported), and remove the claim log files."""
        super().quit()
        gevent.joinall(self._readers, timeout=5)

    @property
    def processes(self) -> list[dict]:
        """Per process, as :attr:`bench.load.distributed.DistributedDriver.processes`, with ``role`` (``worker``
        or ``producer``)."""
        return [p | {"role": self.roles[p["process"]][0]} for p in super().processes]
