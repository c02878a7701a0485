"""Capture the claim statement's plan as the workers run it.

Before the load starts, the worker's claim is prepared exactly as the workers
prepare it (``$1`` batch, ``$2`` worker, ``$3`` lease_s) and run once under
``EXPLAIN (ANALYZE, BUFFERS)`` inside a transaction that is rolled back, so the
text shows the node types, row counts, timing and buffers of one real claim
against the seeded table (and leaves the queue as it was, but for one dead
tuple per claimed row). ``EXPLAIN ANALYZE`` executes the statement:
https://www.postgresql.org/docs/current/sql-explain.html
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from . import policies

_STATEMENT = "qbench_claim_plan"


def capture_claim_plan(conn: psycopg.Connection, schema: str, policy: str, batch: int, lease_s: float,
                       statement_timeout_ms: int = 60_000) -> str:
    """Return the ``EXPLAIN (ANALYZE, BUFFERS)`` text of one claim (lines joined by newlines).

    ``conn`` must be in autocommit mode; the claim runs in its own transaction,
    which is rolled back. Raises psycopg.Error if the statement fails (for
    example on ``statement_timeout``).
    """
    claim = policies.prepared_statements(schema, policy)["claim"]
    # PREPARE is not transactional: deallocate whatever happens to the transaction.
    conn.execute(sql.SQL("PREPARE {} AS ").format(sql.Identifier(_STATEMENT)) + sql.SQL(claim))
    try:
        with conn.transaction(force_rollback=True):
            conn.execute(sql.SQL("SET LOCAL statement_timeout = {}").format(sql.Literal(statement_timeout_ms)))
            rows = conn.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS) EXECUTE {}({}, {}, {})").format(
                sql.Identifier(_STATEMENT), sql.Literal(batch), sql.Literal("plan-capture"),
                sql.Literal(float(lease_s)))).fetchall()
    finally:
        conn.execute(sql.SQL("DEALLOCATE {}").format(sql.Identifier(_STATEMENT)))
    return "\n".join(r[0] for r in rows)


def plan_nodes(plan_text: str) -> list[str]:
    """Node names of an EXPLAIN text, in order (e.g. ``["Update on jobs", "Seq Scan on jobs", …]``)."""
    nodes = []
    for line in plan_text.splitlines():
        text = line.strip()
        if text.startswith("--"):  # a heading comment, not EXPLAIN output
            continue
        if text.startswith("->"):
            text = text[2:].strip()
        elif nodes:
            continue
        nodes.append(text.split("  (")[0])
    return nodes
