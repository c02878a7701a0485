"""The capacity search: the highest arrival rate one design sustains, by a step ramp and a bisection of
open-loop runs (the keep-up rule: :func:`step_verdict`; docs/sweeps.md)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable

from bench.config.run_config import RunConfig
from bench.analysis.queue_verdict import SATURATION_AGE_S, SATURATION_COMPLETED_SHARE, SATURATION_SLOW_SLOPE
from bench.errors import Interrupted
from bench.results import slo
from bench.results.model import RunResult, problems, stamped, utc_now
from bench.usage import option, setting, switch

def completed(run_dir: Path) -> dict:
    """``run_dir``'s summary. Raises :class:`Interrupted` when that run did not complete (interrupted, or the
    database went away)."""
    summary = RunResult.load(run_dir).summary
    if not summary["complete"]:
        raise Interrupted(f"capacity search stopped: step {run_dir} did not complete")
    return summary


OFFERED_SHARE = 0.95
RESOLUTION = 0.10
MAX_STEPS = 14


def step_verdict(summary: dict) -> tuple[bool, str]:
    """(kept up?, why) for one step's ``summary.json``, by the thresholds of a run's "does the queue keep up?"
    verdict: the oldest eligible age flat (slope at most ``SATURATION_SLOW_SLOPE``, last sample at most
    ``SATURATION_AGE_S``), at least ``SATURATION_COMPLETED_SHARE`` of the arrivals completed and
    :data:`OFFERED_SHARE` of the rate offered, a trusted unsaturated run, its ``SLO`` passed."""
    rate = summary["offered_rate_jobs_per_s"] or 0.0
    measured_s = summary["measured_s"] or 0.0
    produced_s = summary["jobs_produced"] / measured_s if measured_s else 0.0
    completed_s = summary["throughput_jobs_per_s"] or 0.0
    slope = summary.get("oldest_age_slope_s_per_s")
    final_age = summary["oldest_eligible_age_s"]["final"]
    if produced_s < OFFERED_SHARE * rate:
        return False, (f"the producers offered only {produced_s:,.1f} of {rate:,.1f} jobs/s: "
                       "the load generator, not the queue, is the limit here")
    untrusted = problems(summary)
    if untrusted:
        return False, "untrustworthy run: " + "; ".join(untrusted)
    if summary.get("saturated"):
        return False, summary["saturation_verdict"]
    if slope is None or final_age is None:
        return False, "oldest eligible age was not sampled"
    if slope > SATURATION_SLOW_SLOPE or final_age > SATURATION_AGE_S:
        return False, f"oldest eligible age grows {slope:+.3f} s per s, {final_age:.2f} s in the last sample"
    if completed_s < SATURATION_COMPLETED_SHARE * produced_s:
        return False, f"completed {completed_s:,.1f} of {produced_s:,.1f} jobs/s arrived"
    verdict = summary.get("slo")
    if verdict and verdict["status"] != "pass":
        return False, "SLO " + verdict["status"] + ": " + "; ".join(
            slo.phrase(o) for o in verdict["objectives"] if o["status"] != "pass")
    return True, (f"keeps up: age slope {slope:+.3f} s per s, {completed_s:,.1f} jobs/s completed"
                  + (f"; SLO pass ({verdict['spec']})" if verdict else ""))


def describe_design(cfg: RunConfig) -> str:
    """A short name of the design: e.g. ``postgres, skip_locked, batch 1, index partial, layout same,
    1,000,000 history rows, 5 ms jobs, prepared claim with PLAN_CACHE=auto``."""
    if cfg.prepared == "n/a":
        sent = "claim sent as text"
    else:
        sent = (f"unprepared claim ({switch('prepared', False)})" if not cfg.prepared
                else f"prepared claim with {setting('plan_cache', cfg.plan_cache)}")
    return (f"{cfg.engine}, {cfg.policy}, batch {cfg.batch}, index {cfg.index}, layout {cfg.layout}, "
            f"{cfg.history:,} history rows, {cfg.work_ms:g} ms jobs, {sent}")


def ramp_and_bisect(passes: Callable[[float], bool], start: float, known_good: float | None = None,
                    max_steps: int = MAX_STEPS) -> tuple[float | None, float | None]:
    """(highest value that passed, lowest that failed above it) of ``passes``, assumed monotone: double from
    ``start`` until a value fails, then bisect until within :data:`RESOLUTION`; at most ``max_steps`` calls.
    Either may be None; ``known_good`` is a value already known to pass."""
    good, bad, calls, value = known_good, None, 0, start
    while calls < max_steps:
        calls += 1
        if not passes(value):
            bad = value
            break
        good, value = value, value * 2
    while good is not None and bad is not None and bad / good > 1 + RESOLUTION and calls < max_steps:
        calls += 1
        middle = (good + bad) / 2
        good, bad = (middle, bad) if passes(middle) else (good, middle)
    return good, bad


def search(base: RunConfig, run_step: Callable[[RunConfig], Path], start_rate: float,
           out_dir: Path, log: Callable[[str], None] = print) -> dict:
    """Search the sustainable arrival rate for ``base`` (``run_step(cfg)`` runs one step, ``base`` with
    ``rate`` set and no backlog, and returns its run directory); writes and returns ``capacity.json``'s dict:
    ``{"design", "steps", "sustainable_rate_jobs_per_s", "claim_p99_us_at_rate", "workers", "sentence"}``
    (rate None when even ``start_rate`` falls behind).

    Raises :class:`Interrupted` when a step is interrupted (KeyboardInterrupt outside a step's load);
    ``capacity.json`` then holds the steps so far with ``"complete": false``."""
    steps: list[dict] = []

    def measure(rate: float) -> bool:
        cfg = dataclasses.replace(base, rate=round(rate, 1), backlog=0)
        run_dir = run_step(cfg)
        summary = completed(run_dir)
        ok, why = step_verdict(summary)
        steps.append({"rate_jobs_per_s": cfg.rate, "run_dir": str(run_dir), "kept_up": ok, "why": why,
                      "oldest_age_slope_s_per_s": summary.get("oldest_age_slope_s_per_s"),
                      "saturated": summary.get("saturated"),
                      "throughput_jobs_per_s": summary["throughput_jobs_per_s"],
                      "claim_p99_us": summary["claim_latency_us"]["p99"],
                      "pickup_p99_ms": summary["pickup_latency_ms"]["p99"],
                      "workers_plan": ((summary.get("plans") or {}).get("workers") or {}).get("plan"),
                      "workers_plan_scan": ((summary.get("plans") or {}).get("workers") or {}).get("scan")})
        log(f"step {len(steps)}: {cfg.rate:,.1f} jobs/s offered -> {'KEEPS UP' if ok else 'FALLS BEHIND'} ({why})")
        return ok

    bad = None
    try:
        _, bad = ramp_and_bisect(measure, start_rate)
    except (Interrupted, KeyboardInterrupt):
        _write(base, steps, None, start_rate, out_dir, complete=False)  # keep the steps measured so far
        raise
    return _write(base, steps, bad, start_rate, out_dir, complete=True)


def _write(base: RunConfig, steps: list[dict], bad: float | None, start_rate: float, out_dir: Path,
           complete: bool) -> dict:
    """Build the capacity dict from the steps, write ``capacity.json``, return it."""
    best = max((s for s in steps if s["kept_up"]), key=lambda s: s["rate_jobs_per_s"], default=None)
    if not steps:
        sentence = f"With design {describe_design(base)}, no step was measured."
    elif best is None:
        sentence = (f"With design {describe_design(base)}, the first step ({start_rate:,.0f} jobs/s, "
                    f"{base.workers} workers) did not keep up ({steps[0]['why']}); lower {option('rate_start')}.")
    else:
        plan = best.get("workers_plan")
        ran = ("their claim unprepared" if plan == "unprepared" else
               f"the {plan} plan of their prepared claim" if plan else "a claim plan that was not read")
        sentence = (f"With design {describe_design(base)}, this database sustains about "
                    f"{best['rate_jobs_per_s']:,.0f} jobs/s at p99 claim "
                    f"{(best['claim_p99_us'] or 0) / 1000:,.2f} ms using {base.workers} workers, which ran {ran}"
                    + (f"; the next step, {bad:,.0f} jobs/s, fell behind." if bad else
                       "; the search stopped before any step fell behind."))
    result = {
        "design": {k: getattr(base, k) for k in ("engine", "isolation", "policy", "workers", "batch", "index", "layout", "history", "work_ms",
                                                 "plan_cache", "prepared")},
        "criteria": {"flat_slope_s_per_s": SATURATION_SLOW_SLOPE, "flat_age_s": SATURATION_AGE_S,
                     "completed_share": SATURATION_COMPLETED_SHARE, "offered_share": OFFERED_SHARE,
                     "resolution": RESOLUTION},
        "steps": steps,
        "sustainable_rate_jobs_per_s": best["rate_jobs_per_s"] if best else None,
        "claim_p99_us_at_rate": best["claim_p99_us"] if best else None,
        "first_rate_behind_jobs_per_s": bad,
        "workers": base.workers,
        "sentence": sentence if complete else "Search interrupted. " + sentence,
        "complete": complete,
        "ended_at": utc_now(),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "capacity.json").write_text(json.dumps(stamped(result), indent=2) + "\n")
    return result
