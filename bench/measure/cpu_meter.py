"""The harness's own CPU, second by second, split into user and system time."""

from __future__ import annotations

import time

import psutil


class CpuMeter:
    """CPU of this process (all its threads, children excluded; ``psutil.Process.cpu_times``) between
    successive :meth:`read` calls, in % of one core (up to 100 × cores), split into user and system time."""

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
