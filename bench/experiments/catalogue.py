"""The experiments catalogue: one TOML file per experiment in ``workloads/experiments/``.

An experiment file (read with :mod:`tomllib`) states::

    number = 1
    title = "Convoy"
    claim = "With plain FOR UPDATE and the claim transaction held ..."   # the rule, one sentence
    measures = "jobs/s against workers, and lock waiters per other worker"  # the figure, in words
    budget_s = 60                  # quick tier: at most this long, load and preparation included
    engines = ["postgres", "mariadb"]          # where it applies (default: both)
    not_applicable = { mariadb = "why" }       # the reason given on the other engines
    accept = ["saturated"]         # run problems that are the point, not noise (ACCEPTABLE)

    [runs]                         # ordinary runs: a sweep's keys (workload, repetitions, fixed, matrix or cells)
    workload = "default"
    [runs.fixed]
    policy = "wait"
    [runs.matrix]
    workers = [4, 16]

    [probe]                        # instead of [runs]: a probe the engine runs (PROBES)
    kind = "offset_lock"

    [[figures]]                    # see bench.analysis.experiment_figures
    name = "throughput at 16 workers / at 4"
    measure = "ratio"
    key = "throughput_jobs_per_s"
    of = { workers = 16 }
    over = { workers = 4 }
    holds_if = "<= 1.3"

    [full]                         # FULL=1: the long version; each key replaces or extends the quick one
    budget_s = 900
    runs = { repetitions = 3, fixed = { duration = "10m" }, matrix = { workers = [4, 16, 64] } }

Every file is validated (every run of every cell, every figure's key and threshold) before
anything touches a database; a bad file is refused in one line naming ``EXPERIMENT``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from bench.analysis.experiment_figures import MEASURES, check_key
from bench.analysis.verdicts import Threshold
from bench.config.parameters import ENGINES
from bench.config.run_config import WORKLOADS_DIR, read_toml
from bench.errors import ConfigError
from bench.sweep.driver import Sweep

EXPERIMENTS_DIR = WORKLOADS_DIR / "experiments"
#: Probes an experiment may ask the engine for (``Engine.<kind>_probe(dsn, schema) -> dict``).
PROBES = ("offset_lock", "subselect_overclaim")
#: Run problems an experiment may accept because they are what it shows.
ACCEPTABLE = ("saturated", "invariants")
_KEYS = {"number", "title", "claim", "measures", "budget_s", "engines", "not_applicable", "accept", "runs", "probe",
         "figures", "full"}
_FIGURE_KEYS = {"name", "measure", "key", "of", "over", "over_key", "holds_if", "unit", "note"}
_FULL_KEYS = {"budget_s", "runs"}
_RUN_KEYS = {"workload", "repetitions", "fixed", "matrix", "cells"}
#: Seconds a run costs beyond its warm-up and measured window (prepare, audit, files, report),
#: measured on the 2-core reference machine; used only to refuse a plan that cannot fit its budget.
RUN_OVERHEAD_S = 6.0


def _bad(path: Path, message: str) -> ConfigError:
    return ConfigError("EXPERIMENT", f"{path.name}: {message}")


@dataclass(frozen=True)
class Experiment:
    """One validated experiment file (see the module docstring); ``full`` tells which tier it was read for."""

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

    def sweep(self, dsn: str | None = None) -> Sweep | None:
        """The experiment's runs as a sweep named after it (None for a probe); raises ConfigError."""
        if self.runs is None:
            return None
        return Sweep.from_data(self.name, self.path, dict(self.runs), dsn=dsn)

    def planned_load_s(self, sweep: Sweep | None) -> float:
        """Seconds the runs need at least: warm-up + measured window + :data:`RUN_OVERHEAD_S` per run."""
        if sweep is None:
            return RUN_OVERHEAD_S
        return sum(cfg.warmup_s + cfg.duration_s + RUN_OVERHEAD_S for _, _, cfg in sweep.cells) * sweep.repetitions

    def reason_not_applicable(self, engine: str) -> str:
        """Why the experiment does not apply on ``engine``, or "" when it does."""
        if engine in self.engines:
            return ""
        return self.not_applicable.get(engine) or f"this experiment applies to {', '.join(self.engines)} only"

    def describe(self) -> dict:
        """The fields ``experiments.json`` records for the experiment."""
        return {"name": self.name, "number": self.number, "title": self.title, "claim": self.claim,
                "measures": self.measures, "budget_s": self.budget_s, "tier": "full" if self.full else "quick",
                "file": str(self.path.relative_to(WORKLOADS_DIR.parent)) if self.path.is_relative_to(WORKLOADS_DIR.parent)
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


def _check_figure(path: Path, fig: Any, i: int, matrix: Mapping[str, Sequence], probe: bool) -> dict:
    where = f"[[figures]] {i}"
    if not isinstance(fig, Mapping):
        raise _bad(path, f"{where} is not a table")
    unknown = sorted(set(fig) - _FIGURE_KEYS)
    if unknown:
        raise _bad(path, f"unknown key {unknown[0]!r} in {where}; allowed: {', '.join(sorted(_FIGURE_KEYS))}")
    for key in ("name", "measure", "key", "holds_if"):
        if not isinstance(fig.get(key), str) or not fig[key]:
            raise _bad(path, f"{where} needs {key} (text)")
    if fig["measure"] not in MEASURES:
        raise _bad(path, f"{where} measure {fig['measure']!r}; allowed: {', '.join(MEASURES)}")
    if (fig["measure"] == "probe") != probe:
        raise _bad(path, f"{where}: measure 'probe' goes with a [probe] and only with one")
    try:
        Threshold.parse(fig["holds_if"])
        if not probe:
            check_key(fig["key"])
            check_key(fig.get("over_key", fig["key"]))
    except ValueError as err:
        raise _bad(path, f"{where}: {err}") from None
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


def load_experiment(path: Path, full: bool = False, dsn: str | None = None) -> Experiment:
    """Read and validate one experiment file (its runs too); raises ConfigError (``EXPERIMENT``, or
    the run parameter at fault)."""
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
            runs = _merge_full(runs, extra["runs"])
        matrix = runs.get("matrix") or {}
        for cell in runs.get("cells") or []:
            for axis, value in (cell.items() if isinstance(cell, Mapping) else ()):
                matrix = {**matrix, axis: [*matrix.get(axis, []), value]}
    elif not isinstance(probe, Mapping) or set(probe) != {"kind"} or probe["kind"] not in PROBES:
        raise _bad(path, f"[probe] must be {{ kind = … }}; allowed kinds: {', '.join(PROBES)}")
    figures = data.get("figures")
    if not isinstance(figures, list) or not figures:
        raise _bad(path, "needs at least one [[figures]] table")
    checked = tuple(_check_figure(path, f, i, matrix, probe is not None) for i, f in enumerate(figures, 1))
    exp = Experiment(path.stem, path, number, data["title"].strip(), " ".join(data["claim"].split()),
                     " ".join(data["measures"].split()), float(budget), tuple(engines), dict(not_applicable),
                     tuple(accept), runs, probe["kind"] if probe else None, checked, full)
    exp.sweep(dsn)  # validates every cell's run parameters
    return exp


def experiment_names() -> list[str]:
    """The names of the experiments in the catalogue directory, in file-name order."""
    return sorted(p.stem for p in EXPERIMENTS_DIR.glob("*.toml"))


def load_catalogue(names: Sequence[str] = (), full: bool = False, dsn: str | None = None) -> list[Experiment]:
    """The experiments ``names`` (all when empty), validated, in catalogue order (``number``).

    A name may be the file's stem (``convoy``) or its number (``1``). Raises ConfigError
    (``EXPERIMENT``) naming the unknown name and listing the known ones, or the file at fault.
    """
    paths = {p.stem: p for p in EXPERIMENTS_DIR.glob("*.toml")}
    experiments = [load_experiment(p, full, dsn) for p in paths.values()]
    by_number = {str(e.number): e for e in experiments}
    numbers = sorted(e.number for e in experiments)
    if len(set(numbers)) != len(numbers):
        raise ConfigError("EXPERIMENT", f"two files in {EXPERIMENTS_DIR.name}/ share a number")
    chosen = []
    for name in names:
        exp = next((e for e in experiments if e.name == name), None) or by_number.get(str(name))
        if exp is None:
            raise ConfigError("EXPERIMENT", f"{name!r} is not in the catalogue; allowed: "
                                            f"{', '.join(e.name for e in sorted(experiments, key=lambda e: e.number))}")
        if exp not in chosen:
            chosen.append(exp)
    return sorted(chosen or experiments, key=lambda e: e.number)
