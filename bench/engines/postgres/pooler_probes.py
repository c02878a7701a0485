"""Probes of what breaks behind a transaction pooler (experiments 21 and 22; docs/poolers.md, "What breaks under
each mode"): a session advisory lock and ``LISTEN``, each measured through a throwaway PgBouncer in transaction
mode and, as the control, in session mode, in front of the probe's database. A run refuses both settings behind a
transaction pool, so these are standalone probes, not runs. Nothing is created in the database: the lock key and
the channel are random, and the lock a transaction-pooled server connection keeps goes with the pooler, which
the probe stops.

Sources: PostgreSQL's advisory locks (a session-level lock "is held until explicitly released or the session
ends", and a session that holds one gets it again: https://www.postgresql.org/docs/current/explicit-locking.html#ADVISORY-LOCKS);
PgBouncer's feature table (session-level advisory locks and ``LISTEN``: "Never" in transaction pooling, "Yes" in
session pooling: https://www.pgbouncer.org/features.html)."""

from __future__ import annotations

import contextlib
import secrets
import statistics
import threading
import time
from typing import Callable, Iterator

import psycopg

from bench.engines.postgres.adapter import connect, listen, translated, try_advisory_lock
from bench.engines.postgres.pooler.pgbouncer import embedded_pgbouncer

#: The pool modes each probe measures: the one that breaks, then its control.
MODES = ("transaction", "session")
#: Server connections in the probes' pools: two, so that a second client can be served while the first is
#: in a transaction (the advisory lock's pair), and no more than the probes need.
PROBE_POOL_SIZE = 2
#: Client connections each probe opens through its pooler.
PROBE_CLIENTS = 3
#: ``LISTEN`` probe: notifications sent, the spacing between them (s), and how long the listener still waits
#: after the last one (s): far above a loopback round trip, so a notification not received by then is lost.
NOTIFICATIONS = 20
NOTIFY_SPACING_S = 0.01
DRAIN_S = 1.0


@contextlib.contextmanager
def _pooled(dsn: str, mode: str, log: Callable[[str], None]) -> Iterator[str]:
    """The DSN of a throwaway PgBouncer in ``mode`` (:data:`PROBE_POOL_SIZE` server connections) in front of
    ``dsn``, stopped after the block. Raises ConfigError (``POOLER``: no binary) and EmbeddedError."""
    with embedded_pgbouncer(dsn, mode, PROBE_POOL_SIZE, PROBE_CLIENTS, log=log) as pooler:
        yield pooler.dsn


def _lock_key() -> int:
    """A random positive bigint advisory lock key: no other session's lock shares it."""
    return secrets.randbits(62) + 1


def _holders(direct: psycopg.Connection, key: int) -> list[int]:
    """The backend pids holding session advisory lock ``key`` in this database, read on the server
    (``pg_locks``: a bigint key is ``classid`` its high 32 bits, ``objid`` its low ones, ``objsubid`` 1)."""
    return [r[0] for r in direct.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND classid = %s::bigint::oid AND objid = %s::bigint::oid ORDER BY pid",
        ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchall()]


def advisory_lock_pair(pooled_dsn: str, direct_dsn: str) -> dict:
    """Two clients A and B through ``pooled_dsn``: A takes ``pg_try_advisory_lock(k)`` in a transaction and
    commits; B opens a transaction, tries the same lock and stays in it; A runs another transaction. Returns
    ``{"a_pid", "a_got", "b_pid", "b_got", "a_later_pid", "holder_pids", "excluded"}``: the backend pid each
    transaction ran on, what each try returned, the backends holding ``k`` (read direct, while B is in its
    transaction) and ``excluded``, 1 when the lock excluded B and is still on the server connection A runs on
    (``b_got`` false and ``a_later_pid`` among the holders), else 0; None when A did not get the lock."""
    key = _lock_key()
    a, b = (connect(pooled_dsn, application_name=f"queue-bench probe {n}") for n in ("A", "B"))
    direct = connect(direct_dsn, application_name="queue-bench probe")
    try:
        with translated():
            with a.transaction():
                a_pid, a_got = try_advisory_lock(a, key)
            b.execute("BEGIN")
            b_pid, b_got = try_advisory_lock(b, key)
            with a.transaction():
                (a_later_pid,) = a.execute("SELECT pg_backend_pid()").fetchone()
            holders = _holders(direct, key)
            b.execute("COMMIT")
    finally:
        for conn in (a, b, direct):
            conn.close()
    excluded = None if not a_got else int(not b_got and a_later_pid in holders)
    return {"a_pid": a_pid, "a_got": a_got, "b_pid": b_pid, "b_got": b_got, "a_later_pid": a_later_pid,
            "holder_pids": holders, "excluded": excluded}


def advisory_lock_pool_probe(dsn: str, schema: str, log: Callable[[str], None] = lambda _line: None) -> dict:
    """Experiment 21: :func:`advisory_lock_pair` through a throwaway PgBouncer in front of ``dsn`` in each of
    :data:`MODES`; returns each pair's facts prefixed by its mode (``transaction_excluded``,
    ``session_b_got``, ...) and ``pool_size``. ``schema`` is unused (nothing is created). Raises ConfigError
    (``POOLER``: no PgBouncer), EmbeddedError and EngineError."""
    del schema  # the probe creates nothing
    facts: dict = {"pool_size": PROBE_POOL_SIZE}
    for mode in MODES:
        with _pooled(dsn, mode, log) as pooled_dsn:
            facts.update({f"{mode}_{k}": v for k, v in advisory_lock_pair(pooled_dsn, dsn).items()})
    return facts


def _send(dsn: str, channel: str, count: int, sent: dict[int, float], done: threading.Event) -> None:
    """``count`` ``NOTIFY channel, '<i>'`` from a direct connection, each in its own transaction,
    :data:`NOTIFY_SPACING_S` apart; ``sent[i]`` the ``time.monotonic()`` as each is sent (autocommit: it is
    delivered at the commit that ends the statement)."""
    try:
        with connect(dsn, application_name="queue-bench probe producer") as producer:
            for i in range(count):
                sent[i] = time.monotonic()
                producer.execute("SELECT pg_notify(%s, %s)", (channel, str(i)))
                time.sleep(NOTIFY_SPACING_S)
    finally:
        done.set()


def listen_through(listen_dsn: str, direct_dsn: str, count: int = NOTIFICATIONS) -> dict:
    """A listener ``LISTEN``s through ``listen_dsn`` and waits while a producer sends ``count`` notifications
    direct to the server. Returns ``{"listen_pid", "listen_backend_alive", "sent", "received", "lost",
    "pickup_ms_p50", "pickup_ms_max"}``: the backend the ``LISTEN`` ran on and whether it was still connected
    after the wait, the counts, and the time from sending a notification (its own transaction) to its arrival at
    the listener (None when none arrived)."""
    channel = f"qbench_probe_{secrets.token_hex(4)}"
    listener = connect(listen_dsn, application_name="queue-bench probe listener")
    sent: dict[int, float] = {}
    arrived: dict[int, float] = {}
    try:
        with translated():
            with listener.transaction():
                (listen_pid,) = listener.execute("SELECT pg_backend_pid()").fetchone()
                listen(listener, channel)
            done = threading.Event()
            producer = threading.Thread(target=_send, args=(direct_dsn, channel, count, sent, done), daemon=True)
            producer.start()
            while not done.is_set() and len(arrived) < count:
                for note in listener.notifies(timeout=0.1, stop_after=count - len(arrived)):
                    arrived[int(note.payload)] = time.monotonic()
            if len(arrived) < count:  # the last ones may still be on their way
                for note in listener.notifies(timeout=DRAIN_S, stop_after=count - len(arrived)):
                    arrived[int(note.payload)] = time.monotonic()
            producer.join()
        with connect(direct_dsn, application_name="queue-bench probe") as direct, translated():
            alive = bool(direct.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                        (listen_pid,)).fetchone()[0])
    finally:
        listener.close()
    pickups = sorted((arrived[i] - sent[i]) * 1000 for i in arrived if i in sent)
    return {"listen_pid": listen_pid, "listen_backend_alive": alive, "sent": len(sent), "received": len(arrived),
            "lost": len(sent) - len(arrived),
            "pickup_ms_p50": round(statistics.median(pickups), 3) if pickups else None,
            "pickup_ms_max": round(pickups[-1], 3) if pickups else None}


def listen_pool_probe(dsn: str, schema: str, log: Callable[[str], None] = lambda _line: None) -> dict:
    """Experiment 22: :func:`listen_through` a throwaway PgBouncer in front of ``dsn`` in each of :data:`MODES`;
    returns each one's facts prefixed by its mode (``transaction_lost``, ``session_received``, ...).
    ``schema`` is unused (nothing is created). Raises ConfigError (``POOLER``), EmbeddedError and EngineError."""
    del schema  # the probe creates nothing
    facts: dict = {"pool_size": PROBE_POOL_SIZE, "notify_spacing_ms": NOTIFY_SPACING_S * 1000, "drain_s": DRAIN_S}
    for mode in MODES:
        with _pooled(dsn, mode, log) as pooled_dsn:
            facts.update({f"{mode}_{k}": v for k, v in listen_through(pooled_dsn, dsn).items()})
    return facts
