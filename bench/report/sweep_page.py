"""A sweep's comparison report: ``compare.html`` rendered from the sweep directory's result files.

One page per sweep (:func:`render_sweep_report`): the capacity answer in one sentence,
banners for failed, suspect or invariant-breaking runs, tables of means with 95 %
confidence intervals across repetitions, figures for the axes the sweep varies
(workers with a USL fit, history, batch), claim-plan summaries, table and index sizes,
and a link to each run's report. It reads the files through :mod:`bench.results.sweep`
and never touches a database: data flows one way (result files → report).

Public API:
    render_sweep_report(sweep_dir) -> Path of ``sweep_dir/compare.html``
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator  # noqa: E402

from bench.analysis.statistics import fit_usl, workers_needed  # noqa: E402
from bench.report.format import NA, fmt_num, fmt_sig  # noqa: E402
from bench.results.values import as_float, fmt_label, is_missing  # noqa: E402
from bench.report.render import environment, legend_above, png_uri, save_png  # noqa: E402
from bench.results.sweep import Cell, Stat, SweepResults, axis_fields, load_sweep, norm_param, read_json  # noqa: E402

__all__ = ["render_sweep_report"]

SWEEP_TEMPLATE = "compare.html.j2"
LOG_SCALE_RATIO = 20.0  # a y axis switches to log above this max/min ratio
#: The design a capacity answer names, in this order.
DESIGN_KEYS = ("policy", "index", "layout", "batch")
#: Size of the two-panel figures (history, batch), side by side.
_TWO_PANELS = {"figsize": (11, 4.4), "dpi": 100, "layout": "constrained"}
#: Marker style of the red ring around a cell with a failed, suspect or invariant-breaking run.
_RING = {"markersize": 11, "markerfacecolor": "none", "markeredgecolor": "#c62828"}


# =========================================================================== formatting


def _ci(stat: Stat, scale: float = 1.0, fmt: Callable[[Any], str] = fmt_sig) -> str:
    """'mean (low–high)' of a Stat divided by ``scale``; '(n = 1)' when there is no interval."""
    if stat.n == 0:
        return NA
    mean = fmt(stat.mean / scale)
    if stat.n == 1 or is_missing(stat.low):
        return f"{mean} (n = 1)"
    return f"{mean} ({fmt(stat.low / scale)}–{fmt(stat.high / scale)})"


def _bytes_unit(v: float) -> tuple[float, str]:
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "kiB")):
        if abs(v) >= scale:
            return scale, unit
    return 1.0, "B"


def _ci_bytes(stat: Stat) -> str:
    """Like :func:`_ci` for a size in bytes, in the binary unit of its mean: '1.23 (1.20–1.26) MiB'."""
    if stat.n == 0:
        return NA
    scale, unit = _bytes_unit(stat.mean)
    return f"{_ci(stat, scale)} {unit}"


def _ms_text(us: Any) -> str:
    """Microseconds as milliseconds, three significant figures."""
    return NA if is_missing(us) else fmt_sig(float(us) / 1000.0)


def _short_count(v: float) -> str:
    """Axis tick text for counts: 0, 500, 100k, 1M, 2.5M."""
    v = float(v)
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:g}{suffix}"
    return f"{v:g}"


def _tick(y: float, _pos: Any = None) -> str:
    """Axis tick text: 0.5, 10, 1,000, 35,000."""
    return f"{y:,g}"


# =========================================================================== capacity answer


def _design_text(values: dict) -> str:
    parts = [f"{k} {fmt_label(values[k])}" for k in DESIGN_KEYS if not is_missing(values.get(k)) and values.get(k) != ""]
    return ", ".join(parts) if parts else "(design not recorded)"


def _capacity_answer(sweep: SweepResults) -> dict:
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
        cap = read_json(cap_path, "capacity.json")
        design = cap.get("design") or {}
        rate = cap.get("sustainable_rate_jobs_per_s")
        workers = cap.get("workers", design.get("workers"))
        steps = cap.get("steps") or []
        if not is_missing(rate):
            sentence = (f"With design {_design_text(design)}, this database sustains about {fmt_num(rate)} jobs/s "
                        f"at p99 claim {_ms_text(cap.get('claim_p99_us_at_rate'))} ms using "
                        f"{fmt_label(workers)} workers.")
            details.append(f"From the capacity search in capacity.json ({len(steps)} offered rates tried): the "
                           "highest open-loop arrival rate at which the oldest eligible age did not keep growing.")
            return {"sentence": sentence, "ok": True, "details": details, "cell_id": None}
        sentence = (f"The capacity search (capacity.json) found no sustainable rate for design "
                    f"{_design_text(design)}: the queue saturated at every rate it tried ({len(steps)} "
                    f"step{'s' if len(steps) != 1 else ''}).")
        if best is not None:
            tput = best.stat("throughput_jobs_per_s")
            details.append(f"For reference, the sweep's best trustworthy cell ({best.cell_id}) drained a seeded "
                           f"backlog at {fmt_num(tput.mean)} jobs/s; that is a ceiling, not a sustainable rate.")
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
    sentence = (f"With design {_design_text(design)}, this database sustains about {fmt_num(tput.mean)} jobs/s "
                f"at p99 claim {_ms_text(p99.mean)} ms using {fmt_label(design['workers'])} workers.")
    details.append(f"Cell {best.cell_id} ({best.label}): mean throughput over {tput.n} repetition"
                   f"{'s' if tput.n != 1 else ''}, 95 % CI {_ci(tput)} jobs/s; claim p99 {_ci(p99, 1000.0)} ms. "
                   "Chosen as the highest mean throughput among cells whose runs all finished, are complete, "
                   "not suspect, not saturated and have their invariants ok.")
    if is_missing(design.get("rate")) or as_float(design.get("rate")) == 0:
        details.append("These runs drained a seeded backlog (closed loop): the figure is the most this design "
                       "completed per second, an upper bound. The rate it sustains with a stable queue lag "
                       "comes from a capacity search (make capacity), which this sweep directory does not hold.")
    target = sweep.meta.get("target") or {}
    rate = target.get("rate_jobs_per_s")
    workers = as_float(design.get("workers"))
    open_loop = not is_missing(design.get("rate")) and as_float(design.get("rate")) > 0
    if not is_missing(rate) and float(rate) > 0 and open_loop:
        # With open-loop arrivals the workers idle between jobs: workers / throughput is not the
        # time a worker spends on a job, and Little's law would overstate the workers needed.
        details.append(f"Target {fmt_num(rate)} jobs/s: no Little's-law estimate from this cell, whose workers "
                       "were fed by open-loop arrivals and partly idle; it needs a closed-loop cell (a seeded "
                       "backlog, RATE 0), where workers / throughput is the time per job per worker.")
    elif not is_missing(rate) and float(rate) > 0 and workers > 0 and tput.mean > 0:
        util = float(target.get("utilisation") or 0.7)
        job_s = workers / tput.mean  # Little's law: each worker holds one job (or batch) per cycle
        need = workers_needed(float(rate), job_s, util)
        details.append(f"Target {fmt_num(rate)} jobs/s at {util:.0%} utilisation: about {need} workers of this "
                       f"design by Little's law (L = λW with W = workers / throughput = {job_s * 1000:.3g} ms "
                       "per job per worker, as measured in this cell)"
                       + ("; the target is above what this cell measured, so more workers may not scale "
                          "linearly (see the USL fit)." if float(rate) > tput.mean else "."))
    return {"sentence": sentence, "ok": True, "details": details, "cell_id": best.cell_id}


# =========================================================================== tables


def _banners(sweep: SweepResults) -> list[str]:
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


def _param_cells(sweep: SweepResults, cell: Cell) -> list[str]:
    return [fmt_label(sweep.value(cell, a)) for a in sweep.varying]


def _cell_rows(sweep: SweepResults) -> list[dict]:
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
    vals = [str(v) for v in values if not is_missing(v) and str(v) != ""]
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


def _plan_rows(sweep: SweepResults) -> list[dict]:
    """Plan summary per cell that recorded one (plan_* and pgss_* columns of cells.csv)."""
    rows = []
    for cell in sweep.cells:
        done = cell.done
        if done.empty or not any(c in done and done[c].astype(str).str.strip().ne("").any()
                                 for c in ("plan_custom_scan", "plan_generic_scan")):
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
        pgss = (_ci(cell.stat("pgss_calls")), _ci(cell.stat("pgss_mean_ms")),
                _ci(cell.stat("pgss_shared_blks_per_call")))
        rows.append({
            "cell_id": cell.cell_id, "index": fmt_label(sweep.value(cell, "index")),
            "params": _param_cells(sweep, cell), "workers": workers, "workers_scan": workers_scan,
            "workers_scan_warning": "Seq Scan on jobs" in workers_scan,
            "custom": {"scan": custom, "buffers": _ci(cell.stat("plan_custom_buffers")),
                       "ms": _ci(cell.stat("plan_custom_ms"))},
            "generic": {"scan": generic, "buffers": _ci(cell.stat("plan_generic_buffers")),
                        "ms": _ci(cell.stat("plan_generic_ms"))},
            "pgss": pgss if any(v != NA for v in pgss) else None,
            "warning": warning, "bad": cell.bad,
        })
    return rows


def _size_rows(sweep: SweepResults) -> list[dict]:
    rows = []
    for cell in sweep.cells:
        stats = [cell.stat(c) for c in ("table_bytes_before", "table_bytes_after",
                                        "indexes_bytes_before", "indexes_bytes_after")]
        if all(s.n == 0 for s in stats):
            continue
        rows.append({"cell_id": cell.cell_id, "params": _param_cells(sweep, cell),
                     "values": [_ci_bytes(s) for s in stats], "bad": cell.bad})
    return rows


def _run_rows(sweep: SweepResults) -> list[dict]:
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
            "claim_p99": _ms_text(r["claim_p99_us"]),
            "problems": "; ".join(problems) or "ok", "bad": bool(problems),
        })
    return rows


# =========================================================================== figures


def _series(sweep: SweepResults, x_axis: str) -> list[tuple[str, list[Cell]]]:
    """Cells grouped by every other varying axis, each group sorted by ``x_axis``."""
    others = [a for a in sweep.varying if a != x_axis]
    groups: dict[tuple, list[Cell]] = {}
    for cell in sweep.cells:
        if is_missing(_x(sweep, cell, x_axis)):
            continue
        key = tuple(norm_param(sweep.value(cell, a)) for a in others)
        groups.setdefault(key, []).append(cell)
    out = []
    for key, cells in groups.items():
        cells.sort(key=lambda c: _x(sweep, c, x_axis))
        label = (", ".join(f"{a} {fmt_label(v)}" for a, v in zip(others, key))
                 or _design_text({k: sweep.value(cells[0], k) for k in DESIGN_KEYS}))
        out.append((label, cells))
    return out


def _drawable(series: list[tuple[str, list[Cell]]]) -> tuple[list[tuple[str, list[Cell]]], list[str]]:
    """The series with at least two cells (a line needs two points), and the labels of the others."""
    return [s for s in series if len(s[1]) >= 2], [label for label, cells in series if len(cells) < 2]


def _x(sweep: SweepResults, cell: Cell, axis: str) -> float:
    """The cell's value on ``axis`` as a float (NaN when it has none)."""
    return as_float(sweep.value(cell, axis))


def _colored(sweep: SweepResults, series: Sequence[tuple], axis: str) -> Iterator[tuple[str, list[float], tuple]]:
    """(colour, x values on ``axis`` of its cells, series) for each ``(label, cells, …)`` series,
    colours from matplotlib's default cycle C0…C9."""
    for i, item in enumerate(series):
        yield f"C{i % 10}", [_x(sweep, c, axis) for c in item[1]], item


def _errorbar(ax: plt.Axes, xs, stats: list[Stat], scale: float = 1.0, **kw):
    """Means with asymmetric 95 % CI error bars (no bar where the CI is unknown, n = 1)."""
    means = np.array([s.mean / scale for s in stats])
    lo = np.array([0.0 if is_missing(s.low) else (s.mean - s.low) / scale for s in stats])
    hi = np.array([0.0 if is_missing(s.high) else (s.high - s.mean) / scale for s in stats])
    ok = ~np.isnan(means)
    return ax.errorbar(np.asarray(xs, dtype=float)[ok], means[ok], yerr=[lo[ok], hi[ok]], capsize=3, **kw)


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
    v = np.asarray([x for x in values if not is_missing(x) and x > 0], dtype=float)
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
    m = [x for x in means if not is_missing(x)]
    h = [x for x in highs if not is_missing(x)]
    if not m:
        return 1.0
    top = max(m) * 1.15
    if h:
        top = max(top, min(max(h) * 1.05, 2.0 * max(m)))
    return top or 1.0


def _linear_y(ax: plt.Axes, stats: Sequence[Stat], label: str, scale: float = 1.0) -> None:
    """Linear y axis from 0 to :func:`_y_top` of the means and upper CI bounds of ``stats`` / ``scale``."""
    means = [s.mean / scale for s in stats if s.n]
    highs = [s.high / scale for s in stats if s.n > 1 and not is_missing(s.high)]
    ax.set_ylabel(label)
    ax.set_ylim(0, _y_top(means, highs))
    ax.yaxis.set_major_formatter(FuncFormatter(_tick))


def _ring_bad(ax: plt.Axes, xs: Sequence[float], stats: Sequence[Stat], cells: Sequence[Cell]) -> None:
    """Red rings around the means of cells with a failed, suspect or invariant-breaking run."""
    bad = [(x, s.mean) for x, s, c in zip(xs, stats, cells) if c.bad and s.n]
    if bad:
        ax.plot(*zip(*bad), "o", **_RING)


def _draw_throughput(ax: plt.Axes, xs: Sequence[float], cells: Sequence[Cell], color: str, label: str) -> list[Stat]:
    """One series' mean throughput at ``xs`` as a line with 95 % CI bars, bad cells ringed; its Stats."""
    stats = [c.stat("throughput_jobs_per_s") for c in cells]
    _errorbar(ax, xs, stats, fmt="-o", color=color, label=label, markersize=5)
    _ring_bad(ax, xs, stats, cells)
    return stats


def _fit_points(sweep: SweepResults, cells: list[Cell]) -> tuple[list[float], list[float], int]:
    """(workers, throughput) of every trusted run of ``cells``, and how many runs were left out."""
    ws, xs, left_out = [], [], 0
    for cell in cells:
        w = _x(sweep, cell, "workers")
        for _, r in cell.runs.iterrows():
            if r["trusted"] and not is_missing(r["throughput_jobs_per_s"]):
                ws.append(w)
                xs.append(float(r["throughput_jobs_per_s"]))
            else:
                left_out += 1
    return ws, xs, left_out


def _scaling(sweep: SweepResults) -> tuple[dict | None, list[dict]]:
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
                "lambda": fmt_sig(fit.lambda_jobs_per_s),
                "sigma": f"{fit.sigma:.4g}", "sigma_se": NA if is_missing(fit.sigma_stderr) else f"{fit.sigma_stderr:.2g}",
                "kappa": f"{fit.kappa:.4g}", "kappa_se": NA if is_missing(fit.kappa_stderr) else f"{fit.kappa_stderr:.2g}",
                "peak_workers": ("∞ (κ = 0: no peak)" if math.isinf(fit.peak_workers) else f"{fit.peak_workers:,.1f}"),
                "peak_jobs": ("∞" if math.isinf(fit.peak_jobs_per_s) else fmt_num(fit.peak_jobs_per_s)),
                "mape": f"{fit.mape_pct:.1f}", "r2": NA if is_missing(fit.r2) else f"{fit.r2:.3f}",
                "poor": (fit.mape_pct > 10 or (not is_missing(fit.sigma_stderr) and fit.sigma_stderr > max(fit.sigma, 1e-9))
                         or (not is_missing(fit.kappa_stderr) and fit.kappa_stderr > max(fit.kappa, 1e-12))),
                "beyond": (not math.isinf(fit.peak_workers) and fit.peak_workers > max(counts)),
            }
        table.append(row)
        if len(cells) >= 2:
            drawn.append((label, cells, fit))

    if not drawn:
        return None, table

    def draw() -> bytes:
        fig, ax = plt.subplots(figsize=(10, 4.6), dpi=100, layout="constrained")
        all_w, all_stats, handles, labels = [], [], [], []
        for color, xs, (label, cells, fit) in _colored(sweep, drawn, "workers"):
            stats = [c.stat("throughput_jobs_per_s") for c in cells]
            h = _errorbar(ax, xs, stats, fmt="o", color=color)
            _ring_bad(ax, xs, stats, cells)
            all_w += xs
            all_stats += stats
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
                ax.annotate(f"peak {fmt_num(fit.peak_jobs_per_s)} jobs/s\nat {fit.peak_workers:.0f} workers",
                            (fit.peak_workers, fit.peak_jobs_per_s), textcoords="offset points",
                            xytext=(6, 6), fontsize="x-small", color=color)
                all_w.append(fit.peak_workers)
        if any(c.bad for _, cells, _ in drawn for c in cells):
            (ring,) = ax.plot([], [], "o", **_RING)
            handles.append(ring)
            labels.append("cell with a failed, suspect or invariant-breaking run")
        _int_log_axis(ax, [w for w in all_w if w > 0 and float(w).is_integer()] or all_w)
        ax.set_xlim(min(all_w) / 1.3, max(all_w) * 1.3)
        ax.set_xlabel("workers (connections, log scale)")
        _linear_y(ax, all_stats, "throughput (jobs/s)")
        ax.grid(True, alpha=0.3)
        legend_above(ax, handles, labels=labels)
        return save_png(fig)

    caption = ("Mean throughput (jobs completed per second over the measured window) at each worker count, "
               "with the 95 % confidence interval of the mean across repetitions as error bars; dashed: the "
               "Universal Scalability Law X(N) = λN / (1 + σ(N−1) + κN(N−1)) fitted to the trustworthy runs, "
               "its peak marked ▼. σ (contention) bends the curve flat; κ (coherency, crosstalk between "
               "workers) makes it fall after the peak. Red rings mark cells with a failed, suspect or "
               "invariant-breaking run.")
    _, skipped = _drawable(series)
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


def _history(sweep: SweepResults) -> dict | None:
    """Claim latency p50/p99 and throughput vs history size, one series per other varying axis."""
    series, _ = _drawable(_series(sweep, "history"))
    if not series:
        return None

    def draw() -> bytes:
        fig, (ax_lat, ax_tput) = plt.subplots(1, 2, **_TWO_PANELS)
        xs_all, lat_all, tput_all, handles = [], [], [], []
        for color, xs, (label, cells) in _colored(sweep, series, "history"):
            xs_all += xs
            handles.append(Line2D([], [], color=color, marker="o", label=label))
            for col, style in (("claim_p50_us", "-o"), ("claim_p99_us", "--s")):
                stats = [c.stat(col) for c in cells]
                _errorbar(ax_lat, xs, stats, scale=1000.0, fmt=style, color=color, markersize=5)
                lat_all += [s.mean / 1000.0 for s in stats if s.n]
                lat_all += [s.low / 1000.0 for s in stats if s.n > 1 and not is_missing(s.low)]
            tput_all += [s.mean for s in _draw_throughput(ax_tput, xs, cells, color, label) if s.n]
        for ax in (ax_lat, ax_tput):
            _symlog_x(ax, xs_all)
            ax.set_xlabel("history (finished rows in the table; 0 at left, log scale above)")
            ax.grid(True, alpha=0.3)
        _auto_log_y(ax_lat, lat_all, "claim latency (ms)")
        _auto_log_y(ax_tput, tput_all, "throughput (jobs/s)")
        legend_above(ax_lat, handles + _style_keys("claim"))
        legend_above(ax_tput)
        return save_png(fig)

    return {"name": "claim_latency_vs_history", "title": "Claim latency and throughput vs history",
            "caption": ("Left: mean claim latency p50 (solid) and p99 (dashed) in ms across repetitions, with "
                        "95 % CI error bars; right: mean throughput. The history axis is logarithmic above its "
                        "smallest non-zero size and linear below it (symlog), so a table with no history (0) "
                        "still has its own labelled position at the left; the ticks are the measured sizes. "
                        "A flat line means the index keeps finished rows out of the claim's way; a rising one "
                        "means each claim steps over history. Red rings: cells with a failed, suspect or "
                        "invariant-breaking run."),
            "draw": draw}


def _batch(sweep: SweepResults) -> dict | None:
    """Throughput vs batch size, and the per-job wait inside a batch, one series per other varying axis."""
    series, skipped = _drawable(_series(sweep, "batch"))
    if not series:
        return None

    def draw() -> bytes:
        fig, (ax_t, ax_w) = plt.subplots(1, 2, **_TWO_PANELS)
        xs_all, tput_stats, wait_stats, handles_w = [], [], [], []
        for color, xs, (label, cells) in _colored(sweep, series, "batch"):
            xs_all += xs
            tput_stats += _draw_throughput(ax_t, xs, cells, color, label)
            for col, style, name in (("batch_wait_p50_us", "-o", "p50"), ("batch_wait_p99_us", "--s", "p99")):
                wstats = [c.stat(col) for c in cells]
                if any(s.n for s in wstats):
                    _errorbar(ax_w, xs, wstats, scale=1000.0, fmt=style, color=color, markersize=5)
                    if name == "p50":
                        handles_w.append(Line2D([], [], color=color, marker="o", label=label))
                    wait_stats += wstats
        for ax in (ax_t, ax_w):
            _int_log_axis(ax, xs_all)
            ax.set_xlim(min(xs_all) / 1.6, max(xs_all) * 1.6)
            ax.set_xlabel("batch size (rows per claim, log scale)")
            ax.grid(True, alpha=0.3)
        _linear_y(ax_t, tput_stats, "throughput (jobs/s)")
        legend_above(ax_t)
        if wait_stats:  # some series recorded a batch wait
            _linear_y(ax_w, wait_stats, "per-job wait inside a batch (ms)", scale=1000.0)
            legend_above(ax_w, handles_w + _style_keys("wait"))
        else:
            ax_w.text(0.5, 0.5, "batch_wait_p50_us / batch_wait_p99_us\nnot recorded in cells.csv",
                      ha="center", va="center", transform=ax_w.transAxes, color="#c62828")
            ax_w.set_yticks([])
        return save_png(fig)

    caption = ("Left: mean throughput (jobs/s) against rows per claim, with 95 % CI error bars. Right: the "
               "per-job wait inside a batch (p50 solid, p99 dashed, ms): how long a claimed job waits for the "
               "jobs before it in the same batch; the price a batch pays for its throughput, and the time its "
               "lease must cover.")
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
        CompareError: ``SWEEP_DIR: ...`` when sweep.json is missing or unreadable or
            cells.csv does not parse; ``capacity.json: ...`` when the sweep's capacity.json
            is not a readable JSON object.
    """
    sweep = load_sweep(Path(sweep_dir), "SWEEP_DIR")
    plots_dir = sweep.path / "plots"
    specs, usl_rows = [], None
    if "workers" in sweep.varying:
        spec, usl_rows = _scaling(sweep)
        specs.append(spec)
    if "history" in sweep.varying:
        specs.append(_history(sweep))
    if "batch" in sweep.varying:
        specs.append(_batch(sweep))
    figures = []
    for spec in filter(None, specs):  # None: nothing to draw for that axis
        png = spec["draw"]()
        plots_dir.mkdir(parents=True, exist_ok=True)
        (plots_dir / f"{spec['name']}.png").write_bytes(png)
        figures.append({k: spec[k] for k in ("name", "title", "caption")} | {"data_uri": png_uri(png)})

    meta = sweep.meta
    context = {
        "sweep_id": meta.get("sweep_id") or sweep.path.name,
        "meta_rows": [(k, fmt_label(meta.get(k)) if meta.get(k) is not None else NA) for k in
                      ("name", "description", "file", "matrix_hash", "repetitions", "started_at", "ended_at")],
        "axes": [(a, ", ".join(fmt_label(v) for v in vals), a in sweep.varying)
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
        "base_rows": [(k, fmt_label(v) if not isinstance(v, (dict, list)) else json.dumps(v))
                      for k, v in (meta.get("base") or {}).items() if k not in axis_fields(meta)],
    }
    html = environment().get_template(SWEEP_TEMPLATE).render(**context)
    out = sweep.path / "compare.html"
    out.write_text(html, encoding="utf-8")
    return out


