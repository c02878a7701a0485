"""The capacity plan (``qbench plan``) against the real PostgreSQL: its answer is checked by separate
runs, an SLO nothing meets stops early with exit 4, a resumed plan runs nothing twice, bad input is
refused before anything is created. The searches' own rules are checked on made-up steps."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import psycopg
import pytest

from bench import errors
from bench.analysis import plan_answer
from bench.plan.search import search_headroom, search_workers
from bench.plan.steps import Step
from bench.run_summary.suspect import SUSPECT_OUTSIDE_CPU_PCT
from bench.usage import VIA_MAKE_ENV, setting
from conftest import qbench, run_and_load
from quiet import wait_for_quiet
from waiting import measured_seconds, wait_until

# 5 ms jobs at 200 jobs/s: one worker (about 150 jobs/s) falls behind and its pickup grows past a second within
# the window, two keep up far below it; an SLO nearer two workers' own pickup p99 would make the boundary noise.
RATE, SLO = "200", "pickup_p99<=1s"
PLAN = ("--rate", RATE, "--work-ms", "5", "--slo", SLO, "--duration", "5s", "--warmup", "1s")


def _plan(dsn: str, results: Path, *args: str, timeout: float = 900, quiet: bool = False):
    """``qbench plan``; ``quiet``: on a quiet machine, and once more when a step could not be measured for a busy
    one (tests/quiet.py). (process, the last plan.json, every plan.json)"""
    if quiet:
        wait_for_quiet(f"plan {' '.join(args)}")
    proc = qbench("plan", "--dsn", dsn, "--results", str(results), *args, timeout=timeout)
    if quiet and proc.returncode == errors.EXIT_SUSPECT and "outside the run" in proc.stdout:
        wait_for_quiet(f"plan {' '.join(args)} (a step judged busy)")
        proc = qbench("plan", "--dsn", dsn, "--results", str(results), *args, timeout=timeout)
    plans = sorted((results / "plans").glob("*/plan.json")) if (results / "plans").is_dir() else []
    return proc, (json.loads(plans[-1].read_text()) if plans else None), plans


@pytest.fixture(scope="module")
def planned(dsn, tmp_path_factory):
    """One plan at 200 jobs/s of 5 ms jobs, pickup p99 <= 1 s, 2 repetitions per step."""
    results = tmp_path_factory.mktemp("plan")
    proc, state, plans = _plan(dsn, results, *PLAN, "--repetitions", "2", "--confirm-s", "8s", quiet=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return results, state, plans[-1].parent, proc


@pytest.mark.slow
def test_the_planned_workers_meet_the_slo_and_one_fewer_does_not(planned, dsn, tmp_path):
    _, state, _, proc = planned
    answer = state["answer"]
    needed = answer["workers"]
    assert answer["met"] and answer["confirmed"] and needed >= 1
    assert f"{needed} workers of skip_locked, batch 1, partial index hold 200 jobs/s" in proc.stdout
    _, summary, _ = run_and_load(dsn, tmp_path / "at", *PLAN, "--workers", str(needed), quiet=True)
    assert summary["slo"]["status"] == "pass", summary["slo"]
    if needed > 1:  # one resolution step lower (one worker at this size), twice: a repetition fails it
        statuses = []
        for rep in range(2):
            proc = qbench("run", "--dsn", dsn, "--results", str(tmp_path / f"below{rep}"), *PLAN,
                          "--workers", str(needed - 1))
            assert proc.returncode in (0, 4), proc.stdout + proc.stderr
            run = next((tmp_path / f"below{rep}").iterdir())
            summary = json.loads((run / "summary.json").read_text())
            statuses.append(summary["slo"]["status"] == "pass" and not summary["saturated"])
        assert not all(statuses), "one worker fewer than the plan's answer met the SLO in every repetition"


@pytest.mark.slow
def test_the_plan_records_its_searches_and_its_page_shows_them(planned):
    _, state, plan_dir, _ = planned
    design = state["designs"][0]
    steps = {s["workers"]: s for s in design["workers"]["steps"]}
    needed = design["workers"]["needed"]
    assert steps[needed]["passed"] and all(len(s["runs"]) == 2 for s in steps.values())
    assert all(not s["passed"] for w, s in steps.items() if w < needed)
    assert design["probe"]["little_estimate_workers"] == pytest.approx(
        200 * design["probe"]["workers"] / design["probe"]["throughput_jobs_per_s"])
    head = design["headroom"]
    assert head["rate_jobs_per_s"] >= 200 and head["factor"] == pytest.approx(head["rate_jobs_per_s"] / 200)
    failed = [s for s in head["steps"] if not s["passed"]]
    assert failed and min(s["rate_jobs_per_s"] for s in failed) > head["rate_jobs_per_s"]
    assert state["complete"] and state["format_version"] >= 1
    page = (plan_dir / "plan.html").read_text()
    assert state["answer"]["sentence"].split(";")[0] in page.replace("&#39;", "'")
    assert page.count("<img ") == 2
    for href in {line.split('href="')[1].split('"')[0] for line in page.splitlines() if 'href="' in line}:
        assert (plan_dir / href).is_file(), href


@pytest.mark.slow
def test_the_cost_estimate_is_the_answers_runs_own_cost_times_the_target(planned):
    """The estimate beside the answer: the answer's runs' own summary.json cost figures (read here from their run
    directories), their mean times the target rate, and the cores at the stated utilisation."""
    _, state, plan_dir, proc = planned
    answer, confirmation = state["answer"], state["confirmation"]
    cost = answer["cost"]
    summaries = [json.loads((Path(r["run_dir"]) / "summary.json").read_text()) for r in confirmation["runs"]]
    cpu = [s["cost_per_job"]["server_cpu_us"] for s in summaries]
    wal = [s["cost_per_job"]["wal_bytes"] for s in summaries]
    assert cost["runs"] == len(summaries) and not cost["cpu_from_statements"]
    assert cost["server_cpu_us"] == pytest.approx(sum(cpu) / len(cpu)) and cost["server_cpu_us"] > 0
    assert cost["cores_busy"] == pytest.approx(float(RATE) * cost["server_cpu_us"] / 1e6)
    assert cost["cores"] == pytest.approx(cost["cores_busy"] / plan_answer.DB_CPU_UTILISATION)
    assert cost["wal_mb_per_s"] == pytest.approx(float(RATE) * (sum(wal) / len(wal)) / 1e6)
    assert f"cost: {cost['sentence']}" in proc.stdout
    assert cost["sentence"] in (plan_dir / "plan.html").read_text().replace("&#39;", "'")


@pytest.mark.slow
def test_the_answer_says_the_connections_its_runs_needed_against_the_servers_own_figures(planned, dsn):
    """The connections line: what the answer's run needed (its run.json, the rule every run is checked by) against
    the server's free connections as that run read them, and those against the server's own max_connections; the
    busiest second's client backends (the admin one among them) fit in what was counted (the monitor's two added:
    they are left out there)."""
    _, state, plan_dir, proc = planned
    conn = state["answer"]["connections"]
    run_dir = Path(state["confirmation"]["runs"][0]["run_dir"])
    run = json.loads((run_dir / "run.json").read_text())
    assert conn["needed"] == run["connections_needed"]["server"] and conn["available"] == run["connections"]["available"]
    with psycopg.connect(dsn) as c:
        max_connections = int(c.execute("SHOW max_connections").fetchone()[0])
    assert conn["max_connections"] == max_connections
    assert conn["available"] == max_connections - conn["reserved"] - conn["in_use"]
    assert conn["spare"] == conn["available"] - (conn["needed"] - 1)  # the admin connection was in use already
    backends = max(int(float(r["server_backends"])) for r in csv.DictReader((run_dir / "intervals.csv").open())
                   if r.get("server_backends"))
    assert backends + 2 <= conn["needed"], (backends, conn)  # the admin connection is among the backends counted
    assert f"connections: {conn['sentence']}" in proc.stdout and str(conn["available"]) in conn["sentence"]
    assert conn["sentence"] in (plan_dir / "plan.html").read_text().replace("&#39;", "'")


def test_the_connections_line_of_an_embedded_server_asks_the_team_to_check_its_own():
    """On the plan's own embedded server the free connections say nothing of the team's: no spare, a request."""
    runs = [{"connections": {"room": {"max_connections": 300, "reserved": 3, "in_use": 1, "available": 296},
                             "needed": {"server": 12, "clients": 8, "direct": 4, "sentence": "6 workers need 12 server "
                                        "connections (8 clients + 4 direct)"}, "embedded": True}}]
    note = plan_answer.connections_note(runs)
    assert note["spare"] is None and "check that yours has 12 free" in note["sentence"]
    runs[0]["connections"]["embedded"] = False
    runs[0]["connections"]["room"].update(available=10, in_use=287)
    note = plan_answer.connections_note(runs)
    assert note["spare"] == -1 and "1 short" in note["sentence"]
    assert plan_answer.connections_note([{}]) is None


def test_without_server_cpu_the_estimate_says_at_least_from_the_statements():
    """A server on another host: the statements' time stands in, and the sentence says it is not CPU time."""
    runs = [{"cost_per_job": {"server_cpu_us": None, "statements_exec_us": us, "wal_bytes": 700.0}} for us in (100, 140)]
    cost = plan_answer.cost_estimate(runs, 5000)
    assert cost["cpu_from_statements"] and cost["server_cpu_us"] == 120 and cost["cores_busy"] == pytest.approx(0.6)
    assert "statement time is not CPU time" in cost["sentence"] and "needs about 0.857 cores" in cost["sentence"]
    assert "if that time were CPU" in cost["sentence"] and "3.50 MB/s of WAL" in cost["sentence"]
    assert plan_answer.cost_estimate([{"cost_per_job": {}}], 5000) is None


@pytest.mark.slow
def test_a_resumed_plan_runs_nothing_it_already_measured(planned, dsn):
    results, state, plan_dir, _ = planned
    runs_before = sorted((plan_dir / "runs").iterdir())
    state_path = plan_dir / "plan.json"
    state["complete"] = False
    state_path.write_text(json.dumps(state))
    proc, resumed, _ = _plan(dsn, results, *PLAN, "--repetitions", "2", "--confirm-s", "8s")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"-> {plan_dir}" in proc.stdout
    assert sorted((plan_dir / "runs").iterdir()) == runs_before
    assert resumed["answer"]["workers"] == state["answer"]["workers"] and resumed["complete"]


@pytest.mark.slow
def test_an_slo_nothing_meets_exits_4_and_stops_early(dsn, tmp_path):
    proc, state, _ = _plan(dsn, tmp_path, "--rate", "100", "--work-ms", "1", "--slo", "claim_p99<=1us",
                           "--duration", "3s", "--warmup", "1s", "--repetitions", "1", "--confirm-s", "0")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert not state["answer"]["met"] and state["answer"]["sentence"].startswith("No design met the SLO")
    assert "claim_p99" in state["answer"]["sentence"] and "did not help" in state["answer"]["sentence"]
    closest = state["answer"]["closest"]["workers"]
    assert f"Closest: {closest} worker{'' if closest == 1 else 's'} of " in state["answer"]["sentence"]
    # Doubling stops as soon as it stops helping: a few steps (a claim p99 may still fall from 1 to 2 workers),
    # not the nine from 1 to the 200-worker ceiling.
    steps = state["designs"][0]["workers"]["steps"]
    assert 2 <= len(steps) <= 4 and "did not help" in state["designs"][0]["workers"]["stopped"]


@pytest.mark.parametrize("args, says", [
    (("--rate", "100"), "--slo: a plan needs the objective"),
    (("--slo", "claim_p99<=1s"), "--rate: a plan needs the target arrival rate"),
    (("--rate", "100", "--slo", "claim_p99<=1s", "--workers", "5"), "--workers: the plan searches"),
    (("--rate", "100", "--slo", "claim_p99<=1s", "--policy", "skip_locked,bogus"), "--policy:"),
    (("--rate", "100", "--slo", "claim_p99<=1s", "--batch", "1,2,3", "--policy", "wait,nowait,skip_locked"),
     "9 candidate designs"),
    (("--rate", "100", "--slo", "claim_p99<=1s", "--repetitions", "0"), "--repetitions: 0 is out of range"),
    (("--rate", "100", "--slo", "claim_p99<=1s", "--duration", "5s,10s"), "--duration:"),
    (("--rate", "100", "--slo", "claim_p99<=1s", "--repetitions", ""), "--repetitions: empty"),
    (("--rate", "100", "--slo", "claim_p99<=1s", "--batch", "1,01"), "--batch: the lists give the same design twice"),
    (("--workload", "steady"), "--slo: a plan needs the objective"),  # steady.toml sets RATE: SLO is what is missing
    (("--slo", "pickup_p99<=1s"), "--rate: a plan needs the target arrival rate"),
])
def test_bad_plan_input_is_refused_and_creates_nothing(args, says, tmp_path):
    proc = qbench("plan", "--results", str(tmp_path / "r"), *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr
    assert not (tmp_path / "r").exists()


BUSY = "the machine spent 8.1 % of its CPU outside the run, mean over the window: more than the 5 % a run is judged by"


def _steps(needed: int, ratio=lambda n: 1.0, throughput=lambda n: 100.0, untrusted=()):
    """A made-up step runner: ``n`` workers pass from ``needed``; a count in ``untrusted`` fails only by the harness
    (a busy machine), as it still does when the step runner has measured it again."""
    calls: list[int] = []

    def step(n: int) -> Step:
        calls.append(n)
        busy = n in untrusted
        return Step(n, 100.0, [{"passed": n >= needed and not busy, "slo_ratio": ratio(n),
                                "throughput_jobs_per_s": throughput(n), "harness_limited": BUSY if busy else None,
                                "why": ""}], retried=[{"passed": False, "harness_limited": BUSY}] if busy else [])
    return step, calls


def test_a_step_that_fails_only_by_the_harness_stops_the_workers_search_unmeasured():
    """3 -> 6 -> 12 workers where 12 meets the SLO and 6 fails on a busy machine: the search stops at 6 and says
    it could not be measured there, never that more workers are needed; a trusted failure still climbs."""
    step, calls = _steps(12, ratio=lambda n: 12 / n, untrusted={6})
    answer = search_workers(step, 3, 1, 200)
    assert calls == [3, 6] and answer.needed is None and answer.unmeasured == 6 and answer.failed_below == 3
    assert answer.stopped.startswith(f"could not be measured at 6 workers: {BUSY} (measured twice); the search stopped")
    assert "did not help" not in answer.stopped and "did not meet" not in answer.stopped
    step, calls = _steps(12, ratio=lambda n: 12 / n, untrusted={5})  # 5 is never tried: the same search answers 12
    answer = search_workers(step, 3, 1, 200)
    assert answer.needed == 12 and answer.unmeasured is None and answer.stopped is None


def test_an_untrusted_step_while_bisecting_stops_the_search_the_same_way():
    """3 fails, 6 passes, then 4 (bisecting) fails only by the harness: not taken for a miss (which would answer
    5 or 6 as the fewest), the search stops there, no count claimed, the 6 that passed named."""
    step, calls = _steps(5, ratio=lambda n: 5 / n, untrusted={4})
    answer = search_workers(step, 3, 1, 200)
    assert calls == [3, 6, 4] and answer.needed is None and answer.unmeasured == 4
    assert answer.stopped.startswith("could not be measured at 4 workers: ")
    assert answer.stopped.endswith("(6 workers passed; whether fewer do was not measured)")


def _rate_step(failing_runs):
    """Headroom steps at 3 workers: up to 150 jobs/s pass; above, each run of ``failing_runs`` (harness-limited
    reasons, None for a trusted failure) fails."""
    def step(rate: float) -> Step:
        if rate <= 150:
            runs = [{"passed": True, "harness_limited": None, "slo_ratio": 0.5, "throughput_jobs_per_s": rate}]
        else:
            runs = [{"passed": False, "harness_limited": h, "slo_ratio": 2.0, "throughput_jobs_per_s": 0.8 * rate}
                    for h in failing_runs]
        return Step(3, rate, runs)
    return step


def test_the_headroom_is_at_least_only_when_its_first_failure_could_not_be_measured():
    """The one rule (every failing repetition harness-limited) decides the headroom's ``at_least`` too: a step that
    one repetition failed trusted is a failure, even when the other was harness-limited."""
    mixed = search_headroom(_rate_step([None, BUSY]), 100.0)
    assert mixed.rate == 150 and mixed.at_least is False and "could not be measured" not in mixed.why
    busy = search_headroom(_rate_step([BUSY, BUSY]), 100.0)
    assert busy.rate == 150 and busy.at_least is True
    assert busy.why.startswith(f"the first step that failed ({busy.first_failed:g} jobs/s) could not be measured: {BUSY}")


@pytest.mark.parametrize("needed, start", [(18, 2), (18, 40), (1, 3), (5, 5), (37, 1)])
def test_the_workers_search_finds_the_fewest_within_its_resolution(needed, start):
    step, calls = _steps(needed, ratio=lambda n: needed / n)
    answer = search_workers(step, start, 1, 200)
    assert needed <= answer.needed <= needed + max(1, needed // 10)
    assert answer.failed_below < needed and answer.needed - answer.failed_below <= max(1, answer.needed // 10)
    assert len(calls) == len(set(calls))  # no step measured twice


def test_the_workers_search_stops_when_doubling_does_not_help(monkeypatch):
    step, calls = _steps(10**6, ratio=lambda n: 500.0 + n)
    answer = search_workers(step, 2, 1, 200)
    assert answer.needed is None and calls == [2, 4] and "did not help" in answer.stopped
    step, calls = _steps(10**6, ratio=lambda n: 1000.0 / n)  # helps every time: up to the ceiling
    answer = search_workers(step, 2, 1, 50)
    assert answer.needed is None and calls[-1] == 50 and "--plan-max-workers" in answer.stopped
    monkeypatch.setenv(VIA_MAKE_ENV, "1")  # the ceiling named as a make user sets it
    assert "PLAN_MAX_WORKERS" in search_workers(_steps(10**6, ratio=lambda n: 1000.0 / n)[0], 2, 1, 50).stopped


def _design(label, workers, headroom, policy="skip_locked", batch=1):
    step = {"workers": workers, "rate_jobs_per_s": 100.0, "passed": True, "slo_ratio": 0.5,
            "throughput_jobs_per_s": 100.0, "harness_limited": None,
            "runs": [{"passed": True, "why": "", "slo": {"objectives": [
                {"key": "claim_p99", "op": "<=", "threshold": 0.01, "threshold_text": "claim_p99<=10ms",
                 "measured": 0.005, "measured_text": "5.00 ms", "status": "pass"}]}}]}
    return {"label": label, "short": label, "policy": policy, "batch": batch,
            "workers": {"needed": workers, "steps": [step], "stopped": None},
            "headroom": {"rate_jobs_per_s": headroom, "factor": headroom / 100, "at_least": False}}


def test_the_answer_is_the_cheapest_design_and_a_tie_goes_to_the_simpler():
    designs = [_design("nowait", 10, 300, policy="nowait"), _design("batch 10", 6, 500, batch=10),
               _design("plain", 6, 460)]
    answer = plan_answer.choose(designs, 100)
    assert answer["label"] == "plain"  # 6 workers either way, headroom within 15 %: batch 1 is simpler
    designs[2]["headroom"]["rate_jobs_per_s"] = 300
    assert plan_answer.choose(designs, 100)["label"] == "batch 10"  # now more headroom by far
    designs[1]["workers"]["needed"] = 9
    assert plan_answer.choose(designs, 100)["label"] == "plain"  # fewest workers first


def test_the_answer_names_the_round_trip_its_runs_measured():
    """The plan's runs' probe p50s (0.12 and 4.3 ms) in a ``network:`` line with the relay's setting; none measured
    (a plan written before the probe): no line."""
    designs = [_design("plain", 6, 460)]
    assert plan_answer.choose(designs, 100)["network_note"] is None
    runs = designs[0]["workers"]["steps"][0]["runs"]
    runs.append({**runs[0], "round_trip_p50_us": 4300.0, "net_delay_ms": 2.0})
    runs[0].update(round_trip_p50_us=120.0, net_delay_ms=2.0)
    answer = plan_answer.choose(designs, 100)
    line = [x for x in plan_answer.answer_lines(answer) if x.startswith("network: ")]
    assert line == [f"network: {answer['network_note']}"]
    assert "round trip of 0.120–4.30 ms" in line[0] and f"at {setting('net_delay_ms', '2')} each way" in line[0], line


def test_a_step_limited_by_a_busy_machine_is_advised_a_quieter_machine_not_more_processes():
    """harness_note: a step harness-limited because another program used the cores advises a quieter machine; one
    limited by the load generator's own CPU keeps the advice to add processes."""
    design = _design("plain", 6, 460)
    step = design["workers"]["steps"][0]
    step.update(harness_limited=BUSY)
    step["runs"][0].update(harness_limited=BUSY, machine_busy=BUSY, server_on_this_host=True)
    note = plan_answer.harness_note([design])
    assert "quieter machine" in note and "--processes" not in note and "PROCESSES" not in note, note
    own = "a load-generator process used more than 90 % of a core"
    step.update(harness_limited=own)
    step["runs"][0].update(harness_limited=own, machine_busy=None)
    note = plan_answer.harness_note([design])
    assert "quieter machine" not in note and setting("processes", 2) in note, note


def _stand_in_plan(tmp_path: Path, confirms_at: int, spoiled: set[int] = frozenset(), busy: bool = False,
                   passes_from: int = 3, untrusted=lambda cfg: False, probe_jobs_per_s: float | None = None,
                   intervals=lambda cfg: None, server_settings: dict | None = None, lines: list | None = None) -> dict:
    """A plan at 100 jobs/s whose runs are result files written by a stand-in for the load (a real run's summary,
    its figures set to pass or fail), to check the planner's orchestration and its answer alone: a 10 s step
    passes from ``passes_from`` workers, a longer (confirmation) run from ``confirms_at``, both up to 150 jobs/s;
    the first run at each count in ``spoiled``, and every run for which ``untrusted(cfg)`` is true, is
    harness-limited (its event loop lagged; with ``busy``, the machine was busy outside the run, the only reason
    it is suspect). The closed-loop probe completes ``probe_jobs_per_s`` (default 60 per worker). Returns
    ``plan.json`` as written. ``intervals(cfg)``: the rows of the run's ``intervals.csv`` (None: none written);
    ``server_settings``: set over ``run.json``'s; ``lines``: gets the plan's terminal lines."""
    import copy as _copy
    import csv

    from bench.config.run_config import build_config
    from bench.plan.options import PlanOptions
    from bench.plan.planner import Design, Planner
    from bench.results import slo as slo_rules

    template = json.loads((Path(__file__).parent / "fixtures" / "verdict" / "summary.json").read_text())
    run_json = json.loads((Path(__file__).parent / "fixtures" / "verdict" / "run.json").read_text())
    run_json["server_settings"].update(server_settings or {})
    made, spoiled = [], set(spoiled)

    def run(cfg):
        passes = cfg.workers >= (confirms_at if cfg.duration_s > 10 else passes_from) and cfg.rate <= 150
        s = _copy.deepcopy(template)
        if (cfg.workers in spoiled or untrusted(cfg)) and cfg.rate > 0:
            spoiled.discard(cfg.workers)
            passes = False
            if busy:
                s.update(suspect=True, suspect_reasons=["the machine spent 60 % of its CPU outside the run"],
                         outside_cpu_pct={"mean": 60.0, "max": 70.0}, steal_pct={"mean": 0.0, "max": 0.0},
                         outside_cpu_limit_pct=SUSPECT_OUTSIDE_CPU_PCT)
            else:
                s.update(suspect=True, suspect_reasons=["event-loop lag p99 20 ms (> 10 ms)"])
                s["loop_lag_us"] = {**s["loop_lag_us"], "p99": 20000.0}
        s.update(measured_s=cfg.duration_s, offered_rate_jobs_per_s=cfg.rate or None,
                 jobs_produced=int(cfg.rate * cfg.duration_s), saturated=not passes,
                 saturation_verdict="keeping up" if passes else "saturated: falls behind",
                 throughput_jobs_per_s=(cfg.rate if passes else 0.8 * cfg.rate) or probe_jobs_per_s or 60.0 * cfg.workers)
        s["jobs_completed"] = int(s["throughput_jobs_per_s"] * cfg.duration_s)
        s["slo"] = slo_rules.judge(cfg.slo, s)
        run_dir = tmp_path / "runs" / f"{len(made):03d}"
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps(run_json))
        (run_dir / "summary.json").write_text(json.dumps(s))
        rows = intervals(cfg)
        if rows:
            with (run_dir / "intervals.csv").open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
        made.append((cfg.workers, cfg.rate, cfg.duration_s))
        return run_dir

    def config(workers, rate):
        return build_config("default", {"workers": str(workers), "rate": str(rate), "slo": "claim_p99<=1s",
                                        "duration": "10s", "warmup": "1s"})

    planner = Planner([Design("the design", {}, config)], 100.0, PlanOptions(None, 1, 120.0), most_workers=50, run=run,
                      out_dir=tmp_path / "plan", inputs={"workload": "default", "database": "embedded",
                                                        "overrides": {"rate": "100", "slo": "claim_p99<=1s"},
                                                        "options": {"max_workers": None, "repetitions": 1,
                                                                    "confirm_s": 120.0}},
                      log=(lambda line: None) if lines is None else lines.append)
    planner.run()
    return json.loads((tmp_path / "plan" / "plan.json").read_text())


def test_a_failed_confirmation_steps_the_workers_up(tmp_path):
    """Near saturation 10 s steps can pass a worker count that a 120 s run shows falling behind: the plan then
    confirms one resolution step more, and quotes no headroom, which was measured at the count that fell behind."""
    state = _stand_in_plan(tmp_path, confirms_at=4, spoiled={4})
    design = state["designs"][0]
    assert design["workers"]["needed"] == 3
    at_4 = next(s for s in design["workers"]["steps"] if s["workers"] == 4)
    assert at_4["passed"] and len(at_4["retried"]) == 1 and at_4["retried"][0]["harness_limited"]
    assert [c["workers"] for c in state["confirmations"]] == [3, 4]
    answer = state["answer"]
    assert answer["workers"] == 4 and answer["confirmed"] and answer["exit_status"] == 0
    assert answer["sentence"].startswith("4 workers of") and "confirmed over 120 s" in answer["sentence"]
    assert "3 workers passed the 10 s steps; the longer run failed at 3 workers" in answer["sentence"]
    # the headroom search ran at 3 workers (150 jobs/s passed, and a step above it failed): not quoted at 4
    assert design["headroom"]["rate_jobs_per_s"] == 150 and design["headroom"]["at_least"] is False
    assert answer["headroom"] is None and answer["confirmation_failed_at"] == [3]
    assert ("no headroom quoted: the headroom search ran at 3 workers, which fell behind in the 120 s confirmation"
            in answer["sentence"])
    assert "150 jobs/s" not in answer["sentence"] and "at least" not in answer["sentence"]


def test_a_step_suspect_only_for_a_busy_machine_is_measured_again(tmp_path):
    """The first run at 3 workers failed in a machine busy outside the run (its only reason to be suspect): the
    step is measured again as a harness-limited one is, and 3 workers, which pass then, are the answer."""
    state = _stand_in_plan(tmp_path, confirms_at=3, spoiled={3}, busy=True)
    design = state["designs"][0]
    at_3 = next(s for s in design["workers"]["steps"] if s["workers"] == 3)
    assert at_3["passed"] and len(at_3["retried"]) == 1 and not at_3["retried"][0]["passed"]
    assert at_3["retried"][0]["harness_limited"].startswith("the machine spent 60 % of its CPU outside the run")
    assert design["workers"]["needed"] == 3 and state["answer"]["workers"] == 3 and state["answer"]["confirmed"]


def test_a_plan_whose_step_could_not_be_measured_says_so_and_exits_5(tmp_path, monkeypatch):
    """The tester's case: 12 workers meet the SLO, the step at 6 fails on a busy machine, measured again and busy
    again. The plan stops at 6: its answer (terminal, ``plan.json``, ``plan.html``) says 6 workers could not be
    measured, exit 5 (figures that cannot be trusted), not 4; ``plan.json`` marks the step untrusted and why, and
    ``plan.html`` marks its point untrusted, with a legend entry, and says so in the step table."""
    from bench.errors import EXIT_SUSPECT
    from bench.report import plan_page

    state = _stand_in_plan(tmp_path, confirms_at=12, passes_from=12, busy=True, probe_jobs_per_s=140.0,
                           untrusted=lambda cfg: cfg.workers == 6)  # Little's law: 100 x 4 / 140 -> 3 workers
    design, answer = state["designs"][0], state["answer"]
    steps = {s["workers"]: s for s in design["workers"]["steps"]}
    assert sorted(steps) == [3, 6] and design["workers"]["unmeasured"] == 6 and design["workers"]["needed"] is None
    assert steps[3]["trusted"] is True and steps[3]["untrusted_why"] is None and not steps[3]["passed"]
    assert steps[6]["trusted"] is False and len(steps[6]["retried"]) == 1
    assert steps[6]["untrusted_why"].startswith("the machine spent 60 % of its CPU outside the run")
    assert answer["exit_status"] == EXIT_SUSPECT == 5 and not answer["met"] and state["confirmations"] == []
    assert answer["sentence"].startswith(f"Could not be measured at 6 workers: {steps[6]['untrusted_why']} (measured "
                                         "twice); the workers search of skip_locked, batch 1, ")
    assert answer["unmeasured"] == [{"phase": "workers", "workers": 6, "rate_jobs_per_s": 100.0,
                                     "why": steps[6]["untrusted_why"], "retried": True}]
    assert "No design met" not in answer["sentence"] and "needs more" not in answer["sentence"]
    legends: list[str] = []

    def keep_legends(fig):
        legends.extend(t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts())
        return b""
    monkeypatch.setattr(plan_page, "save_png", keep_legends)
    page = plan_page.render_plan(tmp_path / "plan").read_text().replace("&#39;", "'")
    assert plan_page.UNTRUSTED_STYLE["label"].startswith("untrusted (") and plan_page.UNTRUSTED_STYLE["label"] in legends
    assert answer["sentence"] in page and "not measured (at 6)" in page
    assert page.count("untrusted (✕): no verdict") == 1 and "is marked untrusted (✕)" in page


def test_a_plan_whose_untrusted_runs_passed_when_measured_again_answers_as_before(tmp_path):
    """The first runs at 4 workers fail on a busy machine and pass when measured again; the steps that fail are
    trusted misses: the plan answers as ever (3 workers, exit 0), every step recorded trusted, the retried one with
    its first runs."""
    state = _stand_in_plan(tmp_path, confirms_at=3, spoiled={4}, busy=True)
    design, answer = state["designs"][0], state["answer"]
    steps = {s["workers"]: s for s in design["workers"]["steps"]}
    assert design["workers"]["needed"] == 3 and design["workers"]["unmeasured"] is None
    assert all(s["trusted"] is True and s["untrusted_why"] is None for s in steps.values())
    assert steps[4]["passed"] and steps[4]["retried"] and not steps[2]["passed"]
    assert answer["exit_status"] == 0 and answer["confirmed"] and answer["workers"] == 3 and answer["unmeasured"] == []
    assert answer["sentence"].startswith("3 workers of skip_locked") and "could not be measured" not in answer["sentence"]


def test_a_confirmation_that_could_not_be_measured_stops_without_more_workers(tmp_path):
    """The 120 s confirmation fails at 3 workers (a trusted miss), then at 4 only by a busy machine, twice: the
    plan stops there, exit 5, and says 4 could not be measured, not that it needs more than 4 workers."""
    state = _stand_in_plan(tmp_path, confirms_at=10, busy=True, untrusted=lambda cfg: cfg.duration_s > 10 and cfg.workers == 4)
    answer = state["answer"]
    assert [c["workers"] for c in state["confirmations"]] == [3, 4] and state["confirmations"][-1]["trusted"] is False
    assert answer["exit_status"] == 5 and not answer["met"] and answer["unmeasured"][0]["phase"] == "confirm"
    assert answer["sentence"].startswith("Could not be measured at 4 workers over 120 s: the machine spent 60 % of its CPU")
    assert "(measured twice); the confirmation of skip_locked, batch 1, " in answer["sentence"]
    assert "stopped there after it failed at 3 workers" in answer["sentence"] and answer["confirmation_failed_at"] == [3]
    assert "UNCONFIRMED" not in answer["sentence"] and "needs more than" not in answer["sentence"]
    assert "no headroom quoted: the 120 s confirmation could not be measured" in answer["sentence"]


def test_a_confirmation_that_fails_at_every_count_says_unconfirmed_first_and_quotes_no_headroom(tmp_path):
    """The confirmation fails at the first count and at each one after (the longer run needs 10 workers): the
    answer's first line says it is unconfirmed and gives what it knows (more than the last count that failed, the
    steps' count), and no headroom figure appears in the terminal's lines, ``plan.json``'s answer or ``plan.html``."""
    from bench.report.plan_page import render_plan

    state = _stand_in_plan(tmp_path, confirms_at=10)
    answer, design = state["answer"], state["designs"][0]
    assert [c["workers"] for c in state["confirmations"]] == [3, 4, 5]
    assert answer["confirmed"] is False and not answer["met"] and answer["exit_status"] == 4
    lines = plan_answer.answer_lines(answer)
    assert lines[0].startswith("UNCONFIRMED: skip_locked, batch 1, ")
    assert "needs more than 5 workers to hold 100 jobs/s over 120 s" in lines[0]
    assert "the confirmation failed at 3, 4 and 5 workers" in lines[0] and "3 workers passed the 10 s steps" in lines[0]
    assert answer["headroom"] is None and answer["confirmation_failed_at"] == [3, 4, 5]
    assert answer["slo_from"] == "the 10 s steps at 3 workers"
    assert "no headroom quoted: no worker count passed the 120 s confirmation" in lines[0]
    measured = f"×{design['headroom']['factor']:.1f}"  # the search at 3 workers held 150 jobs/s: ×1.5
    assert measured == "×1.5" and not any(measured in line or "150 jobs/s" in line for line in lines)
    page = render_plan(tmp_path / "plan").read_text().replace("&#39;", "'")
    assert lines[0] in page and page.count("no headroom quoted") == 2  # the answer, the designs table
    assert "headroom ×" not in page and "at least" not in page


def test_a_confirmed_answer_quotes_the_headroom_measured_at_its_workers_as_plan_json_has_it(tmp_path):
    """The confirmation passes at the workers the steps found: the headroom searched there is quoted, "up to" as
    ``at_least`` is false, in the sentence, ``plan.json``'s answer and ``plan.html``'s designs table."""
    from bench.report.plan_page import render_plan

    state = _stand_in_plan(tmp_path, confirms_at=3)
    answer, head = state["answer"], state["designs"][0]["headroom"]
    assert answer["workers"] == 3 and answer["confirmed"] and answer["confirmation_failed_at"] == []
    assert answer["headroom"] == {**head, "workers": 3} and head["at_least"] is False and head["factor"] == 1.5
    text = "headroom ×1.50 of 100 jobs/s (3 workers held up to 150 jobs/s)"
    assert answer["sentence"].startswith("3 workers of skip_locked, batch 1, ")
    assert answer["sentence"].endswith(f"confirmed over 120 s; {text}.")
    assert answer["slo_from"] == "the 120 s confirmation at 3 workers"
    state["designs"][0]["headroom"]["at_least"] = True  # as the search reports one that saw no failing step
    again = plan_answer.choose(state["designs"], 100.0, state["confirmations"])
    assert "headroom at least ×1.50 of 100 jobs/s (3 workers held at least 150 jobs/s)" in again["sentence"]
    assert render_plan(tmp_path / "plan").read_text().count(text) == 2  # the answer, the designs table


def _dead_rows_seconds(first: int, last: int, seconds: int = 120, live: int = 30_000) -> list[dict]:
    """``intervals.csv`` rows of a window whose queue table's dead rows go from ``first`` to ``last`` in even steps,
    beside ``live`` live rows, with no autovacuum pass (``autovacuum_count`` 0) and no periodic VACUUM."""
    return [{"t_s": t, "dead_tuples": round(first + (last - first) * t / (seconds - 1)),
             "table_tuples": live + round(first + (last - first) * t / (seconds - 1)), "autovacuum_count": 0,
             "vacuum_passes": ""} for t in range(seconds)]


@pytest.mark.parametrize("server", ["off", "on"])
def test_a_confirmation_whose_dead_rows_grew_with_no_vacuum_says_so_with_the_figures(tmp_path, server):
    """The confirmation's intervals show the queue table's dead rows growing from 1,198 to 61,720 in 120 s with no
    autovacuum pass: the failing confirmation lines and the UNCONFIRMED answer name the growth with those figures,
    and "autovacuum = off on this server" exactly when run.json's server settings say autovacuum = off (with it
    on, the server's autovacuum_naptime of 1 s woke the launcher many times in the window: it was due and none
    came)."""
    lines: list[str] = []
    state = _stand_in_plan(tmp_path, confirms_at=10, server_settings={"autovacuum": server}, lines=lines,
                           intervals=lambda cfg: _dead_rows_seconds(1198, 61720) if cfg.duration_s > 10 else None)
    answer = state["answer"]
    growth = "dead rows grew from 1,198 to 61,720 with no autovacuum pass in 120 s"
    said = growth + (" (autovacuum = off on this server)" if server == "off" else "")
    confirm_lines = [line for line in lines if line.lstrip().startswith("confirm:")]
    assert len(confirm_lines) == 3 and all(line.endswith(said + ")") for line in confirm_lines), confirm_lines
    answer_lines = plan_answer.answer_lines(answer)
    first = answer_lines[0]
    assert first.startswith("UNCONFIRMED: ") and said in first
    assert ("autovacuum = off" in first) == (server == "off")
    note = "note: autovacuum never runs on this server (autovacuum = off), whatever the queue table's"
    assert any(line.startswith(note) for line in answer_lines) == (server == "off"), answer_lines
    record = state["confirmations"][-1]["runs"][0]["dead_rows"]
    assert (record["start"], record["end"], record["window_s"]) == (1198, 61720, 120)
    steps = [line for line in lines if line.lstrip().startswith("workers:") and "FAIL" in line]
    assert steps and not any("dead rows" in line for line in steps)  # the 10 s steps wrote no intervals


def test_a_confirmation_whose_dead_rows_stayed_flat_names_no_growth(tmp_path):
    """The same failing confirmation with its dead rows flat at 1,198 (autovacuum = off on the server): no line of
    the plan names a growth of dead rows."""
    lines: list[str] = []
    state = _stand_in_plan(tmp_path, confirms_at=10, server_settings={"autovacuum": "off"}, lines=lines,
                           intervals=lambda cfg: _dead_rows_seconds(1198, 1198) if cfg.duration_s > 10 else None)
    first = plan_answer.answer_lines(state["answer"])[0]
    assert first.startswith("UNCONFIRMED: ") and "dead rows" not in first
    assert any("confirm:" in line and "FAIL" in line for line in lines)
    assert not any("dead rows" in line for line in lines)
    assert all(run["dead_rows"] is None for c in state["confirmations"] for run in c["runs"])


@pytest.mark.slow
def test_ctrl_c_keeps_what_was_measured_and_the_same_command_resumes(dsn, tmp_path):
    import signal
    import subprocess
    import sys

    from conftest import REPO

    args = ["--dsn", dsn, "--results", str(tmp_path), "--rate", "100", "--work-ms", "2", "--slo", "claim_p99<=5s",
            "--duration", "3s", "--warmup", "1s", "--repetitions", "1", "--confirm-s", "0"]
    proc = subprocess.Popen([sys.executable, "-m", "bench.cli.main", "plan", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def recorded() -> bool:
        for path in tmp_path.glob("plans/*/plan.json"):
            try:
                return bool(json.loads(path.read_text()).get("runs"))
            except ValueError:  # caught while it is being written
                return False
        return False

    # the probe's run is recorded in plan.json: the plan is in its first step after it
    wait_until(recorded, 120, "the probe's run recorded in plan.json", poll_s=0.2)
    # the first step's run is in its measured window (the probe's claim log is complete, with 3 seconds)
    wait_until(lambda: measured_seconds(tmp_path)[1:2] >= [1], 60, "the first step's first measured second")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    (state_path,) = tmp_path.glob("plans/*/plan.json")
    state = json.loads(state_path.read_text())
    assert state["complete"] is False and state["runs"], state
    measured = set(state["runs"].values())
    assert "run the same command again to resume" in err
    proc2, resumed, _ = _plan(dsn, tmp_path, *args[4:])
    assert proc2.returncode == 0, proc2.stdout + proc2.stderr
    assert resumed["complete"] and measured <= set(resumed["runs"].values())
    assert len(list(tmp_path.glob("plans/*/plan.json"))) == 1  # resumed in place, not a new plan
