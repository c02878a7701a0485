"""The worker swarm: each worker one Locust user with its own database session; the process is gevent-patched
first (:mod:`bench.gevent_patch`)."""

import random
import time
from dataclasses import dataclass, field

import gevent
import gevent.event
from typing import Any
from locust import User, task
from locust.user.task import LOCUST_STATE_STOPPING

from bench.config.choices import EFFECTS_DURING_WORK
from bench.config.run_config import RunConfig
from bench.engines.base import ConnectFailed, EngineError, LockNotAvailable, SessionFactory, WorkerSession
from bench.measure.claimlog import ClaimLog
from bench.measure.metrics import Recorder
from bench.workload import jobs

#: Pause after a claim or completion that failed with an error (not a lost connection), before the next claim.
ERROR_PAUSE_S = 0.010
#: Statement timeout of the EXPLAIN ANALYZE of the claim on a worker's own session as the load stops.
EXPLAIN_TIMEOUT_MS = 30_000
#: A user's wait between task runs once the run is stopping (s): longer than any stop takes.
STOPPED_WAIT_S = 3600.0
#: Reconnect back-off after a lost connection.
RECONNECT_BASE_S = 0.1
RECONNECT_CAP_S = 2.0


@dataclass
class SwarmContext:
    """What every user of one run shares (``environment.run_context``): config, session factory, recorder, claim
    log."""

    cfg: RunConfig
    sessions: SessionFactory
    recorder: Recorder
    log: ClaimLog
    stopping: bool = False
    worker_names: list = field(default_factory=list)
    #: workers whose first connection is open (the run starts its clock once all are)
    connected_workers: int = 0
    #: the first worker whose first session was refused for good: ``{"worker", "kind", "message", "cause"}``
    #: (the run stops: :class:`bench.errors.SessionRefused`)
    refused: dict | None = None
    #: workers whose session is lost and not yet reopened (a run that ends with some is suspect)
    disconnected: set = field(default_factory=set)
    #: workers started and not yet stopped (a web UI run changes it; intervals.csv ``workers``)
    running_workers: int = 0
    #: set by the run when its clock starts: no worker claims before, so every claim is in a second
    go: Any = field(default_factory=lambda: gevent.event.Event())
    #: kind -> set of worker names it applies to, while a fault window is open (see bench.config.faults)
    active_faults: dict = field(default_factory=dict)
    #: crash kind -> worker names that already crashed in its current window
    crashed: dict = field(default_factory=dict)
    #: the ``partition`` window's :class:`bench.load.partition_watch.PartitionWatch` once it opened, else None
    partition: Any = None
    late_extra_s: float = 1.0
    #: Unix time at which the measured window starts (producers' bursts are relative to it)
    measured_start_unix: float = 0.0
    #: Read from the workers' own sessions as the load stops (see :meth:`QueueWorker.read_plan_state`):
    #: one ``{"worker", "generic_plans", "custom_plans"}`` per session read, and the EXPLAIN of the
    #: claim as one worker's session runs it (``{"worker", "text"}`` or ``{"worker", "error"}``).
    plan_sessions: list = field(default_factory=list)
    worker_explain: dict | None = None
    #: how many users of each kind have started (their names are numbered from 1)
    started: dict = field(default_factory=dict)
    #: prefix of every user name: ``p2-`` in the second process of a distributed run, so names stay unique
    name_prefix: str = ""

    def next_name(self, kind: str) -> str:
        """``<prefix><kind>-<n>``: the next user of ``kind`` to start (worker-1, worker-2, ...; p2-worker-1 ...)."""
        self.started[kind] = self.started.get(kind, 0) + 1
        return f"{self.name_prefix}{kind}-{self.started[kind]}"


class RunUser(User):
    """A user of one run (a worker or a producer), its :class:`SwarmContext` from the Locust environment."""

    abstract = True

    def wait_time(self) -> float:
        """Seconds between task runs: 0, or :data:`STOPPED_WAIT_S` once the run is stopping."""
        return STOPPED_WAIT_S if self.ctx.stopping else 0.0

    def __init__(self, environment):
        super().__init__(environment)
        self.ctx: SwarmContext = environment.run_context


class QueueWorker(RunUser):
    """One worker: claim (per policy, batch, txn mode), work ``work_ms`` per job, complete; records
    ``claim_latency_us`` and ``complete_latency_us`` (docs/design.md's terms)."""

    def on_start(self) -> None:
        self.name = self.ctx.next_name("worker")
        cfg = self.ctx.cfg
        self.hold = cfg.txn == "hold"
        self.duration_s = jobs.duration_sampler(cfg)
        self.records_work = jobs.expected_work_s(cfg) > 0
        self.poison_share = cfg.poison_share
        self.fail_prob = cfg.fail_prob
        #: EFFECTS written during the work, before the completion (same_txn's goes with the completion)
        self.effect_in_work = cfg.effects in EFFECTS_DURING_WORK
        self.poll_s = cfg.poll_ms / 1000.0
        self.nowait_failures = 0
        self.session: WorkerSession | None = None
        self.events = self.ctx.log  # in hold mode, each transaction's Tentative buffer (see _claim)
        self.ctx.worker_names.append(self.name)
        self.ctx.running_workers += 1
        self.connected_once = False
        self._connect()

    def _connect(self) -> None:
        """Open this worker's session, retrying with back-off; a first session refused for good
        (``ConnectFailed.permanent``) is reported in ``ctx.refused`` instead, once, and not retried."""
        delay = RECONNECT_BASE_S
        while not self.ctx.stopping:
            if self.ctx.refused is not None and not self.connected_once:
                gevent.sleep(RECONNECT_CAP_S)  # the run is stopping for it
                return
            try:
                self.session = self.ctx.sessions.worker_session(self.name)
                self.ctx.disconnected.discard(self.name)
                if self.ctx.partition is not None:
                    self.ctx.partition.connected(self.name)
                if self.connected_once:  # a session re-made after a loss
                    self.ctx.recorder.count("reconnects")
                if not self.connected_once:
                    self.connected_once = True
                    self.ctx.connected_workers += 1
                return
            except ConnectFailed as err:
                if err.permanent and not self.connected_once:
                    self.ctx.refused = {"worker": self.name, "kind": err.kind, "message": str(err),
                                        "cause": err.cause}
                    continue
                self._error(err.kind)
                gevent.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(RECONNECT_CAP_S, delay * 2)
            except EngineError as err:
                self._error(err.kind)
                gevent.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(RECONNECT_CAP_S, delay * 2)

    def _error(self, kind: str) -> None:
        """Count an error of ``kind`` (and, during a partition, note it for this worker)."""
        self.ctx.recorder.error(kind)
        if self.ctx.partition is not None:
            self.ctx.partition.error(self.name, kind)

    def on_stop(self) -> None:
        self.ctx.running_workers -= 1
        if self.session is not None:
            self.session.close()
        self._abandon_claims(in_doubt=False)

    def _abandon_claims(self, *, in_doubt: bool) -> None:
        """``TXN=hold``: the transaction ended without its ``COMMIT`` returning: drop its claims from the log and
        count them, ``rolled_back_claims``, or ``in_doubt_claims`` when the ``COMMIT`` was sent and the
        connection lost (see docs/reading-the-report.md)."""
        events = self.events
        if not self.hold or events is self.ctx.log or not events.claims:
            return
        self.ctx.recorder.count("in_doubt_claims" if in_doubt and events.commit_sent else "rolled_back_claims",
                                events.claims)
        self.events = self.ctx.log.tentative()

    def _backoff_nowait(self, kind: str) -> None:
        self.nowait_failures = min(self.nowait_failures + 1, jobs.NOWAIT_BACKOFF_MAX_LEVEL)
        started = time.perf_counter()
        gevent.sleep(jobs.nowait_backoff_s(self.nowait_failures))
        # The lock-not-available error (55P03 on PostgreSQL), its retry and its sleep are counted together
        # when the sleep ends, so they fall in the same second: errors[kind] = nowait_retries = back-off count.
        self.ctx.recorder.error(kind)
        self.ctx.recorder.count("nowait_retries")
        self.ctx.recorder.nowait_backoff(int((time.perf_counter() - started) * 1e6))

    @task
    def work_until_stopped(self) -> None:
        """Run claim/work/complete cycles until the run stops (many per Locust task)."""
        self.ctx.go.wait()
        # Locust asks this one user to stop (the web UI lowered the worker count) by its state:
        # it finishes its cycle, reads its plan counts and leaves; the run goes on.
        while not self.ctx.stopping and self._state != LOCUST_STATE_STOPPING:
            self.claim_work_complete()
        self.read_plan_state()

    def read_plan_state(self) -> None:
        """As the load stops, read this session's plan counts into the context; the first worker then explains
        the claim on its own connection (after the counts: it adds an execution). Errors are recorded."""
        session = self.session
        if session is None or session.broken:
            return
        session.rollback()
        try:
            counts = session.plan_counts()
            if counts is not None:
                self.ctx.plan_sessions.append({"worker": self.name, **counts})
        except EngineError as err:
            self.ctx.plan_sessions.append({"worker": self.name, "error": str(err)})
        if self.ctx.worker_explain is not None or not self.ctx.stopping:  # the EXPLAIN: as the run stops
            return
        self.ctx.worker_explain = {"worker": self.name}  # claimed by this worker before any wait
        try:
            self.ctx.worker_explain["text"] = session.explain_claim(EXPLAIN_TIMEOUT_MS)
        except EngineError as err:
            self.ctx.worker_explain["error"] = str(err)

    def claim_work_complete(self) -> None:
        """One cycle: claim up to ``batch`` jobs, run them, complete them. Errors are counted by kind; 55P03
        backs off with jitter; a lost connection is re-opened with back-off. The round trips the cycle sent are
        counted as it ends, ``worker_round_trips`` (docs/network.md)."""
        if self.session is None or self.session.broken:
            self._lose_session()
            self._connect()
            return
        session, sent = self.session, self.session.round_trips_sent
        try:
            self._cycle()
        finally:
            self.ctx.recorder.count("worker_round_trips", session.round_trips_sent - sent)

    def _cycle(self) -> None:
        """:meth:`claim_work_complete`'s cycle on the open session."""
        try:
            rows = self._claim()
            if not rows:
                if self.hold:
                    self.session.rollback()
                # Nothing eligible: sleep POLL_MS, or with WAKEUP=notify wait at most that long for a producer's notification.
                if self.session.wait_for_work(self.poll_s):
                    self.ctx.recorder.count("notify_wakeups")
                return
            self.nowait_failures = max(0, self.nowait_failures - 1)
            if self._crash("crash_after_claim", rows):
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
                    if self.effect_in_work and self.session.effect(job[0], job[1]):
                        self.ctx.log.effected(job[0], job[1])  # committed on its own, in either TXN mode
            if self._crash("crash_before_complete", rows if self.hold else succeeded):  # short: failures applied
                return
            if late_s:
                gevent.sleep(late_s)
            if succeeded:
                self._complete(succeeded)
            elif self.hold:
                self._commit()
        except LockNotAvailable as err:
            self.session.rollback()
            self._backoff_nowait(err.kind)
        except EngineError as err:
            self._error(err.kind)
            lost = err.lost or self.session.broken
            if lost:
                self._lose_session()
            else:
                self.session.rollback()
            self._abandon_claims(in_doubt=lost)
            if not lost:
                gevent.sleep(ERROR_PAUSE_S)

    def _crash(self, kind: str, rows: list) -> bool:
        """Fault ``kind`` (``crash_after_claim``: before the work; ``crash_before_complete``: after it): drop the
        connection with the claimed rows unfinished, once per window."""
        chosen = self.ctx.active_faults.get(kind)
        if not chosen or self.name not in chosen or self.name in self.ctx.crashed.setdefault(kind, set()):
            return False
        self.ctx.crashed[kind].add(self.name)
        self.ctx.recorder.count("crashed_claims")
        self.ctx.recorder.count("crashed_jobs", len(rows))
        # Short mode: the claims stay in the log as in flight, so a re-claim before their lease expires
        # is a double claim. Hold mode: the close rolls them back; their Tentative buffer is dropped.
        self.session.close()
        self._lose_session()
        self._abandon_claims(in_doubt=False)
        return True

    def _lose_session(self) -> None:
        """This worker has no session now (lost, or crashed by a fault) until :meth:`_connect` reopens one."""
        self.session = None
        self.ctx.disconnected.add(self.name)

    def _late_by_s(self) -> float:
        """Fault ``late_worker``: how long past the lease to wait before completing (0 when not chosen)."""
        chosen = self.ctx.active_faults.get("late_worker")
        if not chosen or self.name not in chosen:
            return 0.0
        self.ctx.recorder.count("late_completions")
        return self.ctx.cfg.lease_s + self.ctx.late_extra_s

    def _claim(self) -> list:
        """Claim; returns ``[(id, token, pickup_us, attempts, lease_until, claimed_at)]``."""
        started, sent = time.perf_counter(), self.session.round_trips_sent
        if self.hold:
            self._abandon_claims(in_doubt=False)  # a transaction that ended some other way than above
            self.session.begin()
            self.events = self.ctx.log.tentative()  # logged only once the COMMIT returns
        claimed = self.session.claim()
        latency_us = int((time.perf_counter() - started) * 1e6)
        self.ctx.recorder.count("claim_round_trips", self.session.round_trips_sent - sent)  # those timed above
        log = self.events
        for job in claimed:
            log.claimed(job[0], job[1], job[4], job[5])
        # pickup is None for a queue definition whose claim does not return its eligible_at column
        self.ctx.recorder.claim(latency_us, len(claimed), [job[2] for job in claimed if job[2] is not None])
        return claimed

    def _fail(self, job: tuple, error: str) -> None:
        """Report one failed attempt: retry after a back-off, or dead letter past max_attempts."""
        job_id, token, _, attempts = job[:4]
        cfg = self.ctx.cfg
        status = self.session.fail(job_id, token, jobs.retry_delay_s(attempts, cfg.retry_base_s, cfg.retry_cap_s),
                                   error)
        if status is None:  # fenced: the lease expired and the job moved on without this worker
            self.ctx.recorder.count("stale_completions")
        else:
            self.ctx.recorder.count("dead_lettered" if status == "dead" else "retries")
        self.events.failed(job_id, token)

    def _commit(self) -> None:
        """``TXN=hold``: commit the claim's transaction; its claims are logged once the ``COMMIT`` returns."""
        self.events.commit_sent = True
        self.session.commit()
        self.events.commit()

    def _complete(self, claimed: list) -> None:
        started, sent = time.perf_counter(), self.session.round_trips_sent
        applied_ids = self.session.complete([(job[0], job[1]) for job in claimed])
        if self.hold:
            self._commit()
        latency_us = int((time.perf_counter() - started) * 1e6)
        self.ctx.recorder.count("complete_round_trips", self.session.round_trips_sent - sent)  # those timed above
        self.ctx.recorder.complete(latency_us, len(applied_ids), len(claimed) - len(applied_ids))
        log = self.ctx.log
        for job in claimed:
            log.finished(job[0], job[1], job[0] in applied_ids)
