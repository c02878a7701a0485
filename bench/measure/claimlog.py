"""The claim log for the audit: every committed event, one CSV line of :data:`EVENT_COLUMNS`, in event order,
in an anonymous temporary file; ``TXN=hold`` events wait in a :class:`Tentative` until ``COMMIT``. No locking."""

from __future__ import annotations

import heapq
import io
import tempfile
import time
from typing import Iterable, Iterator

#: Columns of one event line, in order (CSV; an empty field is NULL).
EVENT_COLUMNS = ("kind", "id", "token", "claimed_at", "lease_until")
#: Event kind -> meaning.
EVENT_KINDS = {
    "c": "claim committed",
    "a": "completion applied",
    "s": "completion rejected by the token (stale)",
    "f": "failure reported",
    "p": "job produced",
    "e": "effect written on its own (EFFECTS outside/idempotent, the statement returned having written its row)",
}
#: Write buffer of the event file (bytes); the only memory the log keeps.
BUFFER_BYTES = 1 << 20
#: Bytes per ``write`` when the file is streamed to COPY.
COPY_CHUNK_BYTES = 1 << 20


class _EventSink:
    """Formats the events; subclasses decide where the lines go (:meth:`_write`)."""

    def _write(self, line: str) -> None:
        raise NotImplementedError

    def claimed(self, job_id: int, token: int, lease_until: float, claimed_at: float) -> None:
        """Note one claim of ``job_id`` with fencing ``token``; times are database epoch seconds."""
        self._write(f"c,{job_id},{token},{claimed_at!r},{lease_until!r}\n")

    def finished(self, job_id: int, token: int, applied: bool) -> None:
        """Note a completion attempt of ``(job_id, token)``; ``applied`` when the database updated the row."""
        self._write(f"{'a' if applied else 's'},{job_id},{token},,\n")

    def effected(self, job_id: int, token: int) -> None:
        """Note the effect row of attempt ``token`` of ``job_id`` written and committed on its own."""
        self._write(f"e,{job_id},{token},,\n")

    def failed(self, job_id: int, token: int) -> None:
        """Note a failure reported for the attempt ``token`` of ``job_id``."""
        self._write(f"f,{job_id},{token},,\n")


class ClaimLog(_EventSink):
    """The run's event log, streamed to a temporary file; ``events`` counts the lines written. Call
    :meth:`close` when the audit is done."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile("w+b", buffering=BUFFER_BYTES, prefix="queue-bench-claims-")
        self.events = 0

    def _write(self, line: str) -> None:
        self._file.write(line.encode())
        self.events += 1

    def write_lines(self, lines: list[str]) -> None:
        """Append already formatted event lines (a committed :class:`Tentative`)."""
        self._file.write("".join(lines).encode())
        self.events += len(lines)

    def produced(self, job_ids: Iterable[int]) -> None:
        """Note jobs a producer inserted (their ids, as the insert returned them)."""
        for job_id in job_ids:
            self._write(f"p,{job_id},,,\n")

    def tentative(self) -> Tentative:
        """A buffer for the events of one ``TXN=hold`` transaction, written here by its :meth:`Tentative.commit`."""
        return Tentative(self)

    def copy_to(self, copy) -> int:
        """Stream every event written so far to psycopg ``copy`` (a ``COPY … FROM STDIN (FORMAT csv)`` with
        :data:`EVENT_COLUMNS`, https://www.postgresql.org/docs/current/sql-copy.html); return the number of
        events."""
        self._file.seek(0)
        while chunk := self._file.read(COPY_CHUNK_BYTES):
            copy.write(chunk)
        self._file.seek(0, io.SEEK_END)
        return self.events

    def rows(self) -> Iterator[tuple[str, int, int | None, float | None, float | None]]:
        """Every event so far, in order, as ``(kind, id, token, claimed_at, lease_until)`` (parsed, empty None).
        Raises ValueError for a line longer than :data:`COPY_CHUNK_BYTES`."""
        end = self._file.seek(0, io.SEEK_END)
        offset = 0
        while offset < end:
            self._file.seek(offset)
            chunk = self._file.read(min(COPY_CHUNK_BYTES, end - offset))
            self._file.seek(0, io.SEEK_END)
            cut = chunk.rfind(b"\n") + 1
            if cut == 0:  # a line longer than a chunk: never written by this log
                raise ValueError(f"claim log line at byte {offset} is longer than {COPY_CHUNK_BYTES} bytes")
            offset += cut
            for line in chunk[:cut].decode().splitlines():
                kind, job_id, token, claimed_at, lease_until = line.split(",")
                yield (kind, int(job_id), int(token) if token else None, float(claimed_at) if claimed_at else None,
                       float(lease_until) if lease_until else None)

    def close(self) -> None:
        """Close and delete the event file."""
        self._file.close()


class Tentative(_EventSink):
    """Events of one uncommitted ``TXN=hold`` transaction (at most a batch of claims and failures)."""

    def __init__(self, log: ClaimLog):
        self.log = log
        self.lines: list[str] = []
        #: set by the worker just before it sends the ``COMMIT`` (a lost reply leaves the commit in doubt)
        self.commit_sent = False

    def _write(self, line: str) -> None:
        self.lines.append(line)

    @property
    def claims(self) -> int:
        """Claimed jobs held in this buffer (not yet committed)."""
        return sum(1 for line in self.lines if line.startswith("c,"))

    def commit(self) -> None:
        """The transaction committed: its events become the log's (once)."""
        self.log.write_lines(self.lines)
        self.lines = []


class StampedLog(ClaimLog):
    """A load generator process's own event log in a distributed run: each line prefixed with its wall time
    (``time.time()``, epoch seconds) and kept in memory until :meth:`take` hands it to the master."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.events = 0

    def _write(self, line: str) -> None:
        self.lines.append(f"{time.time()!r},{line}")
        self.events += 1

    def write_lines(self, lines: list[str]) -> None:
        stamp = f"{time.time()!r},"
        self.lines.extend(stamp + line for line in lines)
        self.events += len(lines)

    def take(self) -> str:
        """The stamped lines written since the last call, as one string (and forget them)."""
        text, self.lines = "".join(self.lines), []
        return text

    def close(self) -> None:
        """Nothing to release: the lines live in memory until taken."""
        self.lines = []


def merge_stamped(paths: Iterable, into: ClaimLog) -> int:
    """Append the events of every :class:`StampedLog` file in ``paths`` to ``into`` in stamp order (a heap
    merge), without the stamps; return how many."""
    def lines(path) -> Iterator[tuple[float, str]]:
        with open(path, "rb") as fh:
            for raw in fh:
                stamp, line = raw.decode().split(",", 1)
                yield float(stamp), line

    merged = 0
    batch: list[str] = []
    for _, line in heapq.merge(*(lines(p) for p in paths), key=lambda item: item[0]):
        batch.append(line)
        if len(batch) >= 10_000:
            into.write_lines(batch)
            merged += len(batch)
            batch = []
    into.write_lines(batch)
    return merged + len(batch)
