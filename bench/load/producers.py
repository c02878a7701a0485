"""Open-loop producers: ``RATE`` jobs/s on a schedule fixed in advance, ``run_at`` the intended enqueue time
(coordinated omission, as ``pgbench --rate`` corrects it:
https://www.postgresql.org/docs/current/pgbench.html); the lag is ``producer_lag_us``. The rules:
docs/design.md."""

from __future__ import annotations

import random
import time

import gevent
from locust import task

from bench.engines.base import EngineError
from bench.load import swarm
from bench.workload.arrivals import MAX_DUE_PER_INSERT, next_gap_s, rate_at



class Producer(swarm.RunUser):
    """One open-loop producer (``fixed_count = PRODUCERS``) inserting through a ``ProducerSession``."""

    fixed_count = 1

    def on_start(self) -> None:
        cfg = self.ctx.cfg
        self.rng = random.Random()
        self.priorities = [p for p, _ in cfg.priority_mix]
        self.weights = [w for _, w in cfg.priority_mix]
        self.session = None
        self.name = self.ctx.next_name("producer")
        self._connect()

    def _connect(self) -> None:
        try:
            self.session = self.ctx.sessions.producer_session(self.name)
        except EngineError as err:
            self.ctx.recorder.error(err.kind)
            self.session = None

    def on_stop(self) -> None:
        if self.session is not None:
            self.session.close()

    @task
    def produce_until_stopped(self) -> None:
        """Insert jobs on the schedule until the run stops. Arrivals whose insert failed (the database unreachable) are
        sent first with the next insert, their lag and pickup counted from their scheduled time: an outage delays
        them, it never removes them (coordinated omission)."""
        cfg, recorder = self.ctx.cfg, self.ctx.recorder
        share = 1.0 / cfg.producers

        def gap(at: float) -> float:
            rate = rate_at(at - self.ctx.measured_start_unix, cfg.rate, cfg.bursts) * share
            return next_gap_s(rate, cfg.arrival, self.rng)

        intended = time.time()
        intended += gap(intended)
        future_s = cfg.future_delay_ms / 1000.0
        unsent: list[float] = []  # the arrivals a failed insert did not send: sent first, their lag from their time
        while not self.ctx.stopping:
            delay = intended - time.time()
            if delay > 0 and not unsent:
                gevent.sleep(delay)
                continue
            now = time.time()
            due, unsent = unsent[:MAX_DUE_PER_INSERT], unsent[MAX_DUE_PER_INSERT:]
            while intended <= now and len(due) < MAX_DUE_PER_INSERT:
                if rate_at(intended - self.ctx.measured_start_unix, cfg.rate, cfg.bursts) > 0:
                    due.append(intended)
                intended += gap(intended)
            if not due:
                continue
            priorities = self.rng.choices(self.priorities, self.weights, k=len(due))
            run_at = [t + future_s if future_s and self.rng.random() < cfg.future_share else t for t in due]
            if self.session is None or self.session.broken:
                self._connect()
                if self.session is None:  # the database is unreachable: the arrivals wait, as a real producer's
                    unsent = due + unsent
                    gevent.sleep(0.1)
                    continue
            session, sent = self.session, self.session.round_trips_sent
            try:
                ids = session.insert(priorities, run_at)
            except EngineError as err:
                recorder.error(err.kind)
                unsent = due + unsent
                gevent.sleep(0.1)
                continue
            finally:
                recorder.count("producer_round_trips", session.round_trips_sent - sent)
            recorder.produced(len(due), [int((now - t) * 1e6) for t in due])
            self.ctx.log.produced(ids)
