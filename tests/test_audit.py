"""Mutation tests of the end-of-run audit, written once and run over every target of
``tests/audit_targets.py``: PostgreSQL's built-in queue, MariaDB's, and two queue definitions shipped in
``bench/data/queues/`` (``model``, with an attempt token, a lease and an attempt count; ``tasks``, a team's
table with none of them), against the real servers.

Each test prepares the target's table through its engine (no load), drives claims, completions and
failures through the engine's own worker sessions, logged as the workers log them, injects exactly
``K`` violations of one kind, and checks that the engine's audit counts exactly ``K`` for that invariant
and 0 for every other. A clean control run returns all zeros, so an audit that always answered 0 (or
always the same number) fails here.

The violations are made with the target's own statements with one safeguard taken out (the lease check
of the claim, its limit, the token or the status check of the completion), or by changing rows behind
the tool's back (a DELETE, a copy of rows). A mutation runs on every target but where the target
cannot break the invariant at all: :data:`EXCLUDED` lists those, with why, and
:func:`test_what_a_target_cannot_break_is_named_uncheckable` checks that the audit (and so
``summary.json``'s ``uncheckable_invariants``) names each of them.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from audit_targets import BACKLOG, K, POISON_SHARE, TARGETS, Run, Target, assert_audit_left_nothing
from bench.engines.base import EngineError
from bench.run_summary.summary import _audit as summary_audit_block
from bench.workload.jobs import is_poison
from conftest import CLEAN_INVARIANTS, run_and_load

#: (target, invariant, why no mutation can break it there): the documented exclusions of the matrix.
EXCLUDED = [(t, invariant, why) for t in TARGETS.values() for invariant, why in t.exclusions.items()]


def targets_for(invariant: str | None = None) -> list:
    """The targets a mutation breaking ``invariant`` runs on: all but those that exclude it (see
    :data:`EXCLUDED`: an exclusion is part of the parametrization, not a skip at run time)."""
    return [pytest.param(t, id=t.name) for t in TARGETS.values() if invariant not in t.exclusions]


@pytest.fixture
def run(request, dsn):
    """A run of the target the test is parametrized with (``indirect``); its schema dropped at the end."""
    state = Run(request.param, dsn)
    yield state
    state.close()


def _ids(jobs: list[tuple[int, int]]) -> list[int]:
    return sorted(j[0] for j in jobs)


def _nonzero(counts: dict) -> dict:
    return {k: v for k, v in counts.items() if v}


@pytest.mark.parametrize("run", targets_for(), indirect=True)
def test_clean_control_run_audits_all_zero(run):
    """Claims in batches, poison jobs failed until dead (where a failure is retried), one other job failed
    once, everything else completed: every invariant 0, and the details count what happened."""
    t = run.target
    poison = {i for i in range(1, BACKLOG + 1) if is_poison(i, POISON_SHARE)}
    assert poison == {2, 5, 10}
    run.prepare(max_attempts=2, poison_share=POISON_SHARE)
    a = run.worker("a")
    failed_once, completed = None, 0
    while jobs := a.claim():
        done = []
        for job in jobs:
            if job[0] in poison:
                assert a.fail(job) in ("pending", "dead")
            elif failed_once is None:
                failed_once = job[0]
                assert a.fail(job) == ("pending" if t.retries else "dead")
            else:
                done.append(job)
        if done:
            assert a.complete(done) == {j[0] for j in done}
            completed += len(done)
    result = run.audit()
    retried = len(poison) + 1 if t.retries else 0
    failed_for_good = len(poison) + (0 if t.retries else 1)
    assert completed == BACKLOG - failed_for_good
    assert result["invariants"] == run.only()
    assert _nonzero(result["status_counts"]) == {"done": completed, "dead" if t.builtin else "other": failed_for_good}
    assert result["redeliveries"] == retried
    d = result["details"]
    assert d["jobs_claimed_distinct"] == BACKLOG and d["jobs_claimed_more_than_once"] == retried
    assert d["completions_applied"] == completed
    assert d["rows_expected"] == d["rows_present"] == BACKLOG
    assert d["rows_missing"] == d["rows_duplicated"] == d["completions_not_durable"] == 0
    assert d["claims_under_live_lease"] == 0 and d["claims_beyond_attempts"] == (0 if t.attempts else None)
    assert d["claim_log_events"] == run.log.events == (BACKLOG + retried) * 2
    if t.builtin:  # the built-in audits also read the poison jobs, the retry gaps and the FIFO order
        assert (d["poison_jobs"], d["poison_done"], d["poison_dead"]) == (len(poison), 0, len(poison))
        assert d["poison_dead_attempts_min"] == d["poison_dead_attempts_max"] == 2
        assert len(result["retry_gaps"]) == retried
        assert all(len(gaps) == 1 and gaps[0] >= 0 for gaps in result["retry_gaps"])
        # one worker starts jobs in claim order; the failed jobs' run_at moved past their first claim
        assert d["fifo_jobs_compared"] == BACKLOG - retried and result["fifo_out_of_order_share"] == 0.0
        # PostgreSQL's built-in table also says which claimant holds each running job (not built for MariaDB)
        by_claimant = {"running_by_claimant"} if t.engine == "postgres" else set()
        assert set(result) == {"invariants", "status_counts", "details", "redeliveries", "retry_gaps",
                               "fifo_out_of_order_share", "effects", *by_claimant}
        if by_claimant:  # the jobs still running, by claimant: as many as the status counts say
            held = sum(n for n, _ in result["running_by_claimant"].values())
            assert held == result["status_counts"].get("running", 0), result["running_by_claimant"]
        assert result["effects"] is None  # EFFECTS=none: nothing written, nothing counted
    else:
        assert result["retry_gaps"] is None
        assert set(result["uncheckable"]) == set(t.exclusions)
    assert_audit_left_nothing(run)


@pytest.mark.parametrize("run", targets_for("double_claims"), indirect=True)
def test_double_claims_are_counted(run):
    """A second session claims K leased rows with the claim's eligibility turned into "running under a
    live lease" (a queue without a lease: "running for another worker"): exactly K double claims,
    although the database's attempts agree with the claims (the overlap is what gives them away). A
    token fences the holder out; without one, the holder's completion lands too: K double completions."""
    run.prepare()
    a, b = run.worker("a"), run.worker("b", "steal")
    held = a.claim_n()
    stolen = b.claim_n()
    assert len(held) == K and _ids(stolen) == _ids(held)
    assert a.complete(held) == (set() if run.target.fenced else set(_ids(held)))
    assert len(b.complete(stolen)) == K
    run.drain(a)
    result = run.audit()
    unfenced = {} if run.target.fenced else {"double_completions": K}
    assert result["invariants"] == run.only(double_claims=K, **unfenced)
    assert result["details"]["claims_under_live_lease"] == K
    assert result["details"]["claims_beyond_attempts"] == (0 if run.target.attempts else None)
    assert result["redeliveries"] == K


@pytest.mark.parametrize("run", targets_for("lost_jobs"), indirect=True)
def test_lost_jobs_are_counted_once_each(run):
    """Rows deleted behind the tool's back: a pending seeded row, a completed one (its acknowledged
    completion is not durable either, but the job is lost once) and a produced one: exactly K lost."""
    run.prepare(history=5)
    producer = run.engine.sessions(run.dsn, run.cfg).producer_session("producer")
    try:
        produced = producer.insert([0], [time.time()])
    finally:
        producer.close()
    run.log.produced(produced)
    a = run.worker("a")
    first = a.claim()
    assert len(a.complete(first)) == run.cfg.batch
    gone = [first[0][0], 5 + BACKLOG, produced[0]]
    assert run.execute("DELETE FROM {jobs} WHERE id IN (" + ", ".join(map(str, gone)) + ")") == K
    run.drain(a)
    result = run.audit()
    assert result["invariants"] == run.only(lost_jobs=K)
    assert result["details"]["rows_missing"] == K
    assert result["details"]["completions_not_durable"] == 1
    assert result["details"]["rows_expected"] == 5 + BACKLOG + 1
    assert result["details"]["rows_present"] == 5 + BACKLOG + 1 - K


@pytest.mark.parametrize("run", targets_for("over_claims"), indirect=True)
def test_over_claims_are_counted(run):
    """A claim that takes more than the batch, K times (PostgreSQL: FR-03's naive sub-select form under a
    forced nested loop, every pending row; MariaDB, which refuses that form, and the tasks queue: the
    claim's limit raised by one): the recorder counts them as the workers' does (rows > batch), exactly
    K over-claims. The jobs go back to pending (failed) for the next round where a failure is retried."""
    t = run.target
    run.prepare(max_attempts=K + 1)
    greedy = run.worker("greedy", "greedy")
    for _ in range(K):
        jobs = greedy.claim()
        assert len(jobs) == t.greedy_rows > run.cfg.batch
        if t.retries:
            assert {greedy.fail(job) for job in jobs} == {"pending"}  # pending again at once
        else:
            assert greedy.complete(jobs) == set(_ids(jobs))
    assert run.recorder.max_rows_per_claim == t.greedy_rows
    run.drain(run.worker("a"))
    result = run.audit()
    assert result["invariants"] == run.only(over_claims=K)
    # each over-claimed job claimed once more by the next round or the drain
    assert result["redeliveries"] == (K * t.greedy_rows if t.retries else 0)
    assert _nonzero(result["status_counts"]) == {"done": BACKLOG}


@pytest.mark.parametrize("run", targets_for("stale_completions_applied"), indirect=True)
def test_stale_completions_applied_are_counted(run):
    """A worker's lease expires, the engine's reaper re-queues its K jobs and another claims them; the
    first worker's completion then goes through without the token check: exactly K stale completions
    applied (the rightful holder's completion is fenced out by the status, as it must be)."""
    run.prepare()
    late, b = run.worker("late", lease_s=0.05), run.worker("b")
    expired = late.claim_n()
    time.sleep(0.2)
    assert run.reap() == (K, 0)
    again = b.claim_n()
    assert _ids(again) == _ids(expired)
    assert len(run.worker("late", "untokened").complete(expired)) == K
    assert b.complete(again) == set()
    run.drain(b)
    result = run.audit()
    assert result["invariants"] == run.only(stale_completions_applied=K)
    assert result["details"]["claims_under_live_lease"] == 0  # the first lease had expired: a legitimate re-claim


@pytest.mark.parametrize("run", targets_for("double_completions"), indirect=True)
def test_double_completions_are_counted(run):
    """K jobs completed, then completed again without the status check (the tasks queue's completion has
    none to take out): exactly K double completions."""
    run.prepare()
    a = run.worker("a")
    jobs = a.claim_n()
    assert len(a.complete(jobs)) == K
    assert len(run.worker("again", "again").complete(jobs)) == K
    run.drain(a)
    result = run.audit()
    assert result["invariants"] == run.only(double_completions=K)


@pytest.mark.parametrize("run", targets_for("duplicated_jobs"), indirect=True)
def test_duplicated_jobs_are_counted_and_do_not_hide_lost_ones(run):
    """K rows stored twice (PostgreSQL's archive layout: copied into the archive without leaving the
    queue, a mover without its DELETE; elsewhere the id's key dropped behind the tool's back, which
    refuses the copy while it stands) and K other rows deleted. The row count is what it should be,
    but the audit says K duplicated and K lost."""
    dup = run.target.duplicate
    run.prepare(history=5, **dup.config)
    run.drain(run.worker("a"))
    if dup.unlock is not None:
        assert run.error_code(dup.copy) == dup.refused
        run.execute(dup.unlock)
    copied = run.execute(dup.copy)
    deleted = run.execute("DELETE FROM {jobs} WHERE id IN (9, 10, 11)")
    assert copied == deleted == K
    result = run.audit()
    assert result["details"]["rows_present"] == result["details"]["rows_expected"] == 5 + BACKLOG
    assert result["invariants"] == run.only(duplicated_jobs=K, lost_jobs=K)


@pytest.mark.parametrize("target, invariant, why", [pytest.param(*e, id=f"{e[0]}-{e[1]}") for e in EXCLUDED])
def test_what_a_target_cannot_break_is_named_uncheckable(dsn, target: Target, invariant: str, why: str):
    """Each documented exclusion: the audit leaves the invariant out of ``invariants`` (never a 0) and
    ``summary.json``'s ``uncheckable_invariants`` names it, for the reason the exclusion gives."""
    run = Run(target, dsn)
    try:
        run.prepare()
        run.drain(run.worker("a"))
        result = run.audit()
    finally:
        run.close()
    assert invariant not in result["invariants"] and set(result["invariants"]) == set(CLEAN_INVARIANTS) - {invariant}
    block = summary_audit_block(SimpleNamespace(facts=SimpleNamespace(audit=result, run_info={})))
    assert block["invariants"] == result["invariants"]
    assert block["uncheckable_invariants"][invariant].split(":")[0] == why.split(":")[0]


def _rolled_back_then_reclaimed(run: Run, *, record_uncommitted: bool) -> tuple[list, list, dict]:
    """TXN=hold: three workers claim a job each in a transaction; one crashes (its connection closed),
    one rolls back, one has its connection killed. Another worker then claims and completes the same
    jobs and drains the queue. With ``record_uncommitted`` the first three log their claims at once,
    as the claim log did before it waited for the COMMIT. Returns (rolled-back jobs, re-claimed jobs,
    audit)."""
    run.prepare()
    crashed, rolled, killed = (run.worker(n, batch=1) for n in ("crashed", "rolled", "killed"))
    rolled_back = []
    for w in (crashed, rolled, killed):
        w.begin()
        rolled_back += w.claim()
        if record_uncommitted:
            w.events.commit()
    backends = [run.backend(crashed), run.backend(killed)]
    crashed.close()
    run.workers.remove(crashed)
    rolled.session.rollback()
    run.kill(backends[1])
    with pytest.raises(EngineError) as err:
        killed.complete(rolled_back[-1:])
    assert err.value.lost
    run.wait_gone(backends)
    b = run.worker("b")
    b.begin()
    again = b.claim_n()
    assert len(b.complete(again)) == K
    run.drain(b)
    return rolled_back, again, run.audit()


@pytest.mark.parametrize("run", targets_for("double_claims"), indirect=True)
def test_rolled_back_hold_claims_are_not_claims(run, dsn):
    """A crash, a ROLLBACK and a killed connection end K hold-mode claims without COMMIT; the rows come
    straight back and another worker claims them: no double claim, no redelivery. The same claims
    logged when they were made (the old log) would have counted K double claims."""
    rolled_back, again, result = _rolled_back_then_reclaimed(run, record_uncommitted=False)
    assert len(rolled_back) == K
    assert _ids(again) == _ids(rolled_back)
    assert result["invariants"] == run.only()
    assert result["redeliveries"] == 0

    before = Run(run.target, dsn)
    try:
        _, _, result = _rolled_back_then_reclaimed(before, record_uncommitted=True)
    finally:
        before.close()
    assert result["invariants"]["double_claims"] == K
    assert result["details"]["claims_under_live_lease"] == K
    assert result["details"]["claims_beyond_attempts"] == (K if run.target.attempts else None)


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
