"""End-of-run audit: the queue's invariants, checked on the database against the
client's claim log (:class:`bench.measure.claimlog.ClaimLog`).

The log's events are loaded with ``COPY`` into a ``TEMP`` table of the audit's
own session, dropped when the audit's transaction ends
(https://www.postgresql.org/docs/current/sql-createtable.html, ``ON COMMIT DROP``),
and every check is one SQL statement over that table and the audited relation.
Only committed claims are in the log: in ``TXN=hold`` a claim rolled back by a
crash, a rollback or a killed backend never was one (see :mod:`bench.measure.claimlog`).

Invariants (all must be 0):

``double_claims``
    per job, the larger of two lower bounds on its illegitimate claims, summed
    over jobs: claims made while the job's previous claim was still unfinished
    in the client log under a lease that had not expired (database time) at the
    new claim; and claims beyond the database's ``attempts`` (two claims shared
    one attempt).
``lost_jobs``
    jobs missing (distinct ids): an expected id (seeded ids ``1..seeded_rows``, and
    every id a producer's insert returned) absent from the relation, or a job
    whose completion the database acknowledged that is not ``done`` there. A
    job counts once, however many of its completions were acknowledged.
``duplicated_jobs``
    job ids present more than once in the relation (e.g. a row both in ``jobs``
    and ``jobs_archive`` under the ``jobs_all`` view). Counted apart from
    ``lost_jobs``, so a duplicate never hides a loss.
``over_claims``
    claims that returned more than the batch size (counted by the recorder).
``stale_completions_applied``
    applied completions whose token no row of the job carries as its current
    attempt token.
``double_completions``
    jobs whose completion the database applied more than once.

``redeliveries`` (not an invariant: at-least-once delivery made visible) counts
claims of a job beyond its first.

``fifo_out_of_order_share`` (not an invariant: a property of the claim policy under
contention, not a bug) is the share of the compared jobs whose first committed claim came
*before* the first claim of a job ahead of them in claim order (``priority, run_at, id``):
one window ``max`` of the first claim times over claim order, every row before the job's own.
The times are the claim log's ``claimed_at``: the database's ``clock_timestamp()`` taken once
per claim statement, after its rows are locked (the ``moment`` CTE of
:mod:`bench.engines.postgres.policies`), in microseconds. Equal times do not count (strict
``<``): every row of one batch carries the same instant by construction, and two claims within
one microsecond are not ordered by that clock, so neither is evidence of an inversion.
Compared jobs are those claimed in the run that were already present and eligible
(``greatest(run_at, created_at)``) at the run's first claim: for them a job ahead in claim order
was claimable whenever a job behind it was claimed, so an inversion is the claim policy's
doing. That excludes jobs produced during the run (a later, higher-priority job is "ahead" of
jobs claimed before it existed) and jobs whose ``run_at`` a failed attempt moved past their
first claim (their place in claim order at that claim is no longer in the row). None when no
job qualifies (e.g. a run that started on an empty table). Measured over the whole claim log,
warm-up included, as every figure of the audit.

The audit runs after the swarm has stopped, on its own connection, and reads
only the tool's schema (plus its own temporary table).
"""

from __future__ import annotations

import time

import psycopg
from psycopg import sql

from bench.engines.common import CLAIM_CHECKS, audit_result
from bench.measure.claimlog import EVENT_COLUMNS, ClaimLog
from bench.workload.jobs import poison_sql

#: The audit's temporary tables (session-private, dropped at the end of the audit's transaction).
_EVENTS = sql.Identifier("qbench_audit_events")
_CLAIMS = sql.Identifier("qbench_audit_claims")
_APPLIED = sql.Identifier("qbench_audit_applied")

_CREATE_EVENTS = """\
CREATE TEMP TABLE {events} (
    seq bigint GENERATED ALWAYS AS IDENTITY, kind "char" NOT NULL, id bigint NOT NULL, token bigint,
    claimed_at float8, lease_until float8
) ON COMMIT DROP"""

# One row per claimed job: its committed claims, and those made while the previous claim
# was unfinished in the log (no completion or failure of its token before) under a live lease.
_CREATE_CLAIMS = """\
CREATE TEMP TABLE {claims} ON COMMIT DROP AS
WITH c AS (
    SELECT id, seq, claimed_at, lag(token) OVER w AS prev_token, lag(lease_until) OVER w AS prev_lease_until
    FROM {events} WHERE kind = 'c'
    WINDOW w AS (PARTITION BY id ORDER BY seq)
), ended AS (
    SELECT id, token, min(seq) AS seq FROM {events} WHERE kind IN ('a', 's', 'f') GROUP BY id, token
)
SELECT c.id, count(*) AS claims,
       count(*) FILTER (WHERE c.prev_lease_until > c.claimed_at AND (e.seq IS NULL OR e.seq > c.seq)) AS overlapping
FROM c LEFT JOIN ended e ON e.id = c.id AND e.token = c.prev_token
GROUP BY c.id"""

_CLAIM_CHECKS = CLAIM_CHECKS

# One row per applied completion: how many rows of its job the relation holds, whether one of
# them carries the completion's token as its current attempt, and whether one is done.
_CREATE_APPLIED = """\
CREATE TEMP TABLE {applied} ON COMMIT DROP AS
SELECT a.seq, a.id, count(j.id) AS rows, coalesce(bool_or(j.attempt_token = a.token), false) AS current,
       coalesce(bool_or(j.status = 'done'), false) AS done
FROM {events} a LEFT JOIN {jobs} j ON j.id = a.id
WHERE a.kind = 'a'
GROUP BY a.seq, a.id"""

_COMPLETION_CHECKS = """\
SELECT count(*), count(*) FILTER (WHERE rows > 0 AND NOT current),
       (SELECT count(*) FROM (SELECT id FROM {applied} GROUP BY id HAVING count(*) > 1) AS twice)
FROM {applied}"""

_ROW_CHECKS = """\
WITH expected AS (
    SELECT g AS id FROM generate_series(1, %(seeded)s::bigint) AS g
    UNION SELECT id FROM {events} WHERE kind = 'p'
), missing AS (
    SELECT id FROM expected e WHERE NOT EXISTS (SELECT 1 FROM {jobs} j WHERE j.id = e.id)
), not_durable AS (
    SELECT DISTINCT id FROM {applied} WHERE NOT done
)
SELECT (SELECT count(*) FROM expected), (SELECT count(*) FROM missing), (SELECT count(*) FROM not_durable),
       (SELECT count(*) FROM (SELECT id FROM missing UNION SELECT id FROM not_durable) AS lost),
       (SELECT count(*) FROM (SELECT id FROM {jobs} GROUP BY id HAVING count(*) > 1) AS dup)"""

# Claim times (database epoch s) of each job that failed at least once, from the failed
# attempt's claim (when it was the job's latest claim at the failure) onwards, in log order;
# jobs in the order of their first failure.
_RETRY_CLAIMS = """\
WITH first_fail AS (
    SELECT DISTINCT ON (id) id, seq, token FROM {events} WHERE kind = 'f' ORDER BY id, seq
), claims AS (
    SELECT c.id, c.seq, c.token, c.claimed_at FROM {events} c JOIN first_fail f USING (id) WHERE c.kind = 'c'
), last_before AS (
    SELECT DISTINCT ON (c.id) c.id, c.seq, c.token
    FROM claims c JOIN first_fail f ON f.id = c.id AND c.seq < f.seq ORDER BY c.id, c.seq DESC
), start AS (
    SELECT f.id, f.seq AS fail_seq, CASE WHEN l.token = f.token THEN l.seq ELSE f.seq END AS from_seq
    FROM first_fail f LEFT JOIN last_before l USING (id)
)
SELECT array_agg(c.claimed_at ORDER BY c.seq)
FROM start s JOIN claims c ON c.id = s.id AND c.seq >= s.from_seq
GROUP BY s.id, s.fail_seq ORDER BY s.fail_seq"""


# Jobs waiting at the run's first claim, each with its first claim and the latest first claim
# of the jobs ahead of it in claim order: (compared jobs, jobs started out of claim order).
_FIFO = """\
WITH first AS (
    SELECT id, min(claimed_at) AS claimed_at FROM {events} WHERE kind = 'c' GROUP BY id
), compared AS (
    SELECT f.id, f.claimed_at, j.priority, j.run_at
    FROM first f
    CROSS JOIN LATERAL (SELECT priority, run_at, created_at FROM {jobs} WHERE id = f.id LIMIT 1) AS j
    WHERE extract(epoch FROM greatest(j.run_at, j.created_at)) <= (SELECT min(claimed_at) FROM first)
), ordered AS (
    SELECT claimed_at, max(claimed_at) OVER (ORDER BY priority, run_at, id
                                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS ahead_claimed_at
    FROM compared
)
SELECT count(*), count(*) FILTER (WHERE claimed_at < ahead_claimed_at) FROM ordered"""


def _status_counts(conn: psycopg.Connection, jobs: sql.Composable) -> dict[str, int]:
    rows = conn.execute(sql.SQL("SELECT status, count(*) FROM {} GROUP BY status").format(jobs)).fetchall()
    return {status: int(n) for status, n in rows}


def load_events(conn: psycopg.Connection, log: ClaimLog) -> int:
    """COPY the log's events into the session's temporary events table; return how many."""
    conn.execute(sql.SQL(_CREATE_EVENTS).format(events=_EVENTS))
    columns = sql.SQL(", ").join(map(sql.Identifier, EVENT_COLUMNS))
    with conn.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(_EVENTS, columns)) as copy:
        events = log.copy_to(copy)
    conn.execute(sql.SQL("ANALYZE {}").format(_EVENTS))  # autovacuum never analyzes temporary tables
    return events


def invariant_counts(conn: psycopg.Connection, names: dict, *, claim_checks: str = _CLAIM_CHECKS,
                     create_applied: str = _CREATE_APPLIED, row_checks: str = _ROW_CHECKS,
                     row_params: dict | None = None) -> dict[str, int]:
    """The counts behind the invariants, from the events table already loaded (:func:`load_events`),
    inside the caller's transaction: the claims (:data:`_CREATE_CLAIMS`, then ``claim_checks``), the
    applied completions (``create_applied``, then :data:`_COMPLETION_CHECKS`) and the rows
    (``row_checks`` with ``row_params``). ``names`` fills the templates' ``{…}``. Returns the keyword
    arguments :func:`bench.engines.common.audit_result` takes for them. Raises psycopg.Error."""
    conn.execute(sql.SQL(_CREATE_CLAIMS).format(**names))
    (claimed_distinct, claimed_more_than_once, redeliveries, overlapping, attempts_short,
     double_claims) = map(int, conn.execute(sql.SQL(claim_checks).format(**names)).fetchone())
    conn.execute(sql.SQL(create_applied).format(**names))
    applied, stale_applied, double_completions = map(int, conn.execute(
        sql.SQL(_COMPLETION_CHECKS).format(**names)).fetchone())
    expected, missing, not_durable, lost, duplicated = map(int, conn.execute(
        sql.SQL(row_checks).format(**names), row_params).fetchone())
    return {"claimed_distinct": claimed_distinct, "claimed_more_than_once": claimed_more_than_once,
            "redeliveries": redeliveries, "overlapping": overlapping, "attempts_short": attempts_short,
            "double_claims": double_claims, "applied": applied, "stale_applied": stale_applied,
            "double_completions": double_completions, "expected": expected, "missing": missing,
            "not_durable": not_durable, "lost": lost, "duplicated": duplicated}


def run_audit(conn: psycopg.Connection, schema: str, log: ClaimLog, *, seeded_rows: int, over_claims: int,
              poison_share: float = 0.0, relation: str = "jobs") -> dict:
    """Check the invariants against the events of ``log``.

    ``seeded_rows`` is the number of rows :func:`bench.engines.postgres.db.prepare` created
    (history + backlog: ids ``1..seeded_rows``); ``over_claims`` the recorder's
    count of claims that returned more than the batch. ``relation`` is where
    every job can be found: ``jobs``, or the ``jobs_all`` view over the queue and
    archive tables of the ``archive`` layout.

    Returns ``{"invariants": {...}, "status_counts": {...}, "details": {...},
    "redeliveries": int, "retry_gaps": list | None, "fifo_out_of_order_share": float | None}``:
    counts are ints;
    ``retry_gaps`` lists, per job that failed at least once and was claimed
    again, the seconds (database time, 6 decimals) between its successive
    claims, or is None when no job failed. Raises ``psycopg.Error`` when the
    database cannot be read.
    """
    jobs = sql.Identifier(schema, relation)
    names = {"events": _EVENTS, "claims": _CLAIMS, "applied": _APPLIED, "jobs": jobs}
    with conn.transaction():
        events = load_events(conn, log)
        status_counts = _status_counts(conn, jobs)
        counts = invariant_counts(conn, names, row_params={"seeded": seeded_rows})
        fifo_compared, fifo_out_of_order = map(int, conn.execute(sql.SQL(_FIFO).format(**names)).fetchone())
        failed = conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {events} WHERE kind = 'f')").format(
            **names)).fetchone()[0]
        retry_gaps = None
        if failed:
            retry_gaps = [[round(b - a, 6) for a, b in zip(times, times[1:])]
                          for (times,) in conn.execute(sql.SQL(_RETRY_CLAIMS).format(**names)) if len(times) > 1]
        poison = {}
        if poison_share > 0:
            row = conn.execute(sql.SQL(
                "SELECT count(*), count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'dead'), "
                "min(attempts) FILTER (WHERE status = 'dead'), max(attempts) FILTER (WHERE status = 'dead') "
                "FROM {jobs} WHERE " + poison_sql(float(poison_share))).format(jobs=jobs)).fetchone()
            poison = {"poison_jobs": row[0], "poison_done": row[1], "poison_dead": row[2],
                      "poison_dead_attempts_min": row[3], "poison_dead_attempts_max": row[4]}

    return audit_result(status_counts=status_counts, **counts, over_claims=over_claims, events=events,
                        retry_gaps=retry_gaps, poison=poison, fifo_compared=fifo_compared,
                        fifo_out_of_order=fifo_out_of_order)


def completed_per_queue(conn: psycopg.Connection, schema: str, names: list[str], start_unix: float,
                        end_unix: float, relation: str = "jobs") -> dict[str, int]:
    """Jobs of each queue in ``names`` that reached ``done`` in the measured window, by their
    ``finished_at`` (``{name: count}``, 0 for a queue with none): one scan of ``relation`` after the
    load. The window's bounds are client epoch seconds, moved to the server's clock by the offset
    read here (the server's ``clock_timestamp()`` against the middle of the client's round trip)."""
    before = time.time()
    server_now = float(conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0])
    offset = server_now - (before + time.time()) / 2
    rows = conn.execute(sql.SQL(
        "SELECT queue, count(*) FROM {} WHERE status = 'done' AND finished_at >= to_timestamp(%s) "
        "AND finished_at < to_timestamp(%s) GROUP BY queue").format(sql.Identifier(schema, relation)),
        (start_unix + offset, end_unix + offset)).fetchall()
    counts = {name: int(n) for name, n in rows}
    return {name: counts.get(name, 0) for name in names}
