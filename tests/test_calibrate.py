"""``qbench calibrate`` against the real server with a real pgbench (and, ``--engine mariadb``, the
real MariaDB with a real mariadb-slap): the summary line, calibration.json, and every figure
recomputed from the files it rests on.

A small calibration (4 clients, 1 s warm-up, 3 s measured, 2 pairs) so that the median
is of more than one pair; the speed goal itself is a benchmark (``make calibrate``).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import re
import statistics
import threading
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from bench.engines.mariadb import policies
from bench.engines.postgres.db import SCHEMA_MARK
from conftest import MARIADB_DSN, qbench

LINE_RE = re.compile(r"^median ratio: (\d+\.\d\d) \(min (\d+\.\d\d), max (\d+\.\d\d), (\d+) pairs, (\d+) left out\)$")
PAIR_RE = re.compile(r"^pair (\d+)( \(try \d\))?: pgbench ([\d,.]+) tps, queue-bench ([\d,.]+|-) jobs/s, ratio (\d+\.\d\d|-)")


def _epoch(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso).timestamp())


def _aggregate(pgbench_dir: Path) -> dict[int, int]:
    """Transactions per interval start, summed over pgbench's per-thread aggregate logs."""
    per_s: dict[int, int] = {}
    for path in pgbench_dir.glob("aggregate.*"):
        for line in path.read_text().splitlines():
            start, transactions = line.split()[:2]
            per_s[int(start)] = per_s.get(int(start), 0) + int(transactions)
    return per_s


@pytest.mark.slow
def test_calibration_line_and_file_agree_with_the_logs_they_rest_on(dsn, tmp_path):
    # --results relative to the working directory, as ``make calibrate`` gives it
    proc = qbench("calibrate", "--dsn", dsn, "--workers", "4", "--warmup", "1s", "--duration", "3s",
                  "--pairs", "2", "--results", "results", timeout=600, cwd=tmp_path)
    lines = proc.stdout.strip().splitlines()
    match = LINE_RE.match(lines[-1])
    assert match, proc.stdout + proc.stderr
    (cal_dir,) = (tmp_path / "results").glob("calibration-*")
    data = json.loads((cal_dir / "calibration.json").read_text())
    # a calibration that kept no pair measured nothing: it exits 1, and this test fails with it
    assert data["pairs_kept"] >= 1, f"no pair was kept:\n{proc.stdout}{proc.stderr}"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert data["summary_line"] == lines[-1]

    kept = [p for p in data["pairs"] if p["kept"]]
    ratios = [p["ratio"] for p in kept]
    median, low, high, n_kept, n_left = match.groups()
    assert (int(n_kept), int(n_left)) == (len(kept), len(data["pairs"]) - len(kept))
    assert len(data["pairs"]) == 2
    assert median == f"{statistics.median(ratios):.2f}"
    assert (low, high) == (f"{min(ratios):.2f}", f"{max(ratios):.2f}")
    printed = [PAIR_RE.match(line) for line in lines if PAIR_RE.match(line)]
    assert len(printed) == sum(len(p["attempts"]) for p in data["pairs"])

    pg_cpu_s = pg_jobs = qb_cpu_s = qb_jobs = 0.0
    for pair, attempt in ((p, a) for p in data["pairs"] for a in p["attempts"]):
        pg, qb = attempt["pgbench"], attempt["queue_bench"]
        if qb is None:  # pgbench's side failed: the pair was run again without its queue-bench side
            assert attempt["problems"] and all(p.startswith("pgbench: ") for p in attempt["problems"])
            assert attempt is not pair["attempts"][-1] or not pair["kept"]
            continue
        # pgbench's tps: transactions of the measured whole seconds of its aggregate log / those seconds
        per_s = _aggregate(cal_dir / attempt["pgbench_dir"])
        start, end = _epoch(pg["measured_start"]), _epoch(pg["measured_end"])
        assert end - start == pg["measured_s"] == 3
        assert start - min(per_s) >= 1, "pgbench's warm-up (1 s after its first logged second) was not dropped"
        measured = sum(per_s.get(t, 0) for t in range(start, end))
        assert measured == pg["transactions"] and measured > 0
        assert pg["tps"] == measured / 3
        # queue-bench's side: its own summary and intervals
        run_dir = cal_dir / qb["run_dir"]  # paths in calibration.json are relative to its directory
        assert run_dir.parent == cal_dir / "runs"
        summary = json.loads((run_dir / "summary.json").read_text())
        assert qb["jobs_per_s"] == summary["throughput_jobs_per_s"]
        assert round(summary["measured_s"]) == pg["measured_s"]  # the same window length on both sides
        assert attempt["ratio"] == summary["throughput_jobs_per_s"] / pg["tps"]
        with open(run_dir / "intervals.csv", newline="") as fh:
            cpus = [float(r["harness_cpu_pct"]) for r in csv.DictReader(fh)]
        cpu_s = statistics.mean(cpus) / 100 * summary["measured_s"]
        assert abs(qb["cpu_us_per_job"] - 1e6 * cpu_s / summary["jobs_completed"]) < 1e-6
        assert abs(pg["cpu_us_per_job"] - 1e6 * pg["cpu_s"] / measured) < 1e-6
        # user + system is the total on both sides (each intervals.csv value is rounded to 0.1 %)
        assert abs(pg["user_s"] + pg["system_s"] - pg["cpu_s"]) < 1e-6
        assert abs(qb["user_s"] + qb["system_s"] - qb["cpu_s"]) <= 0.001 * summary["measured_s"]
        assert qb["user_s"] > 0 and pg["system_s"] > 0
        if not attempt["problems"]:  # a clean pgbench run, with the monitor sampling every measured second
            assert pg["failed"] == 0 and pg["exit_code"] == 0 and pg["monitor_samples"] == 3
        if pair["kept"] and attempt is pair["attempts"][-1]:
            assert pair["ratio"] == attempt["ratio"]
            pg_cpu_s, pg_jobs = pg_cpu_s + pg["cpu_s"], pg_jobs + measured
            qb_cpu_s, qb_jobs = qb_cpu_s + cpu_s, qb_jobs + summary["jobs_completed"]
    if kept:
        assert abs(data["cpu_us_per_job"]["pgbench"] - 1e6 * pg_cpu_s / pg_jobs) < 1e-6
        assert abs(data["cpu_us_per_job"]["harness"] - 1e6 * qb_cpu_s / qb_jobs) < 1e-6


def test_calibrate_refuses_zero_pairs_and_creates_nothing(tmp_path):
    proc = qbench("calibrate", "--pairs", "0", "--results", str(tmp_path / "results"), timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qbench: --pairs:") and "from 1 to 100" in lines[0]
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_calibrate_refuses_a_schema_in_use_and_leaves_it_alone(dsn, tmp_path):
    """Another run holds the schema: exit 2 with one line, no calibration directory, and the
    other run's schema is still there (the calibration's clean-up must not drop it)."""
    with psycopg.connect(dsn, autocommit=True) as holder:
        holder.execute("CREATE SCHEMA qbench_busy")
        holder.execute(sql.SQL("COMMENT ON SCHEMA qbench_busy IS {}").format(sql.Literal(SCHEMA_MARK)))
        holder.execute("SELECT pg_advisory_lock(hashtext('queue-bench:qbench_busy'))")
        proc = qbench("calibrate", "--dsn", dsn, "--schema", "qbench_busy", "--workers", "2",
                      "--results", str(tmp_path / "results"), timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "--schema:" in lines[0] and "in use by another queue-bench run" in lines[0]
        assert not (tmp_path / "results").exists()
        assert holder.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'qbench_busy'").fetchone()[0] == 1


@pytest.mark.slow
def test_a_pair_whose_pgbench_failed_is_run_again(dsn, tmp_path):
    """pgbench's sessions are terminated once, during the first pair's pgbench run: that try is
    reported with pgbench's failure and the pair is run again; the pair's ratio is its last try's."""
    killed = []

    def kill_pgbench_once() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                    "AND application_name = 'pgbench'").fetchall()
                if rows:
                    time.sleep(0.5)
                    killed.extend(conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                                               "datname = current_database() AND application_name = 'pgbench'"
                                               ).fetchall())
                    return
                time.sleep(0.05)

    killer = threading.Thread(target=kill_pgbench_once)
    killer.start()
    proc = qbench("calibrate", "--dsn", dsn, "--workers", "4", "--warmup", "1s", "--duration", "3s",
                  "--pairs", "1", "--results", str(tmp_path), timeout=600)
    killer.join()
    assert killed, "pgbench's sessions were never seen"
    (cal_dir,) = tmp_path.glob("calibration-*")
    data = json.loads((cal_dir / "calibration.json").read_text())
    (pair,) = data["pairs"]
    first = pair["attempts"][0]
    assert first["pgbench"]["exit_code"] != 0
    assert first["queue_bench"] is None and first["ratio"] is None  # queue-bench is not run after pgbench failed
    assert any(p.startswith("pgbench: pgbench exited with status") for p in first["problems"]), first["problems"]
    assert 2 <= len(pair["attempts"]) <= 3
    assert pair["kept"] == (not pair["attempts"][-1]["problems"])
    assert all(a["problems"] for a in pair["attempts"][:-1])  # tries stop at the first clean one
    if pair["kept"]:
        assert pair["ratio"] == pair["attempts"][-1]["ratio"]
    assert "pair 1 (try 2): pgbench" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == data["summary_line"] == (
        f"median ratio: {pair['ratio']:.2f} (min {pair['ratio']:.2f}, max {pair['ratio']:.2f}, 1 pairs, 0 left out)"
        if pair["kept"] else "median ratio: n/a (min n/a, max n/a, 0 pairs, 1 left out)")


# --- MariaDB: mariadb-slap against the swarm (bench/cli/calibrate_mariadb.py) ---------------------

SLAP_PAIR_RE = re.compile(r"^pair (\d+)( \(try \d\))?: mariadb-slap ([\d,.]+) jobs/s, queue-bench ([\d,.]+|-) jobs/s, "
                          r"ratio (\d+\.\d\d|-)")


@pytest.mark.slow
def test_mariadb_calibration_line_and_file_agree_with_what_they_rest_on(maria_schema, tmp_path):
    """A short MariaDB calibration (10 clients, 1 pair): exit 0, a ``median ratio:`` line with a
    number > 0, and calibration.json with both sides' jobs and jobs/s > 0, each recomputed from the
    files and the table counts it rests on; mariadb-slap ran the swarm's own statements."""
    dsn, schema = maria_schema
    proc = qbench("calibrate", "--engine", "mariadb", "--dsn", dsn, "--schema", schema, "--workers", "10",
                  "--warmup", "1s", "--duration", "2s", "--pairs", "1", "--results", "results",
                  timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    match = LINE_RE.match(lines[-1])
    assert match and float(match.group(1)) > 0, proc.stdout + proc.stderr
    (cal_dir,) = (tmp_path / "results").glob("calibration-*")
    data = json.loads((cal_dir / "calibration.json").read_text())
    assert data["engine"] == "mariadb" and data["format_version"] >= 1 and data["summary_line"] == lines[-1]
    assert data["config"]["workers"] == 10 and data["config"]["policy"] == "skip_locked"
    assert data["config"]["batch"] == 1 and data["config"]["index"] == "composite"
    (pair,) = data["pairs"]
    assert pair["kept"] and len([m for m in map(SLAP_PAIR_RE.match, lines) if m]) == len(pair["attempts"])
    attempt = pair["attempts"][-1]
    slap, qb = attempt["mariadb_slap"], attempt["queue_bench"]
    # mariadb-slap: every client ran its fixed number of jobs; all of them done on the table, once each
    per_client = data["mariadb_slap_jobs_per_client"]
    assert slap["jobs"] == slap["jobs_expected"] == 10 * per_client > 0
    assert slap["counts"]["done"] == slap["counts"]["attempts_done"] == slap["jobs"] and slap["counts"]["running"] == 0
    assert slap["jobs_per_s"] == slap["jobs"] / slap["wall_s"] > 0
    assert slap["exit_code"] == 0 and not slap["problems"] and slap["monitor_samples"] >= 1
    assert abs(slap["cpu_us_per_job"] - 1e6 * slap["cpu_s"] / slap["jobs"]) < 1e-6 and slap["cpu_s"] > 0
    assert f"--number-of-queries={3 * per_client * 10}" in slap["argv"] and "--concurrency=10" in slap["argv"]
    # its script: the swarm's statements from policies, one round trip per line
    script = (cal_dir / attempt["mariadb_slap_dir"] / "claim_complete.sql").read_text().splitlines()
    assert len(script) == slap["queries_per_job"] == 3
    assert policies.claim_select(schema, "skip_locked", "composite", 1) in script[0]
    assert policies.claim_update(schema, [policies.Var("@id")], "mariadb-slap", data["config"]["lease_s"]) in script[1]
    assert script[2] == policies.complete_one(schema, policies.Var("@id"), policies.Var("@token"))
    # queue-bench: its own summary; the ratio is queue-bench jobs/s over mariadb-slap's
    summary = json.loads((cal_dir / qb["run_dir"] / "summary.json").read_text())
    assert qb["jobs_per_s"] == summary["throughput_jobs_per_s"] > 0 and qb["jobs_completed"] > 0
    assert attempt["ratio"] == pair["ratio"] == qb["jobs_per_s"] / slap["jobs_per_s"]
    assert match.group(1) == f"{pair['ratio']:.2f}"
    assert data["cpu_us_per_job"]["mariadb_slap"] == slap["cpu_us_per_job"]


def test_mariadb_calibration_without_mariadb_slap_says_so_and_exits_2(tmp_path):
    empty = tmp_path / "empty-path"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PATH"} | {"PATH": str(empty)}
    proc = qbench("calibrate", "--engine", "mariadb", "--dsn", MARIADB_DSN, "--results", str(tmp_path / "results"),
                  timeout=60, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qbench: MARIADB_SLAP: no mariadb-slap"), proc.stderr
    assert not (tmp_path / "results").exists()

