"""A sweep's comparison report, ``compare.html``, assembled from the sweep directory's result files; its parts
are in ``sweep_answer``, ``sweep_tables``, ``sweep_plots`` and ``sweep_axes``."""

from __future__ import annotations

import json
from pathlib import Path

from bench.report.format import NA
from bench.report.render import write_page, write_plot
from bench.report.sweep_answer import capacity_answer
from bench.report.sweep_costs import cost_figures, cost_rows
from bench.report.sweep_engines import engine_rows, engines_figure
from bench.report.sweep_queues import client_overhead_rows, queue_rows
from bench.report.sweep_plots import scaling_figure, series_figures
from bench.report.sweep_tables import banners, cell_rows, plan_rows, run_rows, size_rows, text_plan_rows
from bench.results.sweep import SweepResults, axis_fields, load_sweep
from bench.results.values import engine_name, fmt_label

__all__ = ["base_rows", "render_sweep_report"]

SWEEP_TEMPLATE = "compare.html.j2"


def render_sweep_report(sweep_dir: Path) -> Path:
    """Render ``sweep_dir/compare.html`` (UTF-8, self-contained: figures as base64 PNG data URIs, each also
    written to ``sweep_dir/plots/<name>.png``) from the sweep directory's files; returns its path.

    Raises CompareError: ``SWEEP_DIR: ...`` when sweep.json is missing or unreadable or cells.csv does not
    parse; ``capacity.json: ...`` when the sweep's capacity.json is not a readable JSON object."""
    sweep = load_sweep(Path(sweep_dir), "SWEEP_DIR")
    spec, usl_rows = scaling_figure(sweep) if "workers" in sweep.varying else (None, None)
    specs = [spec, *series_figures(sweep), engines_figure(sweep), *cost_figures(sweep)]  # engines: None without an engine axis
    figures = [{k: spec[k] for k in ("name", "title", "caption")}
               | {"data_uri": write_plot(sweep.path / "plots", spec["name"], spec["draw"]())}
               for spec in filter(None, specs)]  # None: nothing to draw for that axis

    meta = sweep.meta
    context = {
        "sweep_id": meta.get("sweep_id") or sweep.path.name,
        "meta_rows": [(k, fmt_label(meta.get(k)) if meta.get(k) is not None else NA) for k in
                      ("name", "description", "file", "matrix_hash", "repetitions", "started_at", "ended_at")],
        "axes": [(a, ", ".join(fmt_label(v) for v in vals), a in sweep.varying)
                 for a, vals in (meta.get("axes") or {}).items()],
        "banners": banners(sweep),
        "answer": capacity_answer(sweep),
        "varying": sweep.varying,
        "cell_rows": cell_rows(sweep),
        "figures": figures,
        "usl_rows": usl_rows,
        "plan_rows": plan_rows(sweep),
        "size_rows": size_rows(sweep),
        "cost_table": dict(zip(("labels", "rows"), cost_rows(sweep))),
        "run_rows": run_rows(sweep),
        "base_rows": base_rows(sweep),
        "columns": sweep.columns,
        "engine_table": engine_rows(sweep),
        "queue_table": queue_rows(sweep),
        "client_overhead": client_overhead_rows(sweep) if "queue" in sweep.varying else [],
        "text_plan_rows": text_plan_rows(sweep),
        "engines": sorted({str(sweep.value(c, "engine")) for c in sweep.cells}),
    }
    return write_page(SWEEP_TEMPLATE, sweep.path / "compare.html", **context)


def _value_text(v) -> str:
    if v is None:
        return NA
    return fmt_label(v) if not isinstance(v, (dict, list)) else json.dumps(v)


def base_rows(sweep: SweepResults) -> list[tuple[str, str]]:
    """The parameters no axis varies, as (name, value text); one that still differs between cells (each
    engine's own default) gives each value with the engine or cells that ran it, e.g. 'PostgreSQL: partial;
    MariaDB: composite'."""
    rows = []
    for key, base_value in (sweep.meta.get("base") or {}).items():
        if key in axis_fields(sweep.meta):
            continue
        by_value: dict[str, list] = {}
        for cell in sweep.cells:
            value = cell.config[key] if key in cell.config else base_value
            by_value.setdefault(_value_text(value), []).append(cell)
        if len(by_value) <= 1:
            rows.append((key, next(iter(by_value), _value_text(base_value))))
            continue
        parts = []
        for text, cells in by_value.items():
            engines = {str(sweep.value(c, "engine")) for c in cells}
            whole = all(str(sweep.value(c, "engine")) not in engines or c in cells for c in sweep.cells)
            who = (", ".join(engine_name(e) for e in sorted(engines)) if whole
                   else ", ".join(c.cell_id for c in cells))
            parts.append(f"{who}: {text}")
        rows.append((key, "; ".join(parts)))
    return rows
