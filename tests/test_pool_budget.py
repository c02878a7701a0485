"""The connection budget behind a pooler (docs/poolers.md, "Connections behind a pool"): the server's budget is
the pool plus the tool's direct connections, not one per worker; ``POOL_SIZE`` as a sweep axis through the
embedded pooler; the refusals. The arithmetic in process; the accept/refuse decision, one run and one sweep
against the real PostgreSQL (its real ``max_connections``) and the real PgBouncer."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import psycopg
import pytest

from bench.config.connection_budget import ConnectionBudget
from bench.config.run_config import build_config
from bench.engines import get_engine
from bench.engines.postgres import db
from bench.errors import ConfigError
from cli_in_process import qbench_in_process
from conftest import CLEAN_INVARIANTS, fresh_database, qbench

USER_POOLER = {"dsn_direct": "postgresql://postgres@127.0.0.1:5432/postgres", "pool_mode": "transaction"}
POOLER_DSN = "postgresql://postgres@127.0.0.1:6432/postgres"


def _free(dsn: str) -> int:
    """The server's free connections as the tool reads them, on a connection of its own (counted, as the tool's
    admin connection is)."""
    with psycopg.connect(dsn) as conn:
        return db.connection_headroom(conn)["available"]


def test_behind_the_embedded_pooler_the_server_needs_the_pool_and_the_direct_ones_not_a_connection_per_worker():
    """500 workers through a pool of 20: 20 + the tool's direct ones (the monitor's two; one more per periodic
    VACUUM); without a pooler, one per worker, the reaper, the producers and the round-trip probe."""
    pooled = build_config("default", {"pooler": "pgbouncer", "pool_size": "20", "workers": "500"})
    assert pooled.connections_needed() == 20 + 2 == pooled.connection_budget().server
    assert pooled.connection_budget().clients == 500 + 1 == pooled.pooled_connections()  # + the round-trip probe
    vacuuming = build_config("default", {"pooler": "pgbouncer", "pool_size": "20", "workers": "500",
                                         "vacuum_every_s": "5"})
    assert vacuuming.connections_needed() == 20 + 3
    direct = build_config("default", {"workers": "500", "rate": "100", "producers": "3", "reaper_interval_s": "1"})
    assert direct.connections_needed() == 500 + 3 + 1 + 1 + 2
    assert direct.connection_budget(extra_workers=10).server == 510 + 3 + 1 + 1 + 2  # the web UI's most workers
    assert pooled.connection_budget(extra_workers=10).server == 22  # through the pool they cost no server slot
    assert pooled.connection_budget().sentence() == ("500 workers need 23 server connections through the pool "
                                                     "(pool size 20 + 3 direct)")
    few = build_config("default", {"pooler": "pgbouncer", "pool_size": "20", "workers": "10"})
    assert few.connection_budget().server == 10 + 1 + 2  # a client holds one server connection at most
    assert few.connection_budget().sentence() == ("10 workers need 14 server connections through the pool (at most "
                                                  "11 of the pool of 20, one per client + 3 direct)")


def test_behind_a_users_pooler_the_server_is_checked_for_the_direct_ones_and_the_pool_only_once_known():
    """A user's pooler's pool size and max_client_conn are unknown unless read from its console: then only the
    tool's direct connections are checked on the server and no client limit; given them (the console's seam), the
    pool is counted and the clients checked against max_client_conn."""
    cfg = build_config("default", {"workers": "500", **USER_POOLER}, dsn=POOLER_DSN)
    unknown = cfg.connection_budget()
    assert (unknown.server, unknown.pool_size, unknown.max_client_conn) == (2, None, None)
    unknown.check_clients()  # not known: nothing to check
    assert "not checked (its pool size is unknown)" in unknown.sentence()
    known = cfg.connection_budget(pool_size=30, max_client_conn=400)
    assert known.server == 32
    with pytest.raises(ConfigError) as err:
        known.check_clients()
    assert err.value.param == "WORKERS" and ("501 client connections through the pooler (workers, reaper, producers, "
                                             "the round-trip probe)") in err.value.problem
    cfg.connection_budget(pool_size=30, max_client_conn=501).check_clients()  # 500 workers and the probe


def test_each_refusal_names_what_the_user_can_change():
    room = {"max_connections": 100, "reserved": 3, "in_use": 90, "available": 7}
    direct = ConnectionBudget(workers=10, clients=10, direct=2)
    embedded = ConnectionBudget(workers=500, clients=500, direct=2, pooler="embedded", pool_size=20)
    yours = ConnectionBudget(workers=500, clients=500, direct=9, pooler="yours")
    assert direct.refusal(room).param == "WORKERS" and "needs 12 more connections" in direct.refusal(room).problem
    assert embedded.refusal(room).param == "POOL_SIZE"
    assert embedded.refusal(room).problem.endswith("allowed: --pool-size from 1 to 5")
    assert yours.refusal(room).param == "DSN_DIRECT" and "own 9 direct connections" in yours.refusal(room).problem
    known = ConnectionBudget(workers=500, clients=500, direct=2, pooler="yours", pool_size=30)
    assert known.refusal(room).problem.startswith("your pooler's pool of 30 and the tool's own 2 direct connections")


def test_the_server_accepts_through_the_pool_the_workers_it_refuses_direct(dsn):
    """On the server's real max_connections: more workers than it has free connections are refused direct and
    accepted through a small embedded pool; a pool as large as the free connections is refused, naming
    POOL_SIZE, as the direct ones need room too."""
    engine, free = get_engine("postgres"), _free(dsn)
    many = free + 50
    conn = engine.connect(dsn, "queue-bench test")
    try:
        through = build_config("default", {"pooler": "pgbouncer", "pool_size": "5", "workers": str(many)})
        assert engine.check_schema(conn, "qbench_budget", through.connection_budget())["available"] >= 7
        with pytest.raises(ConfigError) as err:
            engine.check_schema(conn, "qbench_budget", build_config("default", {"workers": str(many)}).connection_budget())
        assert err.value.param == "WORKERS" and f"needs {many + 1 + 2} more connections" in err.value.problem
        whole = build_config("default", {"pooler": "pgbouncer", "pool_size": str(free), "workers": str(many)})
        with pytest.raises(ConfigError) as err:
            engine.check_schema(conn, "qbench_budget", whole.connection_budget())
        assert err.value.param == "POOL_SIZE" and f"need {free + 2}, and the server has" in err.value.problem
    finally:
        conn.close()


@pytest.mark.slow
def test_a_run_with_more_workers_than_the_server_has_free_connections_runs_through_the_pool(tmp_path):
    """``qbench run`` with WORKERS above the server's free connections, through an embedded pool of 5: it starts,
    says the server connections it needs through the pool, completes with 0 errors and the audit clean."""
    with fresh_database() as direct:
        workers = _free(direct) + 5
        proc = qbench("run", "--dsn", direct, "--pooler", "pgbouncer", "--pool-size", "5", "--workers", str(workers),
                      "--duration", "2s", "--warmup", "1s", "--results", str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"connections: {workers} workers need 8 server connections through the pool (pool size 5 + 3 direct)" \
        in proc.stdout.splitlines()
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] and sum(summary["errors"].values()) == 0 and summary["jobs_completed"] > 0
    assert {k: summary["invariants"][k] for k in CLEAN_INVARIANTS} == CLEAN_INVARIANTS
    assert summary["config"]["workers"] == workers


def _sweep_file(path: Path, matrix: str, fixed: str) -> Path:
    path.write_text(f'description = "test"\nworkload = "default"\n[fixed]\n{fixed}\n[matrix]\n{matrix}\n')
    return path


@pytest.mark.slow
def test_a_pool_size_sweep_runs_each_cell_through_its_own_pool(tmp_path):
    """Two cells, POOL_SIZE 2 and 4, through the embedded pooler: both done, clean, and the sweep's files
    (cells.csv, sweep.json, each run's run.json) name each cell's pool size."""
    spec = _sweep_file(tmp_path / "pools.toml", "pool_size = [2, 4]",
                       'pooler = "pgbouncer"\nworkers = 6\nduration = "1s"\nwarmup = "1s"\nbacklog = 2000')
    with fresh_database() as direct:
        proc = qbench("sweep", str(spec), "--dsn", direct, "--results", str(tmp_path / "results"), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (sweep_dir,) = (tmp_path / "results" / "sweeps").iterdir()
    with (sweep_dir / "cells.csv").open(newline="") as fh:
        rows = {r["pool_size"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"2", "4"}
    for pool_size, row in rows.items():
        assert (row["status"], row["pooler"], row["pool_mode"], row["errors_total"], row["invariants_ok"]) == (
            "done", "pgbouncer", "transaction", "0", "True"), row
        run = json.loads((sweep_dir / row["run_dir"] / "run.json").read_text())
        assert run["config"]["pool_size"] == int(pool_size) and run["pooler"]["embedded"] == "pgbouncer"
    meta = json.loads((sweep_dir / "sweep.json").read_text())
    assert meta["axes"] == {"pool_size": [2, 4]} and meta["complete"] is True
    log = (sweep_dir / "sweep.log").read_text()
    assert "default_pool_size 2," in log and "default_pool_size 4," in log  # one pooler per cell, its own size


def test_a_pool_size_axis_without_the_pooler_is_refused_before_anything(tmp_path):
    spec = _sweep_file(tmp_path / "pools.toml", "pool_size = [2, 4]", 'workers = 4')
    proc = qbench_in_process("sweep", str(spec), "--results", str(tmp_path / "results"))
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("qbench: --pool-size: sizes the pool of the pooler the tool starts, and none is started")
    assert not (tmp_path / "results").exists()


def test_a_pool_size_below_one_in_a_sweep_is_refused(tmp_path):
    spec = _sweep_file(tmp_path / "pools.toml", "pool_size = [0, 4]", 'pooler = "pgbouncer"')
    proc = qbench_in_process("sweep", str(spec), "--results", str(tmp_path / "results"))
    assert proc.returncode == 2 and proc.stderr.startswith("qbench: --pool-size: 0 is out of range"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "results").exists()


def test_a_plan_through_the_pooler_is_refused(tmp_path):
    proc = qbench_in_process("plan", "--pooler", "pgbouncer", "--rate", "100", "--slo", "pickup_p99<=1s",
                             "--results", str(tmp_path / "results"))
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("qbench: --pooler: the embedded pooler is not built for this command; allowed: leave "
                           "--pooler out here")
    assert not (tmp_path / "results").exists()


def test_a_pool_the_server_cannot_hold_with_the_direct_ones_is_refused_and_nothing_created(dsn, tmp_path):
    """POOL_SIZE above the server's free connections (read on the server before the pooler starts), and POOL_SIZE
    that fits alone but not with the tool's direct connections (refused when the run checks, before the schema):
    each one line naming POOL_SIZE, exit 2, no schema, no results."""
    free = _free(dsn)
    for pool_size, starts in ((free + 1, f"--pool-size: {free + 1} is above the server's "),
                              (free, f"--pool-size: {free} server connections for the pool and the tool's 2 direct")):
        # as many workers as the pool: a client holds one server connection at most, so fewer would not fill it
        proc = qbench("run", "--dsn", dsn, "--pooler", "pgbouncer", "--pool-size", str(pool_size), "--workers",
                      str(pool_size), "--schema", "qbench_pool_refused", "--results", str(tmp_path / "results"),
                      timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(f"qbench: {starts}") and "; allowed: " in line, line
        assert not (tmp_path / "results").exists()
        with psycopg.connect(dsn) as conn:
            assert db.schema_state(conn, "qbench_pool_refused") == "absent"
