"""Capture the claim statement's plans as the workers run them.

The workers prepare the claim once per connection (``$1`` batch, ``$2``
worker, ``$3`` lease_s) and execute it many times. PostgreSQL then plans each
execution either with the bound values (a *custom* plan) or once for any value
(a *generic* plan): under the default ``plan_cache_mode = auto`` the first five
executions get custom plans, and from the sixth a generic plan is used when its
estimated cost is not much above the custom plans' average
(https://www.postgresql.org/docs/current/sql-prepare.html, "Notes"). A generic
plan cannot know ``$1`` (the LIMIT), which can make a partial index that the
custom plan uses look worse than a sequential scan.

:func:`capture_claim_plans` prepares the claim exactly as the workers do and
runs one claim under ``EXPLAIN (ANALYZE, BUFFERS)`` with each of
``force_custom_plan`` and ``force_generic_plan``, then finds which one ``auto``
picks at the sixth execution (from ``pg_prepared_statements.generic_plans``,
PostgreSQL 14+). Every claim runs in a transaction that is rolled back, so the
queue is left as it was but for dead tuples. ``EXPLAIN ANALYZE`` executes the
statement: https://www.postgresql.org/docs/current/sql-explain.html
"""

from __future__ import annotations

import re

import psycopg
from psycopg import sql

from . import policies

_STATEMENT = "qbench_claim_plan"
#: Executions with custom plans before ``auto`` considers the generic plan (plancache.c).
CUSTOM_PLANS_BEFORE_GENERIC = 5
PLAN_MODES = ("custom", "generic")

_BUFFERS_RE = re.compile(r"Buffers: shared((?: \w+=\d+)+)")
_EXECUTION_RE = re.compile(r"Execution Time: ([\d.]+) ms")


def _execute(conn: psycopg.Connection, batch: int, lease_s: float, explain: bool) -> list[str]:
    """Execute the prepared claim once; with ``explain`` return the EXPLAIN (ANALYZE, BUFFERS) lines."""
    stmt = sql.SQL("EXECUTE {}({}, {}, {})").format(sql.Identifier(_STATEMENT), sql.Literal(batch),
                                                    sql.Literal("plan-capture"), sql.Literal(float(lease_s)))
    if explain:
        return [r[0] for r in conn.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + stmt, prepare=False).fetchall()]
    # prepare=False: psycopg would otherwise prepare a repeated statement itself, and its
    # cache housekeeping (DEALLOCATE ALL) would drop ours.
    conn.execute(stmt, prepare=False)
    return []


def capture_claim_plans(conn: psycopg.Connection, schema: str, policy: str, batch: int, lease_s: float,
                        statement_timeout_ms: int = 60_000) -> dict:
    """Plans of one claim as a prepared statement; returns
    ``{"auto": "custom"|"generic"|None, "custom": PLAN, "generic": PLAN}`` where
    PLAN is ``{"text", "scan", "nodes", "shared_buffers", "execution_ms"}`` (see
    :func:`summarize_plan`) or ``{"error": "<one line>"}`` when that capture failed
    (e.g. on ``statement_timeout``). ``auto`` is None when it could not be found.

    ``conn`` must be in autocommit mode. Raises psycopg.OperationalError only when
    the connection itself fails.
    """
    claim = policies.prepared_statements(schema, policy)["claim"]
    timeout = sql.SQL("SET LOCAL statement_timeout = {}").format(sql.Literal(statement_timeout_ms))
    out: dict = {"auto": None}
    # PREPARE is not transactional: deallocate whatever happens to the transactions.
    conn.execute(sql.SQL("PREPARE {} AS ").format(sql.Identifier(_STATEMENT)) + sql.SQL(claim))
    try:
        for mode in PLAN_MODES:
            try:
                with conn.transaction(force_rollback=True):
                    conn.execute(timeout)
                    conn.execute(sql.SQL("SET LOCAL plan_cache_mode = {}").format(sql.Literal(f"force_{mode}_plan")))
                    text = "\n".join(_execute(conn, batch, lease_s, explain=True))
                out[mode] = summarize_plan(text)
            except psycopg.errors.QueryCanceled as err:
                out[mode] = {"error": str(err).strip().splitlines()[0]}
        out["auto"] = _auto_choice(conn, batch, lease_s, timeout)
    finally:
        conn.execute(sql.SQL("DEALLOCATE {}").format(sql.Identifier(_STATEMENT)))
    return out


def _auto_choice(conn: psycopg.Connection, batch: int, lease_s: float, timeout: sql.Composed) -> str | None:
    """Which plan ``plan_cache_mode = auto`` uses from the sixth execution on (None if unknown)."""
    counts = sql.SQL("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = {}").format(
        sql.Literal(_STATEMENT))
    try:
        with conn.transaction(force_rollback=True):
            conn.execute(timeout)
            conn.execute("SET LOCAL plan_cache_mode = auto")
            for _ in range(CUSTOM_PLANS_BEFORE_GENERIC):
                _execute(conn, batch, lease_s, explain=False)
            before = conn.execute(counts).fetchone()
            _execute(conn, batch, lease_s, explain=False)
            after = conn.execute(counts).fetchone()
    except (psycopg.errors.QueryCanceled, psycopg.errors.UndefinedColumn):
        return None  # too slow to run six times, or a server before 14 (no plan counters)
    return "generic" if after[0] > before[0] else "custom"


def summarize_plan(text: str) -> dict:
    """``{"text", "scan", "nodes", "shared_buffers", "execution_ms"}`` of an EXPLAIN
    (ANALYZE, BUFFERS) text: ``scan`` names the plan's table scans in order,
    joined by `` + `` (the one that finds candidate rows, then the one the
    UPDATE joins them with: e.g. ``Index Scan using jobs_pending_claim_order_idx
    on jobs + Index Scan using jobs_pkey on jobs j``; the CTE scan is left out),
    ``shared_buffers`` the top node's shared hit + read for the whole claim,
    ``execution_ms`` the reported execution time. Missing values are None.
    """
    nodes = plan_nodes(text)
    scans = [n for n in nodes if " Scan" in n and not n.startswith("CTE Scan")]
    scan = " + ".join(scans) if scans else None
    shared = None
    match = _BUFFERS_RE.search(text)
    if match:
        parts = dict(p.split("=") for p in match.group(1).split())
        shared = int(parts.get("hit", 0)) + int(parts.get("read", 0))
    ms = _EXECUTION_RE.search(text)
    return {"text": text, "scan": scan, "nodes": nodes, "shared_buffers": shared,
            "execution_ms": float(ms.group(1)) if ms else None}


def plans_text(plans: dict, when: str) -> str:
    """The ``claim_plan.txt`` text: the plan the workers use first, then the other, each headed."""
    auto = plans.get("auto")
    order = [auto] + [m for m in PLAN_MODES if m != auto] if auto else list(PLAN_MODES)
    parts = [f"-- claim plans {when}; the workers' prepared claim uses the "
             f"{auto + ' plan' if auto else 'plan that plan_cache_mode = auto picks (unknown here)'}"]
    for mode in order:
        plan = plans.get(mode) or {}
        parts.append(f"-- {mode} plan (plan_cache_mode = force_{mode}_plan)"
                     + (" <- used by the workers" if mode == auto else ""))
        parts.append(plan.get("text") or f"capture failed: {plan.get('error', 'not captured')}")
    return "\n".join(parts)


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
