"""Run (or resume) a catalogue of experiments into ``results/experiments/<tier>-<stamp>/`` and decide each
one's verdict (the directory, resume and budgets: docs/experiments.md)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from bench.analysis.experiment_figures import cell_runs, measure
from bench.analysis.verdicts import decide
from bench.errors import Interrupted
from bench.experiments.catalogue import Experiment
from bench.results.model import newest_unfinished, problems, read_result, utc_now, utc_stamp, write_result
from bench.results.sweep import load_sweep
from bench.sweep.driver import run_sweep

CATALOGUE_FILE = "experiments.json"
OUTCOME_FILE = "outcome.json"


def selection_key(experiments: Sequence[Experiment], engine: str) -> str:
    """Identifies what a catalogue run measures: the experiments' names, files and tier, and the engine."""
    blob = json.dumps({"engine": engine, "experiments": [(e.name, e.full, e.path.read_bytes().hex()) for e in experiments]})
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def untrusted_runs(sweep_dir: Path, accept: Sequence[str]) -> list[str]:
    """One sentence per run problem of the sweep that the experiment does not ``accept``: failed runs, each
    run's :func:`bench.results.model.problems`, "saturated" unless accepted, and ``AUTOVACUUM_SETTINGS`` the
    run could not observe."""
    sweep = load_sweep(sweep_dir)
    found = []
    for _, row in sweep.runs.iterrows():
        if not row["done"]:
            found.append(f"run {row['cell_id']} rep {row['rep']:.0f}: {row['status']}")
    for cell in sweep.cells:
        for view in cell_runs(sweep, cell):
            why = [p for p in problems(view.summary)
                   if not ("invariants" in accept and p.startswith("invariants broken"))]
            if view.summary.get("saturated") is True and "saturated" not in accept:
                why.append("saturated: the arrivals outpaced the workers")
            if view.config.get("autovacuum_settings") and (view.summary.get("autovacuum") or {}).get("unobservable"):
                why.append("per-table autovacuum settings unobservable: " + view.summary["autovacuum"]["unobservable"])
            found.extend(f"{cell.label or cell.cell_id} ({view.result.run_id}): {w}" for w in why)
    return found


def _column_max(view, column: str) -> float | None:
    """The largest value of ``intervals.csv``'s ``column`` over the run's measured seconds, or None."""
    frame = view.intervals
    if column not in frame or frame[column].dropna().empty:
        return None
    return float(frame[column].max())


def _runs_table(sweep_dir: Path, catalogue_dir: Path) -> list[dict]:
    sweep = load_sweep(sweep_dir)
    rows = []
    for cell in sweep.cells:
        for view in cell_runs(sweep, cell):
            s = view.summary
            report = view.run_dir / "report.html"
            rows.append({"cell": cell.label or cell.cell_id, "run_id": view.result.run_id,
                         "throughput_jobs_per_s": s.get("throughput_jobs_per_s"),
                         "claim_p50_us": (s.get("claim_latency_us") or {}).get("p50"),
                         "claim_p99_us": (s.get("claim_latency_us") or {}).get("p99"),
                         "server_backends_max": _column_max(view, "server_backends"),
                         "problems": problems(s),
                         "report": str(report.relative_to(catalogue_dir)) if report.is_file() else None})
    return rows


def decide_experiment(exp: Experiment, exp_dir: Path, catalogue_dir: Path, engine: str, *,
                      sweep_dir: Path | None, probe: Mapping[str, Any] | None, unfinished: str,
                      elapsed_s: float) -> dict:
    """Measure ``exp``'s figures from its runs (or probe) and decide its verdict; returns the
    outcome (also written to ``exp_dir/outcome.json``)."""
    na = exp.reason_not_applicable(engine) or (str(probe.get("not_applicable") or "") if probe else "")
    sweep = load_sweep(sweep_dir) if sweep_dir is not None else None
    specs = exp.figures_on(engine)
    figures = [] if na else [measure(spec, sweep, probe) for spec in specs]
    untrusted = untrusted_runs(sweep_dir, exp.accept) if sweep_dir is not None and not na else []
    verdict = decide(figures, untrusted, unfinished, na)
    outcome = {
        **exp.describe(), "engine": engine, "verdict": verdict.verdict, "reasons": verdict.reasons,
        "figures": [{**spec, "values": f.values, "value": f.value, "threshold": str(f.threshold),
                     "outcome": f.outcome()[0], "why": f.outcome()[1]} for spec, f in zip(specs, figures)],
        "sweep_dir": str(sweep_dir.relative_to(catalogue_dir)) if sweep_dir is not None else None,
        "probe_result": dict(probe) if probe is not None else None,
        "runs": _runs_table(sweep_dir, catalogue_dir) if sweep_dir is not None else [],
        "elapsed_s": round(elapsed_s, 1), "decided_at": utc_now(),
    }
    write_result(exp_dir / OUTCOME_FILE, outcome)
    return outcome


def _finished_sweep(exp_dir: Path, matrix_hash: str) -> Path | None:
    """A finished sweep of the same matrix in ``exp_dir/sweeps`` (the catalogue was interrupted
    after it, before the verdict), or None."""
    for meta_path in sorted((exp_dir / "sweeps").glob("*/sweep.json"), reverse=True):
        meta = read_result(meta_path)
        if meta.get("complete") and meta.get("matrix_hash") == matrix_hash:
            return meta_path.parent
    return None


def _run_one(exp: Experiment, exp_dir: Path, catalogue_dir: Path, *, engine: str, dsn: str,
             log: Callable[[str], None], on_run: Callable[[Path], None],
             probe_runner: Callable[[str], Mapping[str, Any]], embedded: bool = False) -> dict:
    """Measure ``exp`` into ``exp_dir`` (its probe, or its sweep within its budget) and return its outcome,
    decided by :func:`decide_experiment`; not applicable to ``engine``: the outcome says so, nothing run."""
    started = time.monotonic()
    if exp.reason_not_applicable(engine):
        return decide_experiment(exp, exp_dir, catalogue_dir, engine, sweep_dir=None, probe=None, unfinished="",
                                 elapsed_s=0.0)
    if exp.probe is not None:
        probe = probe_runner(exp.probe)
        write_result(exp_dir / "probe.json", probe)
        log("    probe: " + "; ".join(f"{k} {v}" for k, v in probe.items() if len(str(v)) <= 40))  # not the plans
        return decide_experiment(exp, exp_dir, catalogue_dir, engine, sweep_dir=None, probe=probe, unfinished="",
                                 elapsed_s=time.monotonic() - started)
    sweep = exp.sweep(dsn)
    planned = exp.planned_load_s(sweep)
    if planned > exp.budget_s:
        log(f"  needs about {planned:.0f} s, more than its budget of {exp.budget_s:.0f} s: not run")
    sweep_dir = _finished_sweep(exp_dir, sweep.matrix_hash)  # interrupted after its last run
    if sweep_dir is None and planned <= exp.budget_s:
        sweep_dir = run_sweep(sweep, dsn, exp_dir, log=lambda line: log("  " + line), on_run=on_run,
                              deadline=started + exp.budget_s, embedded=embedded)
    total = len(sweep.cells) * sweep.repetitions
    runs = load_sweep(sweep_dir).runs if sweep_dir is not None else None
    measured = 0 if runs is None else int(runs["done"].sum())
    failed = 0 if runs is None else int((~runs["done"]).sum())
    unfinished = ""
    if sweep_dir is None:
        unfinished = f"its runs need about {planned:.0f} s, more than its budget of {exp.budget_s:.0f} s"
    elif failed:
        unfinished = f"{failed} of {total} runs failed (see cells.csv)"
    elif measured < total:
        unfinished = f"the budget of {exp.budget_s:.0f} s ran out after {measured} of {total} runs"
    return decide_experiment(exp, exp_dir, catalogue_dir, engine, sweep_dir=sweep_dir, probe=None,
                             unfinished=unfinished, elapsed_s=time.monotonic() - started)


def run_catalogue(experiments: Sequence[Experiment], dsn: str, engine: str, results_dir: Path, *,
                  probe_runner: Callable[[str], Mapping[str, Any]], fresh: bool = False,
                  log: Callable[[str], None] = print, on_run: Callable[[Path], None] = lambda _d: None,
                  embedded: bool = False) -> Path:
    """Run (or resume) ``experiments`` against ``dsn`` (an ``engine`` database; ``embedded``: a server the tool
    started, serving no one else); returns the catalogue directory, whose ``experiments.json`` holds every
    outcome. ``probe_runner(kind)`` returns a probe's facts; ``on_run(run_dir)`` runs after each measured run.
    Raises :class:`Interrupted` on Ctrl-C."""
    key = selection_key(experiments, engine)
    catalogue_dir = None if fresh else newest_unfinished(results_dir / "experiments", "*/" + CATALOGUE_FILE,
                                                         lambda meta: meta.get("selection_key") == key)
    tier = "full" if any(e.full for e in experiments) else "quick"
    if catalogue_dir is None:
        catalogue_dir = results_dir / "experiments" / f"{tier}-{utc_stamp()}"
        catalogue_dir.mkdir(parents=True)
        meta = {"catalogue_id": catalogue_dir.name, "tier": tier, "engine": engine, "selection_key": key,
                "experiments": [e.name for e in experiments], "started_at": utc_now(), "ended_at": None,
                "complete": False, "outcomes": []}
        log(f"experiments ({tier} tier, {len(experiments)}): {catalogue_dir}")
    else:
        meta = read_result(catalogue_dir / CATALOGUE_FILE)
        log(f"experiments: resuming {catalogue_dir}")
    write_result(catalogue_dir / CATALOGUE_FILE, meta)
    outcomes = []
    try:
        for exp in experiments:
            exp_dir = catalogue_dir / exp.name
            exp_dir.mkdir(exist_ok=True)
            if (exp_dir / OUTCOME_FILE).is_file():
                outcome = read_result(exp_dir / OUTCOME_FILE)
                log(f"{exp.number:>2}. {exp.title}: {outcome['verdict']} (measured before)")
            else:
                log(f"{exp.number:>2}. {exp.title}: {exp.claim}")
                try:
                    outcome = _run_one(exp, exp_dir, catalogue_dir, engine=engine, dsn=dsn, log=log, on_run=on_run,
                                       probe_runner=probe_runner, embedded=embedded)
                except (Interrupted, KeyboardInterrupt):
                    raise Interrupted(f"experiments interrupted; run them again to resume: {catalogue_dir}") from None
                log(f"    -> {outcome['verdict']}: {'; '.join(outcome['reasons'])}")
            outcomes.append(outcome)
            meta["outcomes"] = outcomes
            write_result(catalogue_dir / CATALOGUE_FILE, meta)
    finally:
        write_result(catalogue_dir / CATALOGUE_FILE, meta)
    meta.update(complete=True, ended_at=utc_now())
    write_result(catalogue_dir / CATALOGUE_FILE, meta)
    return catalogue_dir
