"""What ``summary.json`` is computed from: the run's facts, and the measured window's figures that
several of its blocks read."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

from bench.config.run_config import RunConfig
from bench.measure import metrics
from bench.run_summary.rows import busy_figures
from bench.workload import jobs


@dataclass(frozen=True)
class RunFacts:
    """What a run measured and audited, as :func:`bench.run_summary.summarize` reads it: ``measured`` (the
    window's running totals), ``rows`` (``intervals.csv``, one dict per second), ``complete`` (False when
    interrupted), ``max_rows_per_claim``, ``audit``, ``final_sample`` (the monitor's last),
    ``monitor_failures``, ``run_info`` (``run.json``), ``plan_warnings``, ``round_trip`` (the round-trip probe's
    figures over the window: :meth:`bench.runner.round_trip.RoundTripProbe.window`; None: no probe)."""

    run_id: str
    cfg: RunConfig
    measured: metrics.Window
    rows: list[dict]
    complete: bool
    max_rows_per_claim: int
    audit: dict
    final_sample: dict
    monitor_failures: int
    run_info: dict
    plan_warnings: Callable[[dict | None, dict], list[str]]
    round_trip: dict | None = None


class Figures:
    """The measured window's figures computed once from ``facts`` (held as ``facts``): its seconds,
    counters, errors, the histograms several blocks read, the work per job, the harness's highest CPU,
    the machine's CPU outside the run and whether the backlog ran dry."""

    def __init__(self, facts: RunFacts):
        self.facts = facts
        measured, rows, cfg = facts.measured, facts.rows, facts.cfg
        self.measured_s = measured.seconds
        self.counters = Counter(measured.counters)
        self.errors = Counter(measured.errors)
        self.claim = metrics.merge(measured, "claim_latency_us")
        self.complete_h = metrics.merge(measured, "complete_latency_us")
        self.work_h = metrics.merge(measured, "work_duration_us")
        self.loop_lag = metrics.merge(measured, "loop_lag_us")
        self.producer_lag = metrics.merge(measured, "producer_lag_us")
        # The work per job as measured around each job's sleep (a 1 ms sleep can take several ms on a
        # busy event loop); what the configuration asked for only when no job ran in the window.
        self.work_s = (metrics.mean_value(self.work_h) / 1e6 if self.work_h.get_total_count()
                       else jobs.expected_work_s(cfg))
        self.cpu_max = max((r["harness_cpu_pct"] for r in rows), default=0.0)
        self.busy = busy_figures(rows)  # the machine's CPU outside the run, and steal
        # No eligible row at some sample (a count of 0, or no oldest eligible row at all).
        depth_zero = any(r.get("queue_depth") == 0 or r.get("oldest_eligible_age_s") == 0 for r in rows) or (
            facts.final_sample["queue_depth"] == 0)
        # Without producers an empty queue means the seeded backlog ran out; with them it means keeping up.
        self.backlog_exhausted = depth_zero and cfg.rate == 0

    def per_s(self, counter: str) -> float | None:
        """``counter`` per measured second (2 decimals), None over an empty window."""
        return round(self.counters[counter] / self.measured_s, 2) if self.measured_s else None
