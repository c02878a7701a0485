"""What a library worker process measures: the tool's per-second histograms and counters, the stamped claim
log (:class:`FileStampedLog`), its CPU, and the database's clock (docs/queues.md)."""

from __future__ import annotations

import asyncio
import os
import random
import time

import psutil

from bench.engines.postgres.error_kinds import error_kind
from bench.measure import interval_codec
from bench.measure.claimlog import StampedLog
from bench.measure.cpu_meter import CpuMeter
from bench.measure.metrics import Recorder

#: How often the loop-lag probe wakes (s): as the tool's own (bench.measure.seconds.LOOP_LAG_PERIOD_S).
LOOP_LAG_PERIOD_S = 0.010


class FileStampedLog(StampedLog):
    """The claim log of a library worker process: each stamped line appended to ``path`` by one unbuffered
    ``write`` (a SIGKILL loses none)."""

    def __init__(self, path: str):
        super().__init__()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _write(self, line: str) -> None:
        os.write(self._fd, f"{time.time()!r},{line}".encode())
        self.events += 1

    def write_lines(self, lines: list[str]) -> None:
        stamp = f"{time.time()!r},"
        os.write(self._fd, "".join(stamp + line for line in lines).encode())
        self.events += len(lines)

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)


class Meter:
    """One process's measurements; ``lease_s``: the library's stall or heartbeat timeout (``lease_until``)."""

    def __init__(self, batch: int, lease_s: float, claims_path: str):
        self.recorder = Recorder(batch)
        self.log = FileStampedLog(claims_path)
        self.cpu = CpuMeter(psutil.Process())
        self.lease_s = lease_s
        self.offset_s = 0.0
        self.tokens: dict[int, int] = {}  # job id -> the random token of its claim (the library has none)

    def set_offset(self, before_s: float, server_s: float, after_s: float) -> None:
        """The server's clock minus this host's, from one ``clock_timestamp()`` read between two local times."""
        self.offset_s = server_s - (before_s + after_s) / 2

    def db_now(self) -> float:
        """Now on the database's clock (epoch seconds)."""
        return time.time() + self.offset_s

    def claimed(self, latency_us: int, jobs: list[tuple[int, float, float | None]]) -> None:
        """One fetch of ``latency_us`` with ``jobs`` (id, claimed at, eligible at or None), database epoch
        seconds; each job gets a random token in the claim log."""
        pickups = [max(1, int((at - eligible) * 1e6)) for _, at, eligible in jobs if eligible is not None]
        self.recorder.claim(latency_us, len(jobs), pickups)
        for job_id, at, _ in jobs:
            token = -random.getrandbits(62) - 1
            self.tokens[job_id] = token
            self.log.claimed(job_id, token, at + self.lease_s, at)

    def completed(self, latency_us: int, job_ids: list[int]) -> None:
        """One completion statement that returned after ``latency_us`` and finished ``job_ids``."""
        self.recorder.complete(latency_us, len(job_ids), 0)
        for job_id in job_ids:
            token = self.tokens.pop(job_id, None)
            if token is not None:
                self.log.finished(job_id, token, True)

    def error(self, err: BaseException) -> None:
        """Count a library statement's error: its (or its cause's) SQLSTATE, else a lost connection or client error."""
        cause = err.__cause__ or err
        sqlstate = getattr(cause, "sqlstate", None) or getattr(err, "sqlstate", None)
        lost = "closed" in str(cause).lower() or "connection" in type(cause).__name__.lower()
        self.recorder.error(sqlstate or error_kind(cause, lost=lost))

    def rotate(self, index: int, start_s: float, end_s: float, workers: int) -> dict:
        """Close second ``index``: the ``interval`` message."""
        interval = self.recorder.rotate(index, start_s, end_s)
        message = {"type": "interval", "interval": interval_codec.encode(interval), "cpu": list(self.cpu.read()),
                   "workers": workers}
        interval.release()
        return message

    def tail(self) -> dict:
        """The stop phase's values: the ``done`` message."""
        interval = self.recorder.rotate(self.recorder.rotations, 0.0, 0.0)
        message = {"type": "done", "tail": interval_codec.encode(interval)}
        interval.release()
        return message

    async def loop_lag_probe(self) -> None:
        """Record how late each wake-up of a :data:`LOOP_LAG_PERIOD_S` sleep comes (``loop_lag_us``), until cancelled."""
        while True:
            started = time.perf_counter()
            await asyncio.sleep(LOOP_LAG_PERIOD_S)
            self.recorder.loop_lag(max(1, int((time.perf_counter() - started - LOOP_LAG_PERIOD_S) * 1e6)))
