"""One run's result files read for its report: ``run.json``, ``summary.json`` and ``intervals.csv``.

Used by :mod:`bench.report.run_page`. Reads files only; never touches a database.

Public API:
    load_run(run_dir) -> (run, summary, intervals)
    ReportError       -> raised when the run directory cannot be rendered
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

__all__ = ["PLOTTED_COLUMNS", "REQUIRED_FILES", "ReportError", "load_run"]

REQUIRED_FILES = ("run.json", "intervals.csv", "summary.json")
PLOTTED_COLUMNS = (
    "t_s", "claims", "jobs_completed", "claim_p50_us", "claim_p95_us",
    "claim_p99_us", "queue_depth", "oldest_eligible_age_s", "running", "lock_waiters",
)


class ReportError(ValueError):
    """A run directory is missing a required file or holds unreadable data."""


def load_run(run_dir: Path) -> tuple[dict, dict, pd.DataFrame]:
    """Read ``run.json``, ``summary.json`` and ``intervals.csv`` of ``run_dir``.

    Returns:
        ``(run, summary, intervals)``: the two JSON objects as dicts, and the per-second rows
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
    """Parse a JSON object file; raise ReportError naming the file when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path.name} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ReportError(f"{path.name} does not hold a JSON object")
    return data
