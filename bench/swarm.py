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
import psycopg.waiting  # noqa: E402
from locust import User, constant, task  # noqa: E402

from . import policies  # noqa: E402
from .config import RunConfig  # noqa: E402
from .metrics import Recorder  # noqa: E402

#: NOWAIT retry back-off: exponential with "equal jitter" (half fixed, half
#: random), from 2 ms up to 200 ms, reset after a successful claim. Source:
#: Marc Brooker, "Exponential Backoff And Jitter", AWS Architecture Blog, 2015.
NOWAIT_BACKOFF_BASE_S = 0.002
NOWAIT_BACKOFF_CAP_S = 0.200
#: Pause after a claim that found no eligible row, so an empty queue is polled, not spun.
EMPTY_POLL_S = 0.010
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
class ClaimLog:
    """Client-side record of every claim and completion, for the end-of-run audit.

    ``claims[id]`` counts claims of a job, ``inflight[id] = (token, lease_deadline)``
    holds claimed-but-unfinished jobs (monotonic seconds), ``applied[id]`` lists
    the tokens whose completion the database applied, ``double_claims`` counts
    claims of a job already in flight under a live lease.
    """

    claims: dict = field(default_factory=dict)
    inflight: dict = field(default_factory=dict)
    applied: dict = field(default_factory=dict)
    double_claims: int = 0

    def claimed(self, job_id: int, token: int, lease_s: float) -> None:
        """Note one claim of ``job_id`` with fencing ``token``."""
        now = time.monotonic()
        held = self.inflight.get(job_id)
        if held is not None and held[1] > now:
            self.double_claims += 1
        self.claims[job_id] = self.claims.get(job_id, 0) + 1
        self.inflight[job_id] = (token, now + lease_s)

    def finished(self, job_id: int, token: int, applied: bool) -> None:
        """Note a completion attempt; ``applied`` when the database updated the row."""
        held = self.inflight.get(job_id)
        if held is not None and held[0] == token:
            del self.inflight[job_id]
        if applied:
            self.applied.setdefault(job_id, []).append(token)


@dataclass
class SwarmContext:
    """What every worker shares: config, DSN, the recorder and the claim log."""

    cfg: RunConfig
    dsn: str
    recorder: Recorder
    log: ClaimLog
    stopping: bool = False
    connected: int = 0


def _sqlstate(err: BaseException) -> str:
    return getattr(err, "sqlstate", None) or type(err).__name__


class QueueWorker(User):
    """One worker: claim (per policy, batch, txn mode), work ``work_ms`` per job, complete.

    Latencies: ``claim_latency_us`` from the start of the claim statement until
    its rows are in hand (commit included in ``short`` mode, where the claim
    runs in autocommit); ``complete_latency_us`` for the completion statement
    (and, in ``hold`` mode, the commit that ends the long transaction).
    """

    wait_time = constant(0)
    ctx: SwarmContext | None = None
    _serial = 0

    def on_start(self) -> None:
        QueueWorker._serial += 1
        self.name = f"worker-{QueueWorker._serial}"
        cfg = self.ctx.cfg
        self.claim_q = policies.claim_sql(cfg.schema, cfg.policy)
        self.complete_one_q = policies.complete_one_sql(cfg.schema)
        self.complete_many_q = policies.complete_many_sql(cfg.schema)
        self.params = {"batch": cfg.batch, "worker": self.name, "lease_s": cfg.lease_s}
        self.work_s = cfg.work_ms / 1000.0
        self.nowait_failures = 0
        self.conn = None
        self._connect()

    def _connect(self) -> None:
        delay = RECONNECT_BASE_S
        while not self.ctx.stopping:
            try:
                self.conn = psycopg.connect(self.ctx.dsn, autocommit=self.ctx.cfg.txn == "short",
                                            application_name=f"queue-bench {self.name}")
                self.ctx.connected += 1
                return
            except psycopg.OperationalError as err:
                self.ctx.recorder.error(_sqlstate(err))
                gevent.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(RECONNECT_CAP_S, delay * 2)

    def on_stop(self) -> None:
        if self.conn is not None:
            self.conn.close()

    def _backoff_nowait(self) -> None:
        self.nowait_failures += 1
        self.ctx.recorder.count("nowait_retries")
        ceiling = min(NOWAIT_BACKOFF_CAP_S, NOWAIT_BACKOFF_BASE_S * 2 ** (self.nowait_failures - 1))
        gevent.sleep(ceiling / 2 + random.uniform(0, ceiling / 2))

    @task
    def claim_work_complete(self) -> None:
        """One cycle: claim up to ``batch`` jobs, run them, complete them."""
        if self.ctx.stopping or self.conn is None or self.conn.closed:
            if not self.ctx.stopping:
                self._connect()
            gevent.sleep(0.01)
            return
        try:
            if self.ctx.cfg.txn == "short":
                self._cycle_short()
            else:
                self._cycle_hold()
        except psycopg.errors.LockNotAvailable:
            self.ctx.recorder.error("55P03")
            self._rollback_if_open()
            self._backoff_nowait()
        except psycopg.OperationalError as err:
            self.ctx.recorder.error(_sqlstate(err))
            if self.conn.closed or self.conn.broken:
                self.conn = None
            else:
                self._rollback_if_open()
        except psycopg.Error as err:
            self.ctx.recorder.error(_sqlstate(err))
            self._rollback_if_open()
            gevent.sleep(0.01)

    def _rollback_if_open(self) -> None:
        if self.conn is not None and not self.conn.closed and not self.conn.autocommit:
            try:
                self.conn.rollback()
            except psycopg.Error:
                pass

    def _claim(self) -> list[tuple[int, int, int]]:
        started = time.perf_counter()
        rows = self.conn.execute(self.claim_q, self.params).fetchall()
        latency_us = int((time.perf_counter() - started) * 1e6)
        self.ctx.recorder.claim(latency_us, len(rows), (r[2] for r in rows))
        for job_id, token, _ in rows:
            self.ctx.log.claimed(job_id, token, self.ctx.cfg.lease_s)
        return rows

    def _complete(self, rows: list[tuple[int, int, int]], commit: bool) -> None:
        started = time.perf_counter()
        if len(rows) == 1:
            cur = self.conn.execute(self.complete_one_q, {"id": rows[0][0], "token": rows[0][1]})
            applied_ids = {rows[0][0]} if cur.rowcount == 1 else set()
        else:
            cur = self.conn.execute(self.complete_many_q,
                                    {"ids": [r[0] for r in rows], "tokens": [r[1] for r in rows]})
            applied_ids = {r[0] for r in cur.fetchall()}
        if commit:
            self.conn.commit()
        latency_us = int((time.perf_counter() - started) * 1e6)
        self.ctx.recorder.complete(latency_us, len(applied_ids), len(rows) - len(applied_ids))
        for job_id, token, _ in rows:
            self.ctx.log.finished(job_id, token, job_id in applied_ids)

    def _work(self, jobs: int) -> None:
        if self.work_s > 0:
            for _ in range(jobs):
                gevent.sleep(self.work_s)

    def _cycle_short(self) -> None:
        rows = self._claim()
        if not rows:
            gevent.sleep(EMPTY_POLL_S)
            return
        self.nowait_failures = 0
        self._work(len(rows))
        self._complete(rows, commit=False)

    def _cycle_hold(self) -> None:
        # psycopg opens the transaction implicitly on the first statement (autocommit off).
        rows = self._claim()
        if not rows:
            self.conn.rollback()
            gevent.sleep(EMPTY_POLL_S)
            return
        self.nowait_failures = 0
        self._work(len(rows))
        self._complete(rows, commit=True)
