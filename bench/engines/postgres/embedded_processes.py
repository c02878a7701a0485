"""The embedded server's processes seen from outside: a free port, its log, its postmaster, leftovers.

Used by :mod:`bench.engines.postgres.embedded_server` to start the server on a port and, when a
normal shutdown fails, to make sure no process of it is left.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import time

__all__ = ["LOG_TAIL_LINES", "free_port", "kill_leftovers", "log_tail", "postmaster_pid", "wait_gone"]

LOG_TAIL_LINES = 20


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_tail(path: pathlib.Path, n: int = LOG_TAIL_LINES) -> str:
    """The last ``n`` lines of the server log at ``path``, or a note that it is absent or empty."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no server log)"
    return "\n".join(lines[-n:]) if lines else "(server log is empty)"


def postmaster_pid(data_dir: pathlib.Path) -> int | None:
    """The postmaster's pid from ``data_dir/postmaster.pid``; None when the file is absent or unreadable."""
    try:
        return int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds until process ``pid`` has exited (a zombie counts as exited);
    True when it has."""
    import psutil

    deadline = time.monotonic() + timeout
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def kill_leftovers(data_dir: pathlib.Path, pid: int | None = None) -> None:
    """Last resort: SIGKILL the postmaster (and its children) and any process naming ``data_dir``."""
    import psutil

    victims: dict[int, psutil.Process] = {}
    pid = pid or postmaster_pid(data_dir)
    if pid:
        try:
            proc = psutil.Process(pid)
            if "postgres" in proc.name() or "postmaster" in proc.name():
                victims[pid] = proc
                for child in proc.children(recursive=True):
                    victims[child.pid] = child
        except psutil.Error:
            pass
    needle = str(data_dir)
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(needle in arg for arg in proc.info["cmdline"] or ()):
                victims[proc.pid] = proc
        except psutil.Error:
            pass
    victims.pop(os.getpid(), None)
    for proc in victims.values():
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(list(victims.values()), timeout=10)
