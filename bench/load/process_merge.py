"""What both multi-process drivers share: processes started, stopped, ended, and each second's parts merged
exactly (histogram logs, ``processes.csv``). A subclass calls :meth:`_init_processes` and gives ``_alive()``,
``_ask_rotate(alive, body)``, ``_ask_stop()``."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import gevent
import psutil
from gevent.event import Event

from bench.errors import RunFailed, SessionRefused
from bench.load.driver import stop_timeout_s
from bench.load.process_stats import MeasuredParts, finish_process_stats, new_process_stats
from bench.measure import interval_codec, metrics
from bench.measure.claimlog import merge_stamped
from bench.measure.metrics import Interval, Recorder
from bench.results.model import process_name, utc_time
from bench.usage import typed

#: How long the run waits for the processes' share of a second before merging without the late ones (s).
ROTATE_WAIT_S = 0.5
#: How long the processes started here may take to start and report (s).
START_WAIT_S = 60.0


def remove_orphans(prefix: str) -> list[Path]:
    """Remove the temporary directories ``<prefix><pid>-*`` whose process is gone (a run killed with -9 cannot remove
    its own); returns those removed."""
    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{prefix}*-*"):
        pid = path.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


class MergedProcesses:
    """Several processes' lifecycle and per-second merge; ``NOUN``, ``NOT_STARTED``, ``SILENT_EXIT``: message
    wording."""

    #: the first worker (or process) whose first session was refused for good (see ``SwarmContext.refused``)
    refused: dict | None = None

    NOUN = NOT_STARTED = SILENT_EXIT = ""

    def _init_processes(self, cfg, ctx, log, numbers, prefix: str) -> None:
        """The state of processes ``numbers``; their files go to a new temporary directory named ``prefix``*."""
        self.cfg, self.ctx, self.log = cfg, ctx, log
        remove_orphans(prefix)
        self.tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
        self.procs: dict[int, subprocess.Popen] = {}
        self.ready: dict[int, dict] = {}
        self.failed: dict[int, str] = {}
        self.done: dict[int, dict] = {}
        self.process_workers: dict[int, int] = {}  # each process's workers running, as of its latest second
        self.worker_parts: dict[int, dict[int, int]] = {}  # second -> process -> its workers running, sent with it
        self._second_workers: int | None = None  # the workers of the processes whose part of the last second came
        self.stats = {i: new_process_stats(i) for i in numbers}
        self._workers_at_stop: int | None = None
        self._last_t_s = -1  # the last measured second asked for
        self.parts: dict[int, dict[int, Interval]] = {}
        self.cpu_parts: dict[int, dict[int, tuple]] = {}
        self.measured_parts = MeasuredParts()
        self.logs: dict = {}
        self.per_second = None  # processes.csv (open_process_logs)
        self._cpus: dict[int, tuple] = {}  # each process's CPU over the second just closed
        self._own_cpu: tuple[float, float, float] = (0.0, 0.0, 0.0)  # this process's
        self._own_lag_p99: int | None = None
        self.merged = Event()  # set while no second is being merged: what the processes sent is counted
        self.merged.set()

    def _spawn(self, i: int, argv: list[str], **popen) -> None:
        """Start process ``i`` (``argv``), its stderr to ``process-<i>.err``."""
        self.procs[i] = subprocess.Popen(argv, stderr=open(self.tmp / f"process-{i}.err", "wb"), **popen)

    def _stderr_tail(self, i: int) -> str:
        try:
            lines = (self.tmp / f"process-{i}.err").read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return lines[-1] if lines else self.SILENT_EXIT.format(i=i, status=self.procs[i].returncode)

    def _wait_ready(self, expected: int, wait_s: float, option: str) -> None:
        """Wait for ``expected`` ready reports; record their pid and host. When one failed or exited, or ``wait_s``
        passed, kill them all and raise RunFailed naming ``option``."""
        deadline, option = time.monotonic() + wait_s, typed(option)
        while len(self.ready) < expected:
            gone = [i for i, p in self.procs.items() if p.poll() is not None]
            if self.failed or gone or time.monotonic() > deadline:
                self.kill()
                if self.refused is not None:  # a process whose DSN was refused for good
                    r = self.refused
                    raise SessionRefused(r["worker"], r["kind"], r["message"], r["cause"])
                if self.failed:
                    i, why = next(iter(self.failed.items()))
                    raise RunFailed(f"{option}: {self.NOUN} {i} {self.NOT_STARTED} ({why})")
                why = self._stderr_tail(gone[0]) if gone else (
                    f"{len(self.ready)} of {expected} reported within {wait_s:g} s")
                raise RunFailed(f"{option}: a {self.NOUN} did not start ({why})")
            gevent.sleep(0.05)
        for i, report in self.ready.items():
            self.stats[i].update(pid=report.get("pid"), host=report.get("host"))

    def _take_interval(self, process: int, data: dict) -> None:
        """Keep a process's second (``data``: its ``interval``, ``cpu`` and running ``workers``) for the merge."""
        interval = interval_codec.decode(data["interval"])
        self.parts.setdefault(interval.index, {})[process] = interval
        self.cpu_parts.setdefault(interval.index, {})[process] = tuple(data.get("cpu") or (0.0, 0.0, 0.0))
        self.process_workers[process] = int(data.get("workers") or 0)
        self.worker_parts.setdefault(interval.index, {})[process] = self.process_workers[process]

    def rotate(self, recorder: Recorder, index: int, start_s: float, end_s: float) -> Interval:
        """Close second ``index`` here and in every live process; merge what arrives within
        :data:`ROTATE_WAIT_S`."""
        self.merged.clear()
        try:
            own = recorder.rotate(index, start_s, end_s)
            alive = self._alive()
            self._last_t_s = index - int(round(self.cfg.warmup_s))
            self._ask_rotate(alive, {"index": index, "start_s": start_s, "end_s": end_s})
            return self._merge_second(own, index, alive, ROTATE_WAIT_S)
        finally:
            self.merged.set()

    def running_workers(self) -> int:
        """Workers running in the second just merged: those of the processes whose part of it came, each as that
        part says (a process whose part is missing counts none: the second's figures hold none of its work);
        before the first second, every process not lost as of its latest part."""
        if self._workers_at_stop is not None:
            return self._workers_at_stop
        if self._second_workers is not None:
            return self._second_workers
        return sum(n for i, n in self.process_workers.items() if not self.stats[i]["lost"])

    def connected_workers(self) -> int:
        """Workers whose session is open in every process not lost: as each reported when the load started, or,
        after :meth:`stop`, as the load stopped (less those each process reported without a session)."""
        if self._workers_at_stop is None:
            return sum(s["workers"] for s in self.stats.values() if not s["lost"])
        return self._workers_at_stop - sum(int(d.get("disconnected") or 0) for d in self.done.values())

    def stop(self) -> None:
        """Stop the processes' load, collect each process's report, and merge the claim logs into ``ctx.log``."""
        self._workers_at_stop = self.running_workers()  # the stop phase's second: the workers that ran it
        self._ask_stop()
        deadline = time.monotonic() + stop_timeout_s(self.cfg) + 10
        while set(self.done) < set(self._alive()) and time.monotonic() < deadline:
            gevent.sleep(0.05)
        for i in sorted(self.done):
            report = self.done[i]
            self.ctx.plan_sessions.extend(report.get("plan_sessions") or [])
            if self.ctx.worker_explain is None and report.get("worker_explain"):
                self.ctx.worker_explain = report["worker_explain"]
        self._merge_claim_logs()

    def quit(self) -> None:
        """Wait for the processes to exit (each does once it has reported), and remove the claim log files."""
        for proc in self.procs.values():
            try:
                if proc.stdin:
                    proc.stdin.close()
                proc.wait(timeout=15)
            except (subprocess.TimeoutExpired, OSError):
                proc.kill()
                proc.wait(timeout=5)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def kill(self) -> None:
        """Stop every process started here now; remove the claim log files."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def processes(self) -> list[dict]:
        """What each process did, in process order (see :meth:`bench.load.driver.RunDriver.processes`)."""
        self.measured_parts.hold({}, {})  # release a held second that was not measured
        return [finish_process_stats(self.stats[i]) for i in sorted(self.stats)]

    def _merge_second(self, own: Interval, index: int, alive: list[int], wait_s: float) -> Interval:
        """Second ``index``: ``own`` merged with what the ``alive`` processes send within ``wait_s`` (later:
        missing); ``own`` is released."""
        deadline = time.monotonic() + wait_s
        while len(self.parts.get(index, {})) < len(alive) and time.monotonic() < deadline:
            gevent.sleep(0.002)
        parts, cpus = self.parts.pop(index, {}), self.cpu_parts.pop(index, {})
        workers = self.worker_parts.pop(index, {})
        self._second_workers = sum(workers.get(i, 0) for i in parts)
        for late in [k for k in self.parts if k < index]:  # a part that came after its second was merged
            for part in self.parts.pop(late).values():
                part.release()
            self.cpu_parts.pop(late, None)
            self.worker_parts.pop(late, None)
        t_s = index - int(round(self.cfg.warmup_s))  # the measured window's seconds, as intervals.csv t_s
        for i in self.stats:  # a lost process misses every second from its loss on
            if i not in parts and t_s >= 0:
                self.stats[i]["missing_seconds"].append(t_s)
        merged = interval_codec.merge(index, [own, *parts.values()])
        self.measured_parts.hold(parts, {i: float(c[0]) for i, c in cpus.items()})
        self._cpus = cpus
        lag = own.histograms["loop_lag_us"]  # this process's row of processes.csv
        self._own_lag_p99 = metrics.values_at_percentiles(lag, (99,))[0] if lag.get_total_count() else None
        own.release()
        return merged

    def _append_events(self, process: int, text: str | None) -> None:
        """Keep a process's stamped claim-log lines, in arrival order (which is theirs), in its own file."""
        if text:
            with open(self.tmp / f"claims-{process}.log", "a", encoding="utf-8") as fh:
                fh.write(text)

    def _merge_claim_logs(self) -> None:
        """As the load stops: mark processes that did not report lost; merge every process's lines into the claim
        log in stamp order."""
        for i in self.stats:
            if i not in self.done:
                if not self.stats[i]["lost"]:
                    self.log(f"{process_name(self.stats[i], self.NOUN)} lost: it did not report as the load stopped")
                self.stats[i]["lost"] = True
        merge_stamped([self.tmp / f"claims-{i}.log" for i in sorted(self.stats)
                       if (self.tmp / f"claims-{i}.log").exists()], self.ctx.log)

    def left_running(self, by_claimant: dict[str, tuple[int, float | None]] | None) -> None:
        """Each lost process's jobs left ``running`` under their lease, from the database's ``by_claimant`` (the
        audit's ``running_by_claimant``, :meth:`bench.engines.base.Engine.audit`; process ``i``'s workers claim
        as ``p<i>-…``): in its entry as ``left_running`` ``{"jobs", "leases_expire_unix"}`` (None: the queue does
        not say who claimed a job) and in one line each."""
        for i, stats in sorted(self.stats.items()):
            if not stats["lost"]:
                continue
            if by_claimant is None:
                stats["left_running"] = None
                continue
            mine = [v for who, v in by_claimant.items() if who.startswith(f"p{i}-")]
            expiry = max((until for _, until in mine if until is not None), default=None)
            stats["left_running"] = {"jobs": sum(n for n, _ in mine), "leases_expire_unix": expiry}
            if mine:
                at = utc_time(expiry) if expiry is not None else "never (no lease)"
                jobs = stats["left_running"]["jobs"]
                self.log(f"{process_name(stats, self.NOUN)} left {jobs:,} job{'s' if jobs != 1 else ''} running: "
                         f"their leases expire by {at} (the database's clock); until then no worker can claim them")

    def tail(self, recorder: Recorder, index: int, start_s: float, end_s: float) -> Interval:
        """The stop phase's interval: this process's and every process's last one (``done[i]["tail"]``)."""
        own = recorder.rotate(index, start_s, end_s)
        parts = {i: interval_codec.decode(d["tail"]) for i, d in sorted(self.done.items()) if d.get("tail")}
        merged = interval_codec.merge(index, [own, *parts.values()])
        self.measured_parts.hold(parts, {})
        own.release()
        return merged

    def measured(self, t_s: int) -> None:
        """Count the second just closed as measured second ``t_s``: each process's part to its histogram logs and
        ``processes.csv`` row (process 0: this one)."""
        self.measured_parts.count(self.stats)
        for i, part in sorted(self.measured_parts.parts.items()):
            if i in self.logs:
                self.logs[i].write(part)
        if self.per_second is not None:
            self.per_second.write(t_s, 0, self._own_cpu, loop_lag_p99_us=self._own_lag_p99, host=socket.gethostname(),
                                  pid=os.getpid())
            for i, part in sorted(self.measured_parts.parts.items()):
                self.per_second.write(t_s, i, self._cpus.get(i, (0.0, 0.0, 0.0)), part, host=self.stats[i]["host"],
                                      pid=self.stats[i]["pid"])

    def open_process_logs(self, open_logs, per_second) -> None:
        """Write each process's measured seconds to its own logs (``open_logs(i)``: a ``HistogramLogs``) and each
        second's CPU and loop lag to ``per_second`` (``ProcessSeconds``)."""
        self.logs = {i: open_logs(i) for i in sorted(self.stats)}
        self.per_second = per_second

    def close_process_logs(self) -> None:
        """Close what :meth:`open_process_logs` opened."""
        for logs in self.logs.values():
            logs.close()
        if self.per_second is not None:
            self.per_second.close()

    def local_pids(self) -> tuple[int, ...]:
        """The process ids of the load generator processes on this host (see :meth:`RunDriver.local_pids`)."""
        host = socket.gethostname()
        return tuple(s["pid"] for s in self.stats.values() if s.get("pid") is not None and s.get("host") == host)

    def cpu(self, own: tuple[float, float, float]) -> tuple[float, float, float]:
        """The busiest process's CPU over the second just closed (% of a core), this one included."""
        self._own_cpu = own
        return max([own, *self._cpus.values()], key=lambda c: c[0])
