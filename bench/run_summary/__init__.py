"""``summary.json`` of one run: the figures over the measured window, the invariants, and whether
the run is trustworthy (``suspect`` and its reasons), from what the run measured and audited.

Its parts: ``facts`` (what a summary is computed from), ``summary`` (the blocks of the file),
``suspect`` (the trust rule's reasons and limits), ``rows`` (figures read from the per-second rows),
``vacuum`` (autovacuum and the periodic VACUUM passes) and ``final`` (the run's last log lines)."""

from __future__ import annotations

from bench.run_summary.facts import Figures, RunFacts
from bench.run_summary.final import final_lines
from bench.run_summary.rows import index_bytes, monitor_notes, percentile, worker_changes
from bench.run_summary.summary import summarize
from bench.run_summary.suspect import (SUSPECT_CPU_PCT, SUSPECT_LOOP_LAG_P99_US, SUSPECT_PRODUCER_LAG_P50_MS,
                                       no_completion_cause)
from bench.run_summary.vacuum import vacuum_during, vacuum_passes

__all__ = ["SUSPECT_CPU_PCT", "SUSPECT_LOOP_LAG_P99_US", "SUSPECT_PRODUCER_LAG_P50_MS", "Figures", "RunFacts",
           "final_lines", "index_bytes", "monitor_notes", "no_completion_cause", "percentile", "summarize",
           "vacuum_during", "vacuum_passes", "worker_changes"]
