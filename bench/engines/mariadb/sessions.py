"""MariaDB's worker and producer sessions over PyMySQL: one autocommit connection each, statements sent as
text; every PyMySQL error leaves as an :class:`bench.engines.base.EngineError`."""

from __future__ import annotations

import contextlib
import random
import threading

from bench.config.choices import EFFECTS_DURING_WORK
from bench.config.run_config import RunConfig
from bench.engines.base import ClaimedRow, ConnectFailed, EngineError
from bench.engines.common import poll_wait
from bench.engines.mariadb import policies
from bench.engines.mariadb.adapter import open_connection, results, statement_bounded, translated
from bench.workload.queues import flood_share, queue_count, queue_index, queue_names

#: Connection ids of this process's open worker sessions (``backend_kill`` picks from them).
WORKER_CONNECTION_IDS: set[int] = set()
_IDS_LOCK = threading.Lock()


class _Session:
    """One connection and its transaction state; ``round_trips`` counts the network exchanges sent since it opened
    (one per :meth:`run` or ``ROLLBACK``, however many statements a text holds; the set-up at open not counted)."""

    def __init__(self, dsn: str, cfg: RunConfig, name: str, *, isolation: str | None):
        self.cfg = cfg
        self.name = name
        self._broken = False
        self._in_tx = False
        self.conn = open_connection(dsn, isolation=isolation, program=f"queue-bench {name}")
        self.cur = self.conn.cursor()
        self.connection_id = self.conn.thread_id()
        self.round_trips = 0

    @property
    def broken(self) -> bool:
        """True once the connection is lost."""
        return self._broken

    @property
    def round_trips_sent(self) -> int:
        """:attr:`round_trips` (a worker adds its effects' own connection's)."""
        return self.round_trips

    def _reach_table(self) -> None:
        """Read nothing from the queue table, so a session that cannot reach it (no such table on this server,
        no privilege) is refused as it opens, as a PostgreSQL session preparing its claim is (MariaDB prepares
        nothing). Raises :class:`ConnectFailed` (the connection closed)."""
        try:
            with translated(connecting=True):
                results(self.cur, f"SELECT 1 FROM {policies.ident(self.cfg.schema, 'jobs')} LIMIT 0")
        except ConnectFailed:
            self.close()
            raise

    @property
    def in_transaction(self) -> bool:
        """True while a transaction is open (or failed)."""
        return self._in_tx

    def run(self, text: str, policy: str | None = None) -> list[tuple[int, tuple]]:
        """:func:`results` of ``text``, errors translated (``policy``: the claim's, for 1205); a lost connection
        marks the session broken."""
        self.round_trips += 1
        try:
            with translated(policy=policy):
                return results(self.cur, text)
        except EngineError as err:
            if err.lost:
                self._broken = True
                self._in_tx = False
            raise

    def atomic(self, statements: list[str]) -> list[tuple[int, tuple]]:
        """Each statement's :func:`results` in the open transaction, else in one of their own (rolled back when
        one fails)."""
        if self._in_tx:
            return self.run(";".join(statements))
        try:
            return self.run(";".join(["START TRANSACTION", *statements, "COMMIT"]))[1:-1]
        except EngineError:
            self._in_tx = True
            self.rollback()
            raise

    def begin(self) -> None:
        """Open a transaction."""
        self.run("START TRANSACTION")
        self._in_tx = True

    def commit(self) -> None:
        """Commit the open transaction."""
        self.run("COMMIT")
        self._in_tx = False

    def rollback(self) -> None:
        """Roll back the open transaction, if any; never raises."""
        if not self._broken and self._in_tx:
            self.round_trips += 1
            try:
                with translated():
                    results(self.cur, "ROLLBACK")
            except EngineError:
                self._broken = True
        self._in_tx = False

    def close(self) -> None:
        """Close the connection."""
        self._broken = True
        self._in_tx = False
        with contextlib.suppress(EngineError), translated():
            self.conn.close()


class MariaDBWorkerSession(_Session):
    """A worker's session: its claim transaction, completions and failures (see
    :mod:`bench.engines.mariadb.policies` for the statements)."""

    def __init__(self, dsn: str, cfg: RunConfig, name: str):
        super().__init__(dsn, cfg, name, isolation=cfg.isolation)
        self._reach_table()
        self.select = policies.claim_select(cfg.schema, cfg.policy, cfg.index, cfg.batch,
                                            queue_names(queue_count(cfg)))
        with _IDS_LOCK:
            WORKER_CONNECTION_IDS.add(self.connection_id)
        # EFFECTS outside/idempotent with TXN=hold: a connection of their own, outside the claim's transaction
        # (why: docs/effects.md); with TXN=short this one, between transactions.
        self.effects = None
        if cfg.effects in EFFECTS_DURING_WORK and cfg.txn == "hold":
            try:
                self.effects = _Session(dsn, cfg, f"{name} effects", isolation=None)
            except ConnectFailed:
                self.close()
                raise

    @property
    def broken(self) -> bool:
        """True once the connection (or the effects' own) is lost."""
        return self._broken or (self.effects is not None and self.effects.broken)

    @property
    def round_trips_sent(self) -> int:
        """Round trips sent on this connection and the effects' own since they opened."""
        return self.round_trips + (self.effects.round_trips if self.effects is not None else 0)

    def effect(self, job_id: int, token: int) -> bool:
        """See :meth:`bench.engines.base.WorkerSession.effect`; a lost effects connection closes both."""
        session = self.effects or self
        try:
            results = session.run(policies.effect(self.cfg.schema, job_id, token, ignore=self.cfg.effects == "idempotent"))
        except EngineError:
            if session.broken:
                self.close()
            raise
        return results[-1][0] != 0  # INSERT IGNORE of a held key: 0 rows; -1: not reported

    def claim(self) -> list[ClaimedRow]:
        """See :meth:`bench.engines.base.WorkerSession.claim`: two round trips (one when nothing is eligible)."""
        own = not self._in_tx
        schema = self.cfg.schema
        try:
            if own:
                self._in_tx = True
                ids = [int(r[0]) for r in self.run("START TRANSACTION;" + self.select, self.cfg.policy)[1][1]]
            else:
                ids = [int(r[0]) for r in self.run(self.select, self.cfg.policy)[0][1]]
            if not ids:
                if own:
                    self.commit()
                return []
            text = (policies.claim_update(schema, ids, self.name, self.cfg.lease_s) + ";"
                    + policies.claim_rows(schema, ids) + (";COMMIT" if own else ""))
            claimed = self.run(text)[1][1]
            if own:
                self._in_tx = False
        except EngineError:
            if own:
                self.rollback()
            raise
        return [(int(r[0]), int(r[1]), int(r[2]), int(r[3]), float(r[4]), float(r[5])) for r in claimed]

    def complete(self, jobs: list[tuple[int, int]]) -> set[int]:
        """See :meth:`bench.engines.base.WorkerSession.complete`: a fenced UPDATE per job, one round trip."""
        schema = self.cfg.schema
        if self.cfg.effects == "same_txn":  # each completion and its fenced effect row, one transaction
            statements = [text for job_id, token in jobs for text in (
                policies.complete_one(schema, job_id, token), policies.effect_if_completed(schema, job_id, token))]
            return {job_id for (job_id, _), (n, _) in zip(jobs, self.atomic(statements)[::2]) if n == 1}
        statements = [policies.complete_one(schema, job_id, token) for job_id, token in jobs]
        out = self.run(statements[0]) if len(jobs) == 1 else self.atomic(statements)
        return {job_id for (job_id, _), (n, _) in zip(jobs, out) if n == 1}

    def fail(self, job_id: int, token: int, retry_delay_s: float, error: str) -> str | None:
        """See :meth:`bench.engines.base.WorkerSession.fail`: the fenced UPDATE and the new status, one transaction."""
        schema = self.cfg.schema
        out = self.atomic([policies.fail(schema, job_id, token, retry_delay_s, error),
                           policies.status_of(schema, job_id, token)])
        changed, status = out[0][0], out[1][1]
        return str(status[0][0]) if changed == 1 and status else None

    def wait_for_work(self, timeout_s: float) -> bool:
        """Sleep ``timeout_s`` (MariaDB has no LISTEN/NOTIFY: workers poll); returns False."""
        return poll_wait(timeout_s)

    def plan_counts(self) -> dict[str, int] | None:
        """None: MariaDB plans every statement sent as text (no plan cache to read)."""
        return None

    def explain_claim(self, timeout_ms: int) -> str:
        """``ANALYZE FORMAT=JSON`` (https://mariadb.com/kb/en/analyze-format-json/) of this session's claim
        SELECT, rolled back, bounded by ``timeout_ms``."""
        self.rollback()
        try:
            self.begin()
            out = self.run(statement_bounded("ANALYZE FORMAT=JSON " + self.select, timeout_ms), self.cfg.policy)
            return str(out[0][1][0][0])
        finally:
            self.rollback()

    def close(self) -> None:
        """Close the connection (and the effects' own)."""
        with _IDS_LOCK:
            WORKER_CONNECTION_IDS.discard(self.connection_id)
        if getattr(self, "effects", None) is not None:
            self.effects.close()
        super().close()


class MariaDBProducerSession(_Session):
    """A producer's session: one multi-row ``INSERT … RETURNING``."""

    def __init__(self, dsn: str, cfg: RunConfig, name: str):
        super().__init__(dsn, cfg, name, isolation=None)
        self.queues, self.flood, self.rng = queue_names(queue_count(cfg)), flood_share(cfg), random.Random()

    def insert(self, priorities: list[int], run_at_s: list[float]) -> list[int]:
        """See :meth:`bench.engines.base.ProducerSession.insert` (each job's queue drawn here)."""
        n = len(self.queues)
        queues = [self.queues[queue_index(self.rng.random(), n, self.flood)] for _ in priorities] if n > 1 else None
        rows = self.run(policies.insert(self.cfg.schema, priorities, run_at_s, self.cfg.max_attempts, queues))[0][1]
        return [int(r[0]) for r in rows]
