"""The measurement's own cost: ``MONITOR=stats`` (the monitor's statistics only) on a real run, the overhead
benchmark's reference side (each library's own worker from its own command line, unmeasured) on the real
PostgreSQL, and the benchmark's jobs/s rule and refusals (docs/measurements/overhead.md)."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from conftest import REPO, run_and_load
from bench.cli.overhead_bench import middle_rate, own_side, parse
from bench.run_summary.rows import monitor_notes
from bench.usage import VIA_MAKE_ENV


def test_middle_rate_counts_the_jobs_between_the_10th_and_90th_percentile_finish():
    # 100 jobs: one every 10 ms, then a slow tail; the middle 80 % is the steady part only
    times = [i * 0.01 for i in range(90)] + [0.9 + i for i in range(10)]
    assert middle_rate(times) == pytest.approx((89 - 10) / (times[89] - times[10]))
    assert middle_rate(times) == pytest.approx(100.0)
    assert middle_rate([1.0] * 9) is None and middle_rate([1.0] * 20) is None


@pytest.mark.parametrize("argv, word", [(["--queues", "celery"], "--queues"), (["--jobs", "0"], "--jobs"),
                                        (["--rounds", "0"], "--rounds")])
def test_the_benchmark_refuses_a_bad_option_in_one_line_with_status_2(argv, word):
    proc = subprocess.run([sys.executable, "-m", "bench.cli.overhead_bench", "--dsn", "postgresql://x/y", *argv],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2 and word in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_monitor_stats_says_no_table_query_ran_instead_of_a_sampling_note(monkeypatch):
    rows = [{"t_s": 0, "oldest_eligible_age_s": None, "queue_depth": None}]
    full = monitor_notes(rows, 0, {"age": [], "counts": []}, 0.0)
    stats = monitor_notes(rows, 0, {"age": [], "counts": []}, 0.0, table_queries=False)
    assert any("sampled in 0 of 1 seconds" in n for n in full)
    assert stats == ["--monitor stats: no table query ran during the load (no oldest eligible age, queue depth or "
                     "running count per second)"]
    monkeypatch.setenv(VIA_MAKE_ENV, "1")  # to a make user, in Make's syntax
    assert monitor_notes(rows, 0, {}, 0.0, table_queries=False)[0].startswith("MONITOR=stats: no table query ran")


def test_the_plots_say_the_table_queries_were_off_not_too_expensive():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    from bench.report.run_plots import draw_locks_running, draw_oldest_age
    df = pd.DataFrame({"t_s": [0, 1], "oldest_eligible_age_s": [None, None], "queue_depth": [None, None],
                       "running": [None, None], "lock_waiters": [0, 1], "notify_lock_waiters": [0, 0]})
    for monitor, words in (("stats", "table queries were off (--monitor stats)"), ("full", "too expensive")):
        fig, (age, locks) = plt.subplots(2)
        draw_oldest_age(age, df, {"config": {"monitor": monitor}})
        assert any(words in t.get_text() for t in age.texts), [t.get_text() for t in age.texts]
        draw_locks_running(locks, df, {"config": {"monitor": monitor}})  # lock waiters drawn, no empty "running"
        assert [line.get_label() for line in locks.get_lines()] == ["lock waiters (sessions)"]
        plt.close(fig)


@pytest.mark.slow
def test_monitor_stats_runs_no_table_query_and_keeps_the_statistics(dsn, tmp_path):
    run_dir, summary, proc = run_and_load(dsn, tmp_path, "--monitor", "stats", "--duration", "3s", "--warmup", "1s",
                                          "--workers", "4", "--work-ms", "1")
    with (run_dir / "intervals.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and all(r["queue_depth"] == "" and r["oldest_eligible_age_s"] == "" for r in rows)
    assert all(r["wait_samples"] in ("", "0") for r in rows)  # nor the wait events' samples
    assert summary["wait_events"] == {"measured": False, "not_measured": "not measured: --monitor stats leaves the "
                                                                          "wait events' sampling out"}
    assert all(r["lock_waiters"] != "" and r["dead_tuples"] != "" for r in rows)  # the statistics every second
    assert summary["monitor_notes"][0].startswith("--monitor stats: no table query ran")
    assert "oldest eligible age: not sampled (--monitor stats: the monitor's table queries were off)" in proc.stdout
    assert summary["config"]["monitor"] == "stats" and summary["invariants"]["lost_jobs"] == 0
    assert "measurement cost: the tool's process" in proc.stdout


@pytest.mark.parametrize("library", ["procrastinate", "pgqueuer"])
@pytest.mark.slow
def test_a_librarys_own_command_line_drains_the_seeded_jobs_read_from_its_own_tables(dsn, library):
    args = parse(["--dsn", dsn, "--jobs", "300", "--workers", "20", "--work-ms", "1", "--schema", f"qb_own_{library}"])
    result = own_side(args, library)
    assert result["jobs"] == 300 and result["jobs_per_s"] > 0 and result["cpu_s"] > 0, result
    # the middle 80 % of its jobs finished within the process's life: at least that share of them over all of it
    assert result["jobs_per_s"] >= 0.8 * 300 / result["wall_s"], result

