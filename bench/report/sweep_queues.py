"""A sweep with a ``queue`` axis: the queues side by side, one row per cell (:func:`queue_rows`), and each
queue library's own worker against its SQL path at one rate (:func:`client_overhead_rows`)."""

from __future__ import annotations

from bench.report.format import ci_text, stat_text, stat_texts
from bench.results.sweep import SweepResults
from bench.results.values import fmt_label

__all__ = ["client_overhead_rows", "queue_rows"]


def _done(cell, column: str) -> list:
    """The cell's finished runs' values of ``column`` ([] without the column: runs written before it existed)."""
    return cell.done[column].tolist() if column in cell.done else []


def _rate_text(rate) -> str:
    return "closed loop" if not rate else f"{fmt_label(rate)} jobs/s"


def _invariants(cell) -> tuple[str, bool]:
    """What the cell's runs' audits found, and whether it is bad: ``0 broken``, ``broken in N of M runs`` or
    ``not checked``, then the invariants a definition's audit cannot check."""
    oks = _done(cell, "invariants_ok")
    broken = sum(1 for v in oks if v is False)
    unknown = sum(1 for v in oks if v is not True and v is not False)
    text = (f"broken in {broken} of {len(oks)} runs" if broken else
            f"not checked in {unknown} of {len(oks)} runs" if unknown else "0 broken" if oks else "no run")
    unchecked = sorted({name for v in _done(cell, "invariants_unchecked") if isinstance(v, str) for name in v.split()})
    if unchecked:
        text += "; cannot check " + ", ".join(unchecked)
    return text, bool(broken or unknown or not oks)


def _library_mode(cell) -> str | None:
    """How the cell's queue library was driven (``worker``, ``sql``), from its runs' ``library_mode``; None for a
    queue that is not a library (or runs written before the column existed)."""
    modes = {v for v in _done(cell, "library_mode") if isinstance(v, str) and v}
    return ", ".join(sorted(modes)) or None


def _paired(sweep: SweepResults) -> dict:
    """(queue, rate) -> {mode: cell} for each queue library the sweep ran in both modes at one rate."""
    by = {}
    for cell in sweep.cells:
        mode = _library_mode(cell)
        if mode in ("worker", "sql"):
            by.setdefault((str(sweep.value(cell, "queue")), sweep.value(cell, "rate")), {})[mode] = cell
    return {k: v for k, v in by.items() if len(v) == 2}


def client_overhead_rows(sweep: SweepResults) -> list[dict]:
    """One row per queue library and rate the sweep ran in both modes: ``{"queue", "rate", "worker", "sql",
    "ratio", "claim_worker", "claim_sql"}``: jobs/s of each mode (mean, 95 % CI), the SQL path's over the
    worker's, and their claim p50 (ms)."""
    rows = []
    for (queue, rate), cells in sorted(_paired(sweep).items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        worker, sql_path = cells["worker"].stat("throughput_jobs_per_s"), cells["sql"].stat("throughput_jobs_per_s")
        ratio = sql_path.mean / worker.mean if worker.n and sql_path.n and worker.mean > 0 else None
        rows.append({"queue": fmt_label(queue), "rate": _rate_text(rate),
                     "worker": ci_text(worker), "sql": ci_text(sql_path),
                     "ratio": "-" if ratio is None else f"{ratio:.2f}x",
                     "claim_worker": stat_text(cells["worker"], "claim_p50_us"),
                     "claim_sql": stat_text(cells["sql"], "claim_p50_us")})
    return rows


def queue_rows(sweep: SweepResults) -> list[dict] | None:
    """One row per cell of a sweep whose ``queue`` varies, else None: ``{"cell_id", "queue", "rate",
    "throughput", "claim_p50", "claim_p99", "pickup_p50", "oldest_age", "invariants", "library_mode",
    "bad"}``, 'mean (95 % CI)' over repetitions, times in ms (the oldest eligible age in s). A library run in
    both modes is shown by its own worker."""
    if "queue" not in sweep.varying:
        return None
    paired_sql = {id(cells["sql"]) for cells in _paired(sweep).values()}
    rows = []
    for cell in sweep.cells:
        if id(cell) in paired_sql:
            continue
        invariants, broken = _invariants(cell)
        mode = _library_mode(cell)
        label = fmt_label(sweep.value(cell, "queue")) + {"sql": " (its SQL path, not its own worker)",
                                                         "worker": " (its own worker)"}.get(mode, "")
        rows.append({
            "cell_id": cell.cell_id, "queue": label, "library_mode": mode,
            "rate": _rate_text(sweep.value(cell, "rate")),
            **stat_texts(cell, throughput="throughput_jobs_per_s", claim_p50="claim_p50_us", claim_p99="claim_p99_us",
                         pickup_p50="pickup_p50_us", oldest_age="oldest_age_max_s"),
            "invariants": invariants, "bad": cell.bad or broken})
    return rows
