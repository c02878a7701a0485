"""``plan.html``, a capacity plan's page from its ``plan.json`` alone (and the step runs' directories for
links)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any, Mapping

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from bench.analysis.plan_answer import headroom_text, slo_at, what_passed
from bench.report.render import label_log_axis, legend_above, png_uri, save_png, write_page
from bench.results.model import read_result
from bench.results.values import fmt_seconds, fmt_sig

#: How an untrusted step (``plan.json`` step ``trusted`` false: it failed only by the harness) is drawn and named.
UNTRUSTED_STYLE = {"marker": "X", "markersize": 9, "linestyle": "none", "color": "#8a4b00",
                   "label": "untrusted (failed only by the harness or a busy machine: no verdict)"}


def _objective_series(steps: list[Mapping[str, Any]], x_key: str) -> dict[str, dict[str, Any]]:
    """Per SLO key: x values and the worst repetition's measured values of the trusted steps (``x``, ``y``) and of
    the untrusted ones (``untrusted_x``, ``untrusted_y``), and the threshold."""
    series: dict[str, dict[str, Any]] = {}
    for step in sorted(steps, key=lambda s: s[x_key]):
        which = "" if step.get("trusted", True) else "untrusted_"  # a plan written before steps were judged: trusted
        for row in slo_at(step):
            entry = series.setdefault(row["key"], {"x": [], "y": [], "untrusted_x": [], "untrusted_y": [],
                                                   "threshold": row["threshold"], "op": row["op"]})
            if row["measured"] is not None:
                entry[which + "x"].append(step[x_key])
                entry[which + "y"].append(row["measured"])
    return series


def _draw(series: dict[str, dict[str, Any]], title: str, xlabel: str, marks: list[tuple[float, str]],
          ages: tuple[list[float], list[float]] | None = None) -> bytes:
    """One axes per SLO key: measured (markers and line), the threshold (dashed), ``marks`` as vertical lines."""
    keys = list(series)
    fig, axes = plt.subplots(1, len(keys), figsize=(max(8.0, 5.2 * len(keys)), 4.0), squeeze=False)
    for ax, key in zip(axes[0], keys):
        s = series[key]
        time_key = key not in ("error_rate", "throughput_share", "age_slope")
        ax.plot(s["x"], s["y"], "o-", color="#1565c0", label=f"{key} measured (worst repetition)")
        if s["untrusted_x"]:
            ax.plot(s["untrusted_x"], s["untrusted_y"], **UNTRUSTED_STYLE)
        shown = fmt_seconds(s["threshold"]) if time_key else fmt_sig(s["threshold"])
        ax.axhline(s["threshold"], color="#c62828", linestyle="--", label=f"SLO: {key} {s['op']} {shown}")
        for i, (x, text) in enumerate(marks):  # labels alternate top and bottom, so near marks do not overlap
            ax.axvline(x, color="#555", linestyle=":", linewidth=1)
            ax.annotate(text, (x, 0.98 if i % 2 else 0.02), xycoords=("data", "axes fraction"), rotation=90,
                        va="top" if i % 2 else "bottom", ha="right", fontsize="x-small", color="#555")
        if all(v > 0 for v in s["y"] + s["untrusted_y"] + [s["threshold"]]) and time_key:
            ax.set_yscale("log")
            label_log_axis(ax.yaxis)
        ax.set_xlabel(xlabel)
        if xlabel == "workers":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(key + (" (s, log scale)" if time_key else ""))
        if ages is not None and ages[0]:
            twin = ax.twinx()
            twin.plot(ages[0], ages[1], "s:", color="#6d4c41", label="oldest eligible age max (s)")
            twin.set_ylabel("oldest eligible age max (s)", color="#6d4c41")
            handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
            legend_above(ax, handles)
        else:
            legend_above(ax)
        ax.grid(True, alpha=0.3)
    fig.suptitle(textwrap.fill(title, 90), fontsize="medium", y=0.995)
    fig.tight_layout()
    return save_png(fig)


def _figures(plan_id: str, design: Mapping[str, Any], target: float) -> list[dict[str, str]]:
    figures = []
    workers = design.get("workers") or {}
    steps = workers.get("steps") or []
    if steps:
        title = f"{design['short']}: SLO against workers at {fmt_sig(target)} jobs/s (plan {plan_id})"
        marks = [(workers["needed"], f"needed: {workers['needed']}")] if workers.get("needed") else []
        if workers.get("unmeasured") is not None:
            marks.append((workers["unmeasured"], f"not measured: {workers['unmeasured']}"))
        figures.append({"title": title, "src": png_uri(_draw(_objective_series(steps, "workers"), title, "workers", marks)),
                        "caption": "Each point is the worst of the step's repetitions; a step passes only when every "
                                   "repetition meets every objective, keeps up and is trusted." + _untrusted_caption(steps)})
    head = design.get("headroom")
    if head and head.get("steps"):
        at_target = next(s for s in steps if s["workers"] == workers["needed"])
        rate_steps = [at_target, *head["steps"]]
        title = (f"{design['short']}: SLO and oldest age against rate at {workers['needed']} workers (plan {plan_id})")
        by_rate = sorted(rate_steps, key=lambda s: s["rate_jobs_per_s"])
        ages = ([s["rate_jobs_per_s"] for s in by_rate], [max((r["oldest_age_max_s"] or 0) for r in s["runs"]) for s in by_rate])
        marks = [(target, "target"), (head["rate_jobs_per_s"], f"passed ×{fmt_sig(head['factor'])}")]
        figures.append({"title": title, "src": png_uri(_draw(_objective_series(rate_steps, "rate_jobs_per_s"), title,
                                                           "arrival rate (jobs/s)", marks, ages)),
                        "caption": f"The rate search at {workers['needed']} workers: {head['why']}. The answer quotes "
                                   "it as headroom only when the answer's workers are these and passed."
                                   + _untrusted_caption(rate_steps)})
    return figures


def _untrusted_caption(steps: list[Mapping[str, Any]]) -> str:
    """The caption's sentence on untrusted points, when the figure has one."""
    if all(s.get("trusted", True) for s in steps):
        return ""
    return (" A step that failed only by the harness (every failing repetition harness-limited, after it was "
            "measured again) is marked untrusted (✕): it is no verdict, and the search stops at it.")


def _step_rows(plan_dir: Path, phase: str, steps: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for s in steps:
        links = []
        for label, runs in (("run", s["runs"]), ("first run", s.get("retried") or [])):
            for i, r in enumerate(runs):
                report = Path(r["run_dir"]) / "report.html"
                links.append({"text": f"{label} {i + 1}", "href": os.path.relpath(report, plan_dir)})
        rows.append({"phase": phase, "workers": s["workers"], "rate": fmt_sig(s["rate_jobs_per_s"]),
                     "passed": s["passed"], "objectives": slo_at(s), "throughput": fmt_sig(s["throughput_jobs_per_s"]),
                     "harness": next((r["harness_limited"] for r in s["runs"] if r["harness_limited"]), None),
                     "retried": next((r["harness_limited"] for r in s.get("retried") or []), None), "links": links,
                     "untrusted": s.get("untrusted_why"),
                     "why": next((r["why"] for r in s["runs"] if not r["passed"]), s["runs"][0]["why"] if s["runs"] else "")})
    return rows


def _probe_text(plan_dir: Path, probe: Mapping[str, Any]) -> str:
    """The probe's line in the designs table, with a link to its run."""
    if not probe:
        return ""
    link = f' (<a href="{os.path.relpath(Path(probe["run_dir"]) / "report.html", plan_dir)}">run</a>)'
    if probe.get("cycle_ms") is None:
        return f"{probe['workers']} workers, closed loop: no job completed; the search started at the least" + link
    return (f"{probe['workers']} workers, closed loop: {fmt_sig(probe['throughput_jobs_per_s'])} jobs/s, a cycle of "
            f"{fmt_seconds(probe['cycle_ms'] / 1000)} per job and worker; Little's law: "
            f"{fmt_sig(probe['little_estimate_workers'])} workers{link}")


def render_plan(plan_dir: Path) -> Path:
    """Write ``plan_dir/plan.html`` from ``plan.json``; returns its path. Raises ResultsError when
    ``plan.json`` is missing or unreadable."""
    plan_dir = Path(plan_dir)
    state = read_result(plan_dir / "plan.json")
    target = float(state["inputs"]["overrides"]["rate"])
    confirmations = state.get("confirmations") or ([state["confirmation"]] if state.get("confirmation") else [])
    answer_index = (state.get("answer") or {}).get("design_index")
    designs = []
    for i, d in enumerate(state["designs"]):
        steps = _step_rows(plan_dir, "workers", (d.get("workers") or {}).get("steps") or [])
        steps += _step_rows(plan_dir, "headroom", (d.get("headroom") or {}).get("steps") or [])
        # the headroom as the answer would quote it: the answer's design with its confirmations, others from steps
        found = (d.get("workers") or {}).get("needed")
        claim = what_passed(d, confirmations if i == answer_index else []) if found else None
        designs.append({**d, "rows": steps, "figures": _figures(plan_dir.name, d, target) if d.get("workers") else [],
                        "probe_text": _probe_text(plan_dir, d.get("probe") or {}),
                        "headroom_text": headroom_text(claim, target) if claim else "n/a"})
    confirm_rows = _step_rows(plan_dir, "confirm", confirmations)
    return write_page("plan.html.j2", plan_dir / "plan.html", plan_id=plan_dir.name, state=state,
                      answer=state.get("answer") or {}, designs=designs, confirm_rows=confirm_rows,
                      target=fmt_sig(target), slo=state["inputs"]["overrides"].get("slo"))
