"""``FAULTS=failover`` on the embedded primary and standby (docs/failover.md): the run's multi-host DSN, and the
window's actions: the standby's WAL receiver stopped (SIGSTOP) for ``wal_stop_s`` before the kill, every process of
the primary killed (frozen with SIGSTOP first, then SIGKILL: a SIGKILL of the postmaster alone leaves its backends
able to commit), the standby promoted ``PROMOTE_AFTER_S`` later (``pg_promote()``), and through the embedded
pooler, that pooler re-pointed at it ``REPOINT_AFTER_S`` after the promotion (:mod:`.pooler.repoint`). Sources:
https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-MULTIPLE-HOSTS,
https://www.postgresql.org/docs/current/functions-admin.html#FUNCTIONS-RECOVERY-CONTROL."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from typing import Any, Callable

import psutil

from bench.engines.postgres.adapter import DRIVER, conninfo_params, connect_dsn, make_conninfo
from bench.errors import QBenchError

__all__ = ["PROMOTE_WAIT_S", "RECORD_KEYS", "Failover", "failover_record", "identity", "multi_host", "since_start"]

#: How long ``pg_promote`` may take before the promotion counts as failed (PostgreSQL's default is 60 s).
PROMOTE_WAIT_S = 60
#: How long the primary's killed processes may take to be gone.
KILL_WAIT_S = 10.0


def multi_host(primary_dsn: str, standby_dsn: str) -> str:
    """One connection string naming both servers, the primary first, with ``target_session_attrs=read-write``:
    libpq tries each in turn and keeps the first that accepts writes, so a connection made after the promotion
    reaches the new primary (as an application's libpq does behind two hosts)."""
    primary, standby = conninfo_params(primary_dsn), conninfo_params(standby_dsn)
    return make_conninfo(**{**primary, "host": f"{primary['host']},{standby['host']}",
                            "port": f"{primary['port']},{standby['port']}", "target_session_attrs": "read-write"})


#: ``run.json`` ``failover``'s keys, caused (``FAULTS=failover``) or observed (:mod:`.failover_watch`): the other's null.
RECORD_KEYS = ("caused", "promote_after_s", "wal_stop_s", "wal_receiver_stopped_at_s", "killed_at_s", "processes_killed",
               "promoted_at_s", "promotion_s", "promoted", "noticed_at_s", "old_primary_last_answered_s",
               "new_primary_first_answered_s", "gap_s", "error", "before", "after", "log_position", "repoint_after_s",
               "repointed_at_s", "repoint_s", "promotion_to_repoint_s", "repoint_first_server_s", "repoint_kill",
               "errors_kill_to_repoint")


def failover_record(**given: Any) -> dict[str, Any]:
    """A ``failover`` record: every key of :data:`RECORD_KEYS`, None unless ``given``."""
    return {**dict.fromkeys(RECORD_KEYS), **given}


def since_start(clock, n_warm: int) -> float:
    """Now, in seconds since the measured start."""
    return round(clock.now_s() - n_warm, 3)


class Failover:
    """The failover of one run between ``primary_dsn`` and ``standby_dsn`` (single hosts, the tool's own): ``dsn``
    names both (:func:`multi_host`) for the tool's own connections, and the workers' unless they go through
    ``pooler`` (the embedded :class:`.pooler.Pooler`, re-pointed ``repoint_after_s`` after the promotion): see
    :meth:`workers_dsn`; the primary's postmaster found at construction; :meth:`run` carries the window out;
    ``record``: what it did and when (s since the measured start), for ``run.json`` ``failover``."""

    def __init__(self, primary_dsn: str, standby_dsn: str, promote_after_s: float, pooler: Any = None,
                 repoint_after_s: float = 0.0):
        self.standby_dsn, self.promote_after_s = standby_dsn, promote_after_s
        self.pooler, self.repoint_after_s = pooler, repoint_after_s
        self.dsn = multi_host(primary_dsn, standby_dsn)
        self.position: Callable[[], int | None] | None = None  # the claim log's length so far (:meth:`start`)
        self.errors: Callable[[], Counter] | None = None  # the workers' errors by kind so far (set by the run)
        self._errors_at_kill: Counter = Counter()
        with connect_dsn(primary_dsn, application_name="queue-bench failover") as conn:
            self.postmaster = psutil.Process(conn.execute("SELECT pg_backend_pid()").fetchone()[0]).parent()
            self.old_system = identity(conn)
        self.record = failover_record(caused=True, promote_after_s=promote_after_s, promoted=False,
                                      before=self.old_system,
                                      repoint_after_s=repoint_after_s if pooler is not None else None)

    def start(self, position: Callable[[], int | None], clock, n_warm: int, log: Callable[[str], None]) -> list:
        """Note ``position()`` (the claim log's length, read as the promotion begins); nothing to watch: the
        window (:meth:`run`) causes the failover. Returns no greenlet (:class:`.failover_watch.FailoverWatch`'s
        shape)."""
        self.position = position
        return []

    def workers_dsn(self, dsn: str) -> str:
        """The DSN of the workers, producers and reaper: ``dsn`` (the pooler's) through the embedded pooler, which
        the tool re-points; else :attr:`dsn`, both servers."""
        return dsn if self.pooler is not None else self.dsn

    def run(self, fault, clock, n_warm: int, log: Callable[[str], None]) -> None:
        """From ``fault.start_s - fault.wal_stop_s``: stop the WAL receiver; at ``start_s`` kill the primary; at
        ``start_s + promote_after_s`` promote the standby; through the embedded pooler, ``repoint_after_s`` later
        re-point it. Errors are recorded (``error``), never raised."""
        receiver = None
        try:
            self.record["wal_stop_s"] = fault.wal_stop_s
            if fault.wal_stop_s > 0:
                receiver = self.stop_receiver()
                self.record["wal_receiver_stopped_at_s"] = since_start(clock, n_warm)
            clock.sleep_until(n_warm + fault.start_s)
            self.record["killed_at_s"] = since_start(clock, n_warm)
            self._errors_at_kill = Counter(self.errors()) if self.errors else Counter()
            self.record["processes_killed"] = self.kill_primary()
            log(f"failover: the primary's {self.record['processes_killed']} processes killed at "
                f"{self.record['killed_at_s']:g} s")
            if receiver is not None:
                receiver.resume()  # it finds its primary gone
                receiver = None
            clock.sleep_until(n_warm + fault.start_s + self.promote_after_s)
            self._promote(clock, n_warm)
            log(f"failover: the standby promoted in {self.record['promotion_s']:.2f} s, at "
                f"{self.record['promoted_at_s']:g} s")
            if self.pooler is not None:
                self._repoint(clock, n_warm, log)
        except (psutil.Error, OSError, ValueError, QBenchError, *DRIVER.errors) as err:
            self.record["error"] = str(err).splitlines()[0] if str(err) else type(err).__name__
            log(f"failover: {self.record['error']}")
        finally:
            if receiver is not None:
                _quietly(receiver.resume)

    def _repoint(self, clock, n_warm: int, log: Callable[[str], None]) -> None:
        """``repoint_after_s`` after the promotion: the embedded pooler re-pointed at the promoted standby
        (:func:`.pooler.repoint.repoint`), timed (``repointed_at_s``: RESUME answered); the workers' errors by kind
        from the kill to then (``errors_kill_to_repoint``)."""
        from bench.engines.postgres.pooler.repoint import repoint  # here: only a failover through the pooler

        clock.sleep_until(n_warm + self.record["promoted_at_s"] + self.repoint_after_s)
        rec, at_kill = self.record, self._errors_at_kill

        def resumed() -> None:  # the re-point's instant, and the errors until then
            now = Counter(self.errors()) if self.errors else Counter()
            rec["repointed_at_s"] = since_start(clock, n_warm)
            rec["errors_kill_to_repoint"] = {kind: n - at_kill[kind] for kind, n in sorted(now.items()) if n > at_kill[kind]}

        done = repoint(self.pooler, self.standby_dsn, on_resume=resumed)
        rec["repoint_s"], rec["repoint_first_server_s"], rec["repoint_kill"] = (done["repoint_s"],
                                                                               done["first_server_s"], done["killed"])
        rec["promotion_to_repoint_s"] = round(rec["repointed_at_s"] - rec["promoted_at_s"], 3)
        log(f"failover: the pooler re-pointed at {done['host']}:{done['port']} at {rec['repointed_at_s']:g} s "
            f"(PAUSE to RESUME {rec['repoint_s']:.2f} s{', KILL needed' if done['killed'] else ''})")

    def stop_receiver(self) -> psutil.Process:
        """SIGSTOP the standby's WAL receiver: it neither receives nor acknowledges WAL until resumed."""
        with connect_dsn(self.standby_dsn, application_name="queue-bench failover") as conn:
            pid = conn.execute("SELECT pid FROM pg_stat_wal_receiver").fetchone()[0]
        receiver = psutil.Process(pid)
        receiver.suspend()
        return receiver

    def kill_primary(self) -> int:
        """Freeze the postmaster and every process under it (SIGSTOP), then SIGKILL them all; their count."""
        procs = [self.postmaster, *self.postmaster.children(recursive=True)]
        for proc in procs:
            _quietly(lambda p=proc: os.kill(p.pid, signal.SIGSTOP))
        for proc in procs:
            _quietly(lambda p=proc: os.kill(p.pid, signal.SIGKILL))
        psutil.wait_procs(procs, timeout=KILL_WAIT_S)
        return len(procs)

    def _promote(self, clock, n_warm: int) -> None:
        """``pg_promote(true, PROMOTE_WAIT_S)`` on the standby, timed; the new primary's identity read."""
        with connect_dsn(self.standby_dsn, application_name="queue-bench failover") as conn:
            # every event logged so far was acknowledged by the old primary: none can return after the kill
            self.record["log_position"] = self.position() if self.position else None
            started = time.perf_counter()
            promoted = conn.execute("SELECT pg_promote(true, %s)", (PROMOTE_WAIT_S,)).fetchone()[0]
            self.record["promotion_s"] = round(time.perf_counter() - started, 3)
            self.record["promoted_at_s"] = since_start(clock, n_warm)
            self.record["promoted"] = bool(promoted)
            self.record["after"] = identity(conn)


def identity(conn) -> dict:
    """What tells one primary from another: system identifier, timeline (of the WAL it writes now), postmaster
    start time."""
    system, timeline = conn.execute("SELECT system_identifier, substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) "
                                    "FROM pg_control_system()").fetchone()
    started = conn.execute("SELECT extract(epoch FROM pg_postmaster_start_time())::float8").fetchone()[0]
    return {"system_identifier": str(system), "timeline": int(timeline, 16), "postmaster_start_unix": round(started, 3)}


def _quietly(action) -> None:
    """``action()``, a process already gone ignored."""
    try:
        action()
    except (psutil.NoSuchProcess, ProcessLookupError):
        pass

