"""One run's result files read for its report: ``run.json``, ``summary.json`` and ``intervals.csv``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.errors import BadInput
from bench.results.model import ResultsError, read_result, read_table

__all__ = ["PLOTTED_COLUMNS", "REQUIRED_FILES", "ReportError", "load_run"]

REQUIRED_FILES = ("run.json", "intervals.csv", "summary.json")
PLOTTED_COLUMNS = (
    "t_s", "claims", "jobs_completed", "claim_p50_us", "claim_p95_us",
    "claim_p99_us", "queue_depth", "oldest_eligible_age_s", "running", "lock_waiters",
)


class ReportError(BadInput):
    """A run directory is missing a required file or holds unreadable data (or data from a newer
    format_version)."""


def load_run(run_dir: Path) -> tuple[dict, dict, pd.DataFrame]:
    """``(run, summary, intervals)`` of ``run_dir``: the JSON objects as dicts (the summary with run.json's
    ``engine_capabilities``, when recorded) and the per-second rows (upgraded to this format:
    :func:`bench.results.model.read_table`), every column numeric (unparseable cells NaN), sorted by ``t_s`` (s
    since the measured start), indexed 0..n-1.

    Raises ReportError when a file of :data:`REQUIRED_FILES` is absent (named), a JSON file does not parse or
    holds no object, or ``intervals.csv`` does not parse or lacks a column of :data:`PLOTTED_COLUMNS`."""
    for name in REQUIRED_FILES:
        if not (run_dir / name).is_file():
            raise ReportError(f"{name} not found in run directory {run_dir}")
    run = _read_json(run_dir / "run.json")
    summary = _read_json(run_dir / "summary.json")
    if "engine_capabilities" in run:  # what the report reads of them (bench.report.run_format.engine_capability)
        summary["engine_capabilities"] = run["engine_capabilities"]
    try:
        df = read_table(run_dir, "intervals.csv", summary)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ReportError(f"intervals.csv in {run_dir} is unreadable: {exc}") from exc
    missing = [c for c in PLOTTED_COLUMNS if c not in df.columns]
    if missing:
        raise ReportError(f"intervals.csv in {run_dir} lacks columns: {', '.join(missing)}")
    df = df.apply(pd.to_numeric, errors="coerce").sort_values("t_s").reset_index(drop=True)
    return run, summary, df


def _read_json(path: Path) -> dict:
    """The result file ``path`` (:func:`bench.results.model.read_result`); ReportError naming it
    when it is not a JSON object or comes from a newer format."""
    try:
        return read_result(path)
    except ResultsError as exc:
        raise ReportError(str(exc)) from None
