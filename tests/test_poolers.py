"""A user's pooler in front of the DSN (POOL_MODE, DSN_DIRECT; docs/poolers.md): runs through a PgBouncer in
transaction mode that the test starts itself (tests/user_pooler.py), the stateless sessions' contract on the
adapter, and the refusals."""

from __future__ import annotations

import json

import psycopg
import pytest

from bench.config.run_config import build_config
from bench.engines.postgres.adapter import SessionState, open_session
from bench.engines.postgres.adapter.wire import rows
from bench.engines.postgres.embedded import PostgresRecipe
from bench.errors import ConfigError
from cli_in_process import qbench_in_process
from conftest import CLEAN_INVARIANTS, qbench, run_and_load
from user_pooler import user_pooler

DIRECT = "postgresql://postgres@127.0.0.1:5432/postgres"
POOLED = "postgresql://postgres@127.0.0.1:6432/postgres"


def _with_password(dsn: str, password: str) -> str:
    """``dsn`` with ``password`` (the test server trusts loopback, so any password is accepted)."""
    return psycopg.conninfo.make_conninfo(dsn, password=password)


#: The schema the refused runs name (so a check for it is not confused by the module's other runs).
REFUSED_SCHEMA = "qbench_refused"


def _schemas(dsn: str) -> int:
    """How many schemas named :data:`REFUSED_SCHEMA` (or its saved states') ``dsn``'s database has."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE %s",
                            (REFUSED_SCHEMA + "%",)).fetchone()[0]


@pytest.fixture(scope="module")
def pooled(dsn):
    """The DSN of a PgBouncer in transaction mode, 10 server connections, in front of the module's database."""
    with user_pooler(dsn, pool_mode="transaction", pool_size=10) as pooled_dsn:
        yield pooled_dsn


def _clean(summary: dict) -> None:
    assert summary["errors"] == {}, summary["errors"]
    invariants = summary["invariants"]  # a queue without attempt tokens has no stale completions to count
    assert invariants == {k: v for k, v in CLEAN_INVARIANTS.items() if k in invariants} and len(invariants) >= 5
    assert summary["jobs_completed"] > 0


def test_two_runs_in_a_row_through_one_transaction_pool(dsn, pooled, tmp_path):
    """50 workers holding their claim through 10 server connections: no error of any kind (no 42P05/26000 from
    named statements), the audit clean, no wait for the workers to connect; then a second run on the same schema
    starts (the schema's advisory lock was taken on the direct connection, not left on a pooled one)."""
    direct = _with_password(dsn, "s3cret-direct")
    first, summary, proc = run_and_load(pooled, tmp_path / "a", "--dsn-direct", direct, "--pool-mode", "transaction",
                                        "--workers", "50", "--txn", "hold", "--work-ms", "5",
                                        "--duration", "4s", "--warmup", "1s")
    _clean(summary)
    assert "workers connected in" not in proc.stdout
    assert "note: --pool-mode transaction:" in proc.stdout and "(--no-prepared)" in proc.stdout
    info = json.loads((first / "run.json").read_text())
    assert info["config"]["prepared"] is False and info["config"]["pool_mode"] == "transaction"
    assert info["pooler"]["sessions"] == "stateless" and info["pooler"]["through_pooler"] == ["workers", "producers",
                                                                                              "reaper", "round-trip probe"]
    assert "s3cret-direct" not in (first / "run.json").read_text() and "***" in info["config"]["dsn_direct"]
    _, again, _ = run_and_load(pooled, tmp_path / "b", "--dsn-direct", dsn, "--pool-mode", "transaction",
                               "--workers", "10", "--duration", "2s", "--warmup", "1s")
    _clean(again)


def test_a_users_queue_with_unqualified_statements_through_a_transaction_pool(dsn, pooled, tmp_path):
    """QUEUE=tasks names its table unqualified: its search_path is set per transaction (SET LOCAL), for the
    workers, the producers and the reaper; 0 errors and a clean audit."""
    run_dir, summary, _ = run_and_load(pooled, tmp_path, "--dsn-direct", dsn, "--pool-mode", "transaction",
                                       "--queue", "tasks", "--schema", "qbench_tasks", "--workers", "20",
                                       "--rate", "200", "--reaper-interval-s", "1", "--duration", "3s", "--warmup", "1s")
    _clean(summary)
    workers_plan = json.loads((run_dir / "run.json").read_text())["claim_plans"]["workers"]
    # the EXPLAIN on a worker's own session found the unqualified table: its BEGIN carried the search_path
    assert workers_plan["plan"] == "unprepared" and "on tasks" in workers_plan["scan"], workers_plan


def test_a_stateless_session_leaves_nothing_on_the_pooled_server_connection(dsn):
    """Through one pooled server connection, a stateless session's settings hold for its own statements only
    (SET LOCAL), nothing is prepared by name on the server, and a statement sent outside a transaction costs two
    more round trips (none inside one)."""
    shown = "SELECT current_setting('search_path'), (SELECT count(*) FROM pg_prepared_statements)"
    with user_pooler(dsn, pool_mode="transaction", pool_size=1) as pooled_dsn:
        a = open_session(pooled_dsn, "qbench test a", SessionState({"search_path": "elsewhere"}, {"show": shown},
                                                                   stateless=True))
        b = open_session(pooled_dsn, "qbench test b", SessionState({}, {"show": shown}, stateless=True))
        try:
            assert rows(a.execute(b"show", [])) == [(b"elsewhere", b"0")]
            assert a.extra_round_trips == 2
            default = rows(b.execute(b"show", []))[0][0]
            assert default != b"elsewhere" and b.extra_round_trips == 0  # no settings: nothing to wrap
            a.query(b"BEGIN")
            assert rows(a.execute(b"show", [])) == [(b"elsewhere", b"0")]
            a.query(b"COMMIT")
            assert a.extra_round_trips == 2
            assert rows(b.execute(b"show", [])) == [(default, b"0")]
        finally:
            a.close()
            b.close()


@pytest.mark.parametrize("given, param, says", [
    ({"prepared": False}, "", ""),  # PREPARED=0 given is what the pool needs
    ({"prepared": True}, "PREPARED", "--no-prepared or leave it out"),
    ({"wakeup": "notify"}, "WAKEUP", "--wakeup poll"),
    ({"plan_cache": "force_generic_plan"}, "PLAN_CACHE", "auto with --pool-mode transaction"),
])
def test_what_needs_session_state_is_refused_behind_a_transaction_pool(given, param, says):
    overrides = {"pool_mode": "transaction", "dsn_direct": DIRECT, **given}
    if not param:
        assert build_config(overrides=overrides, dsn=POOLED).prepared is False
        return
    with pytest.raises(ConfigError) as err:
        build_config(overrides=overrides, dsn=POOLED)
    assert err.value.param == param and says in str(err.value) and "\n" not in str(err.value)


def test_session_mode_changes_nothing_in_the_sessions_and_says_so():
    cfg = build_config(overrides={"pool_mode": "session", "dsn_direct": DIRECT, "prepared": True,
                                  "wakeup": "notify"}, dsn=POOLED)
    assert cfg.prepared is True and cfg.stateless_sessions() is False and cfg.direct_dsn() == DIRECT
    assert any(note.startswith("--pool-mode session:") and "as without a pooler" in note for note in cfg.notes)


def test_a_library_worker_is_refused_behind_a_transaction_pool():
    with pytest.raises(ConfigError) as err:
        build_config(overrides={"pool_mode": "transaction", "dsn_direct": DIRECT, "queue": "procrastinate"},
                     dsn=POOLED)
    assert err.value.param == "LIBRARY_MODE" and "--library-mode sql" in str(err.value)


@pytest.mark.parametrize("args, line", [
    (("--dsn", POOLED, "--pool-mode", "transaction"), "qbench: --dsn-direct: needed with --pool-mode transaction"),
    (("--dsn", POOLED, "--pool-mode", "session"), "qbench: --dsn-direct: needed with --pool-mode session"),
    (("--pool-mode", "transaction"), "qbench: --pool-mode: transaction says --dsn reaches a pooler, and there is no --dsn"),
    (("--dsn", POOLED, "--dsn-direct", DIRECT), "qbench: --dsn-direct: has no effect without a pooler"),
    (("--dsn", POOLED, "--dsn-direct", POOLED, "--pool-mode", "transaction"), "qbench: --dsn-direct: is --dsn itself"),
    (("--dsn", POOLED, "--pool-mode", "statement"), "qbench: --pool-mode: unknown value 'statement'; allowed: none, transaction, session"),
    (("--dsn", "mysql://root@127.0.0.1:3306/", "--pool-mode", "transaction"), "qbench: --pool-mode: does not apply on mariadb"),
    (("--dsn", POOLED, "--dsn-direct", DIRECT, "--pool-mode", "transaction", "--prepared"), "qbench: --prepared: 1 "),
    (("--dsn", POOLED, "--dsn-direct", DIRECT, "--pool-mode", "transaction", "--wakeup", "notify"),
     "qbench: --wakeup: notify"),
])
def test_pooler_refusals_are_one_line_before_any_database(args, line, tmp_path):
    proc = qbench_in_process("run", *args, "--results", str(tmp_path / "results"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(line), proc.stderr
    assert not (tmp_path / "results").exists()


def test_a_direct_dsn_to_another_database_is_refused_before_anything_is_created(dsn, tmp_path):
    """DSN_DIRECT must reach DSN's database: here the server's ``postgres`` beside the module's database."""
    proc = qbench("run", "--dsn", dsn, "--dsn-direct", DIRECT, "--pool-mode", "transaction",
                  "--schema", REFUSED_SCHEMA, "--results", str(tmp_path / "results"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("qbench: --dsn-direct: reaches database 'postgres', and --dsn database 'qbench_test_")
    assert not (tmp_path / "results").exists() and _schemas(dsn) == 0 and _schemas(DIRECT) == 0


def test_a_direct_dsn_to_another_server_is_refused_by_its_system_identifier(dsn, tmp_path):
    with PostgresRecipe.server(10, log=lambda _l: None) as other:
        proc = qbench("run", "--dsn", dsn, "--dsn-direct", other, "--pool-mode", "transaction",
                      "--schema", REFUSED_SCHEMA, "--results", str(tmp_path / "results"))
        assert _schemas(other) == 0
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("qbench: --dsn-direct: reaches another server than --dsn: its system identifier is ")
    assert not (tmp_path / "results").exists() and _schemas(dsn) == 0
