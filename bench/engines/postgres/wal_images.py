"""The bytes of full-page images in the WAL, counted as the monitor samples: ``pg_walinspect``'s
``pg_get_wal_stats`` over the WAL flushed since the previous sample (https://www.postgresql.org/docs/current/pgwalinspect.html;
docs/results.md, "Cost per job"). Read while the load runs: a checkpoint may remove the WAL before its redo
point at once, so the window's WAL cannot be read back after the load."""

from __future__ import annotations

import psycopg
from psycopg import sql

from bench.engines.postgres.db import not_shipped

_SINCE = """
SELECT f::text, CASE WHEN %(since)s::pg_lsn IS NULL OR f <= %(since)s::pg_lsn THEN 0
                     ELSE (SELECT coalesce(sum(fpi_size), 0)::bigint FROM {}.pg_get_wal_stats(%(since)s::pg_lsn, f)) END
FROM pg_current_wal_flush_lsn() AS f"""


class FullPageImages:
    """The running total (bytes) of full-page images in the WAL flushed since the first read; ``note`` says how it
    is read, or why it is not (pg_walinspect not shipped by this server's build, or not created in the database)."""

    def __init__(self, conn: psycopg.Connection):
        schema = conn.execute("SELECT extnamespace::regnamespace::text FROM pg_extension "
                              "WHERE extname = 'pg_walinspect'").fetchone()
        self.query = None if schema is None else sql.SQL(_SINCE).format(sql.SQL(schema[0]))
        self.note = ("pg_walinspect's pg_get_wal_stats over the WAL flushed between the monitor's samples"
                     if schema else not_shipped(conn, "pg_walinspect") or
                     "pg_walinspect is not created in this database (CREATE EXTENSION pg_walinspect; queue-bench "
                     "creates nothing outside its schema)")
        self._since: str | None = None
        self.total: int | None = 0 if schema else None

    def params(self) -> dict:
        """The query's parameters: the flush position of the previous read."""
        return {"since": self._since}

    def advance(self, row: tuple | None) -> int | None:
        """The total after a read that returned ``row`` (flush position, image bytes since the previous one), or
        None from a failed read on: WAL it skipped cannot be counted later."""
        if row is None or self.total is None:
            self.total = None
            return None
        self._since, self.total = row[0], self.total + int(row[1])
        return self.total
