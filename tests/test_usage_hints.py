"""Each command's --help shows the options it reads, with its own defaults and required ones marked; a hint names
a setting as the user will type it (``--processes 2`` to a qbench user, ``PROCESSES=2`` through make); the plan's
harness note says the generator shares the database's cores only when the server is on this host."""

from __future__ import annotations

import os
import re

from bench.analysis.plan_answer import harness_note
from bench.usage import VIA_MAKE_ENV, setting
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
    proc = qbench("capacity", "--rate", "100", env=_env(False))  # still read, and refused in one line
    assert proc.returncode == 2 and proc.stderr.strip().startswith("qbench: RATE: the capacity search sets"), proc.stderr


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
