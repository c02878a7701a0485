"""A sweep with an ``engine`` axis: the engines side by side, one row (:func:`engine_rows`) and one group of
bars (:func:`engines_figure`) per combination of the other axes."""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Patch

from bench.report.format import stat_texts
from bench.report.render import legend_above, new_figure, save_png
from bench.results.sweep import Cell, SweepResults
from bench.results.values import engine_name, fmt_label

__all__ = ["engine_groups", "engine_rows", "engines_figure"]

#: Bar colours per engine, in the order engines first appear in the sweep.
ENGINE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c")


def engine_groups(sweep: SweepResults) -> tuple[list[str], list[tuple[str, dict[str, Cell]]]]:
    """(engines in the sweep's order, [(label of the other axes' values, {engine: cell})]); the
    label is "all cells" when the engine is the only axis."""
    engines = list(dict.fromkeys(str(sweep.value(c, "engine")) for c in sweep.cells))
    others = [a for a in sweep.varying if a != "engine"]
    groups: dict[str, dict[str, Cell]] = {}
    for cell in sweep.cells:
        label = ", ".join(f"{a} {fmt_label(sweep.value(cell, a))}" for a in others) or "all cells"
        groups.setdefault(label, {})[str(sweep.value(cell, "engine"))] = cell
    return engines, list(groups.items())


def engine_rows(sweep: SweepResults) -> dict | None:
    """The side-by-side table, or None without an engine axis: ``{"engines": [names], "rows": [{"label",
    "cells": [{"cell_id", "index", "throughput", "claim_p99", "empty" (empty claims while work waited), "bad"}
    or None per engine]}]}``; throughput jobs/s and claim p99 ms as 'mean (95 % CI)'."""
    if "engine" not in sweep.varying:
        return None
    engines, groups = engine_groups(sweep)
    rows = []
    for label, by_engine in groups:
        cells = []
        for engine in engines:
            cell = by_engine.get(engine)
            cells.append(None if cell is None else {
                "cell_id": cell.cell_id, "index": fmt_label(sweep.value(cell, "index")), "bad": cell.bad,
                **stat_texts(cell, throughput="throughput_jobs_per_s", claim_p99="claim_p99_us",
                             empty="empty_claims_while_work_waited")})
        rows.append({"label": label, "cells": cells})
    return {"engines": [engine_name(e) for e in engines], "rows": rows}


def engines_figure(sweep: SweepResults) -> dict | None:
    """Grouped bars, one per engine, per combination of the other axes: mean throughput (jobs/s) and claim p99
    (ms) with 95 % CI error bars, hatched for a bad cell; None without an engine axis."""
    if "engine" not in sweep.varying:
        return None
    engines, groups = engine_groups(sweep)

    def draw() -> bytes:
        fig, axes = new_figure(11, 4.4, 2)
        x, width, tilt = np.arange(len(groups)), 0.8 / len(engines), len(groups) > 3
        colors = [ENGINE_COLORS[i % len(ENGINE_COLORS)] for i in range(len(engines))]
        for ax, (column, ylabel) in zip(axes, (("throughput_jobs_per_s", "throughput (jobs/s)"),
                                               ("claim_p99_us", "claim p99 (ms)"))):
            scale = 1000.0 if column.endswith("_us") else 1.0
            for i, engine in enumerate(engines):
                cells = [by.get(engine) for _, by in groups]
                stats = [c.stat(column) if c else None for c in cells]
                errs = [[(s.mean - s.low) / scale if s and s.n > 1 else 0.0 for s in stats],
                        [(s.high - s.mean) / scale if s and s.n > 1 else 0.0 for s in stats]]
                bars = ax.bar(x + (i - (len(engines) - 1) / 2) * width, [s.mean / scale if s and s.n else 0.0 for s in stats],
                              width, yerr=errs if any(map(any, errs)) else None, capsize=3, color=colors[i])
                for bar in (bar for bar, c in zip(bars, cells) if c is not None and c.bad):
                    bar.set_hatch("//")
                    bar.set_edgecolor("#c62828")
            ax.set_xticks(x, [label for label, _ in groups], rotation=20 if tilt else 0, ha="right" if tilt else "center")
            ax.set_ylabel(ylabel)
            ax.set_ylim(bottom=0)
            ax.grid(True, axis="y", alpha=0.3)
            legend_above(ax, [Patch(color=c, label=engine_name(e)) for c, e in zip(colors, engines)])
        return save_png(fig)

    return {"name": "engines", "title": "The engines side by side",
            "caption": ("Left: mean throughput (jobs/s); right: mean claim p99 (ms); one bar per engine for each "
                        "combination of the other axes, with 95 % CI error bars across repetitions (none with a "
                        "single repetition). Each engine ran with its own defaults (see the index and isolation "
                        "columns of the cells table). Hatched red: a cell with a failed, suspect or "
                        "invariant-breaking run."),
            "draw": draw}
