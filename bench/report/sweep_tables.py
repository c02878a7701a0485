"""A sweep report's tables, as rows of text for the template: banners, cells, claim plans, sizes, runs; means
as 'mean (low–high)' (95 % CI over repetitions), latencies in ms."""

from __future__ import annotations

import re
from typing import Any, Sequence

import pandas as pd

from bench.report.format import NA, ci_bytes_text, ci_text, fmt_num, ms_text
from bench.results.sweep import Cell, SweepResults
from bench.results.values import fmt_label, is_missing

__all__ = ["banners", "cell_rows", "plan_rows", "run_rows", "size_rows", "text_plan_rows"]


def banners(sweep: SweepResults) -> list[str]:
    """The red lines above the report: an incomplete sweep, failed runs, suspect runs, queue libraries measured
    on their SQL path (``library_mode`` ``sql``), broken invariants."""
    lines = []
    n_cells = len(sweep.cells)
    missing = [c for c in sweep.cells if len(c.runs) == 0]
    short = [c for c in sweep.cells if 0 < len(c.runs) < c.expected_reps]
    if sweep.meta.get("complete") is False:
        text = (f"incomplete sweep: {len(missing)} of {n_cells} cells are missing (no run recorded)")
        if short:
            text += f"; {len(short)} more have fewer than {sweep.meta.get('repetitions')} repetitions"
        lines.append(text)
    failed = int((~sweep.runs["done"]).sum()) if len(sweep.runs) else 0
    if failed:
        lines.append(f"{failed} run{'s' if failed > 1 else ''} failed (red below); their cells are excluded "
                     "from the capacity answer")
    suspect = int(sum(1 for s in sweep.runs["suspect"] if s is True)) if len(sweep.runs) else 0
    if suspect:
        lines.append(f"{suspect} suspect run{'s' if suspect > 1 else ''} (load generator or monitor limits; "
                     "see each run's report)")
    library = sorted({str(q) for q, m in zip(sweep.runs.get("queue", []), sweep.runs.get("library_mode", []))
                      if m == "sql"})
    if library:
        lines.append(f"{', '.join(library)}: a queue library measured on its SQL path (its statements sent by "
                     "queue-bench's workers), not by its own worker: its figures here are not what the library "
                     "does, and do not rank libraries")
    bad_inv = int(sum(1 for d, i in zip(sweep.runs["done"], sweep.runs["invariants_ok"]) if d and i is not True)) \
        if len(sweep.runs) else 0
    if bad_inv:
        lines.append(f"invariants not ok in {bad_inv} run{'s' if bad_inv > 1 else ''}: a correctness bug in "
                     "the claim protocol or an unaudited run; never use those figures")
    return lines


def _param_cells(sweep: SweepResults, cell: Cell, skip: Sequence[str] = ()) -> list[str]:
    """The cell's value of each parameter that tells cells apart (``sweep.columns``, less ``skip``), as labels."""
    return [fmt_label(sweep.value(cell, a)) for a in sweep.columns if a not in skip]


def cell_rows(sweep: SweepResults) -> list[dict]:
    """The main table, one row per cell, means (95 % CI) over its finished runs: ``{"cell_id", "params",
    "runs" ('done / expected'), "values" (throughput jobs/s, claims/s, claim p50 and p99 ms, oldest eligible
    age max s, empty claims, those while work waited, errors), "flags", "bad"}``."""
    rows = []
    for cell in sweep.cells:
        rows.append({
            "cell_id": cell.cell_id, "params": _param_cells(sweep, cell),
            "runs": f"{int(cell.runs['done'].sum())} / {cell.expected_reps}",
            "values": [ci_text(cell.stat("throughput_jobs_per_s")), ci_text(cell.stat("claims_per_s")),
                       ci_text(cell.stat("claim_p50_us"), 1000.0), ci_text(cell.stat("claim_p99_us"), 1000.0),
                       ci_text(cell.stat("oldest_age_max_s")), ci_text(cell.stat("empty_claims")),
                       ci_text(cell.stat("empty_claims_while_work_waited")), ci_text(cell.stat("errors_total"))],
            "flags": "; ".join(cell.flags), "bad": cell.bad,
        })
    return rows


def _mode_text(values: Sequence[Any]) -> str:
    """The value all runs agree on, or each distinct value with its count."""
    vals = [str(v) for v in values if not is_missing(v) and str(v) != ""]
    if not vals:
        return NA
    counts = pd.Series(vals).value_counts()
    if len(counts) == 1:
        return counts.index[0]
    return " / ".join(f"{v} ({n} runs)" for v, n in counts.items())


def _dropped_indexes(custom_scan: str, generic_scan: str) -> list[str]:
    """Indexes the custom plan scans ("… using <index> …") that the generic plan does not use; a scan field
    may join several nodes with " + "."""
    if not custom_scan or not generic_scan or generic_scan == NA:
        return []
    used = list(dict.fromkeys(re.findall(r"\busing (\S+)", custom_scan)))
    return [idx for idx in used if not re.search(rf"\busing {re.escape(idx)}(\s|$)", generic_scan)]


def _recorded(done: pd.DataFrame, columns: Sequence[str]) -> bool:
    """Some finished run has a value in one of ``columns``."""
    return not done.empty and any(c in done and done[c].astype(str).str.strip().ne("").any() for c in columns)


def text_plan_rows(sweep: SweepResults) -> list[dict]:
    """Plan summary per cell of an engine without prepared plans (MariaDB), from the plan_workers_* and
    plan_explain_* columns: ``{"cell_id", "params" (less index), "index", "engine", "workers_scan",
    "workers_rows", "explain_scan", "explain_rows", "warning", "bad"}``; ``warning`` when a scan reads a whole
    table or index (access types ``ALL``, ``index``)."""
    rows = []
    for cell in sweep.cells:
        done = cell.done
        if str(sweep.value(cell, "plan_workers")) != "text" and not _recorded(done, ("plan_explain_scan",)):
            continue
        workers_scan = _mode_text(done.get("plan_workers_scan", []))
        explain_scan = _mode_text(done.get("plan_explain_scan", []))
        full = [s for s in (workers_scan, explain_scan) if re.search(r"^(ALL|index) on |\+ (ALL|index) on ", s)]
        rows.append({
            "cell_id": cell.cell_id, "params": _param_cells(sweep, cell, skip=("index",)),
            "index": fmt_label(sweep.value(cell, "index")),
            "workers_scan": workers_scan, "workers_rows": ci_text(cell.stat("plan_workers_rows_examined")),
            "explain_scan": explain_scan, "explain_rows": ci_text(cell.stat("plan_explain_rows_examined")),
            "warning": (f"the claim reads a whole table or index ({full[0]}): every claim's locking read "
                        "touches, and locks, every row it reads") if full else None,
            "bad": cell.bad,
        })
    return rows


def plan_rows(sweep: SweepResults) -> list[dict]:
    """Plan summary per cell that recorded a PostgreSQL plan (plan_* and pgss_* columns of cells.csv)."""
    rows = []
    for cell in sweep.cells:
        done = cell.done
        if not _recorded(done, ("plan_custom_scan", "plan_generic_scan")):
            continue
        custom = _mode_text(done.get("plan_custom_scan", []))
        generic = _mode_text(done.get("plan_generic_scan", []))
        workers = _mode_text(done.get("plan_workers", []))
        workers_scan = _mode_text(done.get("plan_workers_scan", []))
        dropped = _dropped_indexes(custom, generic)
        warning = None
        if dropped:
            warning = (f"the generic plan stops using {' and '.join(dropped)} ({generic}) while the custom "
                       f"plan uses {'it' if len(dropped) == 1 else 'them'}")
            warning += (": the workers' sessions ran the generic plan, so every claim after their fifth ran it"
                        if workers == "generic" else
                        f"; the workers ran {workers} plans — a prepared claim that switches to the generic "
                        "plan, or plan_cache_mode = force_generic_plan, loses the index")
        pgss = (ci_text(cell.stat("pgss_calls")), ci_text(cell.stat("pgss_mean_ms")),
                ci_text(cell.stat("pgss_shared_blks_per_call")))
        rows.append({
            "cell_id": cell.cell_id, "index": fmt_label(sweep.value(cell, "index")),
            "params": _param_cells(sweep, cell, skip=("index",)), "workers": workers, "workers_scan": workers_scan,
            "workers_scan_warning": "Seq Scan on jobs" in workers_scan,
            "custom": {"scan": custom, "buffers": ci_text(cell.stat("plan_custom_buffers")),
                       "ms": ci_text(cell.stat("plan_custom_ms"))},
            "generic": {"scan": generic, "buffers": ci_text(cell.stat("plan_generic_buffers")),
                        "ms": ci_text(cell.stat("plan_generic_ms"))},
            "pgss": pgss if any(v != NA for v in pgss) else None,
            "warning": warning, "bad": cell.bad,
        })
    return rows


def size_rows(sweep: SweepResults) -> list[dict]:
    """Table and index sizes before and after the run (binary units), one row per cell that recorded them."""
    rows = []
    for cell in sweep.cells:
        stats = [cell.stat(c) for c in ("table_bytes_before", "table_bytes_after",
                                        "indexes_bytes_before", "indexes_bytes_after")]
        if all(s.n == 0 for s in stats):
            continue
        rows.append({"cell_id": cell.cell_id, "params": _param_cells(sweep, cell),
                     "values": [ci_bytes_text(s) for s in stats], "bad": cell.bad})
    return rows


def run_rows(sweep: SweepResults) -> list[dict]:
    """One row per run with a relative link to its report.html."""
    rows = []
    by_id = {c.cell_id: c for c in sweep.cells}
    for _, r in sweep.runs.iterrows():
        cell = by_id.get(r["cell_id"])
        problems = []
        if not r["done"]:
            problems.append(r["status"] or "no status")
        elif r["complete"] is not True:
            problems.append("not complete" if r["complete"] is False else "summary.json missing")
        if r["suspect"] is True:
            problems.append("suspect")
        if r["saturated"] is True:
            problems.append("saturated (arrivals outpaced the workers)")
        if r["done"] and r["invariants_ok"] is not True:
            problems.append("invariants not ok" if r["invariants_ok"] is False else "invariants unknown")
        rows.append({
            "cell_id": r["cell_id"], "rep": fmt_num(r["rep"]), "run_id": r["run_id"],
            "label": cell.label if cell else "",
            "href": r["report_href"] if isinstance(r["report_href"], str) else None,  # NaN when absent
            "run_dir": r["run_dir"],
            "throughput": fmt_num(r["throughput_jobs_per_s"], 1),
            "claim_p99": ms_text(r["claim_p99_us"]),
            "problems": "; ".join(problems) or "ok", "bad": bool(problems),
        })
    return rows
