"""The claim's plan on MariaDB, from ``EXPLAIN FORMAT=JSON`` and ``ANALYZE FORMAT=JSON``
(https://mariadb.com/kb/en/analyze-format-json/): what is captured and when, docs/mariadb.md ("Plans")."""

from __future__ import annotations

import json

from bench.analysis.claim_growth import growth_warning
from bench.engines.base import EngineError
from bench.engines.mariadb import policies
from bench.engines.mariadb.adapter import first_line, translated
from bench.workload.queues import queue_count, queue_names

#: Access types that read a whole table or index (MariaDB's ``access_type``): a claim that uses one
#: grows with the table, history included.
FULL_SCANS = ("ALL", "index")


def _tables(node, out: list, sorted_by: list) -> None:
    if isinstance(node, dict):
        if "filesort" in node or "read_sorted_file" in node:
            sorted_by.append(True)
        if "table_name" in node:
            out.append(node)
        for value in node.values():
            _tables(value, out, sorted_by)
    elif isinstance(node, list):
        for value in node:
            _tables(value, out, sorted_by)


def summarize_plan(text: str) -> dict:
    """``{"text", "scan", "nodes", "rows_examined", "execution_ms", "filesort", "shared_buffers": None}`` of a
    ``FORMAT=JSON`` plan (``scan`` like ``range on jobs using <index>``; rows read, else estimated;
    ``execution_ms`` None when only planned). Raises ValueError when ``text`` is not such JSON."""
    plan = json.loads(text)
    tables, sorted_by = [], []
    _tables(plan, tables, sorted_by)
    scans = []
    rows = 0.0
    for t in tables:
        scan = f"{t.get('access_type', '?')} on {t['table_name']}"
        if t.get("key"):
            scan += f" using {t['key']}"
        scans.append(scan)
        rows += float(t.get("r_rows", t.get("rows", 0)) or 0) * float(t.get("r_loops", 1) or 1)
    block = plan.get("query_block", {})
    return {"text": json.dumps(plan, indent=2), "scan": " + ".join(scans) + (" (filesort)" if sorted_by else ""),
            "nodes": scans, "rows_examined": rows, "filesort": bool(sorted_by), "shared_buffers": None,
            "execution_ms": block.get("r_total_time_ms")}


def capture_plans(conn, cfg, when: str) -> tuple[dict | None, str]:
    """``({"auto": None, "explain": PLAN}, when)`` of the claim SELECT's ``EXPLAIN FORMAT=JSON``, or ``(None, why)``."""
    select = policies.claim_select(cfg.schema, cfg.policy, cfg.index, cfg.batch, queue_names(queue_count(cfg)))
    try:
        with translated(), conn.cursor() as cur:
            cur.execute("EXPLAIN FORMAT=JSON " + select)
            text = cur.fetchone()[0]
        return {"auto": None, "explain": summarize_plan(text)}, when
    except (EngineError, ValueError) as err:
        return None, f"{when}: capture failed: {first_line(err)}"


def workers_plan(explain: dict | None) -> dict:
    """``summary.json``'s ``plans.workers``: ``plan`` ``text``, with :func:`summarize_plan`'s keys from
    ``explain`` (``{"worker", "text"}`` or ``{"worker", "error"}``)."""
    out = {"plan": "text", "plan_cache": None, "generic_executions": None, "custom_executions": None,
           "sessions_read": 0, "session_errors": [], "explained_on": (explain or {}).get("worker")}
    try:
        if explain and explain.get("text"):
            out.update(summarize_plan(explain["text"]))
            return out
    except ValueError as err:
        explain = {"error": f"not a JSON plan: {err}"}
    out.update({"text": None, "scan": None, "nodes": [], "shared_buffers": None, "execution_ms": None,
                "rows_examined": None, "error": (explain or {}).get("error", "not captured")})
    return out


def plans_text(captured: dict | None, when: str, workers: dict | None) -> str:
    """``claim_plan.txt``: the workers' ``ANALYZE FORMAT=JSON``, then the admin session's ``EXPLAIN``."""
    parts = []
    if workers is not None:
        parts.append(f"-- the workers' claim SELECT as their own session ran it (sent as text, planned on every "
                     f"execution): ANALYZE FORMAT=JSON on {workers.get('explained_on') or 'no worker'}'s session "
                     "as the load stopped, rolled back")
        parts.append(workers.get("text") or f"capture failed: {workers.get('error', 'not captured')}")
    explain = (captured or {}).get("explain")
    parts.append(f"-- EXPLAIN FORMAT=JSON of the claim SELECT on the tool's own session {when}")
    parts.append((explain or {}).get("text") or "not captured")
    return "\n".join(parts)


def plan_warnings(workers: dict | None, growth: dict) -> list[str]:
    """Red lines: the workers' claim reads a whole table or index, or claim latency grew with the table."""
    warnings = []
    scans = (workers or {}).get("scan") or ""
    if any(part.split(" on ")[0] in FULL_SCANS for part in scans.replace(" (filesort)", "").split(" + ")):
        rows = workers.get("rows_examined")
        warnings.append(f"The workers' claim reads a whole table or index: {workers['scan']}"
                        + (f", {rows:,.0f} rows examined per claim (ANALYZE FORMAT=JSON on "
                           f"{workers['explained_on']}'s own session as the load stopped)" if rows is not None else "")
                        + ". Claim cost grows with the table, history included, and InnoDB locks what it scans.")
    elif scans.endswith(" (filesort)"):
        rows = workers.get("rows_examined")
        warnings.append(f"The workers' claim sorts the eligible rows it reads (filesort): {workers['scan']}"
                        + (f", {rows:,.0f} rows examined per claim" if rows is not None else "")
                        + ". No index serves the claim order, so every claim reads, and InnoDB locks, every eligible "
                          "row before the LIMIT: concurrent SKIP LOCKED claims then come back empty while work waits "
                          "(FR-07) and claim cost grows with the backlog. An index in claim order (INDEX=composite) "
                          "lets the claim stop at its first rows.")
    line = growth_warning(growth, "rows")
    if line:
        warnings.append(line)
    return warnings
