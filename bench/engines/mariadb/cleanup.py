"""``qbench clean`` on MariaDB: find and drop the databases this tool created, and only those.

A database is the tool's when its comment is :data:`bench.engines.mariadb.db.SCHEMA_MARK`
(``CREATE DATABASE … COMMENT``, MariaDB 10.5+). One whose named lock ``qbench:<name>`` is held
(a run in progress, :func:`db.lock_schema`) is left alone and reported, and so is one that
objects in other databases depend on: a foreign key referencing its tables, or a view that
names it (``DROP DATABASE`` would break them).
"""

from __future__ import annotations

from bench.engines.common import ToolSchema
from bench.engines.mariadb import db

__all__ = ["clean", "tool_schemas"]

_LIST = """
SELECT s.SCHEMA_NAME, count(t.TABLE_NAME), coalesce(sum(t.TABLE_ROWS), 0),
       coalesce(sum(t.DATA_LENGTH + t.INDEX_LENGTH), 0)
FROM information_schema.SCHEMATA s
LEFT JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = s.SCHEMA_NAME AND t.TABLE_TYPE = 'BASE TABLE'
WHERE s.SCHEMA_COMMENT = %s
GROUP BY s.SCHEMA_NAME ORDER BY s.SCHEMA_NAME"""




def tool_schemas(conn) -> list[ToolSchema]:
    """Every database on the server that carries the tool's mark, by name (rows and sizes are
    InnoDB's estimates from ``information_schema.TABLES``)."""
    return [ToolSchema(name, int(tables), int(rows), int(size))
            for name, tables, rows, size in db.query(conn, _LIST, (db.SCHEMA_MARK,))]


def clean(conn, *, dry_run: bool = False) -> list[ToolSchema]:
    """Drop every database :func:`tool_schemas` finds, except those a running queue-bench holds
    (``in_use``) and those other databases depend on (``dependents``). With ``dry_run`` nothing is
    dropped. Each drop runs under the database's named lock, so a run cannot start on it meanwhile.
    Returns them all."""
    found = tool_schemas(conn)
    for schema in found:
        lock = f"qbench:{schema.name}"
        if db.query(conn, "SELECT GET_LOCK(%s, 0)", (lock,))[0][0] != 1:
            schema.in_use = True
            continue
        try:
            schema.dependents = tuple(db.outside_dependents(conn, schema.name))
            if not schema.dependents and not dry_run:
                db.drop_schema(conn, schema.name)
        finally:
            db.query(conn, "SELECT RELEASE_LOCK(%s)", (lock,))
    return found
