"""What the readers on a standby saw, second by second (``REPLICA_READERS``): their queries' latency, the
cancellations the standby gave them, and the stale reads, counted against the claim log (docs/replicas.md,
"Stale reads")."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable

#: The intervals.csv columns this module fills (the sampler's are the engine's: ``replica_lag_bytes``, ...).
READ_COLUMNS = ("replica_reads", "replica_read_p50_us", "replica_read_p99_us", "replica_read_cancels",
                "replica_read_errors", "stale_reads")
#: Claim-log event kinds after which the job was not pending on the primary (bench/measure/claimlog.py):
#: a committed claim (running) or an applied completion (done).
NOT_PENDING = frozenset({"c", "a"})


class ReadLog:
    """The readers' events by second of the run's clock (warm-up included). Written by the engine's readers."""

    def __init__(self) -> None:
        self.latencies_us: dict[int, list[int]] = defaultdict(list)
        self.cancels: Counter = Counter()
        self.errors: Counter = Counter()
        self.messages: Counter = Counter()
        #: (second of the snapshot, claim-log events written before it or None, job ids read as eligible)
        self.snapshots: list[tuple[int, int | None, list[int]]] = []

    def query(self, k: int, latency_us: int) -> None:
        self.latencies_us[k].append(latency_us)

    def cancel(self, k: int, kind: str, message: str) -> None:  # noqa: ARG002 - one signature with error()
        self.cancels[k] += 1
        self.messages[message] += 1

    def error(self, k: int, kind: str, message: str) -> None:
        self.errors[k] += 1
        self.messages[f"{kind}: {message}"] += 1

    def snapshot(self, k: int, position: int | None, job_ids: list[int]) -> None:
        self.snapshots.append((k, position, job_ids))


def stale_reads(snapshots: list[tuple[int, int | None, list[int]]],
                events: Iterable[tuple[str, int, object, object, object]]) -> Counter | None:
    """Stale reads per second: for each reader snapshot, the jobs it read as eligible whose last claim-log event
    before the snapshot (the first ``position`` events: all committed before it was taken) is a committed claim
    or an applied completion. None when a snapshot has no position (the claim log is not this process's)."""
    if any(position is None for _, position, _ in snapshots):
        return None
    pending = sorted(snapshots, key=lambda s: s[1])
    state: dict[int, str] = {}
    out: Counter = Counter()
    i, next_snap = 0, 0
    for kind, job_id, *_ in events:
        while next_snap < len(pending) and pending[next_snap][1] <= i:
            k, _, ids = pending[next_snap]
            out[k] += sum(1 for j in ids if state.get(j) in NOT_PENDING)
            next_snap += 1
        if kind != "s":  # a rejected completion changed nothing
            state[job_id] = kind
        i += 1
    for k, _, ids in pending[next_snap:]:
        out[k] += sum(1 for j in ids if state.get(j) in NOT_PENDING)
    return out


def _nearest_rank(values: list[int], pct: float) -> int:
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * pct // 100) - 1)]


def add_columns(rows: list[dict], n_warm: int, reads: ReadLog, stale: Counter | None) -> None:
    """Fill :data:`READ_COLUMNS` of each measured row (``t_s`` + ``n_warm`` is the clock's second); latencies
    by nearest rank, empty when no query ended in that second; ``stale_reads`` empty when not counted."""
    for row in rows:
        k = row["t_s"] + n_warm
        lat = reads.latencies_us.get(k, [])
        row.update(replica_reads=len(lat), replica_read_cancels=reads.cancels[k], replica_read_errors=reads.errors[k],
                   replica_read_p50_us=_nearest_rank(lat, 50) if lat else None,
                   replica_read_p99_us=_nearest_rank(lat, 99) if lat else None,
                   stale_reads=None if stale is None else stale[k])
