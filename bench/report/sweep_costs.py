"""The sweep report's cost per job (cells.csv ``cost_*``, each run's ``summary.json`` ``cost_per_job``): one
figure per cost against the sweep's varying axes, and a table; means with 95 % CIs over repetitions."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from bench.report.format import ci_text
from bench.report.render import legend_above, new_figure, save_png
from bench.report.sweep_axes import errorbar, linear_y, ring_bad
from bench.results.cell_columns import COST_KEYS
from bench.results.sweep import Cell, Stat, SweepResults, norm_param
from bench.results.values import fmt_label, is_missing

__all__ = ["COSTS", "FIGURES", "cost_figures", "cost_rows", "cost_stat"]

#: The costs drawn, one figure each, in page order: (name, label with its unit, the ``cost_per_job`` keys summed
#: in each run). The cost table shows them, then every other key of :data:`COST_KEYS` on its own, per job.
FIGURES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("wal_bytes", "log bytes per job (PostgreSQL's WAL, MariaDB's InnoDB redo)", ("wal_bytes",)),
    ("wal_bytes_without_fpi", "WAL bytes per job without full-page images", ("wal_bytes_without_fpi",)),
    ("row_versions", "row versions per job (tuples inserted + updated + deleted)",
     ("tuples_inserted", "tuples_updated", "tuples_deleted")),
    ("buffers", "shared buffers per job (hit + read)", ("buffers_hit", "buffers_read")),
    ("hot_update_share", "HOT share of the queue table's updates", ("hot_update_share",)),
    ("server_cpu_us", "server CPU µs per job (from /proc: backends + background processes)", ("server_cpu_us",)),
    ("statements_exec_us", "the tool's statements' execution µs per job (pg_stat_statements, a lower bound)",
     ("statements_exec_us",)),
)
COSTS: tuple[tuple[str, str, tuple[str, ...]], ...] = FIGURES + tuple(
    (key, f"{key} per job", (key,)) for key in COST_KEYS if not any(key in keys for _, _, keys in FIGURES))

#: What every cost figure's caption starts with.
CAPTION = ("Mean {label} over the measured window, across repetitions, with the 95 % confidence interval of the "
           "mean as error bars, against {axis}{series}. Read from each run's summary.json cost_per_job (the "
           "server's counters, per job completed; docs/results.md); a cell whose runs did not measure it has no "
           "point. Red rings: cells with a failed, suspect or invariant-breaking run.")


def cost_stat(cell: Cell, keys: Sequence[str]) -> Stat:
    """Mean and 95 % CI over ``cell``'s finished runs of the sum of the ``cost_<key>`` columns of each run
    (a run missing one of them is left out)."""
    done = cell.done
    if done.empty or any(f"cost_{k}" not in done for k in keys):
        return Stat()
    totals = [sum(values) for values in zip(*(done[f"cost_{k}"].tolist() for k in keys))
              if not any(is_missing(v) for v in values)]
    return Stat.of(totals)


def _measured(sweep: SweepResults, costs: Sequence[tuple[str, str, tuple[str, ...]]] = COSTS) -> list:
    """The ``costs`` some cell of ``sweep`` has a value of."""
    return [cost for cost in costs if any(cost_stat(c, cost[2]).n for c in sweep.cells)]


def _groups(sweep: SweepResults) -> tuple[str, list, list[tuple[str, list[Cell | None]]]]:
    """(x axis: the first varying axis, its values in sweep order, series: one per combination of the other
    varying axes, each with its cell at every x value or None)."""
    axis, others = sweep.varying[0], sweep.varying[1:]
    xs = list(dict.fromkeys(norm_param(sweep.value(c, axis)) for c in sweep.cells))
    series: dict[tuple, list[Cell | None]] = {}
    for cell in sweep.cells:
        key = tuple(norm_param(sweep.value(cell, a)) for a in others)
        series.setdefault(key, [None] * len(xs))[xs.index(norm_param(sweep.value(cell, axis)))] = cell
    labels = [", ".join(f"{a} {fmt_label(v)}" for a, v in zip(others, key)) or "mean ± 95 % CI" for key in series]
    return axis, xs, list(zip(labels, series.values()))


def _draw(sweep: SweepResults, keys: tuple[str, ...], label: str) -> bytes:
    """One cost's PNG: each series' means at the x axis' values (side by side), with 95 % CI bars."""
    axis, xs, series = _groups(sweep)
    fig, ax = new_figure(10, 4.4)
    width = 0.8 / max(len(series), 1)
    stats_all = []
    for i, (name, cells) in enumerate(series):
        at = [j - 0.4 + width * (i + 0.5) for j, c in enumerate(cells) if c is not None]
        present = [c for c in cells if c is not None]
        stats = [cost_stat(c, keys) for c in present]
        errorbar(ax, at, stats, fmt="o", color=f"C{i % 10}", label=name, markersize=6)
        ring_bad(ax, at, stats, present)
        stats_all += stats
    ax.set_xticks(np.arange(len(xs)), [fmt_label(x) for x in xs])
    ax.set_xlim(-0.6, len(xs) - 0.4)
    ax.set_xlabel(axis)
    ax.grid(True, axis="y", alpha=0.3)
    linear_y(ax, stats_all, label)
    legend_above(ax)
    return save_png(fig)


def cost_figures(sweep: SweepResults) -> list[dict]:
    """One figure spec (``{"name", "title", "caption", "draw"}``) per cost of :data:`FIGURES` that some cell
    measured, against the sweep's first varying axis, a series per combination of the others; none for a
    sweep that varies nothing."""
    if not sweep.varying:
        return []
    others = sweep.varying[1:]
    series = f", one series per {' × '.join(others)}" if others else ""
    return [{"name": f"cost_{name}", "title": f"Cost per job: {label}",
             "caption": CAPTION.format(label=label, axis=sweep.varying[0], series=series),
             "draw": lambda k=keys, t=label: _draw(sweep, k, t)}
            for name, label, keys in _measured(sweep, FIGURES)]


def cost_rows(sweep: SweepResults) -> tuple[list[str], list[dict]]:
    """The cost table: (the labels of the costs some cell measured, one row per cell ``{"cell_id", "params",
    "values" ('mean (low–high)' per cost), "bad"}``); ``([], [])`` when no cell measured any."""
    costs = _measured(sweep)
    if not costs:
        return [], []
    rows = [{"cell_id": cell.cell_id, "params": [fmt_label(sweep.value(cell, a)) for a in sweep.columns],
             "values": [ci_text(cost_stat(cell, keys)) for _, _, keys in costs], "bad": cell.bad}
            for cell in sweep.cells]
    return [label for _, label, _ in costs], rows
