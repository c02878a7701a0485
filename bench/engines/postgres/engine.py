"""PostgreSQL as a :class:`bench.engines.base.Engine`: each method hands the run's request to the
module of this package that does it (``db``, ``captures``, ``plans``, ``monitor``, ``audit``,
``reaper``, ``mover``, ``vacuum``, ``fault_actions``, ``sessions``).

Import it after :mod:`bench.load.swarm` (gevent's monkey-patching must precede psycopg's import);
:func:`bench.engines.get_engine` does so lazily.
"""

from __future__ import annotations

from typing import Any, Callable

from bench.engines.base import Capabilities
from bench.engines.common import with_connection
from bench.engines.postgres import audit, captures, cleanup, db, fault_actions, pg_stat_statements, plans, probes, vacuum
from bench.engines.postgres.error_kinds import first_line
from bench.engines.postgres.monitor import Monitor, spawn_samplers
from bench.engines.postgres.mover import Mover
from bench.engines.postgres.reaper import Reaper
from bench.engines.postgres.sessions import PostgresSessions
from bench.workload.queues import queue_count, queue_names

#: PostgreSQL honours every value the parameter table allows (partial indexes, plan_cache_mode,
#: server-side prepared statements, autovacuum as a table storage parameter).
CAPABILITIES = Capabilities.from_table("postgres", nowait_error="55P03",
                                       features={"plan_cache": True, "partial_index": True, "vacuum": True})


class PostgresEngine:
    """The PostgreSQL engine (see :class:`bench.engines.base.Engine` for every method's contract)."""

    name = "postgres"
    capabilities = CAPABILITIES
    database_errors = db.DATABASE_ERRORS
    invariants = audit.INVARIANTS

    # -- connect and check
    def connect(self, dsn: str, application_name: str) -> Any:
        """An admin connection (autocommit); ConfigError (``DSN``) when it cannot connect."""
        return db.connect(dsn, application_name=application_name)

    def is_alive(self, conn: Any) -> bool:
        """The connection still answers."""
        return db.is_alive(conn)

    def server_info(self, conn: Any) -> dict:
        """``server_version`` and the server settings run.json records."""
        return db.server_info(conn)

    def claim_schema(self, conn: Any, schema: str, connections: int) -> dict:
        """Check the schema is the tool's (or absent) and free, lock it for this run on ``conn``,
        and check the server has ``connections`` free; returns ``{"available", "max_connections",
        ...}``."""
        db.check_schema_usable(conn, schema)
        db.lock_schema(conn, schema)  # held by this session until the run ends
        return db.check_capacity(conn, connections)  # this admin connection is already counted

    def check_schema(self, conn: Any, schema: str, connections: int) -> dict:
        """:meth:`claim_schema` without taking the lock (a sweep's check before its first run)."""
        db.check_schema_usable(conn, schema)
        return db.check_capacity(conn, connections)

    def sessions(self, dsn: str, cfg: Any) -> PostgresSessions:
        """The worker and producer sessions of the run."""
        return PostgresSessions(dsn, cfg)

    def error_message(self, err: BaseException) -> str:
        """The first line of a database error's message."""
        return first_line(err)

    # -- prepare and seed
    def prepare(self, conn: Any, cfg: Any, backlog: int, *, log: Callable[[str], None],
                state_schema: str | None) -> Any:
        """Drop and create the run's schema (layout, index variant), seed history and backlog;
        returns the seed's figures (``history``, ``backlog``, ``seconds``, ``rows_per_s``,
        ``index_seconds``, ``vacuum_seconds``); then the queue table's ``AUTOVACUUM_SETTINGS``."""
        seed = db.prepare(conn, cfg, backlog, log=log, state_schema=state_schema)
        vacuum.apply_autovacuum_settings(conn, cfg.schema, cfg.autovacuum_settings, log)
        return seed

    def table_sizes(self, conn: Any, schema: str) -> dict:
        """``{"table_bytes", "indexes_bytes"}`` of the queue's tables."""
        return db.table_sizes(conn, schema)

    def vacuum_counts(self, conn: Any, schema: str) -> dict:
        """Vacuum and analyze counts of the queue table (to diff across the run), and the storage
        parameters of its leaves (``reloptions``: ``{table: ["name=value", …]}``)."""
        return {**db.vacuum_counts(conn, schema), "reloptions": vacuum.reloptions(conn, schema)}

    def state_schema_for(self, schema: str) -> str:
        """The schema that holds saved seeded states for runs in ``schema``."""
        return db.state_schema_for(schema)

    def drop_schema_at(self, dsn: str, schema: str) -> None:
        """Drop the tool's ``schema`` (only when it carries the tool's marker)."""
        db.drop_schema_at(dsn, schema)

    def clean(self, dsn: str, *, dry_run: bool) -> list:
        """Drop the tool's schemas on ``dsn`` (:func:`bench.engines.postgres.cleanup.clean`)."""
        return with_connection(lambda: db.connect(dsn, application_name="queue-bench clean"),
                               lambda conn: cleanup.clean(conn, dry_run=dry_run))

    # -- during the load
    def monitor(self, dsn: str, cfg: Any) -> Monitor:
        """The per-second sampler of queue depth, oldest eligible age, locks and table statistics."""
        return Monitor(lambda name: db.connect(dsn, application_name=name), cfg.schema,
                       priorities=tuple(sorted({0} | {p for p, _ in cfg.priority_mix})),
                       tenants=queue_names(cfg.tenants) if cfg.tenants > 1 else ())

    def spawn_samplers(self, monitor: Any, now_s: Callable[[], float], n_seconds: int,
                       note: Callable[[int, dict], None]) -> list:
        """Greenlets that call ``note(second, values)`` once per second for ``n_seconds``."""
        return spawn_samplers(monitor, now_s, n_seconds, note)

    def reaper(self, dsn: str, cfg: Any, recorder: Any) -> Reaper:
        """A periodic task (``run``, ``stop``, ``conn``) that re-queues or dead-letters expired
        leases."""
        return Reaper(db.connect(dsn, application_name="queue-bench reaper"), cfg.schema,
                      cfg.reaper_interval_s, recorder)

    def mover(self, dsn: str, cfg: Any, recorder: Any) -> Mover:
        """A periodic task that moves finished rows to the archive."""
        return Mover(db.connect(dsn, application_name="queue-bench mover"), cfg.schema, recorder)

    def vacuumer(self, dsn: str, cfg: Any, recorder: Any, now_s: Callable[[], float]) -> vacuum.Vacuumer:
        """A periodic task (``run``, ``stop``, ``conn``, ``passes``) that VACUUMs the queue table every
        ``cfg.vacuum_every_s`` seconds on its own connection."""
        return vacuum.Vacuumer(db.connect(dsn, application_name="queue-bench vacuum"), cfg.schema,
                               cfg.vacuum_every_s, recorder, now_s)

    # -- plans and statement statistics
    def capture_plans(self, conn: Any, cfg: Any, when: str) -> tuple[dict | None, str]:
        """The claim's plans (auto, custom, generic) explained now, and ``when`` as said."""
        return captures.capture_plans(conn, cfg, when)

    def workers_plan(self, sessions: list, explain: dict | None, cfg: Any) -> dict:
        """The plan the workers' own sessions ran, from their plan counts and one worker's EXPLAIN."""
        return plans.workers_plan(sessions, explain, prepared=cfg.prepared, plan_cache=cfg.plan_cache)

    def plans_text(self, captured: dict | None, when: str, workers: dict) -> str:
        """``claim_plan.txt``."""
        return plans.plans_text(captured, when, workers)

    def plans_summary(self, captured: dict | None) -> dict | None:
        """The captured plans without their text, for run.json."""
        if captured is None:
            return None
        return {"auto": captured["auto"],
                **{mode: {k: v for k, v in captured[mode].items() if k != "text"} for mode in plans.PLAN_MODES}}

    def plan_warnings(self, workers: dict | None, growth: dict) -> list[str]:
        """Red lines for the report: the workers' claim scans the table, claim latency grew."""
        return plans.plan_warnings(workers, growth)

    def statement_stats_unavailable(self, conn: Any) -> str | None:
        """Why the claim's statement statistics cannot be read, or None."""
        return pg_stat_statements.unavailable_reason(conn)

    def statement_stats_reset(self, conn: Any, cfg: Any, missing: str | None) -> str | None:
        """Reset the claim's statement statistics at the measured window's start."""
        return captures.pgss_reset(conn, cfg, missing)

    def statement_stats_read(self, conn: Any, cfg: Any, missing: str | None, reset: str | None) -> dict:
        """The claim's statement statistics over the measured window."""
        return captures.pgss_read(conn, cfg, missing, reset)

    # -- audit facts
    def audit(self, conn: Any, cfg: Any, claim_log: Any, *, seeded_rows: int, over_claims: int) -> dict:
        """The invariants checked against the database's rows and the claim log: ``invariants``,
        ``status_counts``, ``details``, ``redeliveries``, ``retry_gaps``."""
        return audit.run_audit(conn, cfg.schema, claim_log, seeded_rows=seeded_rows, over_claims=over_claims,
                               poison_share=cfg.poison_share,
                               relation="jobs_all" if cfg.layout == "archive" else "jobs")

    def completed_per_queue(self, conn: Any, cfg: Any, start_unix: float, end_unix: float) -> dict:
        """Jobs completed per queue name in the measured window (client epoch seconds), from the table."""
        return audit.completed_per_queue(conn, cfg.schema, queue_names(queue_count(cfg)), start_unix, end_unix,
                                         relation="jobs_all" if cfg.layout == "archive" else "jobs")

    # -- probes
    def offset_lock_probe(self, dsn: str, schema: str) -> dict:
        """Experiment 4: does ``OFFSET`` in a locking read lock the rows it skips
        (:func:`bench.engines.postgres.probes.offset_lock_probe`)."""
        return probes.offset_lock_probe(dsn, schema)

    def subselect_overclaim_probe(self, dsn: str, schema: str, rows: int = 11, limit: int = 2) -> dict:
        """Experiment 13 (FR-03): can the sub-select claim take more rows than its LIMIT
        (:func:`bench.engines.postgres.probes.subselect_overclaim_probe`)."""
        return probes.subselect_overclaim_probe(dsn, schema, rows, limit)

    # -- fault actions
    def library_worker_command(self, dsn: str, cfg: Any) -> None:
        """None: the built-in queue is no library."""
        return None

    def hold_snapshot(self, dsn: str, schema: str) -> Any:
        """Open a connection holding a snapshot (an old xmin) until :meth:`release`."""
        return fault_actions.hold_snapshot(dsn, schema)

    def killer(self, dsn: str) -> Any:
        """A connection that can terminate worker backends (:meth:`kill_one_worker`)."""
        return fault_actions.killer(dsn)

    def kill_one_worker(self, handle: Any) -> bool:
        """Terminate one random worker's backend; False when there was none."""
        return fault_actions.kill_one_worker(handle)

    def release(self, handle: Any) -> None:
        """Close what :meth:`hold_snapshot` or :meth:`killer` opened."""
        fault_actions.release(handle)


ENGINE = PostgresEngine()
