"""What a job costs a MariaDB server, from its global status variables (docs/results.md, "Cost per job on
MariaDB"): each of the monitor's cost counters as sums and differences of status variables, all server-wide.
Status variables: https://mariadb.com/kb/en/server-status-variables/,
https://mariadb.com/kb/en/innodb-status-variables/. No driver import."""

from __future__ import annotations

from typing import Mapping

from bench.results.run_files import COST_COUNTERS, CPU_COUNTERS

#: The ``Handler_read_*`` row read requests, summed as ``rows_read``.
HANDLER_READS = ("Handler_read_first", "Handler_read_key", "Handler_read_last", "Handler_read_next",
                 "Handler_read_prev", "Handler_read_rnd", "Handler_read_rnd_next")

#: Sample key (:data:`COST_COUNTERS`) -> (status variables added, status variables subtracted).
STATUS_COUNTERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "wal_lsn": (("Innodb_os_log_written",), ()),
    "tuples_inserted_total": (("Handler_write",), ()),
    "tuples_updated_total": (("Handler_update",), ()),
    "tuples_deleted_total": (("Handler_delete",), ()),
    "buffers_hit_total": (("Innodb_buffer_pool_read_requests",), ("Innodb_buffer_pool_reads",)),
    "buffers_read_total": (("Innodb_buffer_pool_reads",), ()),
    "rows_read_total": (HANDLER_READS, ()),
}

#: Every status variable the monitor reads for :data:`STATUS_COUNTERS`.
STATUS_NAMES = tuple(sorted({n for plus, minus in STATUS_COUNTERS.values() for n in plus + minus}))

#: The intervals.csv cost columns MariaDB has no counter for.
ABSENT = tuple(column for key, column in COST_COUNTERS.items()
               if key not in STATUS_COUNTERS and key != CPU_COUNTERS["backends"])

#: How the figures are read (``Capabilities.cost_counters``).
SOURCE = ("SHOW GLOBAL STATUS, every figure the whole server's (all tables and sessions, the monitor's own "
          "reads included): Innodb_os_log_written (InnoDB redo bytes, as wal_bytes); Handler_write, "
          "Handler_update, Handler_delete (rows written, updated and deleted in any table, as tuples_*: the "
          "fencing token's NOCACHE sequence writes a row at each NEXTVAL); the Handler_read_* sum (row read "
          "requests, as rows_read); Innodb_buffer_pool_read_requests less Innodb_buffer_pool_reads (as "
          "buffers_hit) and Innodb_buffer_pool_reads (pages read from disk, as buffers_read); server CPU, when the "
          "server is on this host: the mariadbd process's from /proc, one process whose threads are the sessions' "
          "and the server's own together (the monitor's queries included), all in server_cpu_backends_us")


def cost_sample(status: Mapping[str, int] | None) -> dict[str, int | None]:
    """Every :data:`COST_COUNTERS` sample key from ``status`` (status variable name, any case -> value): None
    for a key MariaDB has no counter for, a variable the server lacks, or no ``status`` at all."""
    values = {name.lower(): value for name, value in (status or {}).items()}
    out = dict.fromkeys(COST_COUNTERS)
    for key, (plus, minus) in STATUS_COUNTERS.items():
        if all(n.lower() in values for n in plus + minus):
            out[key] = sum(values[n.lower()] for n in plus) - sum(values[n.lower()] for n in minus)
    return out
