"""The one parameter table makes every list of run parameters: the parameters reference (tests/test_docs.py), CLI options, Make
pass-through, RunConfig fields, workload keys and sweep axes (bench/config/parameters.py)."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from bench.cli.main import build_parser
from bench.config.parameters import BY_KEY, PARAMETERS, SWEEP_AXES
from bench.config.run_config import RunConfig, build_config
from bench.errors import ConfigError
from bench.sweep.driver import SWEEP_KEYS
from bad_values import BAD_VALUES

REPO = Path(__file__).resolve().parents[1]


def _options(subcommand: str) -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[subcommand]
    return {s for action in sub._actions for s in action.option_strings}


@pytest.mark.parametrize("subcommand", ["run", "sweep", "capacity"])
def test_every_parameter_is_an_option_of_the_commands_that_take_run_parameters(subcommand):
    assert {p.option for p in PARAMETERS} <= _options(subcommand)


def test_runconfig_has_one_field_per_parameter_and_nothing_else_but_workload_dsn_dsn_direct_notes():
    """``dsn_direct`` is set by the run (the server behind the embedded pooler), not a parameter."""
    fields = [f.name for f in dataclasses.fields(RunConfig)]
    assert fields == [p.attribute for p in PARAMETERS] + ["workload", "dsn", "dsn_direct", "notes"]


@pytest.mark.parametrize("engine", ["postgres", "mariadb"])
def test_runconfig_field_types_hold_each_engines_defaults(engine):
    """The types generated from the table's kinds hold the parsed defaults, n/a included."""
    cfg = build_config("default", {"engine": engine})
    for field in dataclasses.fields(RunConfig):
        if field.name not in ("workload", "dsn", "dsn_direct", "notes"):
            assert isinstance(getattr(cfg, field.name), field.type), (field.name, getattr(cfg, field.name), field.type)
    assert dataclasses.fields(RunConfig)[PARAMETERS.index(BY_KEY["prepared"])].type == bool | str


def test_defaults_come_from_the_table():
    cfg = build_config("default")
    for p in PARAMETERS:
        if p.key == "library_mode":  # a queue library's parameter: n/a for QUEUE=builtin, the table's for a library
            assert cfg.library_mode == "n/a"
            assert build_config("default", {"queue": "procrastinate"}).library_mode == p.parse(p.default)
            continue
        assert getattr(cfg, p.attribute) == p.parse(p.default), p.key


def test_sweep_axes_are_the_tables_sweepable_parameters():
    assert SWEEP_KEYS == SWEEP_AXES and set(SWEEP_AXES) <= set(BY_KEY)


def test_make_passes_every_parameter_to_qbench():
    """``make -n bench NAME=value`` for every parameter: each appears as ``--option='value'``; a
    yes/no given as 0 as ``--no-option`` (and as 1 as ``--option``, below)."""
    values = {p.name: "0" if p.kind == "flag" else f"v{i}" for i, p in enumerate(PARAMETERS)}
    proc = subprocess.run(["make", "-n", "-W", "pyproject.toml", "bench", *(f"{k}={v}" for k, v in values.items())],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    command = [line for line in proc.stdout.splitlines() if "qbench run" in line][-1]
    flags = [p for p in PARAMETERS if p.kind == "flag"]
    assert flags
    for p in PARAMETERS:
        want = f"--no-{p.option[2:]}" if p.kind == "flag" else f"{p.option}='{values[p.name]}'"
        assert f" {want}" in command, (p.name, command)
    on = subprocess.run(["make", "-n", "-W", "pyproject.toml", "bench", *(f"{p.name}=1" for p in flags)],
                        cwd=REPO, capture_output=True, text=True, timeout=60)
    command = [line for line in on.stdout.splitlines() if "qbench run" in line][-1]
    assert all(f" {p.option}" in command.split("--no-")[0] and "--no-" not in command for p in flags), command
    unset = subprocess.run(["make", "-n", "bench"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert not any(f"{p.option}=" in unset.stdout for p in PARAMETERS), unset.stdout


def test_every_parameter_has_bad_values_and_each_is_refused_by_its_parser():
    """Every parameter has values it must refuse in tests/bad_values.py (and nothing else is there);
    each is refused by the parameter's own parser (or the results-dir check, which needs the file
    system), naming the parameter; tests/test_bad_input.py runs them through the CLI, workload files
    and sweep files."""
    assert set(BAD_VALUES) == set(BY_KEY)
    for p in PARAMETERS:
        assert BAD_VALUES[p.key], f"{p.key} has no bad value"
        if p.key == "results":
            continue
        for value in BAD_VALUES[p.key]:
            with pytest.raises(ConfigError) as err:
                p.parse(value)
            assert err.value.param == p.name and "allowed" in str(err.value), (p.key, value, err.value)
