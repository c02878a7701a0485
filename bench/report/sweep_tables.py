"""A sweep report's tables, as rows of text for the template: banners, cells, claim plans, sizes, runs; means
as 'mean (low–high)' (95 % CI over repetitions), latencies in ms."""

from __future__ import annotations

import re
from typing import Any, Sequence

import pandas as pd

from bench.report.format import NA, ci_bytes_text, fmt_num, ms_text, stat_text, stat_texts
from bench.results.sweep import Cell, SweepResults
from bench.results.values import fmt_label, is_missing

__all__ = ["banners", "cell_rows", "plan_rows", "run_rows", "size_rows", "text_plan_rows"]


def banners(sweep: SweepResults) -> list[str]:
    """The red lines above the report: an incomplete sweep, failed runs, suspect runs, queue libraries measured
    on their SQL path (``library_mode`` ``sql``), broken invariants."""
    lines = []
    missing = [c for c in sweep.cells if len(c.runs) == 0]
    short = [c for c in sweep.cells if 0 < len(c.runs) < c.expected_reps]
    if sweep.meta.get("complete") is False:
        text = (f"incomplete sweep: {len(missing)} of {len(sweep.cells)} cells are missing (no run recorded)")
        if short:
            text += f"; {len(short)} more have fewer than {sweep.meta.get('repetitions')} repetitions"
        lines.append(text)
    runs = sweep.runs
    library = sorted({str(q) for q, m in zip(runs.get("queue", []), runs.get("library_mode", [])) if m == "sql"})
    for n, text in (
            (int((~runs["done"]).sum()), "{n} run{s} failed (red below); their cells are excluded from the capacity "
                                         "answer"),
            (sum(1 for s in runs["suspect"] if s is True), "{n} suspect run{s} (load generator or monitor limits; see "
                                                           "each run's report)"),
            (len(library), "{names}: a queue library measured on its SQL path (its statements sent by "
                           "queue-bench's workers), not by its own worker: its figures here are not what the library "
                           "does, and do not rank libraries"),
            (sum(1 for d, i in zip(runs["done"], runs["invariants_ok"]) if d and i is not True),
             "invariants not ok in {n} run{s}: a correctness bug in the claim protocol or an unaudited run; never use "
             "those figures")):
        if n:
            lines.append(text.format(n=n, s="s" if n > 1 else "", names=", ".join(library)))
    return lines


def _cell_row(sweep: SweepResults, cell: Cell, skip: Sequence[str] = ()) -> dict:
    """What every cell table's row starts with: ``cell_id``, ``params`` (the cell's value of each parameter that
    tells cells apart, ``sweep.columns``, as labels, less ``skip``), each of ``skip`` as its own key, ``bad``."""
    return {"cell_id": cell.cell_id, "params": [fmt_label(sweep.value(cell, a)) for a in sweep.columns if a not in skip],
            **{a: fmt_label(sweep.value(cell, a)) for a in skip}, "bad": cell.bad}


#: The columns of the cells table, in its order.
CELL_COLUMNS = ("throughput_jobs_per_s", "claims_per_s", "claim_p50_us", "claim_p99_us", "oldest_age_max_s",
                "empty_claims", "empty_claims_while_work_waited", "errors_total")


def cell_rows(sweep: SweepResults) -> list[dict]:
    """The main table, one row per cell, means (95 % CI) over its finished runs: ``{"cell_id", "params",
    "runs" ('done / expected'), "values" (throughput jobs/s, claims/s, claim p50 and p99 ms, oldest eligible
    age max s, empty claims, those while work waited, errors), "flags", "bad"}``."""
    return [{**_cell_row(sweep, cell), "runs": f"{int(cell.runs['done'].sum())} / {cell.expected_reps}",
             "values": [stat_text(cell, c) for c in CELL_COLUMNS], "flags": "; ".join(cell.flags)}
            for cell in sweep.cells]


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


def _plans(done: pd.DataFrame, *names: str) -> list[str]:
    """:func:`_mode_text` of each ``plan_<name>`` column of the finished runs ``done``."""
    return [_mode_text(done.get(f"plan_{name}", [])) for name in names]


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
        workers_scan, explain_scan = _plans(done, "workers_scan", "explain_scan")
        full = [s for s in (workers_scan, explain_scan) if re.search(r"^(ALL|index) on |\+ (ALL|index) on ", s)]
        rows.append({
            **_cell_row(sweep, cell, skip=("index",)), "workers_scan": workers_scan, "explain_scan": explain_scan,
            **stat_texts(cell, workers_rows="plan_workers_rows_examined", explain_rows="plan_explain_rows_examined"),
            "warning": (f"the claim reads a whole table or index ({full[0]}): every claim's locking read "
                        "touches, and locks, every row it reads") if full else None})
    return rows


def plan_rows(sweep: SweepResults) -> list[dict]:
    """Plan summary per cell that recorded a PostgreSQL plan (plan_* and pgss_* columns of cells.csv)."""
    rows = []
    for cell in sweep.cells:
        done = cell.done
        if not _recorded(done, ("plan_custom_scan", "plan_generic_scan")):
            continue
        custom, generic, workers, workers_scan = _plans(done, "custom_scan", "generic_scan", "workers", "workers_scan")
        dropped = _dropped_indexes(custom, generic)
        warning = None
        if dropped:
            warning = (f"the generic plan stops using {' and '.join(dropped)} ({generic}) while the custom "
                       f"plan uses {'it' if len(dropped) == 1 else 'them'}")
            warning += (": the workers' sessions ran the generic plan, so every claim after their fifth ran it"
                        if workers == "generic" else
                        f"; the workers ran {workers} plans — a prepared claim that switches to the generic "
                        "plan, or plan_cache_mode = force_generic_plan, loses the index")
        pgss = tuple(stat_text(cell, c) for c in ("pgss_calls", "pgss_mean_ms", "pgss_shared_blks_per_call"))
        rows.append({
            **_cell_row(sweep, cell, skip=("index",)), "workers": workers, "workers_scan": workers_scan,
            "workers_scan_warning": "Seq Scan on jobs" in workers_scan,
            **{mode: {"scan": scan, **stat_texts(cell, buffers=f"plan_{mode}_buffers", ms=f"plan_{mode}_ms")}
               for mode, scan in (("custom", custom), ("generic", generic))},
            "pgss": pgss if any(v != NA for v in pgss) else None, "warning": warning})
    return rows


def size_rows(sweep: SweepResults) -> list[dict]:
    """Table and index sizes before and after the run (binary units), one row per cell that recorded them."""
    rows = []
    for cell in sweep.cells:
        stats = [cell.stat(c) for c in ("table_bytes_before", "table_bytes_after",
                                        "indexes_bytes_before", "indexes_bytes_after")]
        if all(s.n == 0 for s in stats):
            continue
        rows.append({**_cell_row(sweep, cell), "values": [ci_bytes_text(s) for s in stats]})
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
