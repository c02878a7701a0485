"""Tests for the embedded servers (the lifecycle of bench.engines.embedded_base, each engine's
recipe) against real throwaway servers (no mocks), parametrized over the engines.

The binary search is pointed at an empty directory for MariaDB's "not installed" case, and the port
picker at a port this test holds for the "port taken" case; the server is always the real one.
"""

from __future__ import annotations

import json
import os
import pathlib
import pwd
import signal
import socket
import subprocess
import sys
import tempfile
import time
from urllib.parse import urlsplit

import psutil
import psycopg
import pymysql
import pytest

from bench.engines import embedded_base
from bench.engines.embedded_base import EmbeddedError
from bench.engines.mariadb import embedded_binaries as mariadb_binaries
from bench.engines.mariadb.embedded import MariaDBRecipe, embedded_mariadb
from bench.engines.postgres.embedded import embedded_postgres
from bench.errors import ConfigError, exit_status

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHILD = pathlib.Path(__file__).resolve().parent / "embedded_child.py"
SYSTEM_PORT = 3306
START = {"postgres": embedded_postgres, "mariadb": embedded_mariadb}
DATA_DIR_SQL = {"postgres": "SHOW data_directory", "mariadb": "SELECT @@datadir"}
MAX_CONNECTIONS_SQL = {"postgres": "SELECT current_setting('max_connections')::int", "mariadb": "SELECT @@max_connections"}
#: Under root, the users the server runs as, the preferred first (its last resort: created, or root).
ROOT_USERS = {"postgres": ("postgres", "qbench"), "mariadb": ("mysql", "root")}


def _have_mariadb() -> bool:
    try:
        mariadb_binaries.find_server_binaries()
    except ConfigError:
        return False
    return True


needs_mariadb = pytest.mark.skipif(not _have_mariadb(), reason="no mariadbd and mariadb-install-db on this machine")
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")


def engines(postgres=(), mariadb=()):
    """Parametrize ``engine`` over both, each with its own marks (``mariadb=None``: no MariaDB case)."""
    return pytest.mark.parametrize("engine", [pytest.param("postgres", marks=list(postgres))] + (
        [] if mariadb is None else [pytest.param("mariadb", marks=[needs_mariadb, *mariadb])]))


def _query(dsn: str, sql: str) -> tuple:
    if dsn.startswith("postgresql://"):
        with psycopg.connect(dsn, autocommit=True) as conn:
            return conn.execute(sql).fetchone()
    url = urlsplit(dsn)
    conn = pymysql.connect(host=url.hostname, port=url.port, user=url.username, password="")
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchone()
    finally:
        conn.close()


def _processes_using(path: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(path in arg for arg in proc.info["cmdline"] or ()):
                found.append(proc)
        except psutil.Error:
            pass
    return found


def _refuses(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
        return False


def _server_pid(data_dir: str) -> int:
    """The server's pid from its pid file (PostgreSQL's postmaster.pid, MariaDB's mariadbd.pid: the first line)."""
    (pid_file,) = [p for p in ("postmaster.pid", "mariadbd.pid") if pathlib.Path(data_dir, p).exists()]
    return int(pathlib.Path(data_dir, pid_file).read_text().split("\n", 1)[0].strip())


def _assert_gone(data_dir: str, port: int, pid: int | None) -> None:
    assert not os.path.exists(data_dir)
    assert not os.path.exists(os.path.dirname(data_dir.rstrip("/")))  # the whole temp dir
    assert _refuses(port)
    assert _processes_using(data_dir.rstrip("/")) == []
    if pid is not None:  # gone, or a zombie waiting for init to reap it
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _expected_server_user(engine: str) -> str:
    """Ourselves; under root the engine's system user, else its last resort."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    preferred, last_resort = ROOT_USERS[engine]
    try:
        return pwd.getpwnam(preferred).pw_name
    except KeyError:
        return last_resort


def _system_server() -> tuple | None:
    """(pid or None, process start time or None, greeting) of what listens on 127.0.0.1:3306; None if nothing."""
    try:
        with socket.create_connection(("127.0.0.1", SYSTEM_PORT), timeout=2) as s:
            greeting = s.recv(256)
    except OSError:
        return None
    version = greeting[5:greeting.index(b"\0", 5)]  # protocol 10 handshake: version string after the header
    pid = created = None
    try:  # the pid is visible to root, or to the server's own user
        for c in psutil.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr.port == SYSTEM_PORT and c.pid:
                pid, created = c.pid, psutil.Process(c.pid).create_time()
    except psutil.Error:
        pass
    return pid, created, version


@pytest.fixture(scope="module", autouse=True)
def system_server_untouched():
    """A MariaDB/MySQL on 127.0.0.1:3306 before the tests is the same process, still serving, after them."""
    before = _system_server()
    yield
    if before is not None:
        assert _system_server() == before


def _postgres_configured(dsn: str, port: int) -> str:
    """Assert the PostgreSQL server's address and settings; return its data directory."""
    url = urlsplit(dsn)
    assert url.scheme == "postgresql" and url.hostname == "127.0.0.1" and url.username == "postgres"
    assert url.path == "/postgres"
    with psycopg.connect(dsn, autocommit=True) as conn:
        show = lambda name: conn.execute(f"SHOW {name}").fetchone()[0]  # noqa: E731
        assert show("max_connections") == "37"
        assert show("port") == str(port)
        assert show("listen_addresses") == "127.0.0.1"
        assert show("synchronous_commit") == "on"
        assert show("fsync") == "on"
        assert show("shared_buffers") == "256MB"
        assert conn.execute("SELECT inet_server_port(), host(inet_server_addr())").fetchone() == (port, "127.0.0.1")
        data_dir = show("data_directory")
        assert show("unix_socket_directories").strip('"') == data_dir
        assert conn.execute("SHOW server_encoding").fetchone()[0] == "UTF8"
    return data_dir


def _mariadb_configured(dsn: str, port: int) -> str:
    """Assert the MariaDB server's address and settings; return its data directory."""
    url = urlsplit(dsn)
    assert (url.scheme, url.hostname, url.username, url.password, url.path) == ("mysql", "127.0.0.1", "root", None, "/")
    assert port != SYSTEM_PORT
    row = _query(dsn, "SELECT @@max_connections, @@port, @@bind_address, @@datadir, @@socket, "
                      "@@pid_file, @@log_error, @@innodb_flush_log_at_trx_commit, "
                      "@@innodb_buffer_pool_size, @@skip_name_resolve, @@secure_file_priv, @@version")
    max_conn, srv_port, bind, data_dir, sock, pid_file, log_error, flush, pool, skip_resolve, sfp, version = row
    assert max_conn == 37
    assert (srv_port, bind) == (port, "127.0.0.1")
    assert flush == 1 and pool == 256 * 1024 * 1024 and skip_resolve == 1
    assert "MariaDB" in version
    tmp = os.path.dirname(data_dir.rstrip("/"))
    for path in (sock, pid_file, log_error):
        assert path.startswith(data_dir), (path, data_dir)
    assert sfp.startswith(tmp + "/") and not sfp.startswith(data_dir)
    assert pathlib.Path(log_error).exists()
    return data_dir


CONFIGURED = {"postgres": _postgres_configured, "mariadb": _mariadb_configured}


@engines(mariadb=[pytest.mark.slow])
def test_start_configure_stop(engine):
    lines: list[str] = []
    t0 = time.monotonic()
    with START[engine](37, log=lines.append) as dsn:
        t_ready = time.monotonic()
        port = urlsplit(dsn).port
        data_dir = CONFIGURED[engine](dsn, port)
        assert not _refuses(port)
        pid = _server_pid(data_dir)
        assert _processes_using(data_dir.rstrip("/"))
        assert psutil.Process(pid).username() == _expected_server_user(engine)
        t_stop = time.monotonic()
    t_end = time.monotonic()
    _assert_gone(data_dir, port, pid)
    assert any("starting in" in line and f"on port {port}" in line for line in lines), lines
    assert any("stopped" in line for line in lines), lines
    print(f"\nstart {t_ready - t0:.2f} s, stop {t_end - t_stop:.2f} s")


def test_a_server_killed_during_the_run_is_said_to_be_gone_not_failed_to_stop():
    """After ``FAULTS=failover`` killed every process of the embedded primary, its stop line says so instead of
    reporting failed shutdowns, and its directory is removed all the same."""
    lines: list[str] = []
    with embedded_postgres(37, log=lines.append) as dsn:  # 37: the connections the configuration check expects
        port = urlsplit(dsn).port
        data_dir = CONFIGURED["postgres"](dsn, port)
        postmaster = psutil.Process(_server_pid(data_dir))
        procs = [postmaster, *postmaster.children(recursive=True)]
        for proc in procs:
            proc.kill()
        psutil.wait_procs(procs, timeout=10)
    stop = [line for line in lines if "stopped" in line]
    assert stop and "already gone, killed during the run" in stop[-1] and "shutdown failed" not in stop[-1], lines
    assert not pathlib.Path(data_dir).exists()


@engines(postgres=[pytest.mark.slow], mariadb=[pytest.mark.slow])
def test_exception_inside_block_still_stops(engine):
    """On MariaDB also: a max_connections below its 10 (3) is raised to 10, with a line saying so."""
    asked = {"postgres": 10, "mariadb": 3}
    # base_dir must be traversable by the server's user when running as root
    base = pathlib.Path(tempfile.mkdtemp(prefix="qbench-test-"))
    base.chmod(0o755)
    lines: list[str] = []
    try:
        with pytest.raises(ZeroDivisionError):
            with START[engine](asked[engine], base_dir=base, log=lines.append) as dsn:
                (data_dir,) = _query(dsn, DATA_DIR_SQL[engine])
                (max_conn,) = _query(dsn, MAX_CONNECTIONS_SQL[engine])
                assert max_conn == 10
                assert pathlib.Path(data_dir).is_relative_to(base)
                port, pid = urlsplit(dsn).port, _server_pid(data_dir)
                1 / 0
        _assert_gone(data_dir, port, pid)
        assert list(base.iterdir()) == []
        raised = any("max_connections 3" in line and "gets 10" in line for line in lines)
        assert raised == (engine == "mariadb"), lines
    finally:
        base.rmdir()


@engines()
@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10", None])
def test_max_connections_must_be_a_positive_int(engine, bad):
    with pytest.raises(ValueError, match="positive int"):
        with START[engine](bad, log=lambda _: None):
            pass  # pragma: no cover


@needs_mariadb
def test_no_mariadb_server_binary_is_a_config_error_naming_engine(tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(mariadb_binaries, "SYSTEM_DIRS", ())
    base = tmp_path / "base"
    with pytest.raises(ConfigError) as info:
        with embedded_mariadb(10, base_dir=base, log=lambda _: None):
            pass  # pragma: no cover
    err = info.value
    assert err.param == "ENGINE" and exit_status(err) == 2
    assert "\n" not in str(err)
    assert str(err).startswith("--engine: no MariaDB server binary (mariadbd or mysqld)")
    assert "--engine mariadb with --dsn mysql://" in str(err) and "mariadb-server" in str(err)
    assert not base.exists()  # nothing was created

    with pytest.raises(ConfigError, match="^--engine: no MariaDB server binary"):
        mariadb_binaries.find_server_binaries([empty])


def test_mariadb_binary_search_prefers_mariadbd_and_needs_the_install_tool(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d, names in ((a, ["mysqld", "mysql_install_db"]), (b, ["mariadbd"])):
        d.mkdir()
        for name in names:
            (d / name).write_text("#!/bin/sh\n")
            (d / name).chmod(0o755)
    bins = mariadb_binaries.find_server_binaries([a, b])
    assert bins.server == b / "mariadbd" and bins.install_db == a / "mysql_install_db"
    with pytest.raises(ConfigError, match="^--engine: .*no mariadb-install-db or mysql_install_db"):
        mariadb_binaries.find_server_binaries([b])


@engines(postgres=[pytest.mark.slow], mariadb=[pytest.mark.slow])
def test_port_taken_every_time_fails_with_the_server_log(engine, monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        monkeypatch.setattr(embedded_base, "free_port", lambda: port)
        lines: list[str] = []
        with pytest.raises(EmbeddedError) as info:
            with START[engine](10, log=lines.append):
                pass  # pragma: no cover
    msg = str(info.value)
    why = {"postgres": "embedded PostgreSQL failed to start (pg_ctl exit",
           "mariadb": "embedded MariaDB failed to start (mariadbd exited"}[engine]
    assert msg.startswith(why), msg
    assert "last 20 lines of the server log" in msg and "already in use" in msg
    assert sum("retrying on another port" in line for line in lines) == 2, lines
    root = next(line for line in lines if "starting in" in line).split("starting in ")[1].split(" on port")[0]
    assert not os.path.exists(root)


@root_only
# Without a mysql user MariaDB's server runs as root, which enters any directory: no MariaDB case then.
@engines(postgres=[pytest.mark.slow], mariadb=None if _expected_server_user("mariadb") == "root" else ())
def test_untraversable_base_dir_is_refused(engine, tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    with pytest.raises(EmbeddedError, match="cannot enter"):
        with START[engine](10, base_dir=private / engine, log=lambda _: None):
            pass  # pragma: no cover
    assert list((private / engine).iterdir()) == []


@root_only
@needs_mariadb
@pytest.mark.slow
def test_under_root_without_a_mysql_user_mariadb_runs_as_root(monkeypatch):
    monkeypatch.setattr(MariaDBRecipe, "users", ("qbench-no-such-user",))
    lines: list[str] = []
    with embedded_mariadb(10, log=lines.append) as dsn:
        (data_dir,) = _query(dsn, "SELECT @@datadir")
        pid = _server_pid(data_dir)
        assert psutil.Process(pid).username() == "root"
        port = urlsplit(dsn).port
    _assert_gone(data_dir, port, pid)
    assert any("running as root" in line for line in lines), lines


@engines(postgres=[pytest.mark.slow], mariadb=[pytest.mark.slow])
@pytest.mark.parametrize("mode", ["sigint", "sigterm", "atexit"])
def test_child_process_never_leaves_server(engine, mode):
    proc = subprocess.run([sys.executable, str(CHILD), engine, mode], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    out = proc.stdout.split()
    assert len(out) == 2, (proc.stdout, proc.stderr)
    dsn, data_dir = out
    _assert_gone(data_dir, urlsplit(dsn).port, None)
    if mode == "sigint":
        assert "KeyboardInterrupt" in proc.stderr
    elif mode == "sigterm":
        assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr


@engines(postgres=[pytest.mark.slow], mariadb=[pytest.mark.slow])
def test_a_process_killed_by_sigkill_leaves_no_server(engine):
    """SIGKILL runs no hook: the watchdog (bench.engines.embedded_watchdog) sees the pipe close and
    stops the server and deletes its directory: within 30 s its processes and directory are gone."""
    proc = subprocess.Popen([sys.executable, str(CHILD), engine, "sigkill"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        dsn, data_dir = proc.stdout.readline().split()
        assert os.path.isdir(data_dir) and _processes_using(data_dir.rstrip("/"))
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (os.path.exists(data_dir) or _processes_using(data_dir.rstrip("/"))):
            time.sleep(0.2)
        _assert_gone(data_dir, urlsplit(dsn).port, None)
    finally:
        proc.kill()


@pytest.mark.slow
def test_embedded_run_records_pg_stat_statements_for_the_measured_window(tmp_path):
    """The embedded server loads pg_stat_statements; the claim's calls, counted by the server
    from the measured start (its entry is reset then), match the claims the clients counted."""
    proc = subprocess.run([sys.executable, "-m", "bench.cli.main", "run", "--workers", "3", "--duration", "3s",
                           "--warmup", "1s", "--results", str(tmp_path)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    s = json.loads((run_dir / "summary.json").read_text())
    pgss = s["pg_stat_statements"]
    assert "unavailable" not in pgss, pgss
    claims = s["claims"]  # counted in the window
    # A claim in flight at either edge of the window may land on the other side of the reset.
    assert abs(pgss["calls"] - claims) <= 3 * 2, (pgss, claims)
    assert pgss["mean_ms"] > 0 and pgss["shared_blks_per_call"] > 0
    # the completion's entries too, and the claim's and completion's means split into the server's execution and
    # the rest, which sum to the means the clients measured (docs/network.md)
    assert abs(pgss["completion_calls"] - s["completions"]) <= 3 * 2, (pgss, s["completions"])
    split = s["latency_split"]
    for name, measured in (("claim", s["claim_latency_us"]), ("complete", s["complete_latency_us"])):
        part = split[name]
        assert part["not_measured"] is None and 0 < part["server_us"] < part["mean_us"] == measured["mean"], part
        assert part["server_us"] + part["rest_us"] == pytest.approx(part["mean_us"], abs=0.1), part
        assert part["network_us"] == pytest.approx(part["round_trips"] * s["round_trip"]["mean_us"], abs=0.1)
    assert split["claim"]["server_us"] == pytest.approx(pgss["mean_ms"] * 1000, abs=0.1)
