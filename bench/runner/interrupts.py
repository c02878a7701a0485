"""Ctrl-C and SIGTERM over a run: during the load they end it; after it, the first waits for the files and a
second stops waiting for jobs in progress."""

from __future__ import annotations

import signal
from typing import Callable

import gevent.event

#: The signals a run handles; :func:`bench.runner.run` restores their handlers when it returns.
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """The run's handlers of :data:`SIGNALS`, installed at construction; ``event`` is set by a signal (or the web
    UI's Stop) during the load."""

    def __init__(self, log: Callable[[str], None]):
        self.log = log
        self.event = gevent.event.Event()
        self.after_load = 0  # signals received after the load
        self.driver = None
        for sig in SIGNALS:
            signal.signal(sig, lambda *_: self.event.set())

    def load_ended(self, driver) -> None:
        """Install the after-load handler: a Ctrl-C waits for the files; a second kills ``driver``'s workers."""
        self.driver = driver
        for sig in SIGNALS:
            signal.signal(sig, self._interrupt_after_load)

    def _interrupt_after_load(self, *_) -> None:
        self.after_load += 1
        if self.after_load == 1:
            self.log("the load has stopped: writing the results first (Ctrl-C again: do not wait for the jobs "
                     "in progress)")
        else:
            self.log("not waiting for the jobs in progress: their workers stop now; those jobs stay claimed "
                     "until their lease expires")
            self.driver.kill()
