"""``qbench clean``: find and drop the schemas this tool created, and only those.

A schema is the tool's when its comment is :data:`bench.engines.postgres.db.SCHEMA_MARK`
(written when the tool creates it: run schemas and the sweeps' saved-state schemas alike).
A schema whose advisory lock is held (a run in progress, see :func:`db.lock_schema`) is
left alone and reported.
"""

from __future__ import annotations

import psycopg

from bench.engines.common import ToolSchema
from bench.engines.postgres import db

__all__ = ["ToolSchema", "clean", "tool_schemas"]


_LIST = """
SELECT n.nspname,
       count(c.oid) FILTER (WHERE c.relkind IN ('r', 'p')),
       coalesce(sum(greatest(c.reltuples, 0)) FILTER (WHERE c.relkind = 'r'), 0)::bigint,
       coalesce(sum(pg_total_relation_size(c.oid)) FILTER (WHERE c.relkind = 'r'), 0)::bigint
FROM pg_namespace n LEFT JOIN pg_class c ON c.relnamespace = n.oid
WHERE obj_description(n.oid, 'pg_namespace') = %s
GROUP BY n.nspname ORDER BY n.nspname"""


def tool_schemas(conn: psycopg.Connection) -> list[ToolSchema]:
    """Every schema of this database that carries the tool's mark, by name."""
    return [ToolSchema(name, int(tables), int(rows), int(size))
            for name, tables, rows, size in conn.execute(_LIST, (db.SCHEMA_MARK,)).fetchall()]


def clean(conn: psycopg.Connection, *, dry_run: bool = False) -> list[ToolSchema]:
    """Drop every schema :func:`tool_schemas` finds, except those a running queue-bench holds.

    Returns them all, ``in_use`` set on those a run holds and ``dependents`` on those that objects
    outside them depend on (both left alone: ``DROP SCHEMA … CASCADE`` would drop those objects). With ``dry_run`` nothing is dropped.
    Each drop runs under the schema's advisory lock, so a run cannot start on it meanwhile.
    A saved-state schema (``<schema>_state``) is in use while ``<schema>``'s lock is held.
    """
    found = tool_schemas(conn)
    for schema in found:
        # A sweep's saved states (<schema>_state) are in use while a run holds <schema>.
        owners = [schema.name]
        if schema.name.endswith("_state") and db.state_schema_for(schema.name[:-len("_state")]) == schema.name:
            owners.append(schema.name[:-len("_state")])
        taken = []
        try:
            for owner in owners:
                if not db.try_lock_schema(conn, owner):
                    schema.in_use = True
                    break
                taken.append(owner)
            if not schema.in_use:
                schema.dependents = tuple(db.outside_dependents(conn, schema.name))
            if not schema.in_use and not schema.dependents and not dry_run:
                db.drop_schema(conn, schema.name)
        finally:
            for owner in taken:
                db.unlock_schema(conn, owner)
    return found
