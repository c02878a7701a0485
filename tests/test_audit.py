"""Mutation tests of the end-of-run audit (:mod:`bench.engines.postgres.audit`) against the real PostgreSQL.

Each test prepares the tool's table with :func:`bench.engines.postgres.db.prepare`, drives claims,
completions and failures the way the workers do (the workers' prepared
statements from :mod:`bench.engines.postgres.policies` through :class:`bench.engines.postgres.session.PreparedSession`,
every event into a :class:`bench.measure.claimlog.ClaimLog`, every claim into a
:class:`bench.measure.metrics.Recorder`), injects exactly ``K`` violations of one kind,
and checks that :func:`bench.engines.postgres.audit.run_audit` counts exactly ``K`` for that
invariant and 0 for every other. A clean control run returns all zeros, so an
audit that always answered 0 (or always the same number) fails here.

The violations are made with the tool's own statements with one safeguard taken
out (the lease check of the claim, the token or the status check of the
completion, the materialized CTE of the claim), or by changing rows behind the
tool's back (a DELETE, a copy into the archive).
"""

from __future__ import annotations

import time

import psycopg
import pytest
from psycopg import sql

from bench.engines.postgres import audit
from bench.engines.postgres import db
from bench.engines.postgres import policies
from bench.engines.postgres.policies import insert_sql
from bench.engines.postgres.probes import FR03_SETTINGS
from bench.measure.claimlog import ClaimLog
from bench.config.run_config import RunConfig, build_config
from bench.engines.postgres.session import PreparedSession, int_array
from bench.engines.postgres.session import rows as rows_of
from bench.measure.metrics import Recorder
from conftest import CLEAN_INVARIANTS, run_and_load

SCHEMA = "qbench_audit"
#: Violations injected per test.
K = 3
BACKLOG = 12
BATCH = 3
LEASE_S = 60.0


def _without(text: str, safeguard: str, replacement: str = "") -> str:
    """``text`` with ``safeguard`` replaced; fails if the safeguard is not in the statement."""
    assert safeguard in text, (safeguard, text)
    return text.replace(safeguard, replacement)


def _statements(schema: str, policy: str) -> dict[str, str]:
    """The workers' statements, plus each one with a safeguard removed (the mutations)."""
    real = policies.prepared_statements(schema, policy)
    return {
        **real,
        # a second session claims rows another holds under a live lease
        "claim_leased": _without(real["claim"], "WHERE status = 'pending' AND run_at <= now()",
                                 "WHERE status = 'running' AND lease_expires_at > now()"),
        "claim_naive": policies.naive_subselect_claim(real["claim"]),
        "complete_untokened": _without(real["complete_many"], " AND j.attempt_token = c.token"),
        "complete_again": _without(real["complete_many"], " AND j.status = 'running'"),
        "insert": insert_sql(schema, 5),
    }


class Worker:
    """One worker's statements on its own connection, logged as :class:`bench.load.swarm.QueueWorker` logs them:
    claims into the log (in ``hold`` mode into a tentative buffer committed with the transaction),
    each claim into the recorder, every completion attempt and failure into the log."""

    def __init__(self, dsn: str, cfg: RunConfig, log: ClaimLog, recorder: Recorder, name: str, *,
                 hold: bool = False):
        self.conn = psycopg.connect(dsn, autocommit=True, application_name=f"queue-bench test {name}")
        self.session = PreparedSession(self.conn, _statements(cfg.schema, cfg.policy))
        self.cfg, self.log, self.recorder, self.name, self.hold = cfg, log, recorder, name, hold
        self.events = log

    def claim(self, statement: bytes = b"claim", *, batch: int = BATCH, lease_s: float = LEASE_S) -> list[tuple]:
        """Run a claim statement; return ``[(id, token)]`` of the rows it returned."""
        started = time.perf_counter()
        if self.hold:
            self.session.command(b"BEGIN")
            self.events = self.log.tentative()
        result = self.session.execute(statement, [str(batch).encode(), self.name.encode(), repr(lease_s).encode()])
        latency_us = int((time.perf_counter() - started) * 1e6)
        jobs = []
        for r in rows_of(result):
            self.events.claimed(int(r[0]), int(r[1]), float(r[4]), float(r[5]))
            jobs.append((int(r[0]), int(r[1]), int(r[2])))
        self.recorder.claim(latency_us, len(jobs), [j[2] for j in jobs])
        if self.hold and not jobs:
            self.session.command(b"ROLLBACK")
        return [(j[0], j[1]) for j in jobs]

    def complete(self, jobs: list[tuple], statement: bytes = b"complete_many") -> set[int]:
        """Complete ``[(id, token)]``; return the ids the database applied."""
        result = self.session.execute(statement, [int_array([j[0] for j in jobs]), int_array([j[1] for j in jobs])])
        applied = {int(r[0]) for r in rows_of(result)}
        self.commit()
        self.recorder.complete(1, len(applied), len(jobs) - len(applied))
        for job_id, token in jobs:
            self.log.finished(job_id, token, job_id in applied)
        return applied

    def fail(self, job: tuple, delay_s: float = 0.0) -> None:
        """Report a failed attempt; the job is pending again after ``delay_s``."""
        self.session.execute(b"fail", [str(job[0]).encode(), str(job[1]).encode(), repr(delay_s).encode(),
                                       b"injected failure"])
        self.events.failed(job[0], job[1])

    def commit(self) -> None:
        """In hold mode, COMMIT the transaction and log its events."""
        if self.hold:
            self.session.command(b"COMMIT")
            self.events.commit()

    def close(self) -> None:
        self.session.close()


@pytest.fixture
def run(dsn):
    """A fresh table (``layout`` same unless the test prepares another), a log, a recorder and workers."""
    state = Run(dsn)
    yield state
    state.close()


class Run:
    """One simulated run: prepare, workers, the audit."""

    def __init__(self, dsn: str):
        self.dsn = dsn
        self.log = ClaimLog()
        self.recorder = Recorder(BATCH)
        self.workers: list[Worker] = []
        self.conn = db.connect(dsn, application_name="queue-bench test admin")
        self.conn.execute("SET lock_timeout = '10s'")  # a test that leaves a lock behind fails, never hangs
        self.cfg = None

    def prepare(self, *, layout: str = "same", history: int = 0, max_attempts: int = 5) -> None:
        self.cfg = build_config("default", {"schema": SCHEMA, "index": "partial", "layout": layout,
                                            "history": history, "batch": BATCH, "max_attempts": max_attempts},
                                dsn=self.dsn)
        db.prepare(self.conn, self.cfg, BACKLOG, log=lambda _msg: None)

    def worker(self, name: str, *, hold: bool = False) -> Worker:
        w = Worker(self.dsn, self.cfg, self.log, self.recorder, name, hold=hold)
        self.workers.append(w)
        return w

    def execute(self, query: str, params: dict | None = None) -> int:
        """Run ``query`` on the admin connection with ``{jobs}``/``{archive}`` bound; return its row count."""
        names = {"jobs": sql.Identifier(SCHEMA, "jobs"), "archive": sql.Identifier(SCHEMA, "jobs_archive")}
        return self.conn.execute(sql.SQL(query).format(**names), params).rowcount

    def drain(self, worker: Worker) -> int:
        """Claim and complete until no row is eligible; return the jobs completed."""
        done = 0
        while jobs := worker.claim():
            done += len(worker.complete(jobs))
        return done

    def audit(self) -> dict:
        return audit.run_audit(self.conn, SCHEMA, self.log, seeded_rows=self.cfg.history + BACKLOG,
                               over_claims=self.recorder.counters["over_claims"],
                               relation="jobs_all" if self.cfg.layout == "archive" else "jobs")

    def close(self) -> None:
        for w in self.workers:
            w.close()
        self.conn.close()
        self.log.close()


def _only(name: str, k: int = K) -> dict:
    return {**CLEAN_INVARIANTS, name: k}


def test_clean_control_run_audits_all_zero(run):
    """Claims in batches, one failure re-claimed, everything completed: every invariant 0, and the
    details count what happened (12 jobs, 13 claims, one redelivery, one retry gap)."""
    run.prepare()
    a = run.worker("a")
    first = a.claim()
    a.fail(first[0])
    a.complete(first[1:])
    assert run.drain(a) == BACKLOG - 2
    result = run.audit()
    assert result["invariants"] == CLEAN_INVARIANTS
    assert result["status_counts"] == {"done": BACKLOG}
    assert result["redeliveries"] == 1
    assert result["details"]["jobs_claimed_distinct"] == BACKLOG
    assert result["details"]["completions_applied"] == BACKLOG
    assert result["details"]["rows_expected"] == result["details"]["rows_present"] == BACKLOG
    assert len(result["retry_gaps"]) == 1 and len(result["retry_gaps"][0]) == 1 and result["retry_gaps"][0][0] >= 0


def test_double_claims_are_counted(run):
    """A second session claims K leased rows with the lease check bypassed: exactly K double claims,
    although the database's attempts agree with the claims (the overlap is what gives them away)."""
    run.prepare()
    a, b = run.worker("a"), run.worker("b")
    held = a.claim()
    stolen = b.claim(b"claim_leased")
    assert sorted(j[0] for j in stolen) == sorted(j[0] for j in held)
    assert a.complete(held) == set()  # the thief's tokens fence the holder out
    assert len(b.complete(stolen)) == K
    run.drain(a)
    result = run.audit()
    assert result["invariants"] == _only("double_claims")
    assert result["details"]["claims_under_live_lease"] == K
    assert result["details"]["claims_beyond_attempts"] == 0


def test_lost_jobs_are_counted_once_each(run):
    """Rows deleted behind the tool's back: a pending seeded row, a completed one (its acknowledged
    completion is not durable either, but the job is lost once) and a produced one: exactly K lost."""
    run.prepare()
    a = run.worker("a")
    produced = rows_of(a.session.execute(b"insert", [b"{0}", ("{" + repr(time.time()) + "}").encode()]))
    run.log.produced(int(r[0]) for r in produced)
    first = a.claim()
    a.complete(first)
    gone = [first[0][0], BACKLOG, int(produced[0][0])]
    assert run.execute("DELETE FROM {jobs} WHERE id = ANY(%(ids)s)", {"ids": gone}) == K
    run.drain(a)
    result = run.audit()
    assert result["invariants"] == _only("lost_jobs")
    assert result["details"]["rows_missing"] == K
    assert result["details"]["completions_not_durable"] == 1


def test_over_claims_are_counted(run):
    """FR-03's naive sub-select form of the claim under a forced nested loop, K times: each returns
    every pending row instead of BATCH, and the recorder counts exactly K over-claims."""
    run.prepare(max_attempts=K + 1)
    a = run.worker("a")
    for name in FR03_SETTINGS:
        a.session.command(f"SET {name} = off".encode())
    for _ in range(K):
        jobs = a.claim(b"claim_naive")
        assert len(jobs) == BACKLOG > BATCH
        for job in jobs:
            a.fail(job)  # pending again at once, for the next round
    for name in FR03_SETTINGS:
        a.session.command(f"RESET {name}".encode())
    run.drain(a)
    result = run.audit()
    assert result["invariants"] == _only("over_claims")
    assert result["redeliveries"] == K * BACKLOG  # (K naive rounds + the drain) x BACKLOG claims, less each first


def test_stale_completions_applied_are_counted(run):
    """A worker's lease expires, the reaper re-queues its K jobs and another claims them; the first
    then completes without the token check: exactly K stale completions applied (the rightful
    holder's completion is fenced out by the status, as it must be)."""
    run.prepare()
    late, b = run.worker("late"), run.worker("b")
    expired = late.claim(lease_s=0.05)
    time.sleep(0.2)
    assert run.conn.execute(policies.reap_sql(SCHEMA)).rowcount == K
    again = b.claim()
    assert sorted(j[0] for j in again) == sorted(j[0] for j in expired)
    assert len(late.complete(expired, b"complete_untokened")) == K
    assert b.complete(again) == set()
    run.drain(b)
    result = run.audit()
    assert result["invariants"] == _only("stale_completions_applied")


def test_double_completions_are_counted(run):
    """K jobs completed, then completed again without the status check: exactly K double completions."""
    run.prepare()
    a = run.worker("a")
    jobs = a.claim()
    assert len(a.complete(jobs)) == K
    assert len(a.complete(jobs, b"complete_again")) == K
    run.drain(a)
    result = run.audit()
    assert result["invariants"] == _only("double_completions")


def test_duplicated_jobs_are_counted_and_do_not_hide_lost_ones(run):
    """Archive layout: K rows copied into the archive without leaving the queue (a mover without its
    DELETE) and K other rows deleted. The row count is what it should be, but the audit says
    K duplicated and K lost."""
    run.prepare(layout="archive", history=5)
    a = run.worker("a")
    run.drain(a)
    copied = run.execute("INSERT INTO {archive} SELECT * FROM {jobs} WHERE id IN (6, 7, 8)")
    deleted = run.execute("DELETE FROM {jobs} WHERE id IN (9, 10, 11)")
    assert copied == deleted == K
    result = run.audit()
    assert result["details"]["rows_present"] == result["details"]["rows_expected"] == 5 + BACKLOG
    assert result["invariants"] == {**CLEAN_INVARIANTS, "duplicated_jobs": K, "lost_jobs": K}


def _wait_gone(conn: psycopg.Connection, pids: list[int]) -> None:
    """Wait (at most 10 s) until the backends ``pids`` have exited, their transactions rolled back."""
    deadline = time.monotonic() + 10
    while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchone()[0]:
        assert time.monotonic() < deadline, f"backends {pids} still there"
        time.sleep(0.01)


def _rolled_back_then_reclaimed(run: Run, *, record_uncommitted: bool) -> tuple[list, list, dict]:
    """TXN=hold: three workers claim a job each; one crashes (its connection closed), one rolls back,
    one has its backend killed. Another worker then claims and completes the same jobs and drains
    the queue. With ``record_uncommitted`` the first three log their claims at once, as the claim
    log did before it waited for the COMMIT. Returns (rolled-back jobs, re-claimed jobs, audit)."""
    run.prepare()
    crashed, rolled, killed = (run.worker(n, hold=True) for n in ("crashed", "rolled", "killed"))
    rolled_back = []
    for w in (crashed, rolled, killed):
        rolled_back += w.claim(batch=1)
        if record_uncommitted:
            w.events.commit()
    pids = [crashed.conn.info.backend_pid, killed.conn.info.backend_pid]
    crashed.close()
    run.workers.remove(crashed)
    rolled.session.command(b"ROLLBACK")
    run.conn.execute("SELECT pg_terminate_backend(%s)", (pids[1],))
    with pytest.raises(psycopg.OperationalError):
        killed.complete(rolled_back[-1:])
    _wait_gone(run.conn, pids)
    b = run.worker("b", hold=True)
    again = b.claim()
    assert len(b.complete(again)) == K
    run.drain(b)
    return rolled_back, again, run.audit()


def test_rolled_back_hold_claims_are_not_claims(run, dsn):
    """A crash, a ROLLBACK and a killed backend end K hold-mode claims without COMMIT; the rows come
    straight back and another worker claims them: no double claim, no redelivery. The same claims
    logged when they were made (the old log) would have counted K double claims."""
    rolled_back, again, result = _rolled_back_then_reclaimed(run, record_uncommitted=False)
    assert len(rolled_back) == K
    assert sorted(j[0] for j in again) == sorted(j[0] for j in rolled_back)
    assert result["invariants"] == CLEAN_INVARIANTS
    assert result["redeliveries"] == 0

    before = Run(dsn)
    try:
        _, _, result = _rolled_back_then_reclaimed(before, record_uncommitted=True)
    finally:
        before.close()
    assert result["invariants"]["double_claims"] == K
    assert result["details"]["claims_under_live_lease"] == result["details"]["claims_beyond_attempts"] == K


@pytest.mark.slow
def test_crashy_hold_run_audits_clean(dsn, tmp_path):
    """`qbench run --workload crashy --txn hold`, shortened: workers crash after claiming and
    backends are killed inside hold transactions; each rolls its claims back, so the rows' next
    claims are legitimate and every invariant is 0."""
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--workload", "crashy", "--txn", "hold", "--duration", "8s",
                                 "--warmup", "1s", "--faults", "crash_after_claim@0-3:share=0.2;backend_kill@3-6:every_s=1")
    assert s["crashed_claims"] >= 1 and s["backend_kills"] >= 1, (s["crashed_claims"], s["backend_kills"])
    assert s["invariants"] == CLEAN_INVARIANTS
    assert s["audit"]["rows_present"] == s["audit"]["rows_expected"] == sum(s["status_counts"].values())
