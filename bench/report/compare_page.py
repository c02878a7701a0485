"""``qbench compare``: two runs (whole-window figures, Welch's t-test on their per-second samples) or two
sweeps (matched cells, repetition means) compared from their result files, as a text table and an HTML page
with a relative-difference plot."""

from __future__ import annotations

import json
import math
from collections import namedtuple
from dataclasses import dataclass
from functools import reduce
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from bench.analysis.regression import limit_text, regresses
from bench.analysis.statistics import compare_samples
from bench.report.format import NA, fmt_sig
from bench.results.values import as_float, fmt_label, is_missing
from bench.report.render import legend_above, new_figure, save_png, say, write_page, write_plot
from bench.results.model import ResultsError, problems, read_table
from bench.results.sweep import (AXIS_FIELD, Cell, CompareError, axis_fields, load_sweep, norm_param, read_json,
                                 run_complete, run_summary)
from bench.usage import setting

__all__ = ["CompareError", "compare", "gate"]

PAIR_TEMPLATE = "compare_pair.html.j2"
PER_SECOND_NOTE = ("Per-second samples are autocorrelated (consecutive seconds share the queue's "
                   "state, caches and old row versions not yet cleaned up), so p-values from them are optimistic: read "
                   "'yes' as 'worth repeating the runs', not as proof.")


#: A compared metric: its label and unit, where runs have it (a summary.json path; a cells.csv column for
#: sweeps), the per-second column of intervals.csv tested when there is one, whether higher is better, the
#: display scale (µs -> ms) and the regression gate's name of it (bench.analysis.regression.GATE_METRICS).
Metric = namedtuple("Metric", "label unit source per_second higher_is_better scale key")


@dataclass
class _Row:
    """One compared metric: A, B (in the unit before the metric's scale) and Welch's test."""

    metric: str
    spec: Metric
    a: float
    b: float
    p_value: float | None
    significant: bool | None
    samples: str
    within_runs: bool = False  # tested on per-second samples of single runs: no run-to-run spread in it

    @property
    def rel_diff(self) -> float:
        """(B − A) / A; NaN without both or when A is 0."""
        a, b = self.a, self.b
        return (b - a) / a if not is_missing(a) and not is_missing(b) and a != 0 else math.nan


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


def _compared(a: Path, b: Path) -> tuple[str, list[_Row], list[str]]:
    """(kind, rows, notes) of two directories of one kind; CompareError otherwise (see :func:`compare`)."""
    kind_a, kind_b = _kind(a, "RUN_OR_SWEEP_A"), _kind(b, "RUN_OR_SWEEP_B")
    if kind_a != kind_b:
        raise CompareError(f"RUN_OR_SWEEP_B: {b} is a {kind_b} directory but RUN_OR_SWEEP_A ({a}) is a {kind_a} "
                           "directory; compare a run with a run, or a sweep with a sweep")
    return kind_a, *(_compare_runs if kind_a == "run" else _compare_sweeps)(a, b)


def _per_second(run_dir: Path, column: str) -> list[float]:
    """Per-second values of ``column`` from a run's intervals.csv (the final partial second of an
    interrupted run dropped; upgraded to this format, :func:`bench.results.model.read_table`); [] when the file or
    column is missing."""
    try:
        df = read_table(run_dir, "intervals.csv", run_summary(run_dir) or {})
    except (OSError, ResultsError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        return []
    if column not in df:
        return []
    if run_complete(run_dir) is False and len(df) > 1:
        df = df.iloc[:-1]
    return [float(v) for v in pd.to_numeric(df[column], errors="coerce").dropna()]


def _test(samples_a: list[float], samples_b: list[float]) -> tuple[float | None, bool | None]:
    if not samples_a or not samples_b:
        return None, None
    res = compare_samples(samples_a, samples_b)
    return res["p_value"], res["significant"]


_RUN_METRICS = (
    Metric("throughput", "jobs/s", "throughput_jobs_per_s", "jobs_completed", True, 1.0, "throughput"),
    Metric("claims per second", "claims/s", "claims_per_s", "claims", True, 1.0, ""),
    *(Metric(f"claim latency {p}", "ms", f"claim_latency_us.{p}", f"claim_{p}_us", False, 1000.0, f"claim_{p}")
      for p in ("p50", "p95", "p99")),
    Metric("oldest eligible age max", "s", "oldest_eligible_age_s.max", None, False, 1.0, "age_max"),
)


def _compare_runs(a: Path, b: Path) -> tuple[list[_Row], list[str]]:
    sa = read_json(a / "summary.json", "RUN_OR_SWEEP_A")
    sb = read_json(b / "summary.json", "RUN_OR_SWEEP_B")
    rows = []
    for spec in _RUN_METRICS:
        va, vb = (as_float(reduce(lambda d, k: (d or {}).get(k), spec.source.split("."), s)) for s in (sa, sb))
        xa, xb = (_per_second(a, spec.per_second), _per_second(b, spec.per_second)) if spec.per_second else ([], [])
        samples = f"{len(xa)}/{len(xb)} s" if spec.per_second else "max: no test"
        rows.append(_Row(spec.label, spec, va, vb, *_test(xa, xb), samples, within_runs=bool(spec.per_second)))
    notes = [
        "A and B are the run's whole-window figures (summary.json); relative difference = (B − A) / A.",
        "p-value: Welch's unequal-variance t-test on the per-second samples of intervals.csv (jobs_completed "
        "for throughput, claims for claims/s, claim_p50_us / claim_p95_us / claim_p99_us for latencies); "
        "significant = p < 0.05. The oldest age max is one number per run: no test.",
        PER_SECOND_NOTE,
    ]
    for label, s in (("A", sa), ("B", sb)):
        untrusted = problems(s)
        if untrusted:
            notes.append(f"run {label} cannot be trusted: " + "; ".join(untrusted) + ".")
    return rows, notes


_SWEEP_METRICS = (
    Metric("throughput", "jobs/s", "throughput_jobs_per_s", "jobs_completed", True, 1.0, "throughput"),
    *(Metric(f"claim {p}", "ms", f"claim_{p}_us", f"claim_{p}_us", False, 1000.0, f"claim_{p}") for p in ("p50", "p99")),
    Metric("oldest age max", "s", "oldest_age_max_s", None, False, 1.0, "age_max"),
)


#: Run parameters that say where results went or which database was used, not what was measured.
_NOT_MEASURED = ("results", "dsn", "schema", "workload")


def _cell_key(sweep, cell: Cell) -> tuple:
    """What matches a cell of one sweep with one of the other: its effective parameters (the sweep's base with
    the cell's axis values)."""
    params = {k: v for k, v in (sweep.meta.get("base") or {}).items() if k not in _NOT_MEASURED}
    params.update({AXIS_FIELD.get(k, k): v for k, v in cell.params.items()})
    return tuple(sorted((k, json.dumps(norm_param(v), sort_keys=True, default=str)) for k, v in params.items()))


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
        name = ", ".join(f"{k} {fmt_label(v)}" for k, v in ca.params.items()) or ca.cell_id
        for spec in _SWEEP_METRICS:
            column, per_s = spec.source, spec.per_second
            xa, xb = ([float(v) for v in c.done[column] if not is_missing(v)] if column in c.done else [] for c in (ca, cb))
            if not xa or not xb:
                p, sig, samples = None, None, "no finished run"
            elif len(xa) >= 2 and len(xb) >= 2:
                p, sig = _test(xa, xb)
                samples = f"{len(xa)}/{len(xb)} reps"
            elif per_s:
                sec_a, sec_b = ([v for d in c.done["run_dir"] for v in _per_second(path / d, per_s)]
                                for path, c in ((a, ca), (b, cb)))
                p, sig = _test(sec_a, sec_b)
                samples = f"{len(sec_a)}/{len(sec_b)} s*"
                fallback.append(name)
            else:
                p, sig, samples = None, None, "1 rep: no test"
            rows.append(_Row(f"{name}: {spec.label}", spec, *(float(np.mean(x)) if x else math.nan for x in (xa, xb)),
                             p, sig, samples, within_runs=samples.endswith("s*")))
    unmatched += [f"B {c.cell_id} ({c.label})" for c in sb.cells if _cell_key(sb, c) not in matched_b]
    if not matched_b:
        raise CompareError(f"RUN_OR_SWEEP_B: no cell of {b} has the parameters of a cell of {a} (A varies "
                           f"{', '.join(sa.meta.get('axes') or {}) or 'nothing'}, B varies "
                           f"{', '.join(sb.meta.get('axes') or {}) or 'nothing'}); allowed: two sweeps with cells in common")
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
    varied = axis_fields(sa.meta) | axis_fields(sb.meta)  # an axis is not a base parameter
    differ = [k for k in sorted(set(base_a) | set(base_b))
              if k not in ("results", "dsn", "schema") and k not in varied
              and norm_param(base_a.get(k)) != norm_param(base_b.get(k))]
    if differ:
        notes.append("The sweeps' base parameters differ in: " + ", ".join(
            f"{k} ({fmt_label(base_a.get(k))} vs {fmt_label(base_b.get(k))})" for k in differ) + ".")
    for label, s in (("A", sa), ("B", sb)):
        bad = [c.cell_id for c in s.cells if c.bad]
        if bad:
            notes.append(f"sweep {label} has cells with failed, suspect or invariant-breaking runs: {', '.join(bad)}.")
        if s.meta.get("complete") is False:
            notes.append(f"sweep {label} is incomplete (complete = false).")
    return rows, notes


def _fmt_value(row: _Row, v: float) -> str:
    return NA if is_missing(v) else f"{fmt_sig(v / row.spec.scale)} {row.spec.unit}"


def _fmt_rel(v: float) -> str:
    return NA if is_missing(v) else f"{v * 100:+.1f} %"


def _fmt_p(p: float | None) -> str:
    if p is None:
        return NA
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}"


def _fmt_sig(s: bool | None) -> str:
    return NA if s is None else ("yes" if s else "no")


def _display(r: _Row) -> dict[str, str]:
    """A row's cells as text, in table order, keyed as compare_pair.html.j2 reads them."""
    return {"metric": r.metric, "a": _fmt_value(r, r.a), "b": _fmt_value(r, r.b), "rel": _fmt_rel(r.rel_diff),
            "p": _fmt_p(r.p_value), "sig": _fmt_sig(r.significant), "samples": r.samples}


def _text_table(rows: list[_Row]) -> str:
    header = ("metric", "A", "B", "rel. diff (B-A)/A", "p-value", "significant", "samples A/B")
    body = [tuple(_display(r).values()) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    right = (False, True, True, True, True, False, False)

    def line(cells):
        return "  ".join((str(c).rjust(w) if r else str(c).ljust(w)) for c, w, r in zip(cells, widths, right)).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *(line(b) for b in body)])


def _draw_rel_diff(rows: list[_Row]) -> bytes:
    """Horizontal bars of (B − A) / A in %: green when B is better, red when worse, pale when not significant."""
    shown = [r for r in rows if not is_missing(r.rel_diff)]
    fig, ax = new_figure(9, 1.2 + 0.32 * max(len(shown), 1))
    if not shown:
        say(ax, "no relative difference could be computed")
        ax.set_axis_off()
        return save_png(fig)
    ys = np.arange(len(shown))[::-1]
    for y, r in zip(ys, shown):
        ax.barh(y, r.rel_diff * 100, color="#2e7d32" if (r.rel_diff > 0) == r.spec.higher_is_better else "#c62828",
                alpha=1.0 if r.significant else 0.35, height=0.7)
        ax.text(r.rel_diff * 100, y, f" {r.rel_diff * 100:+.1f} %", va="center",
                ha="left" if r.rel_diff >= 0 else "right", fontsize="x-small")
    ax.set_yticks(ys, [f"{r.metric} ({r.spec.unit})" for r in shown], fontsize="small")
    ax.axvline(0, color="#333", linewidth=0.8)
    lo = min(0.0, min(r.rel_diff for r in shown) * 100)
    hi = max(0.0, max(r.rel_diff for r in shown) * 100)
    pad = 0.2 * (hi - lo) or 1.0
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_xlabel("relative difference (B − A) / A (%)")
    ax.grid(True, axis="x", alpha=0.3)
    legend_above(ax, [Patch(color="#2e7d32", label="B better"), Patch(color="#c62828", label="B worse"),
                      Patch(color="#999", alpha=0.35, label="pale: not significant or untested")], ncol=3)
    return save_png(fig)


def gate(a_path: Path | str, b_path: Path | str, limit: float,
         metrics: tuple[str, ...]) -> tuple[list[str], list[str], int]:
    """The regression gate (:mod:`bench.analysis.regression`) of B against A over the compared rows whose gate
    name is in ``metrics``: (regressions, untested, judged), one line each (judged: how many rows). A
    difference with one run on each side is untested. Raises CompareError like :func:`compare`."""
    _, rows, _ = _compared(Path(a_path), Path(b_path))
    found, untested, judged = [], [], 0
    for r in (r for r in rows if r.spec.key in metrics):
        if r.significant is None:
            untested.append(f"{r.metric}: no test ({r.samples})")
        elif r.within_runs:
            untested.append(f"{r.metric}: one run on each side ({r.samples}); seconds within a run do not hold the "
                            "run-to-run spread, and two runs of one design on a shared machine can differ by more "
                            f"than the limit: gate two sweeps with {setting('repetitions', 2)} or more")
        else:
            judged += 1
            if regresses(r.rel_diff, r.significant, r.spec.higher_is_better, limit):
                p = _fmt_p(r.p_value)
                found.append(f"{r.metric}: {_fmt_value(r, r.a)} -> {_fmt_value(r, r.b)} ({_fmt_rel(r.rel_diff)}, "
                             f"p {p if p.startswith('<') else '= ' + p}), worse than the {limit_text(limit)} allowed")
    return found, untested, judged


def compare(a_path: Path | str, b_path: Path | str, out_path: Path | str | None = None) -> tuple[str, Path]:
    """Compare two runs or two sweeps (``a_path``, ``b_path``: directories of the same kind) from their result
    files; returns (text, html_path).

    ``text`` is a fixed-width table (metric, A, B, (B − A)/A, p-value, significant, samples) and notes;
    ``html_path`` the page (``out_path``: a file, or a directory for ``<dir>/compare.html``; default
    ``<b_path>/compare_vs_<name of a_path>.html``), with ``plots/<page stem>_relative_difference.png`` beside
    it. Raises CompareError naming RUN_OR_SWEEP_A / RUN_OR_SWEEP_B (a missing path, neither kind, a run
    against a sweep) or ``--out`` (cannot be written)."""
    a, b = Path(a_path), Path(b_path)
    kind, rows, notes = _compared(a, b)
    text = "\n".join([f"A: {a} ({kind})", f"B: {b} ({kind})", "", _text_table(rows), ""] + [f"- {n}" for n in notes])

    if out_path is None:
        out = b / f"compare_vs_{a.resolve().name}.html"
    else:
        out = Path(out_path)
        if out.is_dir() or str(out_path).endswith(("/", "\\")):
            out = out / "compare.html"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        uri = write_plot(out.parent / "plots", f"{out.stem}_relative_difference", _draw_rel_diff(rows))
        write_page(PAIR_TEMPLATE, out, kind=kind, a=str(a), b=str(b), a_name=a.resolve().name,
                   b_name=b.resolve().name, notes=notes, plot_uri=uri,
                   rows=[_display(r) | {"worse": bool(r.significant) and not is_missing(r.rel_diff)
                                        and ((r.rel_diff > 0) != r.spec.higher_is_better)} for r in rows])
    except OSError as exc:
        raise CompareError(f"--out: cannot write {out} ({exc.strerror or exc})") from None
    return text, out
