"""The end-of-run audit of a queue definition's queue: the built-in audit's invariants
(:mod:`bench.engines.postgres.audit`), checked as far as the definition lets them be.

The claim log is the same (every committed claim, completion and failure, with tokens; a queue with no
attempt token gets a random token per claimed job from its session, so each claim still pairs with
its own completion). The table is read through the definition: its ``id`` column (an integer), its
``attempts`` column when it has one, ``predicates.done`` (or ``deleted``: a completion removes the
row), and the ids present right after seeding (kept in ``<schema>.qbench_seeded``).

What cannot be checked is not reported as 0: it is left out of ``invariants`` and named, with why,
in ``uncheckable`` (``summary.json`` ``uncheckable_invariants``; the report says it in words):

- ``stale_completions_applied`` needs an attempt token the table keeps (``columns.token``) and rows
  that stay after completion: without a token a stale worker's completion cannot be fenced, nor seen;
- ``double_claims`` is still checked from the log (a second claim while the first was unfinished and
  its lease, or any claim of a queue without a lease, still live), but without ``columns.attempts``
  only that half of it.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from bench.config.queue_definition import QueueDefinition
from bench.engines.common import audit_result
from bench.engines.postgres.audit import _APPLIED, _CLAIMS, _EVENTS, invariant_counts, load_events
from bench.measure.claimlog import ClaimLog

#: The table of ids present after seeding (the audit's expected rows besides the produced ones).
SEEDED_TABLE = "qbench_seeded"

_CLAIM_CHECKS = """\
SELECT count(*), count(*) FILTER (WHERE claims > 1), coalesce(sum(claims - 1), 0),
       coalesce(sum(overlapping), 0), coalesce(sum(greatest(0, claims - attempts)), 0),
       coalesce(sum(greatest(overlapping, claims - attempts)), 0)
FROM (SELECT c.id, c.claims, c.overlapping,
             coalesce((SELECT max({attempts}) FROM {jobs} WHERE {id} = c.id), c.claims) AS attempts
      FROM {claims} c) AS per_job"""

_CREATE_APPLIED = """\
CREATE TEMP TABLE {applied} ON COMMIT DROP AS
SELECT a.seq, a.id,
       (SELECT count(*) FROM {jobs} WHERE {id} = a.id) AS rows,
       coalesce((SELECT bool_or({current}) FROM {jobs} WHERE {id} = a.id), false) AS current,
       {done} AS done
FROM {events} a
WHERE a.kind = 'a'"""

_ROW_CHECKS = """\
WITH expected AS (
    SELECT id FROM {seeded} UNION SELECT id FROM {events} WHERE kind = 'p'
), missing AS (
    SELECT e.id FROM expected e WHERE NOT EXISTS (SELECT 1 FROM {jobs} WHERE {id} = e.id)
), not_durable AS (
    SELECT DISTINCT id FROM {applied} WHERE NOT done
)
SELECT (SELECT count(*) FROM expected), (SELECT count(*) FROM missing), (SELECT count(*) FROM not_durable),
       (SELECT count(*) FROM (SELECT id FROM missing {finished_away} UNION SELECT id FROM not_durable) AS lost),
       (SELECT count(*) FROM (SELECT {id} FROM {jobs} GROUP BY {id} HAVING count(*) > 1) AS dup)"""

_STATUS = """\
SELECT count(*) FILTER (WHERE {eligible}), count(*) FILTER (WHERE {running}), count(*) FILTER (WHERE {done}),
       count(*)
FROM {jobs}"""


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


def run_audit(conn: psycopg.Connection, schema: str, defn: QueueDefinition, log: ClaimLog, *,
              over_claims: int) -> dict:
    """Check the invariants against the events of ``log`` on ``defn``'s table in ``schema``; the
    result has :func:`bench.engines.common.audit_result`'s shape, without the invariants in
    :func:`uncheckable` and with ``uncheckable`` beside them, and ``notes`` (sentences on how to read
    a count the definition makes conservative). Raises ``psycopg.Error`` when the
    database cannot be read."""
    cols = defn.columns
    ident = sql.Identifier
    id_col = ident(cols["id"])
    jobs = ident(schema, defn.table)
    if defn.deletes_done:
        done = sql.SQL("NOT EXISTS (SELECT 1 FROM {jobs} WHERE {id} = a.id)").format(jobs=jobs, id=id_col)
    else:
        done = sql.SQL("coalesce((SELECT bool_or({pred}) FROM {jobs} WHERE {id} = a.id), false)").format(
            pred=sql.SQL(defn.predicates["done"]), jobs=jobs, id=id_col)
    names = {"events": _EVENTS, "claims": _CLAIMS, "applied": _APPLIED, "jobs": jobs,
             "id": id_col, "seeded": ident(schema, SEEDED_TABLE),
             "attempts": ident(cols["attempts"]) if "attempts" in cols else sql.SQL("NULL::int"),
             "current": sql.SQL("{} = a.token").format(ident(cols["token"])) if "token" in cols else sql.SQL("true"),
             "finished_away": _finished_away(defn),
             "done": done}
    with conn.transaction():
        conn.execute(sql.SQL("SET LOCAL search_path = {}").format(ident(schema)))  # finished_ids is unqualified
        events = load_events(conn, log)
        status = status_counts(conn, schema, defn)
        counts = invariant_counts(conn, names, claim_checks=_CLAIM_CHECKS, create_applied=_CREATE_APPLIED,
                                  row_checks=_ROW_CHECKS)
    result = audit_result(status_counts=status, **counts, over_claims=over_claims, events=events, retry_gaps=None,
                          poison={}, fifo_compared=0, fifo_out_of_order=0)
    result["uncheckable"] = uncheckable(defn)
    result["notes"] = []
    if "lease" not in cols and result["invariants"]["double_claims"]:
        result["notes"].append("the queue has no lease column, so double_claims counts every claim of a job whose "
                               "previous claim had not finished, a job a rescuer took back from a crashed worker "
                               "included: the audit cannot tell a dead worker from a slow one, and neither can a "
                               "time-based rescuer without a fencing token (FR-06)")
    for name in result["uncheckable"]:
        del result["invariants"][name]
    if "attempts" not in cols:
        result["details"]["claims_beyond_attempts"] = None
    return result
