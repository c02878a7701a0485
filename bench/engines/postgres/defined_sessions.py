"""The sessions of PostgreSQL's queues, each a queue definition (:mod:`bench.config.queue_definition`).

Its workers run the one worker session of PostgreSQL, :class:`bench.engines.postgres.sessions.PgWorkerSession`,
fed by the definition: one autocommit connection per worker, ``search_path`` set to the tool's schema,
the claim, completion and failure prepared once (``$n`` parameters, text format) and waited for through
gevent, the claim inside the wrapper of :func:`bench.engines.postgres.defined_sql.wrapped_claim`. Here:
the session factory of both queue kinds, the columns a written claim returns (read from the server once)
and the producers' one-job ``enqueue``.
"""

from __future__ import annotations

import functools
from typing import Callable

import psycopg

from bench.config.queue_definition import QueueDefinition
from bench.config.run_config import RunConfig
from bench.engines.base import ConnectFailed, Sessions
from bench.engines.postgres import defined_sql
from bench.engines.postgres.error_kinds import error_kind, first_line
from bench.engines.postgres.session import rows
from bench.engines.postgres.sessions import PgProducerSession, PgWorkerSession, _open, _translate, cooperative_wait


def claim_columns(dsn: str, schema: str, body: str) -> list[str]:
    """The names of the columns the claim ``body`` (``$n`` parameters) returns, from the server's
    description of it as an unnamed prepared statement (nothing is executed). Raises psycopg.Error."""
    with psycopg.connect(dsn, autocommit=True, application_name="queue-bench describe") as conn:
        conn.execute(defined_sql.set_search_path(schema))
        return defined_sql.describe_columns(conn, body)


class DefinedProducerSession:
    """A producer's session on a defined queue: its ``enqueue``, one job per execution."""

    def __init__(self, dsn: str, cfg: RunConfig, defn: QueueDefinition, name: str):
        text, self.names = defined_sql.positional(defn.statements["enqueue"])
        self.max_attempts = cfg.max_attempts
        self.session = _open(dsn, f"queue-bench {name}", {"search_path": defined_sql.schema_path(cfg.schema)},
                             {"enqueue": text})

    @property
    def broken(self) -> bool:
        """True once the connection is lost."""
        return self.session.broken

    def insert(self, priorities: list[int], run_at_s: list[float]) -> list[int]:
        """See :meth:`bench.engines.base.ProducerSession.insert`: the ids the enqueue statement returns.
        The enqueue inserts one job; the jobs due together (a producer catching up) are inserted in one
        transaction, one commit for them all, as the built-in producers' one multi-row insert does."""
        ids = []
        many = len(priorities) > 1
        try:
            if many:
                self.session.command(b"BEGIN")
            for priority, run_at in zip(priorities, run_at_s):
                values = {"priority": int(priority), "run_at": float(run_at), "max_attempts": self.max_attempts}
                result = self.session.execute(b"enqueue", [defined_sql.text_param(values[n]) for n in self.names])
                names = [result.fname(i).decode() for i in range(result.nfields)]
                column = names.index("id") if "id" in names else 0  # a library's insert may return (ord, id)
                ids.extend(int(r[column]) for r in rows(result))
            if many:
                self.session.command(b"COMMIT")
        except psycopg.Error as err:
            translated = _translate(err, self.session)
            if many and not self.session.broken and self.session.in_transaction:
                try:
                    self.session.command(b"ROLLBACK")
                except psycopg.Error:
                    pass
            raise translated from None
        return ids

    def close(self) -> None:
        """Close the connection."""
        self.session.close()


class DefinedSessions(Sessions):
    """The :class:`bench.engines.base.SessionFactory` of PostgreSQL's queues, over the run's queue
    definition, ``queue()`` (the built-in queue's, generated, or a written one; asked for at the first
    session, so the factory can check its driver's wait before any run). The columns a wrapped claim
    returns are read from the server once, at the first worker session (the table exists by then).
    Producers run the definition's ``enqueue``; the built-in queue's producers, which have none, run its
    batched insert (:class:`PgProducerSession`)."""

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
            try:
                self.returned = [] if self.defn.claim_row else claim_columns(self.dsn, self.cfg.schema, body)
            except psycopg.Error as err:
                raise ConnectFailed(error_kind(err, connecting=True), first_line(err), lost=True) from None
        return PgWorkerSession(self.dsn, self.cfg, name, self.defn, self.returned)

    def producer_session(self, name: str) -> DefinedProducerSession | PgProducerSession:
        """A new producer session. Raises :class:`bench.engines.base.ConnectFailed`."""
        if "enqueue" not in self.defn.statements:
            return PgProducerSession(self.dsn, self.cfg, name)
        return DefinedProducerSession(self.dsn, self.cfg, self.defn, name)
