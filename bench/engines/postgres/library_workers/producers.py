"""A queue library's own producers (``LIBRARY_MODE=worker``, ``RATE > 0``): open-loop arrivals enqueued
with the library's own defer or enqueue, as :mod:`bench.load.producers` does for the tool's queue.

Each of ``PRODUCERS`` coroutines has ``RATE / PRODUCERS`` of the arrivals (``ARRIVAL``: evenly spaced
or Poisson) on a schedule fixed in advance; a job's eligible time is its *intended* enqueue time, so
a producer that falls behind does not hide the delay from pickup latency (coordinated omission), and
the jobs due together go in one statement. Intended times are taken on the database's clock
(:meth:`bench.engines.postgres.library_workers.meter.Meter.db_now`).
"""

from __future__ import annotations

import asyncio
import random

from bench.workload.arrivals import MAX_DUE_PER_INSERT, next_gap_s


async def produce(cfg, adapter, meter, stop: asyncio.Event) -> None:
    """Run ``cfg.producers`` producers through ``adapter.enqueue`` until ``stop``."""
    await asyncio.gather(*(_producer(cfg, adapter, meter, stop) for _ in range(cfg.producers)))


async def _producer(cfg, adapter, meter, stop: asyncio.Event) -> None:
    rng = random.Random()
    rate = cfg.rate / cfg.producers
    intended = meter.db_now() + next_gap_s(rate, cfg.arrival, rng)
    while not stop.is_set():
        delay = intended - meter.db_now()
        if delay > 0:
            try:
                await asyncio.wait_for(stop.wait(), timeout=delay)
            except asyncio.TimeoutError:
                pass
            continue
        now = meter.db_now()
        due = []
        while intended <= now and len(due) < MAX_DUE_PER_INSERT:
            due.append(intended)
            intended += next_gap_s(rate, cfg.arrival, rng)
        try:
            ids = await adapter.enqueue(due)
        except Exception as err:  # the library's own errors: counted, and the producer goes on
            meter.recorder.error(type(err).__name__)
            await asyncio.sleep(0.1)
            continue
        meter.recorder.produced(len(due), [max(0, int((now - t) * 1e6)) for t in due])
        meter.log.produced(ids)
