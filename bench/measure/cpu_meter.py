"""The harness's own CPU, second by second, split into user and system time."""

from __future__ import annotations

import time

import psutil


class CpuMeter:
    """CPU of this process (all its threads) between successive :meth:`read` calls.

    Each :meth:`read` returns ``(total_pct, user_pct, system_pct)``: CPU seconds
    since the previous read (``psutil.Process.cpu_times``: user and system, children
    excluded) over the wall seconds between the reads, in % of one core (so up to
    100 × cores). The split matters on a machine shared with the database server:
    system time is mostly the loopback socket work every client pays (pgbench too),
    user time is the harness's own code.
    """

    def __init__(self, process: psutil.Process | None = None):
        self._process = process or psutil.Process()
        self._last = self._now()

    def _now(self) -> tuple[float, float, float]:
        times = self._process.cpu_times()
        return time.monotonic(), times.user, times.system

    def read(self) -> tuple[float, float, float]:
        """CPU in % of a core since the previous read (or since construction): total, user, system."""
        now = self._now()
        wall_s = now[0] - self._last[0]
        user_s, system_s = now[1] - self._last[1], now[2] - self._last[2]
        self._last = now
        if wall_s <= 0:
            return 0.0, 0.0, 0.0
        return 100 * (user_s + system_s) / wall_s, 100 * user_s / wall_s, 100 * system_s / wall_s
