"""End-of-run audit on MariaDB: the queue's invariants, checked on the database against the
client's claim log (:class:`bench.measure.claimlog.ClaimLog`). Same invariants, same
definitions and same result as :func:`bench.engines.postgres.audit.run_audit`; only the SQL
dialect differs.

The log's events (:meth:`bench.measure.claimlog.ClaimLog.rows`) are loaded into a
``CREATE TEMPORARY TABLE`` of the audit's own connection with multi-row ``INSERT``
statements of :data:`INSERT_ROWS` events each (no ``LOAD DATA LOCAL INFILE``, which the
client and the server would both have to allow), and every check is one SQL statement over
that table, three more temporary tables derived from it and the tool's ``jobs`` table. A
temporary table is private to its connection and lives in the tool's database, where it
would hide a real table of the same name (https://mariadb.com/kb/en/create-table/#create-temporary-table);
the audit drops its tables when it ends, on success and on error. Creating and dropping a
temporary table does not commit the open transaction
(https://mariadb.com/kb/en/sql-statements-that-cause-an-implicit-commit/). A query may name
the same temporary table more than once since MariaDB 10.2.2 (MDEV-5535); MySQL still refuses
that (error 1137), one reason this module is for MariaDB only.

The whole audit is one transaction at ``READ COMMITTED`` (``SET TRANSACTION`` for the next
transaction only: https://mariadb.com/kb/en/set-transaction/), as PostgreSQL's audit is: each
statement reads the latest committed rows. At the session's default ``REPEATABLE READ``,
InnoDB would read the source rows of ``INSERT … SELECT`` and ``CREATE TABLE … SELECT`` with
shared next-key locks, so the audit could wait on (or block) a session still holding rows; at
``READ COMMITTED`` those reads are consistent non-locking reads
(https://mariadb.com/kb/en/innodb-lock-modes/; both seen in
``tests/test_mariadb_audit.py::test_the_audit_reads_past_rows_a_session_holds``).

Dialect (MariaDB 10.6+): ``LAG`` and ``ROW_NUMBER`` window functions
(https://mariadb.com/kb/en/lag/, https://mariadb.com/kb/en/row_number/) replace ``DISTINCT ON``;
``SUM(CASE …)`` replaces ``FILTER``; ``MAX`` of a comparison (0, 1 or NULL) replaces ``bool_or``;
the claim times of ``retry_gaps`` are fetched as rows (no ``array_agg``; ``GROUP_CONCAT`` would
be cut at ``group_concat_max_len``); the seeded ids ``1..seeded_rows`` come from the
``SEQUENCE`` engine's virtual table ``seq_1_to_N`` (https://mariadb.com/kb/en/sequence-storage-engine/),
read only when ``seeded_rows >= 1``: ``seq_1_to_0`` is not empty but counts down, 1 then 0.

Invariants (all must be 0; see :mod:`bench.engines.postgres.audit` for the full definitions):

``double_claims``
    per job, the larger of two lower bounds on its illegitimate claims, summed over jobs:
    claims made while the job's previous claim was unfinished in the log under a lease that
    had not expired (database time) at the new claim; and claims beyond the row's ``attempts``.
``lost_jobs``
    jobs missing (distinct ids): an expected id (``1..seeded_rows`` and every produced id)
    absent from ``jobs``, or a job whose completion the database acknowledged that is not
    ``done`` there; a job counts once.
``duplicated_jobs``
    job ids present more than once in ``jobs``. On MariaDB the layout is always ``same`` and
    ``jobs.id`` is the primary key, so this is 0 unless the table itself is broken; it is
    computed all the same, by the same query as on PostgreSQL.
``over_claims``
    claims that returned more than the batch size (counted by the recorder).
``stale_completions_applied``
    applied completions whose token the job's row does not carry as its current attempt token.
``double_completions``
    jobs whose completion the database applied more than once.

``redeliveries`` (not an invariant) counts claims of a job beyond its first.

``fifo_out_of_order_share`` (not an invariant) is the share of the compared jobs whose first
claim came before the first claim of a job ahead of them in claim order (``priority, run_at,
id``), by a window ``MAX`` over claim order (https://mariadb.com/kb/en/window-frames/), as on
PostgreSQL (where the full definition is). Here ``claimed_at`` is the claim's ``UPDATE``
statement's ``NOW(6)`` (one instant for every row of the claim, microseconds), so equal times
(the rows of one batch, or claims within one microsecond) do not count.

The poison-job details select the poison jobs with :func:`bench.workload.jobs.poison_sql`, an
integer threshold, as the PostgreSQL audit does. The earlier form, the share as a decimal literal,
runs on MariaDB but multiplies that literal exactly, and for a share on a multiple of 2^-32 (e.g.
0.06423439900390804) it names one job more than :func:`bench.workload.jobs.is_poison`, on
PostgreSQL too (``tests/test_mariadb_audit.py`` shows both). ``id * 2654435761`` is a signed
BIGINT product on both engines, exact up to ``id`` = 3,474,701,543 (2^63 / 2654435761); past it
MariaDB raises error 1690 (``BIGINT value is out of range``, PostgreSQL 22003) instead of giving
a wrong count.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from typing import Iterable

import pymysql

from bench.engines.mariadb.db import execute, query
from bench.engines.mariadb.policies import ident, literal
from bench.engines.common import CLAIM_CHECKS, audit_result
from bench.measure.claimlog import EVENT_COLUMNS, EVENT_KINDS, ClaimLog
from bench.workload.jobs import poison_sql

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

_COMPLETION_CHECKS = """\
SELECT COUNT(*), COALESCE(SUM(CASE WHEN n_rows > 0 AND NOT is_current THEN 1 ELSE 0 END), 0),
       (SELECT COUNT(*) FROM (SELECT id FROM {applied} GROUP BY id HAVING COUNT(*) > 1) AS twice)
FROM {applied}"""

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

# Claim times (database epoch s) of each job that failed at least once, from the failed
# attempt's claim (when it was the job's latest claim at the failure) onwards, in log order;
# jobs in the order of their first failure (rows of (first failure's seq, claimed_at)).
_RETRY_CLAIMS = """\
WITH rc_first_fail AS (
    SELECT id, seq, token
    FROM (SELECT id, seq, token, ROW_NUMBER() OVER (PARTITION BY id ORDER BY seq) AS n
          FROM {events} WHERE kind = 'f') AS f
    WHERE n = 1
), rc_claims AS (
    SELECT c.id, c.seq, c.token, c.claimed_at FROM {events} c JOIN rc_first_fail f ON f.id = c.id WHERE c.kind = 'c'
), rc_last_before AS (
    SELECT id, seq, token
    FROM (SELECT c.id, c.seq, c.token, ROW_NUMBER() OVER (PARTITION BY c.id ORDER BY c.seq DESC) AS n
          FROM rc_claims c JOIN rc_first_fail f ON f.id = c.id AND c.seq < f.seq) AS l
    WHERE n = 1
), rc_start AS (
    SELECT f.id, f.seq AS fail_seq, CASE WHEN l.token = f.token THEN l.seq ELSE f.seq END AS from_seq
    FROM rc_first_fail f LEFT JOIN rc_last_before l ON l.id = f.id
)
SELECT s.fail_seq, c.claimed_at
FROM rc_start s JOIN rc_claims c ON c.id = s.id AND c.seq >= s.from_seq
ORDER BY s.fail_seq, c.seq"""

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

_POISON = """\
SELECT COUNT(*), COALESCE(SUM(CASE WHEN status = 'done' THEN 1 ELSE 0 END), 0),
       COALESCE(SUM(CASE WHEN status = 'dead' THEN 1 ELSE 0 END), 0),
       MIN(CASE WHEN status = 'dead' THEN attempts END), MAX(CASE WHEN status = 'dead' THEN attempts END)
FROM {jobs} WHERE """


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


def _status_counts(conn, jobs: str) -> dict[str, int]:
    return {str(status): int(n) for status, n in query(conn, f"SELECT status, COUNT(*) FROM {jobs} GROUP BY status")}


def _drop_tables(conn, names: dict[str, str]) -> None:
    execute(conn, "DROP TEMPORARY TABLE IF EXISTS " + ", ".join(names[k] for k in _TABLES))


def run_audit(conn, schema: str, log: ClaimLog, *, seeded_rows: int, over_claims: int,
              poison_share: float = 0.0) -> dict:
    """Check the invariants against the events of ``log``.

    ``conn`` is a connection of :func:`bench.engines.mariadb.db.connect` (autocommit, UTC) with
    no transaction open; ``schema`` the tool's database, whose ``jobs`` table is audited.
    ``seeded_rows`` is the number of rows :func:`bench.engines.mariadb.db.prepare` created
    (history + backlog: ids ``1..seeded_rows``); ``over_claims`` the recorder's count of
    claims that returned more than the batch; ``poison_share`` (0..1) the run's
    ``POISON_SHARE``: when above 0 the details say how the poison jobs ended.

    Returns ``{"invariants": {...}, "status_counts": {...}, "details": {...},
    "redeliveries": int, "retry_gaps": list | None, "fifo_out_of_order_share": float | None}``, the shape of
    :func:`bench.engines.postgres.audit.run_audit`: ``invariants`` maps every name of
    :data:`INVARIANTS` to an int; ``status_counts`` status -> rows; ``details`` the counts
    ``rows_expected``, ``rows_present``, ``rows_missing``, ``rows_duplicated``,
    ``jobs_claimed_distinct``, ``jobs_claimed_more_than_once``, ``claims_under_live_lease``,
    ``claims_beyond_attempts``, ``completions_applied``, ``double_completions``,
    ``completions_not_durable``, ``claim_log_events``, ``fifo_jobs_compared``, ``fifo_jobs_out_of_order`` and, with a poison share,
    ``poison_jobs``, ``poison_done``, ``poison_dead``, ``poison_dead_attempts_min`` and
    ``_max`` (None when no poison job is dead); ``retry_gaps`` lists, per job that failed at
    least once and was claimed again, the seconds (database time, 6 decimals) between its
    successive claims, or is None when no job failed.

    Raises ValueError for a negative ``seeded_rows`` or an event the log could not have
    written, and PyMySQL's errors (``pymysql.err.MySQLError``: e.g. ``ProgrammingError`` 1146
    when ``jobs`` is absent, ``OperationalError`` 1690 for a poison check on an id past
    3,474,701,543, 2013 when the connection drops) when the database cannot be read; the temporary
    tables are dropped either way (when the connection still answers).
    """
    seeded = int(seeded_rows)
    if seeded < 0:
        raise ValueError(f"seeded_rows must be >= 0, got {seeded_rows!r}")
    names = {key: ident(schema, table) for key, table in _TABLES.items()}
    names.update(jobs=ident(schema, "jobs"), seeded=str(seeded))
    _drop_tables(conn, names)  # left behind by an audit that died on this connection
    execute(conn, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
    execute(conn, "START TRANSACTION")
    try:
        counts = _counts(conn, schema, names, log, seeded)
        counts["retry_gaps"] = _retry_gaps(conn, names)
        counts["poison"] = _poison(conn, names, poison_share)
        execute(conn, "COMMIT")
    except BaseException:
        # a gone connection took its temporary tables with it; the first error is the one to see
        with contextlib.suppress(pymysql.err.MySQLError, OSError):
            execute(conn, "ROLLBACK")
            _drop_tables(conn, names)
        raise
    _drop_tables(conn, names)
    return audit_result(over_claims=over_claims, **counts)


def _row(conn, template: str, names: dict[str, str], keys: str) -> dict[str, int]:
    """The one row of ``template`` (formatted with ``names``) as ints, named by ``keys`` (space-separated)."""
    return dict(zip(keys.split(), map(int, query(conn, template.format(**names))[0])))


def _counts(conn, schema: str, names: dict[str, str], log: ClaimLog, seeded: int) -> dict:
    """The log loaded and every count of :func:`bench.engines.common.audit_result` but the retry gaps,
    the poison jobs and ``over_claims``, inside the audit's transaction."""
    execute(conn, _CREATE_EVENTS.format(**names))
    events = load_events(conn, names["events"], log.rows())
    status_counts = _status_counts(conn, names["jobs"])
    execute(conn, _CREATE_CLAIMS.format(**names))
    counts = _row(conn, CLAIM_CHECKS, names, "claimed_distinct claimed_more_than_once redeliveries overlapping "
                                             "attempts_short double_claims")
    execute(conn, _CREATE_APPLIED.format(**names))
    counts |= _row(conn, _COMPLETION_CHECKS, names, "applied stale_applied double_completions")
    execute(conn, _CREATE_MISSING.format(**names))
    if seeded >= 1:
        execute(conn, _MISSING_SEEDED.format(seq=ident(schema, f"seq_1_to_{seeded}"), **names))
    execute(conn, _MISSING_PRODUCED.format(**names))
    counts |= _row(conn, _ROW_CHECKS, names, "expected missing not_durable not_durable_present duplicated")
    counts["lost"] = counts["missing"] + counts.pop("not_durable_present")
    counts |= _row(conn, _FIFO, names, "fifo_compared fifo_out_of_order")
    return {"status_counts": status_counts, "events": events, **counts}


def _retry_gaps(conn, names: dict[str, str]) -> list[list[float]] | None:
    """Per job that failed at least once and was claimed again, the seconds between its successive claims
    (database time, 6 decimals); None when no job failed."""
    if not query(conn, "SELECT EXISTS (SELECT 1 FROM {events} WHERE kind = 'f')".format(**names))[0][0]:
        return None
    gaps = []
    for _, claims in itertools.groupby(query(conn, _RETRY_CLAIMS.format(**names)), key=lambda r: r[0]):
        times = [float(r[1]) for r in claims]
        if len(times) > 1:
            gaps.append([round(b - a, 6) for a, b in zip(times, times[1:])])
    return gaps


def _poison(conn, names: dict[str, str], poison_share: float) -> dict:
    """How the poison jobs ended (the ``poison_*`` details), or ``{}`` when ``poison_share`` is 0."""
    if not poison_share > 0:
        return {}
    row = query(conn, _POISON.format(**names) + poison_sql(float(poison_share)))[0]
    return {"poison_jobs": int(row[0]), "poison_done": int(row[1]), "poison_dead": int(row[2]),
            "poison_dead_attempts_min": None if row[3] is None else int(row[3]),
            "poison_dead_attempts_max": None if row[4] is None else int(row[4])}


def completed_per_queue(conn, schema: str, names: list[str], start_unix: float, end_unix: float) -> dict[str, int]:
    """Jobs of each queue in ``names`` that reached ``done`` in the measured window by ``finished_at``
    (``{name: count}``, 0 for none): one scan after the load. The window's client epoch seconds are
    moved to the server's clock by the offset read here (``UNIX_TIMESTAMP(NOW(6))`` against the middle
    of the client's round trip); every session of the tool is in UTC."""
    before = time.time()
    server_now = float(query(conn, "SELECT UNIX_TIMESTAMP(NOW(6))")[0][0])
    offset = server_now - (before + time.time()) / 2
    rows = query(conn, f"SELECT queue, COUNT(*) FROM {ident(schema, 'jobs')} WHERE status = 'done' "
                       f"AND finished_at >= FROM_UNIXTIME(%s) AND finished_at < FROM_UNIXTIME(%s) GROUP BY queue",
                 (round(start_unix + offset, 6), round(end_unix + offset, 6)))
    counts = {str(name): int(n) for name, n in rows}
    return {name: counts.get(name, 0) for name in names}
