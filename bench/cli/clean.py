"""``qbench clean``: the command around each engine's ``clean`` (:meth:`bench.engines.base.Engine.clean`)."""

from __future__ import annotations

import argparse

from bench.cli.checks import check_loopback, chosen_dsn
from bench.config.run_config import choose_engine
from bench.engines import get_engine
from bench.errors import ConfigError


def clean_command(args: argparse.Namespace) -> int:
    """``qbench clean``: drop the tool's schemas (MariaDB: databases) in ``--dsn``/``$DATABASE_URL`` and print
    each (tables, estimated rows, MiB); returns 0. Raises ConfigError (``DSN``) without a DSN."""
    dsn = chosen_dsn(args.dsn)
    if not dsn:
        raise ConfigError("DSN", "required for clean (the embedded server is thrown away after each run); "
                                 "allowed: a PostgreSQL or MariaDB DSN, or DATABASE_URL")
    check_loopback(dsn, args.allow_remote)
    engine = get_engine(choose_engine(None, dsn))
    found = engine.clean(dsn, dry_run=args.dry_run)
    verb = "would drop" if args.dry_run else "dropped"
    for schema in found:
        what = (f"{schema.tables} table{'' if schema.tables == 1 else 's'}, about {schema.rows_estimate:,} rows, "
                f"{schema.size_bytes / 2**20:,.1f} MiB")
        if schema.in_use:
            print(f"left (a run is using it) schema {schema.name}: {what}")
        elif schema.dependents:
            print(f"left (objects outside it depend on it: {'; '.join(schema.dependents)}) "
                  f"schema {schema.name}: {what}")
        else:
            print(f"{verb} schema {schema.name}: {what}")
    dropped = [s for s in found if not s.in_use and not s.dependents]
    print(f"{verb} {len(dropped)} schema{'' if len(dropped) == 1 else 's'}, "
          f"{sum(s.size_bytes for s in dropped) / 2**20:,.1f} MiB"
          + (f"; {len(found) - len(dropped)} left alone" if len(dropped) < len(found) else "")
          if found else "no queue-bench schema in this database")
    return 0
