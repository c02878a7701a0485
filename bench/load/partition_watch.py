"""What the workers saw of a ``partition`` window (docs/network.md, "Partitions and keepalives"): when each first
failed after its start, the errors by kind until each was connected again, the reconnections and when each came
back after the heal. Kept in the run's context (``SwarmContext.partition``) by the process that runs the relay."""

from __future__ import annotations

import collections
import dataclasses
import time


@dataclasses.dataclass
class PartitionWatch:
    """One window: ``start_s``/``end_s`` (s since measured start), ``workers`` (their names as it opened);
    :meth:`cut` and :meth:`heal` mark its two instants on ``time.perf_counter()``."""

    start_s: float
    end_s: float
    workers: list
    cut_at: float | None = None
    healed_at: float | None = None
    connections_cut: int | None = None
    #: the run's lease expiries counted (the reaper's) as the window opened
    lease_expiries_at_cut: int = 0
    #: worker -> {"after_s": s from the cut to its first error, "kind": that error's}
    noticed: dict = dataclasses.field(default_factory=dict)
    #: errors of the workers by kind, from the cut until each is connected again
    errors: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    #: worker -> s from the heal to its first new connection (negative: before the heal)
    reconnected: dict = dataclasses.field(default_factory=dict)

    def cut(self, connections_cut: int | None) -> None:
        """The relay became a black hole (``connections_cut`` client connections, as it said)."""
        self.cut_at, self.connections_cut = time.perf_counter(), connections_cut

    def heal(self) -> None:
        """The relay forwards again."""
        self.healed_at = time.perf_counter()

    def error(self, worker: str, kind: str) -> None:
        """Worker ``worker`` saw an error of ``kind``: counted until it has reconnected, its first one timed."""
        if self.cut_at is None or worker in self.reconnected:
            return
        self.errors[kind] += 1
        self.noticed.setdefault(worker, {"after_s": round(time.perf_counter() - self.cut_at, 3), "kind": kind})

    def connected(self, worker: str) -> None:
        """Worker ``worker`` opened a new session: a reconnection when it had noticed the partition."""
        if worker in self.noticed and worker not in self.reconnected:
            base = self.healed_at if self.healed_at is not None else self.cut_at
            self.reconnected[worker] = round(time.perf_counter() - base, 3)

    def record(self, lease_expiries: int) -> dict:
        """run.json's entry for the window; ``lease_expiries``: the run's count at its end (the reaper's)."""
        return {"start_s": self.start_s, "end_s": self.end_s, "workers": list(self.workers),
                "lease_expiries_since_cut": lease_expiries - self.lease_expiries_at_cut,
                "connections_cut": self.connections_cut,
                "cut_to_heal_s": (round(self.healed_at - self.cut_at, 3)
                                  if self.healed_at is not None and self.cut_at is not None else None),
                "noticed": dict(self.noticed), "errors": dict(self.errors),
                "reconnected_after_heal_s": dict(self.reconnected)}
