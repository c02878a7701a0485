"""The experiments page, ``experiments.html``, rendered from a catalogue run's files (``experiments.json``,
each ``outcome.json`` and its sweep)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import matplotlib.pyplot as plt

from bench.analysis.experiment_figures import cell_runs, matching_cell, run_value, selector_text
from bench.report.render import png_uri, save_png, write_page
from bench.results.model import read_result
from bench.results.sweep import load_sweep, norm_param

__all__ = ["render_experiments_page"]

TEMPLATE = "experiments.html.j2"
#: Captions of the plans a probe returns, by (probe kind, fact).
PLAN_CAPTIONS = {
    ("offset_lock", "plan"): "EXPLAIN of the OFFSET 1 LIMIT 1 FOR UPDATE read",
    ("subselect_overclaim", "plan"): "EXPLAIN of the sub-select form, with the planner steered to a nested loop",
    ("subselect_overclaim", "tool_plan"): "EXPLAIN of the tool's own claim (ids picked in a MATERIALIZED CTE)",
}
#: Verdict -> CSS class of its badge.
VERDICT_CLASS = {"holds": "holds", "does not hold": "fails", "inconclusive": "unclear", "not applicable": "na"}


def _selected(cell_params: Mapping[str, Any], selector: Mapping[str, Any] | None) -> bool:
    return bool(selector) and all(norm_param(cell_params.get(k)) == norm_param(v) for k, v in selector.items())


def figure_plot(catalogue_dir: Path, outcome: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
    """A bar chart (PNG data URI) of ``spec``'s key in every cell of the experiment's runs, one
    dot per repetition; None for a probe, or when no run has the value."""
    if not outcome.get("sweep_dir") or spec.get("measure") == "probe":
        return None
    sweep = load_sweep(catalogue_dir / outcome["sweep_dir"])
    labels, means, dots, solid = [], [], [], []
    for cell in sweep.cells:
        values = [v for v in (run_value(view, spec["key"]) for view in cell_runs(sweep, cell)) if v is not None]
        if not values:
            continue
        labels.append(cell.label or cell.cell_id)
        means.append(sum(values) / len(values))
        dots.append(values)
        only = len(sweep.cells) == 1 or matching_cell(sweep, spec.get("of")) is cell
        solid.append(only or _selected(cell.params, spec.get("of")) or _selected(cell.params, spec.get("over")))
    if not labels:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 2.2 + 0.28 * len(labels)))
    y = range(len(labels))
    ax.barh(list(y), means, color=["#3b6ea8" if s else "#c5d3e6" for s in solid], height=0.6)
    for i, values in enumerate(dots):
        ax.plot(values, [i] * len(values), "o", color="#1b1b1b", markersize=3.5)
    if spec.get("measure") == "value":
        op, number = str(outcome_threshold(spec)).split()
        ax.axvline(float(number), color="#b03030", linestyle="--", linewidth=1.2, label=f"holds if {op} {number}")
        ax.legend(loc="lower right", fontsize="small", frameon=False)
    ax.set_yticks(list(y), labels, fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel(spec["key"] + (f" ({spec['unit']})" if spec.get("unit") else ""))
    measured = spec.get("value")
    ax.set_title(spec["name"] + ("" if measured is None else f" = {measured:.3g}") + f"  (holds if {outcome_threshold(spec)})",
                 fontsize="medium", loc="left")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return png_uri(save_png(fig))


def ratio_text(spec: Mapping[str, Any]) -> str | None:
    """A ratio figure's two terms in words: ``<key> at <cell> over <over_key> at <cell>``; None for another."""
    if spec.get("measure") != "ratio":
        return None
    return (f"{spec['key']} at {selector_text(spec.get('of'))} over {spec.get('over_key', spec['key'])} at "
            f"{selector_text(spec['over']) if 'over' in spec else 'the same runs'}")


def outcome_threshold(spec: Mapping[str, Any]) -> str:
    """The figure's threshold as written (``"<= 1.3"``)."""
    return " ".join(str(spec["holds_if"]).split())


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def render_experiments_page(catalogue_dir: Path) -> Path:
    """Render ``catalogue_dir/experiments.html`` from its files; returns its path.

    Raises :class:`bench.results.model.ResultsError` when ``experiments.json`` is missing or unreadable."""
    catalogue_dir = Path(catalogue_dir)
    meta = read_result(catalogue_dir / "experiments.json")
    sections = []
    for outcome in meta.get("outcomes") or []:
        figures = []
        for spec in outcome.get("figures") or []:
            figures.append({**spec, "values_text": ", ".join(_fmt(v) for v in spec.get("values") or []) or "—",
                            "ratio_text": ratio_text(spec),
                            "value_text": _fmt(spec.get("value")),
                            "plot": figure_plot(catalogue_dir, outcome, spec)})
        sections.append({**outcome, "css": VERDICT_CLASS.get(outcome["verdict"], "unclear"), "figure_rows": figures,
                         "probe_rows": [(k, _fmt(v)) for k, v in (outcome.get("probe_result") or {}).items()
                                        if not k.endswith("plan")],
                         "probe_plans": [(PLAN_CAPTIONS.get((outcome.get("probe"), k), f"{k} (EXPLAIN)"), v)
                                         for k, v in (outcome.get("probe_result") or {}).items()
                                         if k.endswith("plan") and v],
                         "run_rows": [{**r, "tput": _fmt(r.get("throughput_jobs_per_s")),
                                       **{p: _fmt(None if r.get(f"claim_{p}_us") is None else r[f"claim_{p}_us"] / 1000)
                                          for p in ("p50", "p99")}} for r in outcome.get("runs") or []]})
    counts = {v: sum(1 for s in sections if s["verdict"] == v) for v in VERDICT_CLASS}
    missing = [n for n in meta.get("experiments") or [] if n not in {s["name"] for s in sections}]
    return write_page(TEMPLATE, catalogue_dir / "experiments.html", meta=meta, sections=sections, counts=counts,
                      missing=missing)
