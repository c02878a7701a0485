"""The per-second merge both multi-process drivers share: the processes' parts merged exactly with this
process's, each counted, written to its own histogram logs and ``processes.csv`` row.

A driver mixing in :class:`MergedProcesses` sets ``cfg``, ``stats``, ``tmp`` and ``ctx``, calls
:meth:`_init_merge`, and has ``kill()`` and ``_stderr_tail(i)`` for :meth:`_wait_ready`."""

from __future__ import annotations

import subprocess
import time

import gevent

from bench.errors import RunFailed
from bench.load.process_stats import MeasuredParts
from bench.measure import interval_codec, metrics
from bench.measure.claimlog import merge_stamped
from bench.measure.metrics import Interval, Recorder


class MergedProcesses:
    """The per-second merge of several processes' parts (see the module's docstring)."""

    def _init_merge(self) -> None:
        self.procs: dict[int, subprocess.Popen] = {}  # the processes started here
        self.ready: dict[int, dict] = {}  # process -> its ready report
        self.failed: dict[int, str] = {}  # process -> why it could not start
        self.done: dict[int, dict] = {}  # process -> its last report
        self.parts: dict[int, dict[int, Interval]] = {}
        self.cpu_parts: dict[int, dict[int, tuple]] = {}
        self.measured_parts = MeasuredParts()
        self.logs: dict = {}
        self.per_second = None  # processes.csv (open_process_logs)
        self._cpus: dict[int, tuple] = {}  # each process's CPU over the second just closed
        self._own_cpu: tuple[float, float, float] = (0.0, 0.0, 0.0)  # this process's
        self._own_lag_p99: int | None = None
        self.process_workers: dict[int, int] = {}  # each process's workers running, as of its latest second
        self._workers_at_stop: int | None = None  # set as the run stops

    def _wait_ready(self, count: int, wait_s: float, *, option: str, what: str, failed: str) -> None:
        """Wait until ``count`` processes reported ready, at most ``wait_s`` s; when one failed or exited, or
        time ran out, kill them all and raise RunFailed (``<option>: <what> <i> <failed> (why)`` or
        ``<option>: a <what> did not start (why)``)."""
        deadline = time.monotonic() + wait_s
        while len(self.ready) < count:
            exited = [i for i, p in self.procs.items() if p.poll() is not None]
            if self.failed or exited or time.monotonic() > deadline:
                self.kill()
                if self.failed:
                    i, why = next(iter(self.failed.items()))
                    raise RunFailed(f"{option}: {what} {i} {failed} ({why})")
                why = self._stderr_tail(exited[0]) if exited else (
                    f"{len(self.ready)} of {count} reported within {wait_s:g} s")
                raise RunFailed(f"{option}: a {what} did not start ({why})")
            gevent.sleep(0.05)

    def running_workers(self) -> int:
        """Workers running in every process not lost (a library's: its concurrency), each as of its latest second."""
        if self._workers_at_stop is not None:
            return self._workers_at_stop
        return sum(n for i, n in self.process_workers.items() if not self.stats[i]["lost"])

    def _merge_second(self, own: Interval, index: int, alive: list[int], wait_s: float) -> Interval:
        """Second ``index``: ``own`` merged with what the ``alive`` processes send within ``wait_s`` (later:
        missing); ``own`` is released."""
        deadline = time.monotonic() + wait_s
        while len(self.parts.get(index, {})) < len(alive) and time.monotonic() < deadline:
            gevent.sleep(0.002)
        parts, cpus = self.parts.pop(index, {}), self.cpu_parts.pop(index, {})
        for late in [k for k in self.parts if k < index]:  # a part that came after its second was merged
            for part in self.parts.pop(late).values():
                part.release()
            self.cpu_parts.pop(late, None)
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
                self.stats[i]["lost"] = True
        merge_stamped([self.tmp / f"claims-{i}.log" for i in sorted(self.stats)
                       if (self.tmp / f"claims-{i}.log").exists()], self.ctx.log)

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
            self.per_second.write(t_s, 0, self._own_cpu, loop_lag_p99_us=self._own_lag_p99)
            for i, part in sorted(self.measured_parts.parts.items()):
                self.per_second.write(t_s, i, self._cpus.get(i, (0.0, 0.0, 0.0)), part)

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

    def cpu(self, own: tuple[float, float, float]) -> tuple[float, float, float]:
        """The busiest process's CPU over the second just closed (% of a core), this one included."""
        self._own_cpu = own
        return max([own, *self._cpus.values()], key=lambda c: c[0])
