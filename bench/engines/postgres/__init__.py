"""PostgreSQL (psycopg 3): its :data:`CAPABILITIES` here, with no driver import; the engine in
:mod:`bench.engines.postgres.engine`."""

from bench.engines.base import Capabilities

#: PostgreSQL honours every value the parameter table allows.
CAPABILITIES = Capabilities.from_table("postgres", label="PostgreSQL", nowait_error="55P03", vacuum=True,
                                       statement_stats=True, table_rows_estimated=False,
                                       kill_reaches_other_processes=True, calibrator="pgbench")
