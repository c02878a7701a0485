"""Database side of a run: connect, check the server, create the tool's schema,
the queue table and its index variant, seed history and backlog, VACUUM ANALYZE.

Only the tool's own schema is ever created, changed or dropped. A schema is
recognised as the tool's by its comment (:data:`SCHEMA_MARK`); an existing
schema without it is refused, never dropped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import psycopg
from psycopg import sql

from .config import REPO_ROOT, ConfigError, RunConfig

SCHEMA_DIR = REPO_ROOT / "schemas" / "postgres"
SCHEMA_MARK = "queue-bench schema: created and dropped by queue-bench"

#: Server settings recorded with every run (SHOW name).
KEY_SETTINGS = (
    "max_connections", "superuser_reserved_connections", "shared_buffers", "work_mem",
    "effective_cache_size", "synchronous_commit", "fsync", "wal_level", "max_wal_size",
    "checkpoint_timeout", "autovacuum", "random_page_cost", "jit", "server_encoding",
)


class DatabaseError(RuntimeError):
    """The database cannot be used for this run; the message says why, in one line."""


def connect(dsn: str, *, autocommit: bool = True, application_name: str = "queue-bench",
            connect_timeout_s: int = 10) -> psycopg.Connection:
    """Open one connection. Raises :class:`ConfigError` (``DSN``) when it cannot connect."""
    try:
        return psycopg.connect(dsn, autocommit=autocommit, application_name=application_name,
                               connect_timeout=connect_timeout_s)
    except psycopg.OperationalError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError("DSN", f"cannot connect ({first}); allowed: a reachable PostgreSQL DSN, or none for the embedded database") from None
    except psycopg.ProgrammingError as err:
        raise ConfigError("DSN", f"not a valid connection string ({err}); e.g. postgresql://user@127.0.0.1:5432/db") from None


def is_alive(conn: psycopg.Connection) -> bool:
    """True when ``conn`` still answers (a terminated backend is only noticed on use)."""
    if conn.closed or conn.broken:
        return False
    try:
        conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


def server_info(conn: psycopg.Connection) -> dict:
    """Engine, version string and :data:`KEY_SETTINGS` of the server behind ``conn``."""
    version = conn.execute("SELECT version()").fetchone()[0]
    settings = {}
    for name in KEY_SETTINGS:
        try:
            settings[name] = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()[0]
        except psycopg.Error:
            settings[name] = None
    return {"engine": "postgresql", "server_version": version,
            "server_version_num": conn.info.server_version, "server_settings": settings}


def connection_headroom(conn: psycopg.Connection) -> dict[str, int]:
    """Connections this run may still open: ``max_connections`` less reserved slots
    (``superuser_reserved_connections``, and ``reserved_connections`` on 16+) less
    the client backends already connected (this one included).

    Source: https://www.postgresql.org/docs/current/runtime-config-connection.html
    """
    row = conn.execute("""
        SELECT current_setting('max_connections')::int,
               current_setting('superuser_reserved_connections')::int,
               coalesce(current_setting('reserved_connections', true), '0')::int,
               (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int
    """).fetchone()
    max_conn, su_reserved, reserved, in_use = row
    return {"max_connections": max_conn, "reserved": su_reserved + reserved, "in_use": in_use,
            "available": max_conn - su_reserved - reserved - in_use}


def check_capacity(conn: psycopg.Connection, needed: int) -> dict[str, int]:
    """Refuse (ConfigError ``WORKERS``) when fewer than ``needed`` connections are free."""
    room = connection_headroom(conn)
    if room["available"] < needed:
        raise ConfigError("WORKERS", (
            f"the run needs {needed} more connections but the server has {room['available']} free "
            f"(max_connections {room['max_connections']} - reserved {room['reserved']} - in use {room['in_use']}); "
            "lower WORKERS or raise max_connections"))
    return room


def schema_state(conn: psycopg.Connection, schema: str) -> str:
    """``"absent"``, ``"ours"`` (carries :data:`SCHEMA_MARK`) or ``"foreign"``."""
    row = conn.execute(
        "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = %s", (schema,)
    ).fetchone()
    if row is None:
        return "absent"
    return "ours" if row[0] == SCHEMA_MARK else "foreign"


def check_schema_usable(conn: psycopg.Connection, schema: str) -> None:
    """Raise ConfigError (``SCHEMA``) if ``schema`` exists and is not the tool's."""
    if schema_state(conn, schema) == "foreign":
        raise ConfigError("SCHEMA", f"schema {schema!r} exists and was not created by queue-bench; "
                                    "choose another SCHEMA (the tool never touches a schema it did not create)")


def lock_schema(conn: psycopg.Connection, schema: str) -> None:
    """Take a session-level advisory lock for ``schema`` on ``conn`` (held until it closes).

    A second queue-bench run on the same database and schema would drop the
    table under the first; it is refused instead (ConfigError ``SCHEMA``).
    Advisory locks create no object: https://www.postgresql.org/docs/current/explicit-locking.html#ADVISORY-LOCKS
    """
    key = f"queue-bench:{schema}"
    if not conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()[0]:
        raise ConfigError("SCHEMA", f"schema {schema!r} is in use by another queue-bench run on this database; "
                                    "wait for it or choose another SCHEMA")


def _ddl(name: str, schema: str) -> sql.Composed:
    """DDL file ``name`` with ``{schema}`` bound to the quoted schema (``{{``/``}}`` escape braces)."""
    text = (SCHEMA_DIR / name).read_text()
    return sql.SQL(text).format(schema=sql.Identifier(schema))


def drop_schema(conn: psycopg.Connection, schema: str) -> None:
    """Drop ``schema`` if, and only if, it is the tool's own."""
    if schema_state(conn, schema) == "ours":
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


@dataclass
class SeedResult:
    """What :func:`prepare` seeded: row counts and how long it took (s)."""

    history: int
    backlog: int
    seconds: float
    index_seconds: float
    vacuum_seconds: float

    @property
    def rows_per_s(self) -> float:
        """Seeded rows per second of seeding (INSERT only)."""
        rows = self.history + self.backlog
        return rows / self.seconds if self.seconds > 0 else float("nan")


def prepare(conn: psycopg.Connection, cfg: RunConfig, backlog: int,
            log: Callable[[str], None] = print) -> SeedResult:
    """(Re)create the tool's schema, seed ``cfg.history`` done rows and ``backlog``
    pending rows with set-based server-side INSERT … SELECT generate_series, build
    the index variant after seeding, then VACUUM ANALYZE the table.

    Seeded backlog ``run_at`` values are spread over the millisecond before
    seeding, in id order, so every pending row is eligible and ordered. Raises
    ConfigError if the schema belongs to someone else.
    """
    schema = cfg.schema
    check_schema_usable(conn, schema)
    ident = sql.Identifier(schema)
    drop_schema(conn, schema)
    with conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        conn.execute(sql.SQL("COMMENT ON SCHEMA {} IS {}").format(ident, sql.Literal(SCHEMA_MARK)))
        conn.execute(_ddl("table.sql", schema))
    jobs = sql.Identifier(schema, "jobs")

    started = time.perf_counter()
    if cfg.history:
        # Finished rows: done, one attempt, spread over the last day.
        conn.execute(sql.SQL("""
            INSERT INTO {jobs} (priority, run_at, status, attempts, attempt_token, locked_by,
                                created_at, started_at, finished_at)
            SELECT 0, t, 'done', 1, 0, 'history', t, t, t + interval '10 ms'
            FROM (SELECT now() - interval '1 day' + g * (interval '1 day' / %(n)s) AS t
                  FROM generate_series(1, %(n)s) AS g) AS s
        """).format(jobs=jobs), {"n": cfg.history})
    if backlog:
        conn.execute(sql.SQL("""
            INSERT INTO {jobs} (priority, run_at, status, max_attempts)
            SELECT 0, now() - interval '1 ms' + g * (interval '1 ms' / %(n)s), 'pending', %(max_attempts)s
            FROM generate_series(1, %(n)s) AS g
        """).format(jobs=jobs), {"n": backlog, "max_attempts": cfg.max_attempts})
    seed_s = time.perf_counter() - started
    rows = cfg.history + backlog
    log(f"seeded {rows:,} rows (history {cfg.history:,}, backlog {backlog:,}) in {seed_s:.1f} s "
        f"({rows / seed_s if seed_s > 0 else 0:,.0f} rows/s)")

    started = time.perf_counter()
    index_ddl = _ddl(f"index_{cfg.index}.sql", schema)
    if any(line.strip() and not line.strip().startswith("--") for line in index_ddl.as_string(conn).splitlines()):
        conn.execute(index_ddl)
    index_s = time.perf_counter() - started
    started = time.perf_counter()
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(jobs))
    vacuum_s = time.perf_counter() - started
    log(f"index variant {cfg.index!r} built in {index_s:.1f} s, VACUUM ANALYZE in {vacuum_s:.1f} s")
    return SeedResult(cfg.history, backlog, seed_s, index_s, vacuum_s)


def table_sizes(conn: psycopg.Connection, schema: str) -> dict[str, int]:
    """Bytes of the queue table (heap) and of all its indexes."""
    row = conn.execute("SELECT pg_table_size(%s::regclass), pg_indexes_size(%s::regclass)",
                       (f"{schema}.jobs",) * 2).fetchone()
    return {"table_bytes": row[0], "indexes_bytes": row[1]}
