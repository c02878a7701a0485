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

from . import jobs, policies  # noqa: E402
from .config import RunConfig  # noqa: E402
from .error_kinds import error_kind  # noqa: E402
from .fastpath import PreparedSession, int_array  # noqa: E402
from .fastpath import rows as rows_of  # noqa: E402
from .metrics import Recorder  # noqa: E402

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
    """Client-side record of every claim, completion and failure, for the end-of-run audit.

    Times are database epoch seconds returned by the claim itself, so they
    compare with the leases the database wrote. ``claims[id]`` counts claims of a
    job; ``inflight[id] = (token, lease_until, claimed_at)`` holds claimed jobs not
    yet finished; ``applied[id]`` lists the tokens whose completion the database
    applied; ``double_claims`` counts claims of a job whose previous claim was
    still in flight under a lease that had not expired at the new claim;
    ``retry_claims[id]`` lists the claim times of every job that has failed
    once (to check the back-off between attempts).
    """

    claims: dict = field(default_factory=dict)
    inflight: dict = field(default_factory=dict)
    applied: dict = field(default_factory=dict)
    retry_claims: dict = field(default_factory=dict)
    double_claims: int = 0

    def claimed(self, job_id: int, token: int, lease_until: float, claimed_at: float) -> None:
        """Note one claim of ``job_id`` with fencing ``token`` (database times, epoch s)."""
        held = self.inflight.get(job_id)
        if held is not None and held[1] > claimed_at:
            self.double_claims += 1
        self.claims[job_id] = self.claims.get(job_id, 0) + 1
        self.inflight[job_id] = (token, lease_until, claimed_at)
        retries = self.retry_claims.get(job_id)
        if retries is not None:
            retries.append(claimed_at)

    def finished(self, job_id: int, token: int, applied: bool) -> None:
        """Note a completion attempt; ``applied`` when the database updated the row."""
        held = self.inflight.get(job_id)
        if held is not None and held[0] == token:
            del self.inflight[job_id]
        if applied:
            self.applied.setdefault(job_id, []).append(token)

    def failed(self, job_id: int, token: int) -> None:
        """Note a failure reported for the attempt ``token`` of ``job_id``."""
        held = self.inflight.pop(job_id, None) if self.inflight.get(job_id, (None,))[0] == token else None
        if job_id not in self.retry_claims:
            self.retry_claims[job_id] = [held[2]] if held is not None else []


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
        self.hold = cfg.txn == "hold"
        self.duration_s = jobs.duration_sampler(cfg)
        self.records_work = jobs.expected_work_s(cfg) > 0
        self.poison_share = cfg.poison_share
        self.fail_prob = cfg.fail_prob
        self.nowait_failures = 0
        self.session: PreparedSession | None = None
        self.ctx.worker_names.append(self.name)
        self._connect()

    def _connect(self) -> None:
        delay = RECONNECT_BASE_S
        while not self.ctx.stopping:
            try:
                conn = psycopg.connect(self.ctx.dsn, autocommit=True, application_name=f"queue-bench {self.name}")
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
        # The claims stay in the log as in flight: a re-claim before their lease expires is a double claim.
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
        result = self.session.execute(b"claim", self.claim_params)
        latency_us = int((time.perf_counter() - started) * 1e6)
        log = self.ctx.log
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
        self.ctx.log.failed(job_id, token)

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
        latency_us = int((time.perf_counter() - started) * 1e6)
        self.ctx.recorder.complete(latency_us, len(applied_ids), len(claimed) - len(applied_ids))
        for job_id, token, _, _ in claimed:
            self.ctx.log.finished(job_id, token, job_id in applied_ids)
