"""The claim's entries in ``pg_stat_statements``, reset at the measured start and read at its end
(https://www.postgresql.org/docs/current/pgstatstatements.html; docs/reading-the-report.md)."""

from __future__ import annotations

import psycopg

from bench.config.queue_definition import QueueDefinition
from bench.engines.postgres.db import not_shipped
from bench.engines.postgres.defined_sql import CLAIMED_CTE, positional

#: Matches the built-in claim's normalised text (bench.engines.postgres.builtin_queue: its CTE picked).
_CLAIM_MATCH = "%WITH picked AS MATERIALIZED%"  # also the plan capture's PREPARE text


def unavailable_reason(conn: psycopg.Connection) -> str | None:
    """None when pg_stat_statements can be read here, else why not (one line)."""
    row = conn.execute("""
        SELECT (SELECT extversion FROM pg_extension WHERE extname = 'pg_stat_statements'),
               current_setting('shared_preload_libraries'), current_setting('server_version_num')::int""").fetchone()
    installed, preload, version = row
    if version < 130000:
        return "needs PostgreSQL 13 or later (mean_exec_time)"
    missing = not_shipped(conn, "pg_stat_statements")
    if missing:
        return missing
    if "pg_stat_statements" not in preload:
        return "pg_stat_statements is not in shared_preload_libraries"
    if installed is None:
        return ("the extension is loaded but not created in this database "
                "(CREATE EXTENSION pg_stat_statements; queue-bench creates nothing outside its schema)")
    return None


_CLAIM_ENTRIES = """
    FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
    WHERE d.datname = current_database() AND s.query LIKE %(claim)s AND s.query LIKE %(table)s"""


def _match(schema: str, defn: QueueDefinition) -> dict[str, str]:
    # The built-in claim by its picked CTE and its table, "schema"."jobs"; a wrapped claim by the wrapper's
    # CTE (defined_sql.CLAIMED_CTE): it names its table unqualified.
    if defn.claim_row:
        return {"claim": _CLAIM_MATCH, "table": f'%"{schema}"."{defn.table}"%'}
    return {"claim": f"WITH {CLAIMED_CTE} AS (%", "table": "%"}


#: The tool's own statements in this database: those that name its schema, and the claim.
_TOOL_ENTRIES = """
    FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
    WHERE d.datname = current_database()
      AND (s.query LIKE %(schema)s OR (s.query LIKE %(claim)s AND s.query LIKE %(table)s))"""


def _tool_match(schema: str, defn: QueueDefinition) -> dict[str, str]:
    return {**_match(schema, defn), "schema": f'%"{schema}".%'}


def reset_claim(conn: psycopg.Connection, schema: str, defn: QueueDefinition) -> int:
    """Reset the entries of the tool's own statements (``schema``'s and ``defn``'s claim; this database
    only); returns how many."""
    rows = conn.execute("SELECT pg_stat_statements_reset(s.userid, s.dbid, s.queryid)" + _TOOL_ENTRIES,
                        _tool_match(schema, defn)).fetchall()
    return len(rows)


def read_statements(conn: psycopg.Connection, schema: str, defn: QueueDefinition) -> dict:
    """``{"statements_exec_ms", "statements_calls", "statements_blks_hit", "statements_blks_read"}``: the
    execution time (ms, ``total_exec_time``), calls and shared buffers hit and read of the tool's own statements
    since :func:`reset_claim`: the workers', the reaper's and the monitor's (``schema``'s and ``defn``'s claim;
    this database only)."""
    row = conn.execute("SELECT sum(total_exec_time), sum(calls)::bigint, sum(shared_blks_hit)::bigint, "
                       "sum(shared_blks_read)::bigint" + _TOOL_ENTRIES, _tool_match(schema, defn)).fetchone()
    names = ("statements_exec_ms", "statements_calls", "statements_blks_hit", "statements_blks_read")
    return {name: None if value is None else (round(value, 3) if i == 0 else int(value))
            for i, (name, value) in enumerate(zip(names, row))}


def read_claim(conn: psycopg.Connection, schema: str, defn: QueueDefinition) -> dict:
    """``{"calls", "mean_ms", "shared_blks_per_call"}`` summed over the entries of ``defn``'s claim
    (calls-weighted mean); values None when the claim has no entry."""
    calls, mean_ms, blks = conn.execute(
        "SELECT sum(calls)::bigint, sum(total_exec_time) / nullif(sum(calls), 0), "
        "sum(shared_blks_hit + shared_blks_read)::float8 / nullif(sum(calls), 0)" + _CLAIM_ENTRIES,
        _match(schema, defn)).fetchone()
    return {"calls": int(calls) if calls is not None else None,
            "mean_ms": round(mean_ms, 4) if mean_ms is not None else None,
            "shared_blks_per_call": round(blks, 2) if blks is not None else None}


#: The statements a worker completes its jobs with (one per batch, ``complete_many``, or one per job).
COMPLETION_KEYS = ("complete", "complete_many")


def completion_texts(defn: QueueDefinition) -> list[str]:
    """The texts of ``defn``'s completion statements as the workers send them (``$n`` parameters:
    :class:`bench.engines.postgres.sessions.PgWorkerSession`)."""
    order = defn.parameter_order
    return [positional(defn.statements[key], order.get(key, ()))[0] for key in COMPLETION_KEYS
            if key in defn.statements]


#: A constant (``NULL``, ``true`` and ``false`` among them) or a parameter: each reads as one placeholder when the
#: completion's entries are matched, since an entry first made at a statement's parse has its constants replaced
#: by ``$n`` (https://www.postgresql.org/docs/current/pgstatstatements.html; a stateless session parses every
#: execution), one first made at a prepared statement's execution has them as written.
_CONSTANT = r"(\$[0-9]+|'(''|[^'])*'|\m[0-9]+(\.[0-9]+)?\M|\m(null|true|false)\M)"
_NORMALISED = "regexp_replace(btrim({}, E' \\n\\t;'), %(constant)s, '?', 'gi')"


def read_completion(conn: psycopg.Connection, schema: str, defn: QueueDefinition) -> dict:
    """``{"completion_calls", "completion_exec_ms"}``: calls and total execution time (ms) of ``defn``'s completion
    statements (matched by their text as sent, constants and parameters aside; this database only) since
    :func:`reset_claim`; None when none has an entry; ``{"completion_unavailable": why}`` when a completion's text
    does not name ``schema`` (its entry was not reset, and another schema's run of the same text shares it)."""
    texts = completion_texts(defn)
    if not texts or any(f'"{schema}".' not in text for text in texts):
        return {"completion_unavailable": "the queue definition's completion does not name the run's schema: its "
                                          "statistics cannot be told apart from the same text run elsewhere"}
    calls, total_ms = conn.execute(
        "SELECT sum(calls)::bigint, sum(total_exec_time) FROM pg_stat_statements s JOIN pg_database d ON "
        "d.oid = s.dbid WHERE d.datname = current_database() AND " + _NORMALISED.format("s.query")
        + " IN (SELECT " + _NORMALISED.format("t") + " FROM unnest(%(texts)s::text[]) AS t)",
        {"texts": texts, "constant": _CONSTANT}).fetchone()
    return {"completion_calls": int(calls) if calls is not None else None,
            "completion_exec_ms": round(total_ms, 4) if total_ms is not None else None}
