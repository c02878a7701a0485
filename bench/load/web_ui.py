"""Locust's own web UI over a run (``qbench run --ui``, ``make bench-ui``): a person watches the run
and changes the number of workers while it goes on; the run's measurement is unchanged.

The UI is Locust's (:meth:`locust.env.Environment.create_web_ui`) on the run driver's environment,
with two of its routes taking the run's rules:

- **Start / Edit** (``POST /swarm``): the user count is the workers (plus ``PRODUCERS`` with
  ``RATE``), from 1 to :attr:`WebUI.max_workers` workers, which the database was checked for before
  the run; another count is refused in the UI's own message. The runner then starts or stops
  workers at the form's spawn rate; a stopped worker finishes its cycle first
  (:class:`bench.load.swarm.QueueWorker`).
- **Stop** (``POST /stop``): ends the measured window as a complete run, through the run's own
  stop (every worker finishes its cycle, the plans are read, the audit runs, the files and the
  report are written), not Locust's, which would leave the run waiting for its clock.

Each second the run's merged second is also logged into Locust's statistics (``claim`` and
``complete``, response times in ms; errors by kind), so the UI's charts show what the run measures.
These statistics are the UI's only: the result files come from the run's own histograms.
"""

from __future__ import annotations

import sys
import time

import gevent
import locust.argument_parser as locust_args
from flask import jsonify, request
from locust.stats import bucket_response_time

from bench.errors import ConfigError
from bench.measure.metrics import Interval, recorded_counts

__all__ = ["DEFAULT_PORT", "UI_MAX_WORKERS", "WebUI", "max_workers_default"]

#: Locust's own default port for its web UI.
DEFAULT_PORT = 8089
#: The most workers a web UI run may grow to (the database must have their connections).
UI_MAX_WORKERS = 1000


def max_workers_default(workers: int) -> int:
    """How many workers a web UI run may grow to when ``--max-workers`` is not given: 4 × ``workers``,
    at least ``workers`` + 10 and at most :data:`UI_MAX_WORKERS` (but never below ``workers``)."""
    return max(workers, min(UI_MAX_WORKERS, max(4 * workers, workers + 10)))


def parse_max_workers(value, workers: int) -> int:
    """``--max-workers``: an integer from ``workers`` to :data:`UI_MAX_WORKERS`, or the default
    (:func:`max_workers_default`) for None. Raises ConfigError (``MAX_WORKERS``)."""
    if value in (None, ""):
        return max_workers_default(workers)
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = -1
    if not workers <= n <= UI_MAX_WORKERS:
        raise ConfigError("MAX_WORKERS", f"{value!r} is not allowed; allowed: an integer from WORKERS ({workers}) "
                                         f"to {UI_MAX_WORKERS}")
    return n


def _log_many(entry, counts: dict[float, int], now: float) -> None:
    """Add ``counts`` (latency in ms -> requests) to a Locust ``StatsEntry`` as its ``log`` would one
    request at a time (Locust's own fields: requests, their second, total, min, max and its rounded
    response-time buckets, ``locust.stats.StatsEntry.log``)."""
    if entry.use_response_times_cache and entry.last_request_timestamp and int(now) > int(entry.last_request_timestamp):
        entry._cache_response_times(int(now) - 1)  # noqa: SLF001 - what log does first (the UI's current percentiles)
    n = sum(counts.values())
    entry.num_requests += n
    entry.num_reqs_per_sec[int(now)] += n
    entry.last_request_timestamp = now
    entry.total_response_time += sum(ms * c for ms, c in counts.items())
    low, high = min(counts), max(counts)
    entry.min_response_time = low if entry.min_response_time is None else min(entry.min_response_time, low)
    entry.max_response_time = max(entry.max_response_time, high)
    for ms, c in counts.items():
        entry.response_times[bucket_response_time(ms)] += c


def _without_our_argv(call):
    """``call()`` while ``sys.argv`` holds only the program name: Locust's UI parses its extra options
    from ``sys.argv``, which holds qbench's own (no greenlet switch happens in between)."""
    argv = sys.argv
    sys.argv = argv[:1]
    try:
        return call()
    finally:
        sys.argv = argv


class WebUI:
    """Locust's web UI on ``driver``'s environment (``driver.env``, ``driver.runner``), listening on
    ``host:port``; ``producers`` users are producers (0 without ``RATE``); the UI may set 1 to
    ``max_workers`` workers; ``on_stop`` is called once when the person presses Stop.

    Raises ConfigError (``WEB_PORT``) when the port cannot be listened on.
    """

    def __init__(self, driver, host: str, port: int, max_workers: int, *, producers: int, on_stop, log=print):
        self.driver, self.max_workers, self.producers = driver, max_workers, producers
        self.stop_pressed = False  # True once the person pressed Stop
        self._starting = None  # the greenlet applying the latest count
        env, runner = driver.env, driver.runner
        parser = locust_args.get_empty_argument_parser()
        locust_args.setup_parser_arguments(parser)
        # The form's first values: this run's users, started at once.
        env.parsed_options = parser.parse(args=["--users", str(driver.users), "--spawn-rate", str(driver.users * 10)])
        self.ui = _without_our_argv(lambda: env.create_web_ui(host, port))
        update_template_args = self.ui.update_template_args  # run again for every page load
        self.ui.update_template_args = lambda: _without_our_argv(update_template_args)
        gevent.sleep(0.2)  # the server greenlet binds now: a port in use shows here
        if self.ui.greenlet.dead:
            raise ConfigError("WEB_PORT", f"cannot listen on {host}:{port}; allowed: a free port")
        self.url = f"http://{host}:{port}/"

        def swarm():
            try:
                users = int(request.form.get("user_count", ""))
                spawn_rate = float(request.form.get("spawn_rate", ""))
            except ValueError:
                return jsonify({"success": False, "message": "user_count and spawn_rate must be numbers"})
            workers = users - self.producers
            if self.stop_pressed or driver.ctx.stopping:
                return jsonify({"success": False, "message": "the run is stopping: its results are being written"})
            if not spawn_rate > 0:
                return jsonify({"success": False, "message": f"spawn rate: {spawn_rate:g} is not allowed; "
                                                             "allowed: more than 0 users a second"})
            if not 1 <= workers <= self.max_workers:
                total = (f"; with RATE the users are the workers plus the {self.producers} producers: "
                         f"{self.producers + 1} to {self.producers + self.max_workers}") if self.producers else ""
                return jsonify({"success": False, "message": (
                    f"users: {users} is not allowed; allowed: 1 to {self.max_workers} workers (the connections "
                    f"the database was checked for){total}")})
            log(f"web UI: {workers} workers (spawn rate {spawn_rate:g}/s)")
            if self._starting is not None:  # as Locust's own route does: the newest count wins
                self._starting.kill(block=True)
            self._starting = gevent.spawn(runner.start, users, spawn_rate)
            return jsonify({"success": True, "message": "Swarming started", "host": env.host})

        def stop():
            if not self.stop_pressed:
                self.stop_pressed = True
                log("web UI: Stop pressed: ending the measured window")
                on_stop()
            return jsonify({"success": True, "message": "Test stopped"})

        self.ui.app.view_functions["locust.swarm"] = self.ui.auth_required_if_enabled(swarm)
        self.ui.app.view_functions["locust.stop"] = self.ui.auth_required_if_enabled(stop)
        log(f"web UI: {self.url} (change the workers there; Stop ends the run and writes its report)")

    def feed(self, interval: Interval) -> None:
        """Log ``interval`` (a merged second) into Locust's statistics: its claims and completions
        with their latencies (ms) and its errors by kind. Each latency bucket is added with its count
        at once (:func:`_log_many`), from the non-empty buckets only (:func:`bench.measure.metrics.recorded_counts`):
        one call per claim, or hdrh's own iterator, cost the event loop tens of ms a second."""
        stats = self.driver.env.stats
        now = time.time()
        for name, key in (("claim", "claim_latency_us"), ("complete", "complete_latency_us")):
            hist = interval.histograms[key]
            if not hist.get_total_count():
                continue
            counts = {value_us / 1000.0: n for value_us, n in recorded_counts(hist)}
            for entry in (stats.get(name, "SQL"), stats.total):
                _log_many(entry, counts, now)
        for kind, count in interval.errors.items():
            for _ in range(count):
                stats.log_error("SQL", "claim", kind)

    def info(self, stopped_at_t_s: float | None) -> dict:
        """What ``run.json`` records: ``{"url", "max_workers", "stopped_at_t_s"}`` (None when the run
        was not ended by the UI's Stop)."""
        return {"url": self.url, "max_workers": self.max_workers,
                "stopped_at_t_s": round(stopped_at_t_s, 3) if self.stop_pressed else None}

    def close(self) -> None:
        """Stop the UI's web server."""
        self.ui.stop()
