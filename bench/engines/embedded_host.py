"""What an embedded server's lifecycle asks of the machine: the user it runs as, a free port, the tail of
its log, the end of its processes, and SIGTERM turned into an exit while it runs."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import pathlib
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
from typing import Iterator

import psutil

__all__ = ["LOG_TAIL_LINES", "RunAs", "end_processes", "free_port", "log_tail", "sigterm_as_exit", "stop_child",
           "wait_gone"]

LOG_TAIL_LINES = 20
MAX_SOCKET_PATH = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux


@dataclasses.dataclass(frozen=True)
class RunAs:
    """Who the server runs as: ourselves (``name`` None), or user ``name`` (``"root"`` when root runs it)."""

    name: str | None = None
    uid: int = -1
    gid: int = -1

    @property
    def other_user(self) -> bool:
        """True when the server runs as a user other than this process's."""
        return self.name is not None and self.uid != os.geteuid()

    def wrap(self, argv: list[str]) -> tuple[list[str], dict]:
        """Return (argv, extra subprocess kwargs) running ``argv`` as this user."""
        if not self.other_user:
            return argv, {}
        runuser = shutil.which("runuser") or next(
            (p for p in ("/usr/sbin/runuser", "/sbin/runuser") if os.access(p, os.X_OK)), None
        )
        if runuser:
            return [runuser, "-u", self.name, "--", *argv], {}
        # No runuser: let subprocess drop privileges in the child (thread-safe, unlike preexec_fn).
        groups = os.getgrouplist(self.name, self.gid)
        return argv, {"user": self.uid, "group": self.gid, "extra_groups": groups}

    @functools.cached_property
    def groups(self) -> frozenset[int]:
        """The ids of the groups this user is in (read once: a tree's check asks for each file)."""
        return frozenset(os.getgrouplist(self.name, self.gid))

    def can_traverse(self, path: pathlib.Path) -> bool:
        """True when this user may enter directory ``path`` (its execute bit for the user, a group or others)."""
        return self.can_access(path, stat.S_IXUSR)

    def can_access(self, path: pathlib.Path, bits: int) -> bool:
        """True when this user has every permission of ``bits`` (given as owner bits: ``stat.S_IRUSR |
        stat.S_IXUSR``) on ``path``, by its mode bits for the user, a group or others."""
        if not self.other_user:
            return os.access(path, (os.R_OK if bits & stat.S_IRUSR else 0) | (os.X_OK if bits & stat.S_IXUSR else 0))
        st = path.stat()
        if st.st_uid == self.uid:
            return st.st_mode & bits == bits
        if st.st_gid in self.groups:
            return st.st_mode & (bits >> 3) == bits >> 3
        return st.st_mode & (bits >> 6) == bits >> 6


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


def wait_gone(pid: int, timeout: float) -> bool:
    """True once process ``pid`` has exited (a zombie counts), waiting up to ``timeout`` s."""
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


def end_processes(path: pathlib.Path, grace_s: float = 0.0) -> None:
    """End every process whose command line names ``path``, and their children: SIGTERM and ``grace_s`` s
    first when ``grace_s`` > 0, then SIGKILL; waits up to 10 s."""
    needle = str(path)
    victims: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.pid != os.getpid() and any(needle in arg for arg in proc.info["cmdline"] or ()):
                victims[proc.pid] = proc
                victims.update((c.pid, c) for c in proc.children(recursive=True))
        except psutil.Error:
            pass
    left = list(victims.values())
    if grace_s > 0:
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, left = psutil.wait_procs(left, timeout=grace_s)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(left, timeout=10)


def stop_child(proc: subprocess.Popen | None, timeout_s: float, problems: list[str]) -> None:
    """SIGTERM the server process ``proc`` (a child of ours; None or gone: nothing) and wait ``timeout_s``; then
    SIGKILL, noted in ``problems``."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        problems.append(f"no shutdown within {timeout_s:g} s; killed")
        proc.kill()
        proc.wait(timeout=30)


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """While open, SIGTERM raises SystemExit (``finally`` blocks run); main thread, default SIGTERM action only."""
    installed = False
    if threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _raise_exit)
                installed = True
    try:
        yield
    finally:
        if installed and signal.getsignal(signal.SIGTERM) is _raise_exit:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _raise_exit(signum, frame):  # noqa: ARG001 - signal handler signature
    raise SystemExit(128 + signum)
