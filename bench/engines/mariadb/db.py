"""Database side of a MariaDB run: connect, check the server, create the tool's database (marked by its
comment, MariaDB 10.5.0+: https://mariadb.com/kb/en/create-database/; locked by a run with ``GET_LOCK``:
https://mariadb.com/kb/en/get_lock/), the queue table and its index variant, seed, ANALYZE."""

from __future__ import annotations

import time
from typing import Callable

from bench.config.run_config import RunConfig
from bench.data import SCHEMAS_DIR
from bench.engines.base import EngineError
from bench.engines.mariadb.adapter import connect_dsn, execute, query, translated, try_lock_schema, unlock_schema
from bench.engines.mariadb.policies import ident, literal
from bench.engines.common import SeedResult, ToolSchema
from bench.engines.ownership import SCHEMA_MARK, SchemaOwnership
from bench.errors import ConfigError
from bench.workload.queues import flood_share, queue_count, queue_sql, seeded_u_sql
from bench.usage import named

SCHEMA_DIR = SCHEMAS_DIR / "mariadb"
#: Server variables recorded with every run (``@@name``; absent ones are recorded as None).
KEY_SETTINGS = (
    "max_connections", "extra_max_connections", "innodb_buffer_pool_size", "innodb_flush_log_at_trx_commit",
    "sync_binlog", "log_bin", "tx_isolation", "transaction_isolation", "innodb_lock_wait_timeout",
    "innodb_deadlock_detect", "innodb_log_file_size", "innodb_io_capacity", "innodb_purge_threads",
    "innodb_autoinc_lock_mode", "performance_schema", "version_comment", "character_set_server",
)
#: Rows per seeding INSERT (keeps each transaction's undo log small).
SEED_CHUNK = 200_000

#: An admin connection (autocommit, UTC); ConfigError (``DSN``) when it cannot connect.
connect = connect_dsn


def server_info(conn) -> dict:
    """Engine, version string, release (``10.11.6``) and number, and :data:`KEY_SETTINGS` of the server behind
    ``conn``."""
    version = query(conn, "SELECT VERSION()")[0][0]
    settings = {}
    for name in KEY_SETTINGS:
        try:
            with translated():
                value = query(conn, f"SELECT @@{name}")[0][0]
            settings[name] = value.decode() if isinstance(value, bytes) else value
        except EngineError:
            settings[name] = None
    numbers = [int(x) for x in version.split("-")[0].split(".")[:3]]
    return {"engine": "mariadb" if "mariadb" in version.lower() else "mysql", "server_version": version,
            "server_release": version.split("-")[0],
            "server_version_num": numbers[0] * 10000 + numbers[1] * 100 + numbers[2],
            "server_settings": settings}


def connection_headroom(conn) -> dict[str, int]:
    """Connections this run may still open: ``max_connections`` less ``Threads_connected`` (the SUPER slot and
    ``extra_max_connections`` not counted: https://mariadb.com/kb/en/server-system-variables/#max_connections)."""
    max_conn = int(query(conn, "SELECT @@max_connections")[0][0])
    in_use = int(query(conn, "SHOW GLOBAL STATUS LIKE 'Threads_connected'")[0][1])
    return {"max_connections": max_conn, "reserved": 0, "in_use": in_use, "available": max_conn - in_use}


def schema_state(conn, schema: str) -> str:
    """``"absent"``, ``"ours"`` (carries :data:`SCHEMA_MARK`) or ``"foreign"``."""
    rows = query(conn, "SELECT SCHEMA_COMMENT FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (schema,))
    if not rows:
        return "absent"
    return "ours" if rows[0][0] == SCHEMA_MARK else "foreign"


_OUTSIDE_DEPENDENTS = """
SELECT concat('foreign key ', CONSTRAINT_NAME, ' on ', CONSTRAINT_SCHEMA, '.', TABLE_NAME)
FROM information_schema.REFERENTIAL_CONSTRAINTS
WHERE UNIQUE_CONSTRAINT_SCHEMA = %s AND CONSTRAINT_SCHEMA <> %s
UNION ALL
SELECT concat('view ', TABLE_SCHEMA, '.', TABLE_NAME)
FROM information_schema.VIEWS
WHERE TABLE_SCHEMA <> %s AND VIEW_DEFINITION LIKE concat('%%`', %s, '`.%%')
ORDER BY 1"""


def outside_dependents(conn, schema: str) -> list[str]:
    """Foreign keys and views in other databases that depend on ``schema``, as phrases (``view app.v``)."""
    return [r[0] for r in query(conn, _OUTSIDE_DEPENDENTS, (schema, schema, schema, schema))]


def state_schema_for(schema: str) -> str:
    """``<schema>_state``, the name saved states would have (this engine keeps none)."""
    return f"{schema}_state"[:64]


def _create_marked(conn, schema: str) -> None:
    execute(conn, f"CREATE DATABASE {ident(schema)} CHARACTER SET utf8mb4 COMMENT {literal(SCHEMA_MARK)}")


#: The tool's databases on the server: (name, tables, estimated rows, bytes), for ``qbench clean``.
_LIST = """
SELECT s.SCHEMA_NAME, count(t.TABLE_NAME), coalesce(sum(t.TABLE_ROWS), 0),
       coalesce(sum(t.DATA_LENGTH + t.INDEX_LENGTH), 0)
FROM information_schema.SCHEMATA s
LEFT JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = s.SCHEMA_NAME AND t.TABLE_TYPE = 'BASE TABLE'
WHERE s.SCHEMA_COMMENT = %s
GROUP BY s.SCHEMA_NAME ORDER BY s.SCHEMA_NAME"""

#: The tool's databases on MariaDB (:mod:`bench.engines.ownership`): a database marked by its comment, the
#: named lock ``qbench:<schema>`` (https://mariadb.com/kb/en/get_lock/).
OWNERSHIP = SchemaOwnership(
    word="database", lock_scope="server", state=schema_state, dependents=outside_dependents,
    try_lock=try_lock_schema, unlock=unlock_schema, create_marked=_create_marked,
    drop_owned=lambda conn, schema: execute(conn, f"DROP DATABASE {ident(schema)}"),
    headroom=connection_headroom, state_schema_for=state_schema_for,
    listed=lambda conn: [ToolSchema(name, int(tables), int(rows), int(size))
                         for name, tables, rows, size in query(conn, _LIST, (SCHEMA_MARK,))])


def statements(name: str, schema: str) -> list[str]:
    """The statements of ``bench/data/schemas/mariadb/<name>``, ``{schema}`` bound: each ends with ``;`` at a
    line's end, a trigger body from a ``BEGIN`` line to an ``END;`` line is one."""
    text = (SCHEMA_DIR / name).read_text().format(schema=ident(schema))
    out, current, depth = [], [], 0
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("--")):
            continue
        current.append(line)
        if stripped.upper() == "BEGIN":
            depth += 1
        elif depth and stripped.upper() == "END;":
            depth -= 1
        if stripped.endswith(";") and depth == 0:
            out.append("\n".join(current).rstrip().rstrip(";"))
            current = []
    if current:
        out.append("\n".join(current))
    return out


def _chunks(n: int) -> list[tuple[int, int]]:
    return [(a, min(n, a + SEED_CHUNK - 1)) for a in range(1, n + 1, SEED_CHUNK)]


#: Lock memory per row a locking scan touches, per worker (bytes; 159 on average, 185 at most, measured under
#: 8 workers' contention: docs/mariadb.md).
LOCK_BYTES_PER_SCANNED_ROW = 192
#: Share of the buffer pool those locks may be estimated to take before a run is refused.
LOCK_MEMORY_SHARE = 0.5


def check_lock_memory(conn, cfg: RunConfig, backlog: int) -> None:
    """ConfigError (``INDEX``) when, with ``INDEX=none`` or ``status``, ``workers × rows scanned ×
    LOCK_BYTES_PER_SCANNED_ROW`` exceeds :data:`LOCK_MEMORY_SHARE` of ``innodb_buffer_pool_size``: InnoDB
    ends the server past 95 % (https://mariadb.com/kb/en/innodb-system-variables/#innodb_buffer_pool_size)."""
    if cfg.index not in ("none", "status"):
        return
    rows = backlog + (cfg.history if cfg.index == "none" else 0)
    pool = int(query(conn, "SELECT @@innodb_buffer_pool_size")[0][0])
    need = cfg.workers * rows * LOCK_BYTES_PER_SCANNED_ROW
    if need > LOCK_MEMORY_SHARE * pool:
        raise ConfigError("INDEX", (
            f"{cfg.index} makes every claim lock each of the {rows:,} rows it scans, in each of {cfg.workers} "
            f"workers: about {need / 2**20:,.0f} MiB of InnoDB lock memory against a buffer pool of "
            f"{pool / 2**20:,.0f} MiB, and InnoDB aborts the server past 95 % of it; allowed: "
            + named(f"{{workers}} x rows <= {int(LOCK_MEMORY_SHARE * pool / LOCK_BYTES_PER_SCANNED_ROW):,} (fewer "
                    "{workers}, a smaller {backlog} or {history}), another {index}, or a larger "
                    "innodb_buffer_pool_size")))


def prepare(conn, cfg: RunConfig, backlog: int, log: Callable[[str], None] = print, *,
            state_schema: str | None = None) -> SeedResult:
    """(Re)create database and table, seed history and backlog from the sequence tables
    (https://mariadb.com/kb/en/sequence-storage-engine/), add the index variant, ANALYZE. Raises ConfigError
    (a foreign database, :func:`check_lock_memory`) before creating anything."""
    schema = cfg.schema
    OWNERSHIP.check_usable(conn, schema)
    check_lock_memory(conn, cfg, backlog)
    OWNERSHIP.recreate(conn, schema)
    effect_files = {"outside": ("effects.sql",), "same_txn": ("effects.sql",),
                    "idempotent": ("effects.sql", "effects_unique.sql")}.get(cfg.effects, ())
    for statement in [s for name in ("table.sql", *effect_files) for s in statements(name, schema)]:
        execute(conn, statement)
    jobs = ident(schema, "jobs")
    started = time.perf_counter()
    n = cfg.history
    n_queues, flood = queue_count(cfg), flood_share(cfg)
    # Each seeded row's queue, from its id (bench.workload.queues); none with one queue.
    queue_column = ", queue" if n_queues > 1 else ""

    def queue_of(id_sql: str) -> str:
        return (f", CONCAT('q', CAST({queue_sql(seeded_u_sql(id_sql), n_queues, flood)} AS UNSIGNED))"
                if n_queues > 1 else "")

    for a, b in _chunks(n):
        execute(conn, f"""
            INSERT INTO {jobs} (id, priority, run_at, status, attempts, attempt_token, locked_by,
                                created_at, started_at, finished_at{queue_column})
            SELECT seq, 0, t, 'done', 1, 0, 'history', t, t, t + INTERVAL 10000 MICROSECOND{queue_of("seq")}
            FROM (SELECT seq, NOW(6) - INTERVAL 1 DAY + INTERVAL (seq * 86400000000 DIV {n}) MICROSECOND AS t
                  FROM {ident(schema)}.seq_{a}_to_{b}) AS s""")
    for a, b in _chunks(backlog):  # explicit ids: AUTO_INCREMENT would leave gaps between statements
        execute(conn, f"""
            INSERT INTO {jobs} (id, priority, run_at, status, max_attempts{queue_column})
            SELECT {n} + seq, 0, NOW(6) - INTERVAL 1000 MICROSECOND + INTERVAL (seq * 1000 DIV {backlog}) MICROSECOND,
                   'pending', {int(cfg.max_attempts)}{queue_of(f"{n} + seq")}
            FROM {ident(schema)}.seq_{a}_to_{b}""")
    seed_s = time.perf_counter() - started
    rows = cfg.history + backlog
    log(f"seeded {rows:,} rows (history {cfg.history:,} generated, backlog {backlog:,}) in {seed_s:.1f} s "
        f"({rows / seed_s if seed_s > 0 else 0:,.0f} rows/s)")
    started = time.perf_counter()
    for statement in statements(f"index_{cfg.index}.sql", schema):
        execute(conn, statement)
    index_s = time.perf_counter() - started
    started = time.perf_counter()
    for table in queue_tables(conn, schema):
        query(conn, f"ANALYZE TABLE {table}")
    analyze_s = time.perf_counter() - started
    log(f"index variant {cfg.index!r} built in {index_s:.1f} s, ANALYZE TABLE in {analyze_s:.1f} s")
    return SeedResult(cfg.history, backlog, seed_s, index_s, analyze_s)


def queue_tables(conn, schema: str) -> list[str]:
    """The tool's tables that hold jobs (``jobs``, and ``jobs_ready`` when present), quoted."""
    rows = query(conn, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                       "AND TABLE_NAME IN ('jobs', 'jobs_ready') ORDER BY TABLE_NAME", (schema,))
    return [ident(schema, r[0]) for r in rows]


def table_sizes(conn, schema: str) -> dict[str, int]:
    """Bytes of the queue table and of its indexes (``jobs_ready`` among them), InnoDB's estimate
    (https://mariadb.com/kb/en/information-schema-tables-table/)."""
    rows = query(conn, "SELECT TABLE_NAME, DATA_LENGTH, INDEX_LENGTH FROM information_schema.TABLES "
                       "WHERE TABLE_SCHEMA = %s AND TABLE_NAME IN ('jobs', 'jobs_ready')", (schema,))
    table = sum(int(d) for name, d, _ in rows if name == "jobs")
    indexes = sum(int(i) for name, _, i in rows if name == "jobs") + sum(int(d) + int(i) for name, d, i in rows
                                                                       if name == "jobs_ready")
    return {"table_bytes": table, "indexes_bytes": indexes, "archive_bytes": 0}
