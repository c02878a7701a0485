"""The round-trip probe, the same for every engine: an empty round trip on a connection of its own every
:data:`PERIOD_S`, over the workers' DSN, in a process of its own with no gevent (the workers' event loop cannot
delay it: docs/network.md, "The round trip and where a claim's time goes"). Each engine gives its connection and
its empty round trip in ``bench/engines/<name>/round_trip.py`` (``open_probe(dsn) -> (ping, close)``); this
module imports no driver.

Run as ``python -m bench.engines.round_trip <engine>`` with the DSN in :data:`DSN_ENV`; it writes one line per
sample to its standard output, ``<monotonic s> <round trip ns>``, or ``E <monotonic s> <message>`` when one
failed (then it reconnects after :data:`RECONNECT_S`), and exits when its standard input closes (the run ended,
however it ended)."""

from __future__ import annotations

import importlib
import os
import select
import sys
import time
from typing import Callable, TextIO

#: Time between two samples' starts (s): 10 a second, several within every second of the run.
PERIOD_S = 0.1
#: The environment variable the probe reads its DSN from (never its command line, where ``ps`` shows a password).
DSN_ENV = "QBENCH_PROBE_DSN"
#: Wait before reopening the probe's connection after a failure (s).
RECONNECT_S = 1.0


def command(engine: str, dsn: str) -> tuple[list[str], dict[str, str]]:
    """The probe process for ``engine`` over ``dsn``: (argv, the environment variables to add)."""
    return [sys.executable, "-m", "bench.engines.round_trip", engine], {DSN_ENV: dsn}


def _stopped(stdin: TextIO, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` (none when at or below 0); True once the parent closed our standard input (it
    ended, however, or stopped us: it never writes to it)."""
    return bool(select.select([stdin], [], [], max(0.0, timeout_s))[0])


def probe(open_probe: Callable[[str], tuple[Callable[[], None], Callable[[], None]]], dsn: str, out: TextIO,
          stdin: TextIO, period_s: float = PERIOD_S) -> None:
    """Time ``ping()`` every ``period_s`` on the connection ``open_probe(dsn)`` gives (``(ping, close)``), one line
    to ``out`` per sample (this module's docstring), until ``stdin`` closes."""
    ping = close = None
    due = time.monotonic()
    while not _stopped(stdin, due - time.monotonic()):
        due = max(due + period_s, time.monotonic())
        try:
            if ping is None:
                ping, close = open_probe(dsn)
            started = time.perf_counter_ns()
            ping()
            elapsed_ns = time.perf_counter_ns() - started
            out.write(f"{time.monotonic():.6f} {elapsed_ns}\n")
        except Exception as err:  # pylint: disable=broad-except  (any driver's error: counted, reconnected)
            out.write(f"E {time.monotonic():.6f} {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}\n")
            if close is not None:
                try:
                    close()
                except Exception:  # pylint: disable=broad-except  (already broken)
                    pass
            ping = close = None
            due = time.monotonic() + RECONNECT_S
        out.flush()


def main(argv: list[str]) -> int:
    """``python -m bench.engines.round_trip <engine>``: :func:`probe` with the engine's ``open_probe``."""
    from bench.config.choices import ENGINES  # standard library only
    if len(argv) != 1 or argv[0] not in ENGINES:
        print(f"usage: python -m bench.engines.round_trip {{{','.join(ENGINES)}}}", file=sys.stderr)
        return 2
    engine = importlib.import_module(f"bench.engines.{argv[0]}.round_trip")
    try:
        probe(engine.open_probe, os.environ[DSN_ENV], sys.stdout, sys.stdin)
    except (BrokenPipeError, KeyboardInterrupt):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
