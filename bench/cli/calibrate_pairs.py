"""What every engine's ``make calibrate`` shares: the native client (A) then queue-bench (B) in alternating
pairs, their retries, the printed lines and calibration.json, run for any engine's :class:`Native`."""

from __future__ import annotations

import datetime as dt
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import gevent
import psutil

from bench import runner
from bench.config.parsers import parse_int
from bench.config.run_config import build_config
from bench.engines import get_engine
from bench.engines.common import with_connection
from bench.engines.postgres.pgbench import per_job_us
from bench.errors import ConfigError
from bench.results.model import RunResult, problems as run_problems, stamped, utc_stamp
from bench.usage import named, setting

#: A failed pair is run again up to this many times before it is left out.
RETRIES_PER_PAIR = 2
GOAL_MEDIAN_RATIO = 0.95
GOAL_CPU_FACTOR = 1.5
#: The line every calibration prints last (other issues extend calibration and keep it).
SUMMARY_FORMAT = "median ratio: {median} (min {min}, max {max}, {kept} pairs, {left_out} left out)"


class Native:
    """An engine's native load client (pgbench, mariadb-slap), one subclass each: ``key``, ``name``, ``rate_key``,
    ``rate_unit``, ``jobs_key``, ``cpu_window``, ``timing``, ``parameters``, ``head``, ``grid`` (or None);
    ``find()`` (ConfigError when none), ``version(binary)``, ``embedded(max_connections=, log=)`` yielding a DSN,
    ``ready(binary, dsn, cfg, figures, cal_dir, log)`` returning ``side(out_dir)``, its side of a pair."""

    key = name = rate_key = rate_unit = jobs_key = cpu_window = timing = ""
    head: dict = {}
    grid: Callable[..., int] | None = None

    def extra(self, cfg) -> dict:
        """calibration.json's keys after ``warmup_s``, filled in by ``ready`` (none unless the client has some)."""
        return {}


def calibration_dir(results: str) -> Path:
    """``<results>/calibration-<UTC stamp>`` (not created)."""
    return Path(results) / f"calibration-{utc_stamp()}"


def run_parameters(native: Native, cal_dir: Path, **given) -> dict:
    """The queue-bench side's run parameters: the native client's SQL (``skip_locked``, short transactions, no
    work, no history, ``native.parameters``), then ``given``; its runs under ``cal_dir/runs``."""
    return {"policy": "skip_locked", "txn": "short", "work_ms": 0, "history": 0, **native.parameters, **given,
            "results": str(cal_dir / "runs")}


def plan_figures(cfg, pairs: int, key: str, **extra) -> dict:
    """calibration.json's window (``measured_s``, ``warmup_s``), ``extra``, then the pairs asked for, their retries
    and the goal (``harness_cpu_per_job_max_x_<key>``)."""
    return {"measured_s": max(1, int(round(cfg.duration_s))), "warmup_s": int(round(cfg.warmup_s)), **extra,
            "pairs_requested": pairs, "retries_per_pair": RETRIES_PER_PAIR,
            "goal": {"median_ratio_min": GOAL_MEDIAN_RATIO, f"harness_cpu_per_job_max_x_{key}": GOAL_CPU_FACTOR}}


def on_server(native: Native, dsn: str | None, workers: int, calibrate: Callable[[str], Any]) -> Any:
    """``calibrate(dsn)``; without ``dsn`` on a throwaway server with 2 × ``workers`` + 20 ``max_connections``."""
    if dsn:
        return calibrate(dsn)
    with native.embedded(max_connections=2 * workers + 20, log=lambda _m: None) as embedded_dsn:
        return calibrate(embedded_dsn)


def claim_first(dsn: str, cfg, connections: int) -> dict:
    """Refuse before anything is created or dropped (ConfigError): ``cfg.schema`` not the tool's, in use by
    another run, or fewer than ``connections`` free; returns the server's capacity (:meth:`Engine.claim_schema`)."""
    engine = get_engine(cfg.engine)
    return with_connection(lambda: engine.connect(dsn, "queue-bench calibrate"),
                           lambda conn: engine.claim_schema(conn, cfg.schema, connections))


def native_side(dsn: str, cfg, backlog: int, run: Callable[[Callable], dict], *, name: str,
                window: Callable[[dict], tuple[str, float, int]],
                count: Callable[[Any, dict], None] | None = None) -> dict:
    """``run(during)`` on a fresh table of ``backlog`` rows, the monitor beside it, then ``count(conn, result)``;
    ``run``'s figures with ``monitor_samples`` (over ``window(figures)``), a problem when samples are missing."""
    engine, stats = get_engine(cfg.engine), []

    def during(now_s: Callable[[], float], n_seconds: int) -> Callable[[], None]:
        monitor, started = engine.monitor(dsn, cfg), time.time() - now_s()

        def note(k: int, values: dict) -> None:
            if "lock_waiters" in values:
                stats.append((started + k, values["lock_waiters"]))
        greenlets = engine.spawn_samplers(monitor, now_s, n_seconds, note)
        return lambda: (gevent.killall(greenlets), monitor.close())

    conn = engine.connect(dsn, "queue-bench calibrate")
    try:
        engine.claim_schema(conn, cfg.schema, cfg.workers + 2)  # its clients + the monitor's two connections
        engine.prepare(conn, cfg, backlog, log=lambda _m: None, state_schema=None)
        result = run(during)
        if count:
            count(conn, result)
    finally:
        conn.close()
    start, length_s, due = window(result)
    start_s = dt.datetime.fromisoformat(start).timestamp()
    taken = [w for t, w in stats if start_s <= t + 0.5 < start_s + length_s]
    missed = due - sum(1 for w in taken if w is not None)
    result["monitor_samples"] = len(taken)
    if missed > 0:
        result["problems"].append(f"the monitor missed {missed} of {due} samples during {name}")
    return result


def calibrate_with(native: Native, *, workers: str, duration: str, warmup: str, pairs: str | int, dsn: str | None,
                   schema: str, results: str, batch: str, processes: str | None, log=print) -> int:
    """``native``'s calibration (or ``native.grid``), printed; 0 when a pair (each grid cell a round) was kept, else
    1. ConfigError first (``PAIRS``, ``WORKERS``, no client on ``$PATH``, grid parameters without a grid)."""
    asked = _grid_requested(workers, batch, processes)
    if asked and native.grid is None:
        raise ConfigError(asked, "lists of workers, batch sizes and process counts are calibrated against pgbench "
                                 f"only; allowed: {setting('engine', 'postgres')}, or one worker count, batch 1 and "
                                 + named("no {processes}"))
    n_pairs = parse_int("PAIRS", pairs, minimum=1, maximum=100)
    if asked:
        return native.grid(workers=workers, batch=batch, processes=processes, duration=duration, warmup=warmup,
                           n_pairs=n_pairs, dsn=dsn, schema=schema, results=results, log=log)
    cal_dir = calibration_dir(results)
    cfg = build_config("default", run_parameters(native, cal_dir, workers=workers, batch=1, duration=duration,
                                                 warmup=warmup, schema=schema), dsn=dsn)
    binary = native.find()
    figures = on_server(native, cfg.dsn, cfg.workers,
                        lambda on: _calibrate_on(native, binary, on, cfg, n_pairs, cal_dir, log=log))
    return 0 if figures["pairs_kept"] else 1


def _calibrate_on(native: Native, binary: str, dsn: str, cfg, pairs: int, cal_dir: Path, *, log) -> dict:
    figures = {**native.head, f"{native.key}_binary": binary, f"{native.key}_version": native.version(binary),
               "config": cfg.public(), "backlog": None,
               **plan_figures(cfg, pairs, native.key, **native.extra(cfg)), "pairs": []}
    # both sides' connections: the native client's + the monitor's two, or queue-bench's
    claim_first(dsn, cfg, max(cfg.workers + 2, cfg.connections_needed()))
    log(f"calibration: {pairs} pairs of {native.name} (A) then queue-bench (B), {cfg.workers} clients"
        + native.timing.format(duration=cfg.duration_s, warmup=cfg.warmup_s)
        + f" same monitor on both sides -> {cal_dir}")
    try:
        side = native.ready(binary, dsn, cfg, figures, cal_dir, log)
        for i in range(1, pairs + 1):
            figures["pairs"].append(_pair(i, native, side, cfg=cfg, dsn=dsn, cal_dir=cal_dir, log=log))
    finally:
        get_engine(cfg.engine).drop_schema_at(dsn, cfg.schema)
        _finish(figures, cal_dir, log, native)
    return figures


def _pair(i: int, native: Native, side: Callable[[Path], dict], *, cfg, dsn: str, cal_dir: Path, log) -> dict:
    """Pair ``i``: the native client's ``side`` (A) then queue-bench (B, not run after a failed A), tried up to
    1 + :data:`RETRIES_PER_PAIR` times until a try has no problem: ``{"pair", "kept", "ratio", "attempts"}``.
    Raises KeyboardInterrupt when a queue-bench run was interrupted."""
    attempts = []
    for attempt in range(1 + RETRIES_PER_PAIR):
        label = f"pair{i}-try{attempt + 1}"
        nat = side(cal_dir / native.name / label)
        result = {"label": label, f"{native.key}_dir": f"{native.name}/{label}", native.key: nat,
                  "queue_bench": None, "ratio": None, "problems": [f"{native.name}: {p}" for p in nat["problems"]]}
        if not nat["problems"]:
            result = with_swarm_side(result, nat[native.rate_key], cfg, dsn, cal_dir, log)
        attempts.append(result)
        qb = result["queue_bench"] or {}
        log(f"pair {i}{f' (try {attempt + 1})' if attempt else ''}: {native.name} "
            f"{nat[native.rate_key]:,.1f} {native.rate_unit}, "
            + swarm_text(qb, result["ratio"], native.name, nat["cpu_us_per_job"]) + not_kept(result["problems"]))
        stop_if_interrupted(qb)
        if not result["problems"]:
            break
    kept = not attempts[-1]["problems"]
    if not kept:
        log(f"pair {i}: left out after {len(attempts)} tries")
    return {"pair": i, "kept": kept, "ratio": attempts[-1]["ratio"] if kept else None, "attempts": attempts}


def _grid_requested(workers: str, batch: str, processes: str | None) -> str | None:
    """The parameter that asks for the grid (``PROCESSES``, ``WORKERS`` as a list, ``BATCH`` other than 1), or
    None."""
    if processes is not None:
        return "PROCESSES"
    if "," in str(workers):
        return "WORKERS"
    return "BATCH" if str(batch).strip() != "1" else None


def harness_figures(run_dir: Path) -> dict:
    """queue-bench's side of a pair: ``{"jobs_per_s", "jobs_completed", "measured_s", "cpu_us_per_job" (µs),
    "harness_cpu_mean_pct", "harness_cpu_max_pct", "suspect", "suspect_reasons", "cpu_s", "complete"}``."""
    result = RunResult.load(run_dir)
    summary, intervals = result.summary, result.table("intervals.csv")
    jobs = summary["jobs_completed"]

    def seconds(column: str) -> float | None:  # CPU seconds: the column's mean % × the measured seconds
        values = [float(v) for v in intervals[column].dropna()] if column in intervals else []
        return sum(values) / len(values) / 100 * summary["measured_s"] if values else None

    cpu_s, user_s, system_s = seconds("harness_cpu_pct"), seconds("harness_user_pct"), seconds("harness_system_pct")
    mean_pct = 100 * cpu_s / summary["measured_s"] if cpu_s is not None and summary["measured_s"] else None
    return {"jobs_per_s": summary["throughput_jobs_per_s"], "jobs_completed": jobs,
            **{k: summary[k] for k in ("measured_s", "measured_start", "measured_end")},
            "cpu_s": cpu_s, "cpu_us_per_job": per_job_us(cpu_s, jobs), "user_s": user_s, "system_s": system_s,
            "user_us_per_job": per_job_us(user_s, jobs), "system_us_per_job": per_job_us(system_s, jobs),
            "harness_cpu_mean_pct": round(mean_pct, 2) if mean_pct is not None else None,
            **{k: summary[k] for k in ("harness_cpu_max_pct", "suspect", "suspect_reasons", "complete")},
            "problems": run_problems(summary)}


def per_job(figures: dict, jobs: int) -> dict:
    """``cpu_us_per_job``, ``user_us_per_job``, ``system_us_per_job``: ``figures``' ``cpu_s``, ``user_s``,
    ``system_s`` over ``jobs`` jobs, in µs (:func:`per_job_us`)."""
    return {f"{part}_us_per_job": per_job_us(figures[f"{part}_s"], jobs) for part in ("cpu", "user", "system")}


def summary_line(ratios: list[float], left_out: int) -> str:
    """:data:`SUMMARY_FORMAT` filled from the kept pairs' ``ratios`` (``n/a`` when none was kept)."""
    low, mid, high = (f"{f(ratios):.2f}" if ratios else "n/a" for f in (min, statistics.median, max))
    return SUMMARY_FORMAT.format(median=mid, min=low, max=high, kept=len(ratios), left_out=left_out)


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


def shown(value: float | None, spec: str) -> str:
    """``value`` formatted by ``spec``; ``-`` when it is None."""
    return "-" if value is None else format(value, spec)


def swarm_text(qb: dict, ratio: float | None, native_name: str, native_cpu_us: float | None) -> str:
    """One try's queue-bench side as printed (``-`` for a missing figure; ``qb`` {} when it did not run)."""
    return (f"queue-bench {shown(qb.get('jobs_per_s'), ',.1f')} jobs/s, ratio {shown(ratio, '.2f')}; "
            f"CPU per job {native_name} {shown(native_cpu_us, '.1f')} µs, "
            f"harness {shown(qb.get('cpu_us_per_job'), '.1f')} µs")


def not_kept(problems: list[str]) -> str:
    """``; not kept: <problems>`` after a try's line, or nothing when it has none."""
    return f"; not kept: {'; '.join(problems)}" if problems else ""


def stop_if_interrupted(qb: dict) -> None:
    """Raise KeyboardInterrupt when the queue-bench run was interrupted (``complete`` false)."""
    if qb.get("complete") is False:
        raise KeyboardInterrupt


def cpu_per_job(kept: list[dict], key: str, jobs_key: str) -> dict:
    """CPU µs per job of each side over the ``kept`` pairs' tries (total, user, system), the native side's under
    ``key`` over its ``jobs_key`` jobs: ``{key, "harness", "harness_over_<key>", "<key>_user", "<key>_system",
    "harness_user", "harness_system"}``; None when no try was kept or a side lacks jobs or a CPU reading."""
    cpu = {}
    for side, jobs_of in ((key, jobs_key), ("queue_bench", "jobs_completed")):
        jobs = sum(r[side][jobs_of] for r in kept)
        for part in ("cpu", "user", "system"):
            seconds = [r[side].get(f"{part}_s") for r in kept]
            cpu[side, part] = 1e6 * sum(seconds) / jobs if kept and jobs and None not in seconds else None
    return {key: cpu[key, "cpu"], "harness": cpu["queue_bench", "cpu"],
            f"harness_over_{key}": (cpu["queue_bench", "cpu"] / cpu[key, "cpu"])
            if cpu[key, "cpu"] and cpu["queue_bench", "cpu"] is not None else None,
            f"{key}_user": cpu[key, "user"], f"{key}_system": cpu[key, "system"],
            "harness_user": cpu["queue_bench", "user"], "harness_system": cpu["queue_bench", "system"]}


def cpu_text(c: dict, native: Native) -> tuple[str, str]:
    """:func:`cpu_per_job`'s figures ``c`` as printed: both sides' totals with the harness's multiple of the native
    client's and the goal; their user / system split."""
    k, name = native.key, native.name
    return (f"{name} {shown(c[k], '.1f')} µs, harness {shown(c['harness'], '.1f')} µs "
            f"({shown(c[f'harness_over_{k}'], '.2f')} × {name}; goal <= {GOAL_CPU_FACTOR:g} ×)",
            f"{name} {shown(c[f'{k}_user'], '.1f')} / {shown(c[f'{k}_system'], '.1f')} µs, "
            f"harness {shown(c['harness_user'], '.1f')} / {shown(c['harness_system'], '.1f')} µs")


def ratio_figures(ratios: list[float], left_out: int) -> dict:
    """``median_ratio``, ``min_ratio``, ``max_ratio`` (None without ratios), ``pairs_kept`` and ``pairs_left_out``."""
    return {"median_ratio": statistics.median(ratios) if ratios else None,
            "min_ratio": min(ratios) if ratios else None, "max_ratio": max(ratios) if ratios else None,
            "pairs_kept": len(ratios), "pairs_left_out": left_out}


def _finish(figures: dict, cal_dir: Path, log, native: Native) -> None:
    """Summary figures over the kept pairs, the CPU and summary lines, and calibration.json."""
    kept = [p["attempts"][-1] for p in figures["pairs"] if p["kept"]]
    ratios = [r["ratio"] for r in kept]
    left_out = sum(1 for p in figures["pairs"] if not p["kept"])
    figures.update({**ratio_figures(ratios, left_out), "cpu_us_per_job": cpu_per_job(kept, native.key, native.jobs_key),
                    "cores": psutil.cpu_count(), "summary_line": summary_line(ratios, left_out)})
    total, split = cpu_text(figures["cpu_us_per_job"], native)
    log(f"CPU per job {native.cpu_window.format(measured_s=figures['measured_s'])}: {total}; "
        f"{figures['cores']} cores shared with the server")
    log(f"of which user / system time: {split}")
    write_calibration(figures, cal_dir, log)
    log(figures["summary_line"])


def write_calibration(figures: dict, cal_dir: Path, log) -> None:
    """``cal_dir/calibration.json`` (``figures``, stamped), and the line naming it."""
    cal_dir.mkdir(parents=True, exist_ok=True)
    (cal_dir / "calibration.json").write_text(json.dumps(stamped(figures), indent=2) + "\n")
    log(f"calibration: {(cal_dir / 'calibration.json').resolve()}")
