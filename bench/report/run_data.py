"""One run's result files read for its report: ``run.json``, ``summary.json`` and ``intervals.csv``.

Used by :mod:`bench.report.run_page`. Reads files only; never touches a database.

Public API:
    load_run(run_dir) -> (run, summary, intervals)
    ReportError       -> raised when the run directory cannot be rendered
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.errors import BadInput
from bench.results.model import ResultsError, read_result

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
    """Read ``run.json``, ``summary.json`` and ``intervals.csv`` of ``run_dir``.

    Returns:
        ``(run, summary, intervals)``: the two JSON objects as dicts (the summary with run.json's
        ``engine_capabilities``, when recorded), and the per-second rows
        as a DataFrame with every column numeric (unparseable cells NaN), sorted by ``t_s``
        (seconds since the measured start) with a fresh 0..n-1 index.

    Raises:
        ReportError: a file of :data:`REQUIRED_FILES` is absent (the message names it), a JSON
            file does not parse or holds no object, ``intervals.csv`` does not parse, or it
            lacks a column of :data:`PLOTTED_COLUMNS`.
    """
    for name in REQUIRED_FILES:
        if not (run_dir / name).is_file():
            raise ReportError(f"{name} not found in run directory {run_dir}")
    run = _read_json(run_dir / "run.json")
    summary = _read_json(run_dir / "summary.json")
    if "engine_capabilities" in run:  # what the report reads of them (bench.report.run_format.engine_capability)
        summary["engine_capabilities"] = run["engine_capabilities"]
    try:
        df = pd.read_csv(run_dir / "intervals.csv")
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
