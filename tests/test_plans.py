"""The claim plan the workers really ran (field case FR-09), read from their own sessions.

The workers prepare their claim while the table is empty; producers then fill it.
Under ``plan_cache_mode = auto`` PostgreSQL switches the prepared claim to a generic
plan built on the empty table (sequential scans), whose cost grows with the table,
and the queue falls behind; with ``force_custom_plan`` on the workers' sessions the
same load keeps up. Autovacuum is off on the tool's table in these runs: an
autoanalyze would invalidate the cached plan and PostgreSQL would plan it again on
the full table.
"""

from __future__ import annotations

import pytest

from bench.engines.postgres import plans
from bench.analysis import queue_verdict
from bench.analysis.claim_growth import claim_growth
from bench.config.run_config import build_config
from bench.usage import typed
from conftest import qbench, run_and_load

#: A load whose cost per job custom plans keep flat (4 workers, jobs without work: the
#: claim and completion are the whole cycle, well under 1 ms each), while the two
#: sequential scans per claim of the empty-table generic plan grow with the table (about
#: three tuples per job with autovacuum off) until claims take more server CPU than the
#: 2 cores have at 600 jobs/s: quiet 2-core machine, 2026-12-01: custom 584.8 jobs/s kept
#: up with claim p99 1.2 ms; auto fell to 452 jobs/s, saturated. No job arrives in the
#: first second (the burst at rate 0): the workers start on a quiet queue, as in FR-09,
#: and each session's sixth execution, where ``auto`` may switch plans, sees the empty table.
EMPTY_TABLE_LOAD = ("--workers", "4", "--work-ms", "0", "--rate", "600", "--arrival", "constant",
                    "--bursts", "0-1@0", "--duration", "40s", "--warmup", "0s", "--no-autovacuum")


@pytest.mark.slow
def test_empty_table_auto_runs_generic_seq_scan_and_falls_behind_where_custom_keeps_up(dsn, tmp_path):
    auto_dir, auto, _ = run_and_load(dsn, tmp_path / "auto", *EMPTY_TABLE_LOAD, "--plan-cache", "auto")
    custom_dir, custom, _ = run_and_load(dsn, tmp_path / "custom", *EMPTY_TABLE_LOAD,
                                         "--plan-cache", "force_custom_plan")

    w = auto["plans"]["workers"]
    assert w["plan"] in ("generic", "mixed"), w
    assert w["sessions_read"] == 4
    assert "Seq Scan on jobs" in w["scan"], w
    # Under auto every session's first five executions are custom plans.
    assert w["custom_executions"] >= 5 * w["sessions_read"]
    assert w["generic_executions"] > w["custom_executions"]
    assert auto["autovacuum"]["enabled"] is False and auto["autovacuum"]["autoanalyze_runs"] == 0
    assert auto["saturated"] is True, auto["saturation_verdict"]
    assert any("scans the whole queue table" in text for text in auto["plan_warnings"])
    first_line = (auto_dir / "claim_plan.txt").read_text().splitlines()[0]
    assert first_line.startswith(f"-- the workers' claim as their own sessions ran it: {w['plan']}")

    c = custom["plans"]["workers"]
    assert c["plan"] == "custom", c
    assert c["generic_executions"] == 0
    assert c["custom_executions"] >= custom["claims_per_s"] * custom["measured_s"] * 0.99
    assert "Index Scan" in c["scan"] and "Seq Scan" not in c["scan"], c
    assert custom["saturated"] is False, custom["saturation_verdict"]
    assert custom["plan_warnings"] == []
    # The same rate, the same server, the same test: one held it and one did not.
    assert custom["throughput_jobs_per_s"] > auto["throughput_jobs_per_s"]

    assert qbench("report", str(auto_dir)).returncode == 0
    html = (auto_dir / "report.html").read_text()
    assert "scans the whole queue table" in html and "workers&#39; claim plan" in html
    assert ("Autovacuum is off on this server" if auto["autovacuum"]["server_autovacuum"] is False
            else "Autovacuum was off on the queue table") in html


@pytest.mark.slow
def test_force_generic_counts_every_execution_and_unprepared_reads_no_counts(dsn, tmp_path):
    base = ("--workers", "2", "--backlog", "20000", "--duration", "3s", "--warmup", "1s")
    _, generic, _ = run_and_load(dsn, tmp_path / "g", *base, "--plan-cache", "force_generic_plan")
    g = generic["plans"]["workers"]
    assert g["plan"] == "generic" and g["custom_executions"] == 0
    # Every claim the recorder saw in the measured window was one execution of the prepared claim.
    assert g["generic_executions"] >= generic["claims_per_s"] * generic["measured_s"] * 0.99

    run_dir, unprepared, _ = run_and_load(dsn, tmp_path / "u", *base, "--no-prepared")
    u = unprepared["plans"]["workers"]
    assert u["plan"] == "unprepared" and u["generic_executions"] is None and u["plan_cache"] is None
    assert "Index Scan" in u["scan"], u
    assert unprepared["jobs_completed"] > 0
    assert "unprepared" in (run_dir / "claim_plan.txt").read_text().splitlines()[0]


def test_plan_parameters_are_refused_with_one_line(tmp_path):
    for args, param in ((("--plan-cache", "sometimes"), "PLAN_CACHE"), (("--prepared", "maybe"), "PREPARED"),
                        (("--no-prepared", "--plan-cache", "force_custom_plan"), "PLAN_CACHE"),
                        (("--autovacuum", "later"), "AUTOVACUUM")):
        proc = qbench("run", "--results", str(tmp_path / "r"), *args)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"qbench: {typed(param)}:"), proc.stderr
    assert not (tmp_path / "r").exists()


def _rows(tuples, p50s):
    return [{"table_tuples": t, "claim_p50_us": c} for t, c in zip(tuples, p50s)]


def test_claim_growth_rule():
    tuples = [1000 * (i + 1) for i in range(12)]
    growing = claim_growth(_rows(tuples, [100 + 50 * i for i in range(12)]))
    assert growing["grows"] is True and growing["r"] > 0.99
    assert abs(growing["slope_us_per_1k_tuples"] - 50.0) < 1e-6
    flat = claim_growth(_rows(tuples, [100 + (i % 2) for i in range(12)]))
    assert flat["grows"] is False
    # A table that does not grow cannot make the claim grow with it.
    steady = claim_growth(_rows([5000 + i for i in range(12)], [100 + 50 * i for i in range(12)]))
    assert steady["grows"] is False
    assert claim_growth(_rows(tuples[:3], [1, 2, 3]))["grows"] is None


def test_workers_plan_share_rule():
    def sessions(generic, custom):
        return [{"worker": "worker-1", "generic_plans": generic, "custom_plans": custom}]

    explain = {"worker": "worker-1", "text": "Update on jobs j\n  ->  Seq Scan on jobs"}
    kwargs = {"prepared": True, "plan_cache": "auto"}
    assert plans.workers_plan(sessions(95, 5), explain, **kwargs)["plan"] == "generic"
    assert plans.workers_plan(sessions(94, 6), explain, **kwargs)["plan"] == "mixed"
    assert plans.workers_plan(sessions(5, 95), explain, **kwargs)["plan"] == "custom"
    assert plans.workers_plan([], explain, prepared=False, plan_cache="auto")["plan"] == "unprepared"
    assert plans.scans_table(plans.workers_plan(sessions(95, 5), explain, **kwargs)["scan"])


def test_a_queue_that_falls_behind_late_in_the_window_is_saturated():
    """FR-09's shape: flat for 23 s, then the age climbs to 2.9 s by 60 s. The whole-window slope
    (about 0.049 s per s) is diluted by the flat start; the second half's is not."""
    from collections import Counter

    cfg = build_config("steady", {})
    ages = [0.05] * 23 + [0.07 * i for i in range(1, 38)]
    rows = [{"t_s": t, "oldest_eligible_age_s": a} for t, a in enumerate(ages)]
    arrived = Counter(jobs_produced=300 * 60, jobs_completed=int(0.951 * 300 * 60))
    late = queue_verdict.saturation(cfg.rate, rows, arrived, 60.0)
    assert late["oldest_age_slope_s_per_s"] < queue_verdict.SATURATION_SLOW_SLOPE
    assert late["oldest_age_late_slope_s_per_s"] > queue_verdict.SATURATION_SLOW_SLOPE
    assert late["saturated"] is True and "second half" in late["saturation_verdict"]
    # The same climb, then a recovery to 0 (a fault window that closed): keeping up at the end.
    recovered = ages[:40] + [max(0.0, ages[39] - 0.2 * i) for i in range(1, 21)]
    rows = [{"t_s": t, "oldest_eligible_age_s": a} for t, a in enumerate(recovered)]
    ok = queue_verdict.saturation(cfg.rate, rows, Counter(jobs_produced=18000, jobs_completed=18000), 60.0)
    assert ok["saturated"] is False
