"""PROCESSES > 1: the swarm in Locust's own master and worker processes (bench/load/distributed.py),
against the real PostgreSQL. The merged figures are the processes' figures added up, and the merged
percentiles are those of the union of every process's values."""

from __future__ import annotations

import csv
import json
import os

import psycopg
import pytest

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from bench.measure.metrics import new_histogram, values_at_percentiles
from conftest import CLEAN_INVARIANTS, run_and_load
from waiting import measured_seconds, wait_until


def _union(paths) -> HdrHistogram:
    """Every interval of every log in ``paths``, added into one histogram (decoded here, not by the tool)."""
    total = new_histogram("claim_latency_us")
    for path in paths:
        reader = HistogramLogReader(str(path), new_histogram("claim_latency_us"))
        while (hist := reader.get_next_interval_histogram()) is not None:
            total.add(hist)
        reader.close()
    return total


@pytest.mark.slow
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
    # processes.csv: each process's seconds; added up they are intervals.csv's, and the busiest
    # process's CPU (the master, process 0, included) is the second's harness_cpu_pct.
    with open(run_dir / "processes.csv", newline="") as fh:
        per_process = list(csv.DictReader(fh))
    with open(run_dir / "intervals.csv", newline="") as fh:
        seconds = list(csv.DictReader(fh))
    assert {r["process"] for r in per_process} == {"0", "1", "2"}
    for row in seconds:
        mine = [r for r in per_process if r["t_s"] == row["t_s"]]
        assert len(mine) == 3, (row["t_s"], mine)
        for key in ("claims", "jobs_completed", "errors"):
            assert sum(int(r[key]) for r in mine if r["process"] != "0") == int(row[key]), (key, row, mine)
        assert max(float(r["cpu_pct"]) for r in mine) == float(row["harness_cpu_pct"]), (row, mine)
    for p in procs:
        assert max(float(r["cpu_pct"]) for r in per_process if r["process"] == str(p["process"])) == p["cpu_max_pct"]
    page = (run_dir / "report.html").read_text()
    table = page[page.index('<table id="processes">'):]
    assert table[:table.index("</table>")].count("<tr") == 3  # a header and one row per process


@pytest.mark.slow
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
                if "bench.load.worker_process" in cmd:
                    victim = child  # one of the two; which number it got is read from the summary
            time.sleep(0.1)
        assert victim is not None, "no second worker process"
        # well inside the measured window: 3 of its 8 seconds are in the claim log
        wait_until(lambda: (measured_seconds(tmp_path) or [0])[-1] >= 3, 60, "3 measured seconds in the run's claim log")
        victim.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, out + err
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    s = json.loads((run_dir / "summary.json").read_text())
    lost = [p for p in s["processes"] if p["lost"]]
    assert [p["pid"] for p in lost] == [victim.pid], json.dumps(s["processes"])
    number = lost[0]["process"]
    assert lost[0]["missing_seconds"], lost[0]
    # its 3 workers leave the count: a marked change from 6 to 3 running workers
    assert {"workers_before": 6, "workers": 3} in [{k: c[k] for k in ("workers_before", "workers")}
                                                   for c in s["worker_changes"]], s["worker_changes"]
    assert s["invariants"]["lost_jobs"] == 0 and s["invariants"]["double_claims"] == 0, s["invariants"]
    assert s["lease_expiries"] > 0, s["lease_expiries"]
    # The lost process's claims after its last flush are not in the claim log, so the log's redelivery
    # count can miss them; the run says so, and the database has the full record.
    assert any(f"process {number} (host {lost[0]['host']}, pid {victim.pid}) was lost" in r
               for r in s["suspect_reasons"]), s["suspect_reasons"]
    page = (run_dir / "report.html").read_text()
    assert f'<tr class="bad"><th>{number}</th>' in page and "lost (missed" in page
    with psycopg.connect(dsn) as conn:  # the database's own record: jobs claimed more than once
        again = conn.execute("SELECT count(*) FROM qbench.jobs WHERE attempts > 1").fetchone()[0]
    assert again >= s["lease_expiries"] > 0, (again, s["lease_expiries"])


@pytest.mark.slow
def test_fault_windows_act_on_the_workers_of_every_process(dsn, tmp_path):
    """FAULTS with 2 processes: crash_after_claim with share 0.5 crashes half of the 6 workers (3, a
    choice over the whole swarm: each process taking half of its own 3 would crash 4), their jobs
    come back through the lease and the reaper, the master's backend_kill reaches the processes'
    sessions, and the audit is clean."""
    run_dir, s, _ = run_and_load(dsn, tmp_path, "--processes", "2", "--workers", "6", "--backlog", "6000",
                                 "--work-ms", "5", "--lease-s", "1", "--reaper-interval-s", "0.5",
                                 "--faults", "crash_after_claim@0-2:share=0.5;backend_kill@1-3:every_s=1",
                                 "--duration", "6s", "--warmup", "1s", timeout=180)
    assert s["crashed_claims"] == 3, (s["crashed_claims"], s["processes"])
    assert s["redeliveries"] >= s["crashed_jobs"] >= 3
    assert s["backend_kills"] >= 2 and s["errors"].get("57P01", 0) >= 1, (s["backend_kills"], s["errors"])
    assert not any(p["lost"] for p in s["processes"])
    assert s["invariants"] == CLEAN_INVARIANTS


def test_split_choice_is_one_choice_over_the_whole_swarm():
    import random

    from bench.config.faults import fault_count, split_choice

    rng = random.Random(7)
    for workers in ({1: 3, 2: 3}, {1: 1, 2: 5, 3: 2}, {1: 1}):
        for share in (0.01, 0.3, 0.5, 1.0):
            counts = split_choice(workers, share, rng)
            assert sum(counts.values()) == fault_count(sum(workers.values()), share)
            assert all(0 <= counts[i] <= workers[i] for i in workers), (workers, share, counts)
    # uniform over the workers: with {1: 1, 2: 9} and one chosen, process 1 gets it about 10 % of the time
    hits = sum(split_choice({1: 1, 2: 9}, 0.1, rng)[1] for _ in range(2000))
    assert 120 <= hits <= 280, hits


@pytest.mark.slow
def test_a_master_and_two_separately_started_workers(dsn, tmp_path):
    """qbench master --expect-workers 2 and two qbench worker processes on loopback, the way two
    hosts would run it: the same results contract, each worker named in processes, the audit clean."""
    import socket
    import subprocess
    import sys

    from conftest import REPO

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    qbench = [sys.executable, "-m", "bench.cli.main"]
    master = subprocess.Popen([*qbench, "master", "--expect-workers", "2", "--master-bind-host", "127.0.0.1",
                               "--master-port", str(port), "--dsn", dsn, "--workers", "4", "--backlog", "20000",
                               "--duration", "3s", "--warmup", "1s", "--results", str(tmp_path)],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    logs = [tmp_path / f"worker-{i}.log" for i in (1, 2)]  # files, not pipes: a full pipe would block a worker
    workers = [subprocess.Popen([*qbench, "worker", "--master-host", "127.0.0.1", "--master-port", str(port),
                                 "--dsn", dsn], cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT)
               for log in logs]
    try:
        out, err = master.communicate(timeout=180)
        codes = [w.wait(timeout=60) for w in workers]
    finally:
        for p in (master, *workers):
            p.kill()
    worker_output = [log.read_text() for log in logs]
    assert master.returncode == 0, (out + err, worker_output)
    assert codes == [0, 0], worker_output
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    for log in logs:
        log.unlink()
    for name in ("run.json", "summary.json", "intervals.csv", "report.html", "claim_plan.txt"):
        assert (run_dir / name).is_file(), name
    s = json.loads((run_dir / "summary.json").read_text())
    procs = s["processes"]
    assert [p["process"] for p in procs] == [1, 2] and sorted(p["workers"] for p in procs) == [2, 2]
    assert {p["pid"] for p in procs} == {w.pid for w in workers}
    assert sum(p["counters"]["jobs_completed"] for p in procs) == s["jobs_completed"] > 0
    assert s["invariants"] == CLEAN_INVARIANTS
    # the audit read the workers' claim log (it once reached the audit empty and checked nothing)
    assert s["audit"]["jobs_claimed_distinct"] >= s["jobs_claimed"] > 0, s["audit"]
    assert s["audit"]["completions_applied"] >= s["jobs_completed"], s["audit"]


def test_bad_master_and_worker_input_is_one_line_and_exit_2(tmp_path):
    from conftest import qbench

    cases = [
        (["master", "--expect-workers", "0"], "--expect-workers: 0 is out of range"),
        (["master", "--expect-workers", "2", "--processes", "3"], "--processes: is set by --expect-workers"),
        (["master", "--expect-workers", "2", "--master-port", "70000"], "--master-port: 70000 is out of range"),
        (["master", "--expect-workers", "2", "--worker-wait-s", "0"], "--worker-wait-s: 0 is out of range"),
        (["master", "--expect-workers", "2", "--master-bind-host", "127.0.0.1", "--master-port", "5600", "--ui",
          "--web-port", "5600"], "--web-port: 5600 is the master's port"),
        (["worker", "--master-host", "127.0.0.1", "--dsn", "postgresql://x@10.1.1.1/db"], "--dsn: host '10.1.1.1'"),
        (["run", "--processes", "3", "--workers", "2"], "--processes: 3 processes for 2 workers"),
        (["run", "--engine", "mariadb", "--processes", "2", "--faults", "backend_kill@1-2", "--dsn",
          "mysql://root@127.0.0.1:3306/"], "--faults: backend_kill on MariaDB"),
    ]
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    for argv, start in cases:
        proc = qbench(*argv, "--results", str(tmp_path), env=env) if argv[0] != "worker" else qbench(*argv, env=env)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"qbench: {start}"), (argv, proc.stderr)
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_an_extra_worker_is_refused_and_a_taken_port_is_one_line(dsn, tmp_path):
    """A master that expects one worker and gets two runs with the first; the second is refused in one
    line, exit 2. A master port already in use is refused before anything is created."""
    import socket
    import subprocess
    import sys

    from conftest import REPO, qbench

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = qbench("master", "--expect-workers", "1", "--master-bind-host", "127.0.0.1", "--master-port",
                      str(port), "--dsn", dsn, "--results", str(tmp_path / "taken"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("qbench: --master-port: cannot listen")
    assert not (tmp_path / "taken").exists()

    cmd = [sys.executable, "-m", "bench.cli.main"]
    master = subprocess.Popen([*cmd, "master", "--expect-workers", "1", "--master-bind-host", "127.0.0.1",
                               "--master-port", str(port), "--dsn", dsn, "--workers", "2", "--backlog", "20000",
                               "--duration", "8s", "--warmup", "1s", "--results", str(tmp_path / "run")],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    logs = [tmp_path / f"worker-{i}.log" for i in (1, 2, 3)]

    def worker(log):
        return subprocess.Popen([*cmd, "worker", "--master-host", "127.0.0.1", "--master-port", str(port),
                                 "--dsn", dsn], cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT)
    workers = [worker(logs[0]), worker(logs[1])]
    try:
        # the third comes once the load runs: 2 of its measured seconds are in the claim log
        wait_until(lambda: (measured_seconds(tmp_path / "run") or [0])[-1] >= 2, 60,
                   "2 measured seconds in the run's claim log")
        workers.append(worker(logs[2]))
        out, err = master.communicate(timeout=180)
        codes = [w.wait(timeout=60) for w in workers]
    finally:
        for p in (master, *workers):
            p.kill()
    text = [log.read_text() for log in logs]
    assert master.returncode == 0, (out + err, text)
    assert sorted(codes[:2]) == [0, 2] and codes[2] == 2, (codes, text)
    # The second of the two that start together is refused as one too many, or, when the master has
    # started the run by the time it is heard (seen on a fresh clone at 590ad45), as a latecomer: either
    # way one line and exit 2, and the run keeps one process (below).
    refused = [t for t in text[:2] if "refused by the master" in t]
    assert len(refused) == 1 and ("expects 1 workers" in refused[0] or "the run has started" in refused[0]), text
    assert len(refused[0].strip().splitlines()) == 1 and "Traceback" not in refused[0], text
    assert "the run has started" in text[2] and "Traceback" not in text[2], text[2]
    # Locust's master would have handed the latecomer a share of the users: the run kept its 2 workers
    run_dir = next((tmp_path / "run").iterdir())
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["worker_changes"] == [] and s["processes"][0]["workers"] == 2, (s["worker_changes"], s["processes"])
    assert s["invariants"] == CLEAN_INVARIANTS


@pytest.mark.slow
def test_a_master_whose_workers_never_come_exits_1_in_one_line_before_any_load(dsn, tmp_path):
    """qbench master --worker-wait-s 3 and no worker: exit 1 with one line naming the wait, no run
    directory, no claim files left in the temporary directory, and the schema it prepared dropped (no load
    ran on it: nothing is left behind)."""
    import socket

    from conftest import qbench

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    tmp = tmp_path / "tmp"  # the master's own temporary directory
    tmp.mkdir()
    proc = qbench("master", "--expect-workers", "1", "--master-bind-host", "127.0.0.1", "--master-port", str(port),
                  "--worker-wait-s", "3", "--dsn", dsn, "--backlog", "100", "--results", str(tmp_path / "r"),
                  timeout=120, env={**os.environ, "TMPDIR": str(tmp)})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stdout + proc.stderr
    assert lines[0].startswith("qbench: --expect-workers: a load generator process did not start (0 of 1 reported "
                               "within 3 s)"), lines
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
    assert list(tmp.iterdir()) == []
    with psycopg.connect(dsn) as conn:  # prepared, never loaded, then dropped
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'qbench'").fetchone()[0] == 0


@pytest.mark.slow
def test_a_worker_that_cannot_reach_its_database_stops_the_master_in_one_line(dsn, tmp_path):
    import socket
    import subprocess
    import sys

    from conftest import REPO

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cmd = [sys.executable, "-m", "bench.cli.main"]
    master = subprocess.Popen([*cmd, "master", "--expect-workers", "1", "--master-bind-host", "127.0.0.1",
                               "--master-port", str(port), "--dsn", dsn, "--workers", "2", "--backlog", "100",
                               "--duration", "3s", "--results", str(tmp_path)],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = tmp_path.parent / "bad-worker.log"
    worker = subprocess.Popen([*cmd, "worker", "--master-host", "127.0.0.1", "--master-port", str(port),
                               "--dsn", "postgresql://postgres@127.0.0.1:1/nowhere"], cwd=REPO,
                              stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        out, err = master.communicate(timeout=120)
        code = worker.wait(timeout=60)
    finally:
        master.kill()
        worker.kill()
    lines = err.strip().splitlines()
    assert master.returncode != 0 and lines[-1].startswith(
        "qbench: --expect-workers: load generator process 1 could not start its sessions"), err
    assert code != 0 and "qbench worker:" in log.read_text(), log.read_text()
    assert not any(tmp_path.iterdir())  # no run directory left behind


def test_a_run_killed_with_9_leaves_its_claim_files_to_the_next_run(tmp_path, monkeypatch):
    """The next multi-process run removes the temporary directories of runs whose process is gone, and only those."""
    import subprocess
    import tempfile

    from bench.load.process_merge import remove_orphans

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead, mine, other = (tmp_path / f"qbench-claims-{gone.pid}-x1", tmp_path / f"qbench-claims-{os.getpid()}-x2",
                         tmp_path / f"qbench-library-{gone.pid}-x3")
    for path in (dead, mine, other):
        path.mkdir()
        (path / "claims-1.log").write_text("line\n")
    assert remove_orphans("qbench-claims-") == [dead]
    assert not dead.exists() and mine.exists() and other.exists()
