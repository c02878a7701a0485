"""The delay relay's process (``python -m bench.engines.relay --target HOST:PORT --delay-ms D --jitter-ms J``; with
``--measure``, only its timer's lateness, for the check before anything starts): it
measures its timer, starts :class:`bench.engines.relay.core.DelayRelay`, prints one JSON line (``port``, ``pid``,
``timer_late_us``), then reads its standard input: ``stats`` prints the counts as a JSON line, ``hold`` holds
every byte, ``release`` ends the hold, ``partition`` makes it a black hole for the clients (no byte, ACK or
reset back; new connections unanswered), ``heal`` ends it; end of input (the tool exited, however it ended: its end of
the pipe is closed by the kernel even after ``kill -9``) stops it."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from bench.engines.relay.core import DelayRelay, timer_resolution_us


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.engines.relay")
    parser.add_argument("--measure", action="store_true", help="print the timer's lateness as a JSON line and exit")
    parser.add_argument("--target", help="HOST:PORT every connection is forwarded to")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="added to every chunk, each way")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="a uniform share of it added too")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the relay until its standard input ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the tool's to handle; it then closes the pipe
    args = _args(argv)
    late = timer_resolution_us()
    if args.measure or not args.target:  # the check before a run: the same measurement, in a process like the relay
        _say({"timer_late_us": late})
        return 0
    host, _, port = args.target.rpartition(":")
    relay = DelayRelay((host.strip("[]"), int(port)), args.delay_ms / 1000, args.jitter_ms / 1000,
                       early_s=late["p50_us"] / 1e6).start()
    _say({"port": relay.port, "pid": os.getpid(), "timer_late_us": late})
    for line in sys.stdin:
        command = line.strip()
        if command == "stats":
            _say(dict(relay.stats))
        elif command == "hold":
            relay.hold.set()
            _say({"held": True})
        elif command == "release":
            relay.release()
            _say({"held": False})
        elif command == "partition":
            _say({"partitioned": True, "connections_cut": relay.partition()})
        elif command == "heal":
            relay.heal()
            _say({"partitioned": False})
    relay.close()
    return 0


def _say(value: dict) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
