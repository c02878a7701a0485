"""MariaDB as a :class:`bench.engines.base.Engine`: the modules the shared flows call, and where it differs
(MySQL 8's differences: docs/architecture.md). Imported after gevent's patching."""

from __future__ import annotations

from typing import Any

from bench.engines.base import Engine
from bench.engines.mariadb import CAPABILITIES, audit, db, dsn, fault_actions, plans, probes
from bench.engines.mariadb.adapter import DRIVER, cooperative_wait
from bench.engines.mariadb.monitor import Monitor
from bench.engines.mariadb.reaper import Reaper
from bench.engines.mariadb.sessions import MariaDBProducerSession, MariaDBWorkerSession
from bench.workload.queues import queue_count, queue_names


class MariaDBEngine(Engine):
    """The MariaDB engine (see :class:`bench.engines.base.Engine` for every method's contract)."""

    name = "mariadb"
    capabilities = CAPABILITIES
    db, plans, probes, faults, dsns = db, plans, probes, fault_actions, dsn
    driver = DRIVER
    worker_session, producer_session = MariaDBWorkerSession, MariaDBProducerSession
    cooperative_wait = staticmethod(cooperative_wait)
    reaper_task = Reaper
    #: Why figures PostgreSQL reports are empty on this engine (the report shows these).
    not_measured = {
        "dead_tuples": "InnoDB keeps old row versions in its undo log, not in the table: see the history list length",
        "xmin_age": "InnoDB's purge is held back by the oldest read view, shown by the history list length",
        "autovacuum": "InnoDB has no vacuum: its purge thread removes old row versions",
        "pg_stat_statements": "a PostgreSQL extension; MariaDB's per-statement figures are not read by this tool",
        "wait_events": "not measured on MariaDB: its wait events are in performance_schema, which is off unless the "
                       "server was started with it (performance_schema=ON) and its wait instruments enabled",
    }

    def monitor(self, dsn: str, cfg: Any) -> Monitor:
        """The per-second sampler (lock waits, history list length, depth, oldest eligible age)."""
        return Monitor(lambda name: db.connect(dsn, application_name=name), cfg.schema, cfg.index,
                       priorities=tuple(sorted({0} | {p for p, _ in cfg.priority_mix})),
                       lock_queue=any(f.kind == "migration" for f in cfg.faults))

    def migration_statement(self, cfg: Any, fault: Any) -> str:
        """A ``migration`` window's SQL on the queue table (:data:`fault_actions.MIGRATION_DDL`)."""
        return fault_actions.migration_statement(fault, cfg.schema)

    def workers_plan(self, sessions: list, explain: dict | None, cfg: Any) -> dict:
        """The plan the workers' claim ran, from one worker's ``ANALYZE FORMAT=JSON`` (no plan cache)."""
        return plans.workers_plan(explain)

    def plans_summary(self, captured: dict | None) -> dict | None:
        """The captured plan without its text."""
        if captured is None:
            return None
        return {"auto": None, "explain": {k: v for k, v in captured["explain"].items() if k != "text"}}

    def audit(self, conn: Any, cfg: Any, claim_log: Any, *, seeded_rows: int, over_claims: int) -> dict:
        """:func:`bench.engines.mariadb.audit.run_audit` on the run's table."""
        return audit.run_audit(conn, cfg.schema, claim_log, seeded_rows=seeded_rows, over_claims=over_claims,
                               poison_share=cfg.poison_share, effects=cfg.effects)

    def completed_per_queue(self, conn: Any, cfg: Any, start_unix: float, end_unix: float) -> dict:
        """Jobs completed per queue name in the measured window, from the table."""
        return audit.completed_per_queue(conn, cfg.schema, queue_names(queue_count(cfg)), start_unix, end_unix)


ENGINE = MariaDBEngine()
