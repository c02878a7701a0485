"""Sweeps: a matrix of runs from one sweep file (``workloads/sweeps/<name>.toml``), each cell repeated,
validated up front, resumable (the file format and what a sweep does: docs/sweeps.md)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import time
from pathlib import Path
from typing import IO, Any, Callable, Collection, Mapping

from bench.config.file_values import check_file_value
from bench.config.lookup import find
from bench.config.parsers import parse_int
from bench.config.parameters import BY_KEY, NOT_APPLICABLE, SWEEP_AXES
from bench.sweep.cells_file import CELL_COLUMNS, append_row, cell_row, keep_only, measured_runs, write_meta  # noqa: F401 - CELL_COLUMNS: read from here too
from bench.sweep.sweep_file import check_target
from bench.results.model import RunResult, newest_unfinished, read_result, utc_now, utc_stamp
from bench.config.run_config import RunConfig, build_config, read_toml
from bench.data import DATA_DIR
from bench.engines import engine_for, get_engine, pooled
from bench.errors import ConfigError, Interrupted

#: The most repetitions of a sweep cell (--repetitions, REPETITIONS, a sweep file's repetitions).
MAX_REPETITIONS = 100

#: Axes a sweep may vary: the keys of a workload file (the parameter table marks which).
SWEEP_KEYS = SWEEP_AXES
_FILE_KEYS = {"description", "workload", "repetitions", "fixed", "matrix", "cells", "target"}
def _cell_config(workload: str, fixed: dict, params: dict, dsn: str | None, where: str) -> RunConfig:
    """One cell's configuration; a value of the cell's that is refused is named with ``where`` it came from
    (ConfigError: ``... (in [matrix] of <file>: axis = value)``, or ``in cells of <file>``)."""
    try:
        return build_config(workload, {**fixed, **params}, dsn=dsn)
    except ConfigError as err:
        if err.param.lower() not in params:
            raise
        raise ConfigError(err.param, f"{err.problem} (in {where}: "
                                     f"{err.param.lower()} = {params[err.param.lower()]!r})") from None


class Sweep:
    """A validated sweep: its cells (``[(cell_id, params, RunConfig)]``) and metadata; build with
    :meth:`load`."""

    def __init__(self, name: str, path: Path, data: dict, cells: list, base: RunConfig, repetitions: int):
        self.name, self.path, self.data, self.cells, self.base, self.repetitions = (
            name, path, data, cells, base, repetitions)

    @classmethod
    def load(cls, name: str, overrides: dict[str, Any] | None = None, repetitions: int | str | None = None,
             dsn: str | None = None) -> "Sweep":
        """Read and validate a sweep file; raises ConfigError (one line, naming the parameter)."""
        path = find("SWEEP", name)
        return cls.from_data(path.stem, path, read_toml(path, "SWEEP"), overrides, repetitions, dsn)

    @classmethod
    def from_data(cls, name: str, path: Path, data: dict, overrides: dict[str, Any] | None = None,
                  repetitions: int | str | None = None, dsn: str | None = None) -> "Sweep":
        """Validate a sweep's table ``data`` (a sweep file's, or an experiment's ``[runs]``) named ``name``;
        ``path`` is named in messages; ``overrides`` (run parameter → value) apply to every cell after
        ``[fixed]``. Raises ConfigError (one line, naming the parameter)."""
        unknown = sorted(set(data) - _FILE_KEYS)
        if unknown:
            raise ConfigError("SWEEP", f"unknown key {unknown[0]!r} in {path.name}; allowed: {', '.join(sorted(_FILE_KEYS))}")
        listed = data.get("cells")
        if listed is not None:  # the cells one by one, instead of a cartesian product
            if "matrix" in data or not isinstance(listed, list) or not listed or not all(
                    isinstance(c, dict) and c for c in listed) or len({json.dumps(c, sort_keys=True) for c in listed}) != len(listed):
                raise ConfigError("SWEEP", f"cells in {path.name} must be a list of distinct, non-empty tables of "
                                           "run parameters, instead of a [matrix]")
            data = {**data, "matrix": {}}
            for cell in listed:
                for axis, value in cell.items():
                    data["matrix"].setdefault(axis, [])
                    if value not in data["matrix"][axis]:
                        data["matrix"][axis].append(value)
        matrix = data.get("matrix") or {}
        if not isinstance(matrix, dict) or not matrix:
            raise ConfigError("SWEEP", f"{path.name} has no [matrix] table; allowed: axes such as index = [\"none\", \"partial\"]")
        for axis, values in matrix.items():
            if axis not in (BY_KEY if listed else SWEEP_KEYS):  # cells one by one may set any parameter
                raise ConfigError("SWEEP", f"axis {axis!r} in {path.name} cannot be swept; allowed: {', '.join(SWEEP_KEYS)}")
            if not isinstance(values, list) or not values or len(set(map(str, values))) != len(values):
                raise ConfigError(axis.upper(), f"the sweep axis in {path.name} must be a non-empty list of distinct values")
            for value in values:
                check_file_value(axis, value, f"[matrix] of {path.name}")
        reps = parse_int("REPETITIONS", repetitions if repetitions is not None else data.get("repetitions", 1),
                         minimum=1, maximum=MAX_REPETITIONS)
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
        combos = listed or [dict(zip(matrix, combo)) for combo in itertools.product(*matrix.values())]
        for i, params in enumerate(combos, start=1):
            cells.append((f"c{i:03d}", params, _cell_config(workload, fixed, params, dsn,
                                                            f"{'cells' if listed else '[matrix]'} of {path.name}")))
        return cls(name, path, data, cells, base, reps)

    @staticmethod
    def measured_config(cfg: RunConfig) -> dict:
        """The parameters a cell measures with: ``cfg.public()`` without the DSN, results directory and notes."""
        return {k: v for k, v in cfg.public().items() if k not in ("dsn", "results", "notes")}

    @property
    def matrix_hash(self) -> str:
        """Identifies what the sweep measures (the cells' effective parameters and repetitions, not the DSN or
        results directory): 16 hex digits."""
        key = self.measured_config
        blob = json.dumps({"cells": [(cid, key(cfg)) for cid, _, cfg in self.cells], "reps": self.repetitions},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def description(self) -> dict:
        """The ``sweep.json`` fields that describe the matrix."""
        target = self.data.get("target") or {}
        return {
            "name": self.name, "description": self.data.get("description", ""),
            "file": str(self.path.resolve().relative_to(DATA_DIR)) if self.path.resolve().is_relative_to(DATA_DIR)
            else str(self.path),
            "matrix_hash": self.matrix_hash, "axes": dict(self.data["matrix"]),
            "base": self.base.public(), "repetitions": self.repetitions,
            "cells": [{"cell_id": cid, "params": params, "config": cfg.public()} for cid, params, cfg in self.cells],
            "target": {"rate_jobs_per_s": target.get("rate_jobs_per_s"), "utilisation": target.get("utilisation", 0.7)},
        }

    def max_connections(self) -> int:
        """The most connections one cell needs from the server (see RunConfig.connections_needed)."""
        return self.largest_budget().server

    def largest_budget(self):
        """The :class:`~bench.config.connection_budget.ConnectionBudget` of the cell that needs the most server
        connections (behind the embedded pooler, the largest ``POOL_SIZE`` and its direct ones)."""
        return max((cfg.connection_budget() for _, _, cfg in self.cells), key=lambda budget: budget.server)


def server_key(cfg: RunConfig) -> str:
    """The server a sweep's cell runs on, the key of its DSN and its saved states: the engine, and the embedded
    PostgreSQL version ``PG_VERSION`` picks (``postgres``, ``postgres-18``, ``mariadb``)."""
    return cfg.engine if cfg.pg_version in ("auto", NOT_APPLICABLE) else f"{cfg.engine}-{cfg.pg_version}"


def run_sweep(sweep: Sweep, dsn: str | Mapping[str, str], results_dir: Path, *, fresh: bool = False,
              log: Callable[[str], None] = print, on_run: Callable[[Path], None] = lambda _run_dir: None,
              deadline: float | None = None, embedded: bool | Collection[str] = False) -> Path:
    """Run (or resume) ``sweep`` against ``dsn`` (or one per :func:`server_key`); returns its directory. ``on_run(run_dir)``
    after each run; none starts past ``deadline`` (``time.monotonic()`` s). ``embedded``: the servers the tool
    started for the sweep (True: the one ``dsn``; else their keys), which serve no one else. Raises
    :class:`Interrupted`."""
    sweep_dir, meta = _open_sweep_dir(sweep, results_dir, fresh, log)
    done = measured_runs(sweep_dir)
    keep_only(sweep_dir, done)  # failed runs of an earlier attempt are measured again
    todo = [(cid, params, cfg, rep) for cid, params, cfg in sweep.cells for rep in range(1, sweep.repetitions + 1)
            if (cid, rep) not in done]
    total = len(sweep.cells) * sweep.repetitions
    if done:
        log(f"{len(done)} of {total} runs already measured; {len(todo)} to go")
    runs = _SweepRuns(sweep, sweep_dir, dsn, on_run, embedded)
    out_of_time = runs.measure_all(todo, total, deadline)
    failed = total - len(measured_runs(sweep_dir))
    meta.update(complete=failed == 0, ended_at=utc_now())
    write_meta(sweep_dir, meta)
    if out_of_time:  # an experiment's budget: its verdict is decided without these runs
        log(f"the time budget ran out: {failed} runs not measured")
    elif failed:
        log(f"{failed} runs failed (see cells.csv); run the sweep again to retry just those")
    if out_of_time or not failed:
        runs.drop_saved_states()
    return sweep_dir


def _open_sweep_dir(sweep: Sweep, results_dir: Path, fresh: bool, log: Callable[[str], None]) -> tuple[Path, dict]:
    """The sweep's directory and its ``sweep.json`` fields: the newest unfinished one of the same matrix
    (unless ``fresh``), else a new one."""
    sweep_dir = None if fresh else newest_unfinished(results_dir / "sweeps", f"{sweep.name}-*/sweep.json",
                                                     lambda meta: meta.get("matrix_hash") == sweep.matrix_hash)
    if sweep_dir is not None:
        log(f"sweep {sweep.name}: resuming {sweep_dir}")
        return sweep_dir, read_result(sweep_dir / "sweep.json")
    sweep_dir = results_dir / "sweeps" / f"{sweep.name}-{utc_stamp()}"
    sweep_dir.mkdir(parents=True)
    meta = {"sweep_id": sweep_dir.name, **sweep.description(), "started_at": utc_now(),
            "ended_at": None, "complete": False}
    write_meta(sweep_dir, meta)
    log(f"sweep {sweep.name}: {len(sweep.cells)} cells x {sweep.repetitions} repetitions -> {sweep_dir}")
    return sweep_dir, meta


class _SweepRuns:
    """The runs of one sweep directory, and the saved history states' schema of each engine they ran."""

    def __init__(self, sweep: Sweep, sweep_dir: Path, dsn: str | Mapping[str, str],
                 on_run: Callable[[Path], None], embedded: bool | Collection[str] = False) -> None:
        self.sweep, self.sweep_dir, self.dsn, self.on_run, self.embedded = sweep, sweep_dir, dsn, on_run, embedded
        self.state_schema: dict[str, tuple[str, str]] = {}  # server_key -> (engine, its saved states' schema)

    def dsn_of(self, key: str) -> str:
        """The DSN of the server :func:`server_key` ``key`` names (the one DSN when the sweep was given one)."""
        return self.dsn[key] if isinstance(self.dsn, Mapping) else self.dsn

    def measure_all(self, todo: list[tuple], total: int, deadline: float | None) -> bool:
        """Measure each ``(cell_id, params, cfg, rep)`` of ``todo`` in order, under a progress bar of ``total``
        runs; True when ``deadline`` stopped it before a run that would have ended after it."""
        from tqdm import tqdm  # here: bench.cli.main imports this module, and --help needs no progress bar

        # disable=None: no bar when stderr is not a terminal (a piped log gets each run's own lines, not redraws)
        bar = tqdm(total=total, initial=total - len(todo), unit="run", desc=self.sweep.name, dynamic_ncols=True,
                   disable=None,
                   bar_format="{desc}: {n_fmt}/{total_fmt} runs |{bar}| {elapsed} elapsed, about {remaining} left")
        run_log = (self.sweep_dir / "sweep.log").open("a")
        try:
            for cid, params, cfg, rep in todo:
                what = ", ".join(f"{k}={v}" for k, v in params.items())
                if deadline is not None and time.monotonic() + cfg.warmup_s + cfg.duration_s > deadline:
                    bar.write(f"  {cid} rep {rep} ({what}): not run, the time budget is spent")
                    return True
                bar.set_postfix_str(f"{cid} rep {rep}: {what}")
                run_log.write(f"== {cid} rep {rep}: {what}\n")
                bar.write(f"  {cid} rep {rep} ({what}): {self._measure(cid, rep, cfg, run_log)}")
                bar.update(1)
        finally:
            bar.close()
            run_log.close()
        return False

    def _measure(self, cid: str, rep: int, cfg: RunConfig, run_log: IO[str]) -> str:
        """Run repetition ``rep`` of cell ``cid``, append its ``cells.csv`` row, return its outcome in one
        line (``failed: <reason>`` when refused). Raises Interrupted when the run was interrupted."""
        from bench import runner  # here: bench.cli.main imports this module, and the run imports Locust (~1 s)

        cfg = dataclasses.replace(cfg, results=str(self.sweep_dir / "runs"))
        started = time.monotonic()
        engine, key = engine_for(cfg), server_key(cfg)
        self.state_schema[key] = (cfg.engine, engine.state_schema_for(self.sweep.base.schema))
        log = lambda line: (run_log.write(line + "\n"), run_log.flush())  # noqa: E731
        try:  # through the cell's own embedded pooler (POOLER) and relay (NET_DELAY_MS), started for this run
            with pooled(cfg, self.dsn_of(key), log=log) as (run_cfg, run_dsn, pooler, relay):
                run_dir = runner.run(run_cfg, run_dsn, log=log, state_schema=self.state_schema[key][1],
                                     embedded=self.embedded if isinstance(self.embedded, bool) else key in self.embedded,
                                     pooler=pooler, relay=relay)
        except KeyboardInterrupt:  # before or after the load (during it, the run returns incomplete)
            run_dir = None
        except (ConfigError, *engine.database_errors) as err:  # e.g. no free connections for this cell
            status = f"failed: {engine.error_message(err)}"
            append_row(self.sweep_dir, cell_row(cid, rep, cfg, status=status, sweep_dir=self.sweep_dir))
            return status
        result = run_dir and RunResult.load(run_dir)
        summary = result.summary if result else {"complete": False}
        if not summary["complete"] and not summary.get("database_lost"):
            raise Interrupted(f"sweep interrupted; run it again to resume: {self.sweep_dir}")
        status = "done" if summary["complete"] else f"failed: database lost ({summary['database_lost']})"
        self.on_run(run_dir)
        append_row(self.sweep_dir, cell_row(cid, rep, cfg, status=status, sweep_dir=self.sweep_dir, run_dir=run_dir,
                                            summary=summary, seeded_backlog=result.run.get("backlog"),
                                            server_release=result.run.get("server_release") or ""))
        claim = summary["claim_latency_us"]
        return (f"{summary['throughput_jobs_per_s']:,} jobs/s, claim p50 {_ms(claim['p50'])}, p99 {_ms(claim['p99'])}"
                + (" SUSPECT" if summary["suspect"] else "") + (" SATURATED" if summary.get("saturated") else "")
                + f" [{time.monotonic() - started:.0f} s]")

    def drop_saved_states(self) -> None:
        """Drop the saved history states' schema on each server the sweep ran on."""
        for key, (name, schema) in self.state_schema.items():
            get_engine(name).drop_schema_at(self.dsn_of(key), schema)


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.2f} ms"
