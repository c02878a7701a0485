"""What every sweep figure shares: series (``(label, cells)``, the cells sharing every varying axis but x,
sorted along it), colours, 95 % CI error bars, rings and axis scales."""

from __future__ import annotations

from typing import Iterator, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

from bench.report.render import plain_tick, spans_wide, y_scale
from bench.report.sweep_answer import DESIGN_KEYS, design_text
from bench.results.sweep import Cell, Stat, SweepResults, norm_param
from bench.results.values import as_float, fmt_label, is_missing

__all__ = ["RING", "auto_log_y", "axis_value", "cell_series", "colored", "draw_throughput",
           "drawable", "errorbar", "linear_y", "ring_bad", "style_keys", "x_axis"]

#: Marker style of the red ring around a cell with a failed, suspect or invariant-breaking run.
RING = {"markersize": 11, "markerfacecolor": "none", "markeredgecolor": "#c62828"}


def _short_count(v: float) -> str:
    """Axis tick text for counts: 0, 500, 100k, 1M, 2.5M."""
    v = float(v)
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:g}{suffix}"
    return f"{v:g}"


def cell_series(sweep: SweepResults, x_axis: str) -> list[tuple[str, list[Cell]]]:
    """Cells grouped by every other varying axis, each group sorted by ``x_axis``."""
    others = [a for a in sweep.varying if a != x_axis]
    groups: dict[tuple, list[Cell]] = {}
    for cell in sweep.cells:
        if is_missing(axis_value(sweep, cell, x_axis)):
            continue
        key = tuple(norm_param(sweep.value(cell, a)) for a in others)
        groups.setdefault(key, []).append(cell)
    out = []
    for key, cells in groups.items():
        cells.sort(key=lambda c: axis_value(sweep, c, x_axis))
        label = (", ".join(f"{a} {fmt_label(v)}" for a, v in zip(others, key))
                 or design_text({k: sweep.value(cells[0], k) for k in DESIGN_KEYS}))
        out.append((label, cells))
    return out


def drawable(series: list[tuple[str, list[Cell]]]) -> tuple[list[tuple[str, list[Cell]]], list[str]]:
    """The series with at least two cells (a line needs two points), and the labels of the others."""
    return [s for s in series if len(s[1]) >= 2], [label for label, cells in series if len(cells) < 2]


def axis_value(sweep: SweepResults, cell: Cell, axis: str) -> float:
    """The cell's value on ``axis`` as a float (NaN when it has none)."""
    return as_float(sweep.value(cell, axis))


def colored(sweep: SweepResults, series: Sequence[tuple], axis: str) -> Iterator[tuple[str, list[float], tuple]]:
    """(colour, x values on ``axis`` of its cells, series) for each ``(label, cells, …)`` series,
    colours from matplotlib's default cycle C0…C9."""
    for i, item in enumerate(series):
        yield f"C{i % 10}", [axis_value(sweep, c, axis) for c in item[1]], item


def errorbar(ax: plt.Axes, xs, stats: list[Stat], scale: float = 1.0, **kw):
    """Means of ``stats`` / ``scale`` at ``xs`` with asymmetric 95 % CI error bars (none where n = 1, no point
    without a mean); ``kw`` goes to ``Axes.errorbar``, whose container is returned."""
    means = np.array([s.mean / scale for s in stats])
    lo = np.array([0.0 if is_missing(s.low) else (s.mean - s.low) / scale for s in stats])
    hi = np.array([0.0 if is_missing(s.high) else (s.high - s.mean) / scale for s in stats])
    ok = ~np.isnan(means)
    return ax.errorbar(np.asarray(xs, dtype=float)[ok], means[ok], yerr=[lo[ok], hi[ok]], capsize=3, **kw)


def style_keys(what: str) -> list:
    """Legend entries for the line styles shared by every series: p50 solid, p99 dashed."""
    return [Line2D([], [], color="#555", linestyle="-", marker="o", markersize=4, label=f"{what} p50 (solid)"),
            Line2D([], [], color="#555", linestyle="--", marker="s", markersize=4, label=f"{what} p99 (dashed)")]


def auto_log_y(ax: plt.Axes, values: Sequence[float], unit_label: str) -> None:
    """Y axis labelled ``unit_label``: log when the positive ``values`` span much (:func:`spans_wide`), else linear
    from 0."""
    y_scale(ax, spans_wide(values), unit_label, f"{unit_label}, log scale", plain_ticks=True)


def _y_top(means: Sequence[float], highs: Sequence[float]) -> float:
    """Top of a linear y axis from 0: room for the upper error bars, but at most twice the largest mean (a
    wider bar is cut at the top)."""
    m = [x for x in means if not is_missing(x)]
    h = [x for x in highs if not is_missing(x)]
    if not m:
        return 1.0
    top = max(m) * 1.15
    if h:
        top = max(top, min(max(h) * 1.05, 2.0 * max(m)))
    return top or 1.0


def linear_y(ax: plt.Axes, stats: Sequence[Stat], label: str, scale: float = 1.0) -> None:
    """Linear y axis from 0 to :func:`_y_top` of the means and upper CI bounds of ``stats`` / ``scale``."""
    means = [s.mean / scale for s in stats if s.n]
    highs = [s.high / scale for s in stats if s.n > 1 and not is_missing(s.high)]
    ax.set_ylabel(label)
    ax.set_ylim(0, _y_top(means, highs))
    ax.yaxis.set_major_formatter(FuncFormatter(plain_tick))


def ring_bad(ax: plt.Axes, xs: Sequence[float], stats: Sequence[Stat], cells: Sequence[Cell]) -> None:
    """Red rings around the means of cells with a failed, suspect or invariant-breaking run."""
    bad = [(x, s.mean) for x, s, c in zip(xs, stats, cells) if c.bad and s.n]
    if bad:
        ax.plot(*zip(*bad), "o", **RING)


def draw_throughput(ax: plt.Axes, sweep: SweepResults, series: Sequence[tuple], axis: str) -> tuple[list, list[Stat]]:
    """Each ``(label, cells)`` series' mean throughput against ``axis`` as a line with 95 % CI bars, bad cells
    ringed; returns (the x values, the Stats), every series' in order."""
    xs_all, stats_all = [], []
    for color, xs, (label, cells) in colored(sweep, series, axis):
        stats = [c.stat("throughput_jobs_per_s") for c in cells]
        errorbar(ax, xs, stats, fmt="-o", color=color, label=label, markersize=5)
        ring_bad(ax, xs, stats, cells)
        xs_all += xs
        stats_all += stats
    return xs_all, stats_all


#: Each x axis of the figures: its label, and how far past the outer values it reaches (None: symlog, for an
#: axis that includes 0; 0.0: linear from 0).
X_AXES = {"workers": ("workers (connections, log scale)", 1.3),
          "history": ("history (finished rows in the table; 0 at left, log scale above)", None),
          "batch": ("batch size (rows per claim, log scale)", 1.6),
          "net_delay_ms": ("NET_DELAY_MS (ms added each way by the delay relay, linear)", 0.0)}


def x_axis(axes: Sequence[plt.Axes], axis: str, values: Sequence[float], ticks: Sequence[float] | None = None) -> None:
    """The x axis of each of ``axes`` for the sweep axis ``axis`` (:data:`X_AXES`), and a grid: log, ticked exactly
    at ``ticks`` (default: the measured ``values``) labelled as plain counts; symlog (linear below the smallest
    non-zero value, so 0 still shows) for an axis with no reach; linear for a reach of 0."""
    label, pad = X_AXES[axis]
    positive = sorted({float(v) for v in values if v > 0})
    for ax in axes:
        if pad == 0.0:
            shown = sorted({float(v) for v in values})
            ax.set_xlim(-0.08 * max(shown[-1], 1e-9), shown[-1] * 1.08 or 1.0)
        elif pad is not None:
            ax.set_xscale("log")
            shown = sorted({float(v) for v in (ticks or values) if v > 0})
            ax.set_xlim(min(values) / pad, max(values) * pad)
        else:
            shown = sorted({float(v) for v in values})
            if 0.0 in shown and positive:
                ax.set_xscale("symlog", linthresh=positive[0], linscale=0.6)
                ax.set_xlim(-positive[0] * 0.3, positive[-1] * 2.0)
            else:
                ax.set_xscale("log")
                ax.set_xlim(positive[0] / 2.0, positive[-1] * 2.0)
        ax.xaxis.set_major_locator(FixedLocator(shown))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: _short_count(v)))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(label)
        ax.grid(True, alpha=0.3)
