"""PostgreSQL as a :class:`bench.engines.base.Engine` over a queue definition (:meth:`PostgresEngine.queue`).
Import it after :mod:`bench.gevent_patch`, as :func:`bench.engines.get_engine` does."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from bench.config.queue_definition import QueueDefinition
from bench.engines.base import Engine
from bench.engines.postgres import (CAPABILITIES, audit, builtin_queue, captures, commit_mode, db, dsn, fault_actions,
                                    library_workers, pg_stat_statements, plans, pooler_probes, probes, vacuum)
from bench.engines.postgres.defined_sessions import DefinedSessions
from bench.engines.postgres.monitor import Monitor
from bench.engines.postgres.mover import Mover
from bench.config.failover_parameters import sync_commit_settings
from bench.engines.failover_losses import effect_losses, recount_redeliveries, reused_redeliveries, explain, failover_losses, job_ids
from bench.engines.postgres.reaper import Reaper
from bench.engines.postgres.replica import ReplicaWatch
from bench.engines.postgres.direct_check import check_direct
from bench.engines.postgres.standby_check import check_given_standby
from bench.engines.postgres.adapter import cooperative_wait
from bench.engines.postgres.sessions import PgProducerSession, PgWorkerSession
from bench.workload.queues import queue_count, queue_names


def _relation(cfg: Any) -> str | None:
    """Where the audit finds every job when the queue table does not hold them all: the built-in queue's
    archive layout's view of both tables (None: the queue's table)."""
    return "jobs_all" if cfg.layout == "archive" else None


class PostgresEngine(Engine):
    """The PostgreSQL engine over a queue definition (see :class:`bench.engines.base.Engine` for every
    method's contract): the built-in queue's, generated from each run's parameters, or ``defn``, a written
    one (:class:`bench.engines.postgres.defined_engine.DefinedQueueEngine`, which prepares and checks it)."""

    name = "postgres"
    capabilities = CAPABILITIES
    db, plans, probes, faults, dsns = db, plans, probes, fault_actions, dsn
    driver = db.DRIVER
    worker_session, producer_session, cooperative_wait = PgWorkerSession, PgProducerSession, staticmethod(cooperative_wait)
    #: the reaper's task; :meth:`reaper` also gives it the queue's definition and ``LEASE_S``
    reaper_task = Reaper

    def __init__(self, defn: QueueDefinition | None = None):
        #: a written queue's definition; None for the built-in queue's, generated for each run (:meth:`queue`)
        self.defn = defn
        #: the queue table's name in the tool's schema
        self.table = "jobs" if defn is None else defn.table

    def queue(self, cfg: Any) -> QueueDefinition:
        """The run's queue as a definition: the written one, or the built-in queue's, generated from ``cfg``
        (:func:`bench.engines.postgres.builtin_queue.definition`)."""
        return self.defn or builtin_queue.definition(cfg)

    def advisory_lock_pool_probe(self, dsn: str, schema: str) -> dict:
        """Experiment 21: a session advisory lock through a transaction pool and a session pool
        (:func:`bench.engines.postgres.pooler_probes.advisory_lock_pool_probe`)."""
        return pooler_probes.advisory_lock_pool_probe(dsn, schema)

    def listen_pool_probe(self, dsn: str, schema: str) -> dict:
        """Experiment 22: ``LISTEN`` through a transaction pool and a session pool
        (:func:`bench.engines.postgres.pooler_probes.listen_pool_probe`)."""
        return pooler_probes.listen_pool_probe(dsn, schema)

    def sessions(self, dsn: str, cfg: Any) -> DefinedSessions:
        """The worker and producer sessions of the run, over its queue's definition (:meth:`queue`)."""
        return DefinedSessions(self.application_dsn(dsn, cfg), cfg, lambda: self.queue(cfg))

    def reaper(self, dsn: str, cfg: Any, recorder: Any) -> Reaper:
        """The queue definition's reaper statement every ``REAPER_INTERVAL_S`` on its own connection."""
        stateless = cfg.stateless_sessions()  # through a transaction pool: nothing prepared, nothing SET

        def connect():
            return db.connect(self.application_dsn(dsn, cfg), application_name="queue-bench reaper",
                              auto_prepare=not stateless)
        reaper = Reaper(connect(), cfg.schema, self.queue(cfg), cfg.lease_s, cfg.reaper_interval_s, recorder,
                        stateless=stateless, settings=sync_commit_settings(cfg.sync_commit))
        reaper.reopen = lambda: reaper.set_up(connect())  # a lost connection (a partition) reopened
        return reaper

    def prepare(self, conn: Any, cfg: Any, backlog: int, *, log: Callable[[str], None],
                state_schema: str | None) -> Any:
        """:meth:`Engine.prepare`, then the queue table's ``AUTOVACUUM_SETTINGS``; the seeding's statistics
        flushed before the load (:func:`bench.engines.postgres.db.flush_statistics`)."""
        seed = db.prepare(conn, cfg, backlog, log=log, state_schema=state_schema)
        vacuum.apply_autovacuum_settings(conn, cfg.schema, cfg.autovacuum_settings, log)
        db.flush_statistics(conn)
        return seed

    def table_sizes(self, conn: Any, schema: str) -> dict:
        """``{"table_bytes", "indexes_bytes", "archive_bytes"}`` of the queue's table."""
        return db.table_sizes(conn, schema, self.table)

    def vacuum_counts(self, conn: Any, schema: str) -> dict:
        """Vacuum and analyze counts of the queue table, and the storage parameters of its leaves
        (``reloptions``: ``{table: ["name=value", …]}``; a written queue's table has none set by the tool)."""
        if self.defn is not None:
            return {**db.vacuum_counts(conn, schema, (self.table,)), "reloptions": {}}
        return {**db.vacuum_counts(conn, schema), "reloptions": vacuum.reloptions(conn, schema)}

    def monitor(self, dsn: str, cfg: Any) -> Monitor:
        """The per-second sampler of queue depth, oldest eligible age, locks and table statistics, over the
        run's queue (:meth:`queue`)."""
        return Monitor(lambda name: db.connect(dsn, application_name=name), cfg.schema,
                       priorities=tuple(sorted({0} | {p for p, _ in cfg.priority_mix})),
                       tenants=queue_names(cfg.tenants) if cfg.tenants > 1 else (), defn=self.queue(cfg),
                       lock_queue=any(f.kind == "migration" for f in cfg.faults),
                       behind_pooler=cfg.pool_mode not in ("none", "n/a"))

    def mover(self, dsn: str, cfg: Any, recorder: Any) -> Mover:
        """A periodic task that moves finished rows to the archive."""
        return Mover(self.connect(dsn, "queue-bench mover"), cfg.schema, recorder)

    def vacuumer(self, dsn: str, cfg: Any, recorder: Any, now_s: Callable[[], float]) -> vacuum.Vacuumer:
        """The periodic ``VACUUM`` of ``VACUUM_EVERY_S`` on its own connection."""
        return vacuum.Vacuumer(self.connect(dsn, "queue-bench vacuum"), cfg.schema, cfg.vacuum_every_s, recorder,
                               now_s)

    def capture_plans(self, conn: Any, cfg: Any, when: str) -> tuple[dict | None, str]:
        """The claim's plans (auto, custom, generic) explained now, and ``when`` as said."""
        return captures.capture_plans(conn, cfg, self.queue(cfg), when)

    def workers_plan(self, sessions: list, explain: dict | None, cfg: Any) -> dict:
        """From the workers' plan counts (prepared claims) and one worker's EXPLAIN."""
        return plans.workers_plan(sessions, explain, prepared=cfg.prepared, plan_cache=cfg.plan_cache)

    def plans_summary(self, captured: dict | None) -> dict | None:
        """The auto, custom and generic plans without their text."""
        if captured is None:
            return None
        return {"auto": captured["auto"],
                **{mode: {k: v for k, v in captured[mode].items() if k != "text"} for mode in plans.PLAN_MODES}}

    def plan_warnings(self, workers: dict | None, growth: dict) -> list[str]:
        """Red lines for the report: the workers' claim scans the queue's table, claim latency grew."""
        return plans.plan_warnings(workers, growth, self.table)

    def statement_stats_unavailable(self, conn: Any) -> str | None:
        """Why pg_stat_statements cannot be read, or None."""
        return pg_stat_statements.unavailable_reason(conn)

    def migration_statement(self, cfg: Any, fault: Any) -> str:
        """A ``migration`` window's SQL on the queue's table; an index goes on its eligible time column, else its id."""
        columns = self.queue(cfg).columns
        column = columns["eligible_at"] if columns["eligible_at"].isidentifier() else columns["id"]
        return fault_actions.migration_statement(fault, cfg.schema, self.table, column)

    def statement_stats_reset(self, conn: Any, cfg: Any, missing: str | None) -> str | None:
        """Reset the claim's pg_stat_statements entries."""
        return captures.pgss_reset(conn, cfg, self.queue(cfg), missing)

    def statement_stats_read(self, conn: Any, cfg: Any, missing: str | None, reset: str | None) -> dict:
        """The claim's pg_stat_statements figures over the measured window."""
        return captures.pgss_read(conn, cfg, self.queue(cfg), missing, reset)

    def audit(self, conn: Any, cfg: Any, claim_log: Any, *, seeded_rows: int, over_claims: int) -> dict:
        """:func:`bench.engines.postgres.audit.run_audit` on the run's queue (:meth:`queue`); the built-in queue's
        with ``running_by_claimant`` (:func:`bench.engines.postgres.db.running_jobs`)."""
        result = audit.run_audit(conn, cfg.schema, self.queue(cfg), claim_log, seeded_rows=seeded_rows,
                                 over_claims=over_claims, poison_share=cfg.poison_share, relation=_relation(cfg),
                                 effects=cfg.effects)
        if self.defn is None:  # a queue definition's columns are its own
            result["running_by_claimant"] = db.running_jobs(conn, cfg.schema)
        return result

    def completed_per_queue(self, conn: Any, cfg: Any, start_unix: float, end_unix: float) -> dict:
        """Jobs completed per queue name in the measured window, from the table (the built-in queue's
        ``queue`` column: ``NAMED_QUEUES`` and ``TENANTS`` are its own)."""
        return audit.completed_per_queue(conn, cfg.schema, queue_names(queue_count(cfg)), start_unix, end_unix,
                                         relation=_relation(cfg) or "jobs")

    def standby(self, dsn: str, cfg: Any, log: Callable[[str], None]) -> Any:
        """``DSN_REPLICA`` as it is, or the embedded primary's standby (:mod:`bench.engines.postgres.standby`)."""
        if cfg.dsn_replica:
            return contextlib.nullcontext(cfg.dsn_replica)
        from bench.engines.postgres.standby import embedded_standby  # here: only REPLICA=1 runs start one
        return embedded_standby(dsn, cfg, cfg.replica_readers, log)

    def standby_root(self, standby_dsn: str, cfg: Any) -> int | None:
        """The embedded standby's postmaster (its processes serve only the run: the run's own, docs/reading-the-
        report.md "A busy machine"); None for ``DSN_REPLICA``, a server the tool did not start."""
        if cfg.dsn_replica:
            return None
        from bench.engines.postgres.standby import postmaster_pid  # here: only REPLICA=1 runs start one
        return postmaster_pid(standby_dsn)

    def check_given_standby(self, conn: Any, cfg: Any) -> None:
        """:func:`bench.engines.postgres.standby_check.check_given_standby`, then
        :func:`bench.engines.postgres.commit_mode.check_server` (the DSN's server names a synchronous standby)."""
        check_given_standby(conn, cfg.dsn_replica)
        commit_mode.check_server(conn, cfg)

    def commit_mode(self, dsn: str, conn: Any, cfg: Any) -> dict | None:
        """:func:`bench.engines.postgres.commit_mode.applied` (None when ``SYNC_COMMIT`` is n/a: a library's own
        worker)."""
        return None if cfg.sync_commit == "n/a" else commit_mode.applied(dsn, conn, cfg, self.queue(cfg))

    def failover(self, primary_dsn: str, standby_dsn: str, cfg: Any, pooler: Any = None) -> Any:
        """:class:`bench.engines.postgres.failover.Failover` (through ``pooler``, the embedded one, re-pointed)."""
        from bench.engines.postgres.failover import Failover  # here: only a failover window uses it
        return Failover(primary_dsn, standby_dsn, cfg.promote_after_s, pooler, cfg.repoint_after_s)

    def observe_failover(self, dsn: str) -> Any:
        """:func:`bench.engines.postgres.failover_watch.watch_for`."""
        from bench.engines.postgres.failover_watch import watch_for  # here: only a multi-host DSN uses it
        return watch_for(dsn)

    def failover_losses(self, conn: Any, cfg: Any, claim_log: Any, position: int, audit_result: dict) -> dict:
        """:func:`bench.engines.failover_losses.failover_losses` over the rows the log names, read on ``conn``,
        and ``audit_result``'s invariants less what they explain."""
        events = list(claim_log.rows())
        ids = sorted(job_ids(events))
        losses = failover_losses(events, position, audit.job_states(conn, cfg.schema, self.queue(cfg), ids,
                                                                   _relation(cfg)))
        losses["effects"] = (None if cfg.effects == "none" else
                             effect_losses(events, position, cfg.effects, audit.effect_rows(conn, cfg.schema, ids)))
        audit_result = recount_redeliveries(audit_result, reused_redeliveries(events, position))
        return {**audit_result, "invariants": explain(audit_result["invariants"], losses), "failover_losses": losses}

    def check_direct(self, conn: Any, dsn: str) -> None:
        """:func:`bench.engines.postgres.direct_check.check_direct`."""
        check_direct(conn, dsn)

    def replica_watch(self, dsn: str, standby_dsn: str, cfg: Any, *, now_s: Callable[[], float],
                      note: Callable[[int, dict], None], position: Callable[[], int | None],
                      reads: Any) -> ReplicaWatch:
        """The standby's sampler and readers (:class:`bench.engines.postgres.replica.ReplicaWatch`)."""
        return ReplicaWatch(dsn, standby_dsn, cfg, now_s=now_s, note=note, position=position, reads=reads,
                            source="DSN_REPLICA" if cfg.dsn_replica else "embedded")

    def pooler_facts(self, pooled_dsn: str, admin_dsn: str | None, *, detect: bool) -> dict:
        """:func:`bench.engines.postgres.pooler.watch.pooler_facts`."""
        from bench.engines.postgres.pooler import watch  # here: only runs behind a pooler read it
        return watch.pooler_facts(pooled_dsn, admin_dsn, detect=detect)

    def pooler_watch(self, admin_dsn: str, pool: tuple[str, str], pid: int | None) -> Any:
        """:class:`bench.engines.postgres.pooler.watch.PoolerWatch`."""
        from bench.engines.postgres.pooler import watch
        return watch.PoolerWatch(admin_dsn, *pool, pid=pid)

    def library_worker_command(self, dsn: str, cfg: Any) -> tuple[list[str], dict[str, str]] | None:
        """``python -m bench.engines.postgres.library_workers <package>`` with the DSN in its environment, for a
        queue library under ``LIBRARY_MODE=worker``; None otherwise."""
        if self.defn is None or self.defn.library is None or cfg.library_mode != "worker":
            return None
        return library_workers.command(self.defn.library["package"]), {library_workers.DSN_ENV: dsn}

    def hold_snapshot(self, dsn: str, schema: str) -> Any:
        """A connection holding a snapshot that has read the queue's table."""
        return fault_actions.hold_snapshot(dsn, schema, self.table)


ENGINE = PostgresEngine()
