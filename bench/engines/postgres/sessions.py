"""PostgreSQL's worker and producer sessions over :class:`PreparedSession`: one autocommit connection each,
prepared with its queue definition's statements; every psycopg error leaves as an
:class:`bench.engines.base.EngineError`."""

from __future__ import annotations

import random

from psycopg import sql

from bench.config.choices import EFFECTS_WRITTEN
from bench.config.failover_parameters import sync_commit_settings
from bench.config.queue_definition import STATEMENT_PARAMETERS, QueueDefinition, is_builtin
from bench.config.run_config import RunConfig
from bench.engines.base import ClaimedRow, ConnectFailed, EngineError
from bench.engines.common import poll_wait
from bench.engines.postgres import builtin_queue, defined_sql, policies
from bench.engines.postgres.adapter import SessionState, open_session, translated
from bench.engines.postgres.adapter.wire import PreparedSession, rows
from bench.workload.queues import flood_share, queue_count, queue_index, queue_names


#: ``ISOLATION`` values and PostgreSQL's names for them
#: (https://www.postgresql.org/docs/current/runtime-config-client.html#GUC-DEFAULT-TRANSACTION-ISOLATION).
ISOLATION_LEVELS = {"read_committed": "read committed", "repeatable_read": "repeatable read",
                    "serializable": "serializable"}


def worker_settings(defn: QueueDefinition, cfg: RunConfig) -> dict[str, str]:
    """A worker session's settings: ``defn``'s ``[settings]``, then the run's (``search_path``, ``PLAN_CACHE``,
    ``ISOLATION``, ``SYNC_COMMIT``), which win over the definition's."""
    settings = {**defn.settings, "search_path": cfg.schema}
    if cfg.plan_cache not in ("auto", "n/a"):
        settings["plan_cache_mode"] = cfg.plan_cache
    if cfg.isolation != "read_committed":  # PostgreSQL's default; others are set on the session
        settings["default_transaction_isolation"] = ISOLATION_LEVELS[cfg.isolation]
    return {**settings, **sync_commit_settings(cfg.sync_commit)}


def _open(dsn: str, cfg: RunConfig, application_name: str, settings: dict[str, str], statements: dict[str, str],
          listen: str | None = None) -> PreparedSession:
    """The adapter's :func:`open_session` with this state, stateless behind a transaction pool
    (:meth:`RunConfig.stateless_sessions`). Raises :class:`ConnectFailed`."""
    return open_session(dsn, application_name, SessionState(settings, statements, listen,
                                                            stateless=cfg.stateless_sessions()))


class _Session:
    """A session over one :class:`PreparedSession`."""

    session: PreparedSession

    #: a second connection of the session's (a worker's effects with ``TXN=hold``), or None / the same one
    effects: PreparedSession | None = None

    @property
    def round_trips_sent(self) -> int:
        """Round trips sent on the session's connection (and the second one) since they opened."""
        second = self.effects.round_trips if self.effects is not None and self.effects is not self.session else 0
        return self.session.round_trips + second

    @property
    def broken(self) -> bool:
        """True once the connection (or the second one) is lost."""
        return self.session.broken or (self.effects is not None and self.effects.broken)

    def close(self) -> None:
        """Close the connection (and the second one)."""
        self.session.close()
        if self.effects is not None and self.effects is not self.session:
            self.effects.close()


class PgWorkerSession(_Session):
    """A worker's session on queue ``defn`` (default: the run's built-in queue): claim (prepared, or literal
    with ``PREPARED=0``; wrapped unless it returns the claimed row), complete(_many), fail. ``returned``: the
    columns a wrapped claim returns."""

    def __init__(self, dsn: str, cfg: RunConfig, name: str, defn: QueueDefinition | None = None,
                 returned: list[str] = ()):
        self.cfg, self.name = cfg, name
        self.defn = defn = defn or builtin_queue.definition(cfg)
        self.queues = queue_names(queue_count(cfg))
        order = defn.parameter_order
        body, self.claim_names = defined_sql.positional(defined_sql.claim_body(defn, cfg.policy), order.get("claim", ()))
        self.claim_values = {**defined_sql.claim_values(cfg.batch, name, cfg.lease_s),
                             "queues": policies.text_array(self.queues)}
        statements = {"claim": self._wrapped(body, returned)}
        params: dict[str, list[str]] = {}
        for key in ("complete", "complete_many", "fail"):
            if key in defn.statements:
                statements[key], params[key] = defined_sql.positional(defn.statements[key], order.get(key, ()))
        settings = worker_settings(defn, cfg)
        self.stateless = cfg.stateless_sessions()  # behind a transaction pool: every statement unnamed, bound
        if not cfg.prepared and not self.stateless:  # PREPARED=0: the claim goes unprepared, its values inlined
            del statements["claim"]
        effect, self.effect_at_completion = _effect(defn, cfg)
        if effect is not None and (cfg.txn != "hold" or self.effect_at_completion):
            statements["effect"] = effect
        self.notify = cfg.wakeup == "notify"
        self.session = _open(dsn, cfg, f"queue-bench {name}", settings, statements,
                             policies.notify_channel(cfg.schema) if self.notify else None)
        if "register" in defn.statements:
            self._register(defn.statements["register"])
        self.worker_id = self.claim_values["worker_id"] if "register" in defn.statements else None
        self.claim_params = [defined_sql.text_param(self.claim_values[n]) for n in self.claim_names]
        # Per statement, its name and where each of its parameters sits among the arguments _run is given
        # (STATEMENT_PARAMETERS' order), worked out once: a completion then only encodes its own values.
        self.bound = {key: (key.encode(), [list(STATEMENT_PARAMETERS[key]).index(n) for n in names])
                      for key, names in params.items()}
        self.worker_param = defined_sql.text_param(self.worker_id)
        literal = self._wrapped(defined_sql.literal(defined_sql.claim_body(defn, cfg.policy), self.claim_values),
                                returned).encode()
        self.claim_text = None if cfg.prepared or self.stateless else literal
        self.explained = literal if self.stateless else None  # what explain_claim runs when not EXECUTE claim
        if effect is not None and not self.effect_at_completion:
            self.effects = (self.session if cfg.txn != "hold"
                            else self._second_connection(dsn, cfg, name, settings, effect))
        if self.effect_at_completion:  # bound here: without it complete() is as it was
            self.complete = self._complete_with_effects

    def _register(self, text: str) -> None:
        """Run the definition's ``register`` once; its first value is this worker's ``worker_id``. Raises
        :class:`ConnectFailed` (the connection closed)."""
        try:
            with translated(connecting=True):
                registered = rows(self.session.query(defined_sql.literal(text, {}).encode()))
        except EngineError:
            self.session.close()
            raise
        self.claim_values["worker_id"] = int(registered[0][0])

    def _second_connection(self, dsn: str, cfg: RunConfig, name: str, settings: dict,
                           effect: str) -> PreparedSession:
        """The effects' own connection with ``TXN=hold``: the worker's is inside the claim's transaction, which
        a crash rolls back, and an HTTP call or an email is not part of it. Raises :class:`ConnectFailed`
        (the worker's connection closed)."""
        try:
            return _open(dsn, cfg, f"queue-bench {name} effects", settings, {"effect": effect})
        except ConnectFailed:
            self.session.close()
            raise

    def effect(self, job_id: int, token: int) -> bool:
        """Write job ``job_id``'s effect row with attempt ``token``, committed on its own (the worker's
        connection outside a transaction, or :meth:`_second_connection`). A lost effect connection closes the
        worker's too (both gone, as in a crash)."""
        try:
            return self._effect(self.effects, job_id, token)
        except EngineError:
            if self.effects.broken:
                self.close()
            raise

    @staticmethod
    def _effect(session: PreparedSession, job_id: int, token: int) -> bool:
        """Run the prepared ``effect`` on ``session``; whether it wrote a row (a statement that reports no count:
        True). Raises :class:`EngineError`."""
        with translated(lambda: session.broken):
            written = session.execute(b"effect", [str(job_id).encode(), str(token).encode()]).command_tuples
        return written is None or written > 0

    def _wrapped(self, body: str, returned: list[str]) -> str:
        """The claim ``body`` as sent: as written when it returns the claimed row, else wrapped."""
        return body if self.defn.claim_row else defined_sql.wrapped_claim(self.defn, body, returned)

    def wait_for_work(self, timeout_s: float) -> bool:
        """See :meth:`bench.engines.base.WorkerSession.wait_for_work` (``WAKEUP=notify``: its ``LISTEN``)."""
        if not self.notify:
            return poll_wait(timeout_s)
        with translated(lambda: self.session.broken):
            return self.session.wait_notification(timeout_s)

    @property
    def in_transaction(self) -> bool:
        """True while a transaction is open (or failed)."""
        return self.session.in_transaction

    def _claim_rows(self) -> list[tuple[bytes | None, ...]]:
        """Run the claim (prepared, or the literal claim); its rows as raw text values."""
        with translated(lambda: self.session.broken):
            if self.claim_text is None:
                return rows(self.session.execute(b"claim", self.claim_params))
            return rows(self.session.query(self.claim_text))

    def _run(self, key: str, *args: bytes):
        """Execute prepared ``key`` with text arguments in ``STATEMENT_PARAMETERS``' order (``worker_id`` added)."""
        name, slots = self.bound[key]
        args = (*args, self.worker_param)
        with translated(lambda: self.session.broken):
            return self.session.execute(name, [args[i] for i in slots])

    def claim(self) -> list[ClaimedRow]:
        """See :meth:`bench.engines.base.WorkerSession.claim`; a queue without attempt tokens gets a random
        negative one per job (the audit pairs claims and completions by it)."""
        out = []
        for r in self._claim_rows():
            token = int(r[1]) if r[1] is not None else -random.getrandbits(62) - 1
            out.append((int(r[0]), token, int(r[2]) if r[2] is not None else None, int(r[3]), float(r[4]),
                        float(r[5])))
        return out

    def _complete_with_effects(self, jobs: list[tuple[int, int]]) -> set[int]:
        """:meth:`complete` and a definition's ``effect`` for the completions applied, in their transaction
        (``EFFECTS=same_txn``; with ``TXN=hold`` the claim's)."""
        own = not self.session.in_transaction
        if own:
            self.begin()
        try:
            applied = PgWorkerSession.complete(self, jobs)
            for job_id, token in jobs:
                if job_id in applied:
                    self._effect(self.session, job_id, token)
            if own:
                self.commit()
        except EngineError:
            if own:
                self.rollback()
            raise
        return applied

    def complete(self, jobs: list[tuple[int, int]]) -> set[int]:
        """See :meth:`bench.engines.base.WorkerSession.complete`: ``complete_many`` for a batch if defined,
        else ``complete`` per job."""
        if len(jobs) > 1 and "complete_many" in self.bound:
            result = self._run("complete_many", defined_sql.text_param([j[0] for j in jobs]),
                               defined_sql.text_param([j[1] for j in jobs]))
            return {int(r[0]) for r in rows(result)}
        applied = set()
        for job_id, token in jobs:
            result = self._run("complete", str(job_id).encode(), str(token).encode())
            if result.command_tuples or result.ntuples:
                applied.add(job_id)
        return applied

    def fail(self, job_id: int, token: int, retry_delay_s: float, error: str) -> str | None:
        """See :meth:`bench.engines.base.WorkerSession.fail`: ``dead`` when the first value returned is true
        (or ``dead``)."""
        if "fail" not in self.bound:
            raise EngineError("no_fail_statement", "the queue definition has no fail statement")
        result = self._run("fail", str(job_id).encode(), str(token).encode(), repr(float(retry_delay_s)).encode(),
                           error.encode())
        if not (result.command_tuples or result.ntuples):
            return None
        values = rows(result)
        first = values[0][0] if values and values[0] else None
        return "dead" if first in (b"t", b"dead") else "pending"

    def _command(self, command: bytes) -> None:
        with translated(lambda: self.session.broken):
            self.session.query(command)

    def begin(self) -> None:
        """Open a transaction."""
        self._command(b"BEGIN")

    def commit(self) -> None:
        """Commit the open transaction."""
        self._command(b"COMMIT")

    def rollback(self) -> None:
        """Roll back the open transaction, if any; never raises."""
        self.session.rollback()

    def plan_counts(self) -> dict[str, int] | None:
        """``generic_plans``/``custom_plans`` of this session's prepared claim (PostgreSQL 14+:
        https://www.postgresql.org/docs/current/view-pg-prepared-statements.html); None unprepared or unnamed."""
        if self.claim_text is not None or self.stateless:
            return None
        with translated(lambda: self.session.broken):
            counts = rows(self.session.query(b"SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                                             b"WHERE name = 'claim'"))
        return {"generic_plans": int(counts[0][0]), "custom_plans": int(counts[0][1])} if counts else None

    def explain_claim(self, timeout_ms: int) -> str:
        """``EXPLAIN (ANALYZE, BUFFERS)`` of this session's claim (``EXECUTE`` when prepared: one more
        execution, so read :meth:`plan_counts` first), rolled back."""
        target = self._explained_claim()
        self.rollback()
        try:
            with translated(lambda: self.session.broken):
                result = self.session.query(b"BEGIN; SET LOCAL statement_timeout = '%d'; EXPLAIN (ANALYZE, BUFFERS) "
                                            % timeout_ms + target)
            return "\n".join(r[0].decode() for r in rows(result))
        finally:
            self.rollback()

    def _explained_claim(self) -> bytes:
        """``EXECUTE claim(<this session's values>)``, or the literal claim (unprepared, or unnamed)."""
        if self.claim_text is not None or self.explained is not None:
            return self.claim_text or self.explained
        args = ", ".join(sql.Literal(self.claim_values[n]).as_string(None) for n in self.claim_names)
        return f"EXECUTE claim({args})".encode() if args else b"EXECUTE claim"


def _effect(defn: QueueDefinition, cfg: RunConfig) -> tuple[str | None, bool]:
    """(the effect statement with ``$1`` id, ``$2`` token, or None; True when it runs in the completion's
    transaction): the built-in queue's for ``EFFECTS`` outside/idempotent (its same_txn is in the completion's
    statement itself), a definition's ``statements.effect`` in every mode."""
    if cfg.effects not in EFFECTS_WRITTEN:
        return None, False
    if is_builtin(defn.name):
        effect = builtin_queue.effect_statement(cfg)
        return (defined_sql.positional(*effect)[0] if effect else None), False
    return defined_sql.positional(defn.statements["effect"], ("id", "token"))[0], cfg.effects == "same_txn"


class PgProducerSession(_Session):
    """A producer's session: one prepared multi-row insert (which also notifies with ``WAKEUP=notify``)."""

    def __init__(self, dsn: str, cfg: RunConfig, name: str):
        self.queues = queue_names(queue_count(cfg))
        self.flood = flood_share(cfg)
        self.rng = random.Random()
        self.session = _open(dsn, cfg, f"queue-bench {name}", sync_commit_settings(cfg.sync_commit),
                             {"insert": policies.insert_sql(cfg.schema, cfg.max_attempts,
                                                            notify=cfg.wakeup == "notify", queues=len(self.queues))})

    def insert(self, priorities: list[int], run_at_s: list[float]) -> list[int]:
        """See :meth:`bench.engines.base.ProducerSession.insert`."""
        params = [("{" + ",".join(map(str, priorities)) + "}").encode(),
                  ("{" + ",".join(repr(t) for t in run_at_s) + "}").encode()]
        if len(self.queues) > 1:  # each job's queue drawn here (bench.workload.queues)
            n = len(self.queues)
            params.append(policies.text_array([self.queues[queue_index(self.rng.random(), n, self.flood)]
                                               for _ in priorities]).encode())
        with translated(lambda: self.session.broken):
            result = self.session.execute(b"insert", params)
        return [int(r[0]) for r in rows(result)]
