"""A sweep with a server axis (``engine``, or ``pg_version``: the embedded PostgreSQL's version): the servers side by
side, one row (:func:`engine_rows`) and one group of bars (:func:`engines_figure`) per combination of the other
axes."""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Patch

from bench.report.format import stat_texts
from bench.report.render import legend_above, new_figure, save_png
from bench.results.sweep import Cell, SweepResults
from bench.results.values import engine_name, fmt_label, is_missing

__all__ = ["SERVER_AXES", "engine_groups", "engine_rows", "engines_figure", "server_axis", "server_names"]

#: Bar colours per server, in the order servers first appear in the sweep.
ENGINE_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c")

#: The axes that put cells on different servers, each with its table's title and a value's name in prose.
SERVER_AXES = {"engine": ("The engines side by side", engine_name),
               "pg_version": ("The PostgreSQL versions side by side", lambda v: f"PostgreSQL {fmt_label(v)}")}


def server_axis(sweep: SweepResults) -> str | None:
    """The sweep's first varying axis of :data:`SERVER_AXES`, or None."""
    return next((a for a in SERVER_AXES if a in sweep.varying), None)


def engine_groups(sweep: SweepResults, axis: str = "engine") -> tuple[list[str], list[tuple[str, dict[str, Cell]]]]:
    """(``axis``'s values in the sweep's order, [(label of the other axes' values, {value: cell})]); the
    label is "all cells" when ``axis`` is the only axis."""
    servers = list(dict.fromkeys(str(sweep.value(c, axis)) for c in sweep.cells))
    others = [a for a in sweep.varying if a != axis]
    groups: dict[str, dict[str, Cell]] = {}
    for cell in sweep.cells:
        label = ", ".join(f"{a} {fmt_label(sweep.value(cell, a))}" for a in others) or "all cells"
        groups.setdefault(label, {})[str(sweep.value(cell, axis))] = cell
    return servers, list(groups.items())


def _first(cell: Cell, column: str) -> str:
    """``column``'s first value among the cell's runs (a text column), '' when none has one."""
    if column not in cell.runs:
        return ""
    return next((str(v) for v in cell.runs[column].tolist() if not is_missing(v) and v != ""), "")


def server_names(sweep: SweepResults, axis: str, servers: list[str]) -> list[str]:
    """Each of ``servers`` (``axis``'s values) in prose, with the release its server reported when the axis is
    a version (``PostgreSQL system (15.20)``)."""
    name = SERVER_AXES[axis][1]
    if axis == "engine":
        return [name(s) for s in servers]
    releases = {}
    for cell in sweep.cells:
        releases.setdefault(str(sweep.value(cell, axis)), _first(cell, "server_release") or None)
    return [name(s) + (f" ({releases[s]})" if releases.get(s) and releases[s] != s else "") for s in servers]


def engine_rows(sweep: SweepResults) -> dict | None:
    """The side-by-side table, or None without a server axis (:func:`server_axis`): ``{"axis", "title",
    "engines": [names], "rows": [{"label", "cells": [{"cell_id", "index", "server" (the version run), "plan" (the
    workers' claim plan's scan), "throughput", "claim_p99", "empty" (empty claims while work waited), "bad"} or
    None per server]}]}``; throughput jobs/s and claim p99 ms as 'mean (95 % CI)'."""
    axis = server_axis(sweep)
    if axis is None:
        return None
    servers, groups = engine_groups(sweep, axis)
    rows = []
    for label, by_server in groups:
        cells = []
        for server in servers:
            cell = by_server.get(server)
            cells.append(None if cell is None else {
                "cell_id": cell.cell_id, "index": fmt_label(sweep.value(cell, "index")), "bad": cell.bad,
                "server": _first(cell, "server_release"),
                "plan": _first(cell, "plan_workers_scan") or _first(cell, "plan_explain_scan"),
                **stat_texts(cell, throughput="throughput_jobs_per_s", claim_p99="claim_p99_us",
                             empty="empty_claims_while_work_waited")})
        rows.append({"label": label, "cells": cells})
    return {"axis": axis, "title": SERVER_AXES[axis][0], "engines": server_names(sweep, axis, servers), "rows": rows}


def engines_figure(sweep: SweepResults) -> dict | None:
    """Grouped bars, one per server (:func:`server_axis`), per combination of the other axes: mean throughput
    (jobs/s) and claim p99 (ms) with 95 % CI error bars, hatched for a bad cell; None without a server axis."""
    axis = server_axis(sweep)
    if axis is None:
        return None
    engines, groups = engine_groups(sweep, axis)
    title, names = SERVER_AXES[axis][0], server_names(sweep, axis, engines)

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
            legend_above(ax, [Patch(color=c, label=n) for c, n in zip(colors, names)])
        return save_png(fig)

    what = "engine" if axis == "engine" else "PostgreSQL version (each on its own embedded server)"
    return {"name": "engines" if axis == "engine" else "pg_versions", "title": title,
            "caption": (f"Left: mean throughput (jobs/s); right: mean claim p99 (ms); one bar per {what} for each "
                        "combination of the other axes, with 95 % CI error bars across repetitions (none with a "
                        "single repetition). Each engine ran with its own defaults (see the index and isolation "
                        "columns of the cells table). Hatched red: a cell with a failed, suspect or "
                        "invariant-breaking run."),
            "draw": draw}
