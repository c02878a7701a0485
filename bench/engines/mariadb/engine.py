"""MariaDB as a :class:`bench.engines.base.Engine`: each method hands the run's request to the
module of this package that does it (``db``, ``plans``, ``monitor``, ``audit``, ``reaper``,
``fault_actions``, ``sessions``).

Import it after :mod:`bench.load.swarm` (gevent's monkey-patching must precede PyMySQL's import,
so that its socket is gevent's); :func:`bench.engines.get_engine` does so lazily.

Where MySQL 8 differs (untested: no server here), the differences sit behind
:data:`CAPABILITIES` ``features`` and are listed in docs/architecture.md: NOWAIT's error 3572
(classified in :mod:`bench.engines.mariadb.error_kinds`), ``SKIP LOCKED`` since 8.0.1, lock waits
in ``performance_schema.data_lock_waits`` (tried by :func:`bench.engines.mariadb.monitor.lock_waits_source`),
no database comments (the schema mark) and no sequence tables (seeding, audit).
"""

from __future__ import annotations

from typing import Any, Callable

from bench.engines.base import Capabilities
from bench.engines.common import with_connection
from bench.engines.mariadb import cleanup, db, fault_actions, plans, probes
from bench.engines.mariadb.error_kinds import first_line
from bench.engines.mariadb.monitor import Monitor, spawn_samplers
from bench.engines.mariadb.reaper import Reaper
from bench.engines.mariadb.sessions import MariaDBSessions

#: What MariaDB honours (from the parameter table) and where it differs from PostgreSQL.
CAPABILITIES = Capabilities.from_table(
    "mariadb", nowait_error="lock_not_available",
    features={"plan_cache": False, "partial_index": False, "vacuum": False, "update_returning": False,
              "database_comment": True, "sequence_tables": True})

#: Why figures PostgreSQL reports are empty on this engine (the report shows these).
NOT_MEASURED = {
    "dead_tuples": "InnoDB keeps old row versions in its undo log, not in the table: see the history list length",
    "xmin_age": "InnoDB's purge is held back by the oldest read view, shown by the history list length",
    "autovacuum": "InnoDB has no vacuum: its purge thread removes old row versions",
    "pg_stat_statements": "a PostgreSQL extension; MariaDB's per-statement figures are not read by this tool",
}


class MariaDBEngine:
    """The MariaDB engine (see :class:`bench.engines.base.Engine` for every method's contract)."""

    name = "mariadb"
    capabilities = CAPABILITIES
    database_errors = db.DATABASE_ERRORS
    not_measured = NOT_MEASURED

    @property
    def invariants(self) -> tuple[str, ...]:
        """The audit's invariant names."""
        from bench.engines.mariadb.audit import INVARIANTS

        return INVARIANTS

    def connect(self, dsn: str, application_name: str) -> Any:
        """An admin connection (autocommit, UTC); ConfigError (``DSN``) when it cannot connect."""
        return db.connect(dsn, application_name=application_name)

    def is_alive(self, conn: Any) -> bool:
        """The connection still answers."""
        return db.is_alive(conn)

    def server_info(self, conn: Any) -> dict:
        """``server_version`` and the server variables run.json records."""
        return db.server_info(conn)

    def claim_schema(self, conn: Any, schema: str, connections: int) -> dict:
        """Check the database is the tool's (or absent), take its named lock, check connections."""
        db.check_schema_usable(conn, schema)
        db.lock_schema(conn, schema)
        return db.check_capacity(conn, connections)

    def check_schema(self, conn: Any, schema: str, connections: int) -> dict:
        """:meth:`claim_schema` without taking the lock (a sweep's check before its first run)."""
        db.check_schema_usable(conn, schema)
        return db.check_capacity(conn, connections)

    def sessions(self, dsn: str, cfg: Any) -> MariaDBSessions:
        """The worker and producer sessions of the run."""
        return MariaDBSessions(dsn, cfg)

    def error_message(self, err: BaseException) -> str:
        """The first line of a database error's message."""
        return first_line(err)

    def prepare(self, conn: Any, cfg: Any, backlog: int, *, log: Callable[[str], None],
                state_schema: str | None) -> Any:
        """Drop and create the run's database, seed history and backlog, add the index variant."""
        return db.prepare(conn, cfg, backlog, log=log, state_schema=state_schema)

    def table_sizes(self, conn: Any, schema: str) -> dict:
        """``{"table_bytes", "indexes_bytes", "archive_bytes"}`` (InnoDB's estimates)."""
        return db.table_sizes(conn, schema)

    def vacuum_counts(self, conn: Any, schema: str) -> dict:
        """``{"not_applicable": why}``: InnoDB has no vacuum."""
        return {"not_applicable": NOT_MEASURED["autovacuum"]}

    def state_schema_for(self, schema: str) -> str:
        """The name saved states would have (this engine keeps none)."""
        return db.state_schema_for(schema)

    def drop_schema_at(self, dsn: str, schema: str) -> None:
        """Drop the tool's database ``schema`` (only when it carries the tool's mark)."""
        db.drop_schema_at(dsn, schema)

    def clean(self, dsn: str, *, dry_run: bool) -> list:
        """Drop the tool's schemas on ``dsn`` (:func:`bench.engines.mariadb.cleanup.clean`)."""
        return with_connection(lambda: db.connect(dsn, application_name="queue-bench clean"),
                               lambda conn: cleanup.clean(conn, dry_run=dry_run))

    def monitor(self, dsn: str, cfg: Any) -> Monitor:
        """The per-second sampler (lock waits, history list length, depth, oldest eligible age)."""
        return Monitor(lambda name: db.connect(dsn, application_name=name), cfg.schema, cfg.index,
                       priorities=tuple(sorted({0} | {p for p, _ in cfg.priority_mix})))

    def spawn_samplers(self, monitor: Any, now_s: Callable[[], float], n_seconds: int,
                       note: Callable[[int, dict], None]) -> list:
        """Greenlets that call ``note(second, values)`` once per second for ``n_seconds``."""
        return spawn_samplers(monitor, now_s, n_seconds, note)

    def reaper(self, dsn: str, cfg: Any, recorder: Any) -> Reaper:
        """The reaper on its own connection."""
        return Reaper(db.connect(dsn, application_name="queue-bench reaper"), cfg.schema,
                      cfg.reaper_interval_s, recorder)

    def mover(self, dsn: str, cfg: Any, recorder: Any) -> Any:
        """No archive layout on this engine (refused by the parameter table)."""
        raise NotImplementedError("LAYOUT=archive is not built for mariadb")

    def vacuumer(self, dsn: str, cfg: Any, recorder: Any, now_s: Callable[[], float]) -> Any:
        """No vacuum on this engine (``VACUUM_EVERY_S`` is refused by the parameter table)."""
        raise NotImplementedError(NOT_MEASURED["autovacuum"])

    def capture_plans(self, conn: Any, cfg: Any, when: str) -> tuple[dict | None, str]:
        """``EXPLAIN FORMAT=JSON`` of the claim's SELECT now."""
        return plans.capture_plans(conn, cfg, when)

    def workers_plan(self, sessions: list, explain: dict | None, cfg: Any) -> dict:
        """The plan the workers' claim ran, from one worker's ``ANALYZE FORMAT=JSON``."""
        return plans.workers_plan(explain)

    def plans_text(self, captured: dict | None, when: str, workers: dict) -> str:
        """``claim_plan.txt``."""
        return plans.plans_text(captured, when, workers)

    def plans_summary(self, captured: dict | None) -> dict | None:
        """The captured plan without its text, for run.json."""
        if captured is None:
            return None
        return {"auto": None, "explain": {k: v for k, v in captured["explain"].items() if k != "text"}}

    def plan_warnings(self, workers: dict | None, growth: dict) -> list[str]:
        """Red lines: the workers' claim reads a whole table or index; claim latency grew."""
        return plans.plan_warnings(workers, growth)

    def statement_stats_unavailable(self, conn: Any) -> str | None:
        """Per-statement statistics are not read on this engine."""
        return NOT_MEASURED["pg_stat_statements"]

    def statement_stats_reset(self, conn: Any, cfg: Any, missing: str | None) -> str | None:
        """Nothing to reset."""
        return missing

    def statement_stats_read(self, conn: Any, cfg: Any, missing: str | None, reset: str | None) -> dict:
        """``{"unavailable": why}``."""
        return {"unavailable": missing or reset}

    def audit(self, conn: Any, cfg: Any, claim_log: Any, *, seeded_rows: int, over_claims: int) -> dict:
        """The invariants checked against the database's rows and the claim log."""
        from bench.engines.mariadb import audit

        return audit.run_audit(conn, cfg.schema, claim_log, seeded_rows=seeded_rows, over_claims=over_claims,
                               poison_share=cfg.poison_share)

    def completed_per_queue(self, conn: Any, cfg: Any, start_unix: float, end_unix: float) -> dict:
        """Jobs completed per queue name in the measured window (client epoch seconds), from the table."""
        from bench.engines.mariadb import audit
        from bench.workload.queues import queue_count, queue_names

        return audit.completed_per_queue(conn, cfg.schema, queue_names(queue_count(cfg)), start_unix, end_unix)

    def offset_lock_probe(self, dsn: str, schema: str) -> dict:
        """Experiment 4: does ``OFFSET`` in a locking read lock the rows it skips
        (:func:`bench.engines.mariadb.probes.offset_lock_probe`)."""
        return probes.offset_lock_probe(dsn, schema)

    def subselect_overclaim_probe(self, dsn: str, schema: str, rows: int = 11, limit: int = 2) -> dict:
        """Experiment 13 (FR-03): can the sub-select claim take more rows than its LIMIT
        (:func:`bench.engines.mariadb.probes.subselect_overclaim_probe`)."""
        return probes.subselect_overclaim_probe(dsn, schema, rows, limit)

    def library_worker_command(self, dsn: str, cfg: Any) -> None:
        """None: queue libraries run on PostgreSQL."""
        return None

    def hold_snapshot(self, dsn: str, schema: str) -> Any:
        """A transaction holding a read view (purge stalls; the history list grows)."""
        return fault_actions.hold_snapshot(dsn, schema)

    def killer(self, dsn: str) -> Any:
        """A connection that can kill worker connections."""
        return fault_actions.killer(dsn)

    def kill_one_worker(self, handle: Any) -> bool:
        """Kill one random worker connection; False when there was none."""
        return fault_actions.kill_one_worker(handle)

    def release(self, handle: Any) -> None:
        """Close what :meth:`hold_snapshot` or :meth:`killer` opened."""
        fault_actions.release(handle)


ENGINE = MariaDBEngine()
