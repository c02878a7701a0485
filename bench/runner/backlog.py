"""The pending rows a run seeds so its load cannot drain them (``BACKLOG`` when not given)."""

from __future__ import annotations

import math

from bench.config.run_config import RunConfig

#: Assumed claim+complete ceiling per batch row when the job does no work (jobs/s),
#: a little above the pgbench reference figures in docs/design.md (about 4,100 jobs/s at
#: batch 1 on 2 cores); used only to size the default backlog.
BACKLOG_CEILING_JOBS_PER_S = 6000
BACKLOG_SAFETY = 1.25
BACKLOG_MIN, BACKLOG_MAX = 1_000, 5_000_000


def compute_backlog(cfg: RunConfig) -> tuple[int, str]:
    """(pending rows to seed so the run cannot drain them, how): the claim-rate ceiling in jobs/s
    (:data:`BACKLOG_CEILING_JOBS_PER_S` × batch, at most ``workers × batch × 1000 / work_ms``) × (warm-up +
    measured) s × :data:`BACKLOG_SAFETY`, within [1,000, 5,000,000] rows."""
    ceiling = BACKLOG_CEILING_JOBS_PER_S * cfg.batch
    if cfg.work_ms > 0:
        ceiling = min(ceiling, cfg.workers * cfg.batch * 1000.0 / cfg.work_ms)
    seconds = cfg.warmup_s + cfg.duration_s
    rows = int(min(BACKLOG_MAX, max(BACKLOG_MIN, math.ceil(ceiling * seconds * BACKLOG_SAFETY))))
    how = (f"computed: ceiling {ceiling:,.0f} jobs/s x {seconds:g} s x {BACKLOG_SAFETY}"
           f" = {rows:,} rows (bounded to [{BACKLOG_MIN:,}, {BACKLOG_MAX:,}])")
    return rows, how


def run_backlog(cfg: RunConfig) -> tuple[int, str]:
    """(backlog, how chosen): ``BACKLOG`` when given, 0 with ``RATE``, else :func:`compute_backlog`."""
    if cfg.backlog or cfg.rate > 0:
        return cfg.backlog, ("given" if cfg.backlog else "none: open-loop producers feed the queue")
    return compute_backlog(cfg)
