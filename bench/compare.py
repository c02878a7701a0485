"""Compare runs and sweeps from their result files, and render a sweep's comparison report.

Reads only result files (a run directory's ``summary.json`` / ``intervals.csv``; a
sweep directory's ``sweep.json``, ``cells.csv``, ``runs/<run_id>/`` and an optional
``capacity.json``; formats in DESIGN.md and the sweep file contract). It never
touches a database and imports nothing that does: data flows one way. Figures are
drawn with matplotlib (Agg), embedded in the HTML as base64 PNG data URIs, and
also written as PNG files to a ``plots/`` folder, as ``bench.report`` does.

Public API:
    render_sweep_report(sweep_dir) -> Path of ``sweep_dir/compare.html``
    compare(a_path, b_path, out_path=None) -> (text table, Path of the HTML page)
    CompareError -> a bad argument, one line naming it
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from jinja2 import Environment, FileSystemLoader  # noqa: E402
from matplotlib.legend_handler import HandlerTuple  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator  # noqa: E402

from .capacity import compare_samples, fit_usl, mean_ci, workers_needed  # noqa: E402

__all__ = ["CompareError", "compare", "render_sweep_report"]

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "report_templates"
SWEEP_TEMPLATE = "compare.html.j2"
PAIR_TEMPLATE = "compare_pair.html.j2"
NA = "n/a"
LOG_SCALE_RATIO = 20.0  # a y axis switches to log above this max/min ratio

#: The design a capacity answer names, in this order.
DESIGN_KEYS = ("policy", "index", "layout", "batch")
#: Run parameters carried as columns of cells.csv.
PARAM_COLUMNS = ("policy", "workers", "batch", "index", "layout", "history", "backlog", "rate",
                 "work_ms", "txn", "duration_s")
NUMERIC_COLUMNS = (
    "rep", "throughput_jobs_per_s", "claims_per_s", "jobs_completed", "empty_claims", "errors_total",
    "claim_p50_us", "claim_p95_us", "claim_p99_us", "claim_mean_us", "complete_p99_us",
    "batch_wait_p50_us", "batch_wait_p99_us", "oldest_age_max_s", "oldest_age_slope_s_per_s",
    "plan_custom_buffers", "plan_custom_ms", "plan_generic_buffers", "plan_generic_ms",
    "pgss_calls", "pgss_mean_ms", "pgss_shared_blks_per_call",
    "table_bytes_before", "indexes_bytes_before", "table_bytes_after", "indexes_bytes_after",
    "harness_cpu_max_pct",
)
BOOL_COLUMNS = ("suspect", "invariants_ok")
PER_SECOND_NOTE = ("Per-second samples are autocorrelated (consecutive seconds share the queue's "
                   "state, caches and vacuum debt), so p-values from them are optimistic: read "
                   "'yes' as 'worth repeating the runs', not as proof.")


class CompareError(ValueError):
    """A comparison argument is not usable; the one-line message names the argument."""


# =========================================================================== formatting


def _missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError):
        return False


def _num(v: Any, decimals: int = 0) -> str:
    """Thousands-separated number with fixed decimals, or 'n/a'."""
    if _missing(v):
        return NA
    try:
        return f"{float(v):,.{decimals}f}"
    except (TypeError, ValueError):
        return str(v)


def _sig(v: Any) -> str:
    """About three significant figures, never in exponent form: 3354.2 -> '3,354', 0.01234 -> '0.0123'."""
    if _missing(v):
        return NA
    v = float(v)
    if v == 0 or abs(v) >= 100:
        return f"{v:,.0f}"
    decimals = max(0, 2 - int(math.floor(math.log10(abs(v)))))
    return f"{v:,.{decimals}f}"


def _ci(stat: "Stat", scale: float = 1.0, fmt: Callable[[Any], str] = _sig) -> str:
    """'mean (low–high)' of a Stat divided by ``scale``; '(n = 1)' when there is no interval."""
    if stat.n == 0:
        return NA
    mean = fmt(stat.mean / scale)
    if stat.n == 1 or _missing(stat.low):
        return f"{mean} (n = 1)"
    return f"{mean} ({fmt(stat.low / scale)}–{fmt(stat.high / scale)})"


def _bytes_unit(v: float) -> tuple[float, str]:
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "kiB")):
        if abs(v) >= scale:
            return scale, unit
    return 1.0, "B"


def _ci_bytes(stat: "Stat") -> str:
    if stat.n == 0:
        return NA
    scale, unit = _bytes_unit(stat.mean)
    return f"{_ci(stat, scale)} {unit}"


def _label_value(v: Any) -> str:
    """A parameter value for labels: 1000000 -> '1,000,000', 'skip_locked' as is."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{v:,.0f}" if float(v).is_integer() else f"{v:,g}"
    return str(v)


def _short_count(v: float) -> str:
    """Axis tick text for counts: 0, 500, 100k, 1M, 2.5M."""
    v = float(v)
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:g}{suffix}"
    return f"{v:g}"


def _norm(v: Any) -> Any:
    """A parameter value normalised for matching: numbers as int/float, text stripped."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return int(v) if float(v).is_integer() else float(v)
    if isinstance(v, str):
        text = v.strip()
        try:
            f = float(text)
        except ValueError:
            return text
        return int(f) if f.is_integer() else f
    return v


def _as_float(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _tick(y: float, _pos: Any = None) -> str:
    """Axis tick text: 0.5, 10, 1,000, 35,000."""
    return f"{y:,g}"


def _png_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _save(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png")
    finally:
        plt.close(fig)
    return buf.getvalue()


def _environment() -> Environment:
    return Environment(loader=FileSystemLoader(str(TEMPLATES_DIR)), autoescape=True,
                       trim_blocks=True, lstrip_blocks=True)


# =========================================================================== loading


@dataclass(frozen=True)
class Stat:
    """Mean and 95 % confidence interval (Student's t, ``capacity.mean_ci``) of ``n`` values."""

    mean: float = math.nan
    low: float = math.nan
    high: float = math.nan
    n: int = 0

    @classmethod
    def of(cls, values: Sequence[float]) -> "Stat":
        """From raw values (missing ones dropped). Every quantity here is a count, rate, time or
        size, never negative: when all values are >= 0 the interval's lower bound is clipped at 0."""
        v = np.asarray([x for x in values if not _missing(x)], dtype=float)
        if v.size == 0:
            return cls()
        mean, low, high = mean_ci(v)
        if not _missing(low) and low < 0 <= v.min():
            low = 0.0
        return cls(mean, low, high, int(v.size))


@dataclass
class Cell:
    """One sweep cell: its parameters and its runs (rows of cells.csv)."""

    cell_id: str
    params: dict
    runs: pd.DataFrame
    expected_reps: int
    label: str = ""
    flags: list[str] = field(default_factory=list)

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
        """Every run finished, is complete, not suspect, and its invariants are ok."""
        return len(self.runs) > 0 and bool(self.runs["trusted"].all())

    @property
    def bad(self) -> bool:
        return bool(self.flags)


@dataclass
class Sweep:
    """A sweep directory read from its files (see the sweep file contract)."""

    path: Path
    meta: dict
    runs: pd.DataFrame
    cells: list[Cell]
    varying: list[str]

    def value(self, cell: Cell, key: str) -> Any:
        """A run parameter of ``cell``: its params, else the cells.csv column, else the sweep's base."""
        if key in cell.params:
            return cell.params[key]
        if key in cell.runs and len(cell.runs):
            col = cell.runs[key]
            present = [v for v in col.tolist() if not _missing(v) and v != ""]
            if present:
                return _norm(present[0])
        return (self.meta.get("base") or {}).get(key)


def _read_json(path: Path, arg: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CompareError(f"{arg}: {path} is not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CompareError(f"{arg}: {path} does not hold a JSON object")
    return data


def _to_bool(v: Any) -> bool | None:
    text = str(v).strip().lower()
    if text in ("true", "1", "yes", "t"):
        return True
    if text in ("false", "0", "no", "f"):
        return False
    return None


def _run_complete(sweep_dir: Path, run_dir_rel: str) -> bool | None:
    """``complete`` from the run's summary.json; None when the file is absent or unreadable."""
    path = sweep_dir / run_dir_rel / "summary.json"
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("complete")
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return None
    return value if isinstance(value, bool) else None


def load_sweep(sweep_dir: Path, arg: str = "SWEEP_DIR") -> Sweep:
    """Read a sweep directory: ``sweep.json``, ``cells.csv`` (may be absent while the sweep
    starts) and each run's ``summary.json`` (for ``complete``).

    Each run row gains ``done`` (status "done"), ``complete`` (bool or None), ``suspect``
    and ``invariants_ok`` (bool or None), ``trusted`` (all four good) and ``report_href``
    (the run's report.html relative to the sweep directory, or None when absent).
    Raises CompareError (naming ``arg``) when sweep.json is missing or unreadable or
    cells.csv does not parse.
    """
    sweep_dir = Path(sweep_dir)
    if not (sweep_dir / "sweep.json").is_file():
        raise CompareError(f"{arg}: {sweep_dir} is not a sweep directory (no sweep.json)")
    meta = _read_json(sweep_dir / "sweep.json", arg)
    csv_path = sweep_dir / "cells.csv"
    if csv_path.is_file():
        try:
            runs = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
        except (pd.errors.ParserError, UnicodeDecodeError) as exc:
            raise CompareError(f"{arg}: cells.csv in {sweep_dir} is unreadable ({exc})") from None
        except pd.errors.EmptyDataError:
            runs = pd.DataFrame(columns=["cell_id", "rep", "run_id", "run_dir", "status"])
    else:
        runs = pd.DataFrame(columns=["cell_id", "rep", "run_id", "run_dir", "status"])
    for col in ("cell_id", "run_id", "run_dir", "status"):
        if col not in runs:
            runs[col] = ""
    for col in NUMERIC_COLUMNS:
        runs[col] = pd.to_numeric(runs[col], errors="coerce") if col in runs else math.nan
    for col in BOOL_COLUMNS:
        runs[col] = runs[col].map(_to_bool) if col in runs else None
    runs["run_dir"] = [d if d else (f"runs/{r}" if r else "") for d, r in zip(runs["run_dir"], runs["run_id"])]
    runs["done"] = runs["status"].str.strip().str.lower().eq("done")
    runs["complete"] = [(_run_complete(sweep_dir, d) if d else None) for d in runs["run_dir"]]
    runs["trusted"] = [bool(done and c is True and s is False and i is True) for done, c, s, i in
                       zip(runs["done"], runs["complete"], runs["suspect"], runs["invariants_ok"])]
    runs["report_href"] = [f"{d}/report.html" if d and (sweep_dir / d / "report.html").is_file() else None
                           for d in runs["run_dir"]]

    reps = int(meta.get("repetitions") or 1)
    declared = [(str(c.get("cell_id")), dict(c.get("params") or {})) for c in meta.get("cells") or []]
    known = {cid for cid, _ in declared}
    for cid in dict.fromkeys(runs["cell_id"]):  # rows of cells the sweep.json does not list
        if cid not in known:
            first = runs[runs["cell_id"] == cid].iloc[0]
            axes = list((meta.get("axes") or {}).keys()) or [c for c in PARAM_COLUMNS if c in runs]
            declared.append((cid, {a: _norm(first[a]) for a in axes if a in first and first[a] != ""}))
    cells = [Cell(cid, {k: _norm(v) for k, v in params.items()},
                  runs[runs["cell_id"] == cid].sort_values("rep").reset_index(drop=True), reps)
             for cid, params in declared]

    axes = meta.get("axes") or {}
    names = list(axes) or sorted({k for c in cells for k in c.params})
    varying = [a for a in names if len({_norm(c.params.get(a)) for c in cells if a in c.params}) > 1]
    sweep = Sweep(sweep_dir, meta, runs, cells, varying)
    for cell in cells:
        cell.label = ", ".join(f"{a} {_label_value(cell.params[a])}" for a in varying if a in cell.params) or cell.cell_id
        cell.flags = _cell_flags(cell)
    return sweep


def _cell_flags(cell: Cell) -> list[str]:
    """Why a cell is not trustworthy (red in every table): failed, incomplete, suspect, invariants."""
    runs = cell.runs
    flags = []
    n_failed = int((~runs["done"]).sum())
    if n_failed:
        flags.append(f"{n_failed} failed run{'s' if n_failed > 1 else ''}")
    n_incomplete = int(sum(1 for d, c in zip(runs["done"], runs["complete"]) if d and c is not True))
    if n_incomplete:
        flags.append(f"{n_incomplete} run{'s' if n_incomplete > 1 else ''} not complete")
    n_suspect = int(sum(1 for s in runs["suspect"] if s is True))
    if n_suspect:
        flags.append(f"{n_suspect} suspect run{'s' if n_suspect > 1 else ''}")
    n_inv = int(sum(1 for i in runs["invariants_ok"] if i is not True and i is not None)) + int(
        sum(1 for d, i in zip(runs["done"], runs["invariants_ok"]) if d and i is None))
    if n_inv:
        flags.append(f"invariants not ok in {n_inv} run{'s' if n_inv > 1 else ''}")
    return flags


# =========================================================================== capacity answer


def _design_text(values: dict) -> str:
    parts = [f"{k} {_label_value(values[k])}" for k in DESIGN_KEYS if not _missing(values.get(k)) and values.get(k) != ""]
    return ", ".join(parts) if parts else "(design not recorded)"


def _ms_text(us: Any) -> str:
    return NA if _missing(us) else _sig(float(us) / 1000.0)


def _capacity_answer(sweep: Sweep) -> dict:
    """The one-sentence answer, where it comes from, and its caveats.

    Returns {"sentence", "ok" (a figure was given), "details": [str], "cell_id"}.
    From ``capacity.json`` when the sweep directory holds one (its sustainable rate),
    else the cell with the highest mean throughput among cells whose runs all
    finished, are complete, not suspect and have their invariants ok.
    """
    cap_path = sweep.path / "capacity.json"
    details: list[str] = []
    best = max((c for c in sweep.cells if c.qualifies), default=None,
               key=lambda c: c.stat("throughput_jobs_per_s").mean if c.stat("throughput_jobs_per_s").n else -1)
    if cap_path.is_file():
        cap = _read_json(cap_path, "capacity.json")
        design = cap.get("design") or {}
        rate = cap.get("sustainable_rate_jobs_per_s")
        workers = cap.get("workers", design.get("workers"))
        steps = cap.get("steps") or []
        if not _missing(rate):
            sentence = (f"With design {_design_text(design)}, this database sustains about {_num(rate)} jobs/s "
                        f"at p99 claim {_ms_text(cap.get('claim_p99_us_at_rate'))} ms using "
                        f"{_label_value(workers)} workers.")
            details.append(f"From the capacity search in capacity.json ({len(steps)} offered rates tried): the "
                           "highest open-loop arrival rate at which the oldest eligible age did not keep growing.")
            return {"sentence": sentence, "ok": True, "details": details, "cell_id": None}
        sentence = (f"The capacity search (capacity.json) found no sustainable rate for design "
                    f"{_design_text(design)}: the queue saturated at every rate it tried ({len(steps)} "
                    f"step{'s' if len(steps) != 1 else ''}).")
        if best is not None:
            tput = best.stat("throughput_jobs_per_s")
            details.append(f"For reference, the sweep's best trustworthy cell ({best.cell_id}) drained a seeded "
                           f"backlog at {_num(tput.mean)} jobs/s; that is a ceiling, not a sustainable rate.")
        return {"sentence": sentence, "ok": False, "details": details, "cell_id": None}

    if not sweep.cells or sweep.runs.empty:
        return {"sentence": "No run of this sweep has finished yet, so there is no capacity figure.",
                "ok": False, "details": [], "cell_id": None}
    if best is None:
        n_measured = sum(1 for c in sweep.cells if len(c.runs))
        return {"sentence": (f"No cell of this sweep gives a trustworthy capacity figure: each of the "
                             f"{n_measured} measured cells has a failed, incomplete or suspect run, or a run "
                             "whose invariants are not ok."),
                "ok": False, "details": ["Fix the cause shown in red below and re-run the sweep."], "cell_id": None}

    tput, p99 = best.stat("throughput_jobs_per_s"), best.stat("claim_p99_us")
    design = {k: sweep.value(best, k) for k in (*DESIGN_KEYS, "workers", "rate")}
    sentence = (f"With design {_design_text(design)}, this database sustains about {_num(tput.mean)} jobs/s "
                f"at p99 claim {_ms_text(p99.mean)} ms using {_label_value(design['workers'])} workers.")
    details.append(f"Cell {best.cell_id} ({best.label}): mean throughput over {tput.n} repetition"
                   f"{'s' if tput.n != 1 else ''}, 95 % CI {_ci(tput)} jobs/s; claim p99 {_ci(p99, 1000.0)} ms. "
                   "Chosen as the highest mean throughput among cells whose runs all finished, are complete, "
                   "not suspect and have their invariants ok.")
    if _missing(design.get("rate")) or _as_float(design.get("rate")) == 0:
        details.append("These runs drained a seeded backlog (closed loop): the figure is the most this design "
                       "completed per second, an upper bound. The rate it sustains with a stable queue lag "
                       "comes from a capacity search (make capacity), which this sweep directory does not hold.")
    target = sweep.meta.get("target") or {}
    rate = target.get("rate_jobs_per_s")
    workers = _as_float(design.get("workers"))
    if not _missing(rate) and float(rate) > 0 and workers > 0 and tput.mean > 0:
        util = float(target.get("utilisation") or 0.7)
        job_s = workers / tput.mean  # Little's law: each worker holds one job (or batch) per cycle
        need = workers_needed(float(rate), job_s, util)
        details.append(f"Target {_num(rate)} jobs/s at {util:.0%} utilisation: about {need} workers of this "
                       f"design by Little's law (L = λW with W = workers / throughput = {job_s * 1000:.3g} ms "
                       "per job per worker, as measured in this cell)"
                       + ("; the target is above what this cell measured, so more workers may not scale "
                          "linearly (see the USL fit)." if float(rate) > tput.mean else "."))
    return {"sentence": sentence, "ok": True, "details": details, "cell_id": best.cell_id}


# =========================================================================== tables


def _banners(sweep: Sweep) -> list[str]:
    banners = []
    n_cells = len(sweep.cells)
    missing = [c for c in sweep.cells if len(c.runs) == 0]
    short = [c for c in sweep.cells if 0 < len(c.runs) < c.expected_reps]
    if sweep.meta.get("complete") is False:
        text = (f"incomplete sweep: {len(missing)} of {n_cells} cells are missing (no run recorded)")
        if short:
            text += f"; {len(short)} more have fewer than {sweep.meta.get('repetitions')} repetitions"
        banners.append(text)
    failed = int((~sweep.runs["done"]).sum()) if len(sweep.runs) else 0
    if failed:
        banners.append(f"{failed} run{'s' if failed > 1 else ''} failed (red below); their cells are excluded "
                       "from the capacity answer")
    suspect = int(sum(1 for s in sweep.runs["suspect"] if s is True)) if len(sweep.runs) else 0
    if suspect:
        banners.append(f"{suspect} suspect run{'s' if suspect > 1 else ''} (load generator or monitor limits; "
                       "see each run's report)")
    bad_inv = int(sum(1 for d, i in zip(sweep.runs["done"], sweep.runs["invariants_ok"]) if d and i is not True)) \
        if len(sweep.runs) else 0
    if bad_inv:
        banners.append(f"invariants not ok in {bad_inv} run{'s' if bad_inv > 1 else ''}: a correctness bug in "
                       "the claim protocol or an unaudited run; never use those figures")
    return banners


def _param_cells(sweep: Sweep, cell: Cell) -> list[str]:
    return [_label_value(cell.params.get(a, sweep.value(cell, a))) for a in sweep.varying]


def _cell_rows(sweep: Sweep) -> list[dict]:
    """The main table: one row per cell, means (95 % CI) over its finished runs."""
    rows = []
    for cell in sweep.cells:
        rows.append({
            "cell_id": cell.cell_id, "params": _param_cells(sweep, cell),
            "runs": f"{int(cell.runs['done'].sum())} / {cell.expected_reps}",
            "values": [_ci(cell.stat("throughput_jobs_per_s")), _ci(cell.stat("claims_per_s")),
                       _ci(cell.stat("claim_p50_us"), 1000.0), _ci(cell.stat("claim_p99_us"), 1000.0),
                       _ci(cell.stat("oldest_age_max_s")), _ci(cell.stat("errors_total"))],
            "flags": "; ".join(cell.flags), "bad": cell.bad,
        })
    return rows


def _mode_text(values: Sequence[Any]) -> str:
    """The value all runs agree on, or each distinct value with its count."""
    vals = [str(v) for v in values if not _missing(v) and str(v) != ""]
    if not vals:
        return NA
    counts = pd.Series(vals).value_counts()
    if len(counts) == 1:
        return counts.index[0]
    return " / ".join(f"{v} ({n} runs)" for v, n in counts.items())


def _dropped_indexes(custom_scan: str, generic_scan: str) -> list[str]:
    """Indexes the custom plan scans ("… using <index> …") that the generic plan does not use.

    The scan fields may name one node or several joined by " + " (the claim's CTE scan and
    the UPDATE's join back to the table); every index of the custom plan is checked.
    """
    if not custom_scan or not generic_scan or generic_scan == NA:
        return []
    used = list(dict.fromkeys(re.findall(r"\busing (\S+)", custom_scan)))
    return [idx for idx in used if not re.search(rf"\busing {re.escape(idx)}(\s|$)", generic_scan)]


def _plan_rows(sweep: Sweep) -> list[dict]:
    """Plan summary per cell that recorded one (plan_* and pgss_* columns of cells.csv)."""
    rows = []
    for cell in sweep.cells:
        done = cell.done
        if done.empty or not any(c in done and done[c].astype(str).str.strip().ne("").any()
                                 for c in ("plan_custom_scan", "plan_generic_scan")):
            continue
        custom = _mode_text(done.get("plan_custom_scan", []))
        generic = _mode_text(done.get("plan_generic_scan", []))
        auto = _mode_text(done.get("plan_auto", []))
        dropped = _dropped_indexes(custom, generic)
        warning = None
        if dropped:
            warning = (f"the generic plan stops using {' and '.join(dropped)} ({generic}) while the custom "
                       f"plan uses {'it' if len(dropped) == 1 else 'them'}")
            warning += (": PostgreSQL chose the generic plan for the prepared claim, so every claim runs it"
                        if auto == "generic" else
                        "; PostgreSQL kept custom plans (re-planned every execution) — a prepared claim "
                        "that switches to the generic plan, or plan_cache_mode = force_generic_plan, loses the index")
        pgss = (_ci(cell.stat("pgss_calls")), _ci(cell.stat("pgss_mean_ms")),
                _ci(cell.stat("pgss_shared_blks_per_call")))
        rows.append({
            "cell_id": cell.cell_id, "index": _label_value(sweep.value(cell, "index")),
            "params": _param_cells(sweep, cell), "auto": auto,
            "custom": {"scan": custom, "buffers": _ci(cell.stat("plan_custom_buffers")),
                       "ms": _ci(cell.stat("plan_custom_ms"))},
            "generic": {"scan": generic, "buffers": _ci(cell.stat("plan_generic_buffers")),
                        "ms": _ci(cell.stat("plan_generic_ms"))},
            "pgss": pgss if any(v != NA for v in pgss) else None,
            "warning": warning, "bad": cell.bad,
        })
    return rows


def _size_rows(sweep: Sweep) -> list[dict]:
    rows = []
    for cell in sweep.cells:
        stats = [cell.stat(c) for c in ("table_bytes_before", "table_bytes_after",
                                        "indexes_bytes_before", "indexes_bytes_after")]
        if all(s.n == 0 for s in stats):
            continue
        rows.append({"cell_id": cell.cell_id, "params": _param_cells(sweep, cell),
                     "values": [_ci_bytes(s) for s in stats], "bad": cell.bad})
    return rows


def _run_rows(sweep: Sweep) -> list[dict]:
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
        if r["done"] and r["invariants_ok"] is not True:
            problems.append("invariants not ok" if r["invariants_ok"] is False else "invariants unknown")
        rows.append({
            "cell_id": r["cell_id"], "rep": _num(r["rep"]), "run_id": r["run_id"],
            "label": cell.label if cell else "",
            "href": r["report_href"] if isinstance(r["report_href"], str) else None,  # NaN when absent
            "run_dir": r["run_dir"],
            "throughput": _num(r["throughput_jobs_per_s"], 1),
            "claim_p99": _ms_text(r["claim_p99_us"]),
            "problems": "; ".join(problems) or "ok", "bad": bool(problems),
        })
    return rows


# =========================================================================== figures


def _series(sweep: Sweep, x_axis: str) -> list[tuple[str, list[Cell]]]:
    """Cells grouped by every other varying axis, each group sorted by ``x_axis``."""
    others = [a for a in sweep.varying if a != x_axis]
    groups: dict[tuple, list[Cell]] = {}
    for cell in sweep.cells:
        if _missing(_as_float(cell.params.get(x_axis, sweep.value(cell, x_axis)))):
            continue
        key = tuple(_norm(cell.params.get(a, sweep.value(cell, a))) for a in others)
        groups.setdefault(key, []).append(cell)
    out = []
    for key, cells in groups.items():
        cells.sort(key=lambda c: _as_float(c.params.get(x_axis, sweep.value(c, x_axis))))
        label = (", ".join(f"{a} {_label_value(v)}" for a, v in zip(others, key))
                 or _design_text({k: sweep.value(cells[0], k) for k in DESIGN_KEYS}))
        out.append((label, cells))
    return out


def _x(sweep: Sweep, cell: Cell, axis: str) -> float:
    return _as_float(cell.params.get(axis, sweep.value(cell, axis)))


def _errorbar(ax: plt.Axes, xs, stats: list[Stat], scale: float = 1.0, **kw):
    """Means with asymmetric 95 % CI error bars (no bar where the CI is unknown, n = 1)."""
    means = np.array([s.mean / scale for s in stats])
    lo = np.array([0.0 if _missing(s.low) else (s.mean - s.low) / scale for s in stats])
    hi = np.array([0.0 if _missing(s.high) else (s.high - s.mean) / scale for s in stats])
    ok = ~np.isnan(means)
    return ax.errorbar(np.asarray(xs, dtype=float)[ok], means[ok], yerr=[lo[ok], hi[ok]], capsize=3, **kw)


def _legend(ax: plt.Axes, handles: list | None = None, ncol: int | None = None,
            labels: list[str] | None = None) -> None:
    """Legend above the axes so it never covers data (bench.report's style), in as many columns as
    the axes' width holds for its longest label. A handle may be a tuple (drawn as one entry)."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if labels is None:
        labels = [h.get_label() for h in handles]
    if not handles:
        return
    width_in = ax.get_position().width * ax.figure.get_figwidth()
    per_row = max(1, int(width_in * 15 // (max(len(text) for text in labels) + 6)))  # ~15 chars per inch
    ax.legend(handles, labels, handler_map={tuple: HandlerTuple(ndivide=None)}, loc="lower left",
              bbox_to_anchor=(0, 1.01), ncol=ncol or min(len(handles), per_row), frameon=False,
              fontsize="small", borderaxespad=0)


def _style_keys(what: str) -> list:
    """Legend entries for the line styles shared by every series: p50 solid, p99 dashed."""
    return [Line2D([], [], color="#555", linestyle="-", marker="o", markersize=4, label=f"{what} p50 (solid)"),
            Line2D([], [], color="#555", linestyle="--", marker="s", markersize=4, label=f"{what} p99 (dashed)")]


def _int_log_axis(ax: plt.Axes, values: Sequence[float], which: str = "x") -> None:
    """Log axis with ticks exactly at the measured values, labelled as plain numbers."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    ticks = sorted({float(v) for v in values if v > 0})
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _p: _short_count(v)))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def _auto_log_y(ax: plt.Axes, values: Sequence[float], unit_label: str) -> None:
    v = np.asarray([x for x in values if not _missing(x) and x > 0], dtype=float)
    if v.size and v.max() / v.min() > LOG_SCALE_RATIO:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(_tick))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel(f"{unit_label}, log scale")
    else:
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(FuncFormatter(_tick))
        ax.set_ylabel(unit_label)


def _y_top(means: Sequence[float], highs: Sequence[float]) -> float:
    """Top of a linear y axis from 0: room for the upper error bars, but at most twice the largest
    mean (a two-repetition interval can be far wider than the data; its bar is then cut at the top)."""
    m = [x for x in means if not _missing(x)]
    h = [x for x in highs if not _missing(x)]
    if not m:
        return 1.0
    top = max(m) * 1.15
    if h:
        top = max(top, min(max(h) * 1.05, 2.0 * max(m)))
    return top or 1.0


def _fit_points(sweep: Sweep, cells: list[Cell]) -> tuple[list[float], list[float], int]:
    """(workers, throughput) of every trusted run of ``cells``, and how many runs were left out."""
    ws, xs, left_out = [], [], 0
    for cell in cells:
        w = _x(sweep, cell, "workers")
        for _, r in cell.runs.iterrows():
            if r["trusted"] and not _missing(r["throughput_jobs_per_s"]):
                ws.append(w)
                xs.append(float(r["throughput_jobs_per_s"]))
            else:
                left_out += 1
    return ws, xs, left_out


def _scaling(sweep: Sweep) -> tuple[dict | None, list[dict]]:
    """Throughput vs workers with a USL fit per series; returns (figure spec, USL table rows)."""
    series = _series(sweep, "workers")
    table, drawn = [], []
    for label, cells in series:
        ws, xs, left_out = _fit_points(sweep, cells)
        counts = sorted({int(w) for w in ws})
        row = {"series": label, "n_points": len(ws), "worker_counts": ", ".join(str(c) for c in counts) or NA,
               "left_out": left_out, "fit": None, "reason": None}
        fit = None
        try:
            fit = fit_usl(ws, xs)
        except ValueError as exc:
            row["reason"] = (f"no fit: {len(counts)} distinct worker count{'s' if len(counts) != 1 else ''} "
                             f"with trustworthy runs ({row['worker_counts']}); the USL has three parameters and "
                             f"needs at least 3" if len(counts) < 3 else f"no fit: {exc}")
        else:
            row["fit"] = {
                "lambda": _sig(fit.lambda_jobs_per_s),
                "sigma": f"{fit.sigma:.4g}", "sigma_se": NA if _missing(fit.sigma_stderr) else f"{fit.sigma_stderr:.2g}",
                "kappa": f"{fit.kappa:.4g}", "kappa_se": NA if _missing(fit.kappa_stderr) else f"{fit.kappa_stderr:.2g}",
                "peak_workers": ("∞ (κ = 0: no peak)" if math.isinf(fit.peak_workers) else f"{fit.peak_workers:,.1f}"),
                "peak_jobs": ("∞" if math.isinf(fit.peak_jobs_per_s) else _num(fit.peak_jobs_per_s)),
                "mape": f"{fit.mape_pct:.1f}", "r2": NA if _missing(fit.r2) else f"{fit.r2:.3f}",
                "poor": (fit.mape_pct > 10 or (not _missing(fit.sigma_stderr) and fit.sigma_stderr > max(fit.sigma, 1e-9))
                         or (not _missing(fit.kappa_stderr) and fit.kappa_stderr > max(fit.kappa, 1e-12))),
                "beyond": (not math.isinf(fit.peak_workers) and fit.peak_workers > max(counts)),
            }
        table.append(row)
        if len(cells) >= 2:
            drawn.append((label, cells, fit))

    if not drawn:
        return None, table

    def draw() -> bytes:
        fig, ax = plt.subplots(figsize=(10, 4.6), dpi=100, layout="constrained")
        all_w, all_y, all_hi, handles, labels = [], [], [], [], []
        for i, (label, cells, fit) in enumerate(drawn):
            color = f"C{i % 10}"
            xs = [_x(sweep, c, "workers") for c in cells]
            stats = [c.stat("throughput_jobs_per_s") for c in cells]
            h = _errorbar(ax, xs, stats, fmt="o", color=color)
            bad = [(x, s.mean) for x, s, c in zip(xs, stats, cells) if c.bad and s.n]
            if bad:
                ax.plot(*zip(*bad), "o", markersize=11, markerfacecolor="none", markeredgecolor="#c62828")
            all_w += xs
            all_y += [s.mean for s in stats if s.n]
            all_hi += [s.high for s in stats if s.n > 1 and not _missing(s.high)]
            if fit is not None:
                shown_peak = not math.isinf(fit.peak_workers) and fit.peak_workers <= 4 * max(xs)
                top = max(max(xs), fit.peak_workers if shown_peak else 0) * 1.15
                grid = np.geomspace(min(xs), top, 200)
                (line,) = ax.plot(grid, fit.predict(grid), "--", color=color, linewidth=1.2)
                handles.append((h, line))
                labels.append(f"{label}: mean ± 95 % CI, USL fit σ {fit.sigma:.3g}, κ {fit.kappa:.2g}")
            else:
                handles.append(h)
                labels.append(f"{label}: mean ± 95 % CI (no fit)")
            if fit is not None and shown_peak:  # a peak far beyond the measured counts is in the table only
                ax.plot([fit.peak_workers], [fit.peak_jobs_per_s], marker="v", color=color, markersize=8)
                ax.annotate(f"peak {_num(fit.peak_jobs_per_s)} jobs/s\nat {fit.peak_workers:.0f} workers",
                            (fit.peak_workers, fit.peak_jobs_per_s), textcoords="offset points",
                            xytext=(6, 6), fontsize="x-small", color=color)
                all_w.append(fit.peak_workers)
        if any(c.bad for _, cells, _ in drawn for c in cells):
            (ring,) = ax.plot([], [], "o", markersize=11, markerfacecolor="none", markeredgecolor="#c62828")
            handles.append(ring)
            labels.append("cell with a failed, suspect or invariant-breaking run")
        _int_log_axis(ax, [w for w in all_w if w > 0 and float(w).is_integer()] or all_w)
        ax.set_xlim(min(all_w) / 1.3, max(all_w) * 1.3)
        ax.set_xlabel("workers (connections, log scale)")
        ax.set_ylabel("throughput (jobs/s)")
        ax.set_ylim(0, _y_top(all_y, all_hi))
        ax.yaxis.set_major_formatter(FuncFormatter(_tick))
        ax.grid(True, alpha=0.3)
        _legend(ax, handles, labels=labels)
        return _save(fig)

    caption = ("Mean throughput (jobs completed per second over the measured window) at each worker count, "
               "with the 95 % confidence interval of the mean across repetitions as error bars; dashed: the "
               "Universal Scalability Law X(N) = λN / (1 + σ(N−1) + κN(N−1)) fitted to the trustworthy runs, "
               "its peak marked ▼. σ (contention) bends the curve flat; κ (coherency, crosstalk between "
               "workers) makes it fall after the peak. Red rings mark cells with a failed, suspect or "
               "invariant-breaking run.")
    skipped = [label for label, cells in series if len(cells) < 2]
    if skipped:
        caption += (" Not drawn (a single worker count, nothing to scale): " + "; ".join(skipped) + ".")
    return {"name": "throughput_vs_workers", "title": "Throughput vs workers (USL fit)",
            "caption": caption, "draw": draw}, table


def _symlog_x(ax: plt.Axes, values: Sequence[float]) -> None:
    """Log x axis that still shows 0: symlog, linear below the smallest non-zero value."""
    positive = sorted({float(v) for v in values if v > 0})
    ticks = sorted({float(v) for v in values})
    if 0.0 in ticks and positive:
        ax.set_xscale("symlog", linthresh=positive[0], linscale=0.6)
        ax.set_xlim(-positive[0] * 0.3, positive[-1] * 2.0)
    else:
        ax.set_xscale("log")
        ax.set_xlim(positive[0] / 2.0, positive[-1] * 2.0)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: _short_count(v)))
    ax.xaxis.set_minor_locator(NullLocator())


def _history(sweep: Sweep) -> dict | None:
    """Claim latency p50/p99 and throughput vs history size, one series per other varying axis."""
    series = [(label, cells) for label, cells in _series(sweep, "history") if len(cells) >= 2]
    if not series:
        return None

    def draw() -> bytes:
        fig, (ax_lat, ax_tput) = plt.subplots(1, 2, figsize=(11, 4.4), dpi=100, layout="constrained")
        xs_all, lat_all, tput_all, handles = [], [], [], []
        for i, (label, cells) in enumerate(series):
            color = f"C{i % 10}"
            xs = [_x(sweep, c, "history") for c in cells]
            xs_all += xs
            handles.append(Line2D([], [], color=color, marker="o", label=label))
            for col, style, name in (("claim_p50_us", "-o", "p50"), ("claim_p99_us", "--s", "p99")):
                stats = [c.stat(col) for c in cells]
                _errorbar(ax_lat, xs, stats, scale=1000.0, fmt=style, color=color, markersize=5)
                lat_all += [s.mean / 1000.0 for s in stats if s.n]
                lat_all += [s.low / 1000.0 for s in stats if s.n > 1 and not _missing(s.low)]
            stats = [c.stat("throughput_jobs_per_s") for c in cells]
            _errorbar(ax_tput, xs, stats, fmt="-o", color=color, label=label, markersize=5)
            tput_all += [s.mean for s in stats if s.n]
            bad = [(x, s.mean) for x, s, c in zip(xs, stats, cells) if c.bad and s.n]
            if bad:
                ax_tput.plot(*zip(*bad), "o", markersize=11, markerfacecolor="none", markeredgecolor="#c62828")
        for ax in (ax_lat, ax_tput):
            _symlog_x(ax, xs_all)
            ax.set_xlabel("history (finished rows in the table; 0 at left, log scale above)")
            ax.grid(True, alpha=0.3)
        _auto_log_y(ax_lat, lat_all, "claim latency (ms)")
        _auto_log_y(ax_tput, tput_all, "throughput (jobs/s)")
        _legend(ax_lat, handles + _style_keys("claim"))
        _legend(ax_tput)
        return _save(fig)

    return {"name": "claim_latency_vs_history", "title": "Claim latency and throughput vs history",
            "caption": ("Left: mean claim latency p50 (solid) and p99 (dashed) in ms across repetitions, with "
                        "95 % CI error bars; right: mean throughput. The history axis is logarithmic above its "
                        "smallest non-zero size and linear below it (symlog), so a table with no history (0) "
                        "still has its own labelled position at the left; the ticks are the measured sizes. "
                        "A flat line means the index keeps finished rows out of the claim's way; a rising one "
                        "means each claim steps over history. Red rings: cells with a failed, suspect or "
                        "invariant-breaking run."),
            "draw": draw}


def _batch(sweep: Sweep) -> dict | None:
    """Throughput vs batch size, and the per-job wait inside a batch, one series per other varying axis."""
    all_series = _series(sweep, "batch")
    series = [(label, cells) for label, cells in all_series if len(cells) >= 2]
    if not series:
        return None

    def draw() -> bytes:
        fig, (ax_t, ax_w) = plt.subplots(1, 2, figsize=(11, 4.4), dpi=100, layout="constrained")
        xs_all, tput_all, wait_all, tput_hi, wait_hi, handles_w = [], [], [], [], [], []
        for i, (label, cells) in enumerate(series):
            color = f"C{i % 10}"
            xs = [_x(sweep, c, "batch") for c in cells]
            xs_all += xs
            stats = [c.stat("throughput_jobs_per_s") for c in cells]
            _errorbar(ax_t, xs, stats, fmt="-o", color=color, label=label, markersize=5)
            tput_all += [s.mean for s in stats if s.n]
            tput_hi += [s.high for s in stats if s.n > 1 and not _missing(s.high)]
            bad = [(x, s.mean) for x, s, c in zip(xs, stats, cells) if c.bad and s.n]
            if bad:
                ax_t.plot(*zip(*bad), "o", markersize=11, markerfacecolor="none", markeredgecolor="#c62828")
            for col, style, name in (("batch_wait_p50_us", "-o", "p50"), ("batch_wait_p99_us", "--s", "p99")):
                wstats = [c.stat(col) for c in cells]
                if any(s.n for s in wstats):
                    _errorbar(ax_w, xs, wstats, scale=1000.0, fmt=style, color=color, markersize=5)
                    if name == "p50":
                        handles_w.append(Line2D([], [], color=color, marker="o", label=label))
                    wait_all += [s.mean / 1000.0 for s in wstats if s.n]
                    wait_hi += [s.high / 1000.0 for s in wstats if s.n > 1 and not _missing(s.high)]
        for ax in (ax_t, ax_w):
            _int_log_axis(ax, xs_all)
            ax.set_xlim(min(xs_all) / 1.6, max(xs_all) * 1.6)
            ax.set_xlabel("batch size (rows per claim, log scale)")
            ax.grid(True, alpha=0.3)
        ax_t.set_ylabel("throughput (jobs/s)")
        ax_t.set_ylim(0, _y_top(tput_all, tput_hi))
        ax_t.yaxis.set_major_formatter(FuncFormatter(_tick))
        _legend(ax_t)
        if wait_all:
            ax_w.set_ylim(0, _y_top(wait_all, wait_hi))
            ax_w.set_ylabel("per-job wait inside a batch (ms)")
            ax_w.yaxis.set_major_formatter(FuncFormatter(_tick))
            _legend(ax_w, handles_w + _style_keys("wait"))
        else:
            ax_w.text(0.5, 0.5, "batch_wait_p50_us / batch_wait_p99_us\nnot recorded in cells.csv",
                      ha="center", va="center", transform=ax_w.transAxes, color="#c62828")
            ax_w.set_yticks([])
        return _save(fig)

    caption = ("Left: mean throughput (jobs/s) against rows per claim, with 95 % CI error bars. Right: the "
               "per-job wait inside a batch (p50 solid, p99 dashed, ms): how long a claimed job waits for the "
               "jobs before it in the same batch; the price a batch pays for its throughput, and the time its "
               "lease must cover.")
    skipped = [label for label, cells in all_series if len(cells) < 2]
    if skipped:
        caption += f" Not drawn ({len(skipped)} series with a single batch size): " + "; ".join(skipped) + "."
    return {"name": "throughput_vs_batch", "title": "Throughput and per-job wait vs batch size",
            "caption": caption, "draw": draw}


# =========================================================================== sweep report


def render_sweep_report(sweep_dir: Path) -> Path:
    """Render ``sweep_dir/compare.html``, the sweep's comparison report, from its result files.

    Args:
        sweep_dir: a sweep directory (``sweep.json``; ``cells.csv`` with one row per run;
            ``runs/<run_id>/summary.json`` for each run's ``complete``; optionally
            ``capacity.json``), as written by the sweep driver.

    Returns:
        Path of the written ``compare.html`` (UTF-8, self-contained: inline CSS and
        figures as base64 PNG data URIs). It states the capacity answer in one
        sentence, then tables of means with 95 % confidence intervals across
        repetitions (throughput jobs/s, claims/s, claim p50/p99 ms, oldest eligible
        age s, errors), figures for the axes the sweep varies (workers: throughput
        with a USL fit and its table; history: claim latency p50/p99; batch:
        throughput and per-job batch wait), claim-plan summaries, table and index
        sizes, and a link to each run's report.html. Each figure is also written to
        ``sweep_dir/plots/<name>.png``.

    Raises:
        CompareError: ``SWEEP_DIR: ...`` when sweep.json is missing or unreadable, or
            cells.csv / capacity.json does not parse.
    """
    sweep = load_sweep(Path(sweep_dir), "SWEEP_DIR")
    plots_dir = sweep.path / "plots"
    specs, usl_rows = [], None
    if "workers" in sweep.varying:
        spec, usl_rows = _scaling(sweep)
        if spec:
            specs.append(spec)
    if "history" in sweep.varying:
        specs.append(_history(sweep))
    if "batch" in sweep.varying:
        specs.append(_batch(sweep))
    figures = []
    for spec in filter(None, specs):
        png = spec["draw"]()
        plots_dir.mkdir(parents=True, exist_ok=True)
        (plots_dir / f"{spec['name']}.png").write_bytes(png)
        figures.append({k: spec[k] for k in ("name", "title", "caption")} | {"data_uri": _png_uri(png)})

    meta = sweep.meta
    context = {
        "sweep_id": meta.get("sweep_id") or sweep.path.name,
        "meta_rows": [(k, _label_value(meta.get(k)) if meta.get(k) is not None else NA) for k in
                      ("name", "description", "file", "matrix_hash", "repetitions", "started_at", "ended_at")],
        "axes": [(a, ", ".join(_label_value(v) for v in vals), a in sweep.varying)
                 for a, vals in (meta.get("axes") or {}).items()],
        "banners": _banners(sweep),
        "answer": _capacity_answer(sweep),
        "varying": sweep.varying,
        "cell_rows": _cell_rows(sweep),
        "figures": figures,
        "usl_rows": usl_rows,
        "plan_rows": _plan_rows(sweep),
        "size_rows": _size_rows(sweep),
        "run_rows": _run_rows(sweep),
        "base_rows": [(k, _label_value(v) if not isinstance(v, (dict, list)) else json.dumps(v))
                      for k, v in (meta.get("base") or {}).items()],
    }
    html = _environment().get_template(SWEEP_TEMPLATE).render(**context)
    out = sweep.path / "compare.html"
    out.write_text(html, encoding="utf-8")
    return out


# =========================================================================== A vs B


@dataclass
class _Row:
    metric: str
    unit: str
    a: float
    b: float
    rel_diff: float
    p_value: float | None
    significant: bool | None
    samples: str
    higher_is_better: bool
    scale: float = 1.0  # divide a/b by this for display (µs -> ms)


def _kind(path: Path, arg: str) -> str:
    """'run' or 'sweep'; CompareError naming ``arg`` otherwise."""
    if not path.exists():
        raise CompareError(f"{arg}: {path} does not exist; allowed: a run directory (summary.json) "
                           "or a sweep directory (sweep.json)")
    if path.is_dir() and (path / "sweep.json").is_file():
        return "sweep"
    if path.is_dir() and (path / "summary.json").is_file():
        return "run"
    raise CompareError(f"{arg}: {path} is neither a run directory (summary.json) nor a sweep directory "
                       "(sweep.json)")


def _per_second(run_dir: Path, column: str) -> list[float]:
    """Per-second values of ``column`` from a run's intervals.csv (the final partial second of an
    interrupted run dropped); [] when the file or column is missing."""
    path = run_dir / "intervals.csv"
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        return []
    if column not in df:
        return []
    try:
        complete = json.loads((run_dir / "summary.json").read_text(encoding="utf-8")).get("complete")
    except (OSError, json.JSONDecodeError, AttributeError):
        complete = True
    if complete is False and len(df) > 1:
        df = df.iloc[:-1]
    return [float(v) for v in pd.to_numeric(df[column], errors="coerce").dropna()]


def _test(samples_a: list[float], samples_b: list[float]) -> tuple[float | None, bool | None]:
    if not samples_a or not samples_b:
        return None, None
    res = compare_samples(samples_a, samples_b)
    return res["p_value"], res["significant"]


def _rel(a: float, b: float) -> float:
    return (b - a) / a if not _missing(a) and not _missing(b) and a != 0 else math.nan


# (label, unit, summary getter, per-second column, higher is better, display scale)
_RUN_METRICS: tuple[tuple[str, str, Callable[[dict], Any], str | None, bool, float], ...] = (
    ("throughput", "jobs/s", lambda s: s.get("throughput_jobs_per_s"), "jobs_completed", True, 1.0),
    ("claims per second", "claims/s", lambda s: s.get("claims_per_s"), "claims", True, 1.0),
    ("claim latency p50", "ms", lambda s: (s.get("claim_latency_us") or {}).get("p50"), "claim_p50_us", False, 1000.0),
    ("claim latency p95", "ms", lambda s: (s.get("claim_latency_us") or {}).get("p95"), "claim_p95_us", False, 1000.0),
    ("claim latency p99", "ms", lambda s: (s.get("claim_latency_us") or {}).get("p99"), "claim_p99_us", False, 1000.0),
    ("oldest eligible age max", "s", lambda s: (s.get("oldest_eligible_age_s") or {}).get("max"), None, False, 1.0),
)


def _compare_runs(a: Path, b: Path) -> tuple[list[_Row], list[str]]:
    sa = _read_json(a / "summary.json", "RUN_OR_SWEEP_A")
    sb = _read_json(b / "summary.json", "RUN_OR_SWEEP_B")
    rows = []
    for label, unit, get, column, higher, scale in _RUN_METRICS:
        va, vb = _as_float(get(sa)), _as_float(get(sb))
        if column:
            xa, xb = _per_second(a, column), _per_second(b, column)
            p, sig = _test(xa, xb)
            samples = f"{len(xa)}/{len(xb)} s"
        else:
            p, sig, samples = None, None, "max: no test"
        rows.append(_Row(label, unit, va, vb, _rel(va, vb), p, sig, samples, higher, scale))
    notes = [
        "A and B are the run's whole-window figures (summary.json); relative difference = (B − A) / A.",
        "p-value: Welch's unequal-variance t-test on the per-second samples of intervals.csv (jobs_completed "
        "for throughput, claims for claims/s, claim_p50_us / claim_p95_us / claim_p99_us for latencies); "
        "significant = p < 0.05. The oldest age max is one number per run: no test.",
        PER_SECOND_NOTE,
    ]
    for label, s in (("A", sa), ("B", sb)):
        if s.get("complete") is False:
            notes.append(f"run {label} is incomplete (complete = false): its figures cover part of the window.")
        if s.get("suspect"):
            notes.append(f"run {label} is suspect: " + "; ".join(s.get("suspect_reasons") or ["no reason recorded"]))
        inv = s.get("invariants") or {}
        if any(v != 0 for v in inv.values()):
            notes.append(f"run {label}'s invariants are not all 0: {json.dumps(inv)}")
    return rows, notes


_SWEEP_METRICS = (
    ("throughput", "jobs/s", "throughput_jobs_per_s", "jobs_completed", True, 1.0),
    ("claim p50", "ms", "claim_p50_us", "claim_p50_us", False, 1000.0),
    ("claim p99", "ms", "claim_p99_us", "claim_p99_us", False, 1000.0),
    ("oldest age max", "s", "oldest_age_max_s", None, False, 1.0),
)


def _cell_key(sweep: Sweep, cell: Cell) -> tuple:
    return tuple(sorted((k, _norm(v)) for k, v in cell.params.items()))


def _compare_sweeps(a: Path, b: Path) -> tuple[list[_Row], list[str]]:
    sa, sb = load_sweep(a, "RUN_OR_SWEEP_A"), load_sweep(b, "RUN_OR_SWEEP_B")
    b_cells = {_cell_key(sb, c): c for c in sb.cells}
    rows, notes, fallback, unmatched = [], [], [], []
    matched_b = set()
    for ca in sa.cells:
        key = _cell_key(sa, ca)
        cb = b_cells.get(key)
        if cb is None:
            unmatched.append(f"A {ca.cell_id} ({ca.label})")
            continue
        matched_b.add(key)
        name = ", ".join(f"{k} {_label_value(v)}" for k, v in ca.params.items()) or ca.cell_id
        da, db = ca.done, cb.done
        for label, unit, column, per_s, higher, scale in _SWEEP_METRICS:
            xa = [float(v) for v in da[column] if not _missing(v)] if column in da else []
            xb = [float(v) for v in db[column] if not _missing(v)] if column in db else []
            ma = float(np.mean(xa)) if xa else math.nan
            mb = float(np.mean(xb)) if xb else math.nan
            if not xa or not xb:
                p, sig, samples = None, None, "no finished run"
            elif len(xa) >= 2 and len(xb) >= 2:
                p, sig = _test(xa, xb)
                samples = f"{len(xa)}/{len(xb)} reps"
            elif per_s:
                sec_a = [v for d in da["run_dir"] for v in _per_second(a / d, per_s)]
                sec_b = [v for d in db["run_dir"] for v in _per_second(b / d, per_s)]
                p, sig = _test(sec_a, sec_b)
                samples = f"{len(sec_a)}/{len(sec_b)} s*"
                fallback.append(name)
            else:
                p, sig, samples = None, None, "1 rep: no test"
            rows.append(_Row(f"{name}: {label}", unit, ma, mb, _rel(ma, mb), p, sig, samples, higher, scale))
    unmatched += [f"B {c.cell_id} ({c.label})" for c in sb.cells if _cell_key(sb, c) not in matched_b]
    notes.append("Cells are matched by their parameters. A and B are means over each cell's finished "
                 "repetitions (cells.csv); relative difference = (B − A) / A; p-value: Welch's t-test "
                 "(capacity.compare_samples) on the repetitions, significant = p < 0.05.")
    if fallback:
        notes.append("* A cell with a single repetition has no spread to test: its p-value uses the per-second "
                     "samples of its runs (intervals.csv) instead — " + "; ".join(dict.fromkeys(fallback)) + ". "
                     + PER_SECOND_NOTE)
    if unmatched:
        notes.append("Cells without a match in the other sweep (not compared): " + "; ".join(unmatched) + ".")
    base_a, base_b = sa.meta.get("base") or {}, sb.meta.get("base") or {}
    differ = [k for k in sorted(set(base_a) | set(base_b))
              if k not in ("results", "dsn", "schema") and _norm(base_a.get(k)) != _norm(base_b.get(k))]
    if differ:
        notes.append("The sweeps' base parameters differ in: " + ", ".join(
            f"{k} ({_label_value(base_a.get(k))} vs {_label_value(base_b.get(k))})" for k in differ) + ".")
    for label, s in (("A", sa), ("B", sb)):
        bad = [c.cell_id for c in s.cells if c.bad]
        if bad:
            notes.append(f"sweep {label} has cells with failed, suspect or invariant-breaking runs: {', '.join(bad)}.")
        if s.meta.get("complete") is False:
            notes.append(f"sweep {label} is incomplete (complete = false).")
    return rows, notes


def _fmt_value(row: _Row, v: float) -> str:
    return NA if _missing(v) else f"{_sig(v / row.scale)} {row.unit}"


def _fmt_rel(v: float) -> str:
    return NA if _missing(v) else f"{v * 100:+.1f} %"


def _fmt_p(p: float | None) -> str:
    if p is None:
        return NA
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}"


def _fmt_sig(s: bool | None) -> str:
    return NA if s is None else ("yes" if s else "no")


def _text_table(rows: list[_Row]) -> str:
    header = ("metric", "A", "B", "rel. diff (B-A)/A", "p-value", "significant", "samples A/B")
    body = [(r.metric, _fmt_value(r, r.a), _fmt_value(r, r.b), _fmt_rel(r.rel_diff), _fmt_p(r.p_value),
             _fmt_sig(r.significant), r.samples) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    right = (False, True, True, True, True, False, False)

    def line(cells):
        return "  ".join((str(c).rjust(w) if r else str(c).ljust(w)) for c, w, r in zip(cells, widths, right)).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *(line(b) for b in body)])


def _draw_rel_diff(rows: list[_Row]) -> bytes:
    """Horizontal bars of (B − A) / A in %: green when B is better, red when worse, pale when not significant."""
    shown = [r for r in rows if not _missing(r.rel_diff)]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.32 * max(len(shown), 1)), dpi=100, layout="constrained")
    if not shown:
        ax.text(0.5, 0.5, "no relative difference could be computed", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
        return _save(fig)
    ys = np.arange(len(shown))[::-1]
    colors, alphas = [], []
    for r in shown:
        better = (r.rel_diff > 0) == r.higher_is_better
        colors.append("#2e7d32" if better else "#c62828")
        alphas.append(1.0 if r.significant else 0.35)
    for y, r, c, a in zip(ys, shown, colors, alphas):
        ax.barh(y, r.rel_diff * 100, color=c, alpha=a, height=0.7)
        ax.text(r.rel_diff * 100, y, f" {r.rel_diff * 100:+.1f} %", va="center",
                ha="left" if r.rel_diff >= 0 else "right", fontsize="x-small")
    ax.set_yticks(ys, [f"{r.metric} ({r.unit})" for r in shown], fontsize="small")
    ax.axvline(0, color="#333", linewidth=0.8)
    lo = min(0.0, min(r.rel_diff for r in shown) * 100)
    hi = max(0.0, max(r.rel_diff for r in shown) * 100)
    pad = 0.2 * (hi - lo) or 1.0
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_xlabel("relative difference (B − A) / A (%)")
    ax.grid(True, axis="x", alpha=0.3)
    from matplotlib.patches import Patch
    _legend(ax, [Patch(color="#2e7d32", label="B better"), Patch(color="#c62828", label="B worse"),
                 Patch(color="#999", alpha=0.35, label="pale: not significant or untested")], ncol=3)
    return _save(fig)


def compare(a_path: Path | str, b_path: Path | str, out_path: Path | str | None = None) -> tuple[str, Path]:
    """Compare two runs or two sweeps from their result files.

    Args:
        a_path, b_path: each a run directory (``summary.json``, ``intervals.csv``) or a
            sweep directory (``sweep.json``, ``cells.csv``, ``runs/``); both of the same kind.
        out_path: where to write the HTML page; a directory (existing, or ending in "/")
            means ``<dir>/compare.html``.
            Default: ``<b_path>/compare_vs_<name of a_path>.html``.

    Returns:
        (text, html_path): ``text`` is a fixed-width table (metric, A, B, relative
        difference (B − A)/A, p-value, significant, samples) followed by notes;
        ``html_path`` the page rendered from ``report_templates/compare_pair.html.j2``
        with the same table and a bar plot of the relative differences (also written
        as ``plots/<page stem>_relative_difference.png`` beside it).
        Run vs run: throughput, claims/s, claim p50/p95/p99 (ms) and oldest eligible
        age max (s) from summary.json, Welch's t-test on intervals.csv per-second
        samples (autocorrelated, so p-values are optimistic; the text says so).
        Sweep vs sweep: cells matched by params; repetition means compared with
        ``capacity.compare_samples``, or per-second samples where a cell has one repetition.

    Raises:
        CompareError: one line naming RUN_OR_SWEEP_A / RUN_OR_SWEEP_B (a missing path,
            neither kind, a run against a sweep) or ``--out`` (cannot be written).
    """
    a, b = Path(a_path), Path(b_path)
    kind_a, kind_b = _kind(a, "RUN_OR_SWEEP_A"), _kind(b, "RUN_OR_SWEEP_B")
    if kind_a != kind_b:
        raise CompareError(f"RUN_OR_SWEEP_B: {b} is a {kind_b} directory but RUN_OR_SWEEP_A ({a}) is a {kind_a} "
                           "directory; compare a run with a run, or a sweep with a sweep")
    rows, notes = (_compare_runs if kind_a == "run" else _compare_sweeps)(a, b)
    table = _text_table(rows)
    text = "\n".join([f"A: {a} ({kind_a})", f"B: {b} ({kind_b})", "", table, ""] + [f"- {n}" for n in notes])

    if out_path is None:
        out = b / f"compare_vs_{a.resolve().name}.html"
    else:
        out = Path(out_path)
        if out.is_dir() or str(out_path).endswith(("/", "\\")):
            out = out / "compare.html"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        png = _draw_rel_diff(rows)
        plots = out.parent / "plots"
        plots.mkdir(exist_ok=True)
        (plots / f"{out.stem}_relative_difference.png").write_bytes(png)
        html = _environment().get_template(PAIR_TEMPLATE).render(
            kind=kind_a, a=str(a), b=str(b),
            a_name=a.resolve().name, b_name=b.resolve().name,
            rows=[{"metric": r.metric, "a": _fmt_value(r, r.a), "b": _fmt_value(r, r.b),
                   "rel": _fmt_rel(r.rel_diff), "p": _fmt_p(r.p_value), "sig": _fmt_sig(r.significant),
                   "samples": r.samples,
                   "worse": bool(r.significant) and not _missing(r.rel_diff)
                   and ((r.rel_diff > 0) != r.higher_is_better)} for r in rows],
            notes=notes, plot_uri=_png_uri(png))
        out.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise CompareError(f"--out: cannot write {out} ({exc.strerror or exc})") from None
    return text, out
