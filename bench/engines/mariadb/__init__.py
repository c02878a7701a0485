"""MariaDB (PyMySQL): :data:`CAPABILITIES`, no driver import; the engine: :mod:`bench.engines.mariadb.engine`."""

from bench.engines.base import Capabilities
from bench.engines.mariadb.cost import ABSENT, SOURCE

#: What MariaDB honours (the parameter table) and where it differs from PostgreSQL.
CAPABILITIES = Capabilities.from_table("mariadb", label="MariaDB", nowait_error="lock_not_available", vacuum=False,
                                       statement_stats=False, table_rows_estimated=True,
                                       kill_reaches_other_processes=False, calibrator="mariadb-slap",
                                       log_name="InnoDB redo", cost_counters=SOURCE, cost_absent=ABSENT,
                                       migration_sql_refused=(
                                           "MariaDB commits DDL implicitly, so a statement of the user's cannot be "
                                           "checked in a transaction rolled back before the load (a named ddl is "
                                           "checked on an empty copy of the queue table)"))
