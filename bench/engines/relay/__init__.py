"""The delay relay (``NET_DELAY_MS``, ``NET_JITTER_MS``; docs/network.md, "The delay relay"): a process of its own
(``python -m bench.engines.relay``) the tool starts for each run in front of the server or its pooler, which the
workers, producers and reaper reach it through. It is bytes only, the same for every engine: each engine's
``dsn`` module finds its target and points a DSN at it. It stops when the tool closes its standard input, which
the kernel does however the tool ends (``kill -9`` too)."""

from __future__ import annotations

import contextlib
import json
import select
import subprocess
import sys
from typing import Iterator

from bench.errors import ConfigError, RunFailed
from bench.usage import setting

#: Seconds the relay may take to measure its timer and listen.
START_TIMEOUT_S = 15.0
#: Seconds it may take to answer a command.
ANSWER_TIMEOUT_S = 5.0


class Relay:
    """A started relay: ``pid``, ``port`` (on 127.0.0.1), ``target`` (host, port), ``delay_ms``, ``jitter_ms``,
    ``timer_late_us`` (its timer's measured lateness: ``p50_us``, its resolution, ``p99_us``, ``max_us``)."""

    def __init__(self, proc: subprocess.Popen, hello: dict, target: tuple[str, int], delay_ms: float,
                 jitter_ms: float):
        self.proc, self.pid, self.port = proc, hello["pid"], hello["port"]
        self.timer_late_us, self.target = hello["timer_late_us"], target
        self.delay_ms, self.jitter_ms = delay_ms, jitter_ms
        self.upstream_dsn: str | None = None  # what it forwards to: set by bench.engines.relayed
        self.started_by = "NET_DELAY_MS"  # the parameter that started it: FAULTS for a partition at 0 ms

    @property
    def resolution_ms(self) -> float:
        """The timer's resolution, ms: the median lateness of its timed waits, measured as the relay started."""
        return self.timer_late_us["p50_us"] / 1000

    def ask(self, command: str) -> dict:
        """Send ``command`` (``stats``, ``hold``, ``release``, ``partition``, ``heal``) and return the relay's answer. Raises RunFailed when
        it does not answer in :data:`ANSWER_TIMEOUT_S`."""
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError) as err:
            raise RunFailed(f"the delay relay (pid {self.pid}) is gone: {err}") from None
        return _line(self.proc, ANSWER_TIMEOUT_S, f"the delay relay (pid {self.pid}) did not answer {command!r}")

    def record(self, crossing: list[str]) -> dict:
        """run.json's ``relay``: what started it (``started_by``: ``NET_DELAY_MS``, ``NET_JITTER_MS``, or ``FAULTS``
        for a partition at 0 ms), the settings, the timer, the process, the connections that crossed it and its
        counts so far (``connections`` accepted, bytes each way); counts None when it does not answer."""
        try:
            stats = self.ask("stats")
        except RunFailed:
            stats = None
        return {"started_by": self.started_by, "delay_ms_each_way": self.delay_ms, "jitter_ms": self.jitter_ms,
                "timer_resolution_us": self.timer_late_us["p50_us"], "timer_late_us": self.timer_late_us,
                "pid": self.pid, "listen": f"127.0.0.1:{self.port}", "target": f"{self.target[0]}:{self.target[1]}",
                "crossing": crossing, "counts": stats}

    def line(self, crossing: list[str], what: str) -> str:
        """The terminal's one line about the relay (the setting, not a round trip: the run measures that)."""
        jitter = f" + 0–{self.jitter_ms:g} ms jitter" if self.jitter_ms else ""
        why = " (started at 0 ms for FAULTS=partition: the partition is made in it)" if self.started_by == "FAULTS" else ""
        return (f"delay relay{why}: {self.delay_ms:g} ms{jitter} added each way in front of the {what} (pid {self.pid}, "
                f"timer resolution {self.timer_late_us['p50_us']:g} µs); crossing it: {', '.join(crossing)}; the "
                "tool's own connections go direct; connection set-up is not delayed")


def _line(proc: subprocess.Popen, timeout_s: float, failure: str) -> dict:
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    text = proc.stdout.readline() if ready else ""
    if not text:
        raise RunFailed(f"{failure} (exit status {proc.poll()})")
    return json.loads(text)


def check_setting(key: str, value_ms: float, resolution_ms: float) -> None:
    """Refuse (ConfigError, ``key``: ``net_delay_ms`` or ``net_jitter_ms``) ``value_ms`` above 0 but below the relay's
    timer resolution ``resolution_ms`` (the median lateness of its timed waits): the one rule."""
    if 0 < value_ms < resolution_ms:
        raise ConfigError(key.upper(), f"{value_ms:g} ms is below the delay relay's timer resolution on this "
                                       f"machine, {resolution_ms:g} ms (the median lateness of its timed waits); "
                                       f"allowed: 0, or at least {setting(key, round(resolution_ms + 0.0005, 3))}")


def measured_resolution_ms() -> float:
    """The relay's timer resolution on this machine (ms), measured as the relay measures it, in a process of its
    own (``python -m bench.engines.relay --measure``), before anything starts. Raises RunFailed when it fails."""
    proc = subprocess.Popen([sys.executable, "-m", "bench.engines.relay", "--measure"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        return _line(proc, START_TIMEOUT_S, "the delay relay's timer could not be measured")["timer_late_us"][
            "p50_us"] / 1000
    finally:
        proc.stdout.close()
        proc.wait()


def _check_resolution(relay: Relay) -> None:
    for key, value in (("net_delay_ms", relay.delay_ms), ("net_jitter_ms", relay.jitter_ms)):
        check_setting(key, value, relay.resolution_ms)


@contextlib.contextmanager
def delay_relay(target: tuple[str, int], delay_ms: float, jitter_ms: float) -> Iterator[Relay]:
    """A relay in front of ``target`` (host, port) holding each chunk ``delay_ms`` + uniform(0, ``jitter_ms``) each
    way, stopped after the block (and by itself should this process die). Raises ConfigError (``NET_DELAY_MS``,
    ``NET_JITTER_MS``) below its timer's resolution, RunFailed when it does not start."""
    argv = [sys.executable, "-m", "bench.engines.relay", "--target", f"{target[0]}:{target[1]}",
            "--delay-ms", repr(delay_ms), "--jitter-ms", repr(jitter_ms)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)  # a Ctrl-C is the tool's: it stops the relay after the run
    try:
        relay = Relay(proc, _line(proc, START_TIMEOUT_S, "the delay relay did not start"), target, delay_ms, jitter_ms)
        _check_resolution(relay)
        yield relay
    finally:
        with contextlib.suppress(OSError, ValueError):
            proc.stdin.close()
        try:
            proc.wait(timeout=ANSWER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
