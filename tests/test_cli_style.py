"""The command line and Make the ecosystem's way: option groups with every default shown, one
yes/no style (``--x``/``--no-x``, Make ``X=1|0``, files ``true|false``), and Make refusing a
variable its target does not read."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli.main import LOAD_COMMANDS, build_parser
from bench.config.parameter import GROUPS
from bench.config.parameters import PARAMETERS
from bench.config.run_config import build_config
from bench.errors import ConfigError
from cli_in_process import qbench_in_process
from conftest import qbench

REPO = Path(__file__).resolve().parents[1]
RUN_COMMANDS = ("run", "sweep", "capacity", "plan", "master")


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a for a in parser._actions if a.dest == "command").choices


def _options(sub: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in sub._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


@pytest.mark.parametrize("command", sorted(_subcommands()))
def test_every_option_of_every_command_shows_its_default(command):
    sub = _subcommands()[command]
    shown = [a for a in _options(sub) if a.help != argparse.SUPPRESS]  # hidden: an option the command sets itself
    missing = [a.option_strings[0] for a in shown
               if "(default: " not in (a.help or "") and not (a.help or "").endswith("(required)")]
    assert not missing, f"qbench {command}: options without a default (or '(required)') in their help: {missing}"
    assert not _options(sub) or "(default: " in sub.format_help()


@pytest.mark.parametrize("command", RUN_COMMANDS)
def test_run_parameters_are_in_their_groups(command):
    """Each parameter sits in the group the table names, every group has options, and the help
    prints the groups' titles in the table's order."""
    sub = _subcommands()[command]
    by_title = {g.title: {s for a in g._group_actions for s in a.option_strings} for g in sub._action_groups}
    for p in PARAMETERS:
        assert p.option in by_title[GROUPS[p.group]], (command, p.key, p.group)
    text = sub.format_help()
    positions = [text.index(title + ":") for title in GROUPS.values()]
    assert positions == sorted(positions), positions
    assert {"--dsn", "--allow-remote"} <= by_title[GROUPS["database"]]


def test_run_own_options_go_to_their_groups():
    by_title = {g.title: {s for a in g._group_actions for s in a.option_strings}
                for g in _subcommands()["run"]._action_groups}
    assert "--strict" in by_title[GROUPS["output"]] and "--workload" in by_title[GROUPS["load"]]


def test_every_parameter_has_a_group_of_the_five():
    assert set(GROUPS) == {"design", "load", "faults", "database", "output"}
    assert all(p.group in GROUPS for p in PARAMETERS)
    assert {p.group for p in PARAMETERS} == set(GROUPS)


@pytest.mark.parametrize("command", sorted(c for c, sub in _subcommands().items()
                                           if any("--dsn" in a.option_strings for a in _options(sub))))
def test_dsn_help_names_both_engines(command):
    dsn = next(a for a in _options(_subcommands()[command]) if "--dsn" in a.option_strings)
    assert "postgresql://" in dsn.help and "mysql://" in dsn.help and "PostgreSQL DSN" not in dsn.help, dsn.help


# ---- one yes/no style --------------------------------------------------------------------------

def test_yes_no_parameters_are_switch_pairs_on_the_command_line():
    flags = [p for p in PARAMETERS if p.kind == "flag"]
    assert {p.key for p in flags} >= {"prepared", "autovacuum"}
    parser = build_parser()
    given = parser.parse_args(["run", "--no-prepared", "--no-autovacuum"])
    assert given.prepared is False and given.autovacuum is False
    assert parser.parse_args(["run", "--prepared"]).prepared is True
    assert parser.parse_args(["run"]).prepared is None  # left out: the workload's value
    cfg = build_config("default", {"prepared": given.prepared, "autovacuum": given.autovacuum})
    assert cfg.prepared is False and cfg.autovacuum is False
    assert build_config("default").autovacuum is True


@pytest.mark.parametrize("argv, name", [(["--prepared=0"], "PREPARED"), (["--prepared", "0"], "PREPARED"),
                                        (["--autovacuum", "off"], "AUTOVACUUM")])
def test_the_old_spellings_are_refused_in_one_line_naming_the_parameter(argv, name, tmp_path):
    proc = qbench_in_process("run", "--results", str(tmp_path / "r"), *argv)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and f": --{name.lower()}: takes no value" in lines[0] and "--no-" in lines[0], lines
    assert "allowed" in lines[0], lines
    assert not (tmp_path / "r").exists()


def test_files_take_true_false_and_still_1_0(tmp_path):
    path = tmp_path / "w.toml"
    path.write_text("prepared = false\nautovacuum = false\n")
    cfg = build_config(str(path))
    assert cfg.prepared is False and cfg.autovacuum is False
    path.write_text("prepared = 0\nautovacuum = 1\n")
    cfg = build_config(str(path))
    assert cfg.prepared is False and cfg.autovacuum is True


@pytest.mark.parametrize("literal", ['"off"', '"on"', "2"])
def test_an_old_on_off_in_a_file_is_refused_naming_the_parameter(tmp_path, literal):
    path = tmp_path / "old.toml"
    path.write_text(f"autovacuum = {literal}\n")
    with pytest.raises(ConfigError) as err:
        build_config(str(path))
    assert err.value.param == "AUTOVACUUM" and "allowed: true or false" in str(err.value), err.value
    sweep = tmp_path / "old_sweep.toml"
    sweep.write_text(f"[fixed]\nautovacuum = {literal}\n\n[matrix]\ntxn = [\"short\"]\n")
    proc = qbench_in_process("sweep", str(sweep), "--results", str(tmp_path / "r"))
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("qbench: --autovacuum: ") and "allowed: true or false" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_no_file_in_the_repository_says_on_or_off_for_a_yes_no():
    names = {p.key for p in PARAMETERS if p.kind == "flag"}
    offenders = [f"{path.relative_to(REPO)}: {line.strip()}" for path in sorted(REPO.glob("workloads/**/*.toml"))
                 for line in path.read_text().splitlines()
                 for name in names if f'{name} = "on"' in line or f'{name} = "off"' in line]
    assert not offenders, offenders


def test_in_process_calls_refuse_to_reach_the_load(tmp_path):
    """The guard of the in-process bad-input tests is real: input good enough to start a run stops
    where the command would get its engine, before it connects or writes a file; without a DSN, where
    it would start the embedded server."""
    for dsn in (["--dsn", "postgresql://postgres@127.0.0.1:5432/postgres"], []):
        with pytest.raises(AssertionError, match="input reached the database"):
            qbench_in_process("run", *dsn, "--duration", "1s", "--results", str(tmp_path / "r"))
        assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_every_command_is_known_to_run_load_or_not():
    """main() patches gevent for the commands that run load; a new command must say which it is."""
    assert set(_subcommands()) == LOAD_COMMANDS | {"report", "compare", "sweep-report", "clean"}


def _imported(*argv: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """``qbench ARGV`` in a fresh interpreter, and the top-level packages it imported (``-X importtime``)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "bench.cli.main", *argv], capture_output=True,
                          text=True, cwd=REPO, timeout=60)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
    return proc, {line.rsplit("|", 1)[1].strip().split(".")[0] for line in lines}


def test_help_and_a_refusal_import_no_driver_and_no_heavy_library():
    """``qbench run --help`` imports no database driver, no gevent, no Locust, no matplotlib or pandas;
    a refused value of a command that runs load has gevent patched (main() does it before the command) and
    still no driver, Locust or matplotlib."""
    heavy = {"psycopg", "pymysql", "locust", "matplotlib", "pandas"}
    proc, imported = _imported("run", "--help")
    assert proc.returncode == 0 and not imported & (heavy | {"gevent"}), sorted(imported & (heavy | {"gevent"}))
    proc, imported = _imported("run", "--workers", "abc", "--dsn", "postgresql://postgres@127.0.0.1:5432/postgres")
    assert proc.returncode == 2 and "gevent" in imported and not imported & heavy, sorted(imported & heavy)


@pytest.mark.parametrize("argv, line", [
    ((), "qbench: a command is required; allowed: run, sweep, "),
    (("run", "--worker", "3"), "qbench: unrecognized arguments: --worker 3 (did you mean --workers?); "
                               "allowed: the options qbench run --help lists"),
    (("sweep", "batch", "--polcy=nowait"), "(did you mean --policy?); allowed: the options qbench sweep --help lists"),
    (("run", "--bogus"), "qbench: unrecognized arguments: --bogus; allowed: the options qbench run --help lists"),
])
def test_an_unknown_command_line_names_what_is_allowed(argv, line):
    """No command lists the commands; an unknown option names the nearest known one, if one is near."""
    proc = qbench_in_process(*argv)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and line in lines[0], lines
    assert argv[:1] != ("run",) or "--bogus" not in argv or "did you mean" not in lines[0]


# ---- Make --------------------------------------------------------------------------------------

def _make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-n", "-W", "pyproject.toml", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def _command(proc: subprocess.CompletedProcess, what: str) -> str:
    return " ".join(line for line in proc.stdout.splitlines() if what in line or line.startswith("\t"))


@pytest.mark.parametrize("args, named, hint", [
    (("bench", "WORKER=50"), "WORKER", "WORKERS"),
    (("sweep", "SWEEP=scaling", "WORKLOAD=x"), "WORKLOAD", "SWEEP"),
    (("calibrate", "POLICY=wait"), "POLICY", "CAL_WORKERS"),
    (("report", "RUN=results/x", "EXPERIMENT=convoy"), "EXPERIMENT", "RUN"),
    (("experiments", "EXPERIMENT=convoy"), "EXPERIMENT", "EXPERIMENTS"),
])
def test_make_refuses_a_variable_its_target_does_not_read(args, named, hint):
    proc = _make(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{named}:" in lines[0] and "allowed" in lines[0] and hint in lines[0], lines
    assert "qbench" not in proc.stdout


def test_make_takes_the_variables_its_target_reads():
    bench = _make("bench", "WORKERS=50", "PREPARED=0", "AUTOVACUUM=1", "STRICT=1", "DSN=postgresql://127.0.0.1/x")
    assert bench.returncode == 0, bench.stderr
    line = _command(bench, "qbench run")
    assert "--workers='50'" in line and " --no-prepared" in line and " --autovacuum" in line and "--strict" in line
    assert "--no-autovacuum" not in line
    bad = _make("bench", "PREPARED=off")
    assert bad.returncode == 2 and "PREPARED" in bad.stderr and "allowed: 1 or 0" in bad.stderr


def test_make_takes_values_from_the_command_line_only():
    """An exported WORKERS or WORKLOAD, or $DATABASE_URL, does not change a run unseen: make stops with one
    line naming it (exit 2) unless the command line gives the value; an empty value is refused too."""
    def make(env_extra: dict, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["make", "-n", "-W", "pyproject.toml", *args], cwd=REPO, capture_output=True,
                              text=True, timeout=60, env={**os.environ, **env_extra})

    env = {"WORKERS": "200", "WORKLOAD": "nowhere", "SWEEP": "batch"}
    proc = make(env, "bench")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "qbench" not in proc.stdout, proc.stdout
    named = lines[0].split(": set in the environment")[0].split()[-2:] if lines else []
    assert len(lines) == 1 and sorted(named) == ["WORKERS", "WORKLOAD"] and "SWEEP" not in lines[0], lines
    assert "make bench WORKLOAD=nowhere" in lines[0] and "unset" in lines[0], lines
    given = make(env, "bench", "WORKERS=3", "WORKLOAD=default")
    assert given.returncode == 0 and "--workers='3'" in _command(given, "qbench run"), given.stderr
    url = make({"DATABASE_URL": "postgresql://me@127.0.0.1/prod"}, "bench")
    assert url.returncode == 2 and len(url.stderr.strip().splitlines()) == 1 and "DATABASE_URL" in url.stderr
    assert 'DSN="$DATABASE_URL"' in url.stderr
    chosen = make({"DATABASE_URL": "postgresql://me@127.0.0.1/prod"}, "bench", "DSN=postgresql://127.0.0.1/x")
    assert chosen.returncode == 0 and "--dsn='postgresql://127.0.0.1/x'" in _command(chosen, "qbench run")
    assert make({"DATABASE_URL": "postgresql://me@127.0.0.1/prod"}, "help").returncode == 0
    for empty in ("WORKERS=", "DSN="):
        proc = make({}, "bench", empty)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and f"{empty[:-1]}: empty; allowed" in lines[0], lines


def test_make_calibrate_honours_workers_and_duration():
    proc = _make("calibrate", "WORKERS=200", "DURATION=5s")
    assert proc.returncode == 0, proc.stderr
    line = _command(proc, "qbench calibrate")
    assert "--workers='200'" in line and "--duration='5s'" in line, line
    both = _make("calibrate", "WORKERS=200", "CAL_WORKERS=50")
    assert both.returncode == 2 and len(both.stderr.strip().splitlines()) == 1 and "CAL_WORKERS" in both.stderr


def test_make_clean_asks_which_and_the_two_cleans_do_what_they_say():
    venv = (REPO / ".venv").exists()
    proc = subprocess.run(["make", "clean"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "make distclean" in lines[0] and "make clean-db" in lines[0], lines
    assert (REPO / ".venv").exists() == venv  # nothing removed: the line is all it does
    distclean = _make("distclean")
    assert distclean.returncode == 0 and "rm -rf .venv" in distclean.stdout
    db = _make("clean-db", "DSN=postgresql://127.0.0.1/x", "DRY_RUN=1")
    assert db.returncode == 0 and "qbench clean --dsn='postgresql://127.0.0.1/x'" in db.stdout and "--dry-run" in db.stdout


def test_make_help_lists_every_target_and_where_the_parameters_are():
    proc = subprocess.run(["make", "help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    makefile = (REPO / "Makefile").read_text()
    phony = next(line for line in makefile.splitlines() if line.startswith(".PHONY:")).split(":", 1)[1].split()
    listed = {line.split()[0] for line in proc.stdout.splitlines() if line.startswith("  ") and line.split()}
    assert set(phony) <= listed, set(phony) - listed
    assert all(p.name in proc.stdout for p in PARAMETERS) and "qbench run --help" in proc.stdout
    own = {line.split()[0]: line.split()[1:] for line in proc.stdout.split("own variables")[1].split("Run parameters")[0]
           .splitlines()[1:] if line.strip()}
    makefile_lists = {line.split("=")[0][5:].strip(): line.split("=", 1)[1].split() for line in makefile.splitlines()
                      if line.startswith("VARS_") and "\\" not in line}
    assert all(set(v) <= set(own[t]) for t, v in makefile_lists.items()), (own, makefile_lists)
    assert "CONFIRM_S" in own["plan"] and "DSN" in own["bench"]
    bare = subprocess.run(["make"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bare.returncode == 0 and bare.stdout == proc.stdout  # the default goal is help


def test_a_database_taken_from_database_url_is_named_without_its_password():
    """qbench takes $DATABASE_URL when no --dsn is given, and says so on stderr, password left out."""
    env = {**os.environ, "DATABASE_URL": "postgresql://postgres:not-shown@127.0.0.1:5432/postgres"}
    proc = qbench("clean", "--dry-run", env=env)
    assert proc.returncode == 0, proc.stderr
    assert ("qbench: database postgresql://postgres@127.0.0.1:5432/postgres from $DATABASE_URL" in proc.stderr
            and "not-shown" not in proc.stderr), proc.stderr
    given = qbench("clean", "--dry-run", "--dsn", "postgresql://postgres@127.0.0.1:5432/postgres")
    assert given.returncode == 0 and "DATABASE_URL" not in given.stderr
