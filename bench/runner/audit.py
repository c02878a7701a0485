"""The end of a run's reads from the database (final sample, VACUUM counts, plan, audit, sizes), or what is
written when the database went away."""

from __future__ import annotations

from dataclasses import dataclass

from bench.workload.queues import queue_count


@dataclass
class Audited:
    """What the end of the run read: ``final_sample``, ``audit``, ``vacuum_after``, ``sizes_after`` (None when
    the database went away; ``database_lost`` then says why, in one line)."""

    final_sample: dict
    audit: dict
    vacuum_after: dict | None = None
    sizes_after: dict | None = None
    database_lost: str | None = None


def audit(run) -> Audited:
    """Read the end of ``run`` (load stopped): replaces a dead admin connection, captures the claim's plan if not
    taken before the load. Raises the engine's database errors (or ConfigError) when the database has gone."""
    engine, cfg, measured = run.engine, run.cfg, run.tally.measured
    # The table sampler may have been killed mid-query: take the final sample on a fresh connection.
    run.monitor.reset_table_conn()
    run.monitor.settle()  # the workers' sessions gone, their statistics published
    final_sample = {**run.monitor.sample_stats(), **run.monitor.sample_table(force=True)}
    if not engine.is_alive(run.admin):  # e.g. its backend was terminated: audit on a new connection
        run.admin = engine.connect(run.direct, "queue-bench audit")
    vacuum_after = engine.vacuum_counts(run.admin, cfg.schema)
    if run.plans_when is None:
        run.claim_plans, run.plans_when = engine.capture_plans(run.admin, cfg, "on the table as the load left it")
    result = engine.audit(run.admin, cfg, run.claim_log, seeded_rows=cfg.history + run.backlog,
                          over_claims=run.tally.totals["over_claims"])
    position = (run.failover.record or {}).get("log_position") if run.failover else None  # None: none noticed
    if position is not None:  # the audit across the promotion: acknowledged work missing, counted apart
        result = engine.failover_losses(run.admin, cfg, run.claim_log, position, result)
    held = result.pop("running_by_claimant", None)  # the driver's, not the audit's
    if any(p.get("lost") for p in run.driver.processes):  # what a lost process's workers still hold
        run.driver.left_running(held)
    if queue_count(cfg) > 1 and measured.intervals:  # NAMED_QUEUES, TENANTS: per queue, from the table
        result["completed_per_queue"] = engine.completed_per_queue(
            run.admin, cfg, run.clock.unix0 + measured.start_s, run.clock.unix0 + measured.end_s)
    return Audited(final_sample, result, vacuum_after, engine.table_sizes(run.admin, cfg.schema))


def database_lost(engine, err: Exception) -> Audited:
    """What a run writes when the database went away (``err``) before the audit: invariants None, no sample, no
    sizes."""
    message = engine.error_message(err).removeprefix("DSN: ").split("; allowed:")[0]
    return Audited(final_sample={"queue_depth": None},
                   audit={"invariants": dict.fromkeys(engine.invariants), "status_counts": {}, "details": {},
                          "redeliveries": None, "retry_gaps": None, "fifo_out_of_order_share": None,
                          "effects": None},
                   database_lost=message)
