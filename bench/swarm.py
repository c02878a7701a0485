"""The worker swarm: each worker is one Locust user with its own psycopg connection.

Import this module before anything imports psycopg: it applies gevent's
monkey-patching first, so psycopg 3 picks a cooperative wait function
(``wait_poll``/``wait_select`` on the patched ``select``) instead of the C
``wait_c``, which would freeze every greenlet of the process while one waits
on a row lock (see psycopg ``psycopg/waiting.py``, ``_is_select_patched``).
:func:`check_cooperative` verifies that and the runner refuses to start otherwise.
"""

from gevent import monkey

monkey.patch_all()

import random  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

import gevent  # noqa: E402
import psycopg  # noqa: E402
import psycopg.sql  # noqa: E402
import psycopg.waiting  # noqa: E402
from locust import User, constant, task  # noqa: E402

from . import jobs, policies  # noqa: E402
from .claimlog import ClaimLog  # noqa: E402
from .config import RunConfig  # noqa: E402
from .error_kinds import error_kind  # noqa: E402
from .fastpath import PreparedSession, int_array  # noqa: E402
from .fastpath import rows as rows_of  # noqa: E402
from .metrics import Recorder  # noqa: E402

#: Pause after a claim that found no eligible row, so an empty queue is polled, not spun.
EMPTY_POLL_S = 0.010
#: Statement timeout of the EXPLAIN ANALYZE of the claim on a worker's own session as the load stops.
EXPLAIN_TIMEOUT_MS = 30_000
#: Reconnect back-off after a lost connection.
RECONNECT_BASE_S = 0.1
RECONNECT_CAP_S = 2.0


class NotCooperativeError(RuntimeError):
    """psycopg would block the whole process on a wait; concurrency would be fake."""


def check_cooperative() -> str:
    """Return the name of psycopg's wait function, or raise :class:`NotCooperativeError`
    if it is the blocking C ``wait_c`` or ``select`` is not monkey-patched."""
    name = getattr(psycopg.waiting.wait, "__name__", str(psycopg.waiting.wait))
    if not monkey.is_module_patched("select") or name == "wait_c":
        raise NotCooperativeError(
            f"psycopg uses {name} with select {'patched' if monkey.is_module_patched('select') else 'not patched'}: "
            "a greenlet waiting on a row lock would block every worker; import bench.swarm before psycopg")
    return name


@dataclass
class SwarmContext:
    """What every worker shares: config, DSN, the recorder and the claim log."""

    cfg: RunConfig
    dsn: str
    recorder: Recorder
    log: ClaimLog
    stopping: bool = False
    worker_names: list = field(default_factory=list)
    #: kind -> set of worker names it applies to, while a fault window is open (see bench.faults)
    active_faults: dict = field(default_factory=dict)
    #: worker names that already crashed in the current crash_after_claim window
    crashed: set = field(default_factory=set)
    late_extra_s: float = 1.0
    #: Unix time at which the measured window starts (producers' bursts are relative to it)
    measured_start_unix: float = 0.0
    #: Read from the workers' own sessions as the load stops (see :meth:`QueueWorker.read_plan_state`):
    #: one ``{"worker", "generic_plans", "custom_plans"}`` per session read, and the EXPLAIN of the
    #: claim as one worker's session runs it (``{"worker", "text"}`` or ``{"worker", "error"}``).
    plan_sessions: list = field(default_factory=list)
    worker_explain: dict | None = None


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _quote(text: str) -> str:
    """``text`` as an SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


class QueueWorker(User):
    """One worker: claim (per policy, batch, txn mode), work ``work_ms`` per job, complete.

    Latencies: ``claim_latency_us`` from the start of the claim until its rows
    are in hand (in ``short`` mode the claim runs in autocommit, so its commit
    is inside; in ``hold`` mode it includes the ``BEGIN``); ``complete_latency_us``
    for the completion statement (in ``hold`` mode with the ``COMMIT`` that ends
    the long transaction). Statements run through :class:`bench.fastpath.PreparedSession`.
    """

    wait_time = constant(0)
    ctx: SwarmContext | None = None
    _serial = 0

    def on_start(self) -> None:
        QueueWorker._serial += 1
        self.name = f"worker-{QueueWorker._serial}"
        cfg = self.ctx.cfg
        self.statements = policies.prepared_statements(cfg.schema, cfg.policy)
        self.claim_params = [str(cfg.batch).encode(), self.name.encode(), repr(float(cfg.lease_s)).encode()]
        self.claim_text = None
        if not cfg.prepared:  # PREPARED=0: the claim goes unprepared, its values inlined
            del self.statements["claim"]
            self.claim_text = policies.literal_claim(cfg.schema, cfg.policy, cfg.batch, self.name,
                                                     cfg.lease_s).encode()
        self.hold = cfg.txn == "hold"
        self.duration_s = jobs.duration_sampler(cfg)
        self.records_work = jobs.expected_work_s(cfg) > 0
        self.poison_share = cfg.poison_share
        self.fail_prob = cfg.fail_prob
        self.nowait_failures = 0
        self.session: PreparedSession | None = None
        self.events = self.ctx.log  # in hold mode, each transaction's Tentative buffer (see _claim)
        self.ctx.worker_names.append(self.name)
        self._connect()

    def _connect(self) -> None:
        delay = RECONNECT_BASE_S
        while not self.ctx.stopping:
            try:
                conn = psycopg.connect(self.ctx.dsn, autocommit=True, application_name=f"queue-bench {self.name}")
                if self.ctx.cfg.plan_cache != "auto":  # before anything is prepared or planned
                    conn.execute(psycopg.sql.SQL("SET plan_cache_mode = {}").format(
                        psycopg.sql.Literal(self.ctx.cfg.plan_cache)))
                self.session = PreparedSession(conn, self.statements)
                return
            except psycopg.OperationalError as err:
                self.ctx.recorder.error(error_kind(err, connecting=True))
                gevent.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(RECONNECT_CAP_S, delay * 2)

    def on_stop(self) -> None:
        if self.session is not None:
            self.session.close()

    def _backoff_nowait(self) -> None:
        self.nowait_failures = min(self.nowait_failures + 1, jobs.NOWAIT_BACKOFF_MAX_LEVEL)
        started = time.perf_counter()
        gevent.sleep(jobs.nowait_backoff_s(self.nowait_failures))
        # The 55P03, its retry and its sleep are counted together when the sleep ends, so they
        # fall in the same second: errors["55P03"] = nowait_retries = nowait_backoff_us count.
        self.ctx.recorder.error("55P03")
        self.ctx.recorder.count("nowait_retries")
        self.ctx.recorder.nowait_backoff(int((time.perf_counter() - started) * 1e6))

    @task
    def work_until_stopped(self) -> None:
        """Run claim/work/complete cycles until the run stops.

        One Locust task invocation runs many cycles: Locust's per-task bookkeeping
        (scheduling, wait_time, stop checks) would otherwise cost harness CPU on
        every job, CPU that the database server on the same machine needs.
        """
        while not self.ctx.stopping:
            self.claim_work_complete()
        self.read_plan_state()

    def read_plan_state(self) -> None:
        """As the load stops, read how this session planned its claim, into the shared context.

        ``pg_prepared_statements`` is visible only to the session that prepared the
        statement, so each worker reads its own ``generic_plans``/``custom_plans``
        (PostgreSQL 14+; https://www.postgresql.org/docs/current/view-pg-prepared-statements.html).
        Then the first worker to get here runs ``EXPLAIN (ANALYZE, BUFFERS)`` of the
        claim on its own connection, inside a transaction that is rolled back:
        ``EXECUTE`` of its cached statement when prepared (so the plan shown is the one
        the plan cache gives it, and the counts were read first because this adds an
        execution), else the literal claim it sends. Errors are recorded, never raised.
        """
        session = self.session
        if session is None or session.broken:
            return
        self._rollback_if_open()
        if self.claim_text is None:
            try:
                result = session.query(b"SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                                       b"WHERE name = 'claim'")
                counts = rows_of(result)
                if counts:
                    self.ctx.plan_sessions.append({"worker": self.name, "generic_plans": int(counts[0][0]),
                                                   "custom_plans": int(counts[0][1])})
            except psycopg.Error as err:
                self.ctx.plan_sessions.append({"worker": self.name, "error": _first_line(err)})
        if self.ctx.worker_explain is not None:
            return
        self.ctx.worker_explain = {"worker": self.name}  # claimed by this worker before any wait
        if self.claim_text is None:
            cfg = self.ctx.cfg
            target = f"EXECUTE claim({cfg.batch}, {_quote(self.name)}, {float(cfg.lease_s)!r})".encode()
        else:
            target = self.claim_text
        try:
            result = session.query(b"BEGIN; SET LOCAL statement_timeout = '%d'; EXPLAIN (ANALYZE, BUFFERS) "
                                   % EXPLAIN_TIMEOUT_MS + target)
            self.ctx.worker_explain["text"] = "\n".join(r[0].decode() for r in rows_of(result))
        except psycopg.Error as err:
            self.ctx.worker_explain["error"] = _first_line(err)
        finally:
            self._rollback_if_open()

    def claim_work_complete(self) -> None:
        """One cycle: claim up to ``batch`` jobs, run them, complete them.

        Errors are counted by SQLSTATE; ``55P03`` (NOWAIT) backs off with jitter;
        a lost connection is re-opened with back-off.
        """
        if self.session is None or self.session.broken:
            self.session = None
            self._connect()
            return
        try:
            rows = self._claim()
            if not rows:
                if self.hold:
                    self.session.command(b"ROLLBACK")
                gevent.sleep(EMPTY_POLL_S)
                return
            self.nowait_failures = max(0, self.nowait_failures - 1)
            if self._crash_after_claim(rows):
                return
            late_s = self._late_by_s()
            succeeded = []
            claimed_at = time.perf_counter()
            for job in rows:
                self.ctx.recorder.batch_wait(int((time.perf_counter() - claimed_at) * 1e6))
                duration_s = self.duration_s()
                work_started = time.perf_counter()
                if duration_s > 0:
                    gevent.sleep(duration_s)
                if self.records_work:  # every job, a 0 s draw too, so the mean is per job
                    self.ctx.recorder.work_duration(int((time.perf_counter() - work_started) * 1e6))
                if jobs.is_poison(job[0], self.poison_share):
                    self._fail(job, "poison job")
                elif self.fail_prob and random.random() < self.fail_prob:
                    self._fail(job, "injected failure")
                else:
                    succeeded.append(job)
            if late_s:
                gevent.sleep(late_s)
            if succeeded:
                self._complete(succeeded)
            elif self.hold:
                self.session.command(b"COMMIT")
                self.events.commit()
        except psycopg.errors.LockNotAvailable:
            self._rollback_if_open()
            self._backoff_nowait()
        except psycopg.Error as err:
            self.ctx.recorder.error(error_kind(err, lost=self.session.broken))
            if self.session.broken:
                self.session = None
            else:
                self._rollback_if_open()
                gevent.sleep(EMPTY_POLL_S)

    def _crash_after_claim(self, rows: list) -> bool:
        """Fault ``crash_after_claim``: drop the connection with the claimed rows unfinished (once per window)."""
        chosen = self.ctx.active_faults.get("crash_after_claim")
        if not chosen or self.name not in chosen or self.name in self.ctx.crashed:
            return False
        self.ctx.crashed.add(self.name)
        self.ctx.recorder.count("crashed_claims")
        self.ctx.recorder.count("crashed_jobs", len(rows))
        # Short mode: the claims stay in the log as in flight, so a re-claim before their lease expires
        # is a double claim. Hold mode: the close rolls them back; their Tentative buffer is dropped.
        self.session.close()
        self.session = None
        return True

    def _late_by_s(self) -> float:
        """Fault ``late_worker``: how long past the lease to wait before completing (0 when not chosen)."""
        chosen = self.ctx.active_faults.get("late_worker")
        if not chosen or self.name not in chosen:
            return 0.0
        self.ctx.recorder.count("late_completions")
        return self.ctx.cfg.lease_s + self.ctx.late_extra_s

    def _rollback_if_open(self) -> None:
        if self.session is not None and not self.session.broken and self.session.in_transaction:
            try:
                self.session.command(b"ROLLBACK")
            except psycopg.Error:
                pass

    def _claim(self) -> list[tuple[int, int, int, int]]:
        """Claim; returns ``[(id, token, pickup_us, attempts)]``."""
        started = time.perf_counter()
        if self.hold:
            self.session.command(b"BEGIN")
            self.events = self.ctx.log.tentative()  # logged only once the COMMIT returns
        if self.claim_text is None:
            result = self.session.execute(b"claim", self.claim_params)
        else:
            result = self.session.query(self.claim_text)
        latency_us = int((time.perf_counter() - started) * 1e6)
        log = self.events
        claimed = []
        for r in rows_of(result):
            job = (int(r[0]), int(r[1]), int(r[2]), int(r[3]))
            log.claimed(job[0], job[1], float(r[4]), float(r[5]))
            claimed.append(job)
        self.ctx.recorder.claim(latency_us, len(claimed), [job[2] for job in claimed])
        return claimed

    def _fail(self, job: tuple[int, int, int, int], error: str) -> None:
        """Report one failed attempt: retry after a back-off, or dead letter past max_attempts."""
        job_id, token, _, attempts = job
        cfg = self.ctx.cfg
        delay_s = jobs.retry_delay_s(attempts, cfg.retry_base_s, cfg.retry_cap_s)
        result = self.session.execute(b"fail", [str(job_id).encode(), str(token).encode(),
                                                repr(delay_s).encode(), error.encode()])
        status = rows_of(result)
        if not status:  # fenced: the lease expired and the job moved on without this worker
            self.ctx.recorder.count("stale_completions")
        else:
            self.ctx.recorder.count("dead_lettered" if status[0][0] == b"dead" else "retries")
        self.events.failed(job_id, token)

    def _complete(self, claimed: list[tuple[int, int, int, int]]) -> None:
        started = time.perf_counter()
        if len(claimed) == 1:
            job_id, token = claimed[0][0], claimed[0][1]
            result = self.session.execute(b"complete_one", [str(job_id).encode(), str(token).encode()])
            applied_ids = {job_id} if result.command_tuples == 1 else set()
        else:
            result = self.session.execute(b"complete_many", [int_array([r[0] for r in claimed]),
                                                             int_array([r[1] for r in claimed])])
            applied_ids = {int(r[0]) for r in rows_of(result)}
        if self.hold:
            self.session.command(b"COMMIT")
            self.events.commit()
        latency_us = int((time.perf_counter() - started) * 1e6)
        self.ctx.recorder.complete(latency_us, len(applied_ids), len(claimed) - len(applied_ids))
        for job_id, token, _, _ in claimed:
            self.ctx.log.finished(job_id, token, job_id in applied_ids)
