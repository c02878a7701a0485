"""The capacity plan: per candidate design a Little's-law probe, the workers search and the headroom search,
then the answer confirmed by a longer run; ``plan.json`` written after every run (resumable)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Callable

from bench.analysis import plan_answer
from bench.config.run_config import RunConfig
from bench.errors import ConfigError
from bench.plan.options import PlanOptions
from bench.plan.search import (WORKERS_RESOLUTION, Headroom, WorkersAnswer, little_estimate, search_headroom,
                               search_workers)
from bench.plan.steps import Stepper
from bench.results.model import utc_now, write_result
from bench.sweep.capacity_search import describe_design

#: Confirmation runs at most: the answer, then one resolution step more each time one fails.
CONFIRM_TRIES = 3
#: The probe: closed loop, this many workers (or the design's least), this window and warm-up (s).
PROBE_WORKERS, PROBE_S, PROBE_WARMUP_S = 4, 5.0, 1.0


@dataclasses.dataclass
class Design:
    """One candidate: ``label`` names what differs from the others; ``config(workers, rate)`` builds a
    validated step configuration (ConfigError when the design refuses that worker count)."""

    label: str
    overrides: dict[str, Any]
    config: Callable[[int, float], RunConfig]


def least_workers(design: Design, rate: float, most: int) -> int:
    """The fewest workers the design's own rules allow (a library's worker needs 2 x BATCH per process)."""
    for n in range(1, most + 1):
        try:
            design.config(n, rate)
            return n
        except ConfigError as err:
            if err.param not in ("WORKERS", "PROCESSES") or n == most:
                raise
    return most


class Planner:
    """Runs a plan and keeps ``plan.json`` (``state``) current in ``out_dir``: ``designs`` planned for
    ``target_rate`` (jobs/s) with ``options``, up to ``most_workers``; ``run(cfg)`` measures one step and
    returns its run directory; ``inputs`` recorded as is; ``done`` maps a resumed plan's run keys to their
    directories."""

    def __init__(self, designs: list[Design], target_rate: float, options: PlanOptions, *, most_workers: int,
                 run: Callable[[RunConfig], Path], out_dir: Path, inputs: dict[str, Any],
                 done: dict[str, str] | None = None, log: Callable[[str], None] = print):
        self.designs, self.rate, self.options, self.most = designs, target_rate, options, most_workers
        self.out_dir, self.log = out_dir, log
        self.state: dict[str, Any] = {"inputs": inputs, "runs": dict(done or {}), "designs": [], "confirmation": None,
                                      "confirmations": [], "answer": None, "complete": False}
        self.stepper = Stepper(run, options.repetitions, self.state["runs"], lambda *_: self.write(), log)

    def write(self) -> None:
        """Write ``plan.json`` as it stands."""
        self.state["updated_at"] = utc_now()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        write_result(self.out_dir / "plan.json", self.state)

    def run(self) -> dict[str, Any]:
        """Every design, the answer, the confirmation; returns the complete ``plan.json`` dict. Raises
        Interrupted / KeyboardInterrupt when interrupted, with ``plan.json`` written first."""
        try:
            for design in self.designs:
                self.state["designs"].append(record := {"label": design.label, "overrides": design.overrides})
                self.plan_design(design, record)
            self.state["answer"] = plan_answer.choose(self.state["designs"], self.rate)
            self.confirm()
            self.state["answer"] = plan_answer.choose(self.state["designs"], self.rate, self.state["confirmations"])
            self.state["complete"] = True
        finally:
            self.write()
        return self.state

    def plan_design(self, design: Design, record: dict[str, Any]) -> None:
        """The probe, the workers search and the headroom search of one design, into ``record``."""
        least = least_workers(design, self.rate, self.most)
        cfg = design.config(least, self.rate)
        record.update(design=describe_design(cfg), short=plan_answer.short_design(cfg.public()), policy=cfg.policy,
                      batch=cfg.batch)
        self.log(f"design {len(self.state['designs'])} of {len(self.designs)} ({design.label}): {record['design']}")
        probe_workers = min(max(PROBE_WORKERS, least), self.most)
        probe_cfg = dataclasses.replace(design.config(probe_workers, self.rate), rate=0.0, slo="", backlog=0,
                                        duration_s=PROBE_S, warmup_s=PROBE_WARMUP_S)
        probe = self.stepper.measure(probe_cfg, "probe", repetitions=1).runs[0]
        done_per_s = probe["throughput_jobs_per_s"] or 0.0
        if done_per_s > 0:
            estimate, cycle_ms = little_estimate(self.rate, probe_workers, done_per_s), 1000 * probe_workers / done_per_s
        else:  # jobs longer than the probe: no cycle time to estimate from, so the search starts at the least
            estimate, cycle_ms = float(least), None
            self.log(f"  the probe completed no job in {PROBE_S:g} s: the workers search starts at {least}")
        record["probe"] = {**probe, "workers": probe_workers, "cycle_ms": cycle_ms, "little_estimate_workers": estimate}
        workers = search_workers(lambda n: self.stepper.measure(design.config(n, self.rate), "workers"),
                                 math.ceil(estimate), least, self.most)
        record["workers"] = _workers_record(workers)
        if workers.needed is None:
            return
        headroom = search_headroom(lambda r: self.stepper.measure(design.config(workers.needed, r), "headroom"),
                                   self.rate)
        record["headroom"] = _headroom_record(headroom)

    def confirm(self) -> None:
        """The confirmation run at the answer's design, workers and rate (``CONFIRM_S``); on a failure, once
        more with one resolution step more workers, :data:`CONFIRM_TRIES` runs at most; a failure that could
        not be measured (:attr:`bench.plan.steps.Step.unmeasured`) stops it there."""
        answer = self.state["answer"]
        if answer.get("design_index") is None or not self.options.confirm_s:
            return
        design, workers, tries = self.designs[answer["design_index"]], answer["workers"], []
        for _ in range(CONFIRM_TRIES):
            cfg = dataclasses.replace(design.config(workers, self.rate), duration_s=self.options.confirm_s)
            step = self.stepper.measure(cfg, "confirm", repetitions=1)
            tries.append({**step.record(), "duration_s": self.options.confirm_s})
            if step.passed or step.unmeasured or workers >= self.most:  # untrusted: no verdict to step up on
                break
            workers = min(self.most, workers + max(1, math.floor(WORKERS_RESOLUTION * workers)))
        self.state["confirmation"], self.state["confirmations"] = tries[-1], tries


def _workers_record(answer: WorkersAnswer) -> dict[str, Any]:
    return {"needed": answer.needed, "failed_below": answer.failed_below, "stopped": answer.stopped,
            "unmeasured": answer.unmeasured, "steps": [answer.steps[n].record() for n in sorted(answer.steps)]}


def _headroom_record(headroom: Headroom) -> dict[str, Any]:
    return {"rate_jobs_per_s": headroom.rate, "factor": headroom.factor, "at_least": headroom.at_least,
            "first_failed_jobs_per_s": headroom.first_failed, "why": headroom.why,
            "steps": [headroom.steps[r].record() for r in sorted(headroom.steps)]}

