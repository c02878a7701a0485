"""Sweeps: a matrix of runs, each cell repeated, from one sweep file.

A sweep file ``workloads/sweeps/<name>.toml`` (read with :mod:`tomllib`)::

    description = "index variants against finished-row history"
    workload = "default"          # the base workload (workloads/<workload>.toml)
    repetitions = 2               # runs per cell, for confidence intervals
    [fixed]                       # parameters every cell shares (run parameter names)
    duration = "15s"
    workers = 20
    [matrix]                      # the axes; cells are their cartesian product, in file order
    index = ["none", "partial"]
    history = [0, 100000, 1000000]
    [target]                      # optional: Little's law in the comparison report
    rate_jobs_per_s = 1000
    utilisation = 0.7

Every cell is validated before anything touches a database. Runs go to
``results/sweeps/<name>-<stamp>/runs/<run_id>/`` (the files ``qbench run``
writes) and one row per run is appended to ``cells.csv`` as it finishes
(columns: ``CELL_COLUMNS``); ``sweep.json`` describes the matrix. Each distinct
history size is seeded once into a saved state (:func:`bench.engines.postgres.db.ensure_history_state`)
and restored into each cell that needs it, so every cell starts from the same
rows. An interrupted sweep resumes: the same sweep file run again (same matrix and
base parameters) continues the newest unfinished sweep of that name.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import hashlib
import itertools
import json
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from bench.config.parameters import SWEEP_AXES, check_file_value
from bench.sweep.sweep_file import check_target, sweep_path
from bench.results.model import ResultsError, RunResult, invariants_ok, read_result, stamped
from bench.config.run_config import REPO_ROOT, RunConfig, build_config, read_toml
from bench.errors import ConfigError, Interrupted

#: Axes a sweep may vary: the keys of a workload file (the parameter table marks which).
SWEEP_KEYS = SWEEP_AXES
_FILE_KEYS = {"description", "workload", "repetitions", "fixed", "matrix", "target"}
#: Columns of cells.csv, in order (the contract the comparison report reads).
CELL_COLUMNS = (
    "cell_id", "rep", "run_id", "run_dir", "status", "engine", "isolation",
    "policy", "workers", "batch", "index", "layout", "history", "backlog", "rate", "work_ms", "txn", "duration_s",
    "plan_cache", "prepared", "autovacuum",
    "throughput_jobs_per_s", "claims_per_s", "jobs_completed", "empty_claims", "empty_claims_while_work_waited", "errors_total",
    "claim_p50_us", "claim_p95_us", "claim_p99_us", "claim_mean_us", "complete_p99_us",
    "batch_wait_p50_us", "batch_wait_p99_us", "oldest_age_max_s", "oldest_age_slope_s_per_s",
    "plan_workers", "plan_workers_scan", "plan_workers_generic", "plan_workers_custom",
    "plan_workers_buffers", "plan_workers_ms", "plan_workers_rows_examined",
    "plan_explain_scan", "plan_explain_rows_examined",
    "plan_auto", "plan_custom_scan", "plan_custom_buffers", "plan_custom_ms",
    "plan_generic_scan", "plan_generic_buffers", "plan_generic_ms",
    "pgss_calls", "pgss_mean_ms", "pgss_shared_blks_per_call",
    "table_bytes_before", "indexes_bytes_before", "table_bytes_after", "indexes_bytes_after",
    "harness_cpu_max_pct", "suspect", "invariants_ok", "saturated",
)


class SweepInterrupted(Interrupted):
    """The sweep was interrupted (Ctrl-C / SIGTERM); ``sweep_dir`` can be resumed."""

    def __init__(self, sweep_dir: Path):
        self.sweep_dir = sweep_dir
        super().__init__(f"sweep interrupted; run it again to resume: {sweep_dir}")


class Sweep:
    """A validated sweep: its cells (``[(cell_id, params, RunConfig)]``) and metadata.

    Build with :meth:`load`. ``overrides`` (run parameter → value, e.g. from the
    command line) apply to every cell after the file's ``fixed`` table.
    """

    def __init__(self, name: str, path: Path, data: dict, cells: list, base: RunConfig, repetitions: int):
        self.name, self.path, self.data, self.cells, self.base, self.repetitions = (
            name, path, data, cells, base, repetitions)

    @classmethod
    def load(cls, name: str, overrides: dict[str, Any] | None = None, repetitions: int | None = None,
             dsn: str | None = None) -> "Sweep":
        """Read and validate a sweep file; raises ConfigError (one line, naming the parameter)."""
        path = sweep_path(name)
        data = read_toml(path, "SWEEP")
        unknown = sorted(set(data) - _FILE_KEYS)
        if unknown:
            raise ConfigError("SWEEP", f"unknown key {unknown[0]!r} in {path.name}; allowed: {', '.join(sorted(_FILE_KEYS))}")
        matrix = data.get("matrix") or {}
        if not isinstance(matrix, dict) or not matrix:
            raise ConfigError("SWEEP", f"{path.name} has no [matrix] table; allowed: axes such as index = [\"none\", \"partial\"]")
        for axis, values in matrix.items():
            if axis not in SWEEP_KEYS:
                raise ConfigError("SWEEP", f"axis {axis!r} in {path.name} cannot be swept; allowed: {', '.join(SWEEP_KEYS)}")
            if not isinstance(values, list) or not values or len(set(map(str, values))) != len(values):
                raise ConfigError(axis.upper(), f"the sweep axis in {path.name} must be a non-empty list of distinct values")
            for value in values:
                check_file_value(axis, value, f"[matrix] of {path.name}")
        reps = repetitions if repetitions is not None else data.get("repetitions", 1)
        if isinstance(reps, bool) or not isinstance(reps, int) or not 1 <= reps <= 100:
            raise ConfigError("REPETITIONS", f"{reps!r} is not allowed; allowed: an integer from 1 to 100")
        given = {k: v for k, v in (overrides or {}).items() if v not in (None, "")}
        for key in given:
            if key in matrix:
                raise ConfigError(key.upper(), f"is an axis of sweep {path.stem!r} (values {matrix[key]}); "
                                               "allowed: parameters the sweep does not vary")
        file_fixed = data.get("fixed") or {}
        if not isinstance(file_fixed, dict):
            raise ConfigError("SWEEP", f"[fixed] in {path.name} must be a table of run parameters")
        for key, value in file_fixed.items():
            check_file_value(key, value, f"[fixed] of {path.name}")
            if key in matrix:
                raise ConfigError(key.upper(), f"is both in [fixed] and in [matrix] of {path.name}; "
                                               "allowed: each parameter in one of them")
        check_target(data.get("target"), path.name)
        fixed = {**file_fixed, **given}
        workload = str(data.get("workload", "default"))
        base = build_config(workload, fixed, dsn=dsn)
        cells = []
        for i, combo in enumerate(itertools.product(*matrix.values()), start=1):
            params = dict(zip(matrix, combo))
            cells.append((f"c{i:03d}", params, build_config(workload, {**fixed, **params}, dsn=dsn)))
        return cls(path.stem, path, data, cells, base, reps)

    @staticmethod
    def measured_config(cfg: RunConfig) -> dict:
        """The parameters a cell measures with: ``cfg.public()`` without the DSN, results directory and notes."""
        return {k: v for k, v in cfg.public().items() if k not in ("dsn", "results", "notes")}

    @property
    def matrix_hash(self) -> str:
        """Identifies what the sweep measures: the cells' effective parameters and repetitions
        (not the DSN or results directory), so a resumed sweep measures the same thing."""
        key = self.measured_config
        blob = json.dumps({"cells": [(cid, key(cfg)) for cid, _, cfg in self.cells], "reps": self.repetitions},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def description(self) -> dict:
        """The ``sweep.json`` fields that describe the matrix."""
        target = self.data.get("target") or {}
        return {
            "name": self.name, "description": self.data.get("description", ""),
            "file": str(self.path.resolve().relative_to(REPO_ROOT)) if self.path.resolve().is_relative_to(REPO_ROOT)
            else str(self.path),
            "matrix_hash": self.matrix_hash, "axes": dict(self.data["matrix"]),
            "base": self.base.public(), "repetitions": self.repetitions,
            "cells": [{"cell_id": cid, "params": params, "config": cfg.public()} for cid, params, cfg in self.cells],
            "target": {"rate_jobs_per_s": target.get("rate_jobs_per_s"), "utilisation": target.get("utilisation", 0.7)},
        }

    def max_connections(self) -> int:
        """The most connections one cell needs from the server (see RunConfig.connections_needed)."""
        return max(cfg.connections_needed() for _, _, cfg in self.cells)


def find_resumable(results_dir: Path, sweep: Sweep) -> Path | None:
    """The newest unfinished sweep directory under ``results_dir/sweeps`` for the same matrix, or None."""
    candidates = []
    for path in (results_dir / "sweeps").glob(f"{sweep.name}-*/sweep.json"):
        try:
            meta = read_result(path)
        except ResultsError:
            continue
        if meta.get("matrix_hash") == sweep.matrix_hash and not meta.get("complete"):
            candidates.append(path.parent)
    return max(candidates, key=lambda p: p.name) if candidates else None


def measured_runs(sweep_dir: Path) -> dict[tuple[str, int], dict]:
    """Rows of ``cells.csv`` already measured (status ``done``), keyed by (cell_id, rep)."""
    path = sweep_dir / "cells.csv"
    if not path.is_file():
        return {}
    with path.open(newline="") as fh:
        return {(r["cell_id"], int(r["rep"])): r for r in csv.DictReader(fh) if r["status"] == "done"}


def cell_row(cell_id: str, rep: int, cfg: RunConfig, run_dir: Path | None, sweep_dir: Path,
             summary: dict | None, status: str, seeded_backlog: int | None = None) -> dict:
    """One ``cells.csv`` row from a run's ``summary.json`` (``summary`` None for a failed run);
    ``backlog`` is the backlog really seeded (``run.json``), else the configured one."""
    row = {"cell_id": cell_id, "rep": rep, "status": status,
           "run_id": run_dir.name if run_dir else "", "run_dir": str(run_dir.relative_to(sweep_dir)) if run_dir else "",
           "engine": cfg.engine, "isolation": cfg.isolation,
           "policy": cfg.policy, "workers": cfg.workers, "batch": cfg.batch, "index": cfg.index,
           "layout": cfg.layout, "history": cfg.history,
           "backlog": cfg.backlog if seeded_backlog is None else seeded_backlog, "rate": cfg.rate,
           "work_ms": cfg.work_ms, "txn": cfg.txn, "duration_s": cfg.duration_s,
           "plan_cache": cfg.plan_cache, "prepared": cfg.prepared if isinstance(cfg.prepared, str) else int(cfg.prepared), "autovacuum": cfg.autovacuum}
    if summary is None:
        return row
    claim, wait = summary["claim_latency_us"], summary.get("batch_wait_us") or {}
    plans = summary.get("plans") or {}
    pgss = summary.get("pg_stat_statements") or {}
    sizes = summary.get("table_sizes") or {}
    row.update({
        "throughput_jobs_per_s": summary["throughput_jobs_per_s"], "claims_per_s": summary["claims_per_s"],
        "jobs_completed": summary["jobs_completed"], "empty_claims": summary["empty_claims"],
        "empty_claims_while_work_waited": summary.get("empty_claims_while_work_waited"),
        "errors_total": sum(summary["errors"].values()),
        "claim_p50_us": claim["p50"], "claim_p95_us": claim["p95"], "claim_p99_us": claim["p99"],
        "claim_mean_us": claim["mean"], "complete_p99_us": summary["complete_latency_us"]["p99"],
        "batch_wait_p50_us": wait.get("p50"), "batch_wait_p99_us": wait.get("p99"),
        "oldest_age_max_s": summary["oldest_eligible_age_s"]["max"],
        "oldest_age_slope_s_per_s": summary.get("oldest_age_slope_s_per_s"),
        "plan_auto": plans.get("auto"),
        **_workers_plan_columns(plans.get("workers") or {}),
        # MariaDB: EXPLAIN FORMAT=JSON of the claim's SELECT as the load stopped (plans.explain)
        "plan_explain_scan": (plans.get("explain") or {}).get("scan"),
        "plan_explain_rows_examined": (plans.get("explain") or {}).get("rows_examined"),
        "pgss_calls": pgss.get("calls"), "pgss_mean_ms": pgss.get("mean_ms"),
        "pgss_shared_blks_per_call": pgss.get("shared_blks_per_call"),
        "harness_cpu_max_pct": summary["harness_cpu_max_pct"], "suspect": summary["suspect"],
        "invariants_ok": invariants_ok(summary),
        "saturated": summary.get("saturated"),
    })
    for mode in ("custom", "generic"):
        plan = plans.get(mode) or {}
        row.update({f"plan_{mode}_scan": plan.get("scan"), f"plan_{mode}_buffers": plan.get("shared_buffers"),
                    f"plan_{mode}_ms": plan.get("execution_ms")})
    for when in ("before", "after"):
        measured = sizes.get(when) or {}
        row.update({f"table_bytes_{when}": measured.get("table_bytes"),
                    f"indexes_bytes_{when}": measured.get("indexes_bytes")})
    return row


def _workers_plan_columns(workers: dict) -> dict:
    """The ``plan_workers*`` columns: the plan the workers' own sessions ran (``plans.workers``)."""
    return {"plan_workers": workers.get("plan"), "plan_workers_scan": workers.get("scan"),
            "plan_workers_generic": workers.get("generic_executions"),
            "plan_workers_custom": workers.get("custom_executions"),
            "plan_workers_buffers": workers.get("shared_buffers"), "plan_workers_ms": workers.get("execution_ms"),
            "plan_workers_rows_examined": workers.get("rows_examined")}


def _append_row(sweep_dir: Path, row: dict) -> None:
    path = sweep_dir / "cells.csv"
    new = not path.is_file()
    if not new:
        with path.open(newline="") as fh:
            header = next(csv.reader(fh), [])
        if tuple(header) != CELL_COLUMNS:  # a sweep resumed after the columns changed: keep its rows
            with path.open(newline="") as fh:
                kept = list(csv.DictReader(fh))
            _rewrite(path, kept)
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CELL_COLUMNS)
        if new:
            writer.writeheader()
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CELL_COLUMNS})


def _keep_only(sweep_dir: Path, rows: dict[tuple[str, int], dict]) -> None:
    """Rewrite ``cells.csv`` with just ``rows`` (in their order) if it holds any others."""
    path = sweep_dir / "cells.csv"
    if not path.is_file():
        return
    with path.open(newline="") as fh:
        total = sum(1 for _ in csv.DictReader(fh))
    if total == len(rows):
        return
    _rewrite(path, list(rows.values()))


def _rewrite(path: Path, rows: list[dict]) -> None:
    """Replace ``cells.csv`` at ``path`` with ``rows`` under the header :data:`CELL_COLUMNS`
    (a column a row lacks is empty; one the header lacks is dropped)."""
    tmp = path.with_name("cells.csv.tmp")
    with tmp.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CELL_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: r.get(k) or "" for k in CELL_COLUMNS} for r in rows)
    tmp.replace(path)


def _write_meta(sweep_dir: Path, meta: dict) -> None:
    tmp = sweep_dir / "sweep.json.tmp"
    tmp.write_text(json.dumps(stamped(meta), indent=2, default=str) + "\n")
    tmp.replace(sweep_dir / "sweep.json")


def _now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def run_sweep(sweep: Sweep, dsn: str | Mapping[str, str], results_dir: Path, *, fresh: bool = False,
              log: Callable[[str], None] = print, on_run: Callable[[Path], None] = lambda _run_dir: None) -> Path:
    """Run (or resume) ``sweep`` against ``dsn`` (one DSN, or one per engine name when the sweep has
    an ``engine`` axis); returns the sweep directory.

    ``on_run(run_dir)`` runs after each measured run (the command renders its report there).

    Runs every (cell, repetition) not yet measured, in file order, one at a time,
    each through :func:`bench.runner.run` with the history restored from a saved
    state. A run that fails (its database error, in one line) is recorded as
    ``failed: …`` and the sweep goes on, and the sweep stays unfinished so running
    it again retries those runs; a run that is interrupted stops the sweep
    (raises :class:`SweepInterrupted`) without recording it. The saved states are
    dropped when every run has been measured.
    """
    from tqdm import tqdm  # the progress bar: a well-kept library, not our own

    from bench.engines import get_engine
    from bench import runner

    sweep_dir = None if fresh else find_resumable(results_dir, sweep)
    if sweep_dir is None:
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        sweep_dir = results_dir / "sweeps" / f"{sweep.name}-{stamp}"
        sweep_dir.mkdir(parents=True)
        meta = {"sweep_id": sweep_dir.name, **sweep.description(), "started_at": _now_iso(),
                "ended_at": None, "complete": False}
        _write_meta(sweep_dir, meta)
        log(f"sweep {sweep.name}: {len(sweep.cells)} cells x {sweep.repetitions} repetitions -> {sweep_dir}")
    else:
        meta = read_result(sweep_dir / "sweep.json")
        log(f"sweep {sweep.name}: resuming {sweep_dir}")
    done = measured_runs(sweep_dir)
    _keep_only(sweep_dir, done)  # failed runs of an earlier attempt are measured again
    todo = [(cid, params, cfg, rep) for cid, params, cfg in sweep.cells for rep in range(1, sweep.repetitions + 1)
            if (cid, rep) not in done]
    total = len(sweep.cells) * sweep.repetitions
    if done:
        log(f"{len(done)} of {total} runs already measured; {len(todo)} to go")
    dsn_of = (lambda name: dsn[name]) if isinstance(dsn, Mapping) else (lambda name: dsn)
    state_schema = {}  # engine name -> its saved states' schema, for the engines the sweep ran
    bar = tqdm(total=total, initial=total - len(todo), unit="run", desc=sweep.name, dynamic_ncols=True,
               bar_format="{desc}: {n_fmt}/{total_fmt} runs |{bar}| {elapsed} elapsed, about {remaining} left")
    run_log = (sweep_dir / "sweep.log").open("a")
    try:
        for cid, params, cfg, rep in todo:
            what = ", ".join(f"{k}={v}" for k, v in params.items())
            bar.set_postfix_str(f"{cid} rep {rep}: {what}")
            cfg = _with_results(cfg, sweep_dir / "runs")
            run_log.write(f"== {cid} rep {rep}: {what}\n")
            started = time.monotonic()
            engine = get_engine(cfg.engine)
            state_schema[cfg.engine] = engine.state_schema_for(sweep.base.schema)
            try:
                run_dir = runner.run(cfg, dsn_of(cfg.engine),
                                     log=lambda line: (run_log.write(line + "\n"), run_log.flush()),
                                     state_schema=state_schema[cfg.engine])
            except KeyboardInterrupt:  # before or after the load (during it, the run returns incomplete)
                raise SweepInterrupted(sweep_dir) from None
            except (ConfigError, *engine.database_errors) as err:  # e.g. no free connections for this cell
                reason = engine.error_message(err)
                _append_row(sweep_dir, cell_row(cid, rep, cfg, None, sweep_dir, None, f"failed: {reason}"))
                bar.write(f"  {cid} rep {rep} ({what}): failed: {reason}")
                bar.update(1)
                continue
            result = RunResult.load(run_dir)
            summary = result.summary
            if not summary["complete"] and not summary.get("database_lost"):
                raise SweepInterrupted(sweep_dir)
            status = "done" if summary["complete"] else f"failed: database lost ({summary['database_lost']})"
            on_run(run_dir)
            seeded = result.run.get("backlog")
            _append_row(sweep_dir, cell_row(cid, rep, cfg, run_dir, sweep_dir, summary, status, seeded))
            claim = summary["claim_latency_us"]
            bar.write(f"  {cid} rep {rep} ({what}): {summary['throughput_jobs_per_s']:,} jobs/s, claim p50 "
                      f"{_ms(claim['p50'])}, p99 {_ms(claim['p99'])}"
                      + (" SUSPECT" if summary["suspect"] else "") + (" SATURATED" if summary.get("saturated") else "")
                      + f" [{time.monotonic() - started:.0f} s]")
            bar.update(1)
    finally:
        bar.close()
        run_log.close()
    failed = len(sweep.cells) * sweep.repetitions - len(measured_runs(sweep_dir))
    meta.update(complete=failed == 0, ended_at=_now_iso())
    _write_meta(sweep_dir, meta)
    if failed:
        log(f"{failed} runs failed (see cells.csv); run the sweep again to retry just those")
    else:
        for name, schema in state_schema.items():
            get_engine(name).drop_schema_at(dsn_of(name), schema)
    return sweep_dir


def _with_results(cfg: RunConfig, results: Path) -> RunConfig:
    return dataclasses.replace(cfg, results=str(results))


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.2f} ms"
