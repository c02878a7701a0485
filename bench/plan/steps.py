"""One step of a plan: a design at a worker count and an arrival rate, run ``REPETITIONS`` times, passing only
when every repetition passes :func:`bench.sweep.capacity_search.step_verdict`; a resumed plan's runs are read
back."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bench.config.run_config import RunConfig
from bench.results import slo
from bench.results.dead_rows import dead_rows_growth, growth_text, intervals_rows, table_autovacuum_ineffective
from bench.results.model import ResultsError, harness_limited, machine_busy, problems, read_result
from bench.sweep.capacity_search import completed, step_verdict

#: Config fields a step sets itself, left out of a design's identity.
STEP_FIELDS = ("workers", "rate", "duration_s", "warmup_s", "results", "dsn", "notes", "backlog")


def design_id(cfg: RunConfig) -> str:
    """A short stable identity of a design (every parameter but those a step sets)."""
    public = {k: v for k, v in cfg.public().items() if k not in STEP_FIELDS}
    return hashlib.sha256(json.dumps(public, sort_keys=True, default=str).encode()).hexdigest()[:12]


#: The cost figures a step keeps of each run (``summary.json`` ``cost_per_job``), read by the plan's estimate.
COST_KEYS = ("server_cpu_us", "statements_exec_us", "wal_bytes", "log")


def _run_json(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``run.json``, or None when it is missing or unreadable."""
    try:
        return read_result(Path(run_dir) / "run.json")
    except (ResultsError, OSError, ValueError):
        return None


def connections_of(run: dict[str, Any] | None) -> dict[str, Any] | None:
    """``{"room", "needed", "embedded"}`` of a run's ``run.json`` ``run``: its ``connections`` (the server's
    headroom as the run started: ``max_connections``, ``reserved``, ``in_use``, ``available``),
    ``connections_needed`` and whether the server was the tool's embedded one; None without ``run.json`` or in
    one older than ``connections_needed``."""
    if not run or not run.get("connections") or not run.get("connections_needed"):
        return None
    return {"room": run["connections"], "needed": run["connections_needed"], "embedded": bool(run.get("embedded_database"))}


def vacuum_of(run_dir: Path, run: dict[str, Any] | None, passed: bool) -> tuple[str | None, dict[str, Any] | None]:
    """(the server setting that kept autovacuum from the queue table while the run's ``AUTOVACUUM`` was on, or
    None; for a failing run, :func:`bench.results.dead_rows.dead_rows_growth` of its ``run.json`` ``run`` and
    ``intervals.csv``, or None) of the run in ``run_dir``; (None, None) without ``run.json``."""
    if run is None:
        return None, None
    try:
        blocked = table_autovacuum_ineffective(run.get("config") or {}, run.get("server_settings"))
        return blocked, None if passed else dead_rows_growth(intervals_rows(run_dir), run)
    except (ResultsError, OSError, ValueError):
        return None, None


def run_record(run_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """What a plan keeps of one run: its directory, verdict and the figures the plan page shows; a failing run
    whose queue table's dead rows grew with no vacuum pass (:func:`vacuum_of`) says so in ``why``, with the
    figures in ``dead_rows``; ``autovacuum_never_runs``: the server setting that kept autovacuum off, or None."""
    ok, why = step_verdict(summary)
    run = _run_json(run_dir)  # read once: the vacuum's figures and the connections
    blocked, dead_rows = vacuum_of(run_dir, run, ok)
    if dead_rows:
        why = f"{why}; {growth_text(dead_rows)}"
    return {"run_dir": str(run_dir), "passed": ok, "why": why, "dead_rows": dead_rows,
            "autovacuum_never_runs": blocked, "connections": connections_of(run), "slo": summary.get("slo"),
            "slo_ratio": slo.worst_ratio(summary.get("slo")), "trusted": not problems(summary),
            "harness_limited": harness_limited(summary), "machine_busy": machine_busy(summary),
            # the server's CPU is read from /proc only when the server runs on this host
            "server_on_this_host": (summary.get("cost_per_job") or {}).get("server_cpu_us") is not None,
            "round_trip_p50_us": (summary.get("round_trip") or {}).get("p50_us"),
            "net_delay_ms": (summary.get("relay") or {}).get("delay_ms_each_way"),
            "throughput_jobs_per_s": summary["throughput_jobs_per_s"], "measured_s": summary.get("measured_s"),
            "oldest_age_max_s": (summary.get("oldest_eligible_age_s") or {}).get("max"),
            "oldest_age_slope_s_per_s": summary.get("oldest_age_slope_s_per_s"),
            "cost_per_job": {k: (summary.get("cost_per_job") or {}).get(k) for k in COST_KEYS}}


@dataclass
class Step:
    """A design at ``workers`` and ``rate`` jobs/s: ``runs`` holds one :func:`run_record` per repetition."""

    workers: int
    rate: float
    runs: list[dict[str, Any]] = field(default_factory=list)
    retried: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Every repetition kept up and met the SLO in a trusted run."""
        return bool(self.runs) and all(r["passed"] for r in self.runs)

    @property
    def slo_ratio(self) -> float | None:
        """The worst repetition's :func:`bench.results.slo.worst_ratio` (None when one is unmeasured)."""
        ratios = [r["slo_ratio"] for r in self.runs]
        return None if not ratios or None in ratios else max(ratios)

    @property
    def throughput_jobs_per_s(self) -> float:
        """The lowest repetition's jobs completed per second."""
        return min((r["throughput_jobs_per_s"] or 0.0 for r in self.runs), default=0.0)

    @property
    def harness_limited(self) -> str | None:
        """Why the load generator may have set the pace of a repetition, or None."""
        return next((r["harness_limited"] for r in self.runs if r["harness_limited"]), None)

    @property
    def unmeasured(self) -> str | None:
        """Why this step's FAIL is no verdict, or None: the plan's one rule for an untrusted step. A step failed
        only by the harness (every failing repetition harness-limited: the load generator, or a machine busy
        outside the run, set the pace) measured the harness, not the queue: it is measured once more, and when
        it fails so again every search stops there (docs/capacity-plan.md)."""
        failed = [r for r in self.runs if not r["passed"]]
        if not failed or not all(r["harness_limited"] for r in failed):
            return None
        return failed[0]["harness_limited"]

    def record(self) -> dict[str, Any]:
        """The step as ``plan.json`` holds it."""
        return {"workers": self.workers, "rate_jobs_per_s": self.rate, "passed": self.passed,
                "slo_ratio": self.slo_ratio, "throughput_jobs_per_s": self.throughput_jobs_per_s,
                "harness_limited": self.harness_limited or next((r["harness_limited"] for r in self.retried), None),
                "trusted": self.unmeasured is None, "untrusted_why": self.unmeasured,
                "runs": self.runs, "retried": self.retried}


class Stepper:
    """Runs a plan's steps: ``run(cfg)`` makes one run and returns its directory; ``done`` maps a run's
    key to a directory already made (a resumed plan); ``on_run(key, run_dir)`` is told of each new run."""

    def __init__(self, run: Callable[[RunConfig], Path], repetitions: int, done: dict[str, str],
                 on_run: Callable[[str, str], None], log: Callable[[str], None]):
        self.run, self.repetitions, self.done, self.on_run, self.log = run, repetitions, done, on_run, log

    def measure(self, cfg: RunConfig, phase: str, repetitions: int | None = None) -> Step:
        """``cfg`` run ``repetitions`` (default the plan's) times, as the step of ``phase``; measured once
        more when every failing run was harness-limited (the first runs kept in ``retried``). Raises
        :class:`bench.errors.Interrupted` when a run did not complete (KeyboardInterrupt outside a run's load)."""
        step = Step(cfg.workers, cfg.rate)
        for attempt in range(2):
            step.runs = [self._one(cfg, f"{phase}|w{cfg.workers}|r{cfg.rate:g}|d{cfg.duration_s:g}|{rep}"
                                        + ("" if attempt == 0 else "|again"))
                         for rep in range(repetitions or self.repetitions)]
            if attempt == 1 or step.unmeasured is None:
                break
            step.retried = step.runs
        self._log(cfg, phase, step)
        return step

    def _one(self, cfg: RunConfig, name: str) -> dict[str, Any]:
        """One run of the step (read back when a resumed plan already made it)."""
        key = f"{design_id(cfg)}|{name}"
        run_dir = self.done.get(key)
        if run_dir is None or not (Path(run_dir) / "summary.json").is_file():
            run_dir = str(self.run(cfg))
        summary = completed(Path(run_dir))
        if key not in self.done:
            self.done[key] = run_dir
            self.on_run(key, run_dir)
        return run_record(Path(run_dir), summary)

    def _log(self, cfg: RunConfig, phase: str, step: Step) -> None:
        again = " (measured again: the first runs were harness-limited)" if step.retried else ""
        if cfg.rate <= 0:  # the closed-loop probe has no keep-up verdict, only its throughput
            self.log(f"  {phase}: {_workers(cfg.workers)}, closed loop -> {step.throughput_jobs_per_s:,.1f} jobs/s")
            return
        # the run plan.html shows for the step: the first that failed, else the slowest
        shown = next((r for r in step.runs if not r["passed"]), None) or \
            min(step.runs, key=lambda r: r["throughput_jobs_per_s"] or 0.0)
        which = "" if len(step.runs) == 1 else \
            f"{'a failing' if not shown['passed'] else 'the slowest'} of {len(step.runs)} runs: "
        self.log(f"  {phase}: {_workers(cfg.workers)} at {cfg.rate:,.1f} jobs/s -> {_verdict(step)} "
                 f"({which}{shown['why']}){again}")


def _verdict(step: Step) -> str:
    """'PASS', 'FAIL', or 'UNTRUSTED' (a FAIL that is no verdict: :attr:`Step.unmeasured`)."""
    return "PASS" if step.passed else "FAIL" if step.unmeasured is None else "UNTRUSTED"


def _workers(n: int) -> str:
    return f"{n} worker{'' if n == 1 else 's'}"
