"""``make calibrate CAL_PROCESSES=1,2,4``: pgbench against queue-bench with each load generator process count,
per workers × batch configuration (rounds, rotation, retries: docs/calibration.md)."""

from __future__ import annotations

from pathlib import Path

import psutil

from bench import runner
from bench.cli.calibrate_pairs import (RETRIES_PER_PAIR, Native, calibration_dir, claim_first, cpu_per_job, cpu_text,
                                       not_kept, on_server, per_job, plan_figures, ratio_figures, run_parameters, shown,
                                       stop_if_interrupted, summary_line, swarm_text, with_swarm_side,
                                       write_calibration)
from bench.config.parameters import BY_KEY
from bench.config.parsers import parse_int
from bench.config.run_config import build_config
from bench.engines import get_engine
from bench.errors import ConfigError
from bench.results.model import RunResult
from bench.run_summary import SUSPECT_CPU_PCT, SUSPECT_LOOP_LAG_P99_US

__all__ = ["GRID_PREFIX", "calibrate_grid", "parse_values", "processes_cpu"]

#: What precedes each configuration's :data:`bench.cli.calibrate_pairs.SUMMARY_FORMAT` line.
GRID_PREFIX = "workers {workers}, batch {batch}, processes {processes}: "


def parse_values(param: str, text: str) -> tuple[int, ...]:
    """``"1,2,4"`` (or one value) as integers in ``param``'s table range, in the order given. Raises ConfigError
    naming ``param`` for a value not an integer, out of range, empty or given twice."""
    p = BY_KEY[param.lower()]
    allowed = f"{p.allowed_words()}, or a comma-separated list of them (e.g. 1,2,4)"
    values: list[int] = []
    for item in str(text).split(","):
        try:
            value = parse_int(param, item.strip(), minimum=p.minimum, maximum=p.maximum)
        except ConfigError as err:  # its value and problem, and what a list allows
            raise ConfigError(param, f"{err.problem.split('; allowed: ')[0]}; allowed: {allowed}") from None
        if value in values:
            raise ConfigError(param, f"{value} is given twice; allowed: {allowed}, each once")
        values.append(value)
    return tuple(values)


def processes_cpu(run_dir: Path) -> dict:
    """CPU seconds of every load generator process over a run's measured window: each ``processes.csv`` row's
    ``cpu_pct`` / 100 × the second's length. Returns ``{"cpu_s", "user_s", "system_s", "cpu_by_process"
    ({process: s}), "rows", "rows_expected" (processes × measured seconds), "master_cpu_max_pct" (None without
    a process 0)}``."""
    result = RunResult.load(run_dir)
    summary, n_seconds = result.summary, len(result.table("intervals.csv"))
    rows = result.table("processes.csv").to_dict("records")
    second_s = summary["measured_s"] / n_seconds if n_seconds else 0.0
    total = {part: sum(float(r[f"{part}_pct"]) for r in rows) / 100 * second_s for part in ("cpu", "user", "system")}
    by_process: dict[int, float] = {}
    for r in rows:
        by_process[int(r["process"])] = by_process.get(int(r["process"]), 0.0) + float(r["cpu_pct"]) / 100 * second_s
    master = [float(r["cpu_pct"]) for r in rows if int(r["process"]) == 0]
    return {"cpu_s": total["cpu"], "user_s": total["user"], "system_s": total["system"],
            "cpu_by_process": dict(sorted(by_process.items())), "rows": len(rows),
            "rows_expected": len(by_process) * n_seconds, "master_cpu_max_pct": max(master) if master else None}


def _processes_text(qb: dict) -> str:
    """Each process's busiest second and loop lag, and the saturated ones; sets ``qb["saturated_processes"]``."""
    parts, saturated = [], []
    if qb.get("master_cpu_max_pct") is not None:
        parts.append(f"master CPU max {qb['master_cpu_max_pct']:.0f} %")
        if qb["master_cpu_max_pct"] > SUSPECT_CPU_PCT:
            saturated.append(0)
    for p in qb.get("processes") or []:
        lag = p.get("loop_lag_p99_us")
        parts.append(f"process {p['process']} CPU max {p.get('cpu_max_pct') or 0:.0f} %, loop lag p99 "
                     + ("-" if lag is None else f"{lag / 1000:.1f} ms"))
        if (p.get("cpu_max_pct") or 0) > SUSPECT_CPU_PCT or (lag or 0) > SUSPECT_LOOP_LAG_P99_US:
            saturated.append(p["process"])
    qb["saturated_processes"] = saturated
    return "; ".join(parts) + (f"; saturated: process {', '.join(map(str, saturated))}" if saturated
                               else "; no process saturated")


def _swarm_side(pg: dict, cfg, dsn: str, cal_dir: Path, log) -> dict:
    """One B of a round: queue-bench with ``cfg`` (its process count), its ratio over ``pg``'s jobs/s."""
    entry = with_swarm_side({"processes": cfg.processes, "problems": []}, pg["jobs_per_s"], cfg, dsn, cal_dir, log)
    qb = entry["queue_bench"]
    summary = RunResult.load(cal_dir / qb["run_dir"]).summary
    qb["processes"] = summary.get("processes")
    qb["cpu_basis"] = "intervals.csv harness_cpu_pct"
    if cfg.processes > 1:  # the sum over every process, not the busiest one's intervals.csv figure
        cpu = processes_cpu(cal_dir / qb["run_dir"])
        qb.update(cpu, cpu_basis=f"processes.csv, summed over {len(cpu['cpu_by_process'])} processes")
        qb.update(per_job(qb, qb["jobs_completed"]))
        if cpu["rows"] < cpu["rows_expected"]:
            entry["problems"].append(f"queue-bench: processes.csv lacks {cpu['rows_expected'] - cpu['rows']} of "
                                     f"{cpu['rows_expected']} process-seconds (a process missed seconds), whose "
                                     "CPU the harness CPU per job would not count")
    return entry


def _round(i: int, order: list[int], conf: dict, *, native: Native, binary: str, dsn: str, cal_dir: Path,
           log) -> dict:
    """Round ``i``: pgbench (``native``), then queue-bench per process count in ``order``, :data:`RETRIES_PER_PAIR`
    retries each: ``{"round", "order", "tries", "processes": [{"processes", "kept", "try", "ratio"}]}``."""
    w, b = conf["workers"], conf["batch"]
    pending, last, tries = list(order), {}, []
    for attempt in range(1 + RETRIES_PER_PAIR):
        label = f"w{w}-b{b}-round{i}-try{attempt + 1}"
        tag = f"workers {w}, batch {b}, round {i}{f' (try {attempt + 1})' if attempt else ''}"
        pg = native.side(binary, dsn, conf["pgbench_cfg"], conf["backlog"], cal_dir / "pgbench" / label,
                         count_jobs=True)
        one = {"label": label, "pgbench_dir": f"pgbench/{label}", "pgbench": pg,
               "problems": [f"pgbench: {p}" for p in pg["problems"]], "queue_bench": []}
        tries.append(one)
        log(f"{tag}: pgbench {pg['jobs_per_s']:,.1f} jobs/s ({pg['tps']:,.1f} tps × {b}), CPU per job "
            f"{shown(pg['cpu_us_per_job'], '.1f')} µs{not_kept(one['problems'])}")
        if one["problems"]:
            continue
        for p in list(pending):
            entry = _swarm_side(pg, conf["cfgs"][p], dsn, cal_dir, log)
            one["queue_bench"].append(entry)
            last[p] = (label, entry)
            qb = entry["queue_bench"]
            log(f"{tag}, processes {p}: {swarm_text(qb, entry['ratio'], 'pgbench', pg['cpu_us_per_job'])}; "
                f"{_processes_text(qb)}{not_kept(entry['problems'])}")
            stop_if_interrupted(qb)
            if not entry["problems"]:
                pending.remove(p)
        if not pending:
            break
    return {"round": i, "order": order, "tries": tries,
            "processes": [{"processes": p, "kept": p not in pending, "try": last[p][0] if p in last else None,
                           "ratio": last[p][1]["ratio"] if p in last and p not in pending else None}
                          for p in order]}


def _results(conf: dict, native: Native, log) -> list[dict]:
    """Per process count: the ratios of the kept rounds, their median line and CPU per job."""
    out = []
    for p in conf["processes"]:
        kept, every = [], []
        for rnd in conf["rounds"]:
            mine = next(x for x in rnd["processes"] if x["processes"] == p)
            tried = [(t, e) for t in rnd["tries"] for e in t["queue_bench"] if e["processes"] == p]
            every += [e["ratio"] for _t, e in tried if e["ratio"] is not None]
            if mine["kept"]:
                t, e = next((t, e) for t, e in tried if t["label"] == mine["try"])
                kept.append({"pgbench": t["pgbench"], "queue_bench": e["queue_bench"], "ratio": e["ratio"]})
        ratios = [k["ratio"] for k in kept]
        left_out = len(conf["rounds"]) - len(kept)
        prefix = GRID_PREFIX.format(workers=conf["workers"], batch=conf["batch"], processes=p)
        cpu = cpu_per_job(kept, native.key, "jobs")  # pgbench's jobs: its transactions × batch
        out.append({"processes": p, "ratios": ratios, "ratios_every_try": every, **ratio_figures(ratios, left_out),
                    "cpu_us_per_job": cpu, "summary_line": prefix + summary_line(ratios, left_out)})
        total, split = cpu_text(cpu, native)
        log(f"{prefix}ratios {', '.join(f'{r:.2f}' for r in ratios) or '-'} ({len(kept)} kept, {left_out} left out"
            + (f"; every try, left-out ones included: {', '.join(f'{r:.2f}' for r in every)}" if left_out and every
               else "") + f"); CPU per job {total}, of which user / system {split}")
    return out


def _configurations(grid: dict, base: dict, dsn: str | None) -> list[dict]:
    """Every configuration's RunConfigs (one per process count, and pgbench's); ConfigError first."""
    confs = []
    for w in grid["workers"]:
        for b in grid["batch"]:
            def cfg(p: int):
                return build_config("default", {**base, "workers": w, "batch": b, "processes": p}, dsn=dsn)
            pg_cfg = cfg(1)
            confs.append({"workers": w, "batch": b, "processes": list(grid["processes"]), "pgbench_cfg": pg_cfg,
                          "cfgs": {p: cfg(p) for p in grid["processes"]},
                          "backlog": runner.compute_backlog(pg_cfg)[0]})
    return confs


def _calibrate_on(dsn: str, confs: list[dict], figures: dict, cal_dir: Path, *, native, binary: str, log) -> None:
    figures.update({f"{native.key}_binary": binary, f"{native.key}_version": native.version(binary)})
    largest = max((c for conf in confs for c in conf["cfgs"].values()), key=lambda c: c.connections_needed())
    figures["server"] = claim_first(dsn, largest, max(largest.workers + 2, largest.connections_needed()))
    grid, pairs = figures["grid"], figures["pairs_requested"]
    log(f"calibration grid: workers {', '.join(map(str, grid['workers']))} × batch "
        f"{', '.join(map(str, grid['batch']))}; {pairs} rounds each of pgbench (A) then queue-bench with "
        f"{', '.join(map(str, grid['processes']))} processes (B, order rotated), {figures['measured_s']} s measured "
        f"after {figures['warmup_s']} s warm-up, same monitor on every side -> {cal_dir}")
    try:
        for conf in confs:
            entry = {k: conf[k] for k in ("workers", "batch", "backlog", "processes")}
            entry.update(config=conf["pgbench_cfg"].public(), rounds=[])
            figures["configurations"].append(entry)
            ps = conf["processes"]
            for i in range(1, pairs + 1):
                order = ps[(i - 1) % len(ps):] + ps[:(i - 1) % len(ps)]
                entry["rounds"].append(_round(i, order, conf, native=native, binary=binary, dsn=dsn, cal_dir=cal_dir,
                                             log=log))
            entry["results"] = _results(entry, native, log)
    finally:
        get_engine(largest.engine).drop_schema_at(dsn, largest.schema)
        lines = [r["summary_line"] for conf in figures["configurations"] for r in conf.get("results") or []]
        figures.update(summary_lines=lines, cores=psutil.cpu_count())
        write_calibration(figures, cal_dir, log)  # then the ``median ratio:`` line of each process count measured
        for line in lines:
            log(line)


def calibrate_grid(native: Native, *, workers: str, batch: str, processes: str | None, duration: str, warmup: str,
                   n_pairs: int, dsn: str | None, schema: str, results: str, log=print) -> int:
    """The grid calibration against ``native`` (pgbench); ``workers``, ``batch``, ``processes`` each a value or a
    comma list (``processes`` None: 1). Prints the figures; 0 when every configuration and process count kept a
    round, else 1. Raises ConfigError (``WORKERS``, ``BATCH``, ``PROCESSES``, ``DURATION``, …) first."""
    grid = {"workers": parse_values("WORKERS", workers), "batch": parse_values("BATCH", batch),
            "processes": parse_values("PROCESSES", "1" if processes is None else processes)}
    cal_dir = calibration_dir(results)
    confs = _configurations(grid, run_parameters(native, cal_dir, duration=duration, warmup=warmup, schema=schema),
                            dsn)
    cfg = confs[0]["pgbench_cfg"]
    binary = native.find()
    figures = {"mode": "grid", "grid": {k: list(v) for k, v in grid.items()},
               **plan_figures(cfg, n_pairs, native.key), "configurations": []}
    if not cfg.dsn:  # the pairs' sizing (2 × workers + 20), for the largest configuration
        figures["embedded_max_connections"] = 2 * max(grid["workers"]) + 20
    on_server(native, cfg.dsn, max(grid["workers"]), lambda on: _calibrate_on(on, confs, figures, cal_dir,
                                                                              native=native, binary=binary, log=log))
    every = [r for conf in figures["configurations"] for r in conf.get("results") or []]
    return 0 if every and all(r["pairs_kept"] for r in every) else 1
