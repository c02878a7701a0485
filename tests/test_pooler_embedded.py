"""The embedded pooler (``POOLER=pgbouncer``, bench/engines/postgres/pooler/): a throwaway PgBouncer from the
Debian package, started in front of a test database in each pool mode, reaching it, gone after every way out
(kill -9 included), its refusals, and one run through it. Against the real PostgreSQL and the real PgBouncer.

The pooler's server connections are counted on the server by their client port: the TCP ports the PgBouncer
process holds toward the server (psutil) are the ``client_port`` of its backends in ``pg_stat_activity``."""

from __future__ import annotations

import csv
import json
import os
import pathlib
import pwd
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import psutil
import psycopg
import pytest

from bench.config.run_config import build_config
from bench.engines.postgres.adapter import connect
from bench.engines.postgres.pooler import binary, console_rows
from bench.engines.postgres.pooler import pgbouncer
from bench.engines.postgres.pooler.pgbouncer import embedded_pgbouncer
from bench.engines.postgres.pooler.settings import RESET_QUERY, fds_needed
from bench.errors import ConfigError, exit_status
from cli_in_process import qbench_in_process
from conftest import CLEAN_INVARIANTS, REPO, fresh_database
from waiting import wait_until

CHILD = pathlib.Path(__file__).resolve().parent / "embedded_child.py"


@pytest.fixture
def servers_dir():
    """A directory for the pooler's own (pytest's tmp_path is mode 0700 under root: the pooler's user could not
    enter it), removed after the test."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="qbench-pooler-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def lower_fd_limit():
    """This process's soft file limit lowered to 1,024 during the test (its hard one kept), so that the pooler's
    limit is raised for its clients within the hard one on any machine."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 1024), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("can_raise, expected, noted", [(True, (300, 300), False), (False, (200, 200), True)])
def test_the_file_limit_past_the_hard_one_needs_cap_sys_resource(monkeypatch, can_raise, expected, noted):
    """300 descriptors needed, soft limit 100, hard 200 (faked): raised to 300 where the process may raise a hard
    limit, else the hard one with a note."""
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (100, 200))
    monkeypatch.setattr(pgbouncer, "can_raise_hard_limit", lambda: can_raise)
    limits, note = pgbouncer.fd_limits(300)
    assert limits == expected and (note is not None) == noted
    assert pgbouncer.fd_limits(150) == ((150, 200), None)


def _pooler_backends(direct_dsn: str, pid: int) -> list[int]:
    """The pids of the server backends PgBouncer ``pid`` holds in ``direct_dsn``'s database: those whose client
    port is one of its TCP connections' local ports."""
    try:
        ports = [c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp") if c.raddr]
    except psutil.NoSuchProcess:
        return []
    with psycopg.connect(direct_dsn, autocommit=True) as conn:
        return [row[0] for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND client_port = ANY(%s)",
            (ports,)).fetchall()]


def _expected_user() -> str:
    """Ourselves; under root the embedded servers' user (``postgres``, else the ``qbench`` one it creates)."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    try:
        pwd.getpwnam("postgres")
        return "postgres"
    except KeyError:
        return "qbench"


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_the_pooler_reaches_the_server_in_each_mode_and_is_gone_after(dsn, servers_dir, lower_fd_limit, mode):
    """A client through the pooler is served by a backend of the test database that the pooler holds; the
    console reports the mode, pool size, client limit, stats period and reset query it was given; the process
    runs as the servers' user with a file limit for its clients; after the block the process and its directory
    are gone."""
    lines: list[str] = []
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    clients = soft + 100  # more than this process may open (lower_fd_limit): the pooler's is raised for them
    with embedded_pgbouncer(dsn, mode, 3, clients, base_dir=servers_dir, log=lines.append) as pooler:
        assert (pooler.mode, pooler.pool_size, pooler.dsn_direct) == (mode, 3, dsn)
        with connect(pooler.dsn) as conn:
            backend, port, database = conn.execute(
                "SELECT pg_backend_pid(), current_setting('port')::int, current_database()").fetchone()
        upstream = psycopg.conninfo.conninfo_to_dict(dsn)
        assert (port, database) == (int(upstream.get("port", 5432)), upstream["dbname"])
        assert backend in _pooler_backends(dsn, pooler.pid)
        config = {row["key"]: row["value"] for row in console_rows(pooler.admin_dsn, "SHOW CONFIG")}
        assert (config["pool_mode"], config["default_pool_size"], config["stats_period"]) == (mode, "3", "1")
        assert config["max_client_conn"] == str(pooler.max_client_conn) and pooler.max_client_conn > clients
        assert config["server_reset_query"] == RESET_QUERY[mode]
        (pool,) = [p for p in console_rows(pooler.admin_dsn, "SHOW POOLS") if p["database"] != "pgbouncer"]
        assert pool["pool_mode"] == mode and pool["sv_active"] + pool["sv_idle"] + pool["sv_used"] <= 3
        proc = psutil.Process(pooler.pid)
        assert proc.username() == _expected_user()
        limits = pathlib.Path(f"/proc/{pooler.pid}/limits").read_text()  # prlimit() may need CAP_SYS_RESOURCE
        (open_files,) = [line.split()[3] for line in limits.splitlines() if line.startswith("Max open files")]
        assert int(open_files) >= fds_needed(pooler.max_client_conn, 3) > soft
        root = pathlib.Path(proc.cmdline()[-1]).parent.parent
        assert root.parent == servers_dir.resolve() and root.is_dir()
    assert not root.exists() and not psutil.pid_exists(pooler.pid)
    assert any("PgBouncer stopped" in line for line in lines), lines


def test_an_exception_inside_the_block_still_removes_it(dsn, servers_dir):
    with pytest.raises(RuntimeError, match="boom"):
        with embedded_pgbouncer(dsn, "session", 2, 5, base_dir=servers_dir, log=lambda line: None) as pooler:
            raise RuntimeError("boom")
    assert list(servers_dir.iterdir()) == [] and not psutil.pid_exists(pooler.pid)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sigint", "sigterm", "sigkill"])
def test_the_pooler_is_gone_however_its_process_ends(mode):
    """Ctrl-C and SIGTERM end the child through its ``finally``; SIGKILL runs no hook, and the embedded servers'
    watchdog removes the pooler and its directory (within 30 s)."""
    proc = subprocess.Popen([sys.executable, str(CHILD), "pgbouncer", mode], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        pooler_dsn, data_dir = proc.stdout.readline().split()
        if mode == "sigkill":
            pid = int(pathlib.Path(data_dir, "pgbouncer.pid").read_text())
            assert psutil.Process(pid).name() == "pgbouncer"
            proc.kill()
        proc.wait(timeout=60)
        wait_until(lambda: not os.path.exists(os.path.dirname(data_dir)), 30, "the pooler's directory removed")
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(pooler_dsn, connect_timeout=2).close()
    finally:
        proc.kill()
        proc.wait(timeout=10)
    if mode == "sigkill":
        wait_until(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 30,
                   "the killed tool's pgbouncer ended")


def test_a_pool_above_the_servers_free_connections_is_refused_before_anything_starts(dsn, servers_dir):
    with psycopg.connect(dsn) as conn:
        free = conn.execute("SELECT current_setting('max_connections')::int").fetchone()[0]
    with pytest.raises(ConfigError) as err:
        with embedded_pgbouncer(dsn, "transaction", free, 10, base_dir=servers_dir, log=lambda line: None):
            pass
    assert str(err.value).startswith(f"--pool-size: {free} is above the server's ")
    assert "allowed: --pool-size from 1 to " in str(err.value) and exit_status(err.value) == 2
    assert list(servers_dir.iterdir()) == []


def test_missing_binary_is_one_line_naming_the_debian_package(monkeypatch, tmp_path):
    """No pgbouncer on PATH or in the search directories: refused before any server starts (in process, where
    reaching a server fails the test)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(binary, "SEARCH_DIRS", (str(tmp_path),))
    proc = qbench_in_process("run", "--pooler", "pgbouncer", "--results", str(tmp_path / "results"))
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("qbench: --pooler: pgbouncer: no pgbouncer binary") and "Debian package pgbouncer" in line
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("args, starts", [
    (["--pool-size", "5"], "--pool-size: sizes the pool of the pooler the tool starts, and none is started"),
    (["--pool-mode", "session"], "--pool-mode: session says --dsn reaches a pooler, and there is no --dsn"),
    (["--pooler", "pgbouncer", "--dsn-direct", "postgresql://postgres@127.0.0.1:5432/postgres"],
     "--pooler: pgbouncer starts a pooler in front of --dsn's server, and --dsn-direct says --dsn is a pooler of yours"),
    (["--dsn", "postgresql://postgres@127.0.0.1:6432/postgres", "--dsn-direct",
      "postgresql://postgres@127.0.0.1:5432/postgres", "--pool-mode", "transaction", "--pool-size", "5"],
     "--pool-size: sizes the pool of the pooler the tool starts, and --dsn-direct says --dsn is a pooler of yours"),
    (["--pooler", "pgbouncer", "--pool-mode", "none"], "--pool-mode: none with --pooler pgbouncer"),
    (["--pooler", "pgbouncer", "--prepared"], "--prepared: 1 prepares the claim by name"),
    (["--pooler", "pgbouncer", "--wakeup", "notify"], "--wakeup: notify LISTENs on the worker's session"),
    (["--engine", "mariadb", "--pooler", "pgbouncer"], "--pooler: 'pgbouncer' is not supported on mariadb (not built: "
                                                       "MariaDB's poolers, ProxySQL and MaxScale, are on paper only"),
    (["--pooler", "pgbouncer", "--pool-size", "0"], "--pool-size: 0 is out of range"),
    (["--pooler", "pgbouncer", "--pooler-admin-dsn", "postgresql://postgres@127.0.0.1:6432/pgbouncer"],
     "--pooler-admin-dsn: names the console of a pooler of yours, and --pooler pgbouncer starts one"),
    (["--dsn", "postgresql://postgres@127.0.0.1:6432/postgres", "--pooler-admin-dsn",
      "postgresql://postgres@127.0.0.1:6432/pgbouncer"],
     "--pooler-admin-dsn: names the console of a pooler of yours, and there is none (--dsn-direct not given)"),
    (["--pooler", "pgbouncer", "--pool-mode", "session", "--pool-size", "5", "--workers", "10"],
     "--pool-size: 5 in session mode, where each client keeps its server connection while connected, and the run "
     "opens 11 through the pooler"),  # the workers and the round-trip probe
])
def test_refusals_are_one_line_exit_2(args, starts, tmp_path):
    proc = qbench_in_process("run", *args, "--results", str(tmp_path / "results"))
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"qbench: {starts}") and "; allowed" in line
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("overrides, mode, stateless", [
    ({"pooler": "pgbouncer"}, "transaction", True),
    ({"pooler": "pgbouncer", "pool_mode": "transaction"}, "transaction", True),
    ({"pooler": "pgbouncer", "pool_mode": "session", "pool_size": "30"}, "session", False),
    ({}, "none", False),
])
def test_the_embedded_pooler_runs_in_transaction_mode_unless_told_and_its_sessions_follow_the_mode(overrides, mode,
                                                                                                   stateless):
    """One decision (``RunConfig.stateless_sessions``) for both poolers: the embedded one's transaction mode, the
    default with ``POOLER``, makes the sessions stateless and ``PREPARED`` 0 as a user's transaction pooler does;
    session mode and no pooler leave ``PREPARED`` at its default (1)."""
    cfg = build_config("default", overrides)
    assert (cfg.pool_mode, cfg.stateless_sessions(), cfg.prepared) == (mode, stateless, not stateless)
    assert cfg.direct_dsn() is None  # the server behind the pooler is known only once the pooler is up


def test_the_reaper_through_the_embedded_transaction_pool_is_stateless(dsn):
    """The reaper's connection, the one side task through the pooler, prepares nothing and sets its search_path
    per pass, as the workers' sessions do (built on a direct connection here: only its settings are read)."""
    from bench.engines import engine_for
    from bench.measure.metrics import Recorder

    for mode, stateless in (("transaction", True), ("session", False)):
        cfg = build_config("default", {"pooler": "pgbouncer", "pool_mode": mode, "pool_size": "30",
                                       "reaper_interval_s": "1"})
        reaper = engine_for(cfg).reaper(dsn, cfg, Recorder(cfg.batch))
        try:
            assert (reaper.local_settings is not None, reaper.conn.prepare_threshold is None) == (stateless, stateless)
        finally:
            reaper.conn.close()


def test_the_embedded_pooler_is_one_of_the_runs_own_process_trees():
    """The busy-machine meter's roots (``Run._own_trees``): the load generators, the embedded server's root, and
    the pooler the run started (fakes for the driver and the monitor)."""
    from types import SimpleNamespace

    from bench.runner.run import Run

    run = Run.__new__(Run)
    run.driver = SimpleNamespace(local_pids=lambda: (11, 12))
    run.monitor = SimpleNamespace(server_pids=lambda: (21, 22))
    run.relay, run.round_trip = None, SimpleNamespace(pid=51)  # the round-trip probe's process: always the run's
    run.standby_root = None  # no REPLICA=1 standby in this run
    for embedded, pooler_pid, roots in ((True, 31, (11, 12, 21, 31, 51)), (False, 31, (11, 12, 31, 51)),
                                        (False, None, (11, 12, 51))):
        run.embedded, run.pooler_pid = embedded, pooler_pid
        assert run._own_trees() == roots


def test_the_clients_through_the_pooler_are_the_workers_reaper_and_producers():
    """``max_client_conn`` is sized from them; the monitor and the rest go direct, and the server's budget is the
    pool and those (tests/test_pool_budget.py)."""
    cfg = build_config("default", {"pooler": "pgbouncer", "workers": "7", "rate": "50", "producers": "3",
                                   "reaper_interval_s": "1", "pool_size": "4"})
    assert cfg.pooled_connections() == 7 + 3 + 1 + 1  # workers, producers, reaper, the round-trip probe
    assert cfg.connections_needed() == 4 + 2  # the pool, and the monitor's two


def _run_counting_backends(direct: str, tmp_path: pathlib.Path, *args: str) -> tuple[list[int], dict, dict, list]:
    """``qbench run --dsn direct ... args`` through the embedded pooler: the pooler's backends on the server counted
    here each 0.2 s over a direct connection, then its summary.json, run.json and intervals.csv's rows, after
    checking the run ended 0 and its pooler is gone."""
    proc = subprocess.Popen([sys.executable, "-m", "bench.cli.main", "run", "--dsn", direct, "--results",
                             str(tmp_path), "--pooler", "pgbouncer", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    counts, seen = [], set()
    while proc.poll() is None:
        # found again each time: the first ``pgbouncer`` child may be its ``--version`` check, gone at once
        pids = [p.pid for p in psutil.process_iter(["name", "ppid"])
                if p.info["name"] == "pgbouncer" and p.info["ppid"] == proc.pid]
        seen.update(pids)
        if pids:
            counts.append(sum(len(_pooler_backends(direct, pid)) for pid in pids))
        time.sleep(0.2)
    out, err = proc.communicate()
    assert proc.returncode == 0, out + err
    assert seen and not any(psutil.pid_exists(pid) for pid in seen)
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    run_json = json.loads((run_dir / "run.json").read_text())
    assert summary["complete"] and sum(summary["errors"].values()) == 0 and summary["jobs_completed"] > 0
    assert {k: summary["invariants"][k] for k in CLEAN_INVARIANTS} == CLEAN_INVARIANTS
    assert run_json["config"]["dsn_direct"] == direct
    with open(run_dir / "intervals.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    return counts, summary, run_json, rows


def _ints(rows: list[dict], column: str) -> list[int]:
    """intervals.csv's ``column`` over the measured seconds, each second sampled."""
    assert all(r[column] != "" for r in rows), (column, rows)
    return [int(r[column]) for r in rows]


@pytest.mark.slow
def test_a_run_through_the_session_pool_holds_at_most_pool_size_server_connections(tmp_path):
    """``qbench run`` through the embedded pooler in session mode: 0 errors, the audit clean, and the backends the
    pooler holds on the server never above POOL_SIZE and one per worker while the load runs (a session keeps its
    server connection); with WORKERS <= POOL_SIZE no client waits in any second, and the server connections the
    pooler reports are one per worker and one for the round-trip probe (docs/network.md)."""
    workers, pool_size = 10, 12
    with fresh_database() as direct:
        counts, summary, run_json, rows = _run_counting_backends(
            direct, tmp_path, "--pool-mode", "session", "--pool-size", str(pool_size), "--workers", str(workers),
            "--duration", "3s", "--warmup", "1s")
    assert 0 < max(counts) <= pool_size and counts.count(workers + 1) >= 5, counts
    assert _ints(rows, "pooler_cl_waiting") == [0] * len(rows) and summary["pooler"]["seconds_with_waiting"] == 0
    assert set(_ints(rows, "pooler_server_conns")) == {workers + 1} == set(_ints(rows, "pooler_cl_active"))
    config = run_json["config"]
    assert (config["pooler"], config["pool_mode"], config["pool_size"]) == ("pgbouncer", "session", pool_size)
    assert run_json["pooler"]["sessions"] == "as without a pooler" and config["prepared"] is True


@pytest.mark.slow
def test_a_run_through_the_transaction_pool_shares_pool_size_server_connections(tmp_path):
    """``qbench run`` through the embedded pooler in transaction mode: 50 workers holding their claim 5 ms, and a
    reaper every 0.2 s, through 10 server connections: 0 errors (no statement prepared by name on a shared server
    connection, the reaper's included), the audit clean, the pooler's backends on the server never above 10, and
    the stateless sessions recorded. The pooler's figures: clients waiting in some second, the server connections
    it reports at most POOL_SIZE and as many as its backends counted here on the server, the mean wait per
    transaction the summed waits over the summed transactions, and no wait percentile anywhere."""
    pool_size = 10
    with fresh_database() as direct:
        counts, summary, run_json, rows = _run_counting_backends(
            direct, tmp_path, "--pool-mode", "transaction", "--pool-size", str(pool_size), "--workers", "50",
            "--txn", "hold", "--work-ms", "5", "--reaper-interval-s", "0.2", "--duration", "3s", "--warmup", "1s")
    assert 0 < max(counts) <= pool_size, counts
    config, pooler = run_json["config"], run_json["pooler"]
    assert (config["pooler"], config["pool_mode"], config["pool_size"]) == ("pgbouncer", "transaction", pool_size)
    assert config["prepared"] is False and pooler["sessions"] == "stateless" and pooler["embedded"] == "pgbouncer"
    assert "reaper" in pooler["through_pooler"]
    assert pooler["console"]["pool_mode"] == "transaction" and pooler["console"]["pool_size"] == pool_size
    assert pooler["console_source"] == "embedded" and pooler["detection"] is None and pooler["mode_disagrees"] == []
    assert max(_ints(rows, "pooler_cl_waiting")) > 0
    servers = _ints(rows, "pooler_server_conns")
    assert max(servers) <= pool_size and max(servers) == max(counts), (servers, counts)
    assert max(_ints(rows, "pooler_sv_active")) <= pool_size
    block = summary["pooler"]
    waits, xacts = _ints(rows, "pooler_wait_us"), _ints(rows, "pooler_xacts")
    assert block["measured"] and block["wait_mean_us"] == round(sum(waits) / sum(xacts), 1) > 0
    assert block["seconds_with_waiting"] > 0 and block["cpu_pct"]["max"] is not None
    assert "percentile" not in json.dumps(block) and "wait_p" not in ",".join(rows[0])
    # The wait events are the pool's server connections' (a backend cannot be told to be a worker's), the tool's own
    # direct connections (admin, monitor: two more) left out: on average no more sampled at once than the pool holds
    # and this test's own counting connection, another client of the database the run cannot tell from the pool's.
    waits = summary["wait_events"]
    assert waits["backends"] == "the pool's server connections" and waits["samples"] >= 20, waits
    assert 0 < waits["backend_samples"] / waits["samples"] <= pool_size + 1, waits


def _users_pooler_run(dsn: str, pooler, tmp_path: pathlib.Path, mode: str) -> tuple[dict, str]:
    """A short ``qbench run`` through ``pooler`` as a user's pooler (``DSN`` the pooler, ``DSN_DIRECT`` the server,
    ``POOL_MODE`` ``mode``, its console as ``POOLER_ADMIN_DSN`` with a password to be masked); run.json and the
    run's output."""
    admin = psycopg.conninfo.make_conninfo(pooler.admin_dsn, password="s3cret-console")
    proc = subprocess.run([sys.executable, "-m", "bench.cli.main", "run", "--dsn", pooler.dsn, "--dsn-direct", dsn,
                           "--pool-mode", mode, "--pooler-admin-dsn", admin, "--results", str(tmp_path),
                           "--workers", "4", "--duration", "2s", "--warmup", "1s"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    text = (run_dir / "run.json").read_text()
    assert "s3cret-console" not in text
    return json.loads(text), proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("mode, concluded", [("transaction", "transaction pooling detected"),
                                             ("session", "pooling not detected")])
def test_a_users_pooler_is_detected_by_its_mode_and_read_on_its_console(dsn, servers_dir, tmp_path, mode, concluded):
    """The embedded pooler started here and given to the run as a user's pooler: the run detects transaction pooling
    through it in transaction mode and not in session mode, says so before the load, and reads the console it is
    given (mode, pool size, client limit, version; its password masked) and its pool each second (no CPU: the
    pooler's process is not the run's)."""
    with embedded_pgbouncer(dsn, mode, 6, 10, base_dir=servers_dir, log=lambda line: None) as pooler:
        run_json, out = _users_pooler_run(dsn, pooler, tmp_path, mode)
    info = run_json["pooler"]
    assert f"pooler: {concluded} (client A's two transactions on backends" in out
    assert info["detection"]["concluded"] == concluded and info["mode_disagrees"] == []
    assert info["console"] == {"version": f"PgBouncer {pooler.version}", "pool_mode": mode, "pool_size": 6,
                               "max_client_conn": pooler.max_client_conn}
    assert info["console_source"] == "POOLER_ADMIN_DSN" and "***" in run_json["config"]["pooler_admin_dsn"]
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())["pooler"]
    assert summary["measured"] and summary["server_conns_max"] <= 6 and summary["cpu_pct"] is None
    assert summary["cpu_not_measured"].startswith("not measured")
    assert f"pooler (yours, {mode}): clients waiting mean" in out


def test_pooling_detection_against_a_pooler_in_each_mode_and_a_mode_given_wrong(dsn, servers_dir):
    """Detection alone, through the embedded pooler (fast: no run): per transaction in transaction mode, not in
    session mode nor on the server itself; a ``POOL_MODE`` the console or detection contradicts is said."""
    from bench.engines.postgres.pooler.watch import detect_pooling, pooler_facts
    from bench.run_summary.pooler import mode_disagreements

    assert detect_pooling(dsn)["concluded"] == "pooling not detected"
    for mode, concluded in (("transaction", "transaction pooling detected"), ("session", "pooling not detected")):
        with embedded_pgbouncer(dsn, mode, 3, 5, base_dir=servers_dir, log=lambda line: None) as pooler:
            facts = pooler_facts(pooler.dsn, pooler.admin_dsn, detect=True)
        pids = facts["detection"]["backend_pids"]
        assert facts["detection"]["concluded"] == concluded and None not in pids
        assert facts["console"]["pool_mode"] == mode and facts["pool"] == _database_and_user(dsn)
        other = "session" if mode == "transaction" else "transaction"
        said = mode_disagreements(other, facts)
        assert said[0].startswith(f"its console says pool_mode {mode}") and len(said) == 2, said


def _database_and_user(dsn: str) -> list[str]:
    """[database, user] of ``dsn`` (the embedded pooler's clients log in as the DSN's user)."""
    with psycopg.connect(dsn) as conn:
        return [conn.info.dbname, conn.info.user]
