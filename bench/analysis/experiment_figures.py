"""An experiment's figures (``[[figures]]``, keys as in docs/experiments.md), measured from its runs' result
files or its probe's facts: one value per repetition."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from bench.analysis.verdicts import Figure, Threshold
from bench.results.model import ResultsError, RunResult
from bench.results.sweep import Cell, SweepResults, norm_param

MEASURES = ("value", "ratio", "probe")
AGGREGATES = ("mean", "max", "min", "sum", "last", "first_third", "last_third", "before", "during", "after")


class RunView:
    """One run's ``summary.json`` and (read when first asked) ``intervals.csv``."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.result = RunResult.load(self.run_dir)
        self.summary, self.config = self.result.summary, self.result.config
        self._intervals: pd.DataFrame | None = None

    @property
    def intervals(self) -> pd.DataFrame:
        """``intervals.csv`` upgraded to this format (:meth:`RunResult.table`), numeric where it can be (an empty
        frame when the file is absent)."""
        if self._intervals is None:
            present = (self.run_dir / "intervals.csv").is_file()
            frame = self.result.table("intervals.csv") if present else pd.DataFrame()
            self._intervals = frame.apply(pd.to_numeric, errors="coerce")
        return self._intervals

    def value(self, path: str) -> float | None:
        """The number at ``path`` (dotted; a list's item by its index, ``migrations.0.stall_s``) in
        ``summary.json``, or None; ``errors`` is the sum of its counts."""
        node: Any = self.summary
        for part in path.split("."):
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
                continue
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        if isinstance(node, Mapping) and path == "errors":
            return float(sum(v for v in node.values() if isinstance(v, (int, float))))
        return _number(node)

    def setting(self, key: str) -> float | None:
        """The run's parameter ``key`` as a number, or None."""
        return _number(self.config.get(key))

    def fault_span_s(self) -> tuple[float, float] | None:
        """(start, end) seconds since the measured start spanning the run's fault windows, or None."""
        windows = [w for w in self.summary.get("faults") or [] if isinstance(w, Mapping) and "start_s" in w and "end_s" in w]
        return (min(float(w["start_s"]) for w in windows), max(float(w["end_s"]) for w in windows)) if windows else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
        return float(value)
    return None


def _aggregate(view: RunView, column: str, how: str) -> float | None:
    frame = view.intervals
    if column not in frame or "t_s" not in frame:
        return None
    series = frame[["t_s", column]].dropna()
    if how in ("before", "during", "after"):
        span = view.fault_span_s()
        if span is None:
            return None
        t = series["t_s"]
        pick = {"before": t < span[0], "during": (t >= span[0]) & (t < span[1]), "after": t >= span[1]}[how]
        series = series[pick]
        how = "mean"
    elif how in ("first_third", "last_third"):
        n = len(series) // 3
        series = series.iloc[:n] if how == "first_third" else series.iloc[len(series) - n:]
        how = "mean"
    values = series[column]
    if values.empty:
        return None
    return float({"mean": values.mean, "max": values.max, "min": values.min, "sum": values.sum,
                  "last": lambda: values.iloc[-1]}[how]())


def _ratio(top: float | None, bottom: float | None) -> float | None:
    """``top / bottom``; None when either is missing or ``bottom`` is 0."""
    return None if top is None or not bottom else top / bottom


def _throughput_x_work_s(view: RunView) -> float | None:
    """Jobs/s × the configured job duration (s): 1.0 when one job runs at a time, back to back."""
    thr, work_ms = view.value("throughput_jobs_per_s"), view.setting("work_ms")
    return None if thr is None or not work_ms else thr * (work_ms / 1000)


def _depth_growth_share_of_arrivals(view: RunView) -> float | None:
    """How much the queue depth grew over the measured window (last second's less the first's), over the jobs
    that arrived in it (``jobs_produced``): near 0 when stable, 1 when no arrival was served."""
    frame = view.intervals
    depth = frame["queue_depth"].dropna() if "queue_depth" in frame else []
    return None if len(depth) < 2 else _ratio(float(depth.iloc[-1] - depth.iloc[0]), view.value("jobs_produced"))


def _recovery_s(view: RunView) -> float | None:
    """Seconds from the end of the fault windows until completions per second, over 3 s, are back to 90 % of
    their mean before the windows; None when they never are within the run."""
    span, frame = view.fault_span_s(), view.intervals
    if span is None or "jobs_completed" not in frame:
        return None
    before = frame[frame["t_s"] < span[0]]["jobs_completed"].mean()
    after = frame[frame["t_s"] >= span[1]][["t_s", "jobs_completed"]]
    rolling = after["jobs_completed"].rolling(3).mean()
    back = after["t_s"][rolling >= 0.9 * before]
    return None if back.empty or math.isnan(before) else float(back.iloc[0] - 2 - span[1])


def _crashed_jobs_not_redelivered(view: RunView) -> float | None:
    """Jobs that crashed workers held, less the redeliveries counted: 0 when every one came back."""
    crashed, redelivered = view.value("crashed_jobs"), view.value("redeliveries")
    return None if crashed is None or redelivered is None else max(0.0, crashed - redelivered)


def _generic_plan_share(view: RunView) -> float | None:
    """The share of the workers' claim executions that ran a generic plan (their own sessions'
    ``pg_prepared_statements`` counts, ``plans.workers``); None when the claim was not prepared."""
    generic, custom = view.value("plans.workers.generic_executions"), view.value("plans.workers.custom_executions")
    return None if generic is None or custom is None else _ratio(generic, generic + custom)


def _plan_scans_table(view: RunView) -> float | None:
    """1.0 when the workers' claim plan (EXPLAIN on a worker's own connection) reads the queue
    table with a sequential scan, else 0.0; None when no plan was captured."""
    scan = ((view.summary.get("plans") or {}).get("workers") or {}).get("scan")
    return None if not scan else float("Seq Scan" in scan)


def _cycle_ms(view: RunView) -> float | None:
    """A worker's time per job, ms, by Little's law: WORKERS / jobs/s."""
    thr, workers = view.value("throughput_jobs_per_s"), view.setting("workers")
    return None if not thr or not workers else 1000 * workers / thr


def _model_cycle_ms(view: RunView) -> float | None:
    """A job's cycle, ms, as the network model adds it up (docs/network.md, "What a round trip does to a
    queue"): the work as measured (``work_duration_us.mean``) + round trips per job × the probe's mean round trip
    + the server's execution per job (claims × the claim's + completions × the completion's, from
    ``latency_split``, over jobs completed). None when any part was not measured (no pg_stat_statements)."""
    work_us, per_job = view.value("work_duration_us.mean"), view.value("round_trips.per_job")
    rtt_us, jobs = view.value("round_trip.mean_us"), view.value("jobs_completed")
    claim_us, complete_us = view.value("latency_split.claim.server_us"), view.value("latency_split.complete.server_us")
    claims, completions = view.value("claims"), view.value("completions")
    parts = (work_us, per_job, rtt_us, jobs, claim_us, complete_us, claims, completions)
    if any(part is None for part in parts) or not jobs:
        return None
    server_us = (claims * claim_us + completions * complete_us) / jobs
    return (work_us + per_job * rtt_us + server_us) / 1000


#: ``derived.<name>`` keys: figures computed from one run's own values.
DERIVED: dict[str, Callable[[RunView], float | None]] = {
    "throughput_x_work_s": _throughput_x_work_s,
    # jobs/s over the ideal WORKERS / job duration: 1.0 when every worker is busy all the time
    "throughput_of_ideal": lambda v: _ratio(_throughput_x_work_s(v), v.setting("workers")),
    "errors_per_s": lambda v: _ratio(v.value("errors"), v.value("measured_s")),
    # mean sessions waiting on a lock, per second, over WORKERS − 1 (1.0: all but the holder wait)
    "lock_waiters_per_other_worker": lambda v: _ratio(_aggregate(v, "lock_waiters", "mean"),
                                                      (v.setting("workers") or 1) - 1),
    "redeliveries_per_crashed_claim": lambda v: _ratio(v.value("redeliveries"), v.value("crashed_claims")),
    "recovery_s": _recovery_s,
    "depth_growth_share_of_arrivals": _depth_growth_share_of_arrivals,
    # pickup p50 over half the polling interval (POLL_MS): about 1 when idle workers poll
    "pickup_p50_over_half_poll": lambda v: _ratio(v.value("pickup_latency_ms.p50"), (v.setting("poll_ms") or 0) / 2),
    "crashed_jobs_not_redelivered": _crashed_jobs_not_redelivered,
    "generic_plan_share": _generic_plan_share,
    "plan_scans_table": _plan_scans_table,
    "cycle_ms": _cycle_ms,
    "model_cycle_ms": _model_cycle_ms,
}


def _model_missing(view: RunView) -> str | None:
    split = view.summary.get("latency_split") or {}
    return next(((split.get(part) or {}).get("not_measured") for part in ("claim", "complete")
                 if (split.get(part) or {}).get("not_measured")), None)


#: Why a ``derived.<name>`` key has no value in a run, where the run's own files say.
DERIVED_WHY: dict[str, Callable[[RunView], str | None]] = {
    "model_cycle_ms": lambda v: (f"the server's execution was not measured ({why})" if (why := _model_missing(v))
                                 else None),
}


def _why_missing(view: RunView, key: str) -> str | None:
    """What the run's files say of why ``key`` has no value (:data:`DERIVED_WHY`), or None."""
    parts = key.split(".")
    return DERIVED_WHY[parts[1]](view) if parts[0] == "derived" and parts[1] in DERIVED_WHY else None


def check_key(key: str) -> None:
    """Raise ValueError when ``key`` is not a figure key this module can read."""
    parts = key.split(".")
    if not key or any(not p for p in parts):
        raise ValueError(f"{key!r} is not a figure key")
    if parts[0] == "intervals" and (len(parts) != 3 or parts[2] not in AGGREGATES):
        raise ValueError(f"{key!r}: allowed: intervals.<column>.<{'|'.join(AGGREGATES)}>")
    if parts[0] == "derived" and (len(parts) != 2 or parts[1] not in DERIVED):
        raise ValueError(f"{key!r}: allowed derived keys: {', '.join(sorted(DERIVED))}")


def run_value(view: RunView, key: str) -> float | None:
    """The figure ``key`` of one run, or None when the run has no such value."""
    parts = key.split(".")
    if parts[0] == "intervals":
        return _aggregate(view, parts[1], parts[2])
    if parts[0] == "derived":
        return DERIVED[parts[1]](view)
    return view.value(key)


def matching_cell(sweep: SweepResults, selector: Mapping[str, Any] | None) -> Cell | None:
    """The one cell whose matrix values match ``selector`` (None/empty: the sweep's only cell)."""
    want = {k: norm_param(v) for k, v in (selector or {}).items()}
    found = [c for c in sweep.cells if all(norm_param(c.params.get(k)) == v for k, v in want.items())]
    return found[0] if len(found) == 1 else None


def cell_runs(sweep: SweepResults, cell: Cell) -> list[RunView]:
    """The cell's finished runs, by repetition (runs whose files cannot be read are left out)."""
    views = []
    for run_dir in cell.done["run_dir"].tolist():
        try:
            views.append(RunView(sweep.path / run_dir))
        except (ResultsError, OSError):
            continue
    return views


def selector_text(selector: Mapping[str, Any] | None) -> str:
    """A cell selector in words: ``workers = 16, index = partial``; ``the only cell`` for none."""
    return ", ".join(f"{k} = {v}" for k, v in (selector or {}).items()) or "the only cell"


def probe_value(probe: Mapping[str, Any] | None, key: str) -> float | None:
    """A probe's fact ``key`` as a number; ``name[v]`` is 1.0 when the list ``name`` holds ``v``,
    else 0.0 (``locked_rows[1]``: row 1 was found locked)."""
    if probe is None:
        return None
    if key.endswith("]") and "[" in key:
        name, wanted = key[:-1].split("[", 1)
        found = probe.get(name)
        return None if not isinstance(found, list) else float(any(str(v) == wanted for v in found))
    return _number(probe.get(key))


def measure(spec: Mapping[str, Any], sweep: SweepResults | None = None,
            probe: Mapping[str, Any] | None = None) -> Figure:
    """Measure one figure stated by ``spec`` (a validated ``[[figures]]`` table) from ``sweep`` (the
    experiment's runs) or ``probe`` (its facts). Never raises on missing data: the values are then None and
    ``missing`` says why."""
    threshold = Threshold.parse(spec["holds_if"])
    name, key, how = spec["name"], spec["key"], spec["measure"]
    fig = Figure(name, threshold, [], decide_by=spec.get("decide_by", "repetitions"))
    if how == "probe":
        fig.values = [probe_value(probe, key)]
        fig.missing = "" if fig.values[0] is not None else f"the probe gave no {key}"
        return fig
    if sweep is None:
        fig.missing = "no runs"
        return fig
    cell = matching_cell(sweep, spec.get("of"))
    if cell is None:
        fig.missing = f"no single cell with {selector_text(spec.get('of'))}"
        return fig
    tops = [run_value(v, key) for v in cell_runs(sweep, cell)]
    if how == "value":
        fig.values = tops
    else:
        other = matching_cell(sweep, spec["over"]) if "over" in spec else cell
        if other is None:
            fig.missing = f"no single cell with {selector_text(spec.get('over'))}"
            return fig
        bottoms = [run_value(v, spec.get("over_key", key)) for v in cell_runs(sweep, other)]
        fig.values = [None if a is None or not b else a / b for a, b in zip(tops, bottoms)]
    if not fig.values:
        fig.missing = f"no finished run with {selector_text(spec.get('of'))}"
    elif any(v is None for v in fig.values):
        top = key.split(".")[0]
        views = cell_runs(sweep, cell)
        if top not in ("intervals", "derived") and views and top not in views[0].summary:
            fig.missing = f"{top!r} is not in summary.json"
        else:
            why = next((w for v in views for w in [_why_missing(v, key)] if w), None)
            fig.missing = f"{key} has no value (or its denominator is 0) in a run" + (f": {why}" if why else "")
    return fig
