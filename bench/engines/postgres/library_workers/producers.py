"""A queue library's own producers (``LIBRARY_MODE=worker``, ``RATE > 0``): open-loop arrivals on the
database's clock, enqueued with the library's own call, by the rules of :mod:`bench.load.producers`."""

from __future__ import annotations

import asyncio
import contextlib
import random

from bench.workload.arrivals import MAX_DUE_PER_INSERT, next_gap_s


async def produce(cfg, adapter, meter, stop: asyncio.Event) -> None:
    """Run ``cfg.producers`` producers through ``adapter.enqueue`` until ``stop``."""
    await asyncio.gather(*(_producer(cfg, adapter, meter, stop) for _ in range(cfg.producers)))


async def _producer(cfg, adapter, meter, stop: asyncio.Event) -> None:
    rng, rate = random.Random(), cfg.rate / cfg.producers
    intended = meter.db_now() + next_gap_s(rate, cfg.arrival, rng)
    while not stop.is_set():
        delay = intended - meter.db_now()
        if delay > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)
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
