"""Duplicate downstream effects (issue 25, docs/effects.md): ``EFFECTS`` under the faults that redeliver a job
after its work. Each run's audit is checked against the effect rows and the queue table read here, and against
the run's own crash counter: three counts kept apart."""

from __future__ import annotations

import psycopg
import pymysql
import pytest

from bench.data import QUEUES_DIR
from bench.engines.mariadb.dsn import connect_args
from bench.usage import typed
from conftest import CLEAN_INVARIANTS, qbench, run_and_load

#: A crash after the work on half of 4 workers (2 crashes, one job each at BATCH=1), lease 1 s and a reaper
#: every 0.5 s: the jobs come back within about 1.5 s and the backlog (6,000 jobs, 600 to 1,500 a second on the
#: shared 2-core machine) outlasts the window's first instant.
CRASH = ["--workers", "4", "--backlog", "6000", "--work-ms", "2", "--lease-s", "1", "--reaper-interval-s", "0.5",
         "--faults", "crash_before_complete@0-2:share=0.5", "--duration", "6s", "--warmup", "1s"]


def _tables(dsn: str) -> dict[str, int]:
    """Counted from the tables the run left: jobs with more than one effect row, effect rows beyond one a job,
    jobs claimed more than once (``attempts`` >= 2), effects whose token is not the done row's, those jobs not
    done, jobs done."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("""
            SELECT (SELECT count(*) FROM (SELECT logical_id FROM qbench.effects GROUP BY logical_id
                                          HAVING count(*) > 1) AS d),
                   (SELECT count(*) - count(DISTINCT logical_id) FROM qbench.effects),
                   (SELECT count(*) FROM qbench.jobs WHERE attempts >= 2),
                   (SELECT count(*) FROM qbench.effects e JOIN qbench.jobs j ON j.id = e.logical_id
                    WHERE j.status = 'done' AND e.attempt_token <> j.attempt_token),
                   (SELECT count(*) FROM qbench.jobs WHERE attempts >= 2 AND status <> 'done'),
                   (SELECT count(*) FROM qbench.jobs WHERE status = 'done')""").fetchone()
    return dict(zip(("duplicate_jobs", "extra_effects", "redelivered", "stale", "redelivered_not_done", "done"),
                    map(int, row)))


@pytest.mark.slow
def test_outside_effects_are_duplicated_once_per_crashed_job_that_came_back(dsn, tmp_path):
    """EFFECTS=outside, TXN=short: each job a worker crashed on after its work is claimed again and its work
    writes a second effect. Jobs with two effects (the effects table) = jobs claimed twice (the queue table's
    attempts) = the jobs the crashes held (the run's counter), and the audit says the same."""
    run_dir, s, proc = run_and_load(dsn, tmp_path, "--effects", "outside", *CRASH)
    db = _tables(dsn)
    assert s["crashed_jobs"] >= 1
    assert db["redelivered_not_done"] == 0, db  # every crashed job came back and was completed
    assert db["duplicate_jobs"] == db["redelivered"] == s["crashed_jobs"] > 0, (db, s["crashed_jobs"])
    assert db["extra_effects"] == s["crashed_jobs"]
    effects = s["effects"]
    assert effects["duplicate_jobs"] == db["duplicate_jobs"] and effects["extra_effects"] == db["extra_effects"]
    assert effects["missing_effects"] == 0
    assert effects["stale_attempt_effects"] == db["stale"] == db["duplicate_jobs"]  # the crashed attempts' rows
    assert effects["duplicates_per_1000_redeliveries"] == pytest.approx(
        1000.0 * db["duplicate_jobs"] / effects["redeliveries"], abs=1e-3)
    assert f"effects: outside: {db['duplicate_jobs']:,} duplicated" in proc.stdout
    report = (run_dir / "report.html").read_text()
    assert "effects (outside): jobs with more than one effect" in report
    assert f"outside: {db['duplicate_jobs']:,} duplicated" in report  # the verdict card
    assert s["invariants"] == CLEAN_INVARIANTS


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["same_txn", "idempotent"])
def test_fenced_and_idempotent_effects_stay_single_under_the_same_crash(dsn, tmp_path, mode):
    """Under the same fault, same_txn (written by the completion, fenced by the token) and idempotent (unique
    logical id) leave one effect a job: 0 duplicates with jobs redelivered. same_txn's rows are all the
    completing attempt's; idempotent keeps the crashed attempt's, one per redelivered job."""
    _, s, _ = run_and_load(dsn, tmp_path, "--effects", mode, *CRASH)
    db = _tables(dsn)
    assert db["redelivered_not_done"] == 0 and db["redelivered"] == s["crashed_jobs"] > 0, (db, s["crashed_jobs"])
    assert db["duplicate_jobs"] == db["extra_effects"] == 0, db
    effects = s["effects"]
    assert effects["duplicate_jobs"] == 0 and effects["missing_effects"] == 0
    assert effects["duplicates_per_1000_redeliveries"] == 0
    assert effects["written"] == effects["jobs_with_effect"] == db["done"] > 0
    assert effects["stale_attempt_effects"] == db["stale"] == (0 if mode == "same_txn" else db["redelivered"])
    assert s["invariants"] == CLEAN_INVARIANTS


@pytest.mark.slow
@pytest.mark.parametrize("mode, duplicated", [("outside", True), ("same_txn", False)])
def test_effects_under_hold_where_the_crash_rolls_the_claim_back(dsn, tmp_path, mode, duplicated):
    """TXN=hold: the crash rolls the claim back (attempts too), so the job is eligible at once. The outside
    effect went on the worker's second connection and stays: one extra row per crashed job; same_txn's was in
    the rolled-back transaction: none."""
    _, s, _ = run_and_load(dsn, tmp_path, "--effects", mode, "--txn", "hold", *CRASH)
    db = _tables(dsn)
    assert s["crashed_jobs"] >= 1 and s["effects"]["missing_effects"] == 0, s
    assert db["extra_effects"] == (s["crashed_jobs"] if duplicated else 0), (db, s["crashed_jobs"])
    assert s["effects"]["extra_effects"] == db["extra_effects"]
    assert s["invariants"] == CLEAN_INVARIANTS


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["outside", "same_txn"])
def test_a_late_worker_past_its_lease_duplicates_only_outside_effects(dsn, tmp_path, mode):
    """late_worker: a worker completes after its lease expired and another worker redid the job. Its outside
    effect stays (duplicates > 0); same_txn's completion is fenced out, and with it its effect (0)."""
    _, s, _ = run_and_load(dsn, tmp_path, "--effects", mode, "--workers", "4", "--backlog", "6000", "--work-ms",
                           "2", "--lease-s", "1", "--reaper-interval-s", "0.5",
                           "--faults", "late_worker@0-2:share=0.5,extra_s=0.5", "--duration", "6s", "--warmup", "1s")
    db = _tables(dsn)
    assert s["stale_completions"] >= 1 and db["redelivered"] >= 1, (s["stale_completions"], db)
    assert (db["duplicate_jobs"] > 0) is (mode == "outside"), db
    assert s["effects"]["duplicate_jobs"] == db["duplicate_jobs"]
    assert s["invariants"] == CLEAN_INVARIANTS


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["outside", "same_txn", "idempotent"])
def test_effects_on_mariadb_under_the_same_crash(maria_schema, tmp_path, mode):
    """MariaDB, TXN=short: outside duplicates one effect per crashed job that came back (the effects table
    against the table's attempts and the run's counter); same_txn (the completion's transaction, an INSERT …
    SELECT of the row done under this token) and idempotent (INSERT IGNORE on the unique logical id) none."""
    dsn, schema = maria_schema
    _, s, _ = run_and_load(dsn, tmp_path, "--schema", schema, "--effects", mode, *CRASH)
    conn = pymysql.connect(**connect_args(dsn), autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT (SELECT COUNT(*) FROM (SELECT logical_id FROM `{schema}`.effects GROUP BY logical_id "
                        f"HAVING COUNT(*) > 1) AS d), (SELECT COUNT(*) FROM `{schema}`.jobs WHERE attempts >= 2), "
                        f"(SELECT COUNT(*) FROM `{schema}`.jobs WHERE attempts >= 2 AND status <> 'done')")
            duplicated, redelivered, redelivered_not_done = map(int, cur.fetchone())
    finally:
        conn.close()
    assert redelivered == s["crashed_jobs"] > 0 and redelivered_not_done == 0, (redelivered, s["crashed_jobs"])
    assert duplicated == (redelivered if mode == "outside" else 0)
    assert s["effects"]["duplicate_jobs"] == duplicated and s["effects"]["missing_effects"] == 0
    assert s["invariants"] == CLEAN_INVARIANTS


def _definition(tmp_path, effect: str):
    """The shipped ``model`` definition with ``statements.effect`` = ``effect``, as a file of its own."""
    path = tmp_path / "queue" / "queue.toml"
    path.parent.mkdir()
    text = (QUEUES_DIR / "model" / "queue.toml").read_text()
    path.write_text(text.replace("[statements]\n", f"[statements]\neffect = {effect!r}\n", 1))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["outside", "same_txn"])
def test_a_queue_definition_supplies_its_effect_statement(dsn, tmp_path, mode):
    """QUEUE=<a definition> with statements.effect: the tool runs it where EFFECTS says, into its effects
    table. outside: one duplicate per crashed job that came back; same_txn (run in the completion's
    transaction, for the completions applied): none."""
    queue = _definition(tmp_path, "INSERT INTO effects (logical_id, attempt_token) VALUES (:id, :token)")
    _, s, _ = run_and_load(dsn, tmp_path / "results", "--queue", str(queue), "--effects", mode, *CRASH)
    db = _tables(dsn)
    assert db["redelivered"] == s["crashed_jobs"] > 0 and db["redelivered_not_done"] == 0, (db, s["crashed_jobs"])
    assert db["duplicate_jobs"] == (db["redelivered"] if mode == "outside" else 0), db
    effects = s["effects"]
    assert (effects["duplicate_jobs"], effects["missing_effects"]) == (db["duplicate_jobs"], 0)
    assert effects["stale_attempt_effects"] == db["stale"]
    assert s["invariants"] == CLEAN_INVARIANTS


def test_a_definitions_effect_statement_that_fails_is_refused_before_the_load(dsn, tmp_path):
    """statements.effect naming a table that does not exist: refused while preparing, exit 2, one line naming
    QUEUE and the statement, no results, no schema left."""
    queue = _definition(tmp_path, "INSERT INTO no_such_table (logical_id) VALUES (:id)")
    before = _schemas_and_relations(dsn)
    results = tmp_path / "results"
    proc = qbench("run", "--dsn", dsn, "--results", str(results), "--queue", str(queue), "--effects", "outside",
                  "--schema", "qbench_refused", "--duration", "2s", "--warmup", "0s")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "--queue:" in lines[0] and "statements.effect" in lines[0], proc.stderr
    assert not results.exists() or not any(results.iterdir())
    assert _schemas_and_relations(dsn) == before


def _schemas_and_relations(dsn: str) -> set:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return set(conn.execute("SELECT n.nspname, c.relname FROM pg_namespace n LEFT JOIN pg_class c "
                                "ON c.relnamespace = n.oid WHERE n.nspname !~ '^pg_' "
                                "AND n.nspname <> 'information_schema'").fetchall())


@pytest.mark.parametrize("args, named, allowed", [
    (["--effects", "bogus"], "EFFECTS", "none, outside, same_txn, idempotent"),
    (["--effects", "outside", "--queue", "pgqueuer", "--library-mode", "sql"], "EFFECTS",
     "leave --effects out with --queue pgqueuer"),
    (["--effects", "same_txn", "--queue", "model"], "EFFECTS", "it has no effect statement (statements.effect)"),
    (["--faults", "crash_before_complete@0-2", "--reaper-interval-s", "0"], "FAULTS", "--reaper-interval-s > 0"),
], ids=["bogus", "library", "definition", "crash-without-reaper"])
def test_bad_effects_input_is_refused_in_one_line_and_creates_nothing(dsn, tmp_path, args, named, allowed):
    """Exit 2, one stderr line naming the parameter and what is allowed, no results, nothing in the database."""
    before = _schemas_and_relations(dsn)
    results = tmp_path / "results"
    proc = qbench("run", "--dsn", dsn, "--results", str(results), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"qbench: {typed(named)}: ") and allowed in lines[0], proc.stderr
    assert not results.exists() or not any(results.iterdir())
    assert _schemas_and_relations(dsn) == before
