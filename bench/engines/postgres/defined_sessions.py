"""The session factory of PostgreSQL's queue definitions (:mod:`bench.config.queue_definition`): workers
are :class:`bench.engines.postgres.sessions.PgWorkerSession` fed by the definition; producers run its
one-job ``enqueue``."""

from __future__ import annotations

import functools
from typing import Callable

from bench.config.failover_parameters import sync_commit_settings
from bench.config.queue_definition import QueueDefinition
from bench.config.run_config import RunConfig
from bench.engines.base import EngineError, SessionFactory
from bench.engines.postgres import defined_sql
from bench.engines.postgres.adapter import connect, cooperative_wait, local_transaction, translated
from bench.engines.postgres.adapter.wire import rows
from bench.engines.postgres.sessions import PgProducerSession, PgWorkerSession, _open


def claim_columns(dsn: str, schema: str, body: str) -> list[str]:
    """:func:`defined_sql.describe_columns` of ``body`` on a connection of its own, under ``schema``'s
    ``search_path`` set for one transaction (``SET LOCAL``: nothing left on a pooled server connection). Raises
    :class:`ConnectFailed`."""
    with connect(dsn, application_name="queue-bench describe") as conn:
        with translated(connecting=True), local_transaction(conn, {"search_path": schema}):
            return defined_sql.describe_columns(conn, body)


class DefinedProducerSession(PgProducerSession):
    """A producer's session on a defined queue: its ``enqueue``, one job per execution."""

    def __init__(self, dsn: str, cfg: RunConfig, defn: QueueDefinition, name: str):
        text, self.names = defined_sql.positional(defn.statements["enqueue"])
        self.max_attempts = cfg.max_attempts
        self.session = _open(dsn, cfg, f"queue-bench {name}",
                             {"search_path": cfg.schema, **sync_commit_settings(cfg.sync_commit)}, {"enqueue": text})

    def insert(self, priorities: list[int], run_at_s: list[float]) -> list[int]:
        """See :meth:`bench.engines.base.ProducerSession.insert`: the enqueue's ids; jobs due together in one
        transaction, as the built-in producers' one insert."""
        ids = []
        many = len(priorities) > 1
        try:
            with translated(lambda: self.session.broken):
                self._enqueue(priorities, run_at_s, many, ids)
        except EngineError:
            if many:
                self.session.rollback()
            raise
        return ids

    def _enqueue(self, priorities: list[int], run_at_s: list[float], many: bool, ids: list[int]) -> None:
        """Run ``enqueue`` per job (in one transaction when ``many``), its ids appended to ``ids``."""
        if many:
            self.session.query(b"BEGIN")
        for priority, run_at in zip(priorities, run_at_s):
            values = {"priority": int(priority), "run_at": float(run_at), "max_attempts": self.max_attempts}
            result = self.session.execute(b"enqueue", [defined_sql.text_param(values[n]) for n in self.names])
            names = [result.fname(i).decode() for i in range(result.nfields)]
            column = names.index("id") if "id" in names else 0  # a library's insert may return (ord, id)
            ids.extend(int(r[column]) for r in rows(result))
        if many:
            self.session.query(b"COMMIT")


class DefinedSessions(SessionFactory):
    """The :class:`bench.engines.base.SessionFactory` of PostgreSQL's queues over ``queue()``, the run's
    definition (asked for at the first session); a wrapped claim's columns read once, at the first worker
    session. Producers run ``enqueue``, else the built-in batched insert (:class:`PgProducerSession`)."""

    def __init__(self, dsn: str, cfg: RunConfig, queue: Callable[[], QueueDefinition]):
        super().__init__(dsn, cfg, PgWorkerSession, DefinedProducerSession, cooperative_wait)
        self.queue = queue
        self.returned: list[str] | None = None

    @functools.cached_property
    def defn(self) -> QueueDefinition:
        """The run's queue definition."""
        return self.queue()

    def worker_session(self, name: str) -> PgWorkerSession:
        """A new worker session. Raises :class:`bench.engines.base.ConnectFailed`."""
        if self.returned is None:
            body, _ = defined_sql.positional(defined_sql.claim_body(self.defn, self.cfg.policy))
            self.returned = [] if self.defn.claim_row else claim_columns(self.dsn, self.cfg.schema, body)
        return PgWorkerSession(self.dsn, self.cfg, name, self.defn, self.returned)

    def producer_session(self, name: str) -> DefinedProducerSession | PgProducerSession:
        """A new producer session. Raises :class:`bench.engines.base.ConnectFailed`."""
        if "enqueue" not in self.defn.statements:
            return PgProducerSession(self.dsn, self.cfg, name)
        return DefinedProducerSession(self.dsn, self.cfg, self.defn, name)
