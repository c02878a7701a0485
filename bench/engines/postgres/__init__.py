"""PostgreSQL (psycopg 3): its :data:`CAPABILITIES` here, with no driver import; the engine in
:mod:`bench.engines.postgres.engine`."""

from bench.engines.base import Capabilities

#: How the monitor reads what a job costs (bench/engines/postgres/monitor.py, ``_STATS``).
COST_SOURCE = ("pg_current_wal_lsn() and pg_stat_wal (the whole server's WAL, the monitor included), the queue "
               "table's pg_stat_user_tables row counts (rows_read: seq_tup_read + idx_tup_fetch, the monitor's "
               "counts included), pg_stat_database's buffers; server CPU from /proc when the server is on this host: "
               "the workers' backends (server_cpu_backends_us) and the postmaster with its background processes "
               "(server_cpu_background_us) summed as server_cpu_us, the tool's monitor's backends apart and left out")
#: The cost columns read from the cumulative statistics, which each session publishes up to a second late
#: (https://www.postgresql.org/docs/current/monitoring-stats.html#MONITORING-STATS-SETUP).
COST_DELAYED = ("wal_records", "wal_fpi", "tuples_inserted", "tuples_updated", "tuples_hot_updated", "tuples_deleted",
                "buffers_hit", "buffers_read", "rows_read")

#: PostgreSQL honours every value the parameter table allows.
CAPABILITIES = Capabilities.from_table("postgres", label="PostgreSQL", nowait_error="55P03", vacuum=True,
                                       statement_stats=True, table_rows_estimated=False,
                                       kill_reaches_other_processes=True, calibrator="pgbench",
                                       log_name="WAL", cost_counters=COST_SOURCE,
                                       cost_delayed=COST_DELAYED)
