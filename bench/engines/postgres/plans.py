"""The claim's plans on PostgreSQL: custom and generic under ``EXPLAIN (ANALYZE, BUFFERS)``, rolled back
(https://www.postgresql.org/docs/current/sql-explain.html), ``auto``'s pick
(https://www.postgresql.org/docs/current/sql-prepare.html, "Notes"), the workers' (docs/reading-the-report.md)."""

from __future__ import annotations

import re

import psycopg
from psycopg import sql

from bench.analysis.claim_growth import growth_warning
from bench.engines.base import EngineError
from bench.engines.postgres.adapter import QUERY_CANCELED, UNDEFINED_COLUMN, deallocate, prepare_named, translated

_STATEMENT = "qbench_claim_plan"
#: Executions with custom plans before ``auto`` considers the generic plan (plancache.c).
CUSTOM_PLANS_BEFORE_GENERIC = 5
PLAN_MODES = ("custom", "generic")

_BUFFERS_RE = re.compile(r"Buffers: shared((?: \w+=\d+)+)")
_EXECUTION_RE = re.compile(r"Execution Time: ([\d.]+) ms")


def _execute(conn: psycopg.Connection, args: list[str], explain: bool) -> list[str]:
    """Execute the prepared claim once with ``args`` (SQL literals); with ``explain`` return the EXPLAIN
    (ANALYZE, BUFFERS) lines."""
    stmt = (sql.SQL("EXECUTE {}({})").format(sql.Identifier(_STATEMENT), sql.SQL(", ".join(args))) if args
            else sql.SQL("EXECUTE {}").format(sql.Identifier(_STATEMENT)))
    if explain:
        return [r[0] for r in conn.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + stmt, prepare=False).fetchall()]
    # prepare=False: psycopg would otherwise prepare a repeated statement itself, and its
    # cache housekeeping (DEALLOCATE ALL) would drop ours.
    conn.execute(stmt, prepare=False)
    return []


def capture_prepared_plans(conn: psycopg.Connection, claim: str, args: list[str],
                           statement_timeout_ms: int = 60_000) -> dict:
    """``{"auto": "custom"|"generic"|None, "custom": PLAN, "generic": PLAN}`` of ``claim`` prepared (``args``: SQL
    literals in ``$n`` order), PLAN :func:`summarize_plan`'s or ``{"error": line}``; ``conn`` in autocommit.
    Raises psycopg.Error or the adapter's EngineError when the connection fails (callers translate)."""
    timeout = sql.SQL("SET LOCAL statement_timeout = {}").format(sql.Literal(statement_timeout_ms))
    out: dict = {"auto": None}
    # PREPARE is not transactional: deallocate whatever happens to the transactions.
    prepare_named(conn, _STATEMENT, claim)
    try:
        for mode in PLAN_MODES:
            try:
                with translated(), conn.transaction(force_rollback=True):
                    conn.execute(timeout)
                    conn.execute(sql.SQL("SET LOCAL plan_cache_mode = {}").format(sql.Literal(f"force_{mode}_plan")))
                    text = "\n".join(_execute(conn, args, explain=True))
                out[mode] = summarize_plan(text)
            except EngineError as err:
                if err.kind != QUERY_CANCELED:
                    raise
                out[mode] = {"error": str(err)}
        out["auto"] = _auto_choice(conn, args, timeout)
    finally:
        deallocate(conn, _STATEMENT)
    return out


def _auto_choice(conn: psycopg.Connection, args: list[str], timeout: sql.Composed) -> str | None:
    """Which plan ``plan_cache_mode = auto`` uses from the sixth execution on (None if unknown)."""
    counts = sql.SQL("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = {}").format(
        sql.Literal(_STATEMENT))
    try:
        with translated(), conn.transaction(force_rollback=True):
            conn.execute(timeout)
            conn.execute("SET LOCAL plan_cache_mode = auto")
            for _ in range(CUSTOM_PLANS_BEFORE_GENERIC):
                _execute(conn, args, explain=False)
            before = conn.execute(counts).fetchone()
            _execute(conn, args, explain=False)
            after = conn.execute(counts).fetchone()
    except EngineError as err:
        if err.kind not in (QUERY_CANCELED, UNDEFINED_COLUMN):
            raise
        return None  # too slow to run six times, or a server before 14 (no plan counters)
    return "generic" if after[0] > before[0] else "custom"


def summarize_plan(text: str) -> dict:
    """``{"text", "scan" (table scans joined by `` + ``, no CTE scans), "nodes", "shared_buffers" (top node's hit +
    read), "execution_ms"}`` of an EXPLAIN (ANALYZE, BUFFERS) text; None where missing."""
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


def plans_text(plans: dict | None, when: str, workers: dict | None = None) -> str:
    """The ``claim_plan.txt`` text: the workers' plan (:func:`workers_plan`), then each plan of a fresh
    statement (:func:`capture_prepared_plans`)."""
    parts = []
    if workers is not None:
        counts = ("" if workers.get("generic_executions") is None else
                  f", {workers['generic_executions']:,} generic and {workers['custom_executions']:,} custom "
                  f"executions over {workers['sessions_read']} sessions")
        parts.append(f"-- the workers' claim as their own sessions ran it: {workers.get('plan') or 'unknown'}"
                     f"{counts} (PLAN_CACHE={workers.get('plan_cache') or 'n/a, unprepared'}); "
                     f"EXPLAIN (ANALYZE, BUFFERS) on {workers.get('explained_on') or 'no worker'}'s session as the load stopped")
        parts.append(workers.get("text") or f"capture failed: {workers.get('error', 'not captured')}")
    if plans is None:
        return "\n".join(parts + [f"-- what each plan would do ({when}): not captured"])
    auto = plans.get("auto")
    parts.append(f"-- what each plan would do: a fresh statement prepared on the tool's own session {when}; "
                 f"for it plan_cache_mode = auto picks the {auto + ' plan' if auto else 'plan (unknown here)'} "
                 "from the sixth execution on")
    for mode in PLAN_MODES:
        plan = plans.get(mode) or {}
        parts.append(f"-- {mode} plan (plan_cache_mode = force_{mode}_plan)")
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


#: ``plans.workers.plan`` is ``generic`` (``custom``) when that kind is at least this share of the executions.
PLAN_SHARE = 0.95


def workers_plan(sessions: list[dict], explain: dict | None, *, prepared: bool, plan_cache: str) -> dict:
    """``summary.json`` ``plans.workers`` (``{"plan", "plan_cache", "generic_executions", "custom_executions",
    "sessions_read", "session_errors", "explained_on", "text", "scan", "nodes", "shared_buffers", "execution_ms"}``)
    from ``sessions`` (``{"worker", "generic_plans", "custom_plans"}`` or ``{"worker", "error"}``) and ``explain``;
    ``plan``: ``generic``/``custom`` (≥ :data:`PLAN_SHARE`), ``mixed``, ``unprepared`` or None."""
    read = [s for s in sessions if "error" not in s]
    generic = sum(s["generic_plans"] for s in read) if prepared and read else None
    custom = sum(s["custom_plans"] for s in read) if prepared and read else None
    if not prepared:
        plan = "unprepared"
    elif not generic and not custom:
        plan = None
    elif generic >= PLAN_SHARE * (generic + custom):
        plan = "generic"
    elif custom >= PLAN_SHARE * (generic + custom):
        plan = "custom"
    else:
        plan = "mixed"
    out = {"plan": plan, "plan_cache": plan_cache if prepared else None, "generic_executions": generic,
           "custom_executions": custom, "sessions_read": len(read),
           "session_errors": sorted({s["error"] for s in sessions if "error" in s}),
           "explained_on": (explain or {}).get("worker")}
    if explain and explain.get("text"):
        out.update(summarize_plan(explain["text"]))
    else:
        out.update({"text": None, "scan": None, "nodes": [], "shared_buffers": None, "execution_ms": None,
                    "error": (explain or {}).get("error", "not captured")})
    return out


def scans_table(scan: str | None, table: str = "jobs") -> bool:
    """True when :func:`summarize_plan`'s ``scan`` has a sequential scan of ``table`` (or its partitions,
    whose names start with it)."""
    return bool(scan) and any(part.startswith(f"Seq Scan on {table}") for part in scan.split(" + "))


def plan_warnings(workers: dict | None, growth: dict, table: str = "jobs") -> list[str]:
    """The report's red lines: the workers' plan scans the whole ``table``, claim latency grew with it
    (:func:`bench.analysis.claim_growth.claim_growth`); each with its measured cost per claim."""
    warnings = []
    if workers and scans_table(workers.get("scan"), table):
        cost = []
        if workers.get("shared_buffers") is not None:
            cost.append(f"{workers['shared_buffers']:,} shared buffers")
        if workers.get("execution_ms") is not None:
            cost.append(f"{workers['execution_ms']:,.3f} ms")
        how = {"generic": "the generic plan of their prepared claim runs",
               "custom": "the custom plans of their prepared claim run",
               "mixed": "their prepared claim (generic and custom plans) runs",
               "unprepared": "their unprepared claim runs"}.get(workers.get("plan"), "their claim runs")
        warnings.append(f"The workers' claim scans the whole queue table: {how} {workers['scan']}"
                        + (f", {' and '.join(cost)} per claim (EXPLAIN ANALYZE on {workers['explained_on']}'s "
                           "own session as the load stopped)" if cost else "")
                        + ". Claim cost grows with the table, history included.")
    line = growth_warning(growth, "tuples")
    if line:
        warnings.append(line)
    return warnings
