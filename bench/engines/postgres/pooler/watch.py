"""What the run knows of the pooler in front of the server, and what it measures there (docs/poolers.md, "Reading
the pooler figures"): whether it pools per transaction, found through it without its console (:func:`detect_pooling`);
its mode, pool size, client limit and version from its console (:func:`console_facts`); and once a second its pool
and its totals (:class:`PoolerWatch`). The console's commands and counters are PgBouncer's:
https://www.pgbouncer.org/usage.html ("SHOW POOLS", "SHOW STATS", "SHOW CONFIG", "SHOW VERSION")."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from bench.engines.base import EngineError
from bench.engines.postgres.adapter import QUERY_CANCELED, connect, translated
from bench.engines.postgres.pooler.console import Console, console_rows
from bench.measure.machine_cpu import proc_times

__all__ = ["DETECTED", "NOT_DETECTED", "PoolerWatch", "console_facts", "detect_pooling", "pool_key", "pooler_facts"]

#: What :func:`detect_pooling` concludes.
DETECTED = "transaction pooling detected"
NOT_DETECTED = "pooling not detected"
#: ``SHOW POOLS`` columns sampled as they are each second (clients and server connections now; ``maxwait`` and
#: ``maxwait_us`` together are the oldest client's wait now), by the sample key each becomes.
POOL_NOW = {"pooler_cl_active": "cl_active", "pooler_cl_waiting": "cl_waiting", "pooler_sv_active": "sv_active",
            "pooler_sv_idle": "sv_idle", "pooler_sv_used": "sv_used"}
#: The server connections a pool holds: every ``sv_*`` state of ``SHOW POOLS`` (connecting and being tested too).
SERVER_STATES = ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login")
#: ``SHOW STATS`` totals (counts, and µs for the times) sampled each second, by the sample key each becomes; the
#: per-second figures are their growth (:mod:`bench.measure.pooler_seconds`).
STATS_TOTALS = {"pooler_xact_total": "total_xact_count", "pooler_query_total": "total_query_count",
                "pooler_wait_total_us": "total_wait_time", "pooler_xact_time_total_us": "total_xact_time",
                "pooler_query_time_total_us": "total_query_time"}

_PIDS = "SELECT pg_backend_pid()"
#: How long client B of :func:`detect_pooling` waits for a server connection before its query is cancelled: a
#: session pool whose every server connection is taken (by client A) would keep it waiting.
WAIT_FOR_SERVER_S = 3.0


def pool_key(dsn: str) -> tuple[str, str]:
    """(database, user) as the pooler names the pool ``dsn``'s clients use: what a client through it asks for
    (libpq's defaults resolved on a connection through it)."""
    with connect(dsn, application_name="queue-bench pooler check") as conn:
        return conn.info.dbname, conn.info.user


def detect_pooling(pooled_dsn: str) -> dict[str, Any]:
    """Whether the pooler ``pooled_dsn`` reaches hands server connections out per transaction, without its
    console: client A runs a transaction, client B one, then A another, each reading ``pg_backend_pid()``. A's two
    on different backends, or B's on the backend A had while A is still connected, can only be transaction (or
    statement) pooling; otherwise :data:`NOT_DETECTED`, which is also what a transaction pooler that handed A's
    backend back to A looks like. B's read is cancelled after :data:`WAIT_FOR_SERVER_S` (a full session pool).
    ``{"concluded", "backend_pids": [a1, b or None, a2]}``. Raises the adapter's EngineError."""
    with connect(pooled_dsn, application_name="queue-bench pooling check a") as a, \
            connect(pooled_dsn, application_name="queue-bench pooling check b") as b, translated():
        first = a.execute(_PIDS).fetchone()[0]
        other = _pid_within(b, WAIT_FOR_SERVER_S)
        second = a.execute(_PIDS).fetchone()[0]
    moved = second != first or other == first
    return {"concluded": DETECTED if moved else NOT_DETECTED, "backend_pids": [first, other, second]}


def _pid_within(conn: psycopg.Connection, timeout_s: float) -> int | None:
    """``pg_backend_pid()`` on ``conn``, or None when no answer came within ``timeout_s`` (the query cancelled)."""
    timer = threading.Timer(timeout_s, conn.cancel)
    timer.start()
    try:
        with translated():
            return conn.execute(_PIDS).fetchone()[0]
    except EngineError as err:
        if err.kind != QUERY_CANCELED:
            raise
        return None
    finally:
        timer.cancel()


def console_facts(admin_dsn: str) -> dict[str, Any]:
    """The pooler's version (``SHOW VERSION``), ``pool_mode``, ``default_pool_size`` and ``max_client_conn``
    (``SHOW CONFIG``), as its console gives them (read only: the tool never sets a user's pool). Raises the
    adapter's EngineError."""
    config = {row["key"]: row["value"] for row in console_rows(admin_dsn, "SHOW CONFIG")}
    (version,) = console_rows(admin_dsn, "SHOW VERSION")
    return {"version": str(next(iter(version.values()))), "pool_mode": config.get("pool_mode"),
            "pool_size": _int(config.get("default_pool_size")), "max_client_conn": _int(config.get("max_client_conn"))}


def pooler_facts(pooled_dsn: str, admin_dsn: str | None, *, detect: bool) -> dict[str, Any]:
    """``{"pool": [database, user] or None, "detection": {...} or None, "console": {...} or None}``:
    :func:`pool_key`, with ``detect`` :func:`detect_pooling`, with ``admin_dsn`` :func:`console_facts`; a read that
    failed is ``{"error": its first line}`` in its place (never raised: what the run knows is recorded)."""
    out: dict[str, Any] = {"pool": None, "detection": None, "console": None}
    reads = {"pool": lambda: list(pool_key(pooled_dsn))}
    if detect:
        reads["detection"] = lambda: detect_pooling(pooled_dsn)
    if admin_dsn:
        reads["console"] = lambda: console_facts(admin_dsn)
    for key, read in reads.items():
        try:
            out[key] = read()
        except EngineError as err:
            out[key] = {"error": str(err)}
    return out


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class PoolerWatch:
    """The pooler's pool and totals, read once a second on its console (:meth:`sample`): the pools of
    ``database`` and ``user`` (``SHOW POOLS``), the totals of ``database`` (``SHOW STATS`` counts per database),
    and with ``pid`` (the embedded pooler's process) its CPU from ``/proc``. ``errors`` counts failed reads."""

    def __init__(self, admin_dsn: str, database: str, user: str, pid: int | None = None):
        self.console, self.database, self.user, self.pid = Console(admin_dsn), database, user, pid
        self.errors = 0

    def sample(self) -> dict:
        """``{pooler_cl_active, pooler_cl_waiting, pooler_sv_active, pooler_sv_idle, pooler_sv_used,
        pooler_server_conns, pooler_maxwait_us, the :data:`STATS_TOTALS`, pooler_cpu_total_us, pooler_at_s
        (monotonic s), pooler_read_us}``
        (the read's own time, µs); only ``pooler_read_us`` when the console read failed (counted in ``errors``)."""
        started = time.perf_counter()
        try:
            pools = [p for p in self.console.rows("SHOW POOLS") if (p["database"], p["user"]) == (self.database, self.user)]
            stats = [s for s in self.console.rows("SHOW STATS") if s["database"] == self.database]
        except EngineError:
            self.errors += 1
            return {"pooler_read_us": round((time.perf_counter() - started) * 1e6)}
        out: dict[str, Any] = {key: sum(int(p[col]) for p in pools) for key, col in POOL_NOW.items()}
        out["pooler_server_conns"] = sum(int(p.get(col) or 0) for p in pools for col in SERVER_STATES)
        out["pooler_maxwait_us"] = max((int(p["maxwait"]) * 1_000_000 + int(p.get("maxwait_us") or 0)
                                        for p in pools), default=0)
        out.update({key: sum(int(s[col]) for s in stats) for key, col in STATS_TOTALS.items()})
        out["pooler_cpu_total_us"] = self._cpu_us()
        out["pooler_at_s"] = time.monotonic()  # when the totals were read: the CPU's share of the time between two
        return {**out, "pooler_read_us": round((time.perf_counter() - started) * 1e6)}

    def _cpu_us(self) -> int | None:
        """The pooler process's CPU so far (µs), None without its pid or once it is gone."""
        if self.pid is None:
            return None
        try:
            return round(proc_times(self.pid).own_s * 1e6)
        except OSError:
            return None

    def close(self) -> None:
        """Close the console connection."""
        self.console.close()
