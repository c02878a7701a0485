"""Database side of a PostgreSQL run: connect, the server's settings, the tool's schemas (marked by
:data:`SCHEMA_MARK`; a schema without it is refused, never dropped), table, index variant, seed."""

from __future__ import annotations

import time
from typing import Callable

import psycopg
from psycopg import sql

from bench.config.run_config import RunConfig
from bench.engines.common import SeedResult, ToolSchema
from bench.engines.ownership import SCHEMA_MARK, SchemaOwnership
from bench.engines.postgres.builtin_queue import SCHEMA_DIR, schema_ddl, table_ddl
from bench.engines.postgres.adapter import DRIVER, try_lock_schema, unlock_schema
from bench.engines.postgres.adapter import connect_dsn as connect
from bench.workload.queues import flood_share, queue_count, queue_sql, seeded_u_sql


#: Server settings recorded with every run (SHOW name).
KEY_SETTINGS = (
    "max_connections", "superuser_reserved_connections", "shared_buffers", "work_mem",
    "effective_cache_size", "synchronous_commit", "fsync", "wal_level", "max_wal_size",
    "checkpoint_timeout", "autovacuum", "track_counts", "random_page_cost", "jit", "server_encoding",
    # autovacuum runs only with autovacuum and track_counts on (bench.results.dead_rows); then the queue table's
    # autovacuum follows these unless AUTOVACUUM_SETTINGS overrides them (FR-12)
    "autovacuum_naptime", "autovacuum_max_workers", "autovacuum_vacuum_threshold", "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_cost_delay", "autovacuum_vacuum_cost_limit",
    # PostgreSQL 18's asynchronous I/O (absent before 18: docs/architecture.md, "The embedded servers")
    "io_method", "io_workers",
)


def server_info(conn: psycopg.Connection) -> dict:
    """Engine, version string, release (``18.6``) and number, and the :data:`KEY_SETTINGS` the server behind
    ``conn`` has (a setting its version lacks is left out)."""
    version = conn.execute("SELECT version()").fetchone()[0]
    rows = conn.execute("SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(%s)",
                        (list(KEY_SETTINGS),)).fetchall()
    found = dict(rows)
    settings = {name: found[name] for name in KEY_SETTINGS if name in found}
    release = conn.execute("SHOW server_version").fetchone()[0].split()[0]  # '15.20 (Debian ...)' -> '15.20'
    return {"engine": "postgresql", "server_version": version, "server_release": release,
            "server_version_num": conn.info.server_version, "server_settings": settings}


def not_shipped(conn: psycopg.Connection, extension: str) -> str | None:
    """Why ``extension`` cannot be created on this server when its build does not ship it (not in
    ``pg_available_extensions``: the pgserver wheel has no contrib modules), in one line; else None."""
    if conn.execute("SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = %s)", (extension,)).fetchone()[0]:
        return None
    return (f"this server's build ships no {extension} (not in pg_available_extensions; the pgserver wheel's "
            "PostgreSQL 16 has no contrib modules)")


def connection_headroom(conn: psycopg.Connection) -> dict[str, int]:
    """``{"max_connections", "reserved", "in_use", "available"}``: ``max_connections`` less reserved slots
    (``superuser_reserved_connections``, ``reserved_connections`` on 16+) less the client backends
    connected (this one included). https://www.postgresql.org/docs/current/runtime-config-connection.html"""
    row = conn.execute("""
        SELECT current_setting('max_connections')::int,
               current_setting('superuser_reserved_connections')::int,
               coalesce(current_setting('reserved_connections', true), '0')::int,
               (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int
    """).fetchone()
    max_conn, su_reserved, reserved, in_use = row
    return {"max_connections": max_conn, "reserved": su_reserved + reserved, "in_use": in_use,
            "available": max_conn - su_reserved - reserved - in_use}


def schema_state(conn: psycopg.Connection, schema: str) -> str:
    """``"absent"``, ``"ours"`` (carries :data:`SCHEMA_MARK`) or ``"foreign"``."""
    row = conn.execute(
        "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = %s", (schema,)
    ).fetchone()
    if row is None:
        return "absent"
    return "ours" if row[0] == SCHEMA_MARK else "foreign"


def _has_statements(ddl: str) -> bool:
    return any(line.strip() and not line.strip().startswith("--") for line in ddl.splitlines())


#: Objects outside a schema that depend on something inside it (``pg_depend``, normal and auto
#: dependencies): a ``DROP SCHEMA … CASCADE`` would drop them too. Rules are views' (``_RETURN``).
_OUTSIDE_DEPENDENTS = r"""
SELECT DISTINCT CASE WHEN o.type = 'rule' THEN 'view ' || regexp_replace(o.identity, '^.* on ', '')
                     ELSE o.type || ' ' || o.identity END
FROM pg_depend d, LATERAL pg_identify_object(d.classid, d.objid, d.objsubid) o
WHERE d.deptype IN ('n', 'a')
  AND ((d.refclassid = 'pg_class'::regclass
        AND d.refobjid IN (SELECT oid FROM pg_class WHERE relnamespace = %(ns)s::regnamespace))
    OR (d.refclassid = 'pg_type'::regclass
        AND d.refobjid IN (SELECT oid FROM pg_type WHERE typnamespace = %(ns)s::regnamespace))
    OR (d.refclassid = 'pg_proc'::regclass
        AND d.refobjid IN (SELECT oid FROM pg_proc WHERE pronamespace = %(ns)s::regnamespace))
    OR (d.refclassid = 'pg_namespace'::regclass AND d.refobjid = %(ns)s::regnamespace))
  AND coalesce(o.schema, '') <> %(name)s
  -- an object of the schema itself: "<schema>.x", "rule on <schema>.v", "for <schema>.t.col", ...
  AND o.identity !~ ('(^|\s)' || quote_ident(%(name)s) || '\.')
ORDER BY 1"""


def outside_dependents(conn: psycopg.Connection, schema: str) -> list[str]:
    """What outside ``schema`` depends on objects inside it (``view mine.jobs_view``, ``function
    mine.f(qbench.jobs)``…); [] if nothing. https://www.postgresql.org/docs/current/catalog-pg-depend.html"""
    rows = conn.execute(_OUTSIDE_DEPENDENTS, {"ns": sql.Identifier(schema).as_string(conn),
                                              "name": schema}).fetchall()
    return [r[0] for r in rows]


def _create_marked(conn: psycopg.Connection, schema: str) -> None:
    ident = sql.Identifier(schema)
    with conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        conn.execute(sql.SQL("COMMENT ON SCHEMA {} IS {}").format(ident, sql.Literal(SCHEMA_MARK)))


#: The tool's schemas of this database: (name, tables, estimated rows, bytes), for ``qbench clean``.
_LIST = """
SELECT n.nspname,
       count(c.oid) FILTER (WHERE c.relkind IN ('r', 'p')),
       coalesce(sum(greatest(c.reltuples, 0)) FILTER (WHERE c.relkind = 'r'), 0)::bigint,
       coalesce(sum(pg_total_relation_size(c.oid)) FILTER (WHERE c.relkind = 'r'), 0)::bigint
FROM pg_namespace n LEFT JOIN pg_class c ON c.relnamespace = n.oid
WHERE obj_description(n.oid, 'pg_namespace') = %s
GROUP BY n.nspname ORDER BY n.nspname"""


def state_schema_for(schema: str) -> str:
    """The tool's schema holding saved seeded states for runs in ``schema`` (``<schema>_state``)."""
    return f"{schema}_state"[:63]


#: The tool's schemas on PostgreSQL (:mod:`bench.engines.ownership`): a schema marked by its comment, a
#: session-level advisory lock per schema name (https://www.postgresql.org/docs/current/explicit-locking.html#ADVISORY-LOCKS).
OWNERSHIP = SchemaOwnership(
    word="schema", lock_scope="database", state=schema_state, dependents=outside_dependents,
    try_lock=try_lock_schema, unlock=unlock_schema, create_marked=_create_marked,
    drop_owned=lambda conn, schema: conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema))),
    headroom=connection_headroom, state_schema_for=state_schema_for,
    listed=lambda conn: [ToolSchema(name, int(tables), int(rows), int(size))
                         for name, tables, rows, size in conn.execute(_LIST, (SCHEMA_MARK,)).fetchall()])


#: Columns of a seeded history row, in the order both seeding paths write them.
_HISTORY_COLUMNS = ("id", "priority", "run_at", "status", "attempts", "attempt_token", "locked_by",
                    "created_at", "started_at", "finished_at")
#: Finished rows: done, one attempt, ids 1..n, spread over the day before seeding.
_HISTORY_ROWS = """
    SELECT g, 0::smallint, t, 'done', 1, 0::bigint, 'history', t, t, t + interval '10 ms'
    FROM (SELECT g, now() - interval '1 day' + g * (interval '1 day' / %(n)s) AS t
          FROM generate_series(1, %(n)s) AS g) AS s"""


def _queue_of(cfg: RunConfig) -> Callable[[str], sql.Composable]:
    """``queue_of(id_sql)``: the SQL queue name of a seeded row with that id (:mod:`bench.workload.queues`)."""
    n, flood = queue_count(cfg), flood_share(cfg)
    return lambda id_sql: sql.SQL(f"'q' || ({queue_sql(seeded_u_sql(id_sql), n, flood)})::int")


def ensure_history_state(conn: psycopg.Connection, state_schema: str, history: int,
                         log: Callable[[str], None] = print) -> sql.Composed:
    """The saved history table of ``history`` rows in ``state_schema``, created (with the schema) on first
    use (docs/sweeps.md; docs/measurements/harness.md). Raises ConfigError (``SCHEMA``) if ``state_schema``
    belongs to someone else."""
    OWNERSHIP.refuse_foreign(conn, state_schema)
    if schema_state(conn, state_schema) == "absent":
        _create_marked(conn, state_schema)
    name = f"history_{history}"
    table = sql.Identifier(state_schema, name)
    exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                          (f'"{state_schema}"."{name}"',)).fetchone()[0]
    if not exists:
        started = time.perf_counter()
        cols = sql.SQL(", ").join(map(sql.Identifier, _HISTORY_COLUMNS))
        conn.execute(sql.SQL("CREATE UNLOGGED TABLE {} ({}) AS " + _HISTORY_ROWS).format(table, cols),
                     {"n": history})
        seconds = time.perf_counter() - started
        log(f"saved history state {state_schema}.{name}: {history:,} rows in {seconds:.1f} s "
            f"({history / seconds if seconds > 0 else 0:,.0f} rows/s)")
    return table


def prepare(conn: psycopg.Connection, cfg: RunConfig, backlog: int,
            log: Callable[[str], None] = print, *, state_schema: str | None = None) -> SeedResult:
    """(Re)create schema and table, seed history (from ``state_schema`` when given) and backlog, add keys and index,
    VACUUM ANALYZE (docs/reading-the-report.md, "Prepare"). Raises ConfigError for a foreign schema."""
    schema = cfg.schema
    OWNERSHIP.recreate(conn, schema)
    with conn.transaction():
        conn.execute(table_ddl(cfg))
    jobs = sql.Identifier(schema, "jobs")
    history_table = sql.Identifier(schema, "jobs_archive" if cfg.layout == "archive" else "jobs")
    cols = sql.SQL(", ").join(map(sql.Identifier, _HISTORY_COLUMNS))

    source = "generated"
    if cfg.history and state_schema:
        saved = ensure_history_state(conn, state_schema, cfg.history, log)
        source = f"restored from {state_schema}.history_{cfg.history}"
    started = time.perf_counter()
    n_queues, queue_of = queue_count(cfg), _queue_of(cfg)  # each seeded row's queue: from its id
    if cfg.history:
        rows_sql = sql.SQL("SELECT {} FROM {}").format(cols, saved) if state_schema else sql.SQL(_HISTORY_ROWS)
        if n_queues > 1:
            rows_sql = sql.SQL("SELECT h.*, {} FROM ({}) AS h ({})").format(queue_of("h.id"), rows_sql, cols)
            cols_in = sql.SQL(", ").join(map(sql.Identifier, (*_HISTORY_COLUMNS, "queue")))
        conn.execute(sql.SQL("INSERT INTO {} ({}) OVERRIDING SYSTEM VALUE {}").format(
            history_table, cols_in if n_queues > 1 else cols, rows_sql), None if state_schema else {"n": cfg.history})
        # The identity continues after the seeded ids.
        conn.execute(sql.SQL("SELECT setval(pg_get_serial_sequence({}, 'id'), %s)").format(
            sql.Literal(f'"{schema}"."jobs"')), (cfg.history,))
    if backlog:
        conn.execute(sql.SQL("""
            INSERT INTO {jobs} (priority, run_at, status, max_attempts{queue_column})
            SELECT 0, now() - interval '1 ms' + g * (interval '1 ms' / %(n)s), 'pending', %(max_attempts)s{queue_of}
            FROM generate_series(1, %(n)s) AS g
        """).format(jobs=jobs, queue_column=sql.SQL(", queue" if n_queues > 1 else ""),
                    queue_of=sql.SQL(", ") + queue_of(f"g + {int(cfg.history)}") if n_queues > 1 else sql.SQL("")),
            {"n": backlog, "max_attempts": cfg.max_attempts})
    seed_s = time.perf_counter() - started
    rows = cfg.history + backlog
    log(f"seeded {rows:,} rows (history {cfg.history:,} {source}, backlog {backlog:,}) in {seed_s:.1f} s "
        f"({rows / seed_s if seed_s > 0 else 0:,.0f} rows/s)")

    started = time.perf_counter()
    # The partitioning column must be part of a partitioned table's primary key.
    key = sql.SQL("id, status" if cfg.layout == "partitioned" else "id")
    conn.execute(sql.SQL("ALTER TABLE {} ADD PRIMARY KEY ({})").format(jobs, key))
    if cfg.layout == "archive":
        conn.execute(sql.SQL("ALTER TABLE {} ADD PRIMARY KEY (id)").format(history_table))
    index_ddl = schema_ddl(f"index_{cfg.index}.sql", schema)
    if _has_statements(index_ddl):
        conn.execute(index_ddl)
    for name in ("tenants.sql", f"tenant_index_{cfg.index}.sql") if cfg.tenants > 1 else ():
        if (SCHEMA_DIR / name).is_file():  # the round robin's turn; a queue-leading index where the variant has one
            conn.execute(schema_ddl(name, schema))
    index_s = time.perf_counter() - started
    started = time.perf_counter()
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(jobs))
    if cfg.layout == "archive":
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(history_table))
    vacuum_s = time.perf_counter() - started
    if cfg.autovacuum is False:
        for table in queue_tables(conn, schema):
            conn.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = off)").format(table))
    log(f"primary key and index variant {cfg.index!r} built in {index_s:.1f} s, VACUUM ANALYZE in {vacuum_s:.1f} s")
    return SeedResult(cfg.history, backlog, seed_s, index_s, vacuum_s)


#: The tool's own job tables (the layouts' names).
_JOB_TABLES = ("jobs", "jobs_live", "jobs_history", "jobs_archive")


def queue_tables(conn: psycopg.Connection, schema: str) -> list[sql.Identifier]:
    """The tool's leaf tables that hold jobs: ``jobs`` or its partitions, and ``jobs_archive`` when present."""
    rows = conn.execute("""
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname = ANY(%s)
        ORDER BY c.relname""", (schema, list(_JOB_TABLES))).fetchall()
    return [sql.Identifier(schema, name) for (name,) in rows]


def vacuum_counts(conn: psycopg.Connection, schema: str, tables: tuple[str, ...] = _JOB_TABLES) -> dict:
    """Autovacuum and autoanalyze so far on ``tables`` in ``schema`` (``pg_stat_user_tables``,
    https://www.postgresql.org/docs/current/monitoring-stats.html#MONITORING-PG-STAT-ALL-TABLES-VIEW):
    ``{"autovacuum_count", "autoanalyze_count", "last_autovacuum", "last_autoanalyze" (ISO text or None),
    "server_autovacuum" (bool), "naptime_s" (``autovacuum_naptime``, s), "at_s" (server clock, epoch s)}``."""
    row = conn.execute("""
        SELECT coalesce(sum(autovacuum_count), 0)::bigint, coalesce(sum(autoanalyze_count), 0)::bigint,
               max(last_autovacuum)::text, max(last_autoanalyze)::text, current_setting('autovacuum'),
               (SELECT setting::float8 FROM pg_settings WHERE name = 'autovacuum_naptime'),
               extract(epoch FROM clock_timestamp())::float8
        FROM pg_stat_user_tables
        WHERE schemaname = %s AND relname = ANY(%s)""",
        (schema, list(tables))).fetchone()
    return {"autovacuum_count": int(row[0]), "autoanalyze_count": int(row[1]),
            "last_autovacuum": row[2], "last_autoanalyze": row[3], "server_autovacuum": row[4] == "on",
            "naptime_s": row[5], "at_s": row[6]}


def table_sizes(conn: psycopg.Connection, schema: str, table: str = "jobs") -> dict[str, int]:
    """``{"table_bytes", "indexes_bytes", "archive_bytes"}``: ``table``'s heap and indexes (all partitions),
    ``jobs_archive``'s heap + indexes (0 without one)."""
    row = conn.execute("""
        WITH parts AS (SELECT relid FROM pg_partition_tree(%(t)s::regclass) UNION SELECT %(t)s::regclass)
        SELECT coalesce(sum(pg_table_size(relid)), 0)::bigint, coalesce(sum(pg_indexes_size(relid)), 0)::bigint
        FROM parts""", {"t": sql.Identifier(schema, table).as_string(None)}).fetchone()
    archive = conn.execute("SELECT coalesce(pg_total_relation_size(to_regclass(%s)), 0)::bigint",
                           (f'"{schema}"."jobs_archive"',)).fetchone()[0]
    return {"table_bytes": int(row[0]), "indexes_bytes": int(row[1]), "archive_bytes": int(archive)}


def job_counts(conn: psycopg.Connection, schema: str) -> dict[str, int]:
    """``{"done", "running", "pending", "attempts_done"}`` of the tool's queue table (``attempts_done``: the
    done rows' ``attempts`` summed, ``done`` when each was claimed once); one scan."""
    row = conn.execute(sql.SQL("""
        SELECT count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'running'),
               count(*) FILTER (WHERE status = 'pending'), coalesce(sum(attempts) FILTER (WHERE status = 'done'), 0)
        FROM {}""").format(sql.Identifier(schema, "jobs"))).fetchone()
    return {"done": int(row[0]), "running": int(row[1]), "pending": int(row[2]), "attempts_done": int(row[3])}


def running_jobs(conn: psycopg.Connection, schema: str) -> dict[str, tuple[int, float | None]]:
    """The tool's queue table's ``running`` jobs by ``locked_by``: ``{claimant: (jobs, latest
    lease_expires_at in epoch s)}``; one scan."""
    rows = conn.execute(sql.SQL("""
        SELECT locked_by, count(*), extract(epoch FROM max(lease_expires_at))::float8
        FROM {} WHERE status = 'running' GROUP BY locked_by""").format(sql.Identifier(schema, "jobs"))).fetchall()
    return {str(who): (int(n), None if until is None else float(until)) for who, n, until in rows}


def flush_statistics(conn: psycopg.Connection) -> None:
    """Make this session's pending statistics (the rows it seeded, the buffers it touched) visible now, on
    PostgreSQL 15 and later: an idle session sends them only after 10 s, which would put the seeding's rows in
    the measured window's counts (https://www.postgresql.org/docs/current/monitoring-stats.html,
    ``pg_stat_force_next_flush``). Before 15 the statistics collector has no such call: nothing is done."""
    if conn.info.server_version >= 150000:
        conn.execute("SELECT pg_stat_force_next_flush()")
