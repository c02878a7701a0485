"""What a run counted, second by second: totals, the measured window, rows, the monitor's samples."""

from __future__ import annotations

import collections
from collections import Counter
from pathlib import Path

from bench.measure import metrics, seconds
from bench.measure.pooler_seconds import pooler_columns
from bench.measure.machine_cpu import BusyShare
from bench.results import run_files


class Tally:
    """The counts of one run: ``totals`` (warm-up, measured and stop phase), ``measured`` and ``rows`` (one dict
    per measured second) the window only, ``samples`` (second -> monitor values); second ``n_warm`` is the
    first measured."""

    def __init__(self, driver, n_warm: int):
        self.driver, self.n_warm = driver, n_warm
        self.samples: dict[int, dict] = {}
        self.measured = metrics.Window()
        self.totals: Counter = Counter()
        self.max_rows_per_claim = 0
        self.rows: list[dict] = []
        self.recent: collections.deque = collections.deque(maxlen=seconds.PROGRESS_EVERY_S)  # the progress line's
        self.hlogs = None

    def note(self, k: int, values: dict) -> None:
        """Keep a monitor sample taken in second ``k`` (its ``cost_s`` summed as ``monitor_query_us``)."""
        entry = self.samples.setdefault(k, {"monitor_query_us": 0})
        entry["monitor_query_us"] += int(values["cost_s"] * 1e6)
        entry.update({key: v for key, v in values.items() if key != "cost_s" and v is not None})

    def open_logs(self, run_dir: Path, unix0: float) -> None:
        """Open the histogram logs (``histograms/``, one set per process) and ``processes.csv``."""
        self.hlogs = run_files.HistogramLogs(run_dir / "histograms", metrics.HISTOGRAM_NAMES, unix0)
        self.driver.open_process_logs(lambda i: run_files.HistogramLogs(run_dir / "histograms" / f"process-{i}",
                                      metrics.HISTOGRAM_NAMES, unix0), run_files.ProcessSeconds(run_dir / "processes.csv"))

    def account(self, interval: metrics.Interval, cpu: tuple[float, float, float] | None,
                busy: BusyShare | None = None, more: dict | None = None) -> None:
        """Count ``interval`` in the totals; with ``cpu``, it is measured: to the logs, the window and a row (with
        ``busy``, the machine's CPU outside the run over the same second; ``more``: other columns of the second,
        the delay relay's CPU)."""
        self.totals.update(interval.counters)
        self.max_rows_per_claim = max(self.max_rows_per_claim, interval.max_rows_per_claim)
        if cpu is None:  # warm-up or stop phase: counted, never read again
            interval.release()
            return
        self.hlogs.write(interval)
        self.measured.add(interval)
        self.driver.measured(interval.index - self.n_warm)  # each process's part: summary.json processes, processes.csv
        if len(self.recent) == self.recent.maxlen:
            self.recent[0].release()  # leaves the progress line's window now
        self.recent.append(interval)
        self.rows.append(seconds.interval_row(interval, interval.index - self.n_warm, None, cpu)
                         | {"workers": self.driver.running_workers()} | (busy.columns() if busy else {}) | (more or {}))

    def errors(self, recorder: metrics.Recorder) -> Counter:
        """The errors by kind of the measured seconds closed so far and of the open one (``recorder``'s)."""
        return self.measured.errors + recorder.errors

    def close_logs(self) -> None:
        """Close the histogram logs and the processes' logs."""
        self.hlogs.close()
        self.driver.close_process_logs()

    def join_samples(self, vacuum_passes: list[tuple[float, float]] | None) -> None:
        """Add the monitor's and the pooler's samples (and VACUUM passes) to the rows, now: a sample taken in second k may return
        after tick k."""
        for row in self.rows:
            k = row["t_s"] + self.n_warm
            row.update(seconds.sample_columns(self.samples.get(k)), **seconds.cost_columns(self.samples, k),
                       **pooler_columns(self.samples, k))
            if vacuum_passes is not None:
                row.update(seconds.vacuum_columns(vacuum_passes, k))
