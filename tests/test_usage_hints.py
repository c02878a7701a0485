"""Each command's --help shows the options it reads, with its own defaults and required ones marked; a hint names
a setting as the user will type it (``--processes 2`` to a qbench user, ``PROCESSES=2`` through make); the plan's
harness note says the generator shares the database's cores only when the server is on this host."""

from __future__ import annotations

import os
import re

import pytest

from bench.analysis.plan_answer import harness_note
from bench.cli.checks import check_loopback
from bench.cli.main import build_parser
from bench.config.parameters import PARAMETERS
from bench.config.run_config import build_config
from bench.errors import ConfigError
from bench.plan.options import PLAN_RATE, candidates
from bench.sweep import capacity_search
from bench.usage import VIA_MAKE_ENV, setting, switch
from bad_values import BAD_VALUES
from cli_in_process import qbench_in_process
from conftest import qbench


def _env(via_make: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != VIA_MAKE_ENV}
    return {**env, VIA_MAKE_ENV: "1"} if via_make else env


def _option_lines(help_text: str) -> dict[str, str]:
    """``--option`` -> its help text (wrapped lines joined), from argparse's output."""
    found, current = {}, None
    for line in help_text.splitlines():
        head = re.match(r"^  (--[a-z0-9-]+)(?:[ ,/]|$)", line)
        if head:
            current = head.group(1)
            found[current] = line
        elif current and line.startswith(" " * 10):
            found[current] += " " + line.strip()
        else:
            current = None
    return {k: re.sub(r"\s+", " ", v) for k, v in found.items()}


def test_the_plans_help_shows_what_it_reads_with_its_own_defaults():
    plan = _option_lines(qbench("plan", "--help", env=_env(False)).stdout)
    run = _option_lines(qbench("run", "--help", env=_env(False)).stdout)
    for key in ("--workers", "--backlog", "--bursts"):  # the plan sets them itself
        assert key in run and key not in plan, key
    assert plan["--duration"].endswith("(default: 10s a step)") and run["--duration"].endswith("(default: 30s)")
    assert plan["--warmup"].endswith("(default: 2s a step)") and run["--warmup"].endswith("(default: 5s)")
    for key in ("--rate", "--slo"):
        assert plan[key].endswith("(required)") and "(default:" not in plan[key], plan[key]
    assert "--plan-max-workers" in plan and "--confirm-s" in plan


def test_the_capacity_search_hides_the_rate_it_sets():
    capacity = _option_lines(qbench("capacity", "--help", env=_env(False)).stdout)
    assert "--rate" not in capacity and "--bursts" not in capacity and "--rate-start" in capacity
    assert "--backlog" not in capacity  # its steps are open-loop: a seeded backlog would be dropped unseen
    proc = qbench("capacity", "--rate", "100", env=_env(False))  # still read, and refused in one line
    assert proc.returncode == 2 and proc.stderr.strip().startswith("qbench: --rate: the capacity search sets"), proc.stderr


def _as_user(via_make: bool, monkeypatch) -> None:
    """This process as a command ``make`` started (``via_make``), or as ``qbench`` typed in a shell."""
    if via_make:
        monkeypatch.setenv(VIA_MAKE_ENV, "1")
    else:
        monkeypatch.delenv(VIA_MAKE_ENV, raising=False)


def _help_of(command: str) -> str:
    """``qbench COMMAND --help`` as argparse writes it, in this process."""
    parser = build_parser()
    sub = next(a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict))
    return sub.choices[command].format_help()


def test_the_plans_rate_is_the_target_it_requires_not_an_optional_drain():
    rate = _option_lines(_help_of("plan"))["--rate"]
    assert "0 = none" not in rate and "drain" not in rate and rate.endswith("(required)"), rate


def test_the_sweeps_help_says_its_file_replaces_the_defaults():
    text = re.sub(r"\s+", " ", _help_of("sweep"))
    options = _option_lines(_help_of("sweep"))
    assert "--workload" not in options  # a sweep file names its workload
    assert "the sweep file's [fixed] values, then those of the workload file it names, replace it" in text
    assert "a --workload file's values" not in text
    assert options["--repetitions"].endswith("(default: the sweep file's repetitions, else 1)")
    assert "sweeps/<name>-<stamp>/" in options["--results"]


@pytest.mark.parametrize("command, extra", [("plan", ["--rate", "10", "--slo", "pickup_p99<=1s"]), ("capacity", [])])
def test_every_run_option_a_command_hides_is_refused_in_one_line(command, extra, monkeypatch):
    """What --help leaves out the command sets itself: given, it is refused naming it as typed, before anything."""
    monkeypatch.delenv(VIA_MAKE_ENV, raising=False)
    shown = _option_lines(_help_of(command))
    hidden = [p for p in PARAMETERS if p.option not in shown]
    assert {p.key for p in hidden} == ({"workers", "backlog", "bursts"} if command == "plan"
                                       else {"rate", "backlog", "bursts"})
    for p in hidden:
        args = build_parser().parse_args([command, p.option, "5", *extra])
        with pytest.raises(ConfigError) as refused:
            args.func(args)
        assert refused.value.param == p.name and f"leave {p.option} " in str(refused.value), str(refused.value)


#: (overrides of build_config, the hint to a qbench user, the same to a make user)
REFUSALS = [
    ({"work_sigma": "1"}, "allowed: --work-dist lognormal, or leave --work-sigma out",
     "allowed: WORK_DIST=lognormal, or leave WORK_SIGMA out"),
    ({"replica_readers": "2"}, "allowed: --replica, or leave --replica-readers out",
     "allowed: REPLICA=1, or leave REPLICA_READERS out"),
    ({"prepared": False, "plan_cache": "force_generic_plan"}, "allowed: auto with --no-prepared",
     "allowed: auto with PREPARED=0"),
    ({"faults": "crash_after_claim@1-2"}, "--reaper-interval-s > 0 (or --txn hold,",
     "REAPER_INTERVAL_S > 0 (or TXN=hold,"),
    ({"engine": "mariadb", "plan_cache": "auto"}, "leave --plan-cache out with --engine mariadb",
     "leave PLAN_CACHE out with ENGINE=mariadb"),
    ({"queue": "pgqueuer", "library_mode": "sql", "effects": "outside"}, "leave --effects out with --queue pgqueuer",
     "leave EFFECTS out with QUEUE=pgqueuer"),
    ({"library_mode": "sql"}, "--library-mode with --queue procrastinate or --queue pgqueuer",
     "LIBRARY_MODE with QUEUE=procrastinate or QUEUE=pgqueuer"),
    ({"workers": "2", "processes": "3"}, "--processes from 1 to --workers", "PROCESSES from 1 to WORKERS"),
    ({"bursts": "1-2@100"}, "allowed: --bursts with --rate > 0", "allowed: BURSTS with RATE > 0"),
]


@pytest.mark.parametrize("overrides, direct, via_make", REFUSALS, ids=[next(iter(r[0])) for r in REFUSALS])
def test_a_refusal_names_what_to_type_in_the_users_syntax(overrides, direct, via_make, monkeypatch):
    for make, expected, other in ((False, direct, via_make), (True, via_make, direct)):
        _as_user(make, monkeypatch)
        with pytest.raises(ConfigError) as refused:
            build_config("default", overrides)
        assert expected in str(refused.value) and other not in str(refused.value), str(refused.value)


def test_other_hints_follow_the_users_syntax(monkeypatch, tmp_path):
    unprepared = build_config("default", {"prepared": False})
    failed = [{"rate_jobs_per_s": 100.0, "kept_up": False, "why": "fell behind"}]
    for make in (False, True):
        _as_user(make, monkeypatch)
        with pytest.raises(ConfigError) as remote:
            check_loopback("postgresql://10.1.2.3/x", False)
        assert (switch("allow_remote") in str(remote.value)
                and ("ALLOW_REMOTE=1" if make else "pass --allow-remote to") in str(remote.value))
        with pytest.raises(ConfigError) as listed:
            candidates({"policy": "skip_locked,,nowait"})
        assert ("e.g. POLICY=skip_locked,…" if make else "e.g. --policy skip_locked,…") in str(listed.value)
        described = capacity_search.describe_design(unprepared)
        assert ("(PREPARED=0)" if make else "(--no-prepared)") in described, described
        sentence = capacity_search._write(unprepared, failed, 100.0, 100.0, tmp_path, complete=True)["sentence"]
        assert sentence.endswith("lower RATE_START." if make else "lower --rate-start."), sentence


def test_a_hint_is_written_as_the_user_types_it():
    direct = qbench("plan", "--rate", "100", env=_env(False))
    via_make = qbench("plan", "--rate", "100", env=_env(True))
    assert direct.returncode == via_make.returncode == 2
    assert "e.g. --slo 'pickup_p99<=1s'" in direct.stderr and "SLO=" not in direct.stderr, direct.stderr
    assert "e.g. SLO='pickup_p99<=1s'" in via_make.stderr and "--slo" not in via_make.stderr, via_make.stderr


def test_a_refusal_of_what_a_command_sets_itself_names_it_as_typed():
    direct = qbench("plan", "--workers", "3", "--rate", "10", "--slo", "pickup_p99<=1s", env=_env(False))
    via_make = qbench("plan", "--workers", "3", "--rate", "10", "--slo", "pickup_p99<=1s", env=_env(True))
    assert direct.returncode == via_make.returncode == 2
    assert "allowed: leave --workers out (--plan-max-workers bounds it)" in direct.stderr, direct.stderr
    assert "allowed: leave WORKERS out (PLAN_MAX_WORKERS bounds it)" in via_make.stderr, via_make.stderr
    capacity = qbench("capacity", "--bursts", "0-1@5", env=_env(False))
    assert capacity.returncode == 2 and "leave --bursts unset" in capacity.stderr, capacity.stderr


def test_setting_quotes_for_a_shell(monkeypatch):
    monkeypatch.delenv(VIA_MAKE_ENV, raising=False)
    assert setting("processes", 2) == "--processes 2"
    assert setting("plan_max_workers", 40) == "--plan-max-workers 40"
    monkeypatch.setenv(VIA_MAKE_ENV, "1")
    assert setting("processes", 2) == "PROCESSES=2"
    assert setting("slo", "claim_p99<=50ms") == "SLO='claim_p99<=50ms'"
    assert setting("policy", "skip_locked,…", quote=False) == "POLICY=skip_locked,…"
    assert switch("prepared", False) == "PREPARED=0" and switch("allow_remote") == "ALLOW_REMOTE=1"
    monkeypatch.delenv(VIA_MAKE_ENV)
    assert switch("prepared", False) == "--no-prepared" and switch("allow_remote") == "--allow-remote"


def _limited_step(on_this_host: bool | None) -> dict:
    run = {"harness_limited": "event-loop lag p99 12 ms"}
    if on_this_host is not None:
        run["server_on_this_host"] = on_this_host
    return {"harness_limited": "event-loop lag p99 12 ms", "runs": [run]}


def test_the_harness_note_names_shared_cores_only_for_a_server_on_this_host(monkeypatch):
    monkeypatch.delenv(VIA_MAKE_ENV, raising=False)
    fine = {"harness_limited": None, "runs": [{"harness_limited": None, "server_on_this_host": True}]}
    designs = lambda step: [{"workers": {"steps": [step, fine]}, "headroom": None}]  # noqa: E731
    local = harness_note(designs(_limited_step(True)))
    remote = harness_note(designs(_limited_step(False)))
    older = harness_note(designs(_limited_step(None)))  # a plan.json written before the host was kept
    assert local.startswith("1 of 2 steps was harness-limited (event-loop lag p99 12 ms): ")
    assert "shares its cores with the database" in local and "--processes 2" in local
    assert "shares its cores" not in remote and "set the pace" in remote and "--processes 2" in remote
    assert older == local
    assert harness_note(designs(fine)) is None
    monkeypatch.setenv(VIA_MAKE_ENV, "1")
    assert "PROCESSES=2" in harness_note(designs(_limited_step(False)))


#: (qbench arguments, the refusal to a qbench user, the same to a make user (QBENCH_VIA_MAKE=1)): one form,
#: ``<parameter as typed>: <value> <problem>; allowed: <what is allowed>``, on every command.
TYPED_REFUSALS = [
    (["run", "--workers", "-1"], "--workers: -1 is out of range; allowed: an integer from 1 to 1000",
     "WORKERS: -1 is out of range; allowed: an integer from 1 to 1000"),
    (["run", "--lease-s", "1", "--reaper-interval-s", "5"],
     "--lease-s: 1 s is shorter than --reaper-interval-s 5 s: leases would expire between reaper passes unnoticed; "
     "allowed: --lease-s >= --reaper-interval-s",
     "LEASE_S: 1 s is shorter than REAPER_INTERVAL_S=5 s: leases would expire between reaper passes unnoticed; "
     "allowed: LEASE_S >= REAPER_INTERVAL_S"),
    (["plan", "--rate", "abc", "--slo", "pickup_p99<=1s"],
     "--rate: 'abc' is not a number; allowed: a number > 0 and <= 1000000",
     "RATE: 'abc' is not a number; allowed: a number > 0 and <= 1000000"),
    (["plan", "--rate", "0", "--slo", "pickup_p99<=1s"], "--rate: 0 is out of range; allowed: a number > 0 and <= 1000000",
     "RATE: 0 is out of range; allowed: a number > 0 and <= 1000000"),
    (["plan", "--slo", "pickup_p99<=1s"],
     "--rate: a plan needs the target arrival rate; allowed: a number > 0 and <= 1000000 jobs/s, e.g. --rate 500",
     "RATE: a plan needs the target arrival rate; allowed: a number > 0 and <= 1000000 jobs/s, e.g. RATE=500"),
    (["plan", "--rate", "5", "--slo", "pickup_p99<=1s", "--plan-max-workers", "0"],
     "--plan-max-workers: 0 is out of range; allowed: an integer from 1 to 1000",
     "PLAN_MAX_WORKERS: 0 is out of range; allowed: an integer from 1 to 1000"),
    (["capacity", "--rate-start", "abc"], "--rate-start: 'abc' is not a number; allowed: a number > 0",
     "RATE_START: 'abc' is not a number; allowed: a number > 0"),
    (["capacity", "--rate-start", "0"], "--rate-start: 0 is out of range; allowed: a number > 0",
     "RATE_START: 0 is out of range; allowed: a number > 0"),
    (["sweep", "scaling", "--repetitions", "abc"],
     "--repetitions: 'abc' is not an integer; allowed: an integer from 1 to 100",
     "REPETITIONS: 'abc' is not an integer; allowed: an integer from 1 to 100"),
    (["calibrate", "--workers", "50,-1"],
     "--workers: -1 is out of range; allowed: an integer from 1 to 1000, or a comma-separated list of them (e.g. 1,2,4)",
     "WORKERS: -1 is out of range; allowed: an integer from 1 to 1000, or a comma-separated list of them (e.g. 1,2,4)"),
    (["compare", "a", "b", "--max-regression", "abc"],
     "--max-regression: 'abc' is not a share; allowed: a share above 0, up to 1000% or 1, e.g. 10% or 0.1",
     "MAX_REGRESSION: 'abc' is not a share; allowed: a share above 0, up to 1000% or 1, e.g. 10% or 0.1"),
]


@pytest.mark.parametrize("argv, direct, via_make", TYPED_REFUSALS,
                         ids=[" ".join(a[:3]) for a, _, _ in TYPED_REFUSALS])
def test_a_refusal_names_the_parameter_as_typed_in_one_form(argv, direct, via_make, monkeypatch, tmp_path):
    results = tmp_path / "results"
    argv = [*argv, "--results", str(results)] if argv[0] != "compare" else argv
    for make, expected in ((False, direct), (True, via_make)):
        _as_user(make, monkeypatch)
        proc = qbench_in_process(*argv)
        assert proc.returncode == 2 and proc.stderr == f"qbench: {expected}\n", proc.stderr
        assert not results.exists()


def _parameter_names(text: str) -> set[str]:
    """The upper-case parameter names (Make variables) ``text`` holds."""
    names = {p.name for p in PARAMETERS} | {"RATE_START", "PLAN_MAX_WORKERS", "REPETITIONS", "MAX_REGRESSION"}
    return set(re.findall(r"\b[A-Z][A-Z0-9_]+\b", text)) & names


@pytest.mark.parametrize("key", sorted(set(BAD_VALUES) - {"results"}))  # RESULTS: refused by the command
def test_no_refusal_of_a_bad_value_names_a_make_variable_to_a_qbench_user(key, monkeypatch):
    """Every bad value of the table (tests/bad_values.py), refused: the parameter first, as the user types it; a
    qbench user is told no Make variable, a make user no option of the parameter."""
    for value in BAD_VALUES[key]:
        for make in (False, True):
            _as_user(make, monkeypatch)
            with pytest.raises(ConfigError) as refused:
                build_config("default", {key: value})
            line = str(refused.value)
            name = refused.value.param
            if make:
                assert line.startswith(f"{name}: ") and f"--{name.lower().replace('_', '-')}" not in line, line
            else:
                assert line.startswith(f"--{name.lower().replace('_', '-')}: ") and not _parameter_names(line), line


def test_the_plans_required_options_are_not_bracketed_in_its_usage_line():
    usage = re.sub(r"\s+", " ", _help_of("plan").split("\n\n")[0])
    for key in ("rate", "slo"):
        assert f" --{key} {key.upper()} " in usage and f"[--{key} {key.upper()}]" not in usage, usage
    assert "[--workload WORKLOAD]" in usage and "[--batch BATCH]" in usage, usage  # the optional ones still are
    assert f"jobs/s: {PLAN_RATE.allowed_words()} (required)" in _option_lines(_help_of("plan"))["--rate"]
