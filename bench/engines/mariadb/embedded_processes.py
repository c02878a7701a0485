"""The embedded server's processes seen from outside: a free port, its logs, leftovers.

Used by :mod:`bench.engines.mariadb.embedded_server` to start the server on a port and, when a
normal shutdown fails, to make sure no process of it is left.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket

__all__ = ["LOG_TAIL_LINES", "free_port", "kill_leftovers", "log_tail"]

LOG_TAIL_LINES = 20


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_tail(*paths: pathlib.Path, n: int = LOG_TAIL_LINES) -> str:
    """The last ``n`` lines of the first of ``paths`` that has any, or a note that all are absent or empty."""
    for path in paths:
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        if lines:
            return "\n".join(lines[-n:])
    return "(the server wrote no log)"


def kill_leftovers(data_dir: pathlib.Path) -> None:
    """Last resort: SIGKILL every process whose command line names ``data_dir`` (our server, or
    an install tool's bootstrap server), and wait up to 10 s for them to exit."""
    import psutil

    needle = str(data_dir)
    victims = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.pid != os.getpid() and any(needle in arg for arg in proc.info["cmdline"] or ()):
                victims.append(proc)
        except psutil.Error:
            pass
    for proc in victims:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(victims, timeout=10)
