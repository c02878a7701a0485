"""``qbench experiments``: the catalogue's files, bad input, and a real catalogue run that is
interrupted and resumed (against the real PostgreSQL)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.analysis.experiment_figures import DERIVED, DERIVED_WHY, RunView
from bench.errors import ConfigError
from bench.experiments.catalogue import EXPERIMENTS_DIR, load_catalogue, load_experiment
from bench.experiments.driver import run_catalogue
from bench.sweep.driver import run_sweep
from conftest import REPO, qbench
from waiting import measured_seconds, wait_until

GOOD = '''number = 99
title = "t"
claim = "c"
measures = "m"
budget_s = 30
[runs]
[runs.fixed]
duration = "2s"
warmup = "0s"
[runs.matrix]
workers = [2, 4]
[[figures]]
name = "f"
measure = "ratio"
key = "throughput_jobs_per_s"
of = { workers = 4 }
over = { workers = 2 }
holds_if = ">= 1.2"
'''


def test_every_experiment_file_is_valid_in_both_tiers():
    quick, full = load_catalogue(), load_catalogue(full=True)
    assert [e.name for e in quick] == [e.name for e in full]
    assert len({e.number for e in quick}) == len(quick) == len(list(EXPERIMENTS_DIR.glob("*.toml")))
    for exp in quick + full:  # no plan is refused by its own budget
        assert exp.planned_load_s(exp.sweep()) <= exp.budget_s, (exp.name, exp.full)


def _view(summary: dict, config: dict) -> RunView:
    """A RunView over ``summary`` and ``config`` without files (its own ``value``/``setting`` readers)."""
    view = RunView.__new__(RunView)
    view.summary, view.config = summary, config
    return view


def test_the_network_model_adds_up_what_the_run_measured():
    """Experiment 24's keys: the cycle by Little's law and the model's sum, each part from the run's summary."""
    summary = {"throughput_jobs_per_s": 300.0, "work_duration_us": {"mean": 10000.0}, "jobs_completed": 100,
               "round_trips": {"per_job": 2.0}, "round_trip": {"mean_us": 500.0}, "claims": 110, "completions": 100,
               "latency_split": {"claim": {"server_us": 100.0}, "complete": {"server_us": 50.0}}}
    view = _view(summary, {"workers": 4})
    assert DERIVED["cycle_ms"](view) == pytest.approx(4000 / 300)
    # 10 ms of work + 2 round trips of 0.5 ms + (110 claims × 0.1 ms + 100 completions × 0.05 ms) / 100 jobs
    assert DERIVED["model_cycle_ms"](view) == pytest.approx(10 + 1 + 0.16)
    summary["latency_split"]["claim"].update(server_us=None, not_measured="pg_stat_statements is not in "
                                                                        "shared_preload_libraries")
    assert DERIVED["model_cycle_ms"](view) is None  # not measured, and the figure says why
    assert DERIVED_WHY["model_cycle_ms"](view) == ("the server's execution was not measured (pg_stat_statements is "
                                                   "not in shared_preload_libraries)")


@pytest.mark.parametrize("change, message", [
    (("holds_if = \">= 1.2\"", "holds_if = \"about 1\""), "is not a threshold"),
    (("of = { workers = 4 }", "of = { workers = 8 }"), "workers = 8 is not in [runs.matrix]"),
    (("key = \"throughput_jobs_per_s\"", "key = \"derived.nonsense\""), "allowed derived keys"),
    (("measure = \"ratio\"", "measure = \"guess\""), "allowed: value, ratio, probe"),
    (("warmup = \"0s\"", "warmup = \"soon\""), "--warmup: 'soon' is not a duration"),
    (("budget_s = 30", "budget_s = -1"), "budget_s"),
    (("number = 99", "numbr = 99"), "unknown key 'numbr'"),
    (("key = \"throughput_jobs_per_s\"", "key = \"intervals.nosuch.mean\""), "is not an intervals.csv column"),
    (("of = { workers = 4 }\n", ""), "the runs have 2 cells; name the figure's cell"),
    (("holds_if = \">= 1.2\"\n", "holds_if = \">= 1.2\"\n[full]\nbudget_s = \"x\"\n"), "budget_s must be"),
    (("holds_if = \">= 1.2\"\n", "holds_if = \">= 1.2\"\n[full]\nruns = { matrix = { workers = [8] } }\n"),
     "workers = 4 is not in [runs.matrix]"),
])
def test_a_bad_experiment_file_is_refused_naming_what_is_wrong(tmp_path, change, message):
    path = tmp_path / "bad.toml"
    path.write_text(GOOD.replace(*change))
    with pytest.raises(ConfigError) as err:
        load_experiment(path)
    assert message in str(err.value)
    good = tmp_path / "good.toml"
    good.write_text(GOOD)
    assert load_experiment(good).figures[0]["holds_if"] == ">= 1.2"  # the same file, unchanged, is valid


def test_the_catalogue_loads_for_mariadb_with_its_own_parameters_and_reasons():
    """Read for a MariaDB DSN (nothing connects): every file loads, the PostgreSQL-only ones say
    why, and [runs.postgres] parameters stay out of MariaDB's runs."""
    experiments = load_catalogue(dsn="mysql://root@127.0.0.1:3306/")
    assert all(e.engine == "mariadb" for e in experiments)
    reasons = {e.name: e.reason_not_applicable("mariadb") for e in experiments}
    assert "LISTEN/NOTIFY" in reasons["notify_wakeup"] and "plan cache" in reasons["generic_plan"]
    assert reasons["convoy"] == "" and reasons["long_transaction"] == ""
    long_txn = next(e for e in experiments if e.name == "long_transaction")
    assert long_txn.sweep("mysql://root@127.0.0.1:3306/").base.plan_cache != "force_custom_plan"
    assert long_txn.sweep(None, "postgres").base.plan_cache == "force_custom_plan"
    keys = {engine: [f["key"] for f in long_txn.figures_on(engine)] for engine in ("postgres", "mariadb")}
    assert "intervals.dead_tuples.during" in keys["postgres"] and "intervals.dead_tuples.during" not in keys["mariadb"]
    assert "intervals.history_list_length.during" in keys["mariadb"]


def test_an_unknown_experiment_is_refused_in_one_line(tmp_path):
    proc = qbench("experiments", "no_such_rule", "--results", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "no_such_rule" in proc.stderr and "convoy" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_catalogue_interrupted_in_its_second_experiment_resumes(dsn, tmp_path):
    """lease_reaper then fencing; SIGINT while fencing runs: exit 130. Run again: lease_reaper is
    kept (measured before), fencing's sweep resumes in the same directory, and experiments.json
    and experiments.html give both verdicts, each figure with its threshold."""
    args = [sys.executable, "-m", "bench.cli.main", "experiments", "lease_reaper", "fencing", "--dsn", dsn,
            "--results", str(tmp_path)]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith(" 8. "):
            # inside fencing's run: its first measured second is in its claim log
            wait_until(lambda: any(n >= 1 for d in tmp_path.glob("experiments/*/fencing") for n in measured_seconds(d)),
                       60, "fencing's first measured second")
            proc.send_signal(signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(lines) + rest
    [catalogue] = list((tmp_path / "experiments").iterdir())
    assert json.loads((catalogue / "experiments.json").read_text())["complete"] is False
    assert (catalogue / "lease_reaper" / "outcome.json").is_file() and not (catalogue / "fencing" / "outcome.json").exists()

    again = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resuming {catalogue}" in again.stdout and "measured before" in again.stdout
    meta = json.loads((catalogue / "experiments.json").read_text())
    assert meta["complete"] is True and [o["name"] for o in meta["outcomes"]] == ["lease_reaper", "fencing"]
    fencing = meta["outcomes"][1]
    assert len(list((catalogue / "fencing" / "sweeps").iterdir())) == 1  # resumed, not started again
    assert fencing["verdict"] in ("holds", "does not hold", "inconclusive")
    # The figures are the run's own: recomputed here from its summary.
    [run] = fencing["runs"]
    summary = json.loads((catalogue / Path(run["report"]).parent / "summary.json").read_text())
    stale = next(f for f in fencing["figures"] if f["key"] == "stale_completions")
    assert stale["values"] == [summary["stale_completions"]]
    # Every summary.json key a figure of the catalogue reads is one a run writes (a misspelt one
    # would only show as an inconclusive figure after its runs).
    named = {k.split(".")[0] for e in load_catalogue() + load_catalogue(full=True) if e.probe is None
             for f in e.figures for k in (f["key"], f.get("over_key", f["key"]))
             if k.split(".")[0] not in ("intervals", "derived")}
    assert named and named <= set(summary), sorted(named - set(summary))
    html = (catalogue / "experiments.html").read_text()
    assert "A fencing token rejects a stale completion" in html and "&gt; 0" in html


@pytest.mark.slow
def test_an_experiment_that_cannot_fit_its_budget_is_inconclusive_and_says_why(dsn, tmp_path):
    """Runs that need more than the budget are not started: inconclusive, with the seconds needed
    and the budget; and no run of a sweep starts past its deadline (the budget's clock)."""
    (tmp_path / "over.toml").write_text(GOOD.replace("budget_s = 30", "budget_s = 5"))
    exp = load_experiment(tmp_path / "over.toml", dsn=dsn)
    lines: list[str] = []
    catalogue = run_catalogue([exp], dsn, "postgres", tmp_path / "a", probe_runner=dict, log=lines.append)
    outcome = json.loads((catalogue / exp.name / "outcome.json").read_text())
    assert outcome["verdict"] == "inconclusive" and outcome["runs"] == []
    assert "more than its budget of 5 s" in outcome["reasons"][0], outcome["reasons"]
    sweep_dir = run_sweep(exp.sweep(dsn), dsn, tmp_path / "b", log=lines.append, deadline=time.monotonic())
    assert json.loads((sweep_dir / "sweep.json").read_text())["complete"] is False
    assert not (sweep_dir / "cells.csv").is_file()
    assert any("the time budget ran out: 2 runs not measured" in line for line in lines), lines
