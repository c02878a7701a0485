"""A library worker process's two streams: stdin's commands read by a thread into the event loop, JSON
lines written to stdout."""

from __future__ import annotations

import asyncio
import json
import sys
import threading


class Channel:
    """stdin's JSON lines as an :class:`asyncio.Queue` (``None`` once stdin closes: the run is gone), and
    :meth:`send` for stdout."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.commands: asyncio.Queue = asyncio.Queue()
        self._loop = loop
        self._out = sys.stdout
        sys.stdout = sys.stderr  # a library's print must not break the protocol
        threading.Thread(target=self._read, name="qbench-commands", daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            if line.strip():
                self._loop.call_soon_threadsafe(self.commands.put_nowait, json.loads(line))
        self._loop.call_soon_threadsafe(self.commands.put_nowait, None)

    def send(self, message: dict) -> None:
        """Write ``message`` as one line and flush it."""
        self._out.write(json.dumps(message, separators=(",", ":")) + "\n")
        self._out.flush()
