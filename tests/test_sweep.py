"""Sweeps against the real PostgreSQL: the index comparison of FR-01/FR-08 inside one
sweep with its plan capture, resuming an interrupted sweep, saved seeded states,
and bad sweep input."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from conftest import REPO, qbench
from waiting import measured_seconds, wait_until

from bench.engines.postgres import db
from bench.config.run_config import build_config
from bench.usage import typed


def _sweep_file(path: Path, matrix: str, fixed: str, repetitions: int = 1) -> Path:
    path.write_text(f'description = "test"\nworkload = "default"\nrepetitions = {repetitions}\n'
                    f"[fixed]\n{fixed}\n[matrix]\n{matrix}\n")
    return path


def _cells(sweep_dir: Path) -> list[dict]:
    with (sweep_dir / "cells.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def _sweep_dir(results: Path) -> Path:
    dirs = sorted((results / "sweeps").iterdir())
    assert len(dirs) == 1, dirs
    return dirs[0]


@pytest.mark.slow
def test_no_index_vs_partial_at_200k_history_in_one_sweep(dsn, tmp_path):
    """At 200k finished rows, INDEX=none claim p50 is at least 10x INDEX=partial in the same
    sweep; the plan capture shows a sequential scan for one and the partial index for the other."""
    spec = _sweep_file(tmp_path / "idx.toml", 'index = ["none", "partial"]',
                       'workers = 10\nhistory = 200000\nbacklog = 20000\nduration = "4s"\nwarmup = "1s"')
    proc = qbench("sweep", str(spec), "--dsn", dsn, "--results", str(tmp_path / "results"), timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep_dir = _sweep_dir(tmp_path / "results")
    rows = {r["index"]: r for r in _cells(sweep_dir)}
    assert set(rows) == {"none", "partial"} and all(r["status"] == "done" for r in rows.values())
    none, part = rows["none"], rows["partial"]
    assert float(none["claim_p50_us"]) >= 10 * float(part["claim_p50_us"]), (none["claim_p50_us"], part["claim_p50_us"])
    assert none["plan_custom_scan"].startswith("Seq Scan on jobs"), none["plan_custom_scan"]
    assert part["plan_custom_scan"].startswith("Index Scan using jobs_pending_claim_order_idx"), part["plan_custom_scan"]
    assert int(none["plan_custom_buffers"]) > 10 * int(part["plan_custom_buffers"])
    for r in rows.values():
        assert r["invariants_ok"] == "True"
        assert int(r["table_bytes_after"]) >= int(r["table_bytes_before"]) > 0
    meta = json.loads((sweep_dir / "sweep.json").read_text())
    assert meta["complete"] is True and meta["axes"] == {"index": ["none", "partial"]}
    assert proc.stdout.strip().splitlines()[-1] == f"report: {(sweep_dir / 'compare.html').resolve()}"
    # The history was seeded once into a saved state and restored into both cells; the
    # completed sweep drops the state.
    log = (sweep_dir / "sweep.log").read_text()
    assert log.count("saved history state") == 1 and log.count("restored from") == 2, log
    with psycopg.connect(dsn) as conn:
        assert db.schema_state(conn, "qbench_state") == "absent"


@pytest.mark.slow
def test_interrupted_sweep_resumes_with_the_same_cell_results(dsn, tmp_path):
    """SIGINT during the second cell: exit 130, the first cell's row kept; running the same sweep
    again measures only what is missing and leaves the first cell's results as they were."""
    spec = _sweep_file(tmp_path / "r.toml", 'batch = [1, 5, 10]', 'workers = 4\nduration = "3s"\nwarmup = "1s"')
    results = tmp_path / "results"
    argv = [sys.executable, "-m", "bench.cli.main", "sweep", str(spec), "--dsn", dsn, "--results", str(results)]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    cells_csv = None
    while time.monotonic() < deadline:
        found = list(results.glob("sweeps/*/cells.csv"))
        if found and len(_cells(found[0].parent)) == 1:
            cells_csv = found[0]
            break
        time.sleep(0.2)
    assert cells_csv is not None, "the first cell never finished"
    # inside the second cell's load: its run has 1 measured second in its claim log (of 3)
    wait_until(lambda: measured_seconds(results)[1:2] >= [1], 60, "the second cell's first measured second")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert "resume" in err
    sweep_dir = cells_csv.parent
    first = _cells(sweep_dir)
    assert len(first) == 1 and first[0]["cell_id"] == "c001"
    assert json.loads((sweep_dir / "sweep.json").read_text())["complete"] is False

    resumed = qbench("sweep", str(spec), "--dsn", dsn, "--results", str(results), timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming" in resumed.stdout and "1 of 3 runs already measured" in resumed.stdout
    assert _sweep_dir(results) == sweep_dir  # the same sweep, not a new one
    rows = _cells(sweep_dir)
    assert [r["cell_id"] for r in rows] == ["c001", "c002", "c003"]
    assert rows[0] == first[0]  # the first cell was not measured again
    assert [int(r["batch"]) for r in rows] == [1, 5, 10]
    assert all(r["status"] == "done" for r in rows)
    run_dirs = sorted(p.name for p in (sweep_dir / "runs").iterdir() if (p / "summary.json").is_file()
                      and json.loads((p / "summary.json").read_text())["complete"])
    assert sorted(r["run_id"] for r in rows) == run_dirs
    assert json.loads((sweep_dir / "sweep.json").read_text())["complete"] is True


def test_saved_state_restores_the_rows_generation_writes(dsn):
    """History restored from a saved state holds the same rows as generated history
    (ids 1..n, done), and new jobs continue after them."""
    cfg = build_config("default", {"history": 5000, "schema": "qbench_t"})
    with psycopg.connect(dsn, autocommit=True) as conn:
        shapes = []
        for state in (None, "qbench_t_state"):
            db.prepare(conn, cfg, 100, log=lambda _: None, state_schema=state)
            shapes.append(conn.execute(
                "SELECT count(*), min(id), max(id), count(*) FILTER (WHERE status = 'done'), "
                "count(DISTINCT finished_at - started_at) FROM qbench_t.jobs").fetchone())
            conn.execute("INSERT INTO qbench_t.jobs DEFAULT VALUES")
            assert conn.execute("SELECT max(id) FROM qbench_t.jobs").fetchone()[0] == 5101
        assert shapes[0] == shapes[1] == (5100, 1, 5100, 5000, 1)
        assert db.schema_state(conn, "qbench_t_state") == "ours"
        db.OWNERSHIP.drop(conn, "qbench_t")
        db.OWNERSHIP.drop(conn, "qbench_t_state")


@pytest.mark.parametrize("args, param", [
    (["nope"], "SWEEP"),
    (["index_designs", "--index", "none"], "INDEX"),
    (["batch", "--repetitions", "0"], "REPETITIONS"),
    (["batch", "--workers", "lots"], "WORKERS"),
])
def test_bad_sweep_input_is_one_line_and_creates_nothing(tmp_path, args, param):
    proc = qbench("sweep", *args, "--results", str(tmp_path / "r"), "--dsn", "postgresql://postgres@127.0.0.1:1/x")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith(f"qbench: {typed(param)}:"), proc.stderr
    assert not (tmp_path / "r").exists()


def test_bad_axis_value_in_a_sweep_file_names_it(tmp_path):
    spec = _sweep_file(tmp_path / "bad.toml", 'index = ["partial", "btree"]', 'workers = 2')
    proc = qbench("sweep", str(spec), "--results", str(tmp_path / "r"))
    assert proc.returncode == 2 and proc.stderr.startswith("qbench: --index: unknown value 'btree'"), proc.stderr
    assert not (tmp_path / "r").exists()


def test_a_sweep_some_cell_of_which_cannot_run_is_refused_before_anything(dsn, tmp_path):
    """A cell needing more connections than the server has: one line naming WORKERS, exit 2,
    no sweep directory, no schema."""
    with psycopg.connect(dsn) as conn:
        too_many = int(conn.execute("SHOW max_connections").fetchone()[0]) + 10
    spec = _sweep_file(tmp_path / "f.toml", f"workers = [2, {too_many}]",
                       'duration = "2s"\nwarmup = "1s"\nschema = "qbench_refused"')
    proc = qbench("sweep", str(spec), "--dsn", dsn, "--results", str(tmp_path / "results"))
    assert proc.returncode == 2 and proc.stderr.startswith("qbench: --workers: the run needs"), proc.stderr
    assert not (tmp_path / "results").exists()
    with psycopg.connect(dsn) as conn:
        assert db.schema_state(conn, "qbench_refused") == "absent"
        assert db.schema_state(conn, "qbench_refused_state") == "absent"


@pytest.mark.slow
def test_failed_runs_keep_the_sweep_unfinished_and_are_retried_on_resume(dsn, tmp_path):
    """While another session holds the schema's lock every run fails (``failed: SCHEMA: …``),
    the sweep exits 1 and stays unfinished; once it is free, running the sweep again retries
    the failed runs, replacing their rows."""
    spec = _sweep_file(tmp_path / "f.toml", "batch = [1, 2]", 'workers = 2\nduration = "2s"\nwarmup = "1s"')
    results = tmp_path / "results"
    with psycopg.connect(dsn, autocommit=True) as holder:
        db.OWNERSHIP.lock(holder, "qbench")  # as a running qbench would
        proc = qbench("sweep", str(spec), "--dsn", dsn, "--results", str(results), timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "2 runs failed" in proc.stdout and "run it again" in proc.stderr
    sweep_dir = _sweep_dir(results)
    assert [(r["cell_id"], r["status"][:16]) for r in _cells(sweep_dir)] == [("c001", "failed: --schema"),
                                                                            ("c002", "failed: --schema")]
    assert json.loads((sweep_dir / "sweep.json").read_text())["complete"] is False

    proc = qbench("sweep", str(spec), "--dsn", dsn, "--results", str(results), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 of 2 runs" not in proc.stdout and "resuming" in proc.stdout
    rows = _cells(sweep_dir)
    assert [(r["cell_id"], r["status"]) for r in rows] == [("c001", "done"), ("c002", "done")]
    assert all(int(r["backlog"]) > 0 for r in rows)  # the backlog really seeded, not the configured 0
    assert json.loads((sweep_dir / "sweep.json").read_text())["complete"] is True


@pytest.mark.parametrize("extra, param", [
    ('[target]\nrate_jobs_per_s = "lots"\n', "TARGET"),
    ("[target]\nrate_jobs_per_s = 100\nutilisation = 0\n", "TARGET"),
    ("[target]\nrate_jobs_per_s = 100\ncolour = 1\n", "TARGET"),
])
def test_bad_target_table_is_refused_before_anything(tmp_path, extra, param):
    spec = _sweep_file(tmp_path / "t.toml", "batch = [1, 2]", "workers = 2")
    spec.write_text(spec.read_text() + extra)
    proc = qbench("sweep", str(spec), "--results", str(tmp_path / "r"))
    assert proc.returncode == 2 and proc.stderr.startswith(f"qbench: {typed(param)}:"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


def test_a_parameter_both_fixed_and_swept_is_refused(tmp_path):
    spec = _sweep_file(tmp_path / "d.toml", 'index = ["partial"]', 'index = "none"')
    proc = qbench("sweep", str(spec), "--results", str(tmp_path / "r"))
    assert proc.returncode == 2 and proc.stderr.startswith("qbench: --index: is both in [fixed] and in [matrix]")


def test_a_row_appended_after_the_columns_changed_keeps_the_earlier_rows(tmp_path):
    """A sweep resumed by a newer version: cells.csv is rewritten under the new header, the rows
    already measured keep their values and the new columns are empty for them."""
    from bench.sweep import cells_file as driver

    old = [c for c in driver.CELL_COLUMNS if not c.startswith("plan_explain")]
    with (tmp_path / "cells.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=old)
        writer.writeheader()
        writer.writerow({c: "" for c in old} | {"cell_id": "c001", "rep": "1", "status": "done",
                                                "throughput_jobs_per_s": "123.4"})
    driver.append_row(tmp_path, {"cell_id": "c002", "rep": 1, "status": "done", "plan_explain_scan": "ref on jobs"})
    rows = _cells(tmp_path)
    assert list(rows[0]) == list(driver.CELL_COLUMNS)
    assert [(r["cell_id"], r["throughput_jobs_per_s"], r["plan_explain_scan"]) for r in rows] == [
        ("c001", "123.4", ""), ("c002", "", "ref on jobs")]
