"""The database a command's runs go to (the given DSN after the loopback check, or an embedded server), the check
that they fit in it, and each run with its report written before a Ctrl-C is honoured."""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import sys
from pathlib import Path

from bench.cli.checks import check_loopback
from bench.config.pooler_parameters import users_console
from bench.engines import require_pooler_binary, require_relay_resolution, embedded_server, pooled
from bench.errors import ConfigError
from bench.usage import option


@contextlib.contextmanager
def finish_first(what: str):
    """Within the block Ctrl-C / SIGTERM print ``what`` and are ignored (the run's files are being written)."""
    handlers = {sig: signal.signal(sig, lambda *_: sys.stderr.write(f"qbench: {what}\n"))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def database(dsn: str | None, allow_remote: bool, connections: int, engine: str = "postgres", cfg=None,
             pooler: bool = False):
    """Context manager yielding (DSN, embedded?): ``dsn`` after the loopback check, else ``engine``'s embedded
    server with ``connections`` (the runs' :meth:`RunConfig.connections_needed`: behind the embedded pooler its pool,
    not a connection per worker) + 20 ``max_connections``, the one ``cfg`` (a RunConfig) picks (``PG_VERSION``).
    ``cfg``'s ``DSN_REPLICA``, ``DSN_DIRECT`` and ``POOLER_ADMIN_DSN`` have the DSN's loopback rule; its ``POOLER`` is refused unless
    ``pooler`` (a command whose runs start it: :func:`bench.engines.pooled`), else its binary is looked for
    first."""
    check_loopback(dsn, allow_remote)
    if cfg is not None and cfg.replica is True and cfg.dsn_replica:
        check_loopback(cfg.dsn_replica, allow_remote, "DSN_REPLICA")
    if cfg is not None and cfg.direct_dsn():
        check_loopback(cfg.direct_dsn(), allow_remote, "DSN_DIRECT")
    if cfg is not None and users_console(cfg):
        check_loopback(users_console(cfg), allow_remote, "POOLER_ADMIN_DSN")
    if cfg is not None and cfg.pooler != "none" and not pooler:
        raise ConfigError("POOLER", f"the embedded pooler is not built for this command; allowed: leave "
                                    f"{option('pooler')} out here (a run, a sweep and a capacity search start one "
                                    "per run)")
    if cfg is not None:
        require_pooler_binary(engine, cfg)  # refused before any server starts
        require_relay_resolution([cfg])
    if dsn:
        return contextlib.nullcontext(dsn), False
    return embedded_server(engine, connections + 20, cfg), True


def check_room(engine, dsn: str, schema: str, connections: int, purpose: str, cfg=None) -> dict:
    """``engine.check_schema`` on a connection of its own named ``purpose``: the tool's ``schema`` usable and
    ``connections`` free, ``cfg``'s ``DSN_DIRECT`` (where this connection goes behind a pooler) the same server
    and database as ``dsn``, and its ``DSN_REPLICA`` a standby of that server; refused (ConfigError) before
    anything is created."""
    direct = cfg.direct_dsn() if cfg is not None else None
    conn = engine.connect(direct or dsn, purpose)
    try:
        if direct:
            engine.check_direct(conn, dsn)
        if cfg is not None and cfg.replica is True and cfg.dsn_replica:
            engine.check_given_standby(conn, cfg)
        return engine.check_schema(conn, schema, connections)
    finally:
        conn.close()


def render_run(run_dir: Path) -> None:
    """Write ``run_dir``'s report, a Ctrl-C meanwhile put off (a sweep's or the catalogue's ``on_run``)."""
    from bench.report.run_page import render_report  # here: matplotlib (~1 s)

    with finish_first("writing the run's report first"):
        render_report(run_dir)


def step_runner(out_dir: Path, dsn: str, state_schema: str, embedded: bool = False):
    """``run_step(cfg)``: one run of ``cfg`` without its log lines into ``out_dir/runs`` (through its own embedded
    pooler with ``POOLER``), its report written; returns its directory (a capacity search's or a plan's steps)."""
    from bench import runner  # here: Locust (~1 s), which a refusal does not pay
    from bench.report.run_page import render_report  # here: matplotlib (~1 s), likewise

    def run_step(cfg):
        step = dataclasses.replace(cfg, results=str(out_dir / "runs"))
        with pooled(step, dsn, log=lambda line: None) as (run_cfg, run_dsn, pooler, relay):  # its own pooler, relay
            run_dir = runner.run(run_cfg, run_dsn, log=lambda line: None, embedded=embedded, state_schema=state_schema,
                                 pooler=pooler, relay=relay)
        render_report(run_dir)
        return run_dir
    return run_step

