"""``qbench master`` and ``qbench worker``: a run whose load generator processes run on other hosts
(Locust's distributed mode, :mod:`bench.load.distributed`)."""

from __future__ import annotations

import argparse
import logging
import sys

from bench.cli.checks import check_can_listen, check_loopback, chosen_dsn, parse_port
from bench.config.parsers import parse_int, parse_number
from bench.errors import ConfigError

__all__ = ["master_command", "worker_command"]


def master_command(args: argparse.Namespace, run) -> int:
    """``qbench master --expect-workers K``: ``run`` with K ``qbench worker`` processes started elsewhere. Raises
    ConfigError for a bad count, ``--processes`` beside it, or a port this host cannot listen on."""
    expect = parse_int("EXPECT_WORKERS", args.expect_workers, minimum=1, maximum=64)
    if args.processes not in (None, ""):
        raise ConfigError("PROCESSES", "is set by --expect-workers under qbench master; allowed: leave it out")
    args.processes = str(expect)
    port = parse_port(args.master_port, "MASTER_PORT")
    check_can_listen(args.master_bind_host, port, "MASTER_PORT")  # before anything is prepared
    if getattr(args, "ui", False):
        from bench.load.web_ui import DEFAULT_PORT  # here, with --ui only: it imports Locust (~1 s)

        if parse_port(args.web_port or str(DEFAULT_PORT), "WEB_PORT") == port:
            raise ConfigError("WEB_PORT", f"{port} is the master's port (--master-port); allowed: another free port")
    wait_s = parse_number("WORKER_WAIT_S", args.worker_wait_s, minimum=1, maximum=86_400)
    return run(args, external_workers=(args.master_bind_host, port, wait_s))


def worker_command(args: argparse.Namespace) -> int:
    """``qbench worker --master-host H``: one load generator process of a run whose master is on H."""
    from bench.load.worker_process import exit_now, serve  # here: Locust (~1 s), which a refusal does not pay

    port = parse_port(args.master_port, "MASTER_PORT")
    dsn = chosen_dsn(args.dsn)
    if not dsn:
        raise ConfigError("DSN", "required for qbench worker: the database as this host reaches it; "
                                 "allowed: --dsn or DATABASE_URL")
    check_loopback(dsn, args.allow_remote)

    logging.getLogger("locust").setLevel(logging.ERROR)
    exit_now(serve(args.master_host, port, dsn, log=lambda m: sys.stderr.write(m + "\n"), announce=True))
    return 0  # not reached
