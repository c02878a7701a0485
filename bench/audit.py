"""End-of-run audit: the queue's invariants, checked on the database against the
client's claim log.

Invariants (all must be 0):

``double_claims``
    claims of a job that was already in flight under a live lease (client log),
    plus jobs whose database ``attempts`` is lower than the claims the clients saw
    (two claims shared one attempt).
``lost_jobs``
    seeded or created rows missing from the table, plus completions the database
    acknowledged that are not durable as ``done`` with the same attempt token.
``over_claims``
    claims that returned more rows than the batch size.
``stale_completions_applied``
    applied completions whose token is not the row's current attempt token.
``double_completions``
    jobs whose completion the database applied more than once.

``redeliveries`` (not an invariant: at-least-once delivery made visible) counts
claims of a job beyond its first.

The audit runs after the swarm has stopped, on its own connection, and reads
only the tool's schema.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from .jobs import POISON_SQL

#: The invariant keys of ``summary.json``, all 0 on a correct run.
INVARIANTS = ("double_claims", "lost_jobs", "over_claims", "stale_completions_applied", "double_completions")


def _status_counts(conn: psycopg.Connection, jobs: sql.Composable) -> dict[str, int]:
    rows = conn.execute(sql.SQL("SELECT status, count(*) FROM {} GROUP BY status").format(jobs)).fetchall()
    return {status: int(n) for status, n in rows}


def run_audit(conn: psycopg.Connection, schema: str, *, expected_rows: int, claims: dict[int, int],
              applied: dict[int, list[int]], client_double_claims: int, over_claims: int,
              poison_share: float = 0.0, relation: str = "jobs") -> dict:
    """Check the invariants; return ``{"invariants": {...}, "status_counts": {...}, "details": {...}}``.

    ``expected_rows`` is the number of rows created by prepare (history + backlog);
    ``claims`` maps job id → claims the clients saw; ``applied`` maps job id → the
    attempt tokens of completions the database applied. Counts are ints.
    ``relation`` is where every job can be found: ``jobs``, or the ``jobs_all``
    view over the queue and archive tables of the ``archive`` layout.
    """
    jobs = sql.Identifier(schema, relation)
    status_counts = _status_counts(conn, jobs)
    present = sum(status_counts.values())
    missing_rows = max(0, expected_rows - present)

    ids = list(claims)
    claim_counts = [claims[i] for i in ids]
    attempts_short = conn.execute(sql.SQL("""
        SELECT count(*) FROM unnest(%s::bigint[], %s::int[]) AS c(id, n)
        JOIN {jobs} j ON j.id = c.id WHERE j.attempts < c.n
    """).format(jobs=jobs), (ids, claim_counts)).fetchone()[0]

    # One row per applied completion: its job id and the token it carried.
    applied_ids = [i for i, tokens in applied.items() for _ in tokens]
    applied_tokens = [t for tokens in applied.values() for t in tokens]
    row = conn.execute(sql.SQL("""
        SELECT count(*) FILTER (WHERE j.id IS NULL OR j.status <> 'done'),
               count(*) FILTER (WHERE j.id IS NOT NULL AND j.attempt_token IS DISTINCT FROM c.token)
        FROM unnest(%s::bigint[], %s::bigint[]) AS c(id, token)
        LEFT JOIN {jobs} j ON j.id = c.id
    """).format(jobs=jobs), (applied_ids, applied_tokens)).fetchone()
    not_durable, stale_applied = int(row[0]), int(row[1])
    double_completions = sum(1 for tokens in applied.values() if len(tokens) > 1)

    invariants = {
        "double_claims": int(client_double_claims) + int(attempts_short),
        "lost_jobs": missing_rows + not_durable,
        "over_claims": int(over_claims),
        "stale_completions_applied": stale_applied,
        "double_completions": double_completions,
    }
    poison = {}
    if poison_share > 0:
        row = conn.execute(sql.SQL(
            "SELECT count(*), count(*) FILTER (WHERE status = 'done'), count(*) FILTER (WHERE status = 'dead'), "
            "min(attempts) FILTER (WHERE status = 'dead'), max(attempts) FILTER (WHERE status = 'dead') "
            "FROM {jobs} WHERE " + POISON_SQL.format(share=float(poison_share))).format(jobs=jobs)).fetchone()
        poison = {"poison_jobs": row[0], "poison_done": row[1], "poison_dead": row[2],
                  "poison_dead_attempts_min": row[3], "poison_dead_attempts_max": row[4]}
    details = {
        "rows_expected": expected_rows,
        "rows_present": present,
        "jobs_claimed_distinct": len(ids),
        "jobs_claimed_more_than_once": sum(1 for n in claim_counts if n > 1),
        "completions_applied": len(applied_ids),
        "double_completions": double_completions,
        "completions_not_durable": not_durable,
        **poison,
    }
    redeliveries = sum(n - 1 for n in claim_counts if n > 1)
    return {"invariants": invariants, "status_counts": status_counts, "details": details,
            "redeliveries": redeliveries}
