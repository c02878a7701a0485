"""A user's pooler for the tests: a PgBouncer (the Debian package's binary) this test process starts itself, as an
unprivileged user (PgBouncer refuses root), on a free loopback port, in front of the test server; from the tool's
point of view it is the user's, which it never starts, configures or stops. Killed and its files removed when the
block ends."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

PGBOUNCER = "/usr/sbin/pgbouncer"
#: The user it runs as when the tests run as root.
RUN_AS = "nobody"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(directory: Path, port: int, server: dict, pool_mode: str, pool_size: int) -> str:
    return f"""[databases]
* = host={server.get('host', '127.0.0.1')} port={server.get('port', '5432')}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory}/users.txt
admin_users = {server.get('user', 'postgres')}
pool_mode = {pool_mode}
default_pool_size = {pool_size}
max_client_conn = 500
logfile = {directory}/pgbouncer.log
pidfile = {directory}/pgbouncer.pid
"""


@contextlib.contextmanager
def user_pooler(direct_dsn: str, *, pool_mode: str = "transaction", pool_size: int = 10):
    """Yield the DSN of a PgBouncer in ``pool_mode`` with ``pool_size`` server connections per database and user
    in front of ``direct_dsn``'s server, reaching the same database; stopped (SIGKILL) and removed afterwards."""
    server = psycopg.conninfo.conninfo_to_dict(direct_dsn)
    directory = Path(tempfile.mkdtemp(prefix="qbench-user-pooler-"))
    port = _free_port()
    (directory / "users.txt").write_text(f'"{server.get("user", "postgres")}" ""\n')
    (directory / "pgbouncer.ini").write_text(_config(directory, port, server, pool_mode, pool_size))
    argv = [PGBOUNCER, str(directory / "pgbouncer.ini")]
    kwargs = {}
    if os.geteuid() == 0:
        pw = pwd.getpwnam(RUN_AS)
        os.chown(directory, pw.pw_uid, pw.pw_gid)
        for path in directory.iterdir():
            os.chown(path, pw.pw_uid, pw.pw_gid)
        kwargs = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kwargs)
    pooled = psycopg.conninfo.make_conninfo(direct_dsn, host="127.0.0.1", port=str(port))
    try:
        _wait_ready(proc, port, directory)
        yield pooled
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


def _wait_ready(proc: subprocess.Popen, port: int, directory: Path, timeout_s: float = 10.0) -> None:
    """Return once the pooler accepts TCP connections on ``port``; RuntimeError with its log if it exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = (directory / "pgbouncer.log").read_text() if (directory / "pgbouncer.log").exists() else ""
            raise RuntimeError(f"pgbouncer exited {proc.returncode}: {proc.stderr.read().decode()} {log}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError("pgbouncer did not listen within 10 s")

