"""PROCESSES > 1: the swarm in Locust's own master and worker processes (bench/load/distributed.py),
against the real PostgreSQL. The merged figures are the processes' figures added up, and the merged
percentiles are those of the union of every process's values."""

from __future__ import annotations

import json
import os

import psycopg

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from bench.measure.metrics import new_histogram, values_at_percentiles
from conftest import CLEAN_INVARIANTS, run_and_load


def _union(paths) -> HdrHistogram:
    """Every interval of every log in ``paths``, added into one histogram (decoded here, not by the tool)."""
    total = new_histogram("claim_latency_us")
    for path in paths:
        reader = HistogramLogReader(str(path), new_histogram("claim_latency_us"))
        while (hist := reader.get_next_interval_histogram()) is not None:
            total.add(hist)
        reader.close()
    return total


def test_two_processes_add_up_and_merge_exactly(dsn, tmp_path):
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--processes", "2", "--workers", "6", "--backlog", "40000",
                                 "--duration", "4s", "--warmup", "1s", timeout=180)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["config"]["processes"] == 2
    procs = s["processes"]
    assert [p["process"] for p in procs] == [1, 2] and not any(p["lost"] for p in procs)
    assert sorted(p["workers"] for p in procs) == [3, 3]  # Locust's master splits the users evenly
    assert len({p["pid"] for p in procs} | {os.getpid()}) == 3
    for key in ("jobs_claimed", "jobs_completed", "empty_claims"):
        assert sum(p["counters"][key] for p in procs) == s[key], key
    assert sum(p["counters"]["errors"] for p in procs) == sum(s["errors"].values())
    assert all(p["counters"]["jobs_completed"] > 0 and p["missing_seconds"] == [] for p in procs)
    assert all(p["loop_lag_p99_us"] is not None and p["cpu_max_pct"] > 0 for p in procs)
    # The merged p99 is the p99 of the union of the two processes' values, second by second.
    union = _union([run_dir / "histograms" / f"process-{i}" / "claim_latency_us.hlog" for i in (1, 2)])
    merged = _union([run_dir / "histograms" / "claim_latency_us.hlog"])
    assert union.get_total_count() == merged.get_total_count() == sum(p["counters"]["claims"] for p in procs)
    assert s["claim_latency_us"]["p99"] == values_at_percentiles(union, [99])[0]
    assert s["claim_latency_us"]["max"] == union.get_max_value()
    assert s["plans"]["workers"]["sessions_read"] == 6, (s["plans"]["workers"], s["processes"])  # each process read its own workers plan counts
    assert s["invariants"] == CLEAN_INVARIANTS
    page = (run_dir / "report.html").read_text()
    table = page[page.index('<table id="processes">'):]
    assert table[:table.index("</table>")].count("<tr") == 3  # a header and one row per process


def test_a_killed_process_is_named_and_its_jobs_come_back(dsn, tmp_path):
    """SIGKILL of one worker process mid-run: the run completes, the summary names the lost process and
    the seconds it missed, the audit (database facts) finds no job lost, and with a lease and the reaper
    the jobs it held are claimed again."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from conftest import REPO

    argv = [sys.executable, "-m", "bench.cli.main", "run", "--dsn", dsn, "--results", str(tmp_path),
            "--processes", "2", "--workers", "6", "--work-ms", "20", "--batch", "5", "--lease-s", "1",
            "--reaper-interval-s", "0.5", "--backlog", "20000", "--duration", "8s", "--warmup", "1s"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        victim = None
        deadline = time.monotonic() + 60
        while victim is None and time.monotonic() < deadline:
            for child in psutil.Process(proc.pid).children(recursive=True):
                try:
                    cmd = child.cmdline()
                except psutil.Error:
                    continue
                if "bench.load.worker_process" in cmd and cmd[cmd.index("--index") + 1] == "2":
                    victim = child
            time.sleep(0.1)
        assert victim is not None, "no second worker process"
        time.sleep(4)  # well inside the measured window
        victim.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, out + err
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    s = json.loads((run_dir / "summary.json").read_text())
    lost = [p for p in s["processes"] if p["lost"]]
    assert [p["process"] for p in lost] == [2], s["processes"]
    assert lost[0]["missing_seconds"], lost[0]
    assert s["invariants"]["lost_jobs"] == 0 and s["invariants"]["double_claims"] == 0, s["invariants"]
    assert s["lease_expiries"] > 0, s["lease_expiries"]
    # The lost process's claims after its last flush are not in the claim log, so the log's redelivery
    # count can miss them; the run says so, and the database has the full record.
    assert any("process 2 was lost" in r for r in s["suspect_reasons"]), s["suspect_reasons"]
    page = (run_dir / "report.html").read_text()
    assert '<tr class="bad"><th>2</th>' in page and "lost (missed" in page
    with psycopg.connect(dsn) as conn:  # the database's own record: jobs claimed more than once
        again = conn.execute("SELECT count(*) FROM qbench.jobs WHERE attempts > 1").fetchone()[0]
    assert again >= s["lease_expiries"] > 0, (again, s["lease_expiries"])
