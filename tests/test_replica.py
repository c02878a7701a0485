"""REPLICA=1 against real servers: an embedded standby that replays the primary's WAL, lag under load, the
standby's cancellations with feedback off against the primary's dead tuples held with feedback on, the stale
reads' rule, and the refusals (docs/replicas.md)."""

from __future__ import annotations

import csv
import json
import pathlib
import socket
import time
import types

import psutil
import psycopg
import pytest

from bench.engines.postgres.embedded import PostgresRecipe
from bench.engines.postgres.replica import OLDEST_LIMIT
from bench.engines.postgres.standby import embedded_standby
from bench.measure.replica_reads import stale_reads
from conftest import qbench, run_and_load
from cli_in_process import qbench_in_process


def _cfg(feedback: str = "off", max_delay_s: float = 30.0, sync_commit: str = "server"):
    return types.SimpleNamespace(pg_version="auto", hot_standby_feedback=feedback, replica_max_delay_s=max_delay_s,
                                 sync_commit=sync_commit)


def test_embedded_standby_replays_and_is_removed_with_its_directory():
    """Rows committed on the primary appear on the standby (replay), which refuses writes; afterwards its
    directory and postmaster are gone."""
    lines = []
    with PostgresRecipe.server(30, log=lambda _l: None) as primary:
        with embedded_standby(primary, _cfg(), 2, log=lines.append) as standby:
            root = pathlib.Path(next(line.split(" in ", 1)[1].split(" on port")[0] for line in lines if "starting in" in line))
            assert root.is_dir()
            with psycopg.connect(primary, autocommit=True) as p, psycopg.connect(standby, autocommit=True) as s:
                assert s.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
                p.execute("CREATE TABLE replayed (n int)")
                p.execute("INSERT INTO replayed SELECT generate_series(1, 1000)")
                deadline = time.monotonic() + 20
                seen = None
                while seen != 1000 and time.monotonic() < deadline:  # replayed a moment after the commit
                    try:
                        seen = s.execute("SELECT count(*) FROM replayed").fetchone()[0]
                    except psycopg.errors.UndefinedTable:
                        pass
                    time.sleep(0.05)
                assert seen == 1000
                with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                    s.execute("INSERT INTO replayed VALUES (1)")
                settings = dict(s.execute("SELECT name, setting FROM pg_settings WHERE name IN "
                                          "('hot_standby', 'hot_standby_feedback', 'max_standby_streaming_delay')"))
                assert settings == {"hot_standby": "on", "hot_standby_feedback": "off",
                                    "max_standby_streaming_delay": "30000"}
    assert not root.exists()
    assert not [p.pid for p in psutil.process_iter(["cmdline"]) if any(str(root) in a for a in p.info["cmdline"] or ())]


def _run(tmp: pathlib.Path, *args: str) -> tuple[dict, list[dict]]:
    """One embedded run with a standby; its summary's ``replica`` block and intervals.csv rows."""
    proc = qbench("run", "--results", str(tmp), "--replica", "--rate", "300", "--workers", "4", "--warmup", "2s",
                  *args, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = next(p for p in tmp.iterdir() if p.is_dir())
    summary = json.loads((run_dir / "summary.json").read_text())
    with (run_dir / "intervals.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert any(line.startswith("standby (feedback") for line in proc.stdout.splitlines())
    return summary, rows


def _mean(rows: list[dict], column: str) -> float:
    values = [float(r[column]) for r in rows if r[column] != ""]
    return sum(values) / len(values)


def test_feedback_off_cancels_readers_and_on_holds_dead_tuples_on_the_primary(tmp_path):
    """Two runs, the same load and readers longer than the standby's delay: feedback off, the standby cancels the
    readers (pg_stat_database_conflicts and the readers agree) and the WAL replay lags; feedback on, no snapshot
    conflict, the standby holds an xmin on the primary and the primary's queue table keeps more dead tuples."""
    common = ("--duration", "16s", "--replica-readers", "2", "--replica-reader-s", "6", "--replica-max-delay-s", "2")
    off, off_rows = _run(tmp_path / "off", *common, "--hot-standby-feedback", "off")
    on, on_rows = _run(tmp_path / "on", *common, "--hot-standby-feedback", "on")
    r_off, r_on = off["replica"], on["replica"]
    assert r_off["hot_standby_feedback"] == "off" and r_on["hot_standby_feedback"] == "on"
    assert r_off["max_standby_streaming_delay_s"] == 2.0
    # under load the standby is behind by some WAL every second (bytes, read on both servers)
    assert all(r["replica_lag_bytes"] != "" for r in off_rows) and r_off["lag_bytes"]["max"] > 0
    assert r_on["lag_bytes"]["max"] > 0
    # feedback off: snapshot conflicts cancelled the readers, seen by the standby and by the readers
    assert r_off["conflicts"]["snapshot"] > 0
    assert r_off["read_cancels"] > 0
    assert r_off["read_cancels"] <= sum(r_off["conflicts"].values())
    assert r_off["primary_xmin_age_max"] is None
    # feedback on: the standby's snapshots hold the primary's horizon instead (a snapshot taken in the second
    # before the standby's next report can still meet a removal, PostgreSQL's known gap: fewer, not none)
    assert r_on["conflicts"]["snapshot"] < r_off["conflicts"]["snapshot"]
    assert r_on["read_cancels"] < r_off["read_cancels"]
    assert r_on["primary_xmin_age_max"] is not None and r_on["primary_xmin_age_max"] > 0
    assert _mean(on_rows, "dead_tuples") > 1.5 * _mean(off_rows, "dead_tuples")
    # replay waited for the readers with feedback off: its lag in seconds reached the standby's delay
    assert r_off["lag_s"]["max"] >= 1.0 > r_on["lag_s"]["max"]
    assert r_off["stale_reads"] is not None and r_on["stale_reads"] is not None


def test_a_lagging_standby_gives_stale_reads_at_the_head_of_a_draining_backlog(tmp_path):
    """Workers drain a seeded backlog while replay waits for the readers (feedback off; the standby's 30 s delay
    is longer than the run, so no reader is cancelled): the standby's oldest eligible jobs were already claimed
    on the primary. Each snapshot counts at most the jobs one read returns, and a reader takes at most one
    snapshot a second."""
    proc = qbench("run", "--results", str(tmp_path), "--replica", "--replica-readers", "2", "--replica-reader-s", "4",
                  "--backlog", "60000", "--workers", "4", "--duration", "10s", "--warmup", "1s", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    replica = json.loads((run_dir / "summary.json").read_text())["replica"]
    with (run_dir / "intervals.csv").open() as fh:
        stale = [int(r["stale_reads"]) for r in csv.DictReader(fh)]
    assert replica["stale_reads"] == sum(stale) > 0
    assert max(stale) <= 2 * OLDEST_LIMIT


def test_stale_reads_are_jobs_claimed_or_done_before_the_snapshot():
    """The rule on a claim log: only events before the snapshot's position count, and a job whose last event
    there is a claim or an applied completion is stale; a failure (re-queued) or a later claim is not."""
    events = [("p", 1, None, None, None), ("p", 2, None, None, None), ("p", 3, None, None, None),
              ("c", 1, 1, 0.0, 0.0), ("c", 2, 2, 0.0, 0.0), ("f", 2, 2, None, None),  # 6 events
              ("c", 3, 3, 0.0, 0.0), ("a", 1, 1, None, None)]
    snapshots = [(10, 6, [1, 2, 3]), (11, 8, [1, 2, 3]), (12, 0, [1])]
    assert stale_reads(snapshots, iter(events)) == {10: 1, 11: 2, 12: 0}
    assert stale_reads([(10, None, [1])], iter(events)) is None


def test_replica_with_a_dsn_and_no_standby_is_refused_in_one_line(tmp_path):
    results = tmp_path / "results"
    proc = qbench_in_process("run", "--replica", "--dsn", "postgresql://postgres@127.0.0.1:5432/postgres",
                             "--results", str(results))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("qbench: --dsn-replica:")
    assert not results.exists()


def test_replica_on_mariadb_is_refused_as_not_built(tmp_path):
    results = tmp_path / "results"
    proc = qbench_in_process("run", "--replica", "--engine", "mariadb", "--results", str(results))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("qbench: --replica: 1 is not supported on mariadb")
    assert "not built" in proc.stderr and proc.stderr.rstrip().endswith("allowed on mariadb: 0"), proc.stderr
    assert not results.exists()


def test_standby_settings_are_refused_beside_a_given_standby():
    proc = qbench_in_process("run", "--replica", "--dsn", "postgresql://postgres@127.0.0.1:5432/postgres",
                             "--dsn-replica", "postgresql://postgres@127.0.0.1:5433/postgres",
                             "--hot-standby-feedback", "on")
    assert proc.returncode == 2 and proc.stderr.startswith("qbench: --hot-standby-feedback:")


def test_a_given_standby_is_read_and_recorded(tmp_path):
    """DSN + DSN_REPLICA: the run starts no standby, samples the one given, records its own settings."""
    with PostgresRecipe.server(40, log=lambda _l: None) as primary, \
            embedded_standby(primary, _cfg("on", 7.0), 1, log=lambda _l: None) as standby:
        run_dir, summary, proc = run_and_load(primary, tmp_path, "--replica", "--dsn-replica", standby,
                                              "--replica-readers", "1", "--replica-reader-s", "2", "--rate", "300",
                                              "--duration", "5s", "--warmup", "1s")
        assert "standby ready" not in proc.stdout  # none started by the run
        r = summary["replica"]
        assert r["source"] == "DSN_REPLICA" and r["hot_standby_feedback"] == "on"
        assert r["max_standby_streaming_delay_s"] == 7.0
        assert r["lag_bytes"]["max"] > 0 and r["reads"] > 0


@pytest.fixture(scope="module")
def throwaway_primary():
    """A throwaway server for the refusals of a given standby (its DSN)."""
    with PostgresRecipe.server(30, log=lambda _l: None) as dsn:
        yield dsn


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _refused_before_anything(dsn: str, dsn_replica: str, results: pathlib.Path, run=qbench,
                             command=("run",)) -> str:
    """``command`` with ``dsn_replica``: exit 2, one ``--dsn-replica`` line, no run directory, no schema on the
    DSN's server; returns the line."""
    proc = run(*command, "--replica", "--dsn", dsn, "--dsn-replica", dsn_replica, "--duration", "3s",
               "--results", str(results))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("qbench: --dsn-replica:"), proc.stderr
    assert not results.exists()
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'qbench%'").fetchone()[0] == 0
    return proc.stderr


def test_the_primary_given_as_its_own_standby_is_refused_before_anything_is_created(throwaway_primary, tmp_path):
    line = _refused_before_anything(throwaway_primary, throwaway_primary, tmp_path / "results")
    assert "not a standby" in line and "pg_is_in_recovery() true" in line


def test_a_sweep_with_the_primary_as_its_standby_is_refused_before_its_first_cell(throwaway_primary, tmp_path):
    line = _refused_before_anything(throwaway_primary, throwaway_primary, tmp_path / "results",
                                    command=("sweep", "batch"))
    assert "not a standby" in line


def test_an_unreachable_standby_is_refused_before_anything_is_created(throwaway_primary, tmp_path):
    port = _free_port()
    line = _refused_before_anything(throwaway_primary, f"postgresql://postgres@127.0.0.1:{port}/postgres",
                                    tmp_path / "results")
    assert "cannot connect" in line and str(port) in line


def test_a_non_loopback_standby_needs_allow_remote(throwaway_primary, tmp_path):
    line = _refused_before_anything(throwaway_primary, "postgresql://postgres@10.1.2.3/postgres", tmp_path / "results",
                                    run=qbench_in_process)  # refused without connecting
    assert "'10.1.2.3' is not a loopback address" in line and "--allow-remote" in line


def test_a_standby_of_another_server_is_refused(throwaway_primary, tmp_path):
    with PostgresRecipe.server(30, log=lambda _l: None) as other, \
            embedded_standby(other, _cfg(), 1, log=lambda _l: None) as others_standby:
        line = _refused_before_anything(throwaway_primary, others_standby, tmp_path / "results")
        with psycopg.connect(others_standby, autocommit=True) as s, psycopg.connect(throwaway_primary) as p:
            query = "SELECT system_identifier FROM pg_control_system()"
            ids = s.execute(query).fetchone()[0], p.execute(query).fetchone()[0]
    assert ids[0] != ids[1]
    assert "a standby of another server" in line and f"{ids[0]}" in line and f"{ids[1]}" in line
