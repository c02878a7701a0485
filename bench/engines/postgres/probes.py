"""Probes of what PostgreSQL's locking reads do (experiments 4 and 13; why: docs/design.md, claim protocol;
https://www.postgresql.org/docs/current/sql-select.html#SQL-FOR-UPDATE-SHARE), each measured on a scratch
table in the tool's schema; nothing is created outside it (``pgrowlocks`` only where installed)."""

from __future__ import annotations

import contextlib
import secrets
from typing import Iterator

import psycopg
from psycopg import sql

from bench.engines.base import EngineError, LockNotAvailable
from bench.engines.postgres import db, policies
from bench.engines.postgres.adapter import INSUFFICIENT_PRIVILEGE, lock_timeout, statement_timeout, translated

#: Planner settings of field case FR-03, turned off with ``SET LOCAL`` (a Nested Loop Semi Join then).
FR03_SETTINGS = ("enable_hashjoin", "enable_mergejoin", "enable_material", "enable_sort", "enable_hashagg")
#: Each probe session's ``lock_timeout`` and ``statement_timeout`` (ms): a safety net.
PROBE_TIMEOUT_MS = 5_000

# The scratch table: the columns the tool's claim reads and writes, as in bench/data/schemas/postgres/table.sql.
_CREATE = """\
CREATE TABLE {table} (
    id bigint PRIMARY KEY, priority smallint NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),
    status text NOT NULL DEFAULT 'pending', attempts integer NOT NULL DEFAULT 0, attempt_token bigint,
    locked_by text, lease_expires_at timestamptz, started_at timestamptz
)"""
#: The ``partial`` index variant (bench/data/schemas/postgres/index_partial.sql) on the scratch table.
_CLAIM_ORDER_INDEX = "CREATE INDEX {index} ON {table} (priority, run_at, id) WHERE status = 'pending'"
_FILL = """\
INSERT INTO {table} (id, run_at)
SELECT g, now() - interval '1 s' + g * interval '1 ms' FROM generate_series(1, %(rows)s) AS g"""


def _session(dsn: str, name: str) -> psycopg.Connection:
    conn = db.connect(dsn, application_name=f"queue-bench probe {name}")
    lock_timeout(conn, PROBE_TIMEOUT_MS)
    statement_timeout(conn, PROBE_TIMEOUT_MS)
    return conn


@contextlib.contextmanager
def scratch_table(dsn: str, schema: str, kind: str, rows: int) -> Iterator[tuple[psycopg.Connection, sql.Identifier, str]]:
    """A table ``<schema>.qbench_probe_<kind>_<hex>`` of ``rows`` pending rows (ids 1..rows in claim order)
    and a sequence ``<name>_seq``, dropped after the block (the schema too if created); yields (admin
    connection, table, name). Raises ConfigError (``SCHEMA``, ``DSN``)."""
    admin = db.connect(dsn, application_name="queue-bench probe")
    name = f"qbench_probe_{kind}_{secrets.token_hex(4)}"
    table = sql.Identifier(schema, name)
    seq = sql.Identifier(schema, f"{name}_seq")
    try:
        with db.OWNERSHIP.borrowed(admin, schema):
            try:
                with admin.transaction():
                    admin.execute(sql.SQL(_CREATE).format(table=table))
                    admin.execute(sql.SQL("CREATE SEQUENCE {}").format(seq))
                    admin.execute(sql.SQL(_FILL).format(table=table), {"rows": rows})
                    admin.execute(sql.SQL("ANALYZE {}").format(table))
                yield admin, table, name
            finally:
                admin.rollback()
                admin.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
                admin.execute(sql.SQL("DROP SEQUENCE IF EXISTS {}").format(seq))
    finally:
        admin.close()


def _explain(conn: psycopg.Connection, statement: sql.Composable, params=None) -> str:
    return "\n".join(r[0] for r in conn.execute(sql.SQL("EXPLAIN ") + statement, params).fetchall())


def _pgrowlocks_schema(conn: psycopg.Connection) -> str | None:
    """The schema of the ``pgrowlocks`` extension where it is installed in this database, else None."""
    row = conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
                       "WHERE e.extname = 'pgrowlocks'").fetchone()
    return row[0] if row else None


def _locked_by_nowait(conn: psycopg.Connection, table: sql.Identifier, ids: list[int]) -> list[int]:
    """The ``ids`` that ``FOR UPDATE NOWAIT`` on ``conn`` cannot lock (55P03), each tried and rolled back."""
    locked = []
    for job_id in ids:
        try:
            with translated(), conn.transaction(force_rollback=True):
                conn.execute(sql.SQL("SELECT id FROM {} WHERE id = %s FOR UPDATE NOWAIT").format(table), (job_id,))
        except LockNotAvailable:
            locked.append(job_id)
    return locked


def offset_lock_probe(dsn: str, schema: str) -> dict:
    """Experiment 4 on ids 1, 2, 3: A's ``OFFSET 1 LIMIT 1 FOR UPDATE`` held, B's ``SKIP LOCKED`` claim, and
    the rows A holds (``pgrowlocks`` where installed, else ``NOWAIT`` on each). Returns ``{"offset_returned",
    "skip_locked_got", "locked_rows", "method": "pgrowlocks" | "nowait probe", "plan"}``. Raises ConfigError
    (``SCHEMA``, ``DSN``) and ``psycopg.Error``."""
    with scratch_table(dsn, schema, "offset", rows=3) as (admin, table, _seq):
        a, b, c = (_session(dsn, n) for n in ("A", "B", "C"))
        try:
            offset_select = sql.SQL("SELECT id FROM {} ORDER BY id OFFSET 1 LIMIT 1 FOR UPDATE").format(table)
            plan = _explain(a, offset_select)
            with a.transaction(force_rollback=True):
                row = a.execute(offset_select).fetchone()
                with b.transaction(force_rollback=True):
                    got = b.execute(sql.SQL("SELECT id FROM {} ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED").format(
                        table)).fetchone()
                method, locked = "nowait probe", None
                extension = _pgrowlocks_schema(c)
                if extension is not None:
                    try:
                        with translated():
                            locked = _pgrowlocks(c, table, extension, a.info.backend_pid)
                        method = "pgrowlocks"
                    except EngineError as err:
                        if err.kind != INSUFFICIENT_PRIVILEGE:
                            raise
                        locked = None  # installed but not readable by this role: probe by NOWAIT
                if locked is None:
                    locked = _locked_by_nowait(c, table, [1, 2, 3])
        finally:
            for conn in (a, b, c):
                conn.close()
    return {"offset_returned": row[0] if row else None, "skip_locked_got": got[0] if got else None,
            "locked_rows": locked, "method": method, "plan": plan}


def _pgrowlocks(c: psycopg.Connection, table: sql.Identifier, extension: str, pid: int) -> list[int]:
    """The ids of ``table``'s rows backend ``pid`` holds locked, by ``pgrowlocks`` in schema ``extension``."""
    return [r[0] for r in c.execute(sql.SQL(
        "SELECT t.id FROM {table} t JOIN {fn}(%s) l ON l.locked_row = t.ctid "
        "WHERE %s = ANY(l.pids) ORDER BY t.id").format(
            table=table, fn=sql.Identifier(extension, "pgrowlocks")),
        (table.as_string(c), pid)).fetchall()]



def subselect_overclaim_probe(dsn: str, schema: str, rows: int = 11, limit: int = 2) -> dict:
    """Experiment 13 (FR-03) on ``rows`` pending rows with the ``partial`` index, :data:`FR03_SETTINGS` off, all
    rolled back: the sub-select form of the tool's claim, then the tool's claim, both ``LIMIT limit``. Returns
    ``{"limit", "subselect_rows", "tool_claim_rows", "plan", "tool_plan"}``. Raises ConfigError (``SCHEMA``,
    ``DSN``), ValueError (``rows`` or ``limit`` < 1) and ``psycopg.Error``."""
    if rows < 1 or limit < 1:
        raise ValueError(f"rows and limit must be >= 1, got rows={rows!r}, limit={limit!r}")
    with scratch_table(dsn, schema, "subselect", rows=rows) as (admin, table, name):
        admin.execute(sql.SQL(_CLAIM_ORDER_INDEX).format(index=sql.Identifier(f"{name}_claim_order"), table=table))
        admin.execute(sql.SQL("ANALYZE {}").format(table))
        conn = _session(dsn, "subselect")
        try:
            params = {"batch": int(limit), "worker": "probe", "lease_s": 60.0}
            claim = policies.claim_sql(schema, "skip_locked", table=name, token_seq=f"{name}_seq")
            naive = sql.SQL(policies.naive_subselect_claim(claim.as_string(conn)))
            with conn.transaction(force_rollback=True):
                for name in FR03_SETTINGS:
                    conn.execute(sql.SQL("SET LOCAL {} = off").format(sql.Identifier(name)))
                plan = _explain(conn, naive, params)
                with conn.transaction(force_rollback=True):
                    subselect_rows = conn.execute(naive, params).rowcount
                tool_plan = _explain(conn, claim, params)
                tool_rows = len(conn.execute(claim, params).fetchall())
        finally:
            conn.close()
    return {"limit": int(limit), "subselect_rows": subselect_rows, "tool_claim_rows": tool_rows,
            "plan": plan, "tool_plan": tool_plan}
