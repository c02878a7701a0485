"""``qbench clean`` drops the schemas the tool created, and only those; ``qbench --version``."""

import psycopg
import pymysql
import pytest

from bench import __version__
from bench.engines.mariadb.db import SCHEMA_MARK as MARIA_SCHEMA_MARK
from bench.engines.mariadb.dsn import connect_args
from bench.engines.mariadb.embedded import embedded_mariadb
from bench.engines.postgres.db import SCHEMA_MARK
from conftest import qbench


def _schemas(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'cl_%'")}


@pytest.fixture
def database(dsn):
    conn = psycopg.connect(dsn, autocommit=True)
    for name, marked in (("cl_run", True), ("cl_run_state", True), ("cl_busy", True), ("cl_theirs", False)):
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        conn.execute(f"CREATE SCHEMA {name}")
        conn.execute(f"CREATE TABLE {name}.jobs AS SELECT g AS id FROM generate_series(1, 5000) g")
        conn.execute(f"ANALYZE {name}.jobs")
        if marked:
            conn.execute(f"COMMENT ON SCHEMA {name} IS '{SCHEMA_MARK}'")
    conn.execute("COMMENT ON SCHEMA cl_theirs IS 'somebody else''s'")
    holder = psycopg.connect(dsn, autocommit=True)  # a run in progress holds its schema's lock
    holder.execute("SELECT pg_advisory_lock(hashtext('queue-bench:cl_busy'))")
    yield conn
    holder.close()
    for name in ("cl_run", "cl_run_state", "cl_busy", "cl_theirs"):
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    conn.close()


def test_clean_drops_only_marked_schemas_that_no_run_holds(dsn, database):
    dry = qbench("clean", "--dry-run", "--dsn", dsn)
    assert dry.returncode == 0, dry.stderr
    assert "would drop schema cl_run: 1 table, about 5,000 rows" in dry.stdout
    assert _schemas(database) == {"cl_run", "cl_run_state", "cl_busy", "cl_theirs"}  # dry run: nothing dropped

    done = qbench("clean", "--dsn", dsn)
    assert done.returncode == 0, done.stderr
    assert "dropped schema cl_run: " in done.stdout and "dropped schema cl_run_state: " in done.stdout
    assert "left (a run is using it) schema cl_busy" in done.stdout
    assert "cl_theirs" not in done.stdout
    assert _schemas(database) == {"cl_busy", "cl_theirs"}
    assert database.execute("SELECT count(*) FROM cl_theirs.jobs").fetchone()[0] == 5000


def test_a_saved_state_is_in_use_while_its_run_schema_is_held(dsn, database):
    holder = psycopg.connect(dsn, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(hashtext('queue-bench:cl_run'))")
    try:
        done = qbench("clean", "--dsn", dsn)
    finally:
        holder.close()
    assert "left (a run is using it) schema cl_run_state" in done.stdout
    assert {"cl_run", "cl_run_state"} <= _schemas(database)


def test_clean_without_a_dsn_is_refused_in_one_line(monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    result = qbench("clean")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("qbench: --dsn: required for clean")


def test_version():
    result = qbench("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"qbench {__version__}"


@pytest.mark.slow
def test_objects_outside_the_schema_that_depend_on_it_are_never_dropped(dsn, tmp_path):
    """DROP SCHEMA … CASCADE would drop a user's view, function and foreign key that point into the
    tool's schema: clean leaves such a schema alone, and a run refuses to re-create it (exit 2)."""
    conn = psycopg.connect(dsn, autocommit=True)
    try:
        for name in ("cl_user", "cl_dep"):
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        conn.execute("CREATE SCHEMA cl_dep")
        conn.execute(f"COMMENT ON SCHEMA cl_dep IS '{SCHEMA_MARK}'")
        conn.execute("CREATE TABLE cl_dep.jobs (id bigint PRIMARY KEY)")
        conn.execute("CREATE VIEW cl_dep.mine_inside AS SELECT * FROM cl_dep.jobs")  # inside: not a dependent
        conn.execute("CREATE SCHEMA cl_user")
        conn.execute("CREATE VIEW cl_user.jobs_view AS SELECT * FROM cl_dep.jobs")
        conn.execute("CREATE FUNCTION cl_user.f(cl_dep.jobs) RETURNS int LANGUAGE sql AS 'SELECT 1'")
        conn.execute("CREATE TABLE cl_user.refs (job_id bigint REFERENCES cl_dep.jobs (id))")

        done = qbench("clean", "--dsn", dsn)
        assert done.returncode == 0, done.stderr
        line = next(l for l in done.stdout.splitlines() if "schema cl_dep" in l)
        assert line.startswith("left (objects outside it depend on it: ")
        for what in ("view cl_user.jobs_view", "function cl_user.f(cl_dep.jobs)", "refs_job_id_fkey on cl_user.refs"):
            assert what in line, line
        assert "mine_inside" not in line

        results = tmp_path / "results"
        run = qbench("run", "--dsn", dsn, "--schema", "cl_dep", "--workers", "1", "--duration", "1s",
                     "--warmup", "0s", "--results", str(results))
        assert run.returncode == 2, run.stdout + run.stderr
        assert run.stderr.startswith("qbench: --schema: objects outside schema 'cl_dep' depend on it")
        assert not results.exists() or not any(results.iterdir())
        kept = conn.execute("""SELECT (SELECT count(*) FROM pg_views WHERE schemaname = 'cl_user'),
                                      (SELECT count(*) FROM pg_proc WHERE proname = 'f'
                                         AND pronamespace = 'cl_user'::regnamespace),
                                      (SELECT count(*) FROM pg_constraint WHERE conname = 'refs_job_id_fkey')""").fetchone()
        assert kept == (1, 1, 1)
    finally:
        for name in ("cl_user", "cl_dep"):
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        conn.close()


@pytest.mark.slow
def test_clean_on_mariadb_drops_only_marked_databases_that_no_run_holds_or_others_use():
    """On a throwaway MariaDB server: a marked database is dropped; one a run holds (its named lock),
    one that a view elsewhere reads, and an unmarked one are left; --dry-run drops nothing."""
    with embedded_mariadb(20, log=lambda _m: None) as mdsn:
        conn = pymysql.connect(**connect_args(mdsn), autocommit=True)
        with conn.cursor() as cur:
            for name, marked in (("cl_run", True), ("cl_busy", True), ("cl_used", True), ("cl_theirs", False)):
                cur.execute(f"CREATE DATABASE {name}" + (f" COMMENT '{MARIA_SCHEMA_MARK}'" if marked else ""))
                cur.execute(f"CREATE TABLE {name}.jobs (id int PRIMARY KEY)")
                cur.execute(f"INSERT INTO {name}.jobs SELECT seq FROM {name}.seq_1_to_5000")
            cur.execute("CREATE VIEW cl_theirs.v AS SELECT id FROM cl_used.jobs")
        holder = pymysql.connect(**connect_args(mdsn), autocommit=True)  # a run in progress
        holder.cursor().execute("SELECT GET_LOCK('qbench:cl_busy', 0)")

        def databases() -> set[str]:
            with conn.cursor() as cur:
                cur.execute("SHOW DATABASES LIKE 'cl\\_%'")
                return {r[0] for r in cur.fetchall()}

        dry = qbench("clean", "--dry-run", "--dsn", mdsn)
        assert dry.returncode == 0, dry.stderr
        assert "would drop schema cl_run: 1 table" in dry.stdout, dry.stdout
        assert databases() == {"cl_run", "cl_busy", "cl_used", "cl_theirs"}
        done = qbench("clean", "--dsn", mdsn)
        assert done.returncode == 0, done.stderr
        assert "dropped schema cl_run: " in done.stdout
        assert "left (a run is using it) schema cl_busy" in done.stdout
        assert "left (objects outside it depend on it: view cl_theirs.v) schema cl_used" in done.stdout
        assert "cl_theirs:" not in done.stdout
        assert databases() == {"cl_busy", "cl_used", "cl_theirs"}
        holder.close()
        conn.close()
