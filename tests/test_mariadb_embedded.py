"""Tests for bench.engines.mariadb.embedded against a real throwaway MariaDB (no mocks).

The binary search is pointed at an empty directory for the "not installed" case, and the port
picker at a port this test holds for the "port taken" case; the server is always the real one.
"""

from __future__ import annotations

import os
import pathlib
import pwd
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from urllib.parse import urlsplit

import psutil
import pymysql
import pytest

from conftest import sigkill_child_leaves_nothing

from bench.engines.mariadb import embedded_binaries, embedded_server, embedded_user
from bench.engines.mariadb.embedded import EmbeddedError, embedded_mariadb
from bench.errors import ConfigError, exit_status

ROOT = pathlib.Path(__file__).resolve().parents[1]
SYSTEM_PORT = 3306



def _have_mariadb() -> bool:
    try:
        embedded_binaries.find_server_binaries()
    except ConfigError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _have_mariadb(), reason="no mariadbd and mariadb-install-db on this machine")


def _connect(dsn: str) -> pymysql.connections.Connection:
    url = urlsplit(dsn)
    return pymysql.connect(host=url.hostname, port=url.port, user=url.username, password="")


def _query(dsn: str, sql: str) -> tuple:
    conn = _connect(dsn)
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
    return int(pathlib.Path(data_dir, "mariadbd.pid").read_text().strip())


def _assert_gone(data_dir: str, port: int, pid: int | None) -> None:
    assert not os.path.exists(data_dir)
    assert not os.path.exists(os.path.dirname(data_dir.rstrip("/")))  # the whole temp dir
    assert _refuses(port)
    assert _processes_using(data_dir.rstrip("/")) == []
    if pid is not None:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _expected_server_user() -> str:
    """Ourselves; under root the mysql user, or root when there is none."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    try:
        return pwd.getpwnam("mysql").pw_name
    except KeyError:
        return "root"


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


@pytest.mark.slow
def test_start_configure_stop():
    lines: list[str] = []
    t0 = time.monotonic()
    with embedded_mariadb(37, log=lines.append) as dsn:
        t_ready = time.monotonic()
        url = urlsplit(dsn)
        assert (url.scheme, url.hostname, url.username, url.password, url.path) == (
            "mysql", "127.0.0.1", "root", None, "/")
        port = url.port
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
        pid = _server_pid(data_dir)
        assert _processes_using(data_dir.rstrip("/"))
        assert psutil.Process(pid).username() == _expected_server_user()
        t_stop = time.monotonic()
    t_end = time.monotonic()
    _assert_gone(data_dir, port, pid)
    assert any("starting in" in line and f"on port {port}" in line for line in lines), lines
    assert any("stopped" in line for line in lines), lines
    print(f"\nstart {t_ready - t0:.2f} s, stop {t_end - t_stop:.2f} s")


@pytest.mark.slow
def test_exception_inside_block_still_stops_and_small_max_connections_is_raised_to_10():
    # base_dir must be traversable by the mysql user when running as root
    base = pathlib.Path(tempfile.mkdtemp(prefix="qbench-test-"))
    base.chmod(0o755)
    lines: list[str] = []
    try:
        with pytest.raises(ZeroDivisionError):
            with embedded_mariadb(3, base_dir=base, log=lines.append) as dsn:
                max_conn, data_dir = _query(dsn, "SELECT @@max_connections, @@datadir")
                assert max_conn == 10
                assert pathlib.Path(data_dir).is_relative_to(base)
                port, pid = urlsplit(dsn).port, _server_pid(data_dir)
                1 / 0
        _assert_gone(data_dir, port, pid)
        assert list(base.iterdir()) == []
        assert any("max_connections 3" in line and "gets 10" in line for line in lines), lines
    finally:
        base.rmdir()


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10", None])
def test_max_connections_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="positive int"):
        with embedded_mariadb(bad, log=lambda _: None):
            pass  # pragma: no cover


def test_no_server_binary_is_a_config_error_naming_engine(tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(embedded_binaries, "SYSTEM_DIRS", ())
    base = tmp_path / "base"
    with pytest.raises(ConfigError) as info:
        with embedded_mariadb(10, base_dir=base, log=lambda _: None):
            pass  # pragma: no cover
    err = info.value
    assert err.param == "ENGINE" and exit_status(err) == 2
    assert "\n" not in str(err)
    assert str(err).startswith("ENGINE: no MariaDB server binary (mariadbd or mysqld)")
    assert "DSN=mysql://" in str(err) and "mariadb-server" in str(err)
    assert not base.exists()  # nothing was created

    with pytest.raises(ConfigError, match="^ENGINE: no MariaDB server binary"):
        embedded_binaries.find_server_binaries([empty])


def test_binary_search_prefers_mariadbd_and_needs_the_install_tool(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d, names in ((a, ["mysqld", "mysql_install_db"]), (b, ["mariadbd"])):
        d.mkdir()
        for name in names:
            (d / name).write_text("#!/bin/sh\n")
            (d / name).chmod(0o755)
    bins = embedded_binaries.find_server_binaries([a, b])
    assert bins.server == b / "mariadbd" and bins.install_db == a / "mysql_install_db"
    with pytest.raises(ConfigError, match="^ENGINE: .*no mariadb-install-db or mysql_install_db"):
        embedded_binaries.find_server_binaries([b])


@pytest.mark.slow
def test_port_taken_every_time_fails_with_the_error_log(monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        monkeypatch.setattr(embedded_server, "free_port", lambda: port)
        lines: list[str] = []
        with pytest.raises(EmbeddedError) as info:
            with embedded_mariadb(10, log=lines.append):
                pass  # pragma: no cover
    msg = str(info.value)
    assert msg.startswith("embedded MariaDB failed to start (mariadbd exited")
    assert "last 20 lines of the server log" in msg and "already in use" in msg
    assert sum("retrying on another port" in line for line in lines) == 2, lines
    root = next(line for line in lines if "starting in" in line).split("starting in ")[1].split(" on port")[0]
    assert not os.path.exists(root)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
def test_untraversable_base_dir_is_refused(tmp_path):
    try:
        pwd.getpwnam("mysql")
    except KeyError:
        pytest.skip("no mysql user: the server runs as root")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    with pytest.raises(EmbeddedError, match="cannot enter"):
        with embedded_mariadb(10, base_dir=private / "maria", log=lambda _: None):
            pass  # pragma: no cover
    assert list((private / "maria").iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="only root chooses the server's user")
@pytest.mark.slow
def test_under_root_without_a_mysql_user_the_server_runs_as_root(monkeypatch):
    monkeypatch.setattr(embedded_user, "SERVER_USER", "qbench-no-such-user")
    lines: list[str] = []
    with embedded_mariadb(10, log=lines.append) as dsn:
        (data_dir,) = _query(dsn, "SELECT @@datadir")
        pid = _server_pid(data_dir)
        assert psutil.Process(pid).username() == "root"
        port = urlsplit(dsn).port
    _assert_gone(data_dir, port, pid)
    assert any("running as root" in line for line in lines), lines


_CHILD = textwrap.dedent(
    """
    import os, signal, sys, time, pymysql
    from urllib.parse import urlsplit
    from bench.engines.mariadb.embedded import embedded_mariadb

    def announce(dsn):
        conn = pymysql.connect(host="127.0.0.1", port=urlsplit(dsn).port, user="root")
        with conn.cursor() as cur:
            cur.execute("SELECT @@datadir")
            print(dsn, cur.fetchone()[0], flush=True)
        conn.close()

    mode = sys.argv[1]
    if mode == "atexit":
        cm = embedded_mariadb(10, log=lambda _: None)
        announce(cm.__enter__())  # never exited: the atexit fallback must stop it
        sys.exit(0)
    with embedded_mariadb(10, log=lambda _: None) as dsn:
        announce(dsn)
        if mode == "sigkill":
            time.sleep(60)  # the test kills this process
        os.kill(os.getpid(), signal.SIGINT if mode == "sigint" else signal.SIGTERM)
        time.sleep(30)
    """
)


@pytest.mark.parametrize("mode", ["sigint", "sigterm", "atexit"])
@pytest.mark.slow
def test_child_process_never_leaves_server(mode):
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, mode], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
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


@pytest.mark.slow
def test_a_process_killed_by_sigkill_leaves_no_server():
    """SIGKILL runs no hook: the watchdog (bench.engines.embedded_watchdog) sees the pipe close and
    stops the server and deletes its directory."""
    sigkill_child_leaves_nothing(_CHILD, _processes_using, _assert_gone)
