"""MariaDB (PyMySQL): its :data:`CAPABILITIES` here, with no driver import; the engine in
:mod:`bench.engines.mariadb.engine`."""

from bench.engines.base import Capabilities

#: What MariaDB honours (from the parameter table) and where it differs from PostgreSQL: InnoDB keeps
#: old row versions in its undo log (no vacuum), per-statement figures are not read, the table's rows
#: are InnoDB's estimate, and worker connections are known by the ids this process registered.
CAPABILITIES = Capabilities.from_table("mariadb", label="MariaDB", nowait_error="lock_not_available", vacuum=False,
                                       statement_stats=False, table_rows_estimated=True,
                                       kill_reaches_other_processes=False, calibrator="mariadb-slap")
