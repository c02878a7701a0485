"""PostgreSQL (psycopg 3): its :data:`CAPABILITIES` here, with no driver import; the engine in
:mod:`bench.engines.postgres.engine`."""

from bench.engines.base import Capabilities

#: How the monitor reads what a job costs (bench/engines/postgres/monitor.py, ``_STATS``).
COST_SOURCE = ("pg_current_wal_lsn() and pg_stat_wal (the whole server's WAL, the monitor included), the queue "
               "table's pg_stat_user_tables row counts (rows_read: seq_tup_read + idx_tup_fetch), "
               "pg_stat_database's buffers")

#: PostgreSQL honours every value the parameter table allows.
CAPABILITIES = Capabilities.from_table("postgres", label="PostgreSQL", nowait_error="55P03", vacuum=True,
                                       statement_stats=True, table_rows_estimated=False,
                                       kill_reaches_other_processes=True, calibrator="pgbench",
                                       log_name="WAL", cost_counters=COST_SOURCE)
