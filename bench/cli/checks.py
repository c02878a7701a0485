"""Checks before any command touches anything (DSN, loopback, results directory, port); each raises ConfigError."""

from __future__ import annotations

import os
import re
import socket
import sys
import tempfile
import urllib.parse
from pathlib import Path

from bench.config.parsers import parse_int
from bench.config.run_config import engine_of_dsn
from bench.engines import non_loopback_host as engine_non_loopback_host
from bench.errors import EXIT_BAD_INPUT, ConfigError
from bench.usage import named, switch


def bad_input(message: str) -> int:
    """Print ``qbench: message`` on stderr; returns 2."""
    sys.stderr.write(f"qbench: {message}\n")
    return EXIT_BAD_INPUT


def non_loopback_host(dsn: str) -> str | None:
    """The non-loopback host ``dsn`` names, or None (never connects). Raises ConfigError (``DSN``) if unparseable."""
    return engine_non_loopback_host(engine_of_dsn(dsn), dsn)



def chosen_dsn(given: str | None) -> str | None:
    """``--dsn``, else ``$DATABASE_URL``, else None (embedded). ConfigError (``DSN``) for ``--dsn ''``."""
    if given is not None:
        if not given.strip():
            raise ConfigError("DSN", named("empty; allowed: a PostgreSQL or MariaDB URL, or a libpq key=value DSN "
                                           "(leave {dsn} out for the embedded throwaway server)"))
        return given
    from_env = os.environ.get("DATABASE_URL") or None
    if from_env:  # a benchmark loads that database: say which, every time
        sys.stderr.write(f"qbench: database {without_password(from_env)} from $DATABASE_URL "
                         "(--dsn chooses another; unset DATABASE_URL for the embedded throwaway server)\n")
    return from_env


def without_password(dsn: str) -> str:
    """``dsn`` as it may be printed: a URL's password, or a key=value DSN's ``password=…``, left out."""
    if "://" in dsn:
        url = urllib.parse.urlsplit(dsn)
        if url.password is not None:
            netloc = url.netloc.replace(f":{url.password}@", "@", 1)
            return urllib.parse.urlunsplit(url._replace(netloc=netloc))
        return dsn
    return re.sub(r"password\s*=\s*('[^']*'|\S+)", "password=…", dsn)


def check_loopback(dsn: str | None, allow_remote: bool, param: str = "DSN") -> None:
    """Raise ConfigError (``param``: ``DSN``, ``DSN_REPLICA``) for a non-loopback ``dsn`` unless
    ``allow_remote``; never connects."""
    try:
        remote = non_loopback_host(dsn) if dsn else None
    except ConfigError as err:  # unparseable: named as the parameter it came from
        raise ConfigError(param, err.problem) from None
    if remote is not None and not allow_remote:
        raise ConfigError(param, f"host {remote!r} is not a loopback address; this tool writes heavy load: "
                                 f"pass {switch('allow_remote')} to confirm")


def check_results_dir(path: str) -> None:
    """Raise ConfigError (``RESULTS``) unless ``path``'s nearest existing ancestor is a writable directory."""
    if not str(path).strip():
        raise ConfigError("RESULTS", "is empty; allowed: a writable directory path")
    target = Path(path).expanduser().absolute()
    probe = target
    while not probe.exists():
        probe = probe.parent
    try:  # os.access says yes to root everywhere; a real mkdir tells (/proc, read-only mounts)
        if not probe.is_dir():
            raise OSError(f"{probe} is not a directory")
        os.rmdir(tempfile.mkdtemp(prefix=".qbench-probe-", dir=probe))
    except OSError as err:
        raise ConfigError("RESULTS", f"cannot create run directories under {path!r} ({err}); "
                                     "allowed: a writable directory path") from None


def parse_port(value: str, name: str) -> int:
    """A TCP port (1 to 65535) from the command line, or ConfigError naming ``name``."""
    return parse_int(name, value, minimum=1, maximum=65535)


def check_can_listen(host: str, port: int, name: str) -> None:
    """Raise ConfigError naming ``name`` when this process cannot listen on ``host:port``. The probe binds as
    Locust's master will (ZeroMQ sets ``SO_REUSEADDR`` on its listening socket): a port whose last run's
    connections are still in ``TIME_WAIT`` is free, one another process listens on is not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            raise ConfigError(name, f"cannot listen on {host}:{port} ({err.strerror}); "
                                    "allowed: a free port on an interface of this host") from None
