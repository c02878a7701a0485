"""The experiments catalogue: one TOML file per experiment in ``bench/data/workloads/experiments/``, read and
validated (every run of every cell, every figure's key and threshold) before anything touches a database; the
file format is in docs/experiments.md."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from bench.analysis.experiment_figures import MEASURES, check_key
from bench.analysis.verdicts import DECIDE_BY, Threshold
from bench.config.parameters import ENGINES
from bench.config.run_config import build_config, read_toml
from bench.data import DATA_DIR, EXPERIMENTS_DIR
from bench.errors import ConfigError
from bench.results.run_files import INTERVAL_COLUMNS
from bench.sweep.driver import Sweep

#: Probes an experiment may ask the engine for (``Engine.<kind>_probe(dsn, schema) -> dict``), each
#: with the facts it returns (a figure's key; ``name[v]`` asks whether the list ``name`` holds ``v``).
_LOCK_PAIR = ("a_pid", "a_got", "b_pid", "b_got", "a_later_pid", "holder_pids", "excluded")
_LISTENER = ("listen_pid", "listen_backend_alive", "sent", "received", "lost", "pickup_ms_p50", "pickup_ms_max")
PROBES = {"offset_lock": ("offset_returned", "skip_locked_got", "locked_rows"),
          "subselect_overclaim": ("limit", "subselect_rows", "tool_claim_rows"),
          "advisory_lock_pool": ("pool_size", *(f"{m}_{f}" for m in ("transaction", "session") for f in _LOCK_PAIR)),
          "listen_pool": ("pool_size", *(f"{m}_{f}" for m in ("transaction", "session") for f in _LISTENER))}
#: The probes that start a throwaway PgBouncer (bench/engines/postgres/pooler_probes.py): its binary is looked
#: for before the catalogue starts.
POOLER_PROBES = ("advisory_lock_pool", "listen_pool")
#: Run problems an experiment may accept because they are what it shows.
ACCEPTABLE = ("saturated", "invariants")
_KEYS = {"number", "title", "claim", "measures", "budget_s", "engines", "not_applicable", "accept", "runs", "probe",
         "figures", "full"}
_FIGURE_KEYS = {"name", "measure", "key", "of", "over", "over_key", "holds_if", "unit", "note", "engine",
                "decide_by"}
_FULL_KEYS = {"budget_s", "runs"}
_RUN_KEYS = {"workload", "repetitions", "fixed", "matrix", "cells", *ENGINES}
#: Seconds a run costs beyond its warm-up and measured window (prepare, audit, files, report),
#: measured on the 2-core reference machine; used only to refuse a plan that cannot fit its budget.
RUN_OVERHEAD_S = 6.0


def _bad(path: Path, message: str) -> ConfigError:
    return ConfigError("EXPERIMENT", f"{path.name}: {message}")


@dataclass(frozen=True)
class Experiment:
    """One validated experiment file; ``full`` tells which tier it was read for."""

    name: str
    path: Path
    number: int
    title: str
    claim: str
    measures: str
    budget_s: float
    engines: tuple[str, ...]
    not_applicable: Mapping[str, str]
    accept: tuple[str, ...]
    runs: Mapping[str, Any] | None
    probe: str | None
    figures: tuple[Mapping[str, Any], ...]
    full: bool
    engine: str = "postgres"

    def sweep(self, dsn: str | None = None, engine: str | None = None) -> Sweep | None:
        """The experiment's runs on ``engine`` (default: the one it was loaded for) as a sweep named
        after it, with that engine's ``[runs.<engine>]`` parameters; None for a probe. Raises ConfigError."""
        if self.runs is None:
            return None
        engine = engine or self.engine
        data = {k: v for k, v in self.runs.items() if k not in ENGINES}
        data["fixed"] = {**(data.get("fixed") or {}), **(self.runs.get(engine) or {})}
        if not dsn:
            data["fixed"]["engine"] = engine
        return Sweep.from_data(self.name, self.path, data, dsn=dsn)

    def planned_load_s(self, sweep: Sweep | None) -> float:
        """Seconds the runs need at least: warm-up + measured window + :data:`RUN_OVERHEAD_S` per run."""
        if sweep is None:
            return RUN_OVERHEAD_S
        return sum(cfg.warmup_s + cfg.duration_s + RUN_OVERHEAD_S for _, _, cfg in sweep.cells) * sweep.repetitions

    def figures_on(self, engine: str) -> list[Mapping[str, Any]]:
        """The figures measured on ``engine`` (those without an ``engine`` key, and its own)."""
        return [f for f in self.figures if f.get("engine", engine) == engine]

    def reason_not_applicable(self, engine: str) -> str:
        """Why the experiment does not apply on ``engine``, or "" when it does."""
        if engine in self.engines:
            return ""
        return self.not_applicable.get(engine) or f"this experiment applies to {', '.join(self.engines)} only"

    def describe(self) -> dict:
        """The fields ``experiments.json`` records for the experiment."""
        return {"name": self.name, "number": self.number, "title": self.title, "claim": self.claim,
                "measures": self.measures, "budget_s": self.budget_s, "tier": "full" if self.full else "quick",
                "file": str(self.path.relative_to(DATA_DIR)) if self.path.is_relative_to(DATA_DIR)
                else str(self.path), "probe": self.probe, "accept": list(self.accept),
                "figures": [dict(f) for f in self.figures]}


def _merge_full(quick: Mapping[str, Any], full: Mapping[str, Any]) -> dict:
    """The quick ``[runs]`` with ``[full].runs`` laid over it (fixed and matrix merged key by key)."""
    merged = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in quick.items()}
    for key, value in full.items():
        if key in ("fixed", "matrix") and isinstance(value, Mapping):
            merged[key] = {**merged.get(key, {}), **value}
        else:
            merged[key] = value
    return merged


def _check_key(key: str, probe: str | None) -> None:
    """Raise ValueError when ``key`` cannot name a figure of this experiment's runs or probe."""
    if probe is not None:
        name = key.split("[", 1)[0] if key.endswith("]") else key
        if name not in PROBES[probe]:
            raise ValueError(f"{key!r} is not a fact of the {probe} probe; allowed: {', '.join(PROBES[probe])}")
        return
    check_key(key)
    parts = key.split(".")
    if parts[0] == "intervals" and parts[1] not in INTERVAL_COLUMNS:
        raise ValueError(f"{key!r}: {parts[1]!r} is not an intervals.csv column; allowed: {', '.join(INTERVAL_COLUMNS)}")


def _check_figure(path: Path, fig: Any, i: int, matrix: Mapping[str, Sequence], probe: str | None,
                  cells: int) -> dict:
    where = f"[[figures]] {i}"
    if not isinstance(fig, Mapping):
        raise _bad(path, f"{where} is not a table")
    unknown = sorted(set(fig) - _FIGURE_KEYS)
    if unknown:
        raise _bad(path, f"unknown key {unknown[0]!r} in {where}; allowed: {', '.join(sorted(_FIGURE_KEYS))}")
    for key in ("name", "measure", "key", "holds_if"):
        if not isinstance(fig.get(key), str) or not fig[key]:
            raise _bad(path, f"{where} needs {key} (text)")
    if "engine" in fig and fig["engine"] not in ENGINES:
        raise _bad(path, f"{where} engine {fig['engine']!r}; allowed: {', '.join(ENGINES)} (the figure is measured there only)")
    if fig.get("decide_by", "repetitions") not in DECIDE_BY:
        raise _bad(path, f"{where} decide_by {fig['decide_by']!r}; allowed: {', '.join(DECIDE_BY)}")
    if fig["measure"] not in MEASURES:
        raise _bad(path, f"{where} measure {fig['measure']!r}; allowed: {', '.join(MEASURES)}")
    if (fig["measure"] == "probe") != (probe is not None):
        raise _bad(path, f"{where}: measure 'probe' goes with a [probe] and only with one")
    try:
        Threshold.parse(fig["holds_if"])
        _check_key(fig["key"], probe)
        if "over_key" in fig:
            _check_key(fig["over_key"], probe)
    except ValueError as err:
        raise _bad(path, f"{where}: {err}") from None
    if probe is None and cells > 1 and "of" not in fig:
        raise _bad(path, f"{where}: the runs have {cells} cells; name the figure's cell with of = {{ <axis> = <value> }}")
    if fig["measure"] == "ratio" and "over" not in fig and "over_key" not in fig:
        raise _bad(path, f"{where}: a ratio needs over = {{ <axis> = <value> }} or over_key")
    for sel in ("of", "over"):
        selector = fig.get(sel)
        if selector is None:
            continue
        if not isinstance(selector, Mapping):
            raise _bad(path, f"{where} {sel} must be a table of matrix values")
        for axis, value in selector.items():
            if axis not in matrix or value not in matrix[axis]:
                raise _bad(path, f"{where} {sel}: {axis} = {value!r} is not in [runs.matrix]")
    return dict(fig)


def load_experiment(path: Path, full: bool = False, dsn: str | None = None, engine: str | None = None) -> Experiment:
    """Read and validate one experiment file, both tiers (``full`` says which one is returned) and
    its runs on every engine it applies to (on ``engine``, default the DSN's, with ``dsn``);
    raises ConfigError (``EXPERIMENT``, or the run parameter at fault)."""
    engine = engine or build_config("default", {}, dsn=dsn).engine
    _load(path, not full, dsn, engine)  # the other tier must be valid too
    return _load(path, full, dsn, engine)


def _load(path: Path, full: bool, dsn: str | None, engine: str) -> Experiment:
    data = read_toml(path, "EXPERIMENT")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise _bad(path, f"unknown key {unknown[0]!r}; allowed: {', '.join(sorted(_KEYS))}")
    for key in ("title", "claim", "measures"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise _bad(path, f"needs {key} (text)")
    number = data.get("number")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise _bad(path, "needs number (a positive integer: its place in the catalogue)")
    extra = data.get("full") or {}
    if not isinstance(extra, Mapping) or set(extra) - _FULL_KEYS:
        raise _bad(path, f"[full] may set only {', '.join(sorted(_FULL_KEYS))}")
    budget = extra.get("budget_s", data.get("budget_s")) if full else data.get("budget_s")
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget <= 86_400:
        raise _bad(path, "budget_s must be a number of seconds from 1 to 86400")
    engines = data.get("engines", list(ENGINES))
    if not isinstance(engines, list) or not engines or any(e not in ENGINES for e in engines):
        raise _bad(path, f"engines must be a list of {', '.join(ENGINES)}")
    not_applicable = data.get("not_applicable") or {}
    if not isinstance(not_applicable, Mapping) or any(e not in ENGINES or not isinstance(r, str)
                                                        for e, r in not_applicable.items()):
        raise _bad(path, "not_applicable must map an engine name to a reason (text)")
    accept = data.get("accept", [])
    if not isinstance(accept, list) or any(a not in ACCEPTABLE for a in accept):
        raise _bad(path, f"accept must be a list of {', '.join(ACCEPTABLE)}")
    runs, probe = data.get("runs"), data.get("probe")
    if (runs is None) == (probe is None):
        raise _bad(path, "needs [runs] or [probe], one of them")
    matrix: Mapping[str, Sequence] = {}
    if runs is not None:
        if not isinstance(runs, Mapping) or set(runs) - _RUN_KEYS:
            raise _bad(path, f"[runs] may set only {', '.join(sorted(_RUN_KEYS))}")
        if full and "runs" in extra:
            if not isinstance(extra["runs"], Mapping) or set(extra["runs"]) - _RUN_KEYS:
                raise _bad(path, f"[full] runs may set only {', '.join(sorted(_RUN_KEYS))}")
            runs = _merge_full(runs, extra["runs"])
        matrix = runs.get("matrix") or {}
        for cell in runs.get("cells") or []:
            for axis, value in (cell.items() if isinstance(cell, Mapping) else ()):
                matrix = {**matrix, axis: [*matrix.get(axis, []), value]}
    elif not isinstance(probe, Mapping) or set(probe) != {"kind"} or probe.get("kind") not in PROBES:
        raise _bad(path, f"[probe] must be {{ kind = … }}; allowed kinds: {', '.join(PROBES)}")
    figures = data.get("figures")
    if not isinstance(figures, list) or not figures:
        raise _bad(path, "needs at least one [[figures]] table")
    cells = 0
    if runs is not None:
        cells = len(runs.get("cells") or []) or math.prod(len(v) if isinstance(v, list) else 1
                                                            for v in (runs.get("matrix") or {}).values())
    checked = tuple(_check_figure(path, f, i, matrix, probe["kind"] if probe else None, cells)
                    for i, f in enumerate(figures, 1))
    exp = Experiment(path.stem, path, number, data["title"].strip(), " ".join(data["claim"].split()),
                     " ".join(data["measures"].split()), float(budget), tuple(engines), dict(not_applicable),
                     tuple(accept), runs, probe["kind"] if probe else None, checked, full, engine)
    for name in exp.engines:  # every cell's run parameters, on each engine it applies to
        exp.sweep(dsn if name == engine else None, name)
    return exp


def load_catalogue(names: Sequence[str] = (), full: bool = False, dsn: str | None = None) -> list[Experiment]:
    """The experiments ``names`` (all of the catalogue when empty), validated, in catalogue order
    (``number``), for the engine of ``dsn``. A name is a file's stem (``convoy``), a number (``1``) or a path
    to a ``.toml``. Raises ConfigError: ``EXPERIMENTS`` for an unknown name, ``EXPERIMENT`` for a bad file."""
    engine = build_config("default", {}, dsn=dsn).engine
    experiments = [load_experiment(p, full, dsn, engine) for p in sorted(EXPERIMENTS_DIR.glob("*.toml"))]
    by_number: dict[str, Experiment] = {}
    for exp in experiments:
        if str(exp.number) in by_number:
            raise ConfigError("EXPERIMENT", f"{by_number[str(exp.number)].path.name} and {exp.path.name} in "
                                            f"{EXPERIMENTS_DIR.name}/ share the number {exp.number}")
        by_number[str(exp.number)] = exp
    ordered = sorted(experiments, key=lambda e: e.number)
    chosen = []
    for name in names:
        exp = next((e for e in experiments if e.name == name), None) or by_number.get(str(name))
        if exp is None and str(name).endswith(".toml"):
            if not Path(name).is_file():
                raise ConfigError("EXPERIMENTS", f"no experiment file {name!r}")
            exp = load_experiment(Path(name), full, dsn, engine)
        if exp is None:
            raise ConfigError("EXPERIMENTS", f"{name!r} is not in the catalogue; allowed: a name ("
                                             f"{', '.join(e.name for e in ordered)}), a number "
                                             f"({', '.join(str(e.number) for e in ordered)}) or a path to a .toml file")
        if exp not in chosen:
            chosen.append(exp)
    return sorted(chosen, key=lambda e: e.number) if chosen else ordered
