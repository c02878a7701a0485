"""Queue definitions (``QUEUE=<name>``, :mod:`bench.config.queue_definition`) against the real PostgreSQL.

The model queue written as a definition (the shipped ``queues/model/``) must give the built-in queue's results
contract with a clean audit; deliberately wrong definitions, made from the model's text with one
safeguard taken out, must be caught by the audit (the FR-03 sub-select claim as over-claims, a
completion that does not finish the job as lost jobs, a claim that ignores leases as double claims);
a statement that does not parse is refused before any load with one line, exit 2, and nothing left
behind. The team's ``tasks`` queue (no attempt token) is audited for what it can be, and the report
says what it cannot.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import psycopg
import pytest

from bench.config.queue_definition import applicability, load_queue
from bench.config.sql_text import render, scan_parameters
from bench.config.run_config import build_config
from bench.data import QUEUES_DIR
from bench.errors import ConfigError
from bench.results.model import problems
from bench.engines.postgres.probes import FR03_SETTINGS
from conftest import CLEAN_INVARIANTS, qbench, run_and_load

MODEL = QUEUES_DIR / "model" / "queue.toml"
#: The end of the model's complete statement (its fail statement goes on with RETURNING).
COMPLETE_WHERE = "WHERE id = :id AND attempt_token = :token AND status = 'running'\n\"\"\""
SMALL = ("--workers", "4", "--duration", "3s", "--warmup", "1s", "--backlog", "5000")


def _variant(tmp_path: Path, name: str, replace: dict[str, str] = {}, extra: str = "") -> str:  # noqa: B006
    """A copy of the model's definition with each ``replace`` key (text that must be in it) replaced,
    and ``extra`` TOML appended; returns the path of its queue.toml."""
    text = MODEL.read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / name / "queue.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text + extra)
    return str(path)


def _schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace")}


# -- the definition's text, no database

def test_parameters_skip_casts_strings_comments_and_dollar_quotes():
    text = ("SELECT :a::int, ':not', \"x:y\", $$ :no $$, $t$ :no $t$ -- :no\n /* :no */ E'\\' :no', :b, :a, "
            "arr[1:2]")
    assert [name for _, _, name in scan_parameters(text)] == ["a", "b", "a"]
    rendered, names = render(text, lambda i, _n: f"${i}")
    assert names == ["a", "b"]
    assert rendered.startswith("SELECT $1::int") and rendered.endswith(", $2, $1, arr[1:2]")


def test_a_parameter_a_statement_does_not_take_is_refused(tmp_path):
    path = _variant(tmp_path, "bad_param", {COMPLETE_WHERE: "WHERE id = :id AND attempt_token = :token AND :batch > 0\n\"\"\""})
    with pytest.raises(ConfigError) as err:
        load_queue(path)
    assert err.value.param == "QUEUE" and "statements.complete uses :batch" in str(err.value)
    assert ":id, :token" in str(err.value)


def test_a_definition_for_an_engine_that_runs_no_definitions_is_refused(tmp_path):
    path = _variant(tmp_path, "on_mariadb", {'engine = "postgres"': 'engine = "mariadb"'})
    with pytest.raises(ConfigError) as err:
        load_queue(path)
    assert err.value.param == "QUEUE" and "engine = 'mariadb'" in str(err.value) and "postgres" in str(err.value)


def test_parameters_that_do_not_apply_are_refused_when_set_and_n_a_otherwise():
    tasks = load_queue("tasks")
    not_applicable = applicability(tasks)
    assert {"batch", "layout", "max_attempts", "priority_mix"} <= set(not_applicable)
    assert "policy" not in not_applicable and "rate" not in not_applicable and "index" not in not_applicable
    cfg = build_config("default", {"queue": "tasks"})
    assert (cfg.layout, cfg.batch, cfg.index, cfg.lease_s) == ("n/a", 1, "status", 60.0)  # the definition's defaults
    for key, value in (("batch", "2"), ("layout", "archive"), ("tenants", "2"), ("fillfactor", "70")):
        with pytest.raises(ConfigError) as err:
            build_config("default", {"queue": "tasks", key: value})
        assert err.value.param == key.upper() and "does not apply to queue 'tasks'" in str(err.value)
    with pytest.raises(ConfigError) as err:
        build_config("default", {"queue": "tasks", "index": "partial"})
    assert "none, status, queued_created" in str(err.value)
    with pytest.raises(ConfigError) as err:
        build_config("default", {"queue": "tasks", "engine": "mariadb"})
    assert err.value.param == "QUEUE"


# -- runs on the real PostgreSQL

@pytest.mark.slow
def test_model_definition_gives_the_builtin_contract_with_a_clean_audit(dsn, tmp_path):
    """The built-in queue and ``QUEUE=model`` on the same database and parameters: the same result
    files, intervals.csv columns and summary keys, the same plan shape from the workers' sessions, and
    an audit that checked every invariant and found none broken, its counts matching the table."""
    builtin_dir, builtin, _ = run_and_load(dsn, tmp_path / "builtin", "--batch", "2", *SMALL)
    model_dir, model, _ = run_and_load(dsn, tmp_path / "model", "--queue", "model", "--batch", "2", *SMALL)

    def files(run_dir):
        return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()}

    assert files(model_dir) == files(builtin_dir)
    header = lambda d: next(csv.reader((d / "intervals.csv").open()))  # noqa: E731
    assert header(model_dir) == header(builtin_dir)
    assert set(builtin) <= set(model)
    assert model["invariants"] == CLEAN_INVARIANTS and model["uncheckable_invariants"] == {}
    assert model["jobs_completed"] > 0 and model["max_rows_per_claim"] == 2
    for summary in (builtin, model):  # no history: every done row is one applied completion, every row seeded
        assert summary["status_counts"]["done"] == summary["audit"]["completions_applied"] > 0
        assert summary["audit"]["rows_expected"] == summary["audit"]["rows_present"] == 5000
    assert sum(json.loads((model_dir / "summary.json").read_text())["status_counts"].values()) == 5000
    for summary in (builtin, model):
        assert summary["plans"]["workers"]["plan"] == "custom"
        assert "jobs_pending_claim_order_idx" in summary["plans"]["workers"]["scan"]
        assert summary["pickup_latency_ms"]["p50"] is not None
    report = (model_dir / "report.html").read_text()
    assert "model (queue definition)" in report


@pytest.mark.slow
def test_the_fr03_subselect_claim_is_caught_as_over_claims(dsn, tmp_path):
    """FR-03's sub-select claim, as a team would write it, on sessions where the planner must use a
    nested loop: the run counts over-claims and is not trustworthy; the model's claim on the same
    settings takes at most its batch."""
    settings = "\n[settings]\n" + "".join(f"{name} = \"off\"\n" for name in FR03_SETTINGS)
    claim = MODEL.read_text().split('claim = """\n', 1)[1].split('"""', 1)[0]
    subselect = ("UPDATE jobs SET status = 'running', attempts = attempts + 1, "
                 "attempt_token = nextval('attempt_token_seq'), locked_by = :worker, "
                 "lease_expires_at = clock_timestamp() + make_interval(secs => :lease_s), started_at = clock_timestamp()\n"
                 "WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' AND run_at <= now() "
                 "ORDER BY priority, run_at, id LIMIT :batch {locking})\n"
                 "RETURNING id, attempt_token, attempts, lease_expires_at, run_at\n")
    wrong = _variant(tmp_path, "fr03", {claim: subselect}, settings)
    args = ("--workers", "2", "--batch", "2", "--duration", "2s", "--warmup", "0s", "--backlog", "40")
    _, summary, _ = run_and_load(dsn, tmp_path / "wrong", "--queue", wrong, *args, expect=3)
    assert summary["invariants"]["over_claims"] >= 1
    assert summary["max_rows_per_claim"] > 2
    assert any("over_claims" in p for p in problems(summary))
    right = _variant(tmp_path, "model_fr03", {}, settings)
    _, control, _ = run_and_load(dsn, tmp_path / "right", "--queue", right, *args)
    assert control["invariants"] == CLEAN_INVARIANTS and control["max_rows_per_claim"] <= 2
    # complete_many (batch 2) reports the completions it applied: each done row is one of them
    assert control["status_counts"]["done"] == control["audit"]["completions_applied"] == 40


def test_a_batch_completion_that_returns_no_ids_is_refused(dsn, tmp_path):
    """Without RETURNING, complete_many cannot say which completions applied: refused before the load."""
    path = _variant(tmp_path, "no_returning", {"AND j.status = 'running'\nRETURNING j.id\n": "AND j.status = 'running'\n"})
    proc = qbench("run", "--dsn", dsn, "--results", str(tmp_path / "r"), "--queue", path, "--batch", "2")
    assert proc.returncode == 2 and "statements.complete_many returns no column" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_a_completion_that_does_not_finish_the_job_is_lost_jobs(dsn, tmp_path):
    """A complete statement that forgets to set the status: every acknowledged completion is a job the
    table does not hold as done."""
    path = _variant(tmp_path, "no_done", {"UPDATE jobs SET status = 'done', finished_at = clock_timestamp(), "
                                          "lease_expires_at = NULL\nWHERE id = :id":
                                          "UPDATE jobs SET finished_at = clock_timestamp()\nWHERE id = :id"})
    _, summary, proc = run_and_load(dsn, tmp_path / "r", "--queue", path, *SMALL, expect=3)
    assert summary["jobs_completed"] > 0
    assert summary["invariants"]["lost_jobs"] >= summary["jobs_completed"]
    assert f"invariants broken: lost_jobs = {summary['invariants']['lost_jobs']}" in proc.stderr, proc.stderr
    assert summary["invariants"]["double_claims"] == 0


@pytest.mark.slow
def test_a_claim_that_ignores_leases_is_double_claims(dsn, tmp_path):
    """A claim that also takes running rows (its predicate lost ``status = 'pending'``) re-claims jobs
    other workers hold under live leases."""
    path = _variant(tmp_path, "steal", {"    WHERE status = 'pending' AND run_at <= now()\n    ORDER BY priority":
                                        "    WHERE status IN ('pending', 'running') AND run_at <= now()\n"
                                        "    ORDER BY priority"})
    _, summary, proc = run_and_load(dsn, tmp_path / "r", "--queue", path, "--work-ms", "20", *SMALL, expect=3)
    assert summary["invariants"]["double_claims"] > 0
    assert "invariants broken: " in proc.stderr and "(exit 3)" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_a_statement_that_does_not_parse_is_refused_and_leaves_nothing(dsn, tmp_path):
    path = _variant(tmp_path, "typo", {COMPLETE_WHERE: "WHER id = :id AND attempt_token = :token\n\"\"\""})
    before = _schemas(dsn)
    results = tmp_path / "results"
    proc = qbench("run", "--dsn", dsn, "--results", str(results), "--queue", path, "--schema", "qb_typo",
                  "--duration", "2s")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qbench: --queue:"), proc.stderr
    assert "statements.complete" in lines[0] and "syntax error" in lines[0]
    assert _schemas(dsn) == before
    assert not results.exists() or not any(results.iterdir())


@pytest.mark.slow
def test_a_queue_without_token_is_audited_for_what_it_can_be(dsn, tmp_path):
    """The team's ``tasks`` queue (no attempt token, no lease): clean on what is checked, and the
    summary and the report say that stale completions cannot be fenced or detected. Open-loop producers
    feed it through its enqueue statement and every produced job is accounted for."""
    run_dir, summary, _ = run_and_load(dsn, tmp_path / "r", "--queue", "tasks", "--index", "queued_created",
                                       "--rate", "200", "--workers", "4", "--duration", "3s", "--warmup", "1s")
    assert set(summary["uncheckable_invariants"]) == {"stale_completions_applied"}
    assert "stale_completions_applied" not in summary["invariants"]
    assert summary["invariants"] == {k: 0 for k in CLEAN_INVARIANTS if k != "stale_completions_applied"}
    assert summary["jobs_produced"] > 300 and summary["jobs_completed"] > 300
    assert summary["pickup_latency_ms"]["p50"] is not None  # the claim returns created_at, its eligible time
    report = (run_dir / "report.html").read_text()
    assert re.search(r"cannot check stale_completions_applied on this queue: the queue has no attempt token", report)
    assert "tasks (queue definition)" in report


@pytest.mark.parametrize("what, replace, message", [
    ("a predicate naming no column", {'eligible = "status = \'pending\' AND run_at <= now()"':
                                      'eligible = "statu = \'pending\'"'}, "predicates.eligible failed on the database"),
    ("eligible_at naming no column", {'eligible_at = "run_at"': 'eligible_at = "queued_at"'},
     "columns.eligible_at failed on the database"),
    ("a text id", {"id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY":
                   "id               text PRIMARY KEY DEFAULT md5(random()::text)"},
     "the claim's id column 'id' is text; allowed: an integer id"),
    ("a bad setting", {}, "settings.work_mem failed on the database"),
])
@pytest.mark.slow
def test_what_the_monitor_and_audit_read_is_checked_before_the_load(dsn, tmp_path, what, replace, message):
    """Mistakes the statements' PREPARE alone would not see: refused in one line, exit 2, nothing left."""
    extra = '\n[settings]\nwork_mem = "lots"\n' if "setting" in what else ""
    path = _variant(tmp_path, "wrong", replace, extra)
    before = _schemas(dsn)
    proc = qbench("run", "--dsn", dsn, "--results", str(tmp_path / "r"), "--queue", path, "--schema", "qb_wrong")
    assert proc.returncode == 2, (what, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], (what, proc.stderr)
    assert _schemas(dsn) == before and not (tmp_path / "r").exists()


def test_future_arrivals_need_the_enqueue_to_take_run_at(tmp_path):
    """FUTURE_SHARE schedules produced jobs later through the enqueue's :run_at: without it, refused."""
    path = _variant(tmp_path, "no_run_at", {"VALUES (:priority, to_timestamp(:run_at), :max_attempts)":
                                            "VALUES (:priority, now(), :max_attempts)"})
    with pytest.raises(ConfigError) as err:
        build_config("default", {"queue": path, "rate": "100", "future_share": "0.5"})
    assert err.value.param == "FUTURE_SHARE" and ":run_at" in str(err.value)
    assert build_config("default", {"queue": path, "rate": "100"}).future_share == 0.0


def test_locking_placeholder_in_a_comment_is_left_alone(tmp_path):
    path = _variant(tmp_path, "commented", {COMPLETE_WHERE: "WHERE id = :id AND attempt_token = :token -- no {locking}\n"
                                                            "  AND status = 'running'\n\"\"\""})
    assert load_queue(path).locking


@pytest.mark.slow
def test_without_a_lease_a_rescued_crashed_job_counts_as_a_double_claim_and_the_report_says_why(dsn, tmp_path):
    """The tasks queue has no lease column: its rescuer (the reaper statement) takes back a crashed
    worker's task, another worker claims it, and the audit, which cannot tell a dead worker from a slow
    one, counts it; at most once per crashed job, and the report says how to read the count."""
    run_dir, summary, _ = run_and_load(
        dsn, tmp_path / "r", "--queue", "tasks", "--index", "queued_created", "--workers", "8", "--work-ms", "20",
        "--lease-s", "1", "--reaper-interval-s", "0.5", "--faults", "crash_after_claim@1-3:share=0.5",
        "--duration", "6s", "--warmup", "1s", expect=3)
    assert summary["crashed_jobs"] > 0 and summary["lease_expiries"] > 0
    assert 0 < summary["invariants"]["double_claims"] <= summary["crashed_jobs"]
    assert any("no lease column" in n for n in summary["audit_notes"])
    assert "note on the audit: the queue has no lease column" in (run_dir / "report.html").read_text()


@pytest.mark.slow
def test_the_plan_warning_names_the_definitions_table_when_the_workers_claim_scans_it(dsn, tmp_path):
    """The tasks queue's own index on status leaves the workers' claim a sequential scan of `tasks` (read
    from their own sessions): the red plan line says so; with the partial index in claim order it does not."""
    args = ("--queue", "tasks", "--workers", "4", "--duration", "3s", "--warmup", "1s", "--backlog", "20000")
    _, theirs, _ = run_and_load(dsn, tmp_path / "status", *args, "--index", "status")
    assert theirs["plans"]["workers"]["scan"].startswith("Seq Scan on tasks")
    assert any("scans the whole queue table" in w for w in theirs["plan_warnings"])
    _, better, _ = run_and_load(dsn, tmp_path / "partial", *args, "--index", "queued_created")
    assert "tasks_queued_created_idx" in better["plans"]["workers"]["scan"]
    assert not any("scans the whole queue table" in w for w in better["plan_warnings"])
