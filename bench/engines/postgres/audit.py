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

The queue's table is read through its definition (:mod:`bench.config.queue_definition`; the built-in
queue's is generated, :mod:`bench.engines.postgres.builtin_queue`): its ``id`` column (an integer), its
``attempts`` and ``token`` columns when it has them, and ``predicates.done`` (or ``deleted``: a
completion removes the row). The expected ids are the built-in queue's seeded ``1..seeded_rows``, or for
a written definition the ids present right after seeding (kept in ``<schema>.qbench_seeded``). The
status counts, the poison jobs, the retry gaps and the FIFO order read the built-in table's own columns
(``status``, ``priority``, ``run_at``, ``created_at``): a written definition's audit leaves them out.
What a written definition does not let the audit check is not reported as 0: it is left out of
``invariants`` and named, with why, in ``uncheckable`` (``summary.json`` ``uncheckable_invariants``; the
report says it in words):

- ``stale_completions_applied`` needs an attempt token the table keeps (``columns.token``) and rows
  that stay after completion: without a token a stale worker's completion cannot be fenced, nor seen;
- ``double_claims`` is still checked from the log (a second claim while the first was unfinished and
  its lease, or any claim of a queue without a lease, still live), but without ``columns.attempts``
  only that half of it.

The audit runs after the swarm has stopped, on its own connection, and reads
only the tool's schema (plus its own temporary table).
"""

from __future__ import annotations

import time

import psycopg
from psycopg import sql

from bench.config.queue_definition import QueueDefinition, is_builtin
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

#: The claims' checks, MariaDB's too; here its ``{jobs}`` is :data:`_ROWS`, the audited relation's rows.
_CLAIM_CHECKS = CLAIM_CHECKS

# The audited relation's rows as the checks read them: the definition's id, attempts and token columns
# (NULL when it has none) and its done predicate, named alike for every queue. A subquery of its own, so
# that the definition's unqualified predicate sees the queue's columns only; PostgreSQL pulls it up.
_ROWS = "(SELECT {id} AS id, {attempts} AS attempts, {token} AS token, ({done}) AS done FROM {jobs})"

# One row per applied completion: how many rows of its job the relation holds, whether one of
# them carries the completion's token as its current attempt, and whether one is done.
_CREATE_APPLIED = """\
CREATE TEMP TABLE {applied} ON COMMIT DROP AS
SELECT a.seq, a.id, count(j.id) AS rows, coalesce(bool_or({current}), false) AS current, {done} AS done
FROM {events} a LEFT JOIN {rows} j ON j.id = a.id
WHERE a.kind = 'a'
GROUP BY a.seq, a.id"""

_COMPLETION_CHECKS = """\
SELECT count(*), count(*) FILTER (WHERE rows > 0 AND NOT current),
       (SELECT count(*) FROM (SELECT id FROM {applied} GROUP BY id HAVING count(*) > 1) AS twice)
FROM {applied}"""

_ROW_CHECKS = """\
WITH expected AS (
    {seeded}
    UNION SELECT id FROM {events} WHERE kind = 'p'
), missing AS (
    SELECT id FROM expected e WHERE NOT EXISTS (SELECT 1 FROM {rows} j WHERE j.id = e.id)
), not_durable AS (
    SELECT DISTINCT id FROM {applied} WHERE NOT done
)
SELECT (SELECT count(*) FROM expected), (SELECT count(*) FROM missing), (SELECT count(*) FROM not_durable),
       (SELECT count(*) FROM (SELECT id FROM missing {finished_away} UNION SELECT id FROM not_durable) AS lost),
       (SELECT count(*) FROM (SELECT id FROM {rows} j GROUP BY id HAVING count(*) > 1) AS dup)"""

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


#: The table of ids present after seeding a written definition's queue (its expected rows besides the
#: produced ones).
SEEDED_TABLE = "qbench_seeded"

_STATUS = """\
SELECT count(*) FILTER (WHERE {eligible}), count(*) FILTER (WHERE {running}), count(*) FILTER (WHERE {done}),
       count(*)
FROM {jobs}"""


def record_seeded(conn: psycopg.Connection, schema: str, defn: QueueDefinition) -> int:
    """Keep the ids present after seeding in ``<schema>.qbench_seeded`` (the tool's schema); returns how
    many."""
    table = sql.Identifier(schema, defn.table)
    conn.execute(sql.SQL("CREATE TABLE {} AS SELECT DISTINCT ({})::bigint AS id FROM {}").format(
        sql.Identifier(schema, SEEDED_TABLE), sql.Identifier(defn.columns["id"]), table))
    return int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
        sql.Identifier(schema, SEEDED_TABLE))).fetchone()[0])


def status_counts(conn: psycopg.Connection, schema: str, defn: QueueDefinition) -> dict[str, int]:
    """Rows by the definition's predicates: ``pending`` (eligible now), ``running``, ``done``,
    ``other`` (none of those: e.g. failed awaiting a retry not yet due, dead, scheduled later)."""
    p = defn.predicates
    done = "false" if defn.deletes_done else p["done"]
    eligible, running, finished, total = conn.execute(sql.SQL(_STATUS).format(
        eligible=sql.SQL(p["eligible"]), running=sql.SQL(p.get("running", "false")), done=sql.SQL(done),
        jobs=sql.Identifier(schema, defn.table))).fetchone()
    counts = {"pending": int(eligible), "running": int(running), "done": int(finished)}
    counts["other"] = int(total) - sum(counts.values())
    return counts


def uncheckable(defn: QueueDefinition) -> dict[str, str]:
    """Invariant -> why the audit cannot check it on ``defn``'s queue ({} when it checks them all)."""
    out = {}
    if "token" not in defn.columns:
        out["stale_completions_applied"] = ("the queue has no attempt token: a stale worker's completion cannot "
                                            "be fenced by the database, nor told apart from the current one")
    elif defn.deletes_done:
        out["stale_completions_applied"] = ("a completion deletes the row, so the token it matched is gone when "
                                            "the audit looks")
    return out


def _finished_away(defn: QueueDefinition) -> sql.Composable:
    """What a missing row may have left by (a queue whose completion deletes the row): a completion in the
    claim log, or the definition's ``finished_ids`` (the queue's own record, e.g. a library's log table)."""
    if not defn.deletes_done:
        return sql.SQL("")
    away = sql.SQL("EXCEPT SELECT id FROM {}").format(_APPLIED)
    if "finished_ids" in defn.statements:
        away = sql.SQL("{} EXCEPT SELECT (id)::bigint FROM ({}) AS finished_ids").format(
            away, sql.SQL(defn.statements["finished_ids"]))
    return away


def _names(schema: str, defn: QueueDefinition, jobs: sql.Composable, seeded_rows: int) -> dict:
    """What fills the checks' ``{…}`` for ``defn``'s queue read from ``jobs``."""
    cols = defn.columns
    column = lambda key, absent: sql.Identifier(cols[key]) if key in cols else sql.SQL(absent)  # noqa: E731
    rows = sql.SQL(_ROWS).format(id=sql.Identifier(cols["id"]), attempts=column("attempts", "NULL::int"),
                                 token=column("token", "NULL::bigint"),
                                 done=sql.SQL("false" if defn.deletes_done else defn.predicates["done"]), jobs=jobs)
    seeded = (sql.SQL("SELECT g AS id FROM generate_series(1, {}::bigint) AS g").format(sql.Literal(int(seeded_rows)))
              if is_builtin(defn.name) else sql.SQL("SELECT id FROM {}").format(sql.Identifier(schema, SEEDED_TABLE)))
    return {"events": _EVENTS, "claims": _CLAIMS, "applied": _APPLIED, "jobs": jobs, "rows": rows, "seeded": seeded,
            "current": sql.SQL("j.token = a.token" if "token" in cols else "j.id IS NOT NULL"),
            "done": sql.SQL("count(j.id) = 0" if defn.deletes_done else "coalesce(bool_or(j.done), false)"),
            "finished_away": _finished_away(defn)}


def load_events(conn: psycopg.Connection, log: ClaimLog) -> int:
    """COPY the log's events into the session's temporary events table; return how many."""
    conn.execute(sql.SQL(_CREATE_EVENTS).format(events=_EVENTS))
    columns = sql.SQL(", ").join(map(sql.Identifier, EVENT_COLUMNS))
    with conn.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(_EVENTS, columns)) as copy:
        events = log.copy_to(copy)
    conn.execute(sql.SQL("ANALYZE {}").format(_EVENTS))  # autovacuum never analyzes temporary tables
    return events


def invariant_counts(conn: psycopg.Connection, names: dict) -> dict[str, int]:
    """The counts behind the invariants, from the events table already loaded (:func:`load_events`),
    inside the caller's transaction: the claims (:data:`_CREATE_CLAIMS`, :data:`_CLAIM_CHECKS`), the
    applied completions (:data:`_CREATE_APPLIED`, :data:`_COMPLETION_CHECKS`) and the rows
    (:data:`_ROW_CHECKS`). ``names`` fills the templates' ``{…}`` (:func:`_names`). Returns the keyword
    arguments :func:`bench.engines.common.audit_result` takes for them. Raises psycopg.Error."""
    conn.execute(sql.SQL(_CREATE_CLAIMS).format(**names))
    (claimed_distinct, claimed_more_than_once, redeliveries, overlapping, attempts_short,
     double_claims) = map(int, conn.execute(
        sql.SQL(_CLAIM_CHECKS).format(**{**names, "jobs": names["rows"]})).fetchone())
    conn.execute(sql.SQL(_CREATE_APPLIED).format(**names))
    applied, stale_applied, double_completions = map(int, conn.execute(
        sql.SQL(_COMPLETION_CHECKS).format(**names)).fetchone())
    expected, missing, not_durable, lost, duplicated = map(int, conn.execute(
        sql.SQL(_ROW_CHECKS).format(**names)).fetchone())
    return {"claimed_distinct": claimed_distinct, "claimed_more_than_once": claimed_more_than_once,
            "redeliveries": redeliveries, "overlapping": overlapping, "attempts_short": attempts_short,
            "double_claims": double_claims, "applied": applied, "stale_applied": stale_applied,
            "double_completions": double_completions, "expected": expected, "missing": missing,
            "not_durable": not_durable, "lost": lost, "duplicated": duplicated}


def _builtin_figures(conn: psycopg.Connection, names: dict, poison_share: float) -> dict:
    """The built-in table's own figures: the FIFO order, the retry gaps and, with ``poison_share`` > 0,
    how the poison jobs ended (the keyword arguments of :func:`bench.engines.common.audit_result`)."""
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
            "FROM {jobs} WHERE " + poison_sql(float(poison_share))).format(**names)).fetchone()
        poison = {"poison_jobs": row[0], "poison_done": row[1], "poison_dead": row[2],
                  "poison_dead_attempts_min": row[3], "poison_dead_attempts_max": row[4]}
    return {"fifo_compared": fifo_compared, "fifo_out_of_order": fifo_out_of_order, "retry_gaps": retry_gaps,
            "poison": poison}


def _as_far_as_checkable(result: dict, defn: QueueDefinition) -> dict:
    """``result`` of a written definition's queue without the invariants :func:`uncheckable` names, with
    ``uncheckable`` and ``notes`` (sentences on how to read a count the definition makes conservative)."""
    result["uncheckable"] = uncheckable(defn)
    result["notes"] = []
    if "lease" not in defn.columns and result["invariants"]["double_claims"]:
        result["notes"].append("the queue has no lease column, so double_claims counts every claim of a job whose "
                               "previous claim had not finished, a job a rescuer took back from a crashed worker "
                               "included: the audit cannot tell a dead worker from a slow one, and neither can a "
                               "time-based rescuer without a fencing token (FR-06)")
    for name in result["uncheckable"]:
        del result["invariants"][name]
    if "attempts" not in defn.columns:
        result["details"]["claims_beyond_attempts"] = None
    return result


def run_audit(conn: psycopg.Connection, schema: str, defn: QueueDefinition, log: ClaimLog, *, seeded_rows: int,
              over_claims: int, poison_share: float = 0.0, relation: str | None = None) -> dict:
    """Check the invariants against the events of ``log`` on queue ``defn``'s table in ``schema``.

    ``seeded_rows`` is the number of rows :func:`bench.engines.postgres.db.prepare` created for the
    built-in queue (history + backlog: ids ``1..seeded_rows``); ``over_claims`` the recorder's
    count of claims that returned more than the batch. ``relation`` is where
    every job can be found when not in ``defn.table``: the ``jobs_all`` view over the queue and
    archive tables of the built-in queue's ``archive`` layout.

    Returns ``{"invariants": {...}, "status_counts": {...}, "details": {...},
    "redeliveries": int, "retry_gaps": list | None, "fifo_out_of_order_share": float | None}``:
    counts are ints;
    ``retry_gaps`` lists, per job that failed at least once and was claimed
    again, the seconds (database time, 6 decimals) between its successive
    claims, or is None when no job failed (always, for a written definition's queue, whose result has
    ``uncheckable`` and ``notes`` too: :func:`_as_far_as_checkable`). Raises ``psycopg.Error`` when the
    database cannot be read.
    """
    builtin = is_builtin(defn.name)
    jobs = sql.Identifier(schema, relation or defn.table)
    names = _names(schema, defn, jobs, seeded_rows)
    with conn.transaction():
        conn.execute(sql.SQL("SET LOCAL search_path = {}").format(sql.Identifier(schema)))  # finished_ids is unqualified
        events = load_events(conn, log)
        status = (dict(conn.execute(sql.SQL("SELECT status, count(*)::int FROM {} GROUP BY status").format(jobs)))
                  if builtin else status_counts(conn, schema, defn))
        counts = invariant_counts(conn, names)
        figures = (_builtin_figures(conn, names, poison_share) if builtin else
                   {"fifo_compared": 0, "fifo_out_of_order": 0, "retry_gaps": None, "poison": {}})
    result = audit_result(status_counts=status, **counts, over_claims=over_claims, events=events, **figures)
    return result if builtin else _as_far_as_checkable(result, defn)


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
