"""What each load generator process did over the measured window (``summary.json`` ``processes``): its counters,
busiest second's CPU and loop-lag p99."""

from __future__ import annotations

from bench.measure import metrics
from bench.measure.metrics import Interval

__all__ = ["MeasuredParts", "finish_process_stats", "new_process_stats"]


def new_process_stats(process: int, pid: int | None = None, host: str | None = None) -> dict:
    """The figures of one load generator process before its first measured second."""
    return {"process": process, "host": host, "pid": pid, "workers": 0, "lost": False, "missing_seconds": [], "cpu_max_pct": 0.0,
            "counters": {"claims": 0, "jobs_claimed": 0, "jobs_completed": 0, "empty_claims": 0, "errors": 0},
            "_loop_lag": metrics.new_histogram("loop_lag_us")}


def finish_process_stats(stats: dict) -> dict:
    """``stats`` for summary.json: the loop-lag histogram of its measured seconds becomes its p99 (µs)."""
    out = {k: v for k, v in stats.items() if k != "_loop_lag"}
    lag = stats["_loop_lag"]
    out["loop_lag_p99_us"] = lag.get_value_at_percentile(99) if lag.get_total_count() else None
    out["cpu_max_pct"] = round(out["cpu_max_pct"], 1)
    return out


class MeasuredParts:
    """The processes' parts of the second just closed, held until :meth:`count` (measured) or the next
    :meth:`hold`."""

    def __init__(self) -> None:
        self.parts: dict[int, Interval] = {}
        self.cpus: dict[int, float] = {}

    def hold(self, parts: dict[int, Interval], cpus: dict[int, float]) -> None:
        """Hold the new second's ``parts`` (process -> interval) and CPU (% of a core), releasing the last."""
        for part in self.parts.values():
            part.release()
        self.parts, self.cpus = parts, cpus

    def count(self, stats: dict[int, dict]) -> None:
        """Add the held parts to each process's measured figures (see :func:`new_process_stats`)."""
        for i, part in self.parts.items():
            s = stats[i]
            for name in ("claims", "jobs_claimed", "jobs_completed", "empty_claims"):
                s["counters"][name] += part.counters[name]
            s["counters"]["errors"] += sum(part.errors.values())
            s["_loop_lag"].add(part.histograms["loop_lag_us"])
            s["cpu_max_pct"] = max(s["cpu_max_pct"], self.cpus.get(i, 0.0))
