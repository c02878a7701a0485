"""End to end: one short ``qbench run`` against the test database, then its result files.

One run per module (``--duration 5s --warmup 1s --workers 4``); each test checks one
part of the result-file contract (docs/design.md "Result files"): the files exist, the
summary's keys and invariants, that per-second figures add up to the summary, that
the claim p99 can be recomputed from the HdrHistogram log, that the report embeds
its four figures and re-renders from the files alone, and that the database holds
the tool's schema and nothing else.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import json
import re
import shutil
from pathlib import Path

import psycopg
import pytest
from hdrh.log import HistogramLogReader

from bench.measure import metrics
from bench.engines.postgres.db import SCHEMA_MARK
from bench.results.run_files import INTERVAL_COLUMNS, PROCESS_SECOND_COLUMNS, SUMMARY_KEYS
from conftest import qbench, run_and_load

INVARIANT_KEYS = {"double_claims", "lost_jobs", "duplicated_jobs", "over_claims", "stale_completions_applied",
                  "double_completions"}
PNG_URI = re.compile(r'data:image/png;base64,([A-Za-z0-9+/=]+)')
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MEASURED_S = 5


@pytest.fixture(scope="module")
def run(dsn, tmp_path_factory):
    """(run_dir, summary, completed process) of one 5 s run with 4 workers."""
    results = tmp_path_factory.mktemp("e2e") / "results"
    return run_and_load(dsn, results, "--duration", f"{MEASURED_S}s", "--warmup", "1s", "--workers", "4",
                        timeout=120)


@pytest.fixture(scope="module")
def intervals(run) -> tuple[list[str], list[dict]]:
    with (run[0] / "intervals.csv").open(newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def _read_hlog(path: Path):
    """Sum of every interval histogram in ``path`` and the intervals' absolute start times (s)."""
    total = metrics.new_histogram("claim_latency_us")
    reader = HistogramLogReader(str(path), metrics.new_histogram("claim_latency_us"))
    starts = []
    while (hist := reader.get_next_interval_histogram()) is not None:
        starts.append(hist.get_start_time_stamp() / 1000.0)
        total.add(hist)
    return total, starts


def test_run_writes_every_result_file_and_prints_report_path(run):
    """run.json, intervals.csv, summary.json, one .hlog per histogram and report.html exist;
    the last stdout line is ``report: <path>`` naming this run's existing report."""
    run_dir, _, proc = run
    for name in ("run.json", "intervals.csv", "summary.json", "report.html"):
        assert (run_dir / name).is_file(), name
    assert sorted(p.name for p in (run_dir / "histograms").glob("*.hlog")) == sorted(
        f"{n}.hlog" for n in metrics.HISTOGRAM_NAMES)
    last = proc.stdout.rstrip("\n").splitlines()[-1]
    assert last.startswith("report: ")
    reported = Path(last[len("report: "):])
    assert reported.is_file()
    assert reported == (run_dir / "report.html").resolve()


def test_summary_has_every_key_and_clean_invariants(run):
    """Every SUMMARY_KEYS key, the four invariants all 0, a complete run with throughput
    > 0 computed from jobs completed over the measured window, and no claim above batch 1."""
    run_dir, s, _ = run
    assert set(SUMMARY_KEYS) <= set(s)
    from bench.results.model import FORMAT_VERSION, RunResult

    result = RunResult.load(run_dir)
    assert s["format_version"] == FORMAT_VERSION == result.run["format_version"]
    assert result.problems == [], result.problems
    assert set(s["invariants"]) == INVARIANT_KEYS
    assert s["invariants"] == {k: 0 for k in INVARIANT_KEYS}
    assert s["complete"] is True
    assert s["config"]["workers"] == 4 and s["config"]["duration_s"] == MEASURED_S and s["config"]["warmup_s"] == 1
    assert MEASURED_S - 0.5 < s["measured_s"] < MEASURED_S + 0.5
    assert s["throughput_jobs_per_s"] > 0
    # measured_s is rounded to 1 ms in the summary; the throughput was computed unrounded.
    assert s["throughput_jobs_per_s"] == pytest.approx(s["jobs_completed"] / s["measured_s"], rel=2e-4)
    assert s["jobs_completed"] > 0
    # In flight at a window edge: claimed in warm-up and completed inside, or claimed
    # inside and completed after; at most one batch per worker at each edge.
    assert abs(s["jobs_claimed"] - s["jobs_completed"]) <= s["config"]["workers"] * s["config"]["batch"]
    assert s["max_rows_per_claim"] == 1
    for key in ("claim_latency_us", "complete_latency_us", "pickup_latency_ms"):
        assert set(s[key]) == {"p50", "p95", "p99", "max", "mean"}
        assert 0 < s[key]["p50"] <= s[key]["p95"] <= s[key]["p99"] <= s[key]["max"], (key, s[key])


def test_intervals_csv_header_rows_and_totals(run, intervals):
    """intervals.csv has the INTERVAL_COLUMNS header, one row per measured second
    (t_s 0..4), and its per-second counters add up to the summary's totals."""
    _, s, _ = run
    header, rows = intervals
    assert header == list(INTERVAL_COLUMNS)
    assert [int(r["t_s"]) for r in rows] == list(range(MEASURED_S))
    assert sum(int(r["jobs_completed"]) for r in rows) == s["jobs_completed"]
    assert sum(int(r["jobs_claimed"]) for r in rows) == s["jobs_claimed"]
    assert sum(int(r["empty_claims"]) for r in rows) == s["empty_claims"]
    assert sum(int(r["claims"]) for r in rows) == s["claims"]


def test_processes_csv_is_the_one_process_seconds(run, intervals):
    """With one process, processes.csv has one row per measured second, process 1, whose CPU,
    loop lag and counters are intervals.csv's."""
    _, rows = intervals
    with (run[0] / "processes.csv").open(newline="") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames) == PROCESS_SECOND_COLUMNS
        per_process = list(reader)
    assert [(r["t_s"], r["process"]) for r in per_process] == [(r["t_s"], "1") for r in rows]
    for mine, row in zip(per_process, rows):
        assert (mine["cpu_pct"], mine["user_pct"], mine["loop_lag_p99_us"], mine["jobs_completed"]) == (
            row["harness_cpu_pct"], row["harness_user_pct"], row["loop_lag_p99_us"], row["jobs_completed"])


def test_measurement_cost_is_the_runs_own_seconds(run, intervals):
    """With one process, the measurement's cost is that process's mean CPU (it runs the load too), the monitor's
    mean query time per second and its server backends' mean CPU, each recomputed here from intervals.csv."""
    _, s, proc = run
    _, rows = intervals

    def mean(column: str) -> float:
        values = [float(r[column]) for r in rows if r[column] != ""]
        return sum(values) / len(values)
    cost = s["measurement_cost"]
    assert cost["tool_process_does"] == "load and measurement"
    assert cost["tool_process_cpu_pct"] == pytest.approx(mean("harness_cpu_pct"), abs=0.051)
    assert cost["monitor_query_us_per_s"] == pytest.approx(mean("monitor_query_us"), abs=0.051)
    assert cost["monitor_query_us_per_s"] > 0
    assert cost["monitor_server_cpu_pct"] == pytest.approx(mean("server_cpu_monitor_us") / 1e4, abs=0.0051)
    assert f"the monitor's queries {cost['monitor_query_us_per_s'] / 1000:,.1f} ms per second" in proc.stdout


def test_claim_p99_recomputed_from_the_histogram_log(run, intervals):
    """Adding the interval histograms of claim_latency_us.hlog (HistogramLogReader)
    gives one histogram per measured second, as many claims as intervals.csv, and the
    summary's claim p50/p99/max within HdrHistogram precision."""
    run_dir, s, _ = run
    total, starts = _read_hlog(run_dir / "histograms" / "claim_latency_us.hlog")
    assert len(starts) == MEASURED_S
    assert total.get_total_count() == sum(int(r["claims"]) for r in intervals[1])
    for pct in (50, 99):
        recomputed = total.get_value_at_percentile(pct)
        assert total.values_are_equivalent(recomputed, s["claim_latency_us"][f"p{pct}"]), (pct, recomputed)
    assert total.values_are_equivalent(total.get_max_value(), s["claim_latency_us"]["max"])
    completions, _ = _read_hlog(run_dir / "histograms" / "complete_latency_us.hlog")
    assert completions.get_total_count() == s["completions"]


def test_each_second_pickup_p99_is_its_histogram_interval(run, intervals):
    """intervals.csv's pickup_p99_ms (what recovery is judged by) is, second by second, the p99 of that second's
    interval in pickup_latency_us.hlog, in ms."""
    run_dir, _, _ = run
    reader = HistogramLogReader(str(run_dir / "histograms" / "pickup_latency_us.hlog"),
                                metrics.new_histogram("pickup_latency_us"))
    seconds = []
    while (hist := reader.get_next_interval_histogram()) is not None:
        seconds.append(hist.get_value_at_percentile(99) if hist.get_total_count() else None)
    rows = intervals[1]
    assert len(seconds) == len(rows) == MEASURED_S and any(seconds)
    for p99_us, row in zip(seconds, rows):
        if p99_us is None:
            assert row["pickup_p99_ms"] == ""
        else:
            assert float(row["pickup_p99_ms"]) == pytest.approx(p99_us / 1000, abs=0.001), (p99_us, row["pickup_p99_ms"])


def test_the_operations_table_counts_what_was_counted(run):
    """The end block's claim and completion rows count the claims and completion statements counted in the
    window (not a rate times the window), as the summary has them."""
    _, s, proc = run
    rows = {line.split()[0]: line.split()[1] for line in proc.stdout.splitlines()
            if line.split()[:1] in (["claim"], ["completion"])}
    assert rows == {"claim": f"{s['claims']:,}", "completion": f"{s['completions']:,}"}


def test_histogram_log_timestamps_fall_in_the_measured_window(run):
    """A standard HdrHistogram log reader places each interval inside the run's measured
    window (run.json measured_start..measured_end), not at some other date."""
    run_dir, _, _ = run
    info = json.loads((run_dir / "run.json").read_text())
    start = dt.datetime.fromisoformat(info["measured_start"]).timestamp()
    end = dt.datetime.fromisoformat(info["measured_end"]).timestamp()
    _, starts = _read_hlog(run_dir / "histograms" / "claim_latency_us.hlog")
    assert starts, "no interval in the log"
    for t in starts:
        assert start - 1.0 <= t <= end + 1.0, (
            f"interval starts at {dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat()}, "
            f"measured window {info['measured_start']} .. {info['measured_end']}")


def test_report_embeds_four_pngs_and_rerenders_from_files(run, tmp_path):
    """report.html holds its 9 embedded PNGs; after deleting it, ``qbench report RUN_DIR``
    exits 0, prints the path, writes it back with the same PNGs and leaves summary.json
    byte for byte unchanged."""
    src = run[0]
    images = PNG_URI.findall((src / "report.html").read_text(encoding="utf-8"))
    assert len(images) == 9  # throughput, claim latency, claim vs table size, loop lag, oldest age, locks/running,
    # dead tuples, latency by percentile, wait events
    assert all(base64.b64decode(img).startswith(PNG_SIGNATURE) for img in images)

    run_dir = tmp_path / src.name
    shutil.copytree(src, run_dir)
    summary_bytes = (run_dir / "summary.json").read_bytes()
    (run_dir / "report.html").unlink()

    proc = qbench("report", str(run_dir), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip("\n").splitlines()[-1] == f"report: {(run_dir / 'report.html').resolve()}"
    assert len(PNG_URI.findall((run_dir / "report.html").read_text(encoding="utf-8"))) == len(images)
    assert (run_dir / "summary.json").read_bytes() == summary_bytes


def test_database_holds_the_tools_schema_and_nothing_else(run, dsn):
    """After the run: the qbench schema (marked as the tool's, with the seeded rows) is
    the only schema besides public, no relation exists outside it, and no tool
    connection is left open."""
    run_dir, s, _ = run
    info = json.loads((run_dir / "run.json").read_text())
    with psycopg.connect(dsn, autocommit=True) as conn:
        schemas = {r[0]: r[1] for r in conn.execute(
            "SELECT nspname, obj_description(oid, 'pg_namespace') FROM pg_namespace "
            "WHERE nspname !~ '^pg_' AND nspname <> 'information_schema'").fetchall()}
        outside = conn.execute("""
            SELECT n.nspname, c.relname, c.relkind::text FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname !~ '^pg_' AND n.nspname NOT IN ('information_schema', 'qbench')""").fetchall()
        rows = conn.execute("SELECT count(*) FROM qbench.jobs").fetchone()[0]
        done = conn.execute("SELECT count(*) FROM qbench.jobs WHERE status = 'done'").fetchone()[0]
        left_open = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                 "AND application_name LIKE 'queue-bench%'").fetchone()[0]
    assert set(schemas) == {"public", "qbench"}
    assert schemas["qbench"] == SCHEMA_MARK
    assert outside == []
    assert rows == info["backlog"] == sum(s["status_counts"].values())
    assert done == s["status_counts"]["done"] >= s["jobs_completed"]
    assert left_open == 0


def test_the_round_trip_and_round_trips_per_job_are_measured(run, intervals):
    """The probe's round trip each second and over the window (docs/network.md): ten samples a second, p50 at most
    p99, below the claim's p50 (a claim is a round trip and a statement); round trips per job at least the minimum
    path and the per-second counts adding up to the summary's; the split says why the server's part is missing
    (this server has no pg_stat_statements loaded) but still estimates the network's."""
    _, s, proc = run
    _, rows = intervals
    rtt, trips, split = s["round_trip"], s["round_trips"], s["latency_split"]
    assert rtt["errors"] == 0 and rtt["samples"] >= 0.8 * MEASURED_S * 1000 / rtt["period_ms"], rtt
    assert 0 < rtt["p50_us"] <= rtt["p99_us"] and rtt["p50_us"] < s["claim_latency_us"]["p50"], rtt
    for row in rows:
        assert 0 < int(row["round_trip_p50_us"]) <= int(row["round_trip_p99_us"]), row
    assert sum(int(r["worker_round_trips"]) for r in rows) == trips["worker_round_trips"]
    assert trips["per_job"] >= trips["minimum_per_job"] == 2 / s["config"]["batch"], trips
    assert trips["per_claim"] == trips["per_completion"] == 1, trips  # TXN=short, batch 1: one statement each
    claim = split["claim"]
    assert claim["network_us"] == pytest.approx(rtt["mean_us"], abs=0.1) and claim["server_us"] is None
    assert claim["not_measured"] == s["pg_stat_statements"]["unavailable"], claim
    assert "round trip (empty query every" in proc.stdout and "round trips per job: " in proc.stdout


def test_the_wait_events_sampling_cost_is_inside_the_monitors(run, intervals):
    """The wait events' samples (ten a second) take their time inside the monitor's query time, second by second;
    the run's mean of them is summary.json's, and the terminal says where the workers' active time went."""
    _, s, proc = run
    _, rows = intervals
    waits = s["wait_events"]
    assert waits["measured"] and waits["backends"] == "the workers' backends"
    sampled = [r for r in rows if r["wait_samples"] not in ("", "0")]
    assert len(sampled) >= MEASURED_S - 1 and all(int(r["wait_samples"]) >= 5 for r in sampled), rows
    assert all(0 < int(r["wait_query_us"]) < int(r["monitor_query_us"]) for r in sampled), rows
    costs = [int(r["wait_query_us"]) for r in rows if r["wait_query_us"] != ""]
    assert waits["query_us_per_s"] == pytest.approx(sum(costs) / len(costs), abs=0.051)
    assert waits["mean_active_backends"] <= 4  # of 4 workers
    assert "wait events (the workers' backends" in proc.stdout
