"""The watchdog (``python -m bench.engines.embedded_watchdog``): removes a throwaway server and its directory when
queue-bench dies without stopping it (``kill -9``)(docs/architecture.md, "The embedded servers")."""

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
        """Have the watchdog remove ``path`` (and the processes naming it) should queue-bench die; never raises."""
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
    """Start a watchdog process (its own session); one that cannot start gives a Watchdog guarding nothing."""
    try:
        proc = subprocess.Popen([sys.executable, "-m", "bench.engines.embedded_watchdog"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
                                start_new_session=True, cwd="/")
    except OSError:
        proc = None
    return Watchdog(proc)


def reap(path: pathlib.Path) -> None:
    """End the processes naming ``path`` (SIGKILL after :data:`GRACE_S`), then delete ``path``."""
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
