"""The end of a run's reads from the database: the final sample, the VACUUM counts, the claim's plan
when none was taken before the load, the audit and the table sizes; or, when the database went
away, what is written in their place."""

from __future__ import annotations

from dataclasses import dataclass

from bench.workload.queues import queue_count


@dataclass
class Audited:
    """What the end of the run read: ``final_sample`` (the monitor's last sample), ``audit`` (the
    engine's :meth:`~bench.engines.base.Engine.audit` result), ``vacuum_after`` and ``sizes_after``
    (None when the database went away, and ``database_lost`` then says why, in one line)."""

    final_sample: dict
    audit: dict
    vacuum_after: dict | None = None
    sizes_after: dict | None = None
    database_lost: str | None = None


def audit(run) -> Audited:
    """Read the end of ``run`` (a :class:`bench.runner.run.Run` whose load has stopped). A dead admin
    connection is replaced (``run.admin``), and the claim's plan is captured now when it was not before
    the load (``run.claim_plans``, ``run.plans_when``). Raises the engine's database errors (or a
    ConfigError) when the database has gone."""
    engine, cfg, measured = run.engine, run.cfg, run.tally.measured
    # The table sampler may have been killed mid-query: take the final sample on a fresh connection.
    run.monitor.reset_table_conn()
    final_sample = {**run.monitor.sample_stats(), **run.monitor.sample_table(force=True)}
    if not engine.is_alive(run.admin):  # e.g. its backend was terminated: audit on a new connection
        run.admin = engine.connect(run.dsn, "queue-bench audit")
    vacuum_after = engine.vacuum_counts(run.admin, cfg.schema)
    if run.plans_when is None:
        run.claim_plans, run.plans_when = engine.capture_plans(run.admin, cfg, "on the table as the load left it")
    result = engine.audit(run.admin, cfg, run.claim_log, seeded_rows=cfg.history + run.backlog,
                          over_claims=run.tally.totals["over_claims"])
    if queue_count(cfg) > 1 and measured.intervals:  # NAMED_QUEUES, TENANTS: per queue, from the table
        result["completed_per_queue"] = engine.completed_per_queue(
            run.admin, cfg, run.clock.unix0 + measured.start_s, run.clock.unix0 + measured.end_s)
    return Audited(final_sample, result, vacuum_after, engine.table_sizes(run.admin, cfg.schema))


def database_lost(engine, err: Exception) -> Audited:
    """What a run writes when the database went away (``err``) before it could be audited: the
    invariants unknown (None), no sample, no sizes."""
    message = engine.error_message(err).removeprefix("DSN: ").split("; allowed:")[0]
    return Audited(final_sample={"queue_depth": None},
                   audit={"invariants": dict.fromkeys(engine.invariants), "status_counts": {}, "details": {},
                          "redeliveries": None, "retry_gaps": None, "fifo_out_of_order_share": None},
                   database_lost=message)
