"""What a library worker process measures: the tool's per-second histograms and counters, the stamped claim
log (:class:`FileStampedLog`), its CPU, and the database's clock (docs/queues.md)."""

from __future__ import annotations

import asyncio
import os
import random
import time

import psutil

from bench.engines.postgres.adapter.errors import error_kind
from bench.measure import interval_codec
from bench.measure.claimlog import StampedLog
from bench.measure.cpu_meter import CpuMeter
from bench.measure.metrics import Recorder
from bench.workload.jobs import duration_sampler

#: How often the loop-lag probe wakes (s): as the tool's own (bench.measure.seconds.LOOP_LAG_PERIOD_S).
LOOP_LAG_PERIOD_S = 0.010


class FileStampedLog(StampedLog):
    """The claim log of a library worker process: each stamped line appended to ``path`` by one unbuffered
    ``write`` (a SIGKILL loses none)."""

    def __init__(self, path: str):
        super().__init__()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _write(self, line: str) -> None:
        self.write_lines([line])

    def write_lines(self, lines: list[str]) -> None:
        stamp = f"{time.time()!r},"
        os.write(self._fd, "".join(stamp + line for line in lines).encode())
        self.events += len(lines)

    def close(self) -> None:
        """Close the file."""
        os.close(self._fd)


class Meter:
    """One process's measurements for the run ``cfg``; ``cfg.lease_s``: the library's stall or heartbeat timeout
    (``lease_until``)."""

    def __init__(self, cfg, claims_path: str):
        self.recorder = Recorder(cfg.batch)
        self.log = FileStampedLog(claims_path)
        self.cpu = CpuMeter(psutil.Process())
        self.lease_s = cfg.lease_s
        self.work_s = duration_sampler(cfg)
        self.offset_s = 0.0
        self.tokens: dict[int, int] = {}  # job id -> the random token of its claim (the library has none)
        self.fetched: dict[int, float] = {}  # job id -> its fetch's return (perf_counter)

    async def read_clock(self, fetch_one) -> None:
        """The server's clock minus this host's, from one ``clock_timestamp()`` read (``await fetch_one(sql)``,
        a row with ``now``) between two local times."""
        before = time.time()
        row = await fetch_one("SELECT extract(epoch FROM clock_timestamp())::float8 AS now")
        self.offset_s = float(row["now"]) - (before + time.time()) / 2

    async def timed(self, statement, errors: tuple) -> tuple:
        """Await ``statement``: its result and ``perf_counter`` before and after; an error of ``errors`` is
        counted, then raised on (for the library to handle)."""
        started = time.perf_counter()
        try:
            return await statement, started, time.perf_counter()
        except errors as err:
            self.error(err)
            raise

    def db_now(self) -> float:
        """Now on the database's clock (epoch seconds)."""
        return time.time() + self.offset_s

    def claimed(self, started: float, returned: float, jobs: list[tuple[int, float, float | None]]) -> None:
        """One fetch between two ``perf_counter`` times with ``jobs`` (id, claimed at, eligible at or None),
        database epoch seconds; each job gets a random token in the claim log."""
        pickups = [max(1, int((at - eligible) * 1e6)) for _, at, eligible in jobs if eligible is not None]
        self.recorder.claim(int((returned - started) * 1e6), len(jobs), pickups)
        for job_id, at, _ in jobs:
            token = -random.getrandbits(62) - 1
            self.tokens[job_id], self.fetched[job_id] = token, returned
            self.log.claimed(job_id, token, at + self.lease_s, at)

    def completed(self, started: float, returned: float, job_ids: list[int]) -> None:
        """One completion statement between two ``perf_counter`` times that finished ``job_ids``."""
        self.recorder.complete(int((returned - started) * 1e6), len(job_ids), 0)
        for job_id in job_ids:
            token = self.tokens.pop(job_id, None)
            if token is not None:
                self.log.finished(job_id, token, True)

    def dispatched(self, job_id: int) -> None:
        """A job's start: its ``dispatch_delay_us`` since its fetch returned (none for a job no fetch here timed)."""
        fetched = self.fetched.pop(job_id, None)
        if fetched is not None:
            self.recorder.dispatch_delay(int((time.perf_counter() - fetched) * 1e6))

    async def work(self) -> None:
        """One job's work: a sleep of the run's job duration, its ``work_duration_us``."""
        started = time.perf_counter()
        await asyncio.sleep(self.work_s())
        self.recorder.work_duration(int((time.perf_counter() - started) * 1e6))

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
