"""The sweep report's figures, one per axis the sweep varies (workers with the USL fit and claim latency,
history, batch, the relay's added round trip): each a spec ``{"name", "title", "caption", "draw"}`` (``draw()`` gives PNG bytes); none for an
axis whose every series is a single cell."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D

from bench.analysis.statistics import UslFit, fit_usl
from bench.report.format import NA, fmt_num, fmt_sig
from bench.report.render import legend_above, new_figure, save_png, say
from bench.report.sweep_axes import (
    RING, auto_log_y, axis_value, cell_series, colored, draw_throughput, drawable, errorbar, linear_y, ring_bad,
    style_keys, x_axis,
)
from bench.results.sweep import Cell, Stat, SweepResults
from bench.results.values import is_missing

__all__ = ["scaling_figure", "series_figures"]


def _fit_points(sweep: SweepResults, cells: list[Cell]) -> tuple[list[float], list[float], int]:
    """(workers, throughput) of every trusted run of ``cells``, and how many runs were left out."""
    ws, xs, left_out = [], [], 0
    for cell in cells:
        w = axis_value(sweep, cell, "workers")
        for _, r in cell.runs.iterrows():
            if r["trusted"] and not is_missing(r["throughput_jobs_per_s"]):
                ws.append(w)
                xs.append(float(r["throughput_jobs_per_s"]))
            else:
                left_out += 1
    return ws, xs, left_out


#: The throughput-vs-workers figure's caption (the series not drawn follow it).
SCALING_CAPTION = (
    "Mean throughput (jobs completed per second over the measured window) at each worker count, "
    "with the 95 % confidence interval of the mean across repetitions as error bars; dashed: the "
    "Universal Scalability Law X(N) = λN / (1 + σ(N−1) + κN(N−1)) fitted to the trustworthy runs, "
    "its peak marked ▼. σ (contention) bends the curve flat; κ (coherency, crosstalk between "
    "workers) makes it fall after the peak. Red rings mark cells with a failed, suspect or "
    "invariant-breaking run.")


def scaling_figure(sweep: SweepResults) -> tuple[dict | None, list[dict]]:
    """Throughput vs workers with a USL fit per series: (figure spec or None when no series has two worker
    counts, USL table rows ``{"series", "n_points" (trusted runs), "worker_counts", "left_out", "fit" (λ, σ,
    κ, their standard errors, the peak and the fit's error as text; None when none), "reason"}``)."""
    series = cell_series(sweep, "workers")
    table, drawn = [], []
    for label, cells in series:
        row, fit = _usl_row(sweep, label, cells)
        table.append(row)
        if len(cells) >= 2:
            drawn.append((label, cells, fit))
    if not drawn:
        return None, table
    return _spec("throughput_vs_workers", "Throughput vs workers (USL fit)", SCALING_CAPTION,
                 lambda: _draw_scaling(sweep, drawn), drawable(series)[1],
                 "a single worker count, nothing to scale"), table


def _spec(name: str, title: str, caption: str, draw, skipped: list[str], not_drawn: str | None) -> dict:
    """A figure spec; the caption ends with the series ``skipped`` (not drawn, ``not_drawn`` says why) when
    ``not_drawn`` is given."""
    if skipped and not_drawn:
        caption += f" Not drawn ({not_drawn}): " + "; ".join(skipped) + "."
    return {"name": name, "title": title, "caption": caption, "draw": draw}


def _usl_row(sweep: SweepResults, label: str, cells: list[Cell]) -> tuple[dict, UslFit | None]:
    """The USL table's row of one series (see :func:`scaling_figure`) and its fit (None when there is none)."""
    ws, xs, left_out = _fit_points(sweep, cells)
    counts = sorted({int(w) for w in ws})
    row = {"series": label, "n_points": len(ws), "worker_counts": ", ".join(str(c) for c in counts) or NA,
           "left_out": left_out, "fit": None, "reason": None}
    try:
        fit = fit_usl(ws, xs)
    except ValueError as exc:
        row["reason"] = (f"no fit: {len(counts)} distinct worker count{'s' if len(counts) != 1 else ''} "
                         f"with trustworthy runs ({row['worker_counts']}); the USL has three parameters and "
                         f"needs at least 3" if len(counts) < 3 else f"no fit: {exc}")
        return row, None
    row["fit"] = {
        "lambda": fmt_sig(fit.lambda_jobs_per_s),
        "sigma": f"{fit.sigma:.4g}", "sigma_se": NA if is_missing(fit.sigma_stderr) else f"{fit.sigma_stderr:.2g}",
        "kappa": f"{fit.kappa:.4g}", "kappa_se": NA if is_missing(fit.kappa_stderr) else f"{fit.kappa_stderr:.2g}",
        "peak_workers": ("∞ (κ = 0: no peak)" if math.isinf(fit.peak_workers) else fmt_num(fit.peak_workers, 1)),
        "peak_jobs": ("∞" if math.isinf(fit.peak_jobs_per_s) else fmt_num(fit.peak_jobs_per_s)),
        "mape": f"{fit.mape_pct:.1f}", "r2": NA if is_missing(fit.r2) else f"{fit.r2:.3f}",
        "poor": (fit.mape_pct > 10 or (not is_missing(fit.sigma_stderr) and fit.sigma_stderr > max(fit.sigma, 1e-9))
                 or (not is_missing(fit.kappa_stderr) and fit.kappa_stderr > max(fit.kappa, 1e-12))),
        "beyond": (not math.isinf(fit.peak_workers) and fit.peak_workers > max(counts)),
    }
    return row, fit


def _draw_scaling(sweep: SweepResults, drawn: list) -> bytes:
    """The throughput-vs-workers PNG: each ``(label, cells, fit)`` of ``drawn`` as means with error bars,
    its USL curve and peak, and a ring legend entry when a cell is bad."""
    fig, ax = new_figure(10, 4.6)
    all_w, all_stats, handles, labels = [], [], [], []
    for color, xs, (label, cells, fit) in colored(sweep, drawn, "workers"):
        stats = [c.stat("throughput_jobs_per_s") for c in cells]
        h = errorbar(ax, xs, stats, fmt="o", color=color)
        ring_bad(ax, xs, stats, cells)
        all_w += xs
        all_stats += stats
        if fit is None:
            handles.append(h)
            labels.append(f"{label}: mean ± 95 % CI (no fit)")
            continue
        handles.append((h, _draw_usl(ax, fit, xs, color)))
        labels.append(f"{label}: mean ± 95 % CI, USL fit σ {fit.sigma:.3g}, κ {fit.kappa:.2g}")
        if not math.isinf(fit.peak_workers) and fit.peak_workers <= 4 * max(xs):
            all_w.append(fit.peak_workers)
    if any(c.bad for _, cells, _ in drawn for c in cells):
        (ring,) = ax.plot([], [], "o", **RING)
        handles.append(ring)
        labels.append("cell with a failed, suspect or invariant-breaking run")
    x_axis([ax], "workers", all_w, ticks=[w for w in all_w if w > 0 and float(w).is_integer()])
    linear_y(ax, all_stats, "throughput (jobs/s)")
    legend_above(ax, handles, labels=labels)
    return save_png(fig)


def _draw_usl(ax: plt.Axes, fit: UslFit, xs: list[float], color: str) -> Line2D:
    """Draw ``fit``'s curve over the worker counts ``xs`` (on to its peak when that is within 4 times the
    largest), and mark the peak then; returns the curve's line."""
    shown_peak = not math.isinf(fit.peak_workers) and fit.peak_workers <= 4 * max(xs)
    top = max(max(xs), fit.peak_workers if shown_peak else 0) * 1.15
    grid = np.geomspace(min(xs), top, 200)
    (line,) = ax.plot(grid, fit.predict(grid), "--", color=color, linewidth=1.2)
    if shown_peak:  # a peak far beyond the measured counts is in the table only
        ax.plot([fit.peak_workers], [fit.peak_jobs_per_s], marker="v", color=color, markersize=8)
        ax.annotate(f"peak {fmt_num(fit.peak_jobs_per_s)} jobs/s\nat {fit.peak_workers:.0f} workers",
                    (fit.peak_workers, fit.peak_jobs_per_s), textcoords="offset points",
                    xytext=(6, 6), fontsize="x-small", color=color)
    return line


def _claim_latency(ax: plt.Axes, sweep: SweepResults, series: list, axis: str, rings: bool,
                   also: tuple[str, str, str] | None = None) -> list[float]:
    """Each series' mean claim p50 (solid) and p99 (dashed), ms, against the sweep axis ``axis`` on ``ax``, with 95 % CI
    bars (``rings``: bad cells ringed), a log y axis when they span much, and their legend; ``also``: one more
    ``cells.csv`` column (µs) per series, with its line style and legend text; returns the x values."""
    xs_all, lat_all, handles = [], [], []
    for color, xs, (label, cells) in colored(sweep, series, axis):
        xs_all += xs
        handles.append(Line2D([], [], color=color, marker="o", label=label))
        for col, style in (("claim_p50_us", "-o"), ("claim_p99_us", "--s")):
            stats = [c.stat(col) for c in cells]
            errorbar(ax, xs, stats, scale=1000.0, fmt=style, color=color, markersize=5)
            if rings:  # at the means in ms
                ring_bad(ax, xs, [Stat(mean=s.mean / 1000.0, n=s.n) for s in stats], cells)
            lat_all += [s.mean / 1000.0 for s in stats if s.n]
            lat_all += [s.low / 1000.0 for s in stats if s.n > 1 and not is_missing(s.low)]
        if also:
            stats = [c.stat(also[0]) for c in cells]
            errorbar(ax, xs, stats, scale=1000.0, fmt=also[1], color=color, markersize=5)
            lat_all += [s.mean / 1000.0 for s in stats if s.n]
    auto_log_y(ax, lat_all, "claim latency and round trip (ms)" if also else "claim latency (ms)")
    extra = [Line2D([], [], color="#555", linestyle=":", marker="^", markersize=4, label=also[2])] if also else []
    legend_above(ax, handles + style_keys("claim") + extra)
    return xs_all


def _draw_latency_vs_workers(sweep: SweepResults, series: list) -> bytes:
    fig, ax = new_figure(10, 4.6)
    x_axis([ax], "workers", _claim_latency(ax, sweep, series, "workers", rings=True))
    return save_png(fig)


def _draw_history(sweep: SweepResults, series: list) -> bytes:
    fig, (ax_lat, ax_tput) = new_figure(11, 4.4, 2)
    xs_all = _claim_latency(ax_lat, sweep, series, "history", rings=False)
    tput_all = [s.mean for s in draw_throughput(ax_tput, sweep, series, "history")[1] if s.n]
    x_axis((ax_lat, ax_tput), "history", xs_all)
    auto_log_y(ax_tput, tput_all, "throughput (jobs/s)")
    legend_above(ax_tput)
    return save_png(fig)


def _draw_batch(sweep: SweepResults, series: list) -> bytes:
    fig, (ax_t, ax_w) = new_figure(11, 4.4, 2)
    xs_all, tput_stats = draw_throughput(ax_t, sweep, series, "batch")
    wait_stats, handles_w = [], []
    for color, xs, (label, cells) in colored(sweep, series, "batch"):
        for col, style, name in (("batch_wait_p50_us", "-o", "p50"), ("batch_wait_p99_us", "--s", "p99")):
            wstats = [c.stat(col) for c in cells]
            if any(s.n for s in wstats):
                errorbar(ax_w, xs, wstats, scale=1000.0, fmt=style, color=color, markersize=5)
                if name == "p50":
                    handles_w.append(Line2D([], [], color=color, marker="o", label=label))
                wait_stats += wstats
    x_axis((ax_t, ax_w), "batch", xs_all)
    linear_y(ax_t, tput_stats, "throughput (jobs/s)")
    legend_above(ax_t)
    if wait_stats:  # some series recorded a batch wait
        linear_y(ax_w, wait_stats, "per-job wait inside a batch (ms)", scale=1000.0)
        legend_above(ax_w, handles_w + style_keys("wait"))
    else:
        say(ax_w, "batch_wait_p50_us / batch_wait_p99_us\nnot recorded in cells.csv", color="#c62828")
        ax_w.set_yticks([])
    return save_png(fig)


def _draw_round_trip(sweep: SweepResults, series: list) -> bytes:
    fig, (ax_t, ax_l) = new_figure(11, 4.4, 2)
    xs_all, tput_stats = draw_throughput(ax_t, sweep, series, "net_delay_ms")
    _claim_latency(ax_l, sweep, series, "net_delay_ms", rings=False,
                   also=("round_trip_p50_us", ":^", "round trip measured, p50 (dotted)"))
    x_axis((ax_t, ax_l), "net_delay_ms", xs_all)
    linear_y(ax_t, tput_stats, "throughput (jobs/s)")
    legend_above(ax_t)
    return save_png(fig)


#: The figures of one series per combination of the other varying axes, in page order: (file name, x axis,
#: title, caption, why a single-cell series is not drawn (None: not said), drawing function).
SERIES_FIGURES = (
    ("claim_latency_vs_workers", "workers", "Claim latency vs workers",
     "Mean claim latency p50 (solid) and p99 (dashed) in ms at each worker count, across repetitions, "
     "with 95 % CI error bars: what each claim costs as the workers grow, beside the throughput above. "
     "Red rings: cells with a failed, suspect or invariant-breaking run (a suspect run's latencies may "
     "include the load generator's own delay).", "a single worker count", _draw_latency_vs_workers),
    ("claim_latency_vs_history", "history", "Claim latency and throughput vs history",
     "Left: mean claim latency p50 (solid) and p99 (dashed) in ms across repetitions, with "
     "95 % CI error bars; right: mean throughput. The history axis is logarithmic above its "
     "smallest non-zero size and linear below it (symlog), so a table with no history (0) "
     "still has its own labelled position at the left; the ticks are the measured sizes. "
     "A flat line means the index keeps finished rows out of the claim's way; a rising one "
     "means each claim steps over history. Red rings: cells with a failed, suspect or "
     "invariant-breaking run.", None, _draw_history),
    ("throughput_vs_batch", "batch", "Throughput and per-job wait vs batch size",
     "Left: mean throughput (jobs/s) against rows per claim, with 95 % CI error bars. Right: the "
     "per-job wait inside a batch (p50 solid, p99 dashed, ms): how long a claimed job waits for the "
     "jobs before it in the same batch; the price a batch pays for its throughput, and the time its "
     "lease must cover.", "{n} series with a single batch size", _draw_batch),
    ("throughput_vs_round_trip", "net_delay_ms", "Throughput and claim latency vs the added round trip",
     "Left: mean throughput (jobs/s) against the delay relay's setting (ms added each way), with 95 % CI error "
     "bars. Right: mean claim latency p50 (solid) and p99 (dashed) and the round trip each run measured (its "
     "probe's p50, dotted triangles), ms: each job pays its round trips on every cycle, so the throughput of a "
     "fixed number of workers falls as the measured round trip grows (docs/network.md).",
     "{n} series with a single setting", _draw_round_trip),
)


def series_figures(sweep: SweepResults) -> list[dict]:
    """The spec of each of :data:`SERIES_FIGURES` whose x axis the sweep varies and has a series of two cells
    or more (a line needs two points)."""
    specs = []
    for name, axis, title, caption, not_drawn, draw in SERIES_FIGURES:
        series, skipped = drawable(cell_series(sweep, axis)) if axis in sweep.varying else ([], [])
        if series:
            specs.append(_spec(name, title, caption, lambda d=draw, s=series: d(sweep, s), skipped,
                               not_drawn and not_drawn.format(n=len(skipped))))
    return specs
