"""PostgreSQL's worker and producer sessions (:mod:`bench.engines.base`), over :class:`PreparedSession`.

Each session owns one autocommit psycopg connection, prepared once with the
statements of :mod:`bench.engines.postgres.policies`. Results come back as
Python ints and floats; every psycopg error leaves as a
:class:`bench.engines.base.EngineError` keyed by its SQLSTATE or a named kind
(:func:`bench.engines.postgres.error_kinds.error_kind`). psycopg must be imported
after gevent's monkey-patching (``bench.load.swarm`` does it first), so that its
wait function cooperates: :func:`cooperative_wait` verifies it.
"""

from __future__ import annotations

import random

import psycopg
import psycopg.waiting
from gevent import monkey
from psycopg import sql

from bench.config.run_config import RunConfig
from bench.engines.base import ClaimedRow, ConnectFailed, EngineError, LockNotAvailable
from bench.engines.common import poll_wait
from bench.engines.postgres import policies
from bench.engines.postgres.error_kinds import error_kind, first_line
from bench.engines.postgres.session import PreparedSession, int_array, rows
from bench.workload.queues import flood_share, queue_count, queue_index, queue_names


#: ``ISOLATION`` values and PostgreSQL's names for them
#: (https://www.postgresql.org/docs/current/runtime-config-client.html#GUC-DEFAULT-TRANSACTION-ISOLATION).
ISOLATION_LEVELS = {"read_committed": "read committed", "repeatable_read": "repeatable read",
                    "serializable": "serializable"}


def _translate(err: psycopg.Error, session: PreparedSession) -> EngineError:
    if isinstance(err, psycopg.errors.LockNotAvailable):
        return LockNotAvailable("55P03", first_line(err))
    return EngineError(error_kind(err, lost=session.broken), first_line(err), lost=session.broken)


def _open(dsn: str, application_name: str, settings: dict[str, str], statements: dict[str, str]) -> PreparedSession:
    """Connect, apply ``settings`` (before anything is prepared or planned), prepare ``statements``.
    Raises :class:`ConnectFailed`."""
    conn = None
    try:
        conn = psycopg.connect(dsn, autocommit=True, application_name=application_name)
        for name, value in settings.items():
            conn.execute(sql.SQL("SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
        return PreparedSession(conn, statements)
    except psycopg.Error as err:
        if conn is not None:
            conn.close()
        raise ConnectFailed(error_kind(err, connecting=True), first_line(err), lost=True) from None


class PgWorkerSession:
    """A worker's session: its claim (prepared, or literal with ``PREPARED=0``), completions, failures."""

    def __init__(self, dsn: str, cfg: RunConfig, name: str):
        self.cfg = cfg
        self.name = name
        self.queues = queue_names(queue_count(cfg))
        order = cfg.tenant_order if cfg.tenants > 1 else "plain"
        statements = policies.prepared_statements(cfg.schema, cfg.policy, len(self.queues), order)
        self.claim_params = [str(cfg.batch).encode(), name.encode(), repr(float(cfg.lease_s)).encode()]
        if len(self.queues) > 1:
            self.claim_params.append(policies.text_array(self.queues).encode())
        self.claim_text = None
        if not cfg.prepared:  # PREPARED=0: the claim goes unprepared, its values inlined
            del statements["claim"]
            self.claim_text = policies.literal_claim(cfg.schema, cfg.policy, cfg.batch, name, cfg.lease_s,
                                                     self.queues, order).encode()
        settings = {"plan_cache_mode": cfg.plan_cache} if cfg.plan_cache != "auto" else {}
        if cfg.isolation != "read_committed":  # PostgreSQL's default; others are set on the session
            settings["default_transaction_isolation"] = ISOLATION_LEVELS[cfg.isolation]
        self.session = _open(dsn, f"queue-bench {name}", settings, statements)
        self.notify = cfg.wakeup == "notify"
        if self.notify:
            try:
                self.session.command(sql.SQL("LISTEN {}").format(
                    sql.Identifier(policies.notify_channel(cfg.schema))).as_string(None).encode())
            except psycopg.Error as err:
                self.session.close()
                raise ConnectFailed(error_kind(err, connecting=True), first_line(err), lost=True) from None

    @property
    def broken(self) -> bool:
        """True once the connection is lost."""
        return self.session.broken

    def wait_for_work(self, timeout_s: float) -> bool:
        """See :meth:`bench.engines.base.WorkerSession.wait_for_work`: with ``WAKEUP=notify`` a wait
        for a notification on this session's ``LISTEN`` channel, else a sleep."""
        if not self.notify:
            return poll_wait(timeout_s)
        try:
            return self.session.wait_notification(timeout_s)
        except psycopg.Error as err:
            raise _translate(err, self.session) from None

    @property
    def in_transaction(self) -> bool:
        """True while a transaction is open (or failed)."""
        return self.session.in_transaction

    def _claim_rows(self) -> list[tuple[bytes | None, ...]]:
        """Run the claim (prepared, or the literal claim); its rows as raw text values."""
        try:
            if self.claim_text is None:
                return rows(self.session.execute(b"claim", self.claim_params))
            return rows(self.session.query(self.claim_text))
        except psycopg.Error as err:
            raise _translate(err, self.session) from None

    def claim(self) -> list[ClaimedRow]:
        """See :meth:`bench.engines.base.WorkerSession.claim`."""
        return [(int(r[0]), int(r[1]), int(r[2]), int(r[3]), float(r[4]), float(r[5])) for r in self._claim_rows()]

    def complete(self, jobs: list[tuple[int, int]]) -> set[int]:
        """See :meth:`bench.engines.base.WorkerSession.complete`."""
        try:
            if len(jobs) == 1:
                job_id, token = jobs[0]
                result = self.session.execute(b"complete_one", [str(job_id).encode(), str(token).encode()])
                return {job_id} if result.command_tuples == 1 else set()
            result = self.session.execute(b"complete_many", [int_array([j[0] for j in jobs]),
                                                             int_array([j[1] for j in jobs])])
        except psycopg.Error as err:
            raise _translate(err, self.session) from None
        return {int(r[0]) for r in rows(result)}

    def fail(self, job_id: int, token: int, retry_delay_s: float, error: str) -> str | None:
        """See :meth:`bench.engines.base.WorkerSession.fail`."""
        try:
            result = self.session.execute(b"fail", [str(job_id).encode(), str(token).encode(),
                                                    repr(retry_delay_s).encode(), error.encode()])
        except psycopg.Error as err:
            raise _translate(err, self.session) from None
        status = rows(result)
        return status[0][0].decode() if status else None

    def _command(self, command: bytes) -> None:
        try:
            self.session.command(command)
        except psycopg.Error as err:
            raise _translate(err, self.session) from None

    def begin(self) -> None:
        """Open a transaction."""
        self._command(b"BEGIN")

    def commit(self) -> None:
        """Commit the open transaction."""
        self._command(b"COMMIT")

    def rollback(self) -> None:
        """Roll back the open transaction, if any; never raises."""
        if not self.session.broken and self.session.in_transaction:
            try:
                self.session.command(b"ROLLBACK")
            except psycopg.Error:
                pass

    def plan_counts(self) -> dict[str, int] | None:
        """``generic_plans``/``custom_plans`` of this session's prepared claim (PostgreSQL 14+:
        https://www.postgresql.org/docs/current/view-pg-prepared-statements.html); None unprepared.
        The view shows only the session's own statements, so only the worker can read it."""
        if self.claim_text is not None:
            return None
        try:
            counts = rows(self.session.query(b"SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                                             b"WHERE name = 'claim'"))
        except psycopg.Error as err:
            raise _translate(err, self.session) from None
        return {"generic_plans": int(counts[0][0]), "custom_plans": int(counts[0][1])} if counts else None

    def explain_claim(self, timeout_ms: int) -> str:
        """``EXPLAIN (ANALYZE, BUFFERS)`` of the claim as this session runs it, in a transaction
        rolled back: ``EXECUTE`` of its cached statement when prepared (the plan the plan cache
        gives it; it adds one execution, so read :meth:`plan_counts` first), else the literal claim."""
        target = self._explained_claim()
        self.rollback()
        try:
            result = self.session.query(b"BEGIN; SET LOCAL statement_timeout = '%d'; EXPLAIN (ANALYZE, BUFFERS) "
                                        % timeout_ms + target)
            return "\n".join(r[0].decode() for r in rows(result))
        except psycopg.Error as err:
            raise _translate(err, self.session) from None
        finally:
            self.rollback()

    def _explained_claim(self) -> bytes:
        """The claim as :meth:`explain_claim` runs it: ``EXECUTE`` of the prepared claim with this
        session's values, or the literal claim."""
        if self.claim_text is not None:
            return self.claim_text
        cfg = self.cfg
        return f"EXECUTE claim({', '.join(policies.claim_arguments(cfg.batch, self.name, cfg.lease_s, self.queues))})".encode()

    def close(self) -> None:
        """Close the connection."""
        self.session.close()


class PgProducerSession:
    """A producer's session: one prepared multi-row insert (which also notifies with ``WAKEUP=notify``)."""

    def __init__(self, dsn: str, cfg: RunConfig, name: str):
        self.queues = queue_names(queue_count(cfg))
        self.flood = flood_share(cfg)
        self.rng = random.Random()
        self.session = _open(dsn, f"queue-bench {name}", {},
                             {"insert": policies.insert_sql(cfg.schema, cfg.max_attempts,
                                                            notify=cfg.wakeup == "notify", queues=len(self.queues))})

    @property
    def broken(self) -> bool:
        """True once the connection is lost."""
        return self.session.broken

    def insert(self, priorities: list[int], run_at_s: list[float]) -> list[int]:
        """See :meth:`bench.engines.base.ProducerSession.insert`."""
        params = [("{" + ",".join(map(str, priorities)) + "}").encode(),
                  ("{" + ",".join(repr(t) for t in run_at_s) + "}").encode()]
        if len(self.queues) > 1:  # each job's queue drawn here (bench.workload.queues)
            n = len(self.queues)
            params.append(policies.text_array([self.queues[queue_index(self.rng.random(), n, self.flood)]
                                               for _ in priorities]).encode())
        try:
            result = self.session.execute(b"insert", params)
        except psycopg.Error as err:
            raise _translate(err, self.session) from None
        return [int(r[0]) for r in rows(result)]

    def close(self) -> None:
        """Close the connection."""
        self.session.close()


def cooperative_wait() -> str:
    """psycopg's wait function's name; RuntimeError if it is the blocking C ``wait_c`` or ``select`` is not
    monkey-patched (see psycopg ``psycopg/waiting.py``)."""
    name = getattr(psycopg.waiting.wait, "__name__", str(psycopg.waiting.wait))
    patched = monkey.is_module_patched("select")
    if not patched or name == "wait_c":
        raise RuntimeError(
            f"psycopg uses {name} with select {'patched' if patched else 'not patched'}: "
            "a greenlet waiting on a row lock would block every worker; import bench.load.swarm before psycopg")
    return name
