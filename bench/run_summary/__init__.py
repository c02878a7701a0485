"""``summary.json`` of one run: the figures over the measured window, the invariants, and whether the run is
trustworthy; one module per part (``facts``, ``summary``, ``suspect``, ``rows``, ``vacuum``, ``final``,
``pooler``)."""

from __future__ import annotations

from bench.run_summary.cost import whole_load_cost
from bench.run_summary.facts import Figures, RunFacts
from bench.run_summary.final import final_lines
from bench.run_summary.pooler import mode_disagreements, pooler_lines
from bench.run_summary.rows import index_bytes, monitor_notes, percentile, worker_changes
from bench.run_summary.summary import summarize
from bench.run_summary.suspect import (SUSPECT_CPU_PCT, SUSPECT_LOOP_LAG_P99_US, SUSPECT_PRODUCER_LAG_P50_MS,
                                       no_completion_cause)
from bench.run_summary.vacuum import vacuum_during, vacuum_passes

__all__ = ["SUSPECT_CPU_PCT", "SUSPECT_LOOP_LAG_P99_US", "SUSPECT_PRODUCER_LAG_P50_MS", "Figures", "RunFacts",
           "final_lines", "index_bytes", "mode_disagreements", "monitor_notes", "pooler_lines", "no_completion_cause", "percentile", "summarize",
           "vacuum_during", "vacuum_passes", "whole_load_cost", "worker_changes"]
