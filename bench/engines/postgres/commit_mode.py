"""``SYNC_COMMIT`` on PostgreSQL: the primary's ``synchronous_standby_names`` for a synchronous mode with the embedded
standby, the refusal of a DSN's server without one, and the mode as a worker's session has it, read back for
``run.json`` (docs/failover.md). https://www.postgresql.org/docs/current/warm-standby.html#SYNCHRONOUS-REPLICATION"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from bench.config.failover_parameters import ANY_STANDBY, STANDBY_MODES, check_standby_names
from bench.config.queue_definition import QueueDefinition
from bench.engines.embedded_base import EmbeddedError
from bench.engines.postgres.adapter import translated
from bench.engines.postgres.adapter.wire import rows
from bench.engines.postgres.sessions import _open, worker_settings

__all__ = ["SYNC_WAIT_S", "applied", "check_server", "release_standby", "require_standby", "standby_names"]

#: How long the embedded primary waits for its standby to report itself synchronous (``pg_stat_replication``
#: ``sync_state``) once named: it streams already, so a status message (``wal_receiver_status_interval``, 1 s).
SYNC_WAIT_S = 30.0


def standby_names(conn: psycopg.Connection) -> str:
    """The server's ``synchronous_standby_names``."""
    return conn.execute("SHOW synchronous_standby_names").fetchone()[0]


def check_server(conn: psycopg.Connection, cfg: Any) -> None:
    """Refuse (ConfigError ``SYNC_COMMIT``) a mode that needs a synchronous standby on a DSN's server with none
    named (:func:`bench.config.failover_parameters.check_standby_names`); before anything is created."""
    check_standby_names(cfg.sync_commit, standby_names(conn))


def require_standby(conn: psycopg.Connection, sync_commit: str) -> str | None:
    """For a mode of :data:`STANDBY_MODES`: set the embedded primary's ``synchronous_standby_names`` to any
    standby (``ALTER SYSTEM``, reloaded) and wait until its one standby is ``sync``; the value set, or None (other
    modes: left empty). Raises EmbeddedError when the standby does not become synchronous in :data:`SYNC_WAIT_S`."""
    if sync_commit not in STANDBY_MODES:
        return None
    conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{ANY_STANDBY}'")
    conn.execute("SELECT pg_reload_conf()")
    deadline = time.monotonic() + SYNC_WAIT_S
    while time.monotonic() < deadline:
        if conn.execute("SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')").fetchone()[0]:
            return ANY_STANDBY
        time.sleep(0.1)
    release_standby(conn)
    raise EmbeddedError(f"REPLICA: the standby did not become synchronous within {SYNC_WAIT_S:g} s of "
                        f"synchronous_standby_names = '{ANY_STANDBY}'")


def release_standby(conn: psycopg.Connection) -> None:
    """Empty the primary's ``synchronous_standby_names`` again (before its standby stops: a commit would wait
    for it forever)."""
    conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
    conn.execute("SELECT pg_reload_conf()")


def applied(dsn: str, admin: psycopg.Connection, cfg: Any, defn: QueueDefinition) -> dict:
    """``run.json`` ``commit_mode``: ``SYNC_COMMIT`` as asked, ``synchronous_commit`` read back (``SHOW``) on a
    session opened as a worker's (``dsn``, the workers' settings and variant: ``SET LOCAL`` behind a transaction
    pool), the primary's ``synchronous_standby_names``. Raises ConnectFailed, EngineError."""
    session = _open(dsn, cfg, "queue-bench commit mode", worker_settings(defn, cfg), {})
    try:
        with translated(lambda: session.broken):
            shown = rows(session.query(b"SHOW synchronous_commit"))[0][0]
    finally:
        session.close()
    return {"asked": cfg.sync_commit, "synchronous_commit": shown.decode() if isinstance(shown, bytes) else shown,
            "synchronous_standby_names": standby_names(admin),
            "read_on": "a session opened as a worker's (its DSN, settings and session variant)"}
