"""MariaDB 10.6+'s audit SQL and steps for :func:`bench.engines.audit_flow.run_audit`, the log loaded by multi-row
``INSERT`` into temporary tables, at ``READ COMMITTED`` (docs/architecture.md, "The audit")."""

from __future__ import annotations

import itertools
import math
from typing import Iterable

from bench.engines import audit_flow
from bench.engines.mariadb.adapter import DRIVER, execute
from bench.engines.mariadb.policies import ident, literal
from bench.measure.claimlog import EVENT_COLUMNS, EVENT_KINDS, ClaimLog

#: Events per multi-row INSERT when the log is loaded (about 60 bytes each: ~300 kB a statement,
#: far below the default ``max_allowed_packet`` of 16 MB).
INSERT_ROWS = 5000

#: The audit's temporary tables (session-private, dropped when the audit ends), in the tool's database.
_TABLES = {"events": "qbench_audit_events", "claims": "qbench_audit_claims", "applied": "qbench_audit_applied",
           "missing": "qbench_audit_missing"}

# ``seq`` is the event's position in the log (1, 2, …), given by the loader, not by AUTO_INCREMENT.
_CREATE_EVENTS = """\
CREATE TEMPORARY TABLE {events} (
    seq BIGINT NOT NULL PRIMARY KEY, kind CHAR(1) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    id BIGINT NOT NULL, token BIGINT, claimed_at DOUBLE, lease_until DOUBLE,
    KEY by_kind (kind, id, seq)
) ENGINE = InnoDB"""

# One row per claimed job: its committed claims, and those made while the previous claim
# was unfinished in the log (no completion or failure of its token before) under a live lease.
_CREATE_CLAIMS = """\
CREATE TEMPORARY TABLE {claims} (PRIMARY KEY (id)) ENGINE = InnoDB AS
SELECT c.id, COUNT(*) AS claims,
       CAST(COALESCE(SUM(CASE WHEN c.prev_lease_until > c.claimed_at AND (e.seq IS NULL OR e.seq > c.seq)
                              THEN 1 ELSE 0 END), 0) AS SIGNED) AS overlapping
FROM (SELECT id, seq, claimed_at, LAG(token) OVER w AS prev_token, LAG(lease_until) OVER w AS prev_lease_until
      FROM {events} WHERE kind = 'c'
      WINDOW w AS (PARTITION BY id ORDER BY seq)) AS c
LEFT JOIN (SELECT id, token, MIN(seq) AS seq FROM {events} WHERE kind IN ('a', 's', 'f') GROUP BY id, token) AS e
       ON e.id = c.id AND e.token = c.prev_token
GROUP BY c.id"""

# One row per applied completion: how many rows of its job the table holds, whether one of
# them carries the completion's token as its current attempt, and whether one is done.
_CREATE_APPLIED = """\
CREATE TEMPORARY TABLE {applied} (PRIMARY KEY (seq), KEY by_id (id)) ENGINE = InnoDB AS
SELECT a.seq, a.id, COUNT(j.id) AS n_rows, COALESCE(MAX(j.attempt_token = a.token), 0) AS is_current,
       COALESCE(MAX(j.status = 'done'), 0) AS is_done
FROM {events} a LEFT JOIN {jobs} j ON j.id = a.id
WHERE a.kind = 'a'
GROUP BY a.seq, a.id"""

# The expected ids absent from the table: seeded ones (the sequence table, when there are any)
# and produced ones outside the seeded range (which the first statement already covers).
_CREATE_MISSING = "CREATE TEMPORARY TABLE {missing} (id BIGINT NOT NULL PRIMARY KEY) ENGINE = InnoDB"
_MISSING_SEEDED = """\
INSERT INTO {missing} (id)
SELECT s.seq FROM {seq} s WHERE NOT EXISTS (SELECT 1 FROM {jobs} j WHERE j.id = s.seq)"""
_MISSING_PRODUCED = """\
INSERT INTO {missing} (id)
SELECT DISTINCT p.id FROM {events} p
WHERE p.kind = 'p' AND p.id NOT BETWEEN 1 AND {seeded} AND NOT EXISTS (SELECT 1 FROM {jobs} j WHERE j.id = p.id)"""

# expected, missing, not durable, not durable and not already missing, duplicated.
_ROW_CHECKS = """\
SELECT {seeded} + (SELECT COUNT(DISTINCT id) FROM {events} WHERE kind = 'p' AND id NOT BETWEEN 1 AND {seeded}),
       (SELECT COUNT(*) FROM {missing}),
       (SELECT COUNT(DISTINCT id) FROM {applied} WHERE NOT is_done),
       (SELECT COUNT(DISTINCT a.id) FROM {applied} a
        WHERE NOT a.is_done AND NOT EXISTS (SELECT 1 FROM {missing} m WHERE m.id = a.id)),
       (SELECT COUNT(*) FROM (SELECT id FROM {jobs} GROUP BY id HAVING COUNT(*) > 1) AS dup)"""

# (compared jobs, jobs started out of claim order): see the PostgreSQL audit's ``_FIFO``.
_FIFO = """\
WITH first_claims AS (
    SELECT id, MIN(claimed_at) AS claimed_at FROM {events} WHERE kind = 'c' GROUP BY id
), ordered AS (
    SELECT f.claimed_at, MAX(f.claimed_at) OVER (ORDER BY j.priority, j.run_at, j.id
                                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS ahead_claimed_at
    FROM first_claims f JOIN {jobs} j ON j.id = f.id
    WHERE UNIX_TIMESTAMP(GREATEST(j.run_at, j.created_at)) <= (SELECT MIN(claimed_at) FROM first_claims)
)
SELECT COUNT(*), COALESCE(SUM(CASE WHEN claimed_at < ahead_claimed_at THEN 1 ELSE 0 END), 0) FROM ordered"""

def _sql_value(value) -> str:
    """One event field as a MariaDB literal: NULL, an integer, or a float as an approximate-value
    literal (``…e0``: a DOUBLE parsed by the server's correctly rounded ``strtod``, so it reads
    back as the float written; without the exponent ``1.5`` would be an exact DECIMAL)."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"claim log: a time that is not a finite number ({value!r})")
        text = repr(value)
        return text if "e" in text else text + "e0"
    return str(int(value))


def _event_values(seq: int, event: tuple) -> str:
    kind, job_id, token, claimed_at, lease_until = event
    if kind not in EVENT_KINDS:
        raise ValueError(f"claim log: unknown event kind {kind!r}; allowed: {', '.join(EVENT_KINDS)}")
    return (f"({seq},{literal(kind)},{_sql_value(job_id)},{_sql_value(token)},{_sql_value(claimed_at)},"
            f"{_sql_value(lease_until)})")


def load_events(conn, table: str, events: Iterable[tuple]) -> int:
    """INSERT ``events`` (tuples of :data:`bench.measure.claimlog.EVENT_COLUMNS`, in log order)
    into the temporary events table ``table`` (quoted), :data:`INSERT_ROWS` per statement, with
    ``seq`` = 1, 2, … in that order; return how many. Raises ValueError for an unknown kind or
    a time that is not finite, PyMySQL's errors for the INSERT."""
    columns = ", ".join(("seq", *EVENT_COLUMNS))
    numbered = enumerate(events, start=1)
    loaded = 0
    while batch := list(itertools.islice(numbered, INSERT_ROWS)):
        execute(conn, f"INSERT INTO {table} ({columns}) VALUES " + ",".join(_event_values(s, e) for s, e in batch))
        loaded += len(batch)
    return loaded


class _Steps(audit_flow.AuditSteps):
    driver, create_claims, create_applied, fifo = DRIVER, _CREATE_CLAIMS, _CREATE_APPLIED, _FIFO

    def begin(self, conn) -> None:
        self.cleanup(conn)  # left behind by an audit that died on this connection
        execute(conn, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        execute(conn, "START TRANSACTION")

    def load_events(self, conn, log: ClaimLog) -> int:
        execute(conn, self.sql(_CREATE_EVENTS))
        return load_events(conn, self.names["events"], log.rows())

    def row_checks(self, conn) -> dict[str, int]:
        execute(conn, self.sql(_CREATE_MISSING))
        if int(self.names["seeded"]) >= 1:
            execute(conn, self.sql(_MISSING_SEEDED))
        execute(conn, self.sql(_MISSING_PRODUCED))
        counts = self.row(conn, _ROW_CHECKS, "expected missing not_durable not_durable_present duplicated")
        counts["lost"] = counts["missing"] + counts.pop("not_durable_present")
        return counts

    def cleanup(self, conn) -> None:
        execute(conn, "DROP TEMPORARY TABLE IF EXISTS " + ", ".join(self.names[k] for k in _TABLES))


def run_audit(conn, schema: str, log: ClaimLog, *, seeded_rows: int, over_claims: int,
              poison_share: float = 0.0, effects: str = "none") -> dict:
    """:func:`bench.engines.audit_flow.run_audit` of ``log`` on ``schema``'s ``jobs`` table. ``conn``: a
    connection of :func:`bench.engines.mariadb.db.connect` (autocommit, UTC) with no transaction open;
    ``seeded_rows``: the ids ``1..seeded_rows`` :func:`bench.engines.mariadb.db.prepare` created; ``effects``: the
    run's ``EFFECTS``. Raises
    ValueError for a negative ``seeded_rows`` or an event the log could not have written, and PyMySQL's errors
    (1690: docs/architecture.md, "The audit"); the temporary tables are dropped either way (when the
    connection still answers)."""
    seeded = int(seeded_rows)
    if seeded < 0:
        raise ValueError(f"seeded_rows must be >= 0, got {seeded_rows!r}")
    names = {key: ident(schema, table) for key, table in _TABLES.items()}
    names.update(jobs=ident(schema, "jobs"), rows=ident(schema, "jobs"), seeded=str(seeded),
                 seq=ident(schema, f"seq_1_to_{seeded}"), effects=ident(schema, "effects"),
                 effect_rows=f"(SELECT id, attempt_token AS token, status = 'done' AS done FROM {ident(schema, 'jobs')})")
    return audit_flow.run_audit(_Steps(names), conn, log, builtin=True, over_claims=over_claims,
                                poison_share=poison_share, effects=effects)


def completed_per_queue(conn, schema: str, names: list[str], start_unix: float, end_unix: float) -> dict[str, int]:
    """:func:`bench.engines.audit_flow.completed_per_queue` of ``jobs`` by ``finished_at`` (the server's
    ``UNIX_TIMESTAMP(NOW(6))``, µs; every session of the tool is in UTC)."""
    return audit_flow.completed_per_queue(
        DRIVER, conn, "SELECT UNIX_TIMESTAMP(NOW(6))",
        f"SELECT queue, COUNT(*) FROM {ident(schema, 'jobs')} WHERE status = 'done' "
        f"AND finished_at >= FROM_UNIXTIME(%s) AND finished_at < FROM_UNIXTIME(%s) GROUP BY queue",
        names, (start_unix, end_unix), digits=6)
