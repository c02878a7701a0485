"""Locust's own web UI over a run (``qbench run --ui``): its Edit changes the workers, its Stop ends the run as
complete; its charts are fed from the run's seconds (docs/processes-and-ui.md)."""

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
    """The default ``--max-workers``: 4 × ``workers``, at least ``workers`` + 10, at most :data:`UI_MAX_WORKERS`,
    never below ``workers``."""
    return max(workers, min(UI_MAX_WORKERS, max(4 * workers, workers + 10)))


def _log_many(entry, counts: dict[float, int], now: float) -> None:
    """Add ``counts`` (ms -> requests) to a Locust ``StatsEntry`` as ``locust.stats.StatsEntry.log`` would, one
    request at a time."""
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
    """``call()`` with ``sys.argv`` holding only the program name (Locust's UI parses ``sys.argv``)."""
    argv = sys.argv
    sys.argv = argv[:1]
    try:
        return call()
    finally:
        sys.argv = argv


class WebUI:
    """Locust's web UI on ``driver``'s environment at ``host:port``; ``producers`` users are producers; 1 to
    ``max_workers`` workers; ``on_stop`` is called once on Stop. Raises ConfigError (``WEB_PORT``)."""

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
        """Log ``interval`` (a merged second) into Locust's statistics: claims, completions (ms) and errors by
        kind, each non-empty bucket at once (a call per claim, or hdrh's iterator, cost the event loop tens
        of ms a second)."""
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
        """``run.json``'s ``{"url", "max_workers", "stopped_at_t_s"}`` (None unless ended by Stop)."""
        return {"url": self.url, "max_workers": self.max_workers,
                "stopped_at_t_s": round(stopped_at_t_s, 3) if self.stop_pressed else None}

    def close(self) -> None:
        """Stop the UI's web server."""
        self.ui.stop()
