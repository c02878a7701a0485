"""Tests for bench.engines.postgres.embedded against a real throwaway PostgreSQL (no mocks)."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from urllib.parse import urlsplit

import psutil
import psycopg
import pytest

from conftest import sigkill_child_leaves_nothing

from bench.engines.postgres.embedded import EmbeddedError, embedded_postgres

ROOT = pathlib.Path(__file__).resolve().parents[1]

def _processes_using(data_dir: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(data_dir in arg for arg in proc.info["cmdline"] or ()):
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


def _assert_gone(data_dir: str, port: int, postmaster_pid: int | None) -> None:
    assert not os.path.exists(data_dir)
    assert not os.path.exists(os.path.dirname(data_dir))  # the whole temp dir
    assert _refuses(port)
    assert _processes_using(data_dir) == []
    if postmaster_pid is not None:  # gone, or a zombie waiting for init to reap it
        try:
            assert psutil.Process(postmaster_pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            pass


def test_start_configure_stop():
    lines: list[str] = []
    t0 = time.monotonic()
    with embedded_postgres(37, log=lines.append) as dsn:
        t_ready = time.monotonic()
        url = urlsplit(dsn)
        assert url.scheme == "postgresql" and url.hostname == "127.0.0.1" and url.username == "postgres"
        assert url.path == "/postgres"
        port = url.port
        with psycopg.connect(dsn, autocommit=True) as conn:
            show = lambda name: conn.execute(f"SHOW {name}").fetchone()[0]  # noqa: E731
            assert show("max_connections") == "37"
            assert show("port") == str(port)
            assert show("listen_addresses") == "127.0.0.1"
            assert show("synchronous_commit") == "on"
            assert show("fsync") == "on"
            assert show("shared_buffers") == "256MB"
            assert conn.execute("SELECT inet_server_port(), host(inet_server_addr())").fetchone() == (
                port, "127.0.0.1"
            )
            data_dir = show("data_directory")
            assert show("unix_socket_directories").strip('"') == data_dir
            assert conn.execute("SHOW server_encoding").fetchone()[0] == "UTF8"
        assert not _refuses(port)
        pid_file = pathlib.Path(data_dir, "postmaster.pid")
        postmaster_pid = int(pid_file.read_text().split("\n", 1)[0])
        assert _processes_using(data_dir)
        t_stop = time.monotonic()
    t_end = time.monotonic()
    _assert_gone(data_dir, port, postmaster_pid)
    assert any("starting in" in line and f"on port {port}" in line for line in lines), lines
    assert any("stopped" in line for line in lines), lines
    print(f"\nstart {t_ready - t0:.2f} s, stop {t_end - t_stop:.2f} s")


@pytest.mark.slow
def test_exception_inside_block_still_stops():
    # base_dir must be traversable by the server's user when running as root
    base = pathlib.Path(tempfile.mkdtemp(prefix="qbench-test-"))
    base.chmod(0o755)
    try:
        with pytest.raises(ZeroDivisionError):
            with embedded_postgres(10, base_dir=base, log=lambda _: None) as dsn:
                with psycopg.connect(dsn) as conn:
                    data_dir = conn.execute("SHOW data_directory").fetchone()[0]
                assert pathlib.Path(data_dir).is_relative_to(base)
                port = urlsplit(dsn).port
                1 / 0
        _assert_gone(data_dir, port, None)
        assert list(base.iterdir()) == []
    finally:
        base.rmdir()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root needs the parent-traversal check")
@pytest.mark.slow
def test_untraversable_base_dir_is_refused(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    with pytest.raises(EmbeddedError, match="cannot enter"):
        with embedded_postgres(10, base_dir=private / "pg", log=lambda _: None):
            pass  # pragma: no cover
    assert list((private / "pg").iterdir()) == []


_CHILD = textwrap.dedent(
    """
    import os, signal, sys, time, psycopg
    from bench.engines.postgres.embedded import embedded_postgres

    def announce(dsn):
        with psycopg.connect(dsn) as conn:
            data_dir = conn.execute("SHOW data_directory").fetchone()[0]
        print(dsn, data_dir, flush=True)

    mode = sys.argv[1]
    if mode == "atexit":
        cm = embedded_postgres(10, log=lambda _: None)
        announce(cm.__enter__())  # never exited: the atexit fallback must stop it
        sys.exit(0)
    with embedded_postgres(10, log=lambda _: None) as dsn:
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
def test_embedded_run_records_pg_stat_statements_for_the_measured_window(tmp_path):
    """The embedded server loads pg_stat_statements; the claim's calls, counted by the server
    from the measured start (its entry is reset then), match the claims the clients counted."""
    proc = subprocess.run([sys.executable, "-m", "bench.cli.main", "run", "--workers", "3", "--duration", "3s",
                           "--warmup", "1s", "--results", str(tmp_path)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json

    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    s = json.loads((run_dir / "summary.json").read_text())
    pgss = s["pg_stat_statements"]
    assert "unavailable" not in pgss, pgss
    claims = round(s["claims_per_s"] * s["measured_s"])
    # A claim in flight at either edge of the window may land on the other side of the reset.
    assert abs(pgss["calls"] - claims) <= 3 * 2, (pgss, claims)
    assert pgss["mean_ms"] > 0 and pgss["shared_blks_per_call"] > 0


@pytest.mark.slow
def test_a_process_killed_by_sigkill_leaves_no_server():
    """SIGKILL runs no hook: the watchdog (bench.engines.embedded_watchdog) sees the pipe close and
    stops the server and deletes its directory."""
    sigkill_child_leaves_nothing(_CHILD, _processes_using, _assert_gone)
