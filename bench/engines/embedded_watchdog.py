"""The embedded servers' watchdog: removes a throwaway server and its directory when queue-bench dies
without stopping it (``kill -9``, an out-of-memory kill), which no ``finally``, signal handler or
``atexit`` hook survives.

The watchdog is a small process of its own, in its own session (Ctrl-C in the terminal does not
reach it). It reads the directories to guard, one path per line, from a pipe whose only writer is
queue-bench. When the pipe closes, queue-bench has exited, however it ended: for each guarded
directory that still exists, the watchdog sends SIGTERM to every process whose command line names
it (the server, and their children), SIGKILL after :data:`GRACE_S` to those left, and deletes the
directory. After a normal stop the directory is gone already and the watchdog exits at once.

Used by :func:`bench.engines.embedded_base.embedded` through :func:`spawn`; run as
``python -m bench.engines.embedded_watchdog``.
"""

from __future__ import annotations

import contextlib
import pathlib
import shutil
import signal
import subprocess
import sys

from bench.engines.embedded_host import end_processes

__all__ = ["GRACE_S", "Watchdog", "spawn", "reap"]

#: Seconds the watchdog gives the processes of a guarded directory between SIGTERM and SIGKILL.
GRACE_S = 10.0


class Watchdog:
    """The queue-bench side of one watchdog process: :meth:`guard` a directory, :meth:`close` when done."""

    def __init__(self, proc: subprocess.Popen | None):
        self.proc = proc

    def guard(self, path: pathlib.Path) -> None:
        """Have the watchdog remove ``path`` (and the processes naming it) should queue-bench die.
        Never raises: without a watchdog the server is still stopped by the usual paths."""
        if self.proc is None or self.proc.stdin is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write(f"{path}\n")
            self.proc.stdin.flush()

    def close(self) -> None:
        """Tell the watchdog queue-bench is done (its pipe closes) and wait for it to exit."""
        if self.proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=GRACE_S + 15)


def spawn() -> Watchdog:
    """Start a watchdog process (its own session, output discarded). A watchdog that cannot start
    gives a :class:`Watchdog` that guards nothing: the server is then stopped only by the usual paths."""
    try:
        proc = subprocess.Popen([sys.executable, "-m", "bench.engines.embedded_watchdog"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
                                start_new_session=True, cwd="/")
    except OSError:
        proc = None
    return Watchdog(proc)


def reap(path: pathlib.Path) -> None:
    """Stop every process whose command line names ``path`` (and their children): SIGTERM, then
    SIGKILL after :data:`GRACE_S`; then delete ``path``."""
    end_processes(path, grace_s=GRACE_S)
    shutil.rmtree(path, ignore_errors=True)


def main() -> int:
    """The watchdog process: read paths until the pipe closes, then reap those that still exist."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    guarded = [pathlib.Path(line.rstrip("\n")) for line in sys.stdin if line.strip()]
    for path in guarded:
        if path.exists():
            reap(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
