"""The wait events of the workers' active backends: sampled every :data:`SAMPLE_EVERY_S` by the engine's monitor
(``sample_waits``) and folded into each second's columns (:data:`bench.results.wait_event_columns.WAIT_EVENT_COLUMNS`)
and its counts by event (docs/network.md, "Where the server's time goes: wait events"). Only a backend running a
statement (state ``active``) counts: an idle backend waiting for its client's next statement (``Client:ClientRead``)
is the client's time, not the server's; an active backend with no wait event is on a core or runnable (``CPU``)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Callable

import gevent

from bench.results.wait_event_columns import CPU, OTHER_COLUMN, TYPE_COLUMNS, type_column

#: Seconds between two samples: ten a second (the strongest peer harness keeps one a second).
SAMPLE_EVERY_S = 0.1
#: The state of a backend running a statement (pg_stat_activity.state).
ACTIVE = "active"
#: A worker's backends by application name (bench/engines/postgres/sessions.py: ``queue-bench [p<i>-]worker-<n>``,
#: and its effect connection's with `` effects``).
WORKER_NAME = re.compile(r"^queue-bench (p[0-9]+-)?worker-[0-9]+( effects)?$")
#: The names of the clients that go through a pooler (workers, producers, the reaper): behind one, a server
#: connection carries one of them, or none the tool set.
LOAD_NAME = re.compile(r"^queue-bench ((p[0-9]+-)?(worker|producer)-[0-9]+( effects)?|reaper)$")
#: What the sampled backends are, by whether the run is behind a pooler (``summary.json`` ``wait_events.backends``).
WORKERS, POOL = "the workers' backends", "the pool's server connections"


def is_sampled(application_name: str | None, behind_pooler: bool) -> bool:
    """Whether a client backend of the run's database is one whose wait events count: a worker's by its
    application name; behind a pooler every server connection of the pool (a backend serves whichever client
    the pooler gives it, workers, producers and the reaper alike, so it cannot be told to be a worker's), that is
    every backend but the tool's own direct connections (monitor, admin, audit, ...)."""
    name = application_name or ""
    if not behind_pooler:
        return bool(WORKER_NAME.match(name))
    return not name.startswith("queue-bench ") or bool(LOAD_NAME.match(name))


class WaitEventFold:
    """Folds samples, each the rows ``(application_name, state, wait_event_type, wait_event)`` of the client backends
    of the run's database, into a second: :meth:`new_second`, :meth:`fold`, :meth:`columns`."""

    def __init__(self, behind_pooler: bool = False):
        self.behind_pooler = behind_pooler

    def info(self) -> dict:
        """``run.json`` ``wait_events``: how the samples were taken."""
        return {"sample_every_s": SAMPLE_EVERY_S, "backends": POOL if self.behind_pooler else WORKERS}

    @staticmethod
    def new_second() -> dict:
        """A second's counts before its first sample."""
        return {"samples": 0, "types": Counter(), "events": Counter(), "states": Counter(), "cost_s": 0.0}

    def fold(self, acc: dict, rows: list | None, cost_s: float) -> None:
        """Fold one sample (``rows``; None: it failed, and is not counted) that took ``cost_s``."""
        acc["cost_s"] += cost_s
        if rows is None:
            return
        acc["samples"] += 1
        for name, state, wait_type, event in rows:
            if not is_sampled(name, self.behind_pooler):
                continue
            acc["states"][state or "unknown"] += 1
            if state != ACTIVE:
                continue
            acc["types"][wait_type or CPU] += 1
            acc["events"][f"{wait_type}:{event}" if wait_type else CPU] += 1

    @staticmethod
    def columns(acc: dict) -> dict:
        """The second's values for the monitor's note: each type's column (mean active backends in it over the
        second's samples, None without one), ``wait_samples``, ``wait_query_us``, ``wait_events`` (active
        backend samples by ``type:event``), ``wait_states`` (sampled backends' samples by state) and ``cost_s``."""
        n = acc["samples"]
        out = dict.fromkeys((*TYPE_COLUMNS.values(), OTHER_COLUMN), 0.0 if n else None)
        for wait_type, count in acc["types"].items():
            out[type_column(wait_type)] += count
        if n:
            out = {column: round(total / n, 3) for column, total in out.items()}
        return {**out, "wait_samples": n, "wait_query_us": round(acc["cost_s"] * 1e6),
                "wait_events": dict(acc["events"]), "wait_states": dict(acc["states"]), "cost_s": acc["cost_s"]}


def spawn_wait_sampler(monitor, now_s: Callable[[], float], n_seconds: int, note: Callable[[int, dict], None]):
    """A greenlet calling ``monitor.sample_waits()`` every :data:`SAMPLE_EVERY_S`, folding each into
    ``monitor.wait_events`` and calling ``note(k, columns)`` at the end of each second ``k`` < ``n_seconds`` of
    ``now_s()`` (kill it to stop)."""
    fold = monitor.wait_events

    def loop() -> None:
        k = 0
        while k < n_seconds:
            acc = fold.new_second()
            while now_s() < k + 1:
                at = now_s()
                rows, spent = monitor.sample_waits()
                fold.fold(acc, rows, spent)
                gevent.sleep(max(0.0, min(k + 1.0, at + SAMPLE_EVERY_S) - now_s()))
            note(k, fold.columns(acc))
            k = max(k + 1, int(now_s()))
    return gevent.spawn(loop)
