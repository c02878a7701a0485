"""``qbench calibrate --processes`` (the grid of ``bench/cli/calibrate_grid.py``) against the real
server with a real pgbench: calibration.json holds the grid; every ratio, jobs/s and CPU per job
is recomputed from the files it rests on (pgbench's output and aggregate logs, the table's counts,
each queue-bench run's summary, intervals.csv and processes.csv).

One short configuration (4 clients, batch 10, processes 1 and 2, 1 s warm-up, 2 s measured, 2
rounds: the second round's order is rotated); bad input is in ``tests/test_bad_input.py``.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
import statistics
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, qbench
from test_calibrate import _aggregate  # pgbench's aggregate logs, read independently of bench/

from bench.config.run_config import build_config
from bench.engines.postgres import builtin_queue
from bench.engines.postgres.pgbench import claim_complete_script

LINE_RE = re.compile(r"^workers 4, batch 10, processes (\d): median ratio: (\d+\.\d\d|n/a) \(min .*, (\d+) pairs, "
                     r"(\d+) left out\)$")


def _cpu_s_from_files(run_dir: Path, summary: dict, name: str) -> tuple[float, set[int]]:
    """CPU seconds of every process of the run: processes.csv's ``name`` (% of a core per measured
    second and process, master included) × the second's length; and the processes seen."""
    with open(run_dir / "intervals.csv", newline="") as fh:
        n_seconds = len(list(csv.DictReader(fh)))
    with open(run_dir / "processes.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    seconds = sum(float(r[name]) for r in rows) / 100 * summary["measured_s"] / n_seconds
    return seconds, {int(r["process"]) for r in rows}


@pytest.mark.slow
def test_grid_calibration_file_and_lines_agree_with_what_they_rest_on(dsn, tmp_path):
    proc = qbench("calibrate", "--dsn", dsn, "--processes", "1,2", "--workers", "4", "--batch", "10",
                  "--duration", "2s", "--warmup", "1s", "--pairs", "2", "--results", "results",
                  timeout=900, cwd=tmp_path)
    lines = proc.stdout.strip().splitlines()
    (cal_dir,) = (tmp_path / "results").glob("calibration-*")
    data = json.loads((cal_dir / "calibration.json").read_text())
    assert data["grid"] == {"workers": [4], "batch": [10], "processes": [1, 2]}, proc.stdout + proc.stderr
    assert data["format_version"] >= 1 and data["mode"] == "grid"
    (conf,) = data["configurations"]
    assert (conf["workers"], conf["batch"], conf["config"]["batch"]) == (4, 10, 10)
    # one median line per process count, last, with the pairs' summary format after the prefix
    assert lines[-2:] == data["summary_lines"] == [r["summary_line"] for r in conf["results"]]
    matches = [LINE_RE.match(line) for line in lines[-2:]]
    assert all(matches) and [int(m.group(1)) for m in matches] == [1, 2], lines[-2:]
    # a process count with no kept pair measured nothing: it exits 1, and this test fails with it
    unkept = [r["processes"] for r in conf["results"] if not r["pairs_kept"]]
    assert not unkept, f"no pair was kept for processes {unkept}:\n{proc.stdout}{proc.stderr}"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the B's order rotates from round to round
    assert [r["order"] for r in conf["rounds"]] == [[1, 2], [2, 1]]

    kept: dict[int, list] = {1: [], 2: []}
    for rnd in conf["rounds"]:
        for t in rnd["tries"]:
            pg, pg_dir = t["pgbench"], cal_dir / t["pgbench_dir"]
            # the script: the swarm's claim and complete_many, 10 jobs per transaction
            script = (pg_dir / "claim_complete.sql").read_text()
            defn = builtin_queue.definition(build_config("default", {"schema": conf["config"]["schema"]}))
            assert script == claim_complete_script(defn, "skip_locked", conf["config"]["lease_s"], 10)
            assert "\\set batch 10" in script and "unnest(:ids::bigint[], :tokens::bigint[])" in script
            # jobs = transactions × 10 because the table says every transaction completed 10
            processed = int(re.search(r"actually processed: (\d+)", (pg_dir / "pgbench.out").read_text()).group(1))
            assert pg["processed"] == processed > 0
            if not pg["problems"]:
                assert pg["table"]["done"] == 10 * processed == pg["table"]["attempts_done"]
                assert pg["table"]["running"] == 0
            per_s = _aggregate(pg_dir)
            start = int(dt.datetime.fromisoformat(pg["measured_start"]).timestamp())
            measured = sum(per_s.get(s, 0) for s in range(start, start + 2))
            assert pg["transactions"] == measured and pg["jobs"] == 10 * measured
            assert pg["jobs_per_s"] == pg["tps"] * 10 == 10 * measured / 2
            assert abs(pg["cpu_us_per_job"] - 1e6 * pg["cpu_s"] / (10 * measured)) < 1e-6
            for entry in t["queue_bench"]:
                qb, p = entry["queue_bench"], entry["processes"]
                run_dir = cal_dir / qb["run_dir"]
                summary = json.loads((run_dir / "summary.json").read_text())
                assert summary["config"]["processes"] == p and summary["config"]["batch"] == 10
                assert entry["ratio"] == summary["throughput_jobs_per_s"] / pg["jobs_per_s"]
                cpu_s, seen = _cpu_s_from_files(run_dir, summary, "cpu_pct")
                if p == 2:  # the sum over the master and both processes, over the jobs completed
                    assert seen == {0, 1, 2}
                    assert abs(qb["cpu_s"] - cpu_s) < 1e-9
                    assert abs(qb["user_s"] - _cpu_s_from_files(run_dir, summary, "user_pct")[0]) < 1e-9
                    assert abs(qb["cpu_us_per_job"] - 1e6 * cpu_s / summary["jobs_completed"]) < 1e-6
                else:  # one process: intervals.csv, as the pairs compute it (processes.csv agrees to 0.1 %)
                    assert seen == {1}
                    with open(run_dir / "intervals.csv", newline="") as fh:
                        cpus = [float(r["harness_cpu_pct"]) for r in csv.DictReader(fh)]
                    assert abs(qb["cpu_s"] - statistics.mean(cpus) / 100 * summary["measured_s"]) < 1e-9
                    assert abs(qb["cpu_s"] - cpu_s) <= 0.001 * summary["measured_s"]
                mine = next(x for x in rnd["processes"] if x["processes"] == p)
                if mine["kept"] and mine["try"] == t["label"]:
                    assert not entry["problems"] and mine["ratio"] == entry["ratio"]
                    kept[p].append((pg, qb, entry["ratio"]))
    for result in conf["results"]:
        p, mine = result["processes"], kept[result["processes"]]
        assert result["ratios"] == [r for _pg, _qb, r in mine]
        assert result["pairs_kept"] + result["pairs_left_out"] == 2
        assert mine, f"processes {p}: no kept pair"
        assert result["median_ratio"] == statistics.median(result["ratios"])
        jobs = sum(qb["jobs_completed"] for _pg, qb, _r in mine)
        assert abs(result["cpu_us_per_job"]["harness"] - 1e6 * sum(qb["cpu_s"] for _pg, qb, _r in mine) / jobs) < 1e-6
        pg_jobs = sum(pg["jobs"] for pg, _qb, _r in mine)
        assert abs(result["cpu_us_per_job"]["pgbench"] - 1e6 * sum(pg["cpu_s"] for pg, _qb, _r in mine) / pg_jobs) < 1e-6
    # what each try printed: its processes, and which (if any) was saturated
    printed = [line for line in lines if re.match(r"^workers 4, batch 10, round \d( \(try \d\))?, processes 2: ", line)]
    assert printed and all("master CPU max" in line and "process 2 CPU max" in line for line in printed)
    assert all(("no process saturated" in line) or ("saturated: process" in line) for line in printed)


def test_make_calibrate_passes_the_lists_through():
    """``make calibrate CAL_PROCESSES=… CAL_WORKERS=… CAL_BATCH=…`` gives them to qbench; plain
    ``make calibrate`` gives neither --batch nor --processes (its one configuration, as before)."""
    def dry(*variables: str) -> str:
        return subprocess.run(["make", "-n", "calibrate", *variables], cwd=REPO, capture_output=True,
                              text=True, check=True).stdout
    grid = dry("CAL_PROCESSES=1,2,4", "CAL_WORKERS=50,200", "CAL_BATCH=1,10")
    assert "--processes='1,2,4'" in grid and "--workers='50,200'" in grid and "--batch='1,10'" in grid
    plain = dry()
    assert "--processes" not in plain and "--batch" not in plain and "--workers='50'" in plain
