"""The bytes of full-page images in the WAL of each measured second, read after the load from the WAL itself
with ``pg_walinspect`` (https://www.postgresql.org/docs/current/pgwalinspect.html; docs/results.md,
"Cost per job")."""

from __future__ import annotations

import psycopg
from psycopg import sql

from bench.engines.postgres.db import not_shipped
from bench.engines.postgres.error_kinds import first_line

_RECORDS = """
SELECT width_bucket(pg_wal_lsn_diff(start_lsn, '0/0'), %(bounds)s::numeric[]), sum(fpi_length)::bigint
FROM {}.pg_get_wal_records_info(%(first)s::pg_lsn, %(last)s::pg_lsn)
GROUP BY 1"""


def _lsn(position: int) -> str:
    return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


def image_bytes(conn: psycopg.Connection, bounds: list[int]) -> list[int] | str:
    """Full-page image bytes of the WAL records that start between successive ``bounds`` (WAL positions in
    bytes, ascending: n + 1 bounds give n figures); a one-line reason instead when they cannot be read
    (pg_walinspect not shipped by this server's build or not created in this database, the WAL already recycled,
    too few privileges)."""
    schema = conn.execute("SELECT extnamespace::regnamespace::text FROM pg_extension "
                          "WHERE extname = 'pg_walinspect'").fetchone()
    if schema is None:
        return not_shipped(conn, "pg_walinspect") or (
            "pg_walinspect is not created in this database (CREATE EXTENSION pg_walinspect; queue-bench "
            "creates nothing outside its schema)")
    try:
        rows = conn.execute(sql.SQL(_RECORDS).format(sql.SQL(schema[0])),
                            {"bounds": bounds, "first": _lsn(bounds[0]), "last": _lsn(bounds[-1])}).fetchall()
    except psycopg.Error as err:
        return f"pg_walinspect could not read the window's WAL: {first_line(err)}"
    found = dict(rows)
    return [int(found.get(i) or 0) for i in range(1, len(bounds))]
