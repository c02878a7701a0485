"""What every engine's ``make calibrate`` shares: the native client (A) then queue-bench (B) in alternating
pairs, their retries, the printed lines and calibration.json."""

from __future__ import annotations

import csv
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import gevent
import psutil

from bench import runner
from bench.engines.postgres.pgbench import per_job_us
from bench.results.model import RunResult, problems as run_problems, stamped

PAIRS_DEFAULT = 3
#: A failed pair is run again up to this many times before it is left out.
RETRIES_PER_PAIR = 2
GOAL_MEDIAN_RATIO = 0.95
GOAL_CPU_FACTOR = 1.5
#: The line every calibration prints last (other issues extend calibration and keep it).
SUMMARY_FORMAT = "median ratio: {median} (min {min}, max {max}, {kept} pairs, {left_out} left out)"


@dataclass(frozen=True)
class Native:
    """The native load client of a calibration: how its side of a pair is keyed and printed."""

    #: its side's key in a pair and in ``cpu_us_per_job`` (``pgbench``)
    key: str
    #: its name as printed
    name: str
    #: the key of its throughput in its side's figures, and the unit printed after it
    rate_key: str
    rate_unit: str
    #: the key of the jobs its CPU per job is over
    jobs_key: str
    #: where its CPU per job and the harness's are measured (``{measured_s}`` is filled in)
    cpu_window: str


def harness_figures(run_dir: Path) -> dict:
    """queue-bench's side of a pair from its result files: ``{"jobs_per_s", "jobs_completed", "measured_s",
    "cpu_us_per_job" (µs), "harness_cpu_mean_pct", "harness_cpu_max_pct", "suspect", "suspect_reasons",
    "cpu_s", "complete"}``."""
    summary = RunResult.load(run_dir).summary
    with open(run_dir / "intervals.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    jobs = summary["jobs_completed"]

    def seconds(column: str) -> float | None:  # CPU seconds: the column's mean % × the measured seconds
        values = [float(r[column]) for r in rows if r.get(column) not in (None, "")]
        return sum(values) / len(values) / 100 * summary["measured_s"] if values else None

    cpu_s, user_s, system_s = seconds("harness_cpu_pct"), seconds("harness_user_pct"), seconds("harness_system_pct")
    mean_pct = 100 * cpu_s / summary["measured_s"] if cpu_s is not None and summary["measured_s"] else None
    return {"jobs_per_s": summary["throughput_jobs_per_s"], "jobs_completed": jobs,
            "measured_s": summary["measured_s"], "measured_start": summary["measured_start"],
            "measured_end": summary["measured_end"],
            "cpu_s": cpu_s, "cpu_us_per_job": per_job_us(cpu_s, jobs),
            "user_s": user_s, "system_s": system_s,
            "user_us_per_job": per_job_us(user_s, jobs), "system_us_per_job": per_job_us(system_s, jobs),
            "harness_cpu_mean_pct": round(mean_pct, 2) if mean_pct is not None else None,
            "harness_cpu_max_pct": summary["harness_cpu_max_pct"],
            "suspect": summary["suspect"], "suspect_reasons": summary["suspect_reasons"],
            "complete": summary["complete"], "problems": run_problems(summary)}


def summary_line(ratios: list[float], left_out: int) -> str:
    """:data:`SUMMARY_FORMAT` filled from the kept pairs' ``ratios`` (``n/a`` when none was kept)."""
    if not ratios:
        return SUMMARY_FORMAT.format(median="n/a", min="n/a", max="n/a", kept=0, left_out=left_out)
    return SUMMARY_FORMAT.format(median=f"{statistics.median(ratios):.2f}", min=f"{min(ratios):.2f}",
                                 max=f"{max(ratios):.2f}", kept=len(ratios), left_out=left_out)


def monitor_during(make_monitor: Callable[[], Any], spawn: Callable[..., list],
                   stats_taken: list) -> Callable[[Callable[[], float], int], Callable[[], None]]:
    """``during`` for a native client's run: the runner's monitor (``make_monitor()``, started with ``spawn``) on
    its own connections; appends ``(unix time, lock_waiters)`` per sample to ``stats_taken``."""
    def start(now_s: Callable[[], float], n_seconds: int) -> Callable[[], None]:
        monitor = make_monitor()
        started = time.time() - now_s()

        def note(k: int, values: dict) -> None:
            if "lock_waiters" in values:
                stats_taken.append((started + k, values["lock_waiters"]))

        greenlets = spawn(monitor, now_s, n_seconds, note)

        def stop() -> None:
            gevent.killall(greenlets)
            monitor.close()
        return stop
    return start


def with_swarm_side(entry: dict, native_rate: float | None, cfg, dsn: str, cal_dir: Path, log) -> dict:
    """``entry`` with queue-bench's side run now (``cfg`` on ``dsn``, its directory relative to ``cal_dir``), the
    ratio (its jobs/s over ``native_rate``) and both sides' problems."""
    run_dir = runner.run(cfg, dsn, log=lambda m: log("    " + m) if m.startswith("SUSPECT") else None)
    qb = harness_figures(run_dir)
    qb["run_dir"] = str(run_dir.resolve().relative_to(cal_dir.resolve()))  # calibration.json's paths: relative to it
    problems = entry["problems"] + [f"queue-bench: {p}" for p in qb["problems"]]  # the results model's rule
    ratio = qb["jobs_per_s"] / native_rate if native_rate and qb["jobs_per_s"] is not None else None
    if ratio is None:
        problems.append("no ratio: one side completed no job")
    return {**entry, "queue_bench": qb, "ratio": ratio, "problems": problems}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def swarm_text(qb: dict, ratio: float | None, native_name: str, native_cpu_us: float | None) -> str:
    """One try's queue-bench side as printed (``-`` for a missing figure; ``qb`` {} when it did not run)."""
    return (f"queue-bench {_fmt(qb.get('jobs_per_s'), ',.1f')} jobs/s, ratio {_fmt(ratio, '.2f')}; "
            f"CPU per job {native_name} {_fmt(native_cpu_us, '.1f')} µs, "
            f"harness {_fmt(qb.get('cpu_us_per_job'), '.1f')} µs")


def not_kept(problems: list[str]) -> str:
    """``; not kept: <problems>`` after a try's line, or nothing when it has none."""
    return f"; not kept: {'; '.join(problems)}" if problems else ""


def stop_if_interrupted(qb: dict) -> None:
    """Raise KeyboardInterrupt when the queue-bench run was interrupted (``complete`` false)."""
    if qb.get("complete") is False:
        raise KeyboardInterrupt


def run_pairs(figures: dict, pairs: int, run_pair: Callable[[str], dict], native: Native, log) -> None:
    """Run ``pairs`` pairs, each up to 1 + :data:`RETRIES_PER_PAIR` times until a try has no problem, into
    ``figures["pairs"]``. ``run_pair(label)`` returns one try's entry (``native.key``, ``queue_bench``,
    ``ratio``, ``problems``). Raises KeyboardInterrupt when a queue-bench run was interrupted."""
    for i in range(1, pairs + 1):
        attempts = []
        for attempt in range(1 + RETRIES_PER_PAIR):
            result = run_pair(f"pair{i}-try{attempt + 1}")
            attempts.append(result)
            nat, qb = result[native.key], result["queue_bench"] or {}
            log(f"pair {i}{f' (try {attempt + 1})' if attempt else ''}: {native.name} "
                f"{nat[native.rate_key]:,.1f} {native.rate_unit}, "
                + swarm_text(qb, result["ratio"], native.name, nat["cpu_us_per_job"]) + not_kept(result["problems"]))
            stop_if_interrupted(qb)
            if not result["problems"]:
                break
        kept = not attempts[-1]["problems"]
        figures["pairs"].append({"pair": i, "kept": kept, "ratio": attempts[-1]["ratio"] if kept else None,
                                 "attempts": attempts})
        if not kept:
            log(f"pair {i}: left out after {len(attempts)} tries")


def cpu_per_job(kept: list[dict], native: Native) -> dict:
    """CPU µs per job of each side over the ``kept`` pairs' tries (total, user, system): ``{native.key,
    "harness", "harness_over_<native.key>", "<native.key>_user", "<native.key>_system", "harness_user",
    "harness_system"}``; None when no try was kept or a side lacks jobs or a CPU reading."""
    cpu = {}
    for side, jobs_key in ((native.key, native.jobs_key), ("queue_bench", "jobs_completed")):
        jobs = sum(r[side][jobs_key] for r in kept)
        for part in ("cpu", "user", "system"):
            seconds = [r[side].get(f"{part}_s") for r in kept]
            cpu[side, part] = 1e6 * sum(seconds) / jobs if kept and jobs and None not in seconds else None
    return {native.key: cpu[native.key, "cpu"], "harness": cpu["queue_bench", "cpu"],
            f"harness_over_{native.key}": (cpu["queue_bench", "cpu"] / cpu[native.key, "cpu"])
            if cpu[native.key, "cpu"] and cpu["queue_bench", "cpu"] is not None else None,
            f"{native.key}_user": cpu[native.key, "user"], f"{native.key}_system": cpu[native.key, "system"],
            "harness_user": cpu["queue_bench", "user"], "harness_system": cpu["queue_bench", "system"]}


def ratio_figures(ratios: list[float], left_out: int) -> dict:
    """``median_ratio``, ``min_ratio``, ``max_ratio`` (None when ``ratios`` is empty), ``pairs_kept`` and
    ``pairs_left_out``."""
    return {"median_ratio": statistics.median(ratios) if ratios else None,
            "min_ratio": min(ratios) if ratios else None, "max_ratio": max(ratios) if ratios else None,
            "pairs_kept": len(ratios), "pairs_left_out": left_out}


def finish(figures: dict, cal_dir: Path, log, native: Native) -> None:
    """Summary figures over the kept pairs, the summary line, and calibration.json."""
    kept = [p["attempts"][-1] for p in figures["pairs"] if p["kept"]]
    ratios = [r["ratio"] for r in kept]
    left_out = sum(1 for p in figures["pairs"] if not p["kept"])
    line = summary_line(ratios, left_out)
    figures.update({
        **ratio_figures(ratios, left_out),
        "cpu_us_per_job": cpu_per_job(kept, native),
        "cores": psutil.cpu_count(),
        "summary_line": line,
    })
    cal_dir.mkdir(parents=True, exist_ok=True)
    (cal_dir / "calibration.json").write_text(json.dumps(stamped(figures), indent=2) + "\n")
    c = figures["cpu_us_per_job"]
    k, name = native.key, native.name
    log(f"CPU per job {native.cpu_window.format(measured_s=figures['measured_s'])}: {name} {_fmt(c[k], '.1f')} µs, "
        f"harness {_fmt(c['harness'], '.1f')} µs ({_fmt(c[f'harness_over_{k}'], '.2f')} × {name}; "
        f"goal <= {GOAL_CPU_FACTOR:g} ×); {figures['cores']} cores shared with the server")
    log(f"of which user / system time: {name} {_fmt(c[f'{k}_user'], '.1f')} / {_fmt(c[f'{k}_system'], '.1f')} µs, "
        f"harness {_fmt(c['harness_user'], '.1f')} / {_fmt(c['harness_system'], '.1f')} µs")
    log(f"calibration: {(cal_dir / 'calibration.json').resolve()}")
    log(line)
