"""``qbench clean`` drops the schemas the tool created, and only those; ``qbench --version``."""

import psycopg
import pytest

from bench import __version__
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
    assert "would drop schema cl_run: 1 tables, about 5,000 rows" in dry.stdout
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
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("qbench: DSN: required for clean")


def test_version():
    result = qbench("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"qbench {__version__}"
