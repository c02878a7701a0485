"""``REPLICA=1`` with no DSN: a streaming hot standby of the embedded primary, ``with embedded_standby(primary_dsn,
cfg, log) as dsn:``. The same binaries; ``pg_basebackup -R`` from the primary into its own directory, its own port,
``hot_standby`` on; stopped and removed by the embedded lifecycle (its own watchdog) before the primary
(docs/replicas.md). https://www.postgresql.org/docs/current/hot-standby.html"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import psutil
import psycopg
from psycopg.conninfo import conninfo_to_dict

from bench.engines.embedded_base import EmbeddedError, EmbeddedServer, embedded
from bench.engines.base import EngineError
from bench.errors import QBenchError
from bench.engines.postgres.adapter import connect, connect_dsn, translated
from bench.engines.postgres import commit_mode
from bench.engines.postgres.embedded import PostgresRecipe

__all__ = ["STANDBY_SETTINGS", "StandbyRecipe", "embedded_standby", "primary_ready"]

#: How often the standby's WAL receiver reports its positions (and, with feedback, its xmin) to the primary:
#: PostgreSQL's default is 10 s; the run samples every second.
STATUS_INTERVAL = "1s"
#: The standby's shared buffers: it shares the machine with the primary and the load.
STANDBY_SHARED_BUFFERS = "128MB"
#: The primary's settings a streaming standby needs, and what each must be.
STANDBY_SETTINGS = {"wal_level": ("replica", "logical"), "max_wal_senders": "above 0"}


class StandbyRecipe(PostgresRecipe):
    """The embedded primary's standby: :class:`PostgresRecipe` with ``pg_basebackup`` in place of initdb
    (``-R`` writes ``standby.signal`` and ``primary_conninfo``), its own settings, a probe that only reads."""

    label = "PostgreSQL standby"
    prefix = "qbench-pg-standby-"
    init_word = "pg_basebackup"

    def __init__(self, primary_port: int, pg_version: str, feedback: str, max_delay_s: float):
        super().__init__(pg_version)
        self.primary_port, self.feedback, self.max_delay_s = primary_port, feedback, max_delay_s

    def init_argv(self, srv: EmbeddedServer) -> list[str]:
        """``pg_basebackup -R``: a fast checkpoint on the primary, the WAL streamed beside the copy."""
        return [str(self.bins.bindir / "pg_basebackup"), "-D", str(srv.data_dir), "-R", "-h", "127.0.0.1",
                "-p", str(self.primary_port), "-U", "postgres", "-X", "stream", "--checkpoint=fast", "--no-sync"]

    def extra_settings(self) -> dict[str, str]:
        return {"hot_standby": "on", "hot_standby_feedback": self.feedback,
                "max_standby_streaming_delay": f"{round(self.max_delay_s * 1000)}ms",
                "wal_receiver_status_interval": STATUS_INTERVAL, "shared_buffers": STANDBY_SHARED_BUFFERS}

    def probe(self, srv: EmbeddedServer, timeout: int) -> str | None:
        """``pg_is_in_recovery()`` true: a hot standby accepting reads."""
        try:
            with connect(srv.dsn, connect_timeout_s=timeout, application_name="queue-bench embedded") as conn, \
                    translated():
                if not conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
                    return "the server is not in recovery (not a standby)"
        except EngineError as exc:
            return str(exc)
        return None


def primary_ready(conn: psycopg.Connection) -> tuple[int, str | None]:
    """(the primary's max_connections, why it cannot feed a streaming standby or None): :data:`STANDBY_SETTINGS`."""
    rows = dict(conn.execute("SELECT name, setting FROM pg_settings WHERE name IN "
                             "('wal_level', 'max_wal_senders', 'max_connections')").fetchall())
    if rows.get("wal_level") not in STANDBY_SETTINGS["wal_level"]:
        return int(rows["max_connections"]), f"wal_level is {rows.get('wal_level')}, not replica"
    if int(rows.get("max_wal_senders") or 0) <= 0:
        return int(rows["max_connections"]), "max_wal_senders is 0"
    return int(rows["max_connections"]), None


@contextlib.contextmanager
def embedded_standby(primary_dsn: str, cfg, readers: int, log: Callable[[str], None] = print) -> Iterator[str]:
    """Start the embedded primary's standby (``cfg``: ``PG_VERSION``, ``HOT_STANDBY_FEEDBACK``,
    ``REPLICA_MAX_DELAY_S``), yield its DSN once it accepts reads (and, for a synchronous ``SYNC_COMMIT``, is the
    primary's synchronous standby: :func:`bench.engines.postgres.commit_mode.require_standby`), stop and delete it
    on exit. Its
    ``max_connections``: the primary's (a hot standby needs at least that), or the readers' and the sampler's.
    Raises EmbeddedError (the primary cannot feed it, pg_basebackup failed, no start)."""
    port = int(conninfo_to_dict(primary_dsn)["port"])
    with connect_dsn(primary_dsn, application_name="queue-bench standby check") as conn:
        max_connections, why = primary_ready(conn)
    if why is not None:
        raise EmbeddedError(f"REPLICA: the embedded primary cannot feed a streaming standby: {why}")
    recipe = StandbyRecipe(port, cfg.pg_version, cfg.hot_standby_feedback, cfg.replica_max_delay_s)
    with embedded(recipe, max(max_connections, readers + 10), None, log) as dsn:
        with connect_dsn(primary_dsn, application_name="queue-bench standby check") as conn:
            named = commit_mode.require_standby(conn, cfg.sync_commit)
        try:
            yield dsn
        finally:
            if named:  # before the standby stops: a commit on the primary would wait for it forever
                with contextlib.suppress(QBenchError):  # the primary is gone (FAULTS=failover killed it)
                    with connect_dsn(primary_dsn, application_name="queue-bench standby check") as conn:
                        commit_mode.release_standby(conn)


def postmaster_pid(dsn: str) -> int:
    """The postmaster's pid of the server ``dsn`` reaches (a backend's parent; the server on this host)."""
    with connect_dsn(dsn, application_name="queue-bench standby check") as conn:
        return psutil.Process(conn.execute("SELECT pg_backend_pid()").fetchone()[0]).ppid()
