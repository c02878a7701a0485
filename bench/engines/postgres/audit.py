"""End-of-run audit on PostgreSQL: its SQL and steps for :func:`bench.engines.audit_flow.run_audit`, the log
loaded with ``COPY`` into a temporary table dropped with the audit's transaction
(https://www.postgresql.org/docs/current/sql-createtable.html, ``ON COMMIT DROP``)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from bench.config.queue_definition import QueueDefinition, is_builtin
from bench.engines import audit_flow
from bench.engines.postgres.adapter import DRIVER
from bench.measure.claimlog import EVENT_COLUMNS, ClaimLog

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

# The audited relation's rows as the checks read them: the definition's id, attempts and token columns
# (NULL when it has none) and its done predicate, named alike for every queue. A subquery of its own, so
# that the definition's unqualified predicate sees the queue's columns only; PostgreSQL pulls it up.
_ROWS = "(SELECT {id} AS id, {attempts} AS attempts, {token} AS token, ({done}) AS done FROM {jobs})"

# One row per applied completion: how many rows of its job the relation holds, whether one of
# them carries the completion's token as its current attempt, and whether one is done.
_CREATE_APPLIED = """\
CREATE TEMP TABLE {applied} ON COMMIT DROP AS
SELECT a.seq, a.id, count(j.id) AS n_rows, coalesce(bool_or({current}), false) AS is_current,
       {done} AS is_done
FROM {events} a LEFT JOIN {rows} j ON j.id = a.id
WHERE a.kind = 'a'
GROUP BY a.seq, a.id"""

_ROW_CHECKS = """\
WITH expected AS (
    {seeded}
    UNION SELECT id FROM {events} WHERE kind = 'p'
), missing AS (
    SELECT id FROM expected e WHERE NOT EXISTS (SELECT 1 FROM {rows} j WHERE j.id = e.id)
), not_durable AS (
    SELECT DISTINCT id FROM {applied} WHERE NOT is_done
)
SELECT (SELECT count(*) FROM expected), (SELECT count(*) FROM missing), (SELECT count(*) FROM not_durable),
       (SELECT count(*) FROM (SELECT id FROM missing {finished_away} UNION SELECT id FROM not_durable) AS lost),
       (SELECT count(*) FROM (SELECT id FROM {rows} j GROUP BY id HAVING count(*) > 1) AS dup)"""

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


#: The ids present after seeding a written definition's queue (its expected rows besides the produced ones).
SEEDED_TABLE = "qbench_seeded"

_STATUS = """\
SELECT count(*) FILTER (WHERE {eligible}), count(*) FILTER (WHERE {running}), count(*) FILTER (WHERE {done}),
       count(*)
FROM {jobs}"""


def record_seeded(conn: psycopg.Connection, schema: str, defn: QueueDefinition) -> int:
    """Keep the ids present after seeding in ``<schema>.qbench_seeded``; returns how many."""
    table = sql.Identifier(schema, defn.table)
    conn.execute(sql.SQL("CREATE TABLE {} AS SELECT DISTINCT ({})::bigint AS id FROM {}").format(
        sql.Identifier(schema, SEEDED_TABLE), sql.Identifier(defn.columns["id"]), table))
    return int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
        sql.Identifier(schema, SEEDED_TABLE))).fetchone()[0])


def status_counts(conn: psycopg.Connection, schema: str, defn: QueueDefinition) -> dict[str, int]:
    """Rows by the definition's predicates: ``pending`` (eligible now), ``running``, ``done``, ``other``
    (none of those: a retry not yet due, dead, scheduled later)."""
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
    """Where a missing row may have gone when completion deletes it: a logged completion, or the
    definition's ``finished_ids`` (e.g. a library's log table)."""
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
            "finished_away": _finished_away(defn), "effects": sql.Identifier(schema, "effects"), "effect_rows": rows}


class _Steps(audit_flow.AuditSteps):
    driver, create_claims, create_applied, fifo = DRIVER, _CREATE_CLAIMS, _CREATE_APPLIED, _FIFO

    def __init__(self, names: dict, schema: str, defn: QueueDefinition):
        super().__init__(names)
        self.schema, self.defn = schema, defn

    def sql(self, template: str) -> sql.Composed:
        return sql.SQL(template).format(**self.names)

    def begin(self, conn: psycopg.Connection) -> None:
        conn.execute("START TRANSACTION")
        conn.execute(sql.SQL("SET LOCAL search_path = {}").format(sql.Identifier(self.schema)))  # finished_ids

    def load_events(self, conn: psycopg.Connection, log: ClaimLog) -> int:
        conn.execute(self.sql(_CREATE_EVENTS))
        columns = sql.SQL(", ").join(map(sql.Identifier, EVENT_COLUMNS))
        with conn.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(_EVENTS, columns)) as copy:
            events = log.copy_to(copy)
        conn.execute(sql.SQL("ANALYZE {}").format(_EVENTS))  # autovacuum never analyzes temporary tables
        return events

    def status_counts(self, conn: psycopg.Connection) -> dict[str, int]:
        return super().status_counts(conn) if is_builtin(self.defn.name) else status_counts(conn, self.schema, self.defn)

    def row_checks(self, conn: psycopg.Connection) -> dict[str, int]:
        return self.row(conn, _ROW_CHECKS, "expected missing not_durable lost duplicated")


def _as_far_as_checkable(result: dict, defn: QueueDefinition) -> dict:
    """``result`` without the invariants :func:`uncheckable` names, with ``uncheckable`` and ``notes``
    (how to read a count the definition makes conservative)."""
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
              over_claims: int, poison_share: float = 0.0, relation: str | None = None,
              effects: str = "none") -> dict:
    """:func:`bench.engines.audit_flow.run_audit` on ``defn``'s table in ``schema`` (a written definition's adds
    ``uncheckable``, ``notes``). ``seeded_rows``: the built-in ids ``1..seeded_rows``; ``over_claims``: the
    recorder's count; ``relation``: where every job is (``jobs_all``, the archive layout's view); ``effects``:
    the run's ``EFFECTS``. Raises psycopg.Error."""
    builtin = is_builtin(defn.name)
    steps = _Steps(_names(schema, defn, sql.Identifier(schema, relation or defn.table), seeded_rows), schema, defn)
    result = audit_flow.run_audit(steps, conn, log, builtin=builtin, over_claims=over_claims,
                                  poison_share=poison_share, effects=effects)
    if result["effects"] and uncheckable(defn).get("stale_completions_applied"):  # no token, or no row to read it
        result["effects"]["stale_attempt_effects"] = None
    return result if builtin else _as_far_as_checkable(result, defn)


def completed_per_queue(conn: psycopg.Connection, schema: str, names: list[str], start_unix: float,
                        end_unix: float, relation: str = "jobs") -> dict[str, int]:
    """:func:`bench.engines.audit_flow.completed_per_queue` of ``relation`` by ``finished_at`` (the server's
    ``clock_timestamp()``)."""
    return audit_flow.completed_per_queue(
        DRIVER, conn, "SELECT extract(epoch FROM clock_timestamp())::float8", sql.SQL(
            "SELECT queue, count(*) FROM {} WHERE status = 'done' AND finished_at >= to_timestamp(%s) "
            "AND finished_at < to_timestamp(%s) GROUP BY queue").format(sql.Identifier(schema, relation)),
        names, (start_unix, end_unix))


def effect_rows(conn: psycopg.Connection, schema: str, ids: list[int]) -> set[tuple[int, int]]:
    """``(logical id, attempt token)`` of the effect rows of ``ids`` (``EFFECTS``; the audit across a promotion)."""
    query = sql.SQL("SELECT logical_id, attempt_token FROM {} WHERE logical_id = ANY(%s)").format(
        sql.Identifier(schema, "effects"))
    return {(int(i), int(t)) for i, t in conn.execute(query, (ids,))}


def job_states(conn: psycopg.Connection, schema: str, defn: QueueDefinition, ids: list[int],
               relation: str | None = None) -> dict[int, tuple]:
    """id -> (attempt token, attempts, done) of the rows of ``ids`` in ``defn``'s table (or ``relation``), as the
    audit's checks read them (:data:`_ROWS`); a job without a row is absent (the audit across a promotion)."""
    rows = _names(schema, defn, sql.Identifier(schema, relation or defn.table), 0)["rows"]
    query = sql.SQL("SELECT id, token, attempts, done FROM {} AS j WHERE id = ANY(%s)").format(rows)
    return {int(i): (token, attempts, bool(done)) for i, token, attempts, done in conn.execute(query, (ids,))}
