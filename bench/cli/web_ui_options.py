"""The ``--ui`` options of ``qbench run`` and ``qbench master`` (:mod:`bench.load.web_ui`)."""

from __future__ import annotations

import argparse

from bench.cli.checks import check_can_listen, parse_port
from bench.config.parsers import parse_int
from bench.errors import ConfigError

__all__ = ["add_web_ui_options", "web_ui_options"]


def add_web_ui_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--ui``, ``--web-host``, ``--web-port`` and ``--max-workers`` to ``parser``."""
    group = parser.add_argument_group("web UI: Locust's web UI over the run (make bench-ui)")
    group.add_argument("--ui", action="store_true", help="Locust's web UI over the run: change the workers "
                                                         "while it goes on; Stop ends it (default: no)")
    group.add_argument("--web-host", help="the web UI's interface (default: 127.0.0.1)")
    group.add_argument("--web-port", help="the web UI's port (default: 8089, Locust's)")
    group.add_argument("--max-workers", help="the most workers the web UI may set (default: 4 x WORKERS, at least "
                                             "WORKERS + 10, at most 1000)")


def web_ui_options(args: argparse.Namespace, cfg) -> tuple[str, int, int] | None:
    """(host, port, max workers) for ``--ui``, None without it. Raises ConfigError for a bad port or
    ``--max-workers``, or a port this host cannot listen on."""
    if not args.ui:
        for option in ("web_host", "web_port", "max_workers"):
            if getattr(args, option) is not None:
                raise ConfigError(option.upper(), "has no effect without --ui; allowed: add --ui (make bench-ui), "
                                                  f"or leave --{option.replace('_', '-')} out")
        return None
    from bench.load.web_ui import DEFAULT_PORT, UI_MAX_WORKERS, max_workers_default  # here, with --ui only: Locust (~1 s)

    host = args.web_host or "127.0.0.1"
    port = parse_port(args.web_port or str(DEFAULT_PORT), "WEB_PORT")
    check_can_listen(host, port, "WEB_PORT")
    if args.max_workers in (None, ""):
        return host, port, max_workers_default(cfg.workers)
    return host, port, parse_int("MAX_WORKERS", args.max_workers, minimum=cfg.workers, maximum=UI_MAX_WORKERS)
