"""A sweep's capacity answer: the one sentence the sweep report opens with, where it comes from, its caveats
(from the sweep's cells, or its ``capacity.json``)."""

from __future__ import annotations

from bench.analysis.statistics import workers_needed
from bench.report.format import ci_text, fmt_num, ms_text
from bench.results.sweep import Cell, SweepResults, read_json
from bench.results.values import as_float, engine_name, fmt_label, is_missing

__all__ = ["DESIGN_KEYS", "capacity_answer", "design_text"]

#: The design a capacity answer names, in this order.
DESIGN_KEYS = ("policy", "index", "layout", "batch")


def design_text(values: dict) -> str:
    """The design named by ``values`` (parameter name -> value), e.g. 'policy skip_locked, index partial,
    batch 10'; the :data:`DESIGN_KEYS` that have a value, in that order."""
    parts = [f"{k} {fmt_label(values[k])}" for k in DESIGN_KEYS if not is_missing(values.get(k)) and values.get(k) != ""]
    return ", ".join(parts) if parts else "(design not recorded)"


def capacity_answer(sweep: SweepResults) -> dict:
    """The answer: ``{"sentence", "ok" (a figure was given), "details": [str], "cell_id" (or None)}``, from
    ``capacity.json`` when there is one, else the trustworthy cell with the highest mean throughput. Raises
    CompareError (``capacity.json: ...``) when that file is not a readable JSON object."""
    best = _best_cell(c for c in sweep.cells if c.qualifies)
    if (sweep.path / "capacity.json").is_file():
        return _capacity_file_answer(read_json(sweep.path / "capacity.json", "capacity.json"), best)
    if not sweep.cells or sweep.runs.empty:
        return {"sentence": "No run of this sweep has finished yet, so there is no capacity figure.",
                "ok": False, "details": [], "cell_id": None}
    if best is None:
        n_measured = sum(1 for c in sweep.cells if len(c.runs))
        return {"sentence": (f"No cell of this sweep gives a trustworthy capacity figure: each of the "
                             f"{n_measured} measured cells has a failed, incomplete or suspect run, or a run "
                             "whose invariants are not ok."),
                "ok": False, "details": ["Fix the cause shown in red below and re-run the sweep."], "cell_id": None}
    return _best_cell_answer(sweep, best)


def _best_cell(cells) -> Cell | None:
    """The cell of ``cells`` with the highest mean throughput (one without a figure counts as -1); None for none."""
    return max(cells, default=None, key=lambda c: c.stat("throughput_jobs_per_s").mean
               if c.stat("throughput_jobs_per_s").n else -1)


def _sentence(design: dict, rate: float, p99_us: float, workers) -> str:
    """The answer's sentence: what the design (with its ``engine``) sustains, at what claim p99 (µs), with how many
    workers."""
    return (f"With design {design_text(design)}, this {engine_name(design.get('engine'))} database sustains about "
            f"{fmt_num(rate)} jobs/s at p99 claim {ms_text(p99_us)} ms using {fmt_label(workers)} workers.")


def _capacity_file_answer(cap: dict, best: Cell | None) -> dict:
    """The answer from a capacity search's ``capacity.json``: its sustainable rate, or that it found none
    (with the best trustworthy cell's drain rate, ``best``, as a ceiling for reference)."""
    design = cap.get("design") or {}
    rate = cap.get("sustainable_rate_jobs_per_s")
    workers = cap.get("workers", design.get("workers"))
    steps = cap.get("steps") or []
    if not is_missing(rate):
        sentence = _sentence(design, rate, cap.get("claim_p99_us_at_rate"), workers)
        details = [f"From the capacity search in capacity.json ({len(steps)} offered rates tried): the "
                   "highest open-loop arrival rate at which the oldest eligible age did not keep growing."]
        return {"sentence": sentence, "ok": True, "details": details, "cell_id": None}
    sentence = (f"The capacity search (capacity.json) found no sustainable rate for design "
                f"{design_text(design)}: the queue saturated at every rate it tried ({len(steps)} "
                f"step{'s' if len(steps) != 1 else ''}).")
    details = []
    if best is not None:
        tput = best.stat("throughput_jobs_per_s")
        details.append(f"For reference, the sweep's best trustworthy cell ({best.cell_id}) drained a seeded "
                       f"backlog at {fmt_num(tput.mean)} jobs/s; that is a ceiling, not a sustainable rate.")
    return {"sentence": sentence, "ok": False, "details": details, "cell_id": None}


def _best_cell_answer(sweep: SweepResults, best: Cell) -> dict:
    """The answer from the sweep's best trustworthy cell: its design, throughput and claim p99, how it was
    chosen, the other engines' best cells, and the closed-loop and target caveats."""
    tput, p99 = best.stat("throughput_jobs_per_s"), best.stat("claim_p99_us")
    design = {k: sweep.value(best, k) for k in (*DESIGN_KEYS, "engine", "workers", "rate")}
    sentence = _sentence(design, tput.mean, p99.mean, design["workers"])
    details = [f"Cell {best.cell_id} ({best.label}): mean throughput over {tput.n} repetition"
               f"{'s' if tput.n != 1 else ''}, 95 % CI {ci_text(tput)} jobs/s; claim p99 {ci_text(p99, 1000.0)} ms. "
               "Chosen as the highest mean throughput among cells whose runs all finished, are complete, "
               "not suspect, not saturated and have their invariants ok."]
    if "engine" in sweep.varying:
        details.extend(_other_engines(sweep, best))
    if is_missing(design.get("rate")) or as_float(design.get("rate")) == 0:
        details.append("These runs drained a seeded backlog (closed loop): the figure is the most this design "
                       "completed per second, an upper bound. The rate it sustains with a stable queue lag "
                       "comes from a capacity search (make capacity), which this sweep directory does not hold.")
    details.extend(_target_details(sweep.meta.get("target") or {}, design, tput.mean))
    return {"sentence": sentence, "ok": True, "details": details, "cell_id": best.cell_id}


def _target_details(target: dict, design: dict, throughput: float) -> list[str]:
    """For a sweep with a ``target`` (``rate_jobs_per_s``, ``utilisation``): the workers it needs by Little's
    law from the chosen cell (``design``, mean ``throughput`` in jobs/s), or why an open-loop cell gives none."""
    rate = target.get("rate_jobs_per_s")
    workers = as_float(design.get("workers"))
    open_loop = not is_missing(design.get("rate")) and as_float(design.get("rate")) > 0
    if is_missing(rate) or float(rate) <= 0:
        return []
    if open_loop:
        # With open-loop arrivals the workers idle between jobs: workers / throughput is not the
        # time a worker spends on a job, and Little's law would overstate the workers needed.
        return [f"Target {fmt_num(rate)} jobs/s: no Little's-law estimate from this cell, whose workers "
                "were fed by open-loop arrivals and partly idle; it needs a closed-loop cell (a seeded "
                "backlog, RATE 0), where workers / throughput is the time per job per worker."]
    if not (workers > 0 and throughput > 0):
        return []
    util = float(target.get("utilisation") or 0.7)
    job_s = workers / throughput  # Little's law: each worker holds one job (or batch) per cycle
    need = workers_needed(float(rate), job_s, util)
    return [f"Target {fmt_num(rate)} jobs/s at {util:.0%} utilisation: about {need} workers of this "
            f"design by Little's law (L = λW with W = workers / throughput = {job_s * 1000:.3g} ms "
            "per job per worker, as measured in this cell)"
            + ("; the target is above what this cell measured, so more workers may not scale "
               "linearly (see the USL fit)." if float(rate) > throughput else ".")]


def _other_engines(sweep: SweepResults, best: Cell) -> list[str]:
    """For a sweep with an engine axis: each other engine's best trustworthy cell, by the same rule
    as the answer's, or that it has none."""
    lines = []
    engines = list(dict.fromkeys(str(sweep.value(c, "engine")) for c in sweep.cells))
    for engine in engines:
        if engine == str(sweep.value(best, "engine")):
            continue
        top = _best_cell(c for c in sweep.cells if str(sweep.value(c, "engine")) == engine and c.qualifies)
        if top is None:
            lines.append(f"On {engine_name(engine)}, no cell gives a trustworthy figure.")
            continue
        design = {k: sweep.value(top, k) for k in DESIGN_KEYS}
        tput, p99 = top.stat("throughput_jobs_per_s"), top.stat("claim_p99_us")
        lines.append(f"On {engine_name(engine)}, the best trustworthy cell is {top.cell_id} ({top.label}): design "
                     f"{design_text(design)}, {ci_text(tput)} jobs/s, claim p99 {ci_text(p99, 1000.0)} ms using "
                     f"{fmt_label(sweep.value(top, 'workers'))} workers.")
    return lines
