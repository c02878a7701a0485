"""Probes of what PostgreSQL's locking reads really do, for the experiments catalogue: each runs on
a throwaway table of its own inside the tool's schema, created and dropped by the probe, and
returns what it measured there (never what the documentation says it should be).

:func:`offset_lock_probe` (experiment 4): does ``OFFSET`` in a locking read lock the rows it skips?
In PostgreSQL's plan the ``Limit`` node sits *above* ``LockRows`` (``Limit -> LockRows -> Index
Scan``): ``LockRows`` locks every row it hands up, and ``Limit`` discards the first ``OFFSET`` of
them, so the skipped rows are locked too. The SELECT page says so: "rows skipped over by OFFSET
will get locked" (https://www.postgresql.org/docs/current/sql-select.html#SQL-FOR-UPDATE-SHARE).
The probe measures it with three sessions, and returns the plan beside the facts.

:func:`subselect_overclaim_probe` (experiment 13, field case FR-03): the sub-select form of the
claim (``UPDATE … WHERE id IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)``) under a forced nested
loop against the tool's own claim (:func:`bench.engines.postgres.policies.claim_sql`).

The schema: the tool's (:data:`bench.engines.postgres.db.SCHEMA_MARK`), locked for the probe as a
run locks it (a run in progress refuses the probe, ConfigError ``SCHEMA``); when absent it is
created, marked, for the probe and dropped after it. A schema someone else made is refused
(ConfigError ``SCHEMA``). Nothing outside the schema is created: in particular no extension
(``pgrowlocks`` is read only where it is installed already).
"""

from __future__ import annotations

import contextlib
import secrets
from typing import Iterator

import psycopg
from psycopg import sql

from bench.engines.postgres import db, policies

#: Planner settings of field case FR-03 (set on the probe's own transaction only, ``SET LOCAL``):
#: with hash and merge joins (and material, sort, hashagg) off, the sub-select claim becomes a
#: Nested Loop Semi Join that re-runs its locking sub-select for every outer row.
FR03_SETTINGS = ("enable_hashjoin", "enable_mergejoin", "enable_material", "enable_sort", "enable_hashagg")
#: Each probe session's ``lock_timeout`` and ``statement_timeout``: none of its statements waits
#: (NOWAIT, SKIP LOCKED), so this bound is a safety net that is never reached when they do not.
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
    conn.execute(f"SET lock_timeout = {PROBE_TIMEOUT_MS}")
    conn.execute(f"SET statement_timeout = {PROBE_TIMEOUT_MS}")
    return conn


@contextlib.contextmanager
def scratch_table(dsn: str, schema: str, kind: str, rows: int) -> Iterator[tuple[psycopg.Connection, sql.Identifier, str]]:
    """A committed table ``<schema>.qbench_probe_<kind>_<hex>`` with ``rows`` pending rows (ids
    1..rows, in claim order), and a sequence ``<name>_seq`` for a claim's tokens; yields (the
    admin connection, the table, its name inside the schema). Both are dropped
    when the block ends, however it ends; so is the schema when this created it. Raises
    ConfigError (``SCHEMA``) for a schema that is not the tool's or that a run holds, ``DSN``
    when it cannot connect."""
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
    """The ``ids`` that ``SELECT … FOR UPDATE NOWAIT`` on ``conn`` cannot lock (SQLSTATE 55P03); each
    probe's lock is released at once (its own transaction, rolled back)."""
    locked = []
    for job_id in ids:
        try:
            with conn.transaction(force_rollback=True):
                conn.execute(sql.SQL("SELECT id FROM {} WHERE id = %s FOR UPDATE NOWAIT").format(table), (job_id,))
        except psycopg.errors.LockNotAvailable:
            locked.append(job_id)
    return locked


def offset_lock_probe(dsn: str, schema: str) -> dict:
    """Experiment 4 on a scratch table of ids 1, 2, 3 (:func:`scratch_table`), three sessions:

    A, in an open transaction: ``SELECT id … ORDER BY id OFFSET 1 LIMIT 1 FOR UPDATE``;
    B, while A holds it: the SKIP LOCKED claim ``SELECT id … ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED``
    (rolled back at once); C, while A holds it and B is gone: which rows A holds, read from
    ``pgrowlocks`` (rows whose lockers include A's backend) where that extension is installed in
    the database, else by trying ``FOR UPDATE NOWAIT`` on each row (55P03: locked).

    Returns ``{"offset_returned": int | None, "skip_locked_got": int | None, "locked_rows":
    [ids], "method": "pgrowlocks" | "nowait probe", "plan": A's EXPLAIN}``, every value as
    measured. Raises ConfigError (``SCHEMA``, ``DSN``) and ``psycopg.Error``."""
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
                        locked = [r[0] for r in c.execute(sql.SQL(
                            "SELECT t.id FROM {table} t JOIN {fn}(%s) l ON l.locked_row = t.ctid "
                            "WHERE %s = ANY(l.pids) ORDER BY t.id").format(
                                table=table, fn=sql.Identifier(extension, "pgrowlocks")),
                            (table.as_string(c), a.info.backend_pid)).fetchall()]
                        method = "pgrowlocks"
                    except psycopg.errors.InsufficientPrivilege:
                        locked = None  # installed but not readable by this role: probe by NOWAIT
                if locked is None:
                    locked = _locked_by_nowait(c, table, [1, 2, 3])
        finally:
            for conn in (a, b, c):
                conn.close()
    return {"offset_returned": row[0] if row else None, "skip_locked_got": got[0] if got else None,
            "locked_rows": locked, "method": method, "plan": plan}


def subselect_overclaim_probe(dsn: str, schema: str, rows: int = 11, limit: int = 2) -> dict:
    """Experiment 13 (FR-03) on a scratch table of ``rows`` pending rows (:func:`scratch_table`), in
    one transaction of its own that is rolled back, with :data:`FR03_SETTINGS` off (``SET LOCAL``:
    this transaction only), and the tool's default index variant (``partial``: claim order over the
    pending rows, bench/data/schemas/postgres/index_partial.sql): the sub-select form of the tool's claim
    (:func:`bench.engines.postgres.policies.naive_subselect_claim` of
    :func:`~bench.engines.postgres.policies.claim_sql`, ``LIMIT limit``) runs in a savepoint that
    is rolled back, then the tool's own claim (``claim_sql``, batch ``limit``) on the same rows.

    Returns ``{"limit", "subselect_rows" (rows the sub-select form updated), "tool_claim_rows"
    (rows the tool's claim returned), "plan" (the sub-select form's EXPLAIN), "tool_plan"}``.
    Raises ConfigError (``SCHEMA``, ``DSN``), ValueError for ``rows`` or ``limit`` below 1, and
    ``psycopg.Error``."""
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
