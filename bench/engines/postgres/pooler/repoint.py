"""The embedded PgBouncer re-pointed at another server (after a failover, the promoted standby: docs/failover.md,
"Through the embedded pooler"). PgBouncer 1.18 follows no promotion by itself: its ``[databases]`` line names one
host and port. On its console (man 1 pgbouncer, "Admin console", PgBouncer 1.18:
https://manpages.ubuntu.com/manpages/lunar/en/man1/pgbouncer.1.html): ``PAUSE db`` waits until every server
connection of the database is released (transaction mode: its transaction ended; session mode: its client gone)
and closes them, new queries waiting; ``RELOAD`` re-reads ``pgbouncer.ini`` and, its connection string changed,
closes the old server connections as ``RECONNECT`` would (so no RECONNECT is sent); ``RESUME db`` lets the waiting
queries through to new server connections. A server connection to a killed primary is already closed (its socket
reset), so ``PAUSE`` has none to wait for; one that a client still holds in a transaction keeps it waiting: after
:data:`PAUSE_WAIT_S` the tool sends ``KILL db`` (every client and server connection of the database dropped at once,
the man page's "emergency failover"; it is refused during a global ``PAUSE``, hence the database's), and stops
waiting for the PAUSE's answer, which 1.18 then never sends. One more thing stands between ``RESUME`` and the new server: the pool's logins to the killed
primary failed, and PgBouncer makes no new attempt for ``server_login_retry`` (15 s by default) after the last
failure (man 5 pgbouncer, ``server_login_retry``), whatever the new ``[databases]`` line says (seen on 1.18: the
waiting clients were served only then). So the re-point sets it to 0 on the console (``SET``) before ``RESUME``
and back to its value once the pool has a server connection again (or after :data:`FIRST_SERVER_WAIT_S`)."""

from __future__ import annotations

import dataclasses
import pathlib
import time
from typing import Any, Callable

from psycopg import ClientCursor, pq

from bench.engines.base import EngineError
from bench.engines.postgres.adapter import conninfo_params, connect, translated
from bench.engines.postgres.pooler.settings import database_line

__all__ = ["PAUSE_WAIT_S", "repoint"]

#: How long ``PAUSE db`` may wait for server connections to be released before ``KILL db`` drops them.
PAUSE_WAIT_S = 5.0
#: How long the re-point waits for the pool's first server connection to the new server before it restores
#: ``server_login_retry`` anyway.
FIRST_SERVER_WAIT_S = 5.0
#: ``SHOW POOLS`` columns that count a pool's server connections (connecting and being tested too).
SERVER_STATES = ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login")
#: The application name of the re-point's console connections (``SHOW CLIENTS``).
APPLICATION_NAME = "queue-bench pooler re-point"


def _command(conn, text: str) -> list[dict]:
    """One console command (the console speaks the simple query protocol only); its rows, if any, as dicts."""
    with translated():
        cur = ClientCursor(conn)
        cur.execute(text)
        if cur.description is None:
            return []
        names = [col.name for col in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]


def _servers(conn, database: str, user: str) -> int:
    """The server connections of pool (``database``, ``user``) now, in any state (``SHOW POOLS``)."""
    return sum(sum(int(pool.get(state) or 0) for state in SERVER_STATES) for pool in _command(conn, "SHOW POOLS")
               if (pool["database"], pool["user"]) == (database, user))


def _rewrite(config_path: str, old_line: str, new_line: str) -> None:
    """Replace the ``[databases]`` line ``old_line`` of ``config_path`` (its owner and mode kept). Raises
    ValueError when the file does not have it."""
    path = pathlib.Path(config_path)
    text = path.read_text()
    if old_line not in text:
        raise ValueError(f"{config_path} has no [databases] line for {old_line.split(' = ')[0]}")
    path.write_text(text.replace(old_line, new_line, 1))


def repoint(pooler: Any, target_dsn: str, *, pause_wait_s: float = PAUSE_WAIT_S,
            first_server_wait_s: float = FIRST_SERVER_WAIT_S, on_resume: Callable[[], None] | None = None) -> dict:
    """Point the embedded pooler ``pooler`` (a :class:`.pgbouncer.Pooler`) at ``target_dsn``'s host and port, on
    its console: ``PAUSE db`` (``KILL db`` after ``pause_wait_s``: :func:`_pause`), its ``pgbouncer.ini``
    rewritten, ``RELOAD``, ``server_login_retry`` 0, ``RESUME db``; ``server_login_retry`` restored once the pool
    has a server connection; ``on_resume()`` called as RESUME is answered. ``{"repoint_s": s from PAUSE sent to RESUME answered, "pause_s": PAUSE's own wait,
    "killed": True when KILL had to end it, "first_server_s": s from RESUME to the pool's first server connection
    (None: none within ``first_server_wait_s``, e.g. no client asked for one), "host", "port": the new server}``. Raises the adapter's EngineError (the console) or
    OSError/ValueError (the file); the database is left resumed whenever PAUSE was sent."""
    params = conninfo_params(target_dsn)
    old = pooler.upstream
    new = dataclasses.replace(old, host=params["host"], port=int(params["port"]))
    with connect(pooler.admin_dsn, connect_timeout_s=5, application_name=APPLICATION_NAME) as ctl:
        retry = next(row["value"] for row in _command(ctl, "SHOW CONFIG") if row["key"] == "server_login_retry")
        started = time.perf_counter()
        try:
            killed = _pause(pooler.admin_dsn, ctl, old.dbname, pause_wait_s)
            paused = time.perf_counter()
            _rewrite(pooler.config_path, database_line(old), database_line(new))
            _command(ctl, "RELOAD")
            _command(ctl, "SET server_login_retry = 0")
        finally:
            _command(ctl, f"RESUME {old.dbname}")
        resumed = time.perf_counter()
        if on_resume is not None:
            on_resume()
        first = None
        try:
            while first is None and time.perf_counter() - resumed < first_server_wait_s:
                if _servers(ctl, old.dbname, old.user):
                    first = round(time.perf_counter() - resumed, 3)
                else:
                    time.sleep(0.01)
        finally:
            _command(ctl, f"SET server_login_retry = {retry}")
    return {"repoint_s": round(resumed - started, 3), "pause_s": round(paused - started, 3), "killed": killed,
            "first_server_s": first, "host": new.host, "port": new.port}


def _pause(admin_dsn: str, ctl, dbname: str, wait_s: float) -> bool:
    """``PAUSE dbname`` sent on a console connection of its own and awaited for ``wait_s``; if it has not returned
    by then, ``KILL dbname`` on ``ctl`` (the database is then paused too; PgBouncer 1.18 never answers the waiting
    PAUSE, so its connection is dropped). True when KILL was needed. Raises EngineError when PAUSE is refused."""
    waiter = connect(admin_dsn, connect_timeout_s=5, application_name=APPLICATION_NAME)
    try:
        pg = waiter.pgconn
        pg.send_query(f"PAUSE {dbname}".encode())
        deadline = time.perf_counter() + wait_s
        while True:
            pg.consume_input()
            if not pg.is_busy():
                break
            if time.perf_counter() >= deadline:
                _command(ctl, f"KILL {dbname}")
                return True
            time.sleep(0.01)
        results = []
        while (res := pg.get_result()) is not None:
            results.append(res)
    finally:
        waiter.close()  # also when its PAUSE is still unanswered
    failed = [r for r in results if r.status != pq.ExecStatus.COMMAND_OK]
    if failed:
        raise EngineError("pooler_console", (failed[0].error_message or b"").decode(errors="replace").strip()
                          or f"PAUSE {dbname} failed")
    return False
