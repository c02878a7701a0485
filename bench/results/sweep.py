"""A sweep directory's result files (``sweep.json``, ``cells.csv``, each run's ``summary.json``) read into
cells, their runs and mean/CI statistics; no database."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from bench.analysis.statistics import mean_ci
from bench.results.cell_columns import CELL_COLUMNS, CELL_TEXT_COLUMNS
from bench.results.model import ResultsError, problems, read_result
from bench.results.values import fmt_label, is_missing
from bench.errors import BadInput

__all__ = ["CompareError", "Stat", "Cell", "SweepResults", "load_sweep", "read_json", "run_complete", "run_summary",
           "norm_param"]

#: Design parameters a table names as a column when they differ between cells without being an
#: axis (each engine's own default, see bench.config.parameters).
DERIVED_COLUMNS = ("isolation", "index", "layout")

_EMPTY_COLUMNS = list(CELL_COLUMNS[:5])
#: Run parameters carried as columns of cells.csv.
PARAM_COLUMNS = CELL_COLUMNS[5:CELL_COLUMNS.index("autovacuum") + 1]
NUMERIC_COLUMNS = ("rep", *(c for c in CELL_COLUMNS[5 + len(PARAM_COLUMNS):] if c not in CELL_TEXT_COLUMNS))
BOOL_COLUMNS = ("suspect", "invariants_ok", "saturated")


class CompareError(BadInput):
    """A comparison argument is not usable; the one-line message names the argument."""


@dataclass(frozen=True)
class Stat:
    """Mean and 95 % confidence interval (Student's t, :func:`bench.analysis.statistics.mean_ci`) of ``n``
    values: all NaN with ``n = 0``; ``low``/``high`` NaN when ``n = 1``."""

    mean: float = math.nan
    low: float = math.nan
    high: float = math.nan
    n: int = 0

    @classmethod
    def of(cls, values: Sequence[float]) -> "Stat":
        """From raw values (missing ones dropped); the lower bound is clipped at 0 when every value is >= 0."""
        v = np.asarray([x for x in values if not is_missing(x)], dtype=float)
        if v.size == 0:
            return cls()
        mean, low, high = mean_ci(v)
        if not is_missing(low) and low < 0 <= v.min():
            low = 0.0
        return cls(mean, low, high, int(v.size))


@dataclass
class Cell:
    """One sweep cell: its parameters and its runs (rows of cells.csv, sorted by ``rep``); ``label`` names it
    by the varying axes ("index partial, history 1,000,000"); ``flags`` says why it is not trustworthy."""

    cell_id: str
    params: dict
    runs: pd.DataFrame
    expected_reps: int
    label: str = ""
    flags: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)  # every run parameter the cell ran with (sweep.json), or {}

    @property
    def done(self) -> pd.DataFrame:
        """Runs that finished (status "done"): the ones every mean is taken over."""
        return self.runs[self.runs["done"]]

    def stat(self, column: str) -> Stat:
        """Mean and 95 % CI of ``column`` over the cell's finished runs."""
        if column not in self.runs:
            return Stat()
        return Stat.of(self.done[column].tolist())

    @property
    def qualifies(self) -> bool:
        """Every run finished, is complete, not suspect, not saturated, and its invariants are ok."""
        return len(self.runs) > 0 and bool(self.runs["trusted"].all())

    @property
    def bad(self) -> bool:
        """Some run failed, is incomplete or suspect, or broke (or did not check) its invariants."""
        return bool(self.flags)


@dataclass
class SweepResults:
    """A sweep directory as read: ``meta`` (sweep.json), ``runs`` (cells.csv rows), ``cells`` (in order),
    ``varying`` (axes that differ), ``derived`` (:data:`DERIVED_COLUMNS` that differ)."""

    path: Path
    meta: dict
    runs: pd.DataFrame
    cells: list[Cell]
    varying: list[str]
    derived: list[str] = field(default_factory=list)

    @property
    def columns(self) -> list[str]:
        """The parameters that tell cells apart: the varying axes, then the derived ones."""
        return [*self.varying, *self.derived]

    def value(self, cell: Cell, key: str) -> Any:
        """A run parameter of ``cell``: its params, else the configuration it ran with
        (sweep.json), else the cells.csv column, else the sweep's base."""
        if key in cell.params:
            return cell.params[key]
        if key in cell.config:
            return norm_param(cell.config[key])
        if key in cell.runs and len(cell.runs):
            present = [v for v in cell.runs[key].tolist() if not is_missing(v) and v != ""]
            if present:
                return norm_param(present[0])
        return (self.meta.get("base") or {}).get(key)


_OLD_YES_NO = {"on": True, "off": False}


def norm_param(v: Any) -> Any:
    """A parameter value normalised for matching: numbers as int/float, text stripped; ``on``/``off``
    as True/False (AUTOVACUUM in result files written before it became a yes/no)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return int(v) if float(v).is_integer() else float(v)
    if isinstance(v, str):
        text = v.strip()
        if text in _OLD_YES_NO:
            return _OLD_YES_NO[text]
        try:
            f = float(text)
        except ValueError:
            return text
        return int(f) if f.is_integer() else f
    return v


def read_json(path: Path, arg: str) -> dict:
    """The result file ``path`` (:func:`bench.results.model.read_result`); CompareError naming
    ``arg`` when it is missing, unreadable, not an object or from a newer format."""
    try:
        return read_result(path)
    except ResultsError as err:
        raise CompareError(f"{arg}: {err}") from None


def run_summary(run_dir: Path) -> dict | None:
    """The run's summary.json, or None when it is absent or unreadable (a run that failed)."""
    try:
        return read_result(run_dir / "summary.json")
    except ResultsError:
        return None


def run_complete(run_dir: Path) -> bool | None:
    """``complete`` from the run's summary.json; None when the file is absent, unreadable or says neither."""
    value = (run_summary(run_dir) or {}).get("complete")
    return value if isinstance(value, bool) else None


#: Sweep axes named differently in the run config (``[matrix] duration`` is ``duration_s``).
AXIS_FIELD = {"duration": "duration_s", "warmup": "warmup_s"}


def axis_fields(meta: dict) -> set[str]:
    """The run-config field names a sweep varies (its axes; ``duration`` is ``duration_s`` there)."""
    return {AXIS_FIELD.get(a, a) for a in (meta.get("axes") or {})}


def _to_bool(v: Any) -> bool | None:
    text = str(v).strip().lower()
    if text in ("true", "1", "yes", "t"):
        return True
    if text in ("false", "0", "no", "f"):
        return False
    return None


def load_sweep(sweep_dir: Path, arg: str = "SWEEP_DIR") -> SweepResults:
    """The sweep directory's ``sweep.json``, ``cells.csv`` and runs' ``summary.json``; rows gain ``done``,
    ``complete``, ``suspect``, ``invariants_ok``, ``trusted``, ``report_href``; numbers float (NaN empty).
    Raises CompareError (naming ``arg``) for a missing sweep.json or unparsable cells.csv."""
    sweep_dir = Path(sweep_dir)
    if not (sweep_dir / "sweep.json").is_file():
        raise CompareError(f"{arg}: {sweep_dir} is not a sweep directory (no sweep.json)")
    meta = read_json(sweep_dir / "sweep.json", arg)
    csv_path = sweep_dir / "cells.csv"
    runs = pd.DataFrame(columns=_EMPTY_COLUMNS)
    if csv_path.is_file():
        try:
            runs = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
        except (pd.errors.ParserError, UnicodeDecodeError) as exc:
            raise CompareError(f"{arg}: cells.csv in {sweep_dir} is unreadable ({exc})") from None
        except pd.errors.EmptyDataError:
            pass
    for col in ("cell_id", "run_id", "run_dir", "status"):
        if col not in runs:
            runs[col] = ""
    for col in NUMERIC_COLUMNS:
        runs[col] = pd.to_numeric(runs[col], errors="coerce") if col in runs else math.nan
    for col in BOOL_COLUMNS:
        runs[col] = runs[col].map(_to_bool) if col in runs else None
    runs["run_dir"] = [d if d else (f"runs/{r}" if r else "") for d, r in zip(runs["run_dir"], runs["run_id"])]
    runs["done"] = runs["status"].str.strip().str.lower().eq("done")
    summaries = [(run_summary(sweep_dir / d) if d else None) for d in runs["run_dir"]]
    runs["complete"] = [s.get("complete") if s and isinstance(s.get("complete"), bool) else None for s in summaries]
    # Whether a run can be trusted is the results model's rule (bench.results.model.problems). A
    # saturated run (open-loop arrivals outpacing the workers) measured a queue falling behind:
    # its throughput is what the workers managed, not a rate the design sustains.
    runs["trusted"] = [bool(done and s is not None and not problems(s) and s.get("saturated") is not True)
                       for done, s in zip(runs["done"], summaries)]
    runs["report_href"] = [f"{d}/report.html" if d and (sweep_dir / d / "report.html").is_file() else None
                           for d in runs["run_dir"]]

    reps = int(meta.get("repetitions") or 1)
    declared = [(str(c.get("cell_id")), dict(c.get("params") or {})) for c in meta.get("cells") or []]
    configs = {str(c.get("cell_id")): dict(c.get("config") or {}) for c in meta.get("cells") or []}
    known = {cid for cid, _ in declared}
    for cid in dict.fromkeys(runs["cell_id"]):  # rows of cells the sweep.json does not list
        if cid not in known:
            first = runs[runs["cell_id"] == cid].iloc[0]
            axes = list((meta.get("axes") or {}).keys()) or [c for c in PARAM_COLUMNS if c in runs]
            declared.append((cid, {a: norm_param(first[a]) for a in axes if a in first and first[a] != ""}))
    cells = [Cell(cid, {k: norm_param(v) for k, v in params.items()},
                  runs[runs["cell_id"] == cid].sort_values("rep").reset_index(drop=True), reps,
                  config=configs.get(cid, {}))
             for cid, params in declared]

    axes = meta.get("axes") or {}
    names = list(axes) or sorted({k for c in cells for k in c.params})
    varying = [a for a in names if len({norm_param(c.params.get(a)) for c in cells if a in c.params}) > 1]
    results = SweepResults(sweep_dir, meta, runs, cells, varying)
    results.derived = [k for k in DERIVED_COLUMNS if k not in axis_fields(meta)
                       and len({str(results.value(c, k)) for c in cells}) > 1]
    for cell in cells:
        cell.label = ", ".join(f"{a} {fmt_label(results.value(cell, a))}" for a in results.columns) or cell.cell_id
        cell.flags = _cell_flags(cell)
    return results


def _cell_flags(cell: Cell) -> list[str]:
    """Why a cell is not trustworthy (red in every table): failed, incomplete, suspect, invariants, saturated."""
    runs = cell.runs
    counts = (
        ("{n} failed run{s}", int((~runs["done"]).sum())),
        ("{n} run{s} not complete", sum(1 for d, c in zip(runs["done"], runs["complete"]) if d and c is not True)),
        ("{n} suspect run{s}", sum(1 for s in runs["suspect"] if s is True)),
        ("invariants not ok in {n} run{s}", sum(1 for i in runs["invariants_ok"] if i is not True and i is not None)
         + sum(1 for d, i in zip(runs["done"], runs["invariants_ok"]) if d and i is None)),
        ("{n} saturated run{s} (arrivals outpaced the workers)", sum(1 for s in runs["saturated"] if s is True)))
    return [text.format(n=n, s="s" if n > 1 else "") for text, n in counts if n]
